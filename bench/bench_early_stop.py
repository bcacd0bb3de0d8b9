"""Early stopping as a decision measured on healthy runs: how often it would stop a run that is still learning, and
what that costs.

    python bench/bench_early_stop.py --runs DIR [--patience 2,3,4] [--section "early stopping"]

DIR holds runs kept by `bench/bench_diagnosis.py --out DIR` (the demos on seeds they were never tuned on, each
with its held-out points in metrics.jsonl). A run's evaluations change nothing in its training (tested), so early
stopping's decisions are exactly the run's own ``BestPoint`` (app/train/running/early_stop.py) replayed over those
points: where it would have stopped, which point's adapter would have been the run's, and the held-out accuracy
that adapter scored against the run's last point and its best. Runs built to fail are left out (their points are
off). Rewrites the section of docs/performance.md. CPU, offline, seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path
from statistics import fmean

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from perfdoc import write_section  # noqa: E402 - bench/ is the script folder

ACCURACY = "eval/accuracy"


def points(run: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [(r["step"], r[ACCURACY]) for r in rows if r.get(ACCURACY) is not None]


def replay(curve: list[tuple[int, float]], patience: int, min_delta: float = 0.0) -> dict:
    """What early stopping with ``patience`` decides on a run's held-out points."""
    from app.train.running.early_stop import BestPoint

    best = BestPoint(patience, min_delta)
    for step, score in curve:
        best.point(step, score)
        if best.stopped_at is not None:
            break
    by_step = dict(curve)
    last_step, last = curve[-1]
    return {"stopped_at": best.stopped_at, "early": best.stopped_at is not None and best.stopped_at < last_step,
            "kept_step": best.best_step, "kept": by_step[best.best_step], "last": last,
            "run_best": max(score for _, score in curve), "points": len(curve), "last_step": last_step}


def measure(runs: list[Path], patience: int) -> dict:
    out = {name: replay(points(run), patience) for name, run in ((r.name, r) for r in runs)}
    early = [v for v in out.values() if v["early"]]
    return {"runs": out, "stopped_early": len(early), "of": len(out),
            "kept_minus_last": fmean(v["kept"] - v["last"] for v in out.values()),
            "kept_minus_last_stopped": fmean(v["kept"] - v["last"] for v in early) if early else None,
            "steps_saved": fmean(1 - v["stopped_at"] / v["last_step"] for v in early) if early else 0.0}


def markdown(results: dict[int, dict], source: str) -> str:
    first = next(iter(results.values()))
    lines = [f"Measured {date.today():%Y-%m-%d} by `python bench/bench_early_stop.py` on the {first['of']} healthy "
             f"runs kept by bench_diagnosis ({source}): each run's held-out points (auto: about 10 per run, 32 rows "
             "each, greedy) replayed through the run's own `BestPoint`, exactly the decisions early stopping would have "
             "taken (the evaluations change nothing in training). min_delta 0.", "",
             "| patience (points) | runs stopped before their last step | held-out accuracy of the kept adapter - "
             "the last point's (mean over all runs; over the stopped) | steps saved by the stopped |",
             "|---:|---:|---:|---:|"]
    for patience, r in results.items():
        stopped = "-" if r["kept_minus_last_stopped"] is None else f"{100 * r['kept_minus_last_stopped']:+.1f} pts"
        lines.append(f"| {patience} | {r['stopped_early']} of {r['of']} | {100 * r['kept_minus_last']:+.1f} pts; "
                     f"{stopped} | {r['steps_saved']:.0%} |")
    safe = next((p for p, r in results.items() if not r["stopped_early"]), None)
    if safe is not None:
        lines += ["", f"The task presets use patience {safe}, the smallest here that stopped none of these learning "
                      "runs early; min_delta 0, because on 32 rows a point's 95% interval is about +-16 points "
                      "(Wilson): a threshold that meant something would have to be that large, and more rows "
                      "(training.eval_rows) are the better way to a steadier curve."]
    lines += ["", "Per run at each patience (stopped at / the kept point's step, its accuracy -> the last "
                  "point's):", ""]
    for patience, r in results.items():
        cells = [f"{name} {v['stopped_at'] if v['early'] else 'ran out'} / {v['kept_step']}, "
                 f"{v['kept']:.0%} -> {v['last']:.0%}" for name, v in r["runs"].items()]
        lines.append(f"- patience {patience}: " + "; ".join(cells))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=Path, required=True, help="bench_diagnosis's --out folder")
    ap.add_argument("--patience", default="2,3,4")
    ap.add_argument("--section", default="early stopping")
    ap.add_argument("--no-doc", action="store_true")
    args = ap.parse_args(argv)
    runs = sorted((d for d in args.runs.iterdir() if (d / "metrics.jsonl").is_file() and not d.name.startswith(
        "built-") and points(d)), key=lambda d: d.name)
    if not runs:
        print(f"no kept runs with held-out points under {args.runs}", file=sys.stderr)
        return 2
    results = {int(p): measure(runs, int(p)) for p in args.patience.split(",")}
    text = markdown(results, ", ".join(sorted({d.name.rsplit("-", 1)[0] for d in runs})))
    print(text)
    if not args.no_doc:
        write_section(args.section, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
