"""Finding runs and adapters from what a user typed: a run folder by path or by name under runs/ or demo-runs/, the
runs of a folder, and the adapter of a run (final, best, or the last checkpoint's) or the run an adapter belongs to."""

from __future__ import annotations

import json
from pathlib import Path

from app.errors import UserError
from app.run.integrity import last_checkpoint
from app.run.layout import ADAPTER, ADAPTER_CONFIG, ADAPTER_FOLDERS, CHECKPOINTS, CONFIG, CREATED, RUN_FOLDERS, RUNNING
from app.run.store import read_status


def adapter_config(adapter_dir: Path) -> dict:
    """A PEFT adapter's adapter_config.json (its rank, targets, base, type): the one reader of it. Not JSON, or no
    peft_type: one line saying it is no PEFT adapter."""
    path = Path(adapter_dir) / ADAPTER_CONFIG
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise UserError(f"'{path}' is not valid JSON; pass an adapter saved by PEFT") from None
    if not isinstance(data, dict) or "peft_type" not in data:
        raise UserError(f"'{adapter_dir}' has an {ADAPTER_CONFIG} without peft_type; it is not a PEFT adapter")
    return data


def locate(path: str | Path) -> Path:
    """A run given by its bare name is found under RUN_FOLDERS first; anything else is the path as given."""
    p = Path(path)
    if len(p.parts) == 1 and p.name not in (".", ".."):
        for root in RUN_FOLDERS:
            if (Path(root) / p).is_dir():
                return Path(root) / p
    return p


def is_run_dir(path: Path) -> bool:
    return (Path(path) / CONFIG).is_file()


def require_run_dir(path: str | Path) -> Path:
    p = locate(path)
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
    return sorted(runs, key=created, reverse=True)


def created(run: Path) -> float:
    """When a run was made: status.json's ``created`` (older runs: its first ``started``, else config.yaml's time).
    Newest first, whatever touched a run since (a compare, a resume, an export)."""
    st = read_status(run) or {}
    when = st.get("created") or st.get("started")
    return float(when) if isinstance(when, (int, float)) else (Path(run) / CONFIG).stat().st_mtime


def has_adapter(run_dir: Path) -> bool:
    """Whether the run has saved its final adapter (a run that failed before its end has none)."""
    return (Path(run_dir) / ADAPTER / ADAPTER_CONFIG).is_file()


def adapter_name(adapter_dir: str | Path) -> str:
    """What an adapter is called (the served model's name, an evaluation's): its run's name for RUN/adapter and
    RUN/adapter-best, RUN/adapter-last, else its own folder's."""
    a = Path(adapter_dir)
    return a.parent.name if a.name in ADAPTER_FOLDERS else a.name


def run_of_adapter(adapter_dir: str | Path) -> Path | None:
    """The run an adapter folder belongs to: RUN/adapter, RUN/adapter-best, RUN/adapter-last,
    RUN/checkpoints/checkpoint-N, or a run folder holding the adapter files itself; None for a bare adapter."""
    a = Path(adapter_dir)
    run = a.parent if a.name in ADAPTER_FOLDERS else a.parent.parent if a.parent.name == CHECKPOINTS else a
    return run if is_run_dir(run) else None


def find_adapter(path: str | Path) -> Path:
    """Accept a run (directory or bare name) or an adapter directory; return the adapter directory."""
    p = locate(path)
    if has_adapter(p):
        return p / ADAPTER
    if (p / ADAPTER_CONFIG).is_file():
        return p
    if not p.exists():
        raise UserError(f"adapter '{p}' not found; pass a run directory or a PEFT adapter directory")
    if is_run_dir(p):
        st = read_status(p) or {}
        status = st.get("status", CREATED)
        why = f": {st['error']}" if st.get("error") else ""
        if status in (RUNNING, CREATED):
            todo = "wait for it to finish"
        elif last_checkpoint(p, verify_data=False) is not None:
            todo = f"continue it with qlora-app train --resume {p} (or pass one of its checkpoints/)"
        else:  # nothing to resume: a resume hint would only fail
            todo = "it saved no checkpoint either, so start the run again"
        raise UserError(f"run '{p}' has no adapter yet ({status} at step {st.get('step') or 0}{why}); {todo}")
    raise UserError(
        f"'{p}' holds no PEFT adapter ({ADAPTER_CONFIG}); pass a finished run directory or its adapter/ folder"
    )
