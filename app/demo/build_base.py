"""Build the demo's tiny base model from nothing: ``python -m app.demo.build_base --out DIR``.

The offline demo needs a base model that (1) exists without a model hub, (2) trains in minutes on 2 CPU cores in
4-bit, and (3) behaves like a real base model on a new task: it speaks the problem language and knows the
arithmetic, but answers the word problems badly and never in the requested 'Final answer: N' format. Then the
demo's GRPO run has something real to fix, and base-vs-adapter shows the lift.

So the pretraining text is: correct arithmetic facts ("7 + 5 = 12.") plus chat transcripts of arith-style problems
whose answers are usually wrong in a systematic way (the wrong operation, or one of the operands repeated), always
ending "So the answer is N." A model trained on that knows how to add and subtract but picks the wrong operation
most of the time, so greedy accuracy is low while sampling still finds correct answers sometimes (GRPO's signal).

The problems come from ``app.data.arith`` with a separate seed and never include the test split's questions.
Everything is seeded; the shipped copy in ``app/assets/arith-base`` was produced by this script with defaults.
"""

from __future__ import annotations

import argparse
import random
import re
import time
from pathlib import Path

from app.config.methods.grpo import DEFAULT_SYSTEM_PROMPT
from app.data.arith import MAX_OPERAND, generate_arith, split_rows

PRETRAIN_SEED = 777
_EQ = re.compile(r"(\d+) ([+-]) (\d+) = \d+\.")
SYSTEM_PROMPTS = [
    DEFAULT_SYSTEM_PROMPT,
    "You are a helpful assistant.",
    "Answer the question.",
]
# bos opens every document; eos closes each assistant turn, so generation stops right after an answer. The newline
# is an expression because transformers renders templates with trim_blocks (a literal one after a tag is dropped).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}"
    "{% if m['role'] == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIAL = ["<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>"]
MODEL_SHAPE = dict(hidden_size=128, intermediate_size=256, num_hidden_layers=4, num_attention_heads=4,
                   num_key_value_heads=4, max_position_embeddings=256)


def flawed_solution(row: dict, rng: random.Random, right: float = 0.3) -> str:
    """A base-model style answer: the reference's own wording and correct arithmetic, but usually for the wrong
    operation (``right``: the share with the right one; the two mistakes share the rest 3:2). Sharing the wording
    with the reference solutions means GRPO only has to fix the choice of operation, which a small LoRA can do in
    minutes; a new wording would not fit."""
    m = _EQ.search(row["answer"])
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    lead = row["answer"][: m.start()]  # "Tom has 7 apples and buys 5 more. "
    r = rng.random()
    if r < right:  # right operation: keeps some correct samples in the base's distribution (GRPO's signal)
        use = op
    elif r < right + 0.6 * (1 - right):  # the typical mistake: the other operation
        use = "-" if op == "+" else "+"
    else:  # the other typical mistake: repeat a number from the question
        return f"{lead}So the answer is {rng.choice([a, b])}."
    x, y = (max(a, b), min(a, b)) if use == "-" else (a, b)
    c = x + y if use == "+" else x - y
    return f"{lead}{x} {use} {y} = {c}. So the answer is {c}."


def build_corpus(n_chats: int = 6000, fact_repeats: int = 3, seed: int = PRETRAIN_SEED, right: float = 0.3) -> list:
    """Documents: ('text', str) for arithmetic fact blocks, ('chat', messages) for problem transcripts whose answers
    take the right operation with probability ``right`` (flawed_solution)."""
    rng = random.Random(seed)
    _, test = split_rows()
    facts = [f"{a} + {b} = {a + b}." for a in range(MAX_OPERAND + 1) for b in range(MAX_OPERAND + 1)]
    facts += [f"{a} - {b} = {a - b}." for a in range(MAX_OPERAND + 1) for b in range(a + 1)]
    docs: list = []
    for _ in range(fact_repeats):
        rng.shuffle(facts)
        docs += [("text", "\n".join(facts[i:i + 8])) for i in range(0, len(facts), 8)]
    for row in generate_arith(n_chats, seed, exclude={r["question"] for r in test}):
        msgs = [{"role": "user", "content": row["question"]},
                {"role": "assistant", "content": flawed_solution(row, rng, right)}]
        if rng.random() < 0.6:
            msgs.insert(0, {"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
        docs.append(("chat", msgs))
    rng.shuffle(docs)
    return docs


def build_tokenizer(docs: list, vocab_size: int = 600):
    """Byte-level BPE trained on the corpus: decodes back to the exact text (the reward parses numbers)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    def texts():
        for kind, d in docs:
            yield d if kind == "text" else "\n".join(m["content"] for m in d)
        yield "Final answer: 0 1 2 3 4 5 6 7 8 9"  # the SFT target format must tokenize compactly too

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   additional_special_tokens=SPECIAL[3:])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def encode(tok, docs: list) -> list[list[int]]:
    out = []
    for kind, d in docs:
        if kind == "text":
            out.append([tok.bos_token_id] + tok(d, add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
        else:
            out.append(tok.apply_chat_template(d, tokenize=True, return_dict=False))
    return out


def build(out: Path, steps: int = 1500, batch_size: int = 32, lr: float = 3e-3, n_chats: int = 6000,
          seed: int = PRETRAIN_SEED, log_every: int = 100) -> Path:
    """Train and save model + tokenizer into ``out``. Returns ``out``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    docs = build_corpus(n_chats=n_chats, seed=seed)
    tok = build_tokenizer(docs)
    ids = encode(tok, docs)
    cfg = LlamaConfig(vocab_size=len(tok), tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, **MODEL_SHAPE)
    return pretrain(LlamaForCausalLM, cfg, tok, ids, out, steps=steps, batch_size=batch_size, lr=lr, seed=seed,
                    log_every=log_every)


def pretrain(model_cls, cfg, tok, ids: list[list[int]], out: Path, steps: int, batch_size: int, lr: float, seed: int,
             log_every: int) -> Path:
    """A model of ``model_cls(cfg)`` trained from scratch on the token lists ``ids`` (next-token loss on every
    token), saved with ``tok`` into ``out`` (the tools demo's base shares this loop: app/demo/build_tools_base.py)."""
    import torch
    from transformers import GenerationConfig

    t0 = time.time()
    torch.manual_seed(seed)
    model = model_cls(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warm = max(1, steps // 20)
    # Linear warm-up then cosine decay: from scratch, a tiny model at a high lr needs both to settle.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * 0.5 * (1 + torch.cos(torch.tensor(s / steps * 3.14159)).item()))
    g = torch.Generator().manual_seed(seed)
    model.train()
    for step in range(steps):
        idx = torch.randint(len(ids), (batch_size,), generator=g).tolist()
        width = max(len(ids[i]) for i in idx)
        x = torch.full((batch_size, width), tok.pad_token_id)
        for r, i in enumerate(idx):
            x[r, : len(ids[i])] = torch.tensor(ids[i])
        labels = x.masked_fill(x == tok.pad_token_id, -100)
        loss = model(input_ids=x, attention_mask=(x != tok.pad_token_id).long(), labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if log_every and (step % log_every == 0 or step == steps - 1):
            print(f"step {step:5d}  loss {loss.item():.3f}  {time.time() - t0:6.1f}s", flush=True)
    model.eval()
    model.generation_config = GenerationConfig(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                               pad_token_id=tok.pad_token_id, do_sample=False)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def run_builder(build_fn, description: str, argv: list[str] | None = None) -> None:
    """The command line of a base builder (this one, app/demo/build_tools_base.py): --out, --steps, --batch-size,
    --seed (their defaults are ``build_fn``'s own), then ``build_fn(out, steps=, batch_size=, seed=)`` and the
    time it took."""
    import inspect

    default = {k: v.default for k, v in inspect.signature(build_fn).parameters.items()}
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--out", required=True, type=Path, help="directory to write the model and tokenizer into")
    p.add_argument("--steps", type=int, default=default["steps"])
    p.add_argument("--batch-size", type=int, default=default["batch_size"])
    p.add_argument("--seed", type=int, default=default["seed"])
    a = p.parse_args(argv)
    t = time.time()
    build_fn(a.out, steps=a.steps, batch_size=a.batch_size, seed=a.seed)
    print(f"saved {a.out} in {time.time() - t:.0f}s")


def main(argv: list[str] | None = None) -> None:
    run_builder(build, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    main()
