"""Naming and making a new run folder: a default name from the method and dataset, a fresh folder that never lands
on another run's, and a --run-dir the caller chose checked (empty, or the UI's pre-made one). Only the run's record
(app/run/record.py) calls ``create_run_dir``."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from app.errors import UserError
from app.run.lookup import is_run_dir


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9]+", "-", Path(text).name).strip("-")  # last part of a path or hub id
    return s.lower()[:32] or "data"


def default_run_name(method: str, dataset: str | list[str] | None) -> str:
    """'20261126-101500-grpo-arith'; a mix (a list): '...-grpo-mix-arith-gsm8k-train'."""
    if isinstance(dataset, (list, tuple)) and len(dataset) > 1:
        return f"{datetime.now():%Y%m%d-%H%M%S}-{method}-mix-" + "-".join(_slug(d)[:16] for d in dataset)[:40]
    if isinstance(dataset, (list, tuple)):
        dataset = dataset[0] if dataset else None
    return f"{datetime.now():%Y%m%d-%H%M%S}-{method}-{_slug(dataset or 'data')}"


def new_run_dir(output_dir: str | Path, run_name: str) -> Path:
    """Create a fresh run directory. An existing one is never reused: a suffix is added instead, so a new run
    can never overwrite a finished one."""
    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        candidate = root / (run_name if n == 1 else f"{run_name}-{n}")
        try:
            candidate.mkdir()  # atomic: two runs started in the same second (the UI and a CLI) never share one
            return candidate
        except FileExistsError:
            n += 1


def check_new_run_dir(path: str | Path) -> Path:
    """``--run-dir`` of a new run: a folder that does not exist yet, or an empty one. A file, a run, or a folder
    holding other files is refused in one line: a new run never writes into what is already there."""
    d = Path(path)
    if d.exists() and not d.is_dir():
        raise UserError(f"--run-dir '{d}' is a file, not a folder; pass a new folder for the run")
    if d.is_dir() and any(d.iterdir()):
        if is_run_dir(d):
            raise UserError(f"'{d}' already holds a run; pick a new --run-dir (runs are never overwritten), or "
                            f"continue it with qlora-app train --resume {d}")
        raise UserError(f"--run-dir '{d}' is a folder with other files in it; pass a new or empty folder for the run")
    blocked = next((p for p in d.parents if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise UserError(f"--run-dir '{d}' cannot be made: '{blocked}' is a file; pass a folder path")
    return d


def unused_run_dir(output_dir: str | Path, run_name: str) -> Path:
    """A path for a new run under ``output_dir`` that nothing uses yet (not created: the run's session creates
    it, e.g. in the UI's subprocess): ``run_name``, or it with a -2, -3 ... suffix."""
    root, n = Path(output_dir), 1
    while True:
        candidate = root / (run_name if n == 1 else f"{run_name}-{n}")
        if not candidate.exists():
            return candidate
        n += 1


def create_run_dir(output_dir: str | Path, run_name: str | None, method: str, dataset: str | list[str] | None,
                   run_dir: str | Path | None = None) -> Path:
    """The run directory of a new run: ``run_dir`` when the caller names one (new or empty:
    ``check_new_run_dir``), else a fresh <output_dir>/<run_name or date-method-dataset>. Only the run's session
    (app/train/running/session.py) calls this."""
    if run_dir is not None:
        d = check_new_run_dir(run_dir)
        try:
            d.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create the run directory '{d}' ({e.strerror or e}); pass a writable "
                            "--run-dir") from None
        return d
    try:
        return new_run_dir(output_dir, run_name or default_run_name(method, dataset))
    except OSError as e:
        raise UserError(f"cannot create a run directory in '{output_dir}' ({e.strerror or e}); pass a writable "
                        "--output-dir") from None
