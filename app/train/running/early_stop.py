"""The held-out curve's best point, and early stopping on it (training.early_stop).

``BestPoint`` is a Trainer callback on every rank. Rank 0's held-out evaluation (heldout_eval.py) hands it each
point's score (``point``): it keeps the best step and score, counts the points since the score last rose by more
than ``min_delta`` over the best, and once that count reaches ``patience`` the run stops at the end of that step
(every rank at once: the decision is shared, as Stop's is, so no rank waits for the others in a collective). Its
state goes into every checkpoint (transformers' ``ExportableState``: trainer_state.json's stateful_callbacks) and
is read back on ``--resume`` and after the out-of-memory ladder, so a resumed run keeps its best point and its
patience count as they were at the steps it continues from (status.json may be ahead of that checkpoint).

``run_adapter`` is the end of a run's decision of which adapter is the run's: with early stopping the best point's
(the last one kept beside it in RUN/adapter-last/), recorded in status.json with its reason; the proof, the card
and export read RUN/adapter and that record, and never choose again.

Follows transformers' EarlyStoppingCallback (a patience counter reset by a rise above a threshold) and Unsloth
Studio's early stopping (the best evaluation's weights are the run's), on our own held-out points: the trainer's
evaluation loop is not used, as the points are generations scored with the run's reward.

Owns: the best point, the patience count, the stop decision and the run's adapter choice. Must not evaluate (the
held-out evaluation does) nor save checkpoints (the trainer does).
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_callback import ExportableState

from app.run import layout
from app.train.methods.checkpoints import publish, save_adapter
from app.train.running.callbacks import any_rank

log = logging.getLogger("qlora_app")


class BestPoint(TrainerCallback, ExportableState):
    """The best held-out point and the early-stopping count (``patience`` 0: never stops)."""

    def __init__(self, patience: int = 0, min_delta: float = 0.0, record=None, restored: dict | None = None):
        """``record(status, **fields)``: the session's record (status.json); ``restored``: a run whose checkpoint
        has no state of this callback (made before it existed): its best point as status.json kept it."""
        self.patience, self.min_delta = patience, min_delta
        self.record = record or (lambda status, **fields: None)
        restored = restored or {}
        self.best_step: int | None = restored.get(layout.BEST_STEP)
        self.best_score: float | None = restored.get(layout.BEST_SCORE)
        self.waited = 0  # points since the score last rose by more than min_delta over the best
        self.stopped_at: int | None = None

    # ------------------------------------------------------------------------------------------- the decision
    def point(self, step: int, score: float) -> bool:
        """A held-out point's score; True when it is the new best (its adapter is then kept)."""
        best = self.best_score
        rose = best is None or score > best + self.min_delta
        self.waited = 0 if rose else self.waited + 1
        new_best = best is None or score > best
        if new_best:
            self.best_step, self.best_score = step, score
            self.record(None, **{layout.BEST_STEP: step, layout.BEST_SCORE: score})
        if self.patience and self.waited >= self.patience and self.stopped_at is None:
            self.stopped_at = step
            log.info("early stop at step %d: %d held-out points without a rise of more than %g over the best "
                     "(%.4g at step %d)", step, self.waited, self.min_delta, self.best_score, self.best_step)
        if self.patience:
            self.record(None, **{layout.EARLY_STOP: self.summary()})
        return new_best

    def summary(self) -> dict:
        """status.json's early_stop record."""
        return {"stopped_at": self.stopped_at, "best_step": self.best_step, "best_score": self.best_score,
                "patience": self.patience, "min_delta": self.min_delta, "waited": self.waited}

    # ------------------------------------------------------------------------------------------- the trainer
    def state(self) -> dict:
        return {"args": {"patience": self.patience, "min_delta": self.min_delta},
                "attributes": {"best_step": self.best_step, "best_score": self.best_score, "waited": self.waited,
                               "stopped_at": self.stopped_at}}

    def on_train_begin(self, args, state, control, **kw):
        """A resumed run (or the ladder's next attempt) continues from its checkpoint's count; a checkpoint made
        without this callback gets its entry, which the trainer's save expects."""
        saved = state.stateful_callbacks.get(type(self).__name__)
        if isinstance(saved, list):
            saved = saved[-1] if saved else None
        if saved and state.global_step:
            for key, value in (saved.get("attributes") or {}).items():
                setattr(self, key, value)
            if self.stopped_at is not None and self.waited < self.patience:
                self.stopped_at = None  # resumed with more patience (--set training.early_stop.patience=N)
        state.stateful_callbacks[type(self).__name__] = self.state()

    def on_step_end(self, args, state, control, **kw):
        if not self.patience:
            return
        if any_rank(self.stopped_at is not None and self.stopped_at <= state.global_step):
            control.should_training_stop = True


def run_adapter(model, tok, run_dir: Path, best: BestPoint | None, step: int, early_stop) -> tuple[Path, dict]:
    """(RUN/adapter, status.json's fields): the adapter a finished run ends with, and which step it is from.

    With training.early_stop on, the best held-out point's adapter (kept in RUN/adapter-best/ as the run trained)
    becomes the run's, and the last step's is kept in RUN/adapter-last/; else, or when the last point is the best,
    the last step's is the run's."""
    run_dir = Path(run_dir)
    best_dir = run_dir / layout.BEST_ADAPTER
    chosen = (early_stop.on and best is not None and best.best_step is not None and best.best_step != step
              and (best_dir / layout.ADAPTER_CONFIG).is_file())
    fields: dict = {}
    if best is not None and early_stop.on:
        fields[layout.EARLY_STOP] = best.summary()
    if not chosen:
        fields.update({layout.ADAPTER_STEP: step, layout.ADAPTER_CHOICE: "the last step's"})
        return save_adapter(model, tok, run_dir), fields
    save_adapter(model, tok, run_dir, layout.LAST_ADAPTER)
    final = run_dir / layout.ADAPTER
    tmp = final.with_name(f".tmp-{layout.ADAPTER}")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(best_dir, tmp)
    publish(tmp, final)
    fields.update({layout.ADAPTER_STEP: best.best_step,
                   layout.ADAPTER_CHOICE: f"the best held-out point's (early stopping; step {step}'s is in "
                                          f"{layout.LAST_ADAPTER}/)"})
    return final, fields

