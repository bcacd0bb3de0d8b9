"""reward: time to score one GRPO-sized batch with the shaped reward, through the TRL interface.

    python bench/bench_reward.py [--batches 1000] [--batch-size 8]

Builds the reward functions exactly as training does (app.rewards.build_reward_funcs) and calls each one on a
batch of completions the way GRPOTrainer._calculate_rewards does (completions + the `reference` column), so the
time is what the reward adds to one GRPO step. Completions are ~200 tokens (~800 characters) of step-by-step
arithmetic with a mix of endings (formatted / bare number / wrong / boxed LaTeX / boilerplate / repetition), so
every code path runs, including math-verify for LaTeX answers. Prints Markdown rows for docs/performance.md
(## reward). Offline; CPU only; no model.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def make_completion(rng: random.Random, answer: int, kind: str) -> str:
    steps = []
    total = 0
    while sum(len(s) for s in steps) < 700:  # ~200 tokens of reasoning
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        total += a + b
        steps.append(f"Step {len(steps) + 1}: she adds {a} and {b}, which gives {a + b}; the running total is {total}.")
    body = "\n".join(steps)
    k = rng.randint(2, 10**6)
    endings = {
        "formatted": f"\nFinal answer: {answer}",
        "bare": f"\nSo she has {answer} in total.",
        "wrong": f"\nFinal answer: {answer + 1}",
        "latex": f"\nSo the answer is $\\boxed{{\\frac{{{k * answer}}}{{{k}}}}}$.",  # unique: defeats parse caches
        "boilerplate": f"\nAs an AI language model I think it is {answer}. I hope this helps!",
        "repeat": f"\nFinal answer: {answer}" * 12,
    }
    return body + endings[kind]


def make_batches(n: int, size: int, seed: int = 0):
    rng = random.Random(seed)
    kinds = ["formatted", "bare", "wrong", "latex", "boilerplate", "repeat", "formatted", "formatted"]
    batches = []
    for _ in range(n):
        answer = rng.randint(10, 5000)
        ref = f"She has {answer} apples.\n#### {answer:,}"
        comps = [[{"role": "assistant", "content": make_completion(rng, answer, kinds[i % len(kinds)])}]
                 for i in range(size)]
        batches.append((comps, [ref] * size))
    return batches


def time_batches(funcs, batches) -> list[float]:
    per_batch = []
    for comps, refs in batches:
        t0 = time.perf_counter()
        for f in funcs:
            out = f(completions=comps, reference=refs, prompts=[""] * len(comps), trainer_state=None)
            assert len(out) == len(comps)
        per_batch.append((time.perf_counter() - t0) * 1000)
    return per_batch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()

    from app.config.schema import RewardConfig
    from app.rewards import build_reward_funcs
    from app.run.counts import RunCounts

    # Each measurement gets freshly generated batches (its own seed): math-verify memoises parsed LaTeX, and a
    # re-used batch would measure its cache instead of the work a new GRPO step does.
    counts = RunCounts()
    warm = make_batches(20, args.batch_size, seed=10_000)
    batches = make_batches(args.batches, args.batch_size)
    chars = statistics.mean(len(c[0]["content"]) for b in batches for c in b[0])
    print(f"{args.batches} batches x {args.batch_size} completions, mean {chars:.0f} chars each\n")
    print("| reward functions | per batch: median (ms) | p95 (ms) | max (ms) |")
    print("|---|---:|---:|---:|")
    for seed, (label, cfg) in enumerate((("default: length, format, reference, boilerplate", RewardConfig()),
                                         ("default + strict accuracy (math-verify)", RewardConfig(accuracy=True)))):
        funcs, _ = build_reward_funcs(cfg, has_reference=True, counts=counts)
        time_batches(funcs, warm)  # warm-up: sympy import, compiled regexes
        ms = sorted(time_batches(funcs, make_batches(args.batches, args.batch_size, seed=1 + seed)))
        p95 = ms[int(0.95 * (len(ms) - 1))]
        print(f"| {label} | {statistics.median(ms):.2f} | {p95:.2f} | {ms[-1]:.2f} |")
    # Where the time goes: each function alone on the same batches (math-verify runs only for LaTeX answers in
    # `reference`, and on every completion in `accuracy`).
    funcs, _ = build_reward_funcs(RewardConfig(accuracy=True), has_reference=True, counts=counts)
    print("\n| component alone | per batch: median (ms) |")
    print("|---|---:|")
    for i, f in enumerate(funcs):
        fresh = make_batches(args.batches, args.batch_size, seed=100 + i)
        print(f"| {f.__name__} | {statistics.median(time_batches([f], fresh)):.2f} |")
    if counts.reward_errors():
        print(f"\nwarning: {counts.reward_errors()} component errors while benchmarking")


if __name__ == "__main__":
    main()
