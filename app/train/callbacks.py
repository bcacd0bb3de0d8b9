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
from pathlib import Path

from transformers import TrainerCallback

from app.run import layout, store
from app.tools.guard import ToolStats, as_metrics
from app.train import peakmem

log = logging.getLogger("qlora_app")

# TRL/transformers key -> the stable name we write (the UI and `runs` read these names).
_RENAME = {"train_loss": "loss"}
_KEEP_PREFIXES = ("rewards/", "logps/", "completions/", "kl", "entropy", "grad_norm", "reward", "loss", "learning_rate",
                  "epoch", "num_tokens", "step_time", "frac_reward_zero_std", "mean_token_accuracy", "reward_std",
                  "tools/")


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


def _totals(stats: ToolStats) -> ToolStats:
    """A run's totals, starting from what ``stats`` holds already (a resumed run's earlier attempts)."""
    totals = ToolStats()
    totals.restore(stats.summary())
    return totals


def _any_rank(flag: bool) -> bool:
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


class RunDirCallback(TrainerCallback):
    """Writes metrics.jsonl and status.json, turns a stop request into checkpoint + stop, stops on a NaN / inf
    loss or gradient norm (without saving the broken weights), measures how far the adapter moves
    (adapter/update) and says what the run's diagnosis finds (app/run/diagnosis.py: why the reward may be flat)."""

    def __init__(self, run_dir: Path, stop: StopFlag, reward_errors=lambda: 0, progress=None, warn=None,
                 write: bool = True, cuda: bool = False, every_step=None, record=None, tool_stats=None,
                 judge_stats=None, diagnosis=None):
        """``every_step()``: called at each step's end (the CPU thread governor follows the machine's load);
        ``record(status, **fields)``: the session's record of the run's progress (status.json); ``tool_stats``: a
        tool run's per-tool counts (app.tools.guard.ToolStats), ``judge_stats``: a judged run's judge counts (the
        same kind), each logged with each step's line; ``diagnosis``: the run's app.run.diagnosis.Watch, fed each
        line (what it finds is said once through ``warn`` and kept in status.json)."""
        self.run_dir = Path(run_dir)
        self.record = record or (lambda status, **fields: None)
        self.every_step = every_step
        self.cuda = cuda
        # Every rank of a distributed run has this callback (stop and NaN decisions must be the same on all);
        # only rank 0 (write=True) writes metrics.jsonl / status.json and warns.
        self.write = write
        self.stop = stop
        self.reward_errors = reward_errors
        # (this process's counts, the run's totals: every process's and a resumed run's earlier attempts', metric
        # prefix, status.json key) of each kind of call the run counts
        self.counted = [(stats, _totals(stats), prefix, key) for stats, prefix, key in (
            (tool_stats, layout.TOOL_PREFIX, layout.TOOL_COUNTS), (judge_stats, "", layout.JUDGE_COUNTS))
            if stats is not None]
        self.progress = progress
        self.warn = warn or log.warning
        self.t0 = time.time()
        self.nonfinite: dict | None = None  # {"key", "value", "step"} of the first NaN / inf seen
        self.diagnosis = diagnosis
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
        counts = self._call_counts()  # a collective under torchrun: every rank takes part
        if not self.write:
            return
        rec = {"step": state.global_step, "time": round(time.time() - self.t0, 2)}
        for k, v in logs.items():
            k = _RENAME.get(k, k)
            if k.startswith(_KEEP_PREFIXES):
                rec[k] = _clean(v)
        rec["reward_errors"] = self.reward_errors()
        moved = self._adapter_update(kw.get("model"))
        if moved is not None:
            rec[layout.ADAPTER_UPDATE] = moved
        for (_, totals, prefix, key), c in zip(self.counted, counts):
            rec.update(as_metrics(c, prefix))  # calls, failures, timeouts and latency since the last line
            if c:  # the run's totals, as they stand after this step
                self.record(None, **{key: totals.summary()})
        peak = peakmem.sample(self.cuda)
        rec.update(peak)
        self.flush_pending(before=state.global_step)
        rec.update(self.pending.pop(state.global_step, {}))
        store.append_metrics(self.run_dir, rec)
        if self.diagnosis is not None:
            new = self.diagnosis.add(rec)
            for finding in new:
                self.warn(finding["message"])
            if new:
                self.record(None, **{layout.DIAGNOSIS: self.diagnosis.found})
        # One readable line per logging step for train.log (the UI's log tail, and runs without a terminal).
        shown = "  ".join(f"{k} {rec[k]:.4g}" for k in ("loss", "reward", "learning_rate") if rec.get(k) is not None)
        log.info("step %d/%d  %s", state.global_step, state.max_steps, shown)
        if self.progress:
            self.progress.update_metrics(rec)

    def _call_counts(self) -> list[dict]:
        """Per kind of counted call (tools, judge): the calls every process made since the last logged step (summed
        over ranks), added to the run's totals."""
        out = []
        for stats, totals, _, _ in self.counted:
            counts = _sum_over_ranks(stats.take_counts())
            totals.add_counts(counts)
            out.append(counts)
        return out

    def flush_pending(self, before: int | None = None) -> None:
        """Pending values of steps that had no logged line (before ``before``, or all) as lines of their own."""
        for step in sorted(k for k in self.pending if before is None or k < before):
            store.append_metrics(self.run_dir, {"step": step, **self.pending.pop(step)})

    def on_train_end(self, args, state, control, **kw):
        if self.write:
            self.flush_pending()

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
        if _any_rank(self.stop.requested) and self.nonfinite is None:
            control.should_save = True
            control.should_training_stop = True


class FaultCallback(TrainerCallback):
    """QLORA_APP_FAULT=oom@N / oom@always: the injected out-of-memory error as an optimizer step begins
    (app/train/oom.py)."""

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
