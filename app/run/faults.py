"""How a run's faults read: a failed write (a full disk; app.errors.write_failure recognises it in whatever type a
library wraps it), a NaN / inf loss.

Owns: the one-line messages for these faults (what happened, what is kept, what to do). Called by the session
(app/train/running/session.py), which records them; writes nothing.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from app.config.schema import AppConfig
from app.run import integrity


def os_error_message(e: OSError, d: Path) -> str:
    """One line for a failed write: what happened, how much room is left, and what a resume would continue from."""
    try:
        free = f"{shutil.disk_usage(d).free / 2**20:.0f} MiB free"
    except OSError:
        free = "free space unknown"
    ckpt = integrity.last_checkpoint(d)
    keep = (f"the newest complete checkpoint is {ckpt.name}" if ckpt else "no complete checkpoint was saved yet")
    what = "the disk is full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else f"a file could not be written ({e})"
    then = f"free space, then: qlora-app train --resume {d}" if ckpt else "free space, then start the run again"
    return f"{what} ({free} on {d}); {keep}; {then}"


def nonfinite_message(bad: dict, cfg: AppConfig, d: Path) -> str:
    """Why a run stopped on a NaN / inf loss or gradient norm, the likely causes, and what is kept."""
    ckpt = integrity.last_checkpoint(d)
    keep = f"the last good checkpoint is {ckpt.name}" if ckpt else "no checkpoint was saved before it"
    fp16 = (" or fp16 overflow (use model.compute_dtype=bf16 on Ampere+ GPUs, or fp32)"
            if cfg.model.compute_dtype == "fp16" else " or fp16 overflow on a GPU without bf16")
    return (f"{bad['key']} became {bad['value']} at step {bad['step']}: training stopped; likely a learning rate too "
            f"high (training.learning_rate={cfg.training.learning_rate:g}: try a third of it){fp16}; {keep}")
