"""scale: training throughput on 2 processes (torchrun, DDP over gloo) vs 1, same config, in one run.

    python bench/bench_scale.py [--steps 40]

SFT of the shipped tiny model in 4-bit on the built-in arith-sft rows through `qlora-app train`, once with
--num-processes 1 and once with 2 (the per-process batch stays 8, so 2 processes see twice the examples per step).
Throughput = examples per second of training (from metrics.jsonl's time of the last step), measured after a
warm-up step. Rewrites the `## scale` section of docs/performance.md. CPU, offline.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from perfdoc import write_section  # noqa: E402

BATCH = 8


def run(n: int, steps: int, out: Path) -> dict:
    argv = [sys.executable, "-m", "app.cli", "train", "--method", "sft", "--model", "arith-base", "--dataset",
            "arith-sft", "--max-steps", str(steps), "--output-dir", str(out), "--local-only", "--no-progress",
            "--num-processes", str(n)]
    for s in (f"per_device_train_batch_size={BATCH}", "gradient_accumulation_steps=1", "gradient_checkpointing=false",
              "max_length=128", "save_steps=1000", "logging_steps=1", "model.compute_dtype=fp32"):
        argv += ["--set", s]
    t = time.time()
    subprocess.run(argv, check=True, capture_output=True, text=True, cwd=ROOT,
                   env={**os.environ, "HF_HUB_OFFLINE": "1"})
    wall = time.time() - t
    (d,) = [p for p in out.iterdir() if (p / "metrics.jsonl").is_file()]
    recs = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    train_s = recs[-1]["time"] - recs[0]["time"]  # from the end of step 1 to the end of the last step
    return {"n": n, "examples_per_s": (steps - 1) * BATCH * n / train_s, "train_s": train_s, "wall_s": wall,
            "loss_last": recs[-1].get("loss")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    one = run(1, args.steps, tmp / "one")
    two = run(2, args.steps, tmp / "two")
    ratio = two["examples_per_s"] / one["examples_per_s"]
    md = f"""2 processes vs 1 through `qlora-app train --num-processes N` (torchrun, DDP over gloo) on this machine
({os.cpu_count()} CPU cores, no GPU), measured by `python bench/run.py --only scale` in one run,
{time.strftime('%Y-%m-%d')}: SFT of the shipped tiny model in 4-bit on arith-sft, {args.steps} steps, {BATCH}
examples per process per step.

| processes | examples / s | training s | wall s (with start-up) |
|---:|---:|---:|---:|
| 1 | {one['examples_per_s']:.1f} | {one['train_s']:.1f} | {one['wall_s']:.1f} |
| 2 | {two['examples_per_s']:.1f} | {two['train_s']:.1f} | {two['wall_s']:.1f} |

**2-process / 1-process throughput: {ratio:.2f}x** (at most 2x). On {os.cpu_count()} cores the two processes
share the cores one process already used (torchrun sets OMP_NUM_THREADS=1 per worker, which here splits the work
better than one process's own threads do) and every step adds a gloo all-reduce of the LoRA gradients; start-up
costs one more process. On GPUs each process gets its own device and the ratio approaches the GPU count for
compute-bound steps (not measured here: no GPU in this session).
"""
    write_section("scale", md)
    print(md)


if __name__ == "__main__":
    main()
