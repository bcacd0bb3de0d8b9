"""Run the benchmarks in bench/ in one go (each writes its section of docs/performance.md).

    python bench/run.py                  every bench_*.py (the demo's five seeds take ~12 minutes on 2 cores)
    python bench/run.py --only demo,trl  the named ones
    python bench/run.py --json           the ratio benches (trl: ours vs plain TRL, packing, generation batch;
                                         ~3 minutes on 2 cores), then one JSON object of their ratios on stdout

Every ratio is measured against its own baseline inside the same run (see each script's docstring).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RATIO_BENCHES = ("trl",)  # the ones that print a JSON object of ratios with --json


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated names, e.g. demo,compare")
    ap.add_argument("--json", action="store_true", help="run the ratio benches and print one JSON object")
    args = ap.parse_args()
    wanted = {n.strip() for n in args.only.split(",") if n.strip()} or (set(RATIO_BENCHES) if args.json else set())
    rc, merged = 0, {}
    for script in sorted(HERE.glob("bench_*.py")):
        name = script.stem.removeprefix("bench_")
        if wanted and name not in wanted:
            continue
        print(f"== {name}", file=sys.stderr if args.json else sys.stdout, flush=True)
        if args.json and name in RATIO_BENCHES:
            p = subprocess.run([sys.executable, str(script), "--json"], stdout=subprocess.PIPE, text=True)
            rc |= p.returncode
            lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
            if lines:
                merged.update(json.loads(lines[-1]))
        else:
            rc |= subprocess.call([sys.executable, str(script)], stdout=sys.stderr if args.json else None)
    if args.json:
        print(json.dumps(merged))
    return rc


if __name__ == "__main__":
    sys.exit(main())
