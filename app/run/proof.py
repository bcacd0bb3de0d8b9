"""A run's proof and its other comparisons, on disk.

RUN/compare.json is the run's **proof**: base vs adapter on held-out rows, written when training ends (the session's
evaluate step, app/train/running/session.py); a run extended later writes a new proof and keeps the old one in
RUN/comparisons/. Every other comparison of a run (`qlora-app compare RUN`, the UI's Compare tab,
compare_base_vs_lora.py) is **ad hoc**: RUN/comparisons/compare-<time>.json, a file of its own, never over the proof.
`runs`, the UI and the model card show the proof, with the number of held-out rows behind every figure.

Owns how comparisons are kept in a run folder (the file names are app/run/layout.py's: COMPARE_JSON,
COMPARISONS). Must not compute a comparison (app/eval/compare.py does). Standard library only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from app.run.layout import COMPARE_JSON, COMPARISONS
from app.run.store import stamped, write_atomic


def write_proof(run_dir: Path, data: dict) -> Path:
    """The run's proof (RUN/compare.json); a previous proof moves to RUN/comparisons/proof-<time>.json."""
    path = Path(run_dir) / COMPARE_JSON
    if path.exists():
        os.replace(path, stamped(Path(run_dir) / COMPARISONS, "proof", path.stat().st_mtime))
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False))
    return path


def add_comparison(run_dir: Path, data: dict) -> Path:
    """An ad-hoc comparison of one of the run's adapters: a file of its own in RUN/comparisons/."""
    path = stamped(Path(run_dir) / COMPARISONS, "compare", time.time())
    write_atomic(path, json.dumps(data, indent=2, ensure_ascii=False))
    return path


def latest_proof(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / COMPARE_JSON).read_text())
    except (OSError, ValueError):
        return None


def comparisons(run_dir: Path) -> list[Path]:
    """The run's ad-hoc comparisons, newest first."""
    folder = Path(run_dir) / COMPARISONS
    return sorted(folder.glob("compare-*.json"), key=lambda p: p.stat().st_mtime, reverse=True) if folder.is_dir() \
        else []


def preference_figures(p: dict | None) -> dict | None:
    """A comparison's preference figures by their names today (app.run.layout.PREFERENCE_WORDS): accuracy, margin,
    base_likelier, adapter_likelier, n, beta. Older files named them reward_accuracy (preference accuracy) and
    base_accuracy / adapter_accuracy (chosen more likely)."""
    if not p:
        return None
    old = {"accuracy": "reward_accuracy", "base_likelier": "base_accuracy", "adapter_likelier": "adapter_accuracy"}
    return {**{k: p.get(k, p.get(was)) for k, was in old.items()}, "margin": p.get("margin"), "n": p.get("n"),
            "beta": p.get("beta")}
