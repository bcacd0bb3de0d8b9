"""The run directory: the contract between the engine (writer) and the UI / `runs` / `compare` (readers).

Every file name a reader relies on is defined here and nowhere else.

    <output_dir>/<run_name>/
        config.yaml      resolved AppConfig (re-runnable on its own)
        metrics.jsonl    one JSON object per logging step: step, loss, learning_rate, reward, rewards/<c>/mean, ...
        train.log        everything the trainer printed
        status.json      {"status": running|finished|failed|interrupted, "step", "max_steps", "pid", ...}
        adapter/         final PEFT adapter (adapter_config.json + adapter_model.safetensors)
        checkpoints/     Trainer checkpoints (checkpoint-N/), used by --resume
        curves.png       loss / reward curves, written at the end
"""

from __future__ import annotations

import json
import os
import re
import time
from datetime import datetime
from pathlib import Path

from app.errors import UserError

CONFIG = "config.yaml"
METRICS = "metrics.jsonl"
LOG = "train.log"
STATUS = "status.json"
ADAPTER = "adapter"
CHECKPOINTS = "checkpoints"
CURVES = "curves.png"
COMPARE_JSON = "compare.json"

RUNNING, FINISHED, FAILED, INTERRUPTED = "running", "finished", "failed", "interrupted"
STATUSES = (RUNNING, FINISHED, FAILED, INTERRUPTED)


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", Path(text).name).strip("-")  # last part of a path or hub id
    return s.lower()[:32] or "data"


def default_run_name(method: str, dataset: str | None) -> str:
    return f"{datetime.now():%Y%m%d-%H%M%S}-{method}-{_slug(dataset or 'data')}"


def new_run_dir(output_dir: str | Path, run_name: str) -> Path:
    """Create a fresh run directory. An existing one is never reused: a suffix is added instead, so a new run
    can never overwrite a finished one."""
    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    candidate = root / run_name
    n = 2
    while candidate.exists():
        candidate = root / f"{run_name}-{n}"
        n += 1
    candidate.mkdir()
    return candidate


def write_status(run_dir: Path, status: str, **fields) -> dict:
    """Atomic update (write + rename) so a reader tailing the directory never sees half a file."""
    assert status in STATUSES, status
    data = read_status(run_dir) or {}
    data.update(fields, status=status, updated=time.time())
    tmp = Path(run_dir) / (STATUS + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, Path(run_dir) / STATUS)
    return data


def read_status(run_dir: Path) -> dict | None:
    p = Path(run_dir) / STATUS
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return None


def append_metrics(run_dir: Path, record: dict) -> None:
    with open(Path(run_dir) / METRICS, "a") as f:
        f.write(json.dumps(record) + "\n")


def read_metrics(run_dir: Path) -> list[dict]:
    """Tolerates a half-written last line (the writer may be mid-append while the UI reads)."""
    out = []
    p = Path(run_dir) / METRICS
    if not p.exists():
        return out
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def last_checkpoint(run_dir: Path) -> Path | None:
    ck = Path(run_dir) / CHECKPOINTS
    if not ck.is_dir():
        return None
    cands = [p for p in ck.glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    return max(cands, key=lambda p: int(p.name.split("-")[-1]), default=None)


def is_run_dir(path: Path) -> bool:
    return (Path(path) / CONFIG).is_file()


def require_run_dir(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise UserError(f"run directory '{p}' not found; see 'qlora-app runs list' for existing runs")
    if not is_run_dir(p):
        raise UserError(f"'{p}' is not a qlora-app run directory (no {CONFIG}); pass a folder under your runs dir")
    return p


def list_runs(output_dir: str | Path) -> list[Path]:
    root = Path(output_dir)
    if not root.is_dir():
        return []
    runs = [p for p in root.iterdir() if p.is_dir() and is_run_dir(p)]
    return sorted(runs, key=lambda p: p.stat().st_mtime, reverse=True)


def find_adapter(path: str | Path) -> Path:
    """Accept a run directory or an adapter directory; return the adapter directory."""
    p = Path(path)
    if (p / ADAPTER / "adapter_config.json").is_file():
        return p / ADAPTER
    if (p / "adapter_config.json").is_file():
        return p
    if not p.exists():
        raise UserError(f"adapter '{p}' not found; pass a run directory or a PEFT adapter directory")
    raise UserError(
        f"'{p}' holds no PEFT adapter (adapter_config.json); pass a finished run directory or its adapter/ folder"
    )
