"""compare: batched, left-padded generation vs one prompt at a time.

    python bench/bench_compare.py [--prompts 32] [--max-new-tokens 32] [--batch-size 16] [--repeats 2]

Same model, same prompts, same process: a random Qwen3-architecture model (hidden 128, 4 layers, a locally trained
tokenizer with a chat template) loaded in 4-bit NF4 through app.model.load.load_base_model, wrapped with a LoRA adapter
by PEFT exactly as `qlora-app compare` does, then app.eval.compare.generate with batch_size=N and with batch_size=1.
Both sides of a comparison run this code path, so the ratio applies to the whole command's generation time.
Prints one Markdown table row per setting for docs/performance.md (## compare). Offline; CPU is fine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
    os.environ[k] = "1"

QUESTIONS = [
    "Tom has {a} apples and buys {b} more. How many apples does he have?",
    "Write a short poem about the sea and the sky, in {a} lines.",
    "There are {a} pens in a box and {b} on the table. How many pens are there in all?",
    "The quick brown fox jumps over the lazy dog {a} times. Solve the problem step by step, briefly.",
]


def build(root: Path) -> tuple[Path, Path]:
    """(model dir, adapter dir): a tiny-but-not-trivial random model and a LoRA adapter with non-zero weights."""
    import tiny
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    tok = tiny.build_tokenizer(root / "tok")
    torch.manual_seed(0)
    cfg = AutoConfig.for_model(
        "qwen3", vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.bos_token_id,
        tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(cfg)
    model.save_pretrained(root / "model")
    tok.save_pretrained(root / "model")
    peft = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                            init_lora_weights=False, task_type="CAUSAL_LM"))
    peft.save_pretrained(root / "adapter")
    return root / "model", root / "adapter"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    import torch

    from app.model.generation import format_prompt, generate
    from app.model.pair import open_pair

    with tempfile.TemporaryDirectory() as tmp:
        model_dir, adapter_dir = build(Path(tmp))
        pair = open_pair(adapter_dir, str(model_dir), local_only=True)  # as `qlora-app compare` opens a run's pair
        model, tok = pair.model, pair.tok
        system = "Solve the problem step by step, briefly. End with a line of the form 'Final answer: <answer>'."
        texts = []
        for i in range(args.prompts):
            q = QUESTIONS[i % len(QUESTIONS)].format(a=i % 17 + 1, b=i % 5 + 2)
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": q}]
            texts.append(format_prompt(tok, {"messages": msgs, "plain": f"{system}\n\n{q}"}))
        # A random model rarely emits EOS, so every prompt generates the full budget on both paths: same work.
        kw = dict(max_new_tokens=args.max_new_tokens, temperature=0.0, seed=0)
        generate(model, tok, texts[:2], batch_size=2, **kw)  # warm-up (kernels, allocator)

        def timed(bs: int) -> tuple[float, list[dict]]:
            times, out = [], []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                out = generate(model, tok, texts, batch_size=bs, **kw)
                times.append(time.perf_counter() - t0)
            return statistics.median(times), out

        seq_t, seq_out = timed(1)
        bat_t, bat_out = timed(args.batch_size)
        tokens = sum(o["tokens"] for o in bat_out)
        same = sum(a["text"] == b["text"] for a, b in zip(seq_out, bat_out))

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU, 4-bit NF4 qwen3 h128 L4 + LoRA r16; "
          f"{args.prompts} prompts x {args.max_new_tokens} new tokens, greedy, median of {args.repeats}")
    print(f"one at a time: {seq_t:.2f} s   batched (batch {args.batch_size}): {bat_t:.2f} s   "
          f"({tokens} tokens generated; {same}/{args.prompts} outputs identical across the two paths)")
    print()
    print("| setting | one at a time (s) | batched (s) | speed-up |")
    print("|---|---|---|---|")
    print(f"| {args.prompts} prompts x {args.max_new_tokens} tokens, batch {args.batch_size} | {seq_t:.2f} | "
          f"{bat_t:.2f} | {seq_t / bat_t:.1f}x |")


if __name__ == "__main__":
    main()
