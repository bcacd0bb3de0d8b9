"""Models of real Qwen2.5 shapes for memory and speed checks, built offline: a 32k-entry byte-level BPE tokenizer
trained on GSM8K (about 25.6k entries come out: GSM8K has no more merges to make) with a ChatML template, and a
Qwen2 config of the shape, with random bf16 weights when asked for. Random weights: speed and memory are real,
accuracy means nothing (sampled completions run to max length).

    python bench/shapes.py OUT SHAPE [--weights]     SHAPE: 0.5b | 1.5b | 7b | tiny (a CPU-sized stand-in)
                                                     or a mixture of experts at a depth: 30b-a3b@4, moe-tiny@2

A mixture-of-experts shape is Qwen3-30B-A3B's layer (128 experts of 768, 8 routed, hidden 2048) or a CPU-sized one,
at the depth asked: the peak of a few layers, measured at two depths, extrapolates linearly to the 48 the model has
(bench/gpu_check.py).

Used by bench/gpu_check.py and tests/train/planning/test_memory_table.py (config and tokenizer only: planning reads no
weights).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GSM8K = ROOT.parent / "shared" / "data" / "gsm8k_train.jsonl"
# (hidden, layers, intermediate, heads, kv heads): Qwen2.5's; tied embeddings except 7B, as Qwen2.5 has them
DIMS = {"0.5b": (896, 24, 4864, 14, 2), "1.5b": (1536, 28, 8960, 12, 2), "7b": (3584, 28, 18944, 28, 4),
        "tiny": (64, 2, 160, 4, 2)}
# Qwen3-MoE layers: (hidden, heads, kv heads, head dim, dense intermediate, expert intermediate, experts, routed);
# 30b-a3b is Qwen3-30B-A3B's (48 layers in the published model), moe-tiny a CPU-sized one
MOE = {"30b-a3b": (2048, 32, 4, 128, 6144, 768, 128, 8), "moe-tiny": (64, 4, 2, 16, 128, 32, 8, 2)}
MOE_LAYERS = {"30b-a3b": 48, "moe-tiny": 2}
SPECIALS = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def tokenizer(out: Path, data: Path = GSM8K):
    """The GSM8K BPE tokenizer, trained once into ``out`` (reused when it is there)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    out = Path(out)
    if (out / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(out)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if Path(data).is_file():
        rows = [json.loads(line) for line in Path(data).read_text().splitlines() if line.strip()]
    else:  # GSM8K is not beside the project (../shared): the built-in arith rows, as gpu_check.py says
        from app.data.arith import generate_arith

        rows = [{"question": r["question"], "answer": r["answer"]} for r in generate_arith(2000, seed=0)]
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator((r["question"] + "\n" + r["answer"] for r in rows), trainers.BpeTrainer(
        vocab_size=32000, special_tokens=SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", pad_token="<|endoftext|>",
                                  eos_token="<|im_end|>", chat_template=CHATML)
    tok.save_pretrained(out)
    return tok


def write_shape(out: Path, shape: str, tokenizer_dir: Path, weights: bool = False) -> Path:
    """A model folder of ``shape``: the tokenizer, config.json, and random bf16 weights when ``weights`` (built on
    the GPU when there is one)."""
    import torch
    from transformers import AutoModelForCausalLM

    tok = tokenizer(tokenizer_dir)
    out = Path(out)
    tok.save_pretrained(out)
    cfg = config(shape, tok)
    if not weights:
        cfg.save_pretrained(out)
        return out
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
    model.save_pretrained(out)
    return out


def config(shape: str, tok):
    """The transformers config of ``shape`` (a Qwen2.5 size, or MOE_NAME@LAYERS) with ``tok``'s vocabulary."""
    from transformers import Qwen2Config, Qwen3MoeConfig

    common = dict(vocab_size=len(tok), max_position_embeddings=4096, pad_token_id=tok.pad_token_id,
                  eos_token_id=tok.eos_token_id, dtype="bfloat16")
    name, _, depth = shape.partition("@")
    if name in MOE:
        h, heads, kv, head_dim, inter, expert, experts, routed = MOE[name]
        return Qwen3MoeConfig(hidden_size=h, num_hidden_layers=int(depth or MOE_LAYERS[name]),
                              num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                              intermediate_size=inter, moe_intermediate_size=expert, num_experts=experts,
                              num_experts_per_tok=routed, tie_word_embeddings=False, **common)
    h, layers, inter, heads, kv = DIMS[shape]
    return Qwen2Config(hidden_size=h, intermediate_size=inter, num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=kv, tie_word_embeddings=shape != "7b", **common)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("shape", help=f"{' | '.join(DIMS)}, or {' | '.join(MOE)} with @LAYERS")
    ap.add_argument("--weights", action="store_true", help="random bf16 weights (else config + tokenizer only)")
    ap.add_argument("--data", type=Path, default=GSM8K, help="GSM8K jsonl the tokenizer is trained on")
    args = ap.parse_args()
    tokenizer(args.out.parent / "tokenizer", args.data)
    print(write_shape(args.out, args.shape, args.out.parent / "tokenizer", args.weights))


if __name__ == "__main__":
    main()
