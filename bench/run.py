"""Run every benchmark in bench/ in one go (each writes or prints its section of docs/performance.md).

    python bench/run.py [--only demo,reward]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated names, e.g. demo,compare")
    args = ap.parse_args()
    wanted = {n.strip() for n in args.only.split(",") if n.strip()}
    rc = 0
    for script in sorted(HERE.glob("bench_*.py")):
        name = script.stem.removeprefix("bench_")
        if wanted and name not in wanted:
            continue
        print(f"== {name}", flush=True)
        rc |= subprocess.call([sys.executable, str(script)])
    return rc


if __name__ == "__main__":
    sys.exit(main())
