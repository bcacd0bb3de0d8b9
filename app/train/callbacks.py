"""Trainer callbacks: the metrics file the UI tails, the terminal progress bar, status.json, and graceful Stop.

Stop (from the UI, or Ctrl-C) arrives as SIGTERM/SIGINT. Killing the process mid-step would lose the work since
the last checkpoint, so the signal only raises a flag; at the end of the current step the callback asks the
Trainer to save a checkpoint and stop. The run is then marked `interrupted` and can be resumed.
"""

from __future__ import annotations

import logging
import math
import signal
import time
from pathlib import Path

from transformers import TrainerCallback

from app import rundir

log = logging.getLogger("qlora_app")

# TRL/transformers key -> the stable name we write (the UI and `runs` read these names).
_RENAME = {"train_loss": "loss"}
_KEEP_PREFIXES = ("rewards/", "completions/", "kl", "entropy", "grad_norm", "reward", "loss", "learning_rate",
                  "epoch", "num_tokens", "step_time", "frac_reward_zero_std", "mean_token_accuracy", "reward_std")


def _clean(v):
    if isinstance(v, (int, float)):
        return None if isinstance(v, float) and (math.isnan(v) or math.isinf(v)) else v
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


class StopFlag:
    """Set by a signal handler; read by the callback at step boundaries."""

    def __init__(self):
        self.requested = False
        self._previous = {}

    def install(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:  # second Ctrl-C: the user really wants out now
            signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
            raise KeyboardInterrupt
        self.requested = True

    def uninstall(self):
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)


class RunDirCallback(TrainerCallback):
    """Writes metrics.jsonl and status.json, and turns a stop request into checkpoint + stop."""

    def __init__(self, run_dir: Path, stop: StopFlag, reward_errors=lambda: 0, progress=None):
        self.run_dir = Path(run_dir)
        self.stop = stop
        self.reward_errors = reward_errors
        self.progress = progress
        self.t0 = time.time()

    def on_train_begin(self, args, state, control, **kw):
        rundir.write_status(self.run_dir, rundir.RUNNING, step=state.global_step, max_steps=state.max_steps)
        if self.progress:
            self.progress.start(state.max_steps, state.global_step)

    def on_log(self, args, state, control, logs=None, **kw):
        if not logs or "train_runtime" in logs:  # the final summary is not a step
            return
        rec = {"step": state.global_step, "time": round(time.time() - self.t0, 2)}
        for k, v in logs.items():
            k = _RENAME.get(k, k)
            if k.startswith(_KEEP_PREFIXES):
                rec[k] = _clean(v)
        rec["reward_errors"] = self.reward_errors()
        rundir.append_metrics(self.run_dir, rec)
        # One readable line per logging step for train.log (the UI's log tail, and runs without a terminal).
        shown = "  ".join(f"{k} {rec[k]:.4g}" for k in ("loss", "reward", "learning_rate") if rec.get(k) is not None)
        log.info("step %d/%d  %s", state.global_step, state.max_steps, shown)
        if self.progress:
            self.progress.update_metrics(rec)

    def on_step_end(self, args, state, control, **kw):
        if self.progress:
            self.progress.advance(state.global_step)
        if state.global_step % 5 == 0 or state.global_step == state.max_steps:
            rundir.write_status(self.run_dir, rundir.RUNNING, step=state.global_step, max_steps=state.max_steps)
        if self.stop.requested:
            control.should_save = True
            control.should_training_stop = True


class TerminalProgress:
    """A rich progress bar with step, loss / reward and ETA; off (enabled=False) for --no-progress, the UI's
    subprocess and any stdout that is not a terminal."""

    def __init__(self, method: str, enabled: bool = True):
        self.method = method
        self.enabled = enabled
        self._progress = None
        self._task = None
        self.last: dict = {}

    def start(self, total: int, done: int):
        if not self.enabled:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn(f"[bold]{self.method}[/]"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[metrics]}"), TimeRemainingColumn(),
        )
        self._progress.start()
        self._task = self._progress.add_task("train", total=total, completed=done, metrics="")

    def update_metrics(self, rec: dict):
        self.last = rec
        if self._progress is None:
            return
        parts = []
        for key, label in (("loss", "loss"), ("reward", "reward")):
            if rec.get(key) is not None:
                parts.append(f"{label} {rec[key]:.4g}")
        self._progress.update(self._task, metrics="  ".join(parts))

    def advance(self, step: int):
        if self._progress is not None:
            self._progress.update(self._task, completed=step)

    def close(self):
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
