"""Trainer callbacks: the metrics file the UI tails, the terminal progress bar, the run's progress reported to its
session (which writes status.json), and graceful Stop.

Stop (from the UI, or Ctrl-C) arrives as SIGTERM/SIGINT. Killing the process mid-step would lose the work since
the last checkpoint, so the signal only raises a flag; at the end of the current step the callback asks the
Trainer to save a checkpoint and stop. The run is then marked `interrupted` and can be resumed.
"""

from __future__ import annotations

import logging
import math
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from transformers import TrainerCallback

from app.run import layout, store
from app.run.counts import RunCounts
from app.train.running import peakmem

log = logging.getLogger("qlora_app")

# TRL/transformers key -> the stable name we write (the UI and `runs` read these names).
_RENAME = {"train_loss": "loss"}
_KEEP_PREFIXES = ("rewards/", "logps/", "completions/", "kl", "entropy", "grad_norm", "reward", "loss", "learning_rate",
                  "epoch", "num_tokens", "step_time", "frac_reward_zero_std", "mean_token_accuracy", "reward_std",
                  "tools/", "teacher/")  # teacher/: an outside teacher's throughput (methods/outside_teacher.py)


def _clean(v):
    if isinstance(v, (int, float)):
        return None if isinstance(v, float) and (math.isnan(v) or math.isinf(v)) else v
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _sum_over_ranks(counts: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Each rank's tool counts ({name: {counter: n}}) summed over the ranks (each rank calls tools for its own
    completions; TRL's tools/call_frequency is over all of them too)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return counts
    every: list = [None] * dist.get_world_size()
    dist.all_gather_object(every, counts)
    out: dict[str, dict[str, float]] = {}
    for part in every:
        for name, row in (part or {}).items():
            mine = out.setdefault(name, dict.fromkeys(row, 0))
            for k, v in row.items():
                mine[k] += v
    return out


def any_rank(flag: bool) -> bool:
    """True on every rank when it is True on any: a signal reaches the ranks at slightly different moments, and
    a rank that stopped one step before the others would leave them waiting in a collective forever."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    import torch

    t = torch.tensor([1.0 if flag else 0.0])
    if dist.get_backend() == "nccl":
        t = t.cuda()
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


# A signal this soon after the first is the same stop request delivered twice (Ctrl-C reaches a worker directly
# and again through torchrun, which forwards it), not a person pressing Ctrl-C a second time.
DUPLICATE_SIGNAL_SECONDS = 2.0


class StopFlag:
    """Set by a signal handler; read by the callback at step boundaries."""

    def __init__(self):
        self.requested = False
        self._first = 0.0
        self._previous = {}

    def install(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.requested:
            if time.monotonic() - self._first < DUPLICATE_SIGNAL_SECONDS:
                return
            # a second Ctrl-C: the user really wants out now
            signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
            raise KeyboardInterrupt
        self.requested = True
        self._first = time.monotonic()

    def uninstall(self):
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)


_WATCHED = ("loss", "grad_norm")  # a NaN / inf here ends the run: every later update would be garbage
ADAPTER_SAMPLE_TENSORS = 16  # trainable tensors whose movement adapter/update measures (spread over the layers)
ADAPTER_SAMPLE_VALUES = 65536  # values read of each


@dataclass
class Reporting:
    """Where a run's callback reports: ``record(status, **fields)``, the session's record of the run (status.json);
    ``warn(line)``, a line for the user; ``progress``, the terminal's bar; ``write``: this process writes the run
    folder (rank 0; every rank has the callback, its stop and NaN decisions must be the same on all); ``cuda``: peak
    memory is read from the GPU; ``every_step()``: at each step's end (the CPU thread governor follows the load)."""

    record: Callable = lambda status, **fields: None
    warn: Callable | None = None
    progress: object | None = None
    write: bool = True
    cuda: bool = False
    every_step: Callable | None = None


class RunDirCallback(TrainerCallback):
    """Writes metrics.jsonl and status.json, turns a stop request into checkpoint + stop, stops on a NaN / inf
    loss or gradient norm (without saving the broken weights), measures how far the adapter moves
    (adapter/update), logs the run's counts (app/run/counts.py: reward failures, tool and judge calls, each line's
    and, when training ends, those of the steps after the last line) and says what the run's diagnosis finds
    (app/run/diagnosis.py: why the reward may be flat)."""

    def __init__(self, run_dir: Path, stop: StopFlag, counts: RunCounts | None = None,
                 report: Reporting | None = None):
        """``counts``: the run's counts (its ``diagnosis`` fed each line; what it finds is said once through
        ``report.warn`` and kept in status.json); ``report``: where it reports (``Reporting``)."""
        self.run_dir = Path(run_dir)
        self.stop = stop
        self.counts = counts if counts is not None else RunCounts()
        report = report or Reporting()
        self.record, self.every_step, self.cuda, self.write = report.record, report.every_step, report.cuda, \
            report.write
        self.progress = report.progress
        self.warn = report.warn or log.warning
        self.t0 = time.time()
        self.nonfinite: dict | None = None  # {"key", "value", "step"} of the first NaN / inf seen
        self._adapter_before = None  # the sampled adapter values at the last logged step
        # step -> more values for that step's metrics.jsonl line (the held-out evaluation's), so a file keeps one
        # line per logged step; a step that is not logged gets its own line, in step order
        self.pending: dict[int, dict] = {}

    def on_train_begin(self, args, state, control, **kw):
        peakmem.reset(self.cuda)
        if not self.write:
            return
        self.record(layout.RUNNING, step=state.global_step, max_steps=state.max_steps)
        if self.progress:
            self.progress.start(state.max_steps, state.global_step)

    def on_log(self, args, state, control, logs=None, **kw):
        if not logs or "train_runtime" in logs:  # the final summary is not a step
            return
        # The logged values are global (gathered over ranks), so every rank takes the same decision here.
        self._check_finite(logs, state.global_step, control)
        taken = self.counts.take(_sum_over_ranks)  # a collective under torchrun: every rank takes part
        if not self.write:
            return
        rec = {"step": state.global_step, "time": round(time.time() - self.t0, 2)}
        for k, v in logs.items():
            k = _RENAME.get(k, k)
            if k.startswith(_KEEP_PREFIXES):
                rec[k] = _clean(v)
        rec.update(self.counts.metrics(taken))  # calls, failures, timeouts and latency since the last line
        moved = self._adapter_update(kw.get("model"))
        if moved is not None:
            rec[layout.ADAPTER_UPDATE] = moved
        self._record_counts(taken)
        peak = peakmem.sample(self.cuda)
        rec.update(peak)
        self.flush_pending(before=state.global_step)
        rec.update(self.pending.pop(state.global_step, {}))
        store.append_metrics(self.run_dir, rec)
        self._diagnose(rec)
        # One readable line per logging step for train.log (the UI's log tail, and runs without a terminal).
        shown = "  ".join(f"{k} {rec[k]:.4g}" for k in ("loss", "reward", "learning_rate") if rec.get(k) is not None)
        log.info("step %d/%d  %s", state.global_step, state.max_steps, shown)
        if self.progress:
            self.progress.update_metrics(rec)

    def _diagnose(self, rec: dict) -> None:
        """What the run's diagnosis finds in a new metrics line: said once, recorded in status.json."""
        diagnosis = self.counts.diagnosis
        if diagnosis is not None:
            new = diagnosis.add(rec)
            for finding in new:
                self.warn(finding["message"])
            if new:
                self.record(None, **{layout.DIAGNOSIS: diagnosis.found})

    def _record_counts(self, taken: dict) -> None:
        """status.json's counts, as they stand after this step, when something was counted since the last line."""
        if any(taken.values()) or self.counts.reward_errors():
            self.record(None, **self.counts.status_fields())

    def flush_pending(self, before: int | None = None) -> None:
        """Pending values of steps that had no logged line (before ``before``, or all) as lines of their own."""
        for step in sorted(k for k in self.pending if before is None or k < before):
            store.append_metrics(self.run_dir, {"step": step, **self.pending.pop(step)})

    def on_train_end(self, args, state, control, **kw):
        """The counts of the steps after the last logged line (a run that stops before its first logging step
        too): a line of their own in metrics.jsonl and the totals in status.json, so no call goes uncounted."""
        taken = self.counts.take(_sum_over_ranks)  # a collective under torchrun: every rank takes part
        if not self.write:
            return
        self.flush_pending()
        if any(taken.values()):
            rec = {"step": state.global_step, **self.counts.metrics(taken)}
            store.append_metrics(self.run_dir, rec)
            self._diagnose(rec)  # a judge that failed on the last steps is said too (not only on a logged step)
        self.record(None, **self.counts.status_fields())

    def _check_finite(self, logs: dict, step: int, control) -> None:
        for key in _WATCHED:
            v = logs.get(key)
            if self.nonfinite is None and isinstance(v, float) and not math.isfinite(v):
                self.nonfinite = {"key": key, "value": str(v), "step": step}
                log.error("%s is %s at step %d: stopping without saving these weights", key, v, step)
                # Logging runs before the step's checkpoint save: cancel it, so the last good checkpoint stays
                # the newest one.
                control.should_save = False
                control.should_training_stop = True

    def _adapter_update(self, model) -> float | None:
        """How far the trainable weights moved since the last logged step: mean |change| / mean |value| over a
        sample of the trainable tensors (ADAPTER_SAMPLE_TENSORS, spread over the layers). None at the first line, or
        when the weights cannot be read here (sharded by FSDP)."""
        if model is None:
            return None
        try:
            params = [p for p in model.parameters() if p.requires_grad and p.numel()]
            stride = max(1, len(params) // ADAPTER_SAMPLE_TENSORS)
            now = [p.detach().reshape(-1)[:ADAPTER_SAMPLE_VALUES].float().cpu().clone()
                   for p in params[::stride][:ADAPTER_SAMPLE_TENSORS]]
        except Exception:  # noqa: BLE001 - a measurement, never a reason to stop a run
            return None
        before, self._adapter_before = self._adapter_before, now
        if before is None or len(before) != len(now) or not now:
            return None
        size = sum(float(b.abs().mean()) for b in before)
        moved = sum(float((a - b).abs().mean()) for a, b in zip(now, before) if a.shape == b.shape)
        return float(f"{moved / size:.4g}") if size > 0 else None

    def on_step_end(self, args, state, control, **kw):
        if self.every_step:
            self.every_step()
        if self.progress:
            self.progress.advance(state.global_step)
        if self.write and (state.global_step % 5 == 0 or state.global_step == state.max_steps):
            self.record(layout.RUNNING, step=state.global_step, max_steps=state.max_steps,
                        **peakmem.sample(self.cuda))
        if any_rank(self.stop.requested) and self.nonfinite is None:
            control.should_save = True
            control.should_training_stop = True


class FaultCallback(TrainerCallback):
    """QLORA_APP_FAULT=oom@N / oom@always: the injected out-of-memory error as an optimizer step begins
    (app/train/planning/oom.py)."""

    def __init__(self, faults):
        self.faults = faults

    def on_step_begin(self, args, state, control, **kw):
        self.faults.step(state.global_step + 1)


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
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

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
