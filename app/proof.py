"""A run's comparisons on disk: its latest base-vs-adapter comparison, and the ones before it.

Owns how comparisons are kept in a run folder (the file names are rundir's: COMPARE_JSON, COMPARISONS). Must not
compute a comparison (app/eval/compare.py does). Standard library only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from app.rundir import COMPARE_JSON, COMPARISONS, write_atomic


def record_comparison(run_dir: Path, data: dict) -> Path:
    """The run's latest comparison is RUN/compare.json; the one it replaces moves to RUN/comparisons/, stamped."""
    path = Path(run_dir) / COMPARE_JSON
    if path.exists():
        old = Path(run_dir) / COMPARISONS
        old.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(path.stat().st_mtime))
        target = old / f"compare-{stamp}.json"
        n = 1
        while target.exists():
            n += 1
            target = old / f"compare-{stamp}-{n}.json"
        os.replace(path, target)
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False))
    return path


def latest_comparison(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / COMPARE_JSON).read_text())
    except (OSError, ValueError):
        return None
