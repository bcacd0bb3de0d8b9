"""On a lent GPU: the memory estimate of a GRPO run with a local judge model (reward.judge.model) against torch's
measured peak, beside the same run without the judge.

    python bench/gpu_judge_memory.py --out DIR [--rows 2000] [plain] [judged]

The gsm8k-grpo recipe (4 prompts x 4 generations, 2 accumulation steps, LoRA r16) for 4 steps at 128 completion
tokens, on a random-weight Qwen2.5-0.5B shape, judged by a random-weight Qwen2.5-1.5B shape in 4-bit (models from
bench/shapes.py; its tokenizer trained on the first --rows rows of GSM8K). Run `plain` and `judged` in separate
processes (the caching allocator keeps what an earlier run in the process reserved). Each writes DIR/<name>.json:
the run's status.json memory check (estimate vs measured peak). Random weights: memory is real; the judge's scores
are not (it puts almost no probability on a score, so every judgement is unreadable and counted, as designed).
tests/train/planning/test_memory_table.py keeps the measured peaks as data and re-plans the same runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
import shapes  # noqa: E402

SETS = ["max_steps=4", "logging_steps=1", "save_steps=1000", "training.eval_every=0", "training.proof_rows=4",
        "max_completion_length=128"]


def rows_file(out: Path, rows: int) -> Path:
    """The first ``rows`` rows of GSM8K: what the tokenizer is trained on (the runs train on all of it)."""
    path = out / f"gsm8k-{rows}.jsonl"
    path.write_text("".join(shapes.GSM8K.read_text().splitlines(keepends=True)[:rows]))
    return path


def models(out: Path, rows: int, weights: bool = True) -> tuple[Path, Path]:
    """(policy 0.5B, judge 1.5B) folders sharing one tokenizer."""
    tok = out / "tokenizer"
    shapes.tokenizer(tok, rows_file(out, rows))
    return (shapes.write_shape(out / "0.5b", "0.5b", tok, weights), shapes.write_shape(out / "1.5b", "1.5b", tok,
                                                                                        weights))


def config(policy: Path, judge: Path | None, out: Path):
    from app.config.build import build_config
    from app.config.presets import load_preset

    preset = {**load_preset("gsm8k-grpo"), "output_dir": str(out), "run_name": f"{'judged' if judge else 'plain'}"}
    preset["model"] = {"name_or_path": str(policy)}
    preset["data"] = {"dataset": str(shapes.GSM8K), "prompt_field": "question", "reference_field": "answer"}
    if judge:
        preset["reward"] = {"judge": {"model": str(judge), "batch_size": 8}}
    return build_config(preset, sets=SETS)


def main() -> None:
    from app.host.process import start_command

    start_command()  # a process entry, like `qlora-app`: the libraries' noise and the allocator (app/host)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("which", nargs="*", default=["plain", "judged"])
    args = ap.parse_args()
    from app.run import store
    from app.train.running.session import Session

    args.out.mkdir(parents=True, exist_ok=True)
    policy, judge = models(args.out / "models", args.rows)
    for name in args.which:
        t = time.time()
        d = Session(config(policy, judge if name == "judged" else None, args.out / "runs"), progress=False).run()
        st = store.read_status(d)
        result = {"seconds": round(time.time() - t, 1), "status": st.get("status"),
                  "memory_check": st.get("memory_check"), "judge_counts": st.get("judge_counts")}
        (args.out / f"{name}.json").write_text(json.dumps(result, indent=1))
        print(name, json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
