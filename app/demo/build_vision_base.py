"""Build the image demo's tiny vision-language base from nothing: ``python -m app.demo.build_vision_base --out DIR``.

A Gemma 3 shaped model (transformers' ``Gemma3ForConditionalGeneration``: a SigLIP vision tower, a projector and a
Gemma 3 language model, ~150K parameters) with a byte-level BPE tokenizer trained here, Gemma 3's image tokens and
chat template, and ``Gemma3Processor`` on PIL (no torchvision). Like the arith bases it behaves like a real base on a
new task: it has learnt to answer "What color is the <shape>?" with one colour word, but from captions whose colour
was drawn at random, so it never learnt to read the colour from the pixels and greedy accuracy is near chance (one
in four). The demo's QLoRA run (``qlora-app demo --images``) has to teach exactly that.

``tiny_vision_model(out)`` is the same model with no pretraining, in a fraction of a second: the tests' fixture.
Everything is seeded; the shipped copy in ``app/assets/shapes-vlm-base`` was produced by this script with defaults.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

from app.data.shapes import COLORS, QUESTION, SHAPE_QUESTION, SHAPES, shapes_rows
from app.demo.build_base import SYSTEM_PROMPTS, run_builder

SPECIAL = ["<unk>", "<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<start_of_image>",
           "<end_of_image>", "<image_soft_token>"]
# Gemma 3's template, trimmed: content is a string or a list of image / text parts; the assistant is 'model'.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}"
    "{{ '\\n' }}{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<start_of_image>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_turn>{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model{{ '\\n' }}{% endif %}")
IMAGE_SIZE, PATCH, TOKENS_PER_IMAGE = 28, 14, 4
TEXT_SHAPE = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, max_position_embeddings=512, sliding_window=64)
VISION_SHAPE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    image_size=IMAGE_SIZE, patch_size=PATCH)
PRETRAIN_SEED = 99


def build_processor():
    """A tokenizer trained on the task's words with Gemma 3's special tokens, and Gemma 3's processor around it."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Gemma3Processor, PreTrainedTokenizerFast

    words = [QUESTION.format(shape=s) + " " + c for s in SHAPES for c in COLORS]
    words += [f"{SHAPE_QUESTION} {s}" for s in SHAPES]
    words += [*SYSTEM_PROMPTS, "user model system"]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(words * 20, trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIAL, show_progress=False,
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", pad_token="<pad>", bos_token="<bos>", eos_token="<end_of_turn>",
        extra_special_tokens={"boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
                              "image_token": "<image_soft_token>"})
    fast.chat_template = CHAT_TEMPLATE
    # the PIL image processor: Gemma 3's default one needs torchvision
    image_cls = getattr(transformers, "Gemma3ImageProcessorPil", transformers.Gemma3ImageProcessor)
    images = image_cls(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, do_pan_and_scan=False)
    return Gemma3Processor(image_processor=images, tokenizer=fast, chat_template=CHAT_TEMPLATE,
                           image_seq_length=TOKENS_PER_IMAGE)


def tiny_vision_model(out: Path, seed: int = 0, text: dict | None = None, vision: dict | None = None) -> Path:
    """The untrained model and its processor saved into ``out``; ``text`` / ``vision``: other shapes of the language
    model and the tower (bench/bench_images.py times a larger one) than the demo's."""
    import torch
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, GenerationConfig

    proc = build_processor()
    tok = proc.tokenizer
    ids = tok.convert_tokens_to_ids
    shape = {**TEXT_SHAPE, **(text or {})}
    # attention scaled by 1/sqrt(head_dim), as Gemma 3 1B / 4B / 12B are and as llama.cpp computes it for Gemma 3
    # (it never reads query_pre_attn_scalar: transformers' default of 256 would make the GGUF answer differently)
    shape.setdefault("query_pre_attn_scalar", shape["head_dim"])
    cfg = Gemma3Config(
        text_config=dict(vocab_size=len(tok), pad_token_id=tok.pad_token_id, **shape),
        vision_config={**VISION_SHAPE, **(vision or {})}, mm_tokens_per_image=TOKENS_PER_IMAGE,
        boi_token_index=ids("<start_of_image>"), eoi_token_index=ids("<end_of_image>"),
        image_token_index=ids("<image_soft_token>"), pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
        bos_token_id=tok.bos_token_id)
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(cfg)
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id, do_sample=False)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    proc.save_pretrained(out)
    return out


def _batch(proc, rows: list[dict], rng: random.Random):
    """Rows as one padded training batch: the conversation with its image (half of them after a system prompt, as
    runs ask: GRPO's default one among them), loss on every text token."""
    def turns(r):
        user = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": r["question"]}]},
                {"role": "assistant", "content": r["answer"]}]
        system = [{"role": "system", "content": rng.choice(SYSTEM_PROMPTS)}] if rng.random() < 0.5 else []
        return system + user

    texts = [proc.apply_chat_template(turns(r), tokenize=False) for r in rows]
    enc = proc(text=texts, images=[[r["image"]] for r in rows], padding=True, return_tensors="pt")
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    labels = labels.masked_fill(enc["input_ids"] == proc.tokenizer.convert_tokens_to_ids("<image_soft_token>"), -100)
    return enc, labels


def build(out: Path, steps: int = 300, batch_size: int = 16, lr: float = 3e-3, seed: int = PRETRAIN_SEED,
          log_every: int = 50, ask_shape: float = 0.5) -> Path:
    """Train the format (random colours) from scratch in full precision and save model + processor into ``out``."""
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    t0 = time.time()
    raw = tiny_vision_model(Path(out), seed=seed)
    proc = AutoProcessor.from_pretrained(raw)
    model = AutoModelForImageTextToText.from_pretrained(raw, dtype=torch.float32)
    rows = shapes_rows(2000, seed, true_colors=False, ask_shape=ask_shape)
    # the tower keeps its random features (they carry the colours); the language model and projector learn to read
    # them for shapes, and to answer colour questions with a colour word that is not the one shown
    for p in model.model.vision_tower.parameters():
        p.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr, weight_decay=0.01)
    rng = random.Random(seed)
    model.train()
    for step in range(steps):
        enc, labels = _batch(proc, rng.sample(rows, batch_size), rng)
        loss = model(**enc, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.time() - t0:6.1f}s", flush=True)
    model.eval()
    model.save_pretrained(out)
    proc.save_pretrained(out)
    return Path(out)


def main(argv: list[str] | None = None) -> None:
    run_builder(build, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
