"""Run the benchmarks in bench/ in one go (each writes its section of docs/performance.md).

    python bench/run.py                  every bench_*.py (the demo's five seeds take ~12 minutes on 2 cores)
    python bench/run.py --only demo,trl  the named ones
    python bench/run.py --json           the ratio benches (trl: ours vs plain TRL, packing, generation batch;
                                         ~9 minutes on 2 cores), then one JSON object of their ratios on stdout
    python bench/run.py --json --strict  the same, and exit 3 when a ratio was too noisy to trust

Every ratio is measured against its own baseline inside the same run, from interleaved repeats: the JSON gives
the median, its "spread" (lowest and highest pair) and, under "untrusted", each ratio whose pairs disagreed --
its value is then null rather than a number that may be wrong (bench/ratio.py).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RATIO_BENCHES = ("trl",)  # the ones that print a JSON object of ratios with --json
NOISY_EXIT = 3  # --strict: a ratio could not be trusted (1 stays "a bench failed")


def main(argv: list[str] | None = None, here: Path = HERE) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated names, e.g. demo,compare")
    ap.add_argument("--json", action="store_true", help="run the ratio benches and print one JSON object")
    ap.add_argument("--strict", action="store_true", help=f"exit {NOISY_EXIT} when a ratio is not trusted")
    args = ap.parse_args(argv)
    wanted = {n.strip() for n in args.only.split(",") if n.strip()} or (set(RATIO_BENCHES) if args.json else set())
    rc, merged = 0, {}
    for script in sorted(here.glob("bench_*.py")):
        name = script.stem.removeprefix("bench_")
        if wanted and name not in wanted:
            continue
        print(f"== {name}", file=sys.stderr if args.json else sys.stdout, flush=True)
        if args.json and name in RATIO_BENCHES:
            p = subprocess.run([sys.executable, str(script), "--json"], stdout=subprocess.PIPE, text=True)
            rc |= p.returncode
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            if lines:
                _merge(merged, json.loads(lines[-1]))
        else:
            rc |= subprocess.call([sys.executable, str(script)], stdout=sys.stderr if args.json else None)
    if args.json:
        print(json.dumps(merged))
    for name, why in (merged.get("untrusted") or {}).items():
        print(f"not trusted: {name}: {why}", file=sys.stderr)
    if args.strict and merged.get("untrusted") and not rc:
        return NOISY_EXIT
    return rc


def _merge(into: dict, part: dict) -> None:
    """Ratios side by side; the per-ratio tables (spread, pairs, untrusted) merged key by key."""
    for k, v in part.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            into[k].update(v)
        else:
            into[k] = v


if __name__ == "__main__":
    sys.exit(main())
