"""Checkpoints that a crash cannot tear: written to a temporary sibling, flushed, renamed into place; rotation only
after a complete save. (What makes a checkpoint complete, for ``--resume``, is
``app.run.integrity.checkpoint_problem``.)

Hugging Face's Trainer writes ``checkpoint-N/`` in place and rotates old checkpoints in the same call, so a crash
or a full disk mid-save leaves a torn newest checkpoint that resume then picks. ``atomic_trainer`` wraps a TRL
trainer class so its ``_save_checkpoint`` writes into ``checkpoints/.partial/checkpoint-N`` first.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from app.run import layout

log = logging.getLogger("qlora_app")

# inside checkpoints/: never matched by the checkpoint-* globs of transformers or app/run/integrity.py
PARTIAL = ".partial"


def fsync_tree(path: Path) -> None:
    """Flush every file and folder under ``path`` to disk, so a rename after it publishes complete data."""
    for root, _, files in os.walk(path):
        for name in files:
            with open(Path(root) / name, "rb") as f:
                os.fsync(f.fileno())
        _fsync_dir(Path(root))


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def publish(tmp: Path, final: Path) -> None:
    """Rename a completely written folder into place (replacing an older one of the same name)."""
    fsync_tree(tmp)
    if final.exists():
        old = final.with_name(f".old-{final.name}")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(final.parent)


def save_adapter(model, tok, run_dir: Path, name: str = layout.ADAPTER) -> Path:
    """The final adapter/ (or adapter-best/), written beside itself and renamed into place."""
    final = Path(run_dir) / name
    tmp = final.with_name(f".tmp-{name}")
    shutil.rmtree(tmp, ignore_errors=True)
    # DPO on an initial adapter trains beside TRL's frozen copy of it ("ref"): the run's adapter is the trained one
    adapters = getattr(model, "peft_config", None) or {}
    only = {"selected_adapters": ["default"]} if len(adapters) > 1 and "default" in adapters else {}
    try:
        model.save_pretrained(tmp, **only)
        tok.save_pretrained(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    publish(tmp, final)
    return final


def atomic_trainer(trainer_cls):
    """A subclass of a transformers/TRL trainer whose checkpoints are published atomically."""

    class AtomicCheckpoints(trainer_cls):
        def _save_checkpoint(self, model, trial):
            from transformers.trainer_utils import (
                PREFIX_CHECKPOINT_DIR,
                rotate_checkpoints,
            )

            run_dir = Path(self._get_output_dir(trial=trial))
            staging = run_dir / PARTIAL
            name = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
            shutil.rmtree(staging / name, ignore_errors=True)
            args = self.args
            out, limit = args.output_dir, args.save_total_limit
            # The parent writes everything into the staging folder and, with no limit, deletes nothing.
            args.output_dir, args.save_total_limit = str(staging), None
            try:
                super()._save_checkpoint(model, trial)
            except BaseException:  # a full disk mid-save: the torn copy would only hold on to the space left
                shutil.rmtree(staging / name, ignore_errors=True)
                raise
            finally:
                args.output_dir, args.save_total_limit = out, limit
            # Every rank writes its own RNG state into the staging folder: publish only when all have.
            self.accelerator.wait_for_everyone()
            if args.should_save:
                publish(staging / name, run_dir / name)
                # TRL also writes a model card (README.md) into output_dir on every save: not part of a checkpoint.
                shutil.rmtree(staging, ignore_errors=True)
                # By step number, as --resume picks the newest (app.run.integrity.last_checkpoint). Hugging Face's
                # default, mtime, prints "mtime may not be reliable" whenever two saves land within a second (fast
                # steps on a small model), which broke the one-line error contract of a run on a full disk.
                rotate_checkpoints(output_dir=str(run_dir), save_total_limit=limit,
                                   best_model_checkpoint=self.state.best_model_checkpoint, use_mtime=False)

    AtomicCheckpoints.__name__ = AtomicCheckpoints.__qualname__ = f"Atomic{trainer_cls.__name__}"
    return AtomicCheckpoints
