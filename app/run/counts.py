"""A run's counts, in one record: the reward samples that failed, the calls of each tool, the judge's judgements and
the diagnosis fed by them. One ``RunCounts`` per run, made by its session and handed as one object to the reward
functions, the tools' guard, the judge and the training callback; never a process-wide counter rebound to a run.

Counting and recording are apart: the counters only count (thread-safe, picklable: TRL may copy a reward function);
the callback takes what was counted since its last line at each logged step *and when training ends*, so the counts
of the steps after the last logged one reach metrics.jsonl and status.json too (``take`` / ``status_fields``).

Owns: the counters and their totals over a run's attempts (a resumed run adds to what status.json says). Must not
write files (the callback appends the lines, the session's record writes status.json) nor import torch (the sum over
torchrun's ranks is the caller's function). Standard library only.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Callable

from app.run import layout

log = logging.getLogger("qlora_app")

# The counters of each name (a tool, the judge), in the order they are logged (tools/<name>/<counter>).
COUNTERS = ("calls", "failures", "timeouts", "seconds")
SHOWN_ERRORS = 10  # a broken component is logged for its first failures, then every thousandth
ERROR_TEXT = 200  # characters of an exception kept and shown


def error_text(exc: BaseException) -> str:
    """An exception as one short line: ``ValueError: bad value``."""
    text = " ".join(str(exc).split())[:ERROR_TEXT]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class RewardErrors:
    """The (component, sample) pairs that raised and were scored None, with the first error of each component (why
    it failed, said by the summary). A run's reward functions share its one; a component built on its own (score,
    compare) counts for itself. Pickles as its counts (TRL may copy reward functions)."""

    def __init__(self):
        self.count = 0
        self.first: dict[str, str] = {}  # component -> its first failure, "Type: message"
        self._lock = threading.Lock()

    def __call__(self) -> int:
        return self.count

    def add(self, name: str, exc: BaseException) -> None:
        with self._lock:
            self.count += 1
            n = self.count
            self.first.setdefault(name, error_text(exc))
        if n <= SHOWN_ERRORS or n % 1000 == 0:  # a broken component must not flood the log once per sample
            log.warning("reward component '%s' failed on a sample (%s); it scores None (error #%d)",
                        name, error_text(exc), n)

    def restore(self, count: int | None, first: dict | None = None) -> None:
        with self._lock:
            self.count = int(count or 0)
            self.first = dict(first or {})

    def __getstate__(self):
        return {"count": self.count, "first": self.first}

    def __setstate__(self, state):
        self.count, self.first, self._lock = state["count"], state.get("first", {}), threading.Lock()


@dataclass
class CallCounts:
    """Counters per name (a tool, the judge) for the whole run (``totals``) and since the last ``take_counts``; the
    first failure's text of each name (``first``)."""

    totals: dict[str, dict[str, float]] = field(default_factory=dict)
    first: dict[str, str] = field(default_factory=dict)
    _last: dict[str, dict[str, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, error: str | None = None, **deltas: float) -> None:
        """Count a call of ``name``; ``error``: why it failed (the first one is kept)."""
        with self._lock:
            row = self.totals.setdefault(name, dict.fromkeys(COUNTERS, 0))
            for k, v in deltas.items():
                row[k] += v
            if error:
                self.first.setdefault(name, error[:ERROR_TEXT])

    def take_counts(self) -> dict[str, dict[str, float]]:
        """{name: {calls, failures, timeouts, seconds}} since the last take, for the names called since."""
        out: dict[str, dict[str, float]] = {}
        with self._lock:
            for name, row in self.totals.items():
                last = self._last.get(name, dict.fromkeys(COUNTERS, 0))
                if row["calls"] - last["calls"]:
                    out[name] = {k: row[k] - last[k] for k in COUNTERS}
                    self._last[name] = dict(row)
        return out

    def add_counts(self, counts: dict[str, dict[str, float]]) -> None:
        """Add another process's (or a run's) counts, as take_counts gives them."""
        for name, row in counts.items():
            self.add(name, **row)

    def restore(self, counts: dict | None) -> None:
        """Carry on from a run's recorded totals (a summary(), as status.json keeps it): a resumed run's counts add
        to them, and take_counts() gives only the new calls."""
        with self._lock:
            for name, c in (counts or {}).items():
                seconds = (c.get("mean_latency_ms") or 0) * c.get("calls", 0) / 1000
                row = {"calls": c.get("calls", 0), "failures": c.get("failures", 0), "timeouts": c.get("timeouts", 0),
                       "seconds": seconds}
                self.totals[name], self._last[name] = dict(row), dict(row)
                if c.get("first_error"):
                    self.first.setdefault(name, c["first_error"])

    def summary(self) -> dict[str, dict]:
        """{name: {calls, failures, timeouts, mean_latency_ms[, first_error]}} over the whole run (status.json, the
        summary)."""
        with self._lock:
            out = {name: {"calls": int(r["calls"]), "failures": int(r["failures"]), "timeouts": int(r["timeouts"]),
                          "mean_latency_ms": round(1000 * r["seconds"] / r["calls"], 3) if r["calls"] else None}
                   for name, r in self.totals.items()}
            for name, text in self.first.items():
                if name in out and out[name]["failures"]:
                    out[name]["first_error"] = text
            return out

    def __getstate__(self):  # the lock does not pickle; counts travel, a fresh lock is made
        return {"totals": self.totals, "first": self.first, "_last": self._last}

    def __setstate__(self, state):
        self.totals, self._last, self._lock = state["totals"], state["_last"], threading.Lock()
        self.first = state.get("first", {})


def as_metrics(counts: dict[str, dict[str, float]], prefix: str = layout.TOOL_PREFIX) -> dict[str, float]:
    """take_counts() as metrics.jsonl's keys: <prefix><name>/calls, failures, timeouts, latency_ms (a call's mean);
    tools/<name>/... for tools, judge/... for the judge (prefix "")."""
    out: dict[str, float] = {}
    for name, c in counts.items():
        key = f"{prefix}{name}/"
        out.update({key + "calls": c["calls"], key + "failures": c["failures"], key + "timeouts": c["timeouts"],
                    key + "latency_ms": round(1000 * c["seconds"] / c["calls"], 3) if c["calls"] else 0.0})
    return out


# (the RunCounts attribute, its metrics prefix, its status.json key) of each kind of counted call
CALL_KINDS = (("tools", layout.TOOL_PREFIX, layout.TOOL_COUNTS), ("judge", "", layout.JUDGE_COUNTS))


@dataclass
class RunCounts:
    """Everything a run counts, over every attempt: ``reward_errors``, ``tools`` (each tool's calls, an
    environment's get_reward too), ``judge`` (its judgements), and ``diagnosis`` (the run's app.run.diagnosis.Watch,
    set once the run is planned). ``run_totals`` are the totals over every process (torchrun's ranks) and every
    attempt, as status.json records them."""

    reward_errors: RewardErrors = field(default_factory=RewardErrors)
    tools: CallCounts = field(default_factory=CallCounts)
    judge: CallCounts = field(default_factory=CallCounts)
    diagnosis: object | None = None
    run_totals: dict[str, CallCounts] = field(default_factory=lambda: {kind: CallCounts() for kind, *_ in CALL_KINDS})

    def restore(self, status: dict | None) -> None:
        """A resumed run's counts start from what its status.json says; the new calls add to them. (Before any
        call: what was counted since would be counted twice.)"""
        status = status or {}
        for kind, _, key in CALL_KINDS:
            getattr(self, kind).restore(status.get(key))
            self.run_totals[kind] = CallCounts()
            self.run_totals[kind].restore(status.get(key))
        self.reward_errors.restore(status.get(layout.REWARD_ERRORS), status.get(layout.REWARD_ERROR_TEXTS))

    def take(self, sum_over_ranks: Callable[[dict], dict] = lambda counts: counts) -> dict[str, dict]:
        """{kind: the calls every process made since the last take} (``sum_over_ranks``: a collective under torchrun:
        every rank calls it), added to the run's totals."""
        out = {}
        for kind, _, _ in CALL_KINDS:
            mine = getattr(self, kind)
            counts = sum_over_ranks(mine.take_counts())
            self.run_totals[kind].add_counts(counts)
            self.run_totals[kind].first.update({k: v for k, v in mine.first.items()
                                                if k not in self.run_totals[kind].first})
            out[kind] = counts
        return out

    def metrics(self, taken: dict[str, dict]) -> dict:
        """A metrics.jsonl line's counts: each kind's calls since the last line, and the reward errors so far."""
        rec: dict = {layout.REWARD_ERRORS: self.reward_errors()}
        for kind, prefix, _ in CALL_KINDS:
            rec.update(as_metrics(taken.get(kind) or {}, prefix))
        return rec

    def status_fields(self) -> dict:
        """status.json's counts: each kind's run totals (those called at all), the reward errors and why."""
        out: dict = {}
        for kind, _, key in CALL_KINDS:
            totals = self.run_totals.get(kind)
            if totals is not None and totals.totals:
                out[key] = totals.summary()
        if self.reward_errors():
            out[layout.REWARD_ERRORS] = self.reward_errors()
            out[layout.REWARD_ERROR_TEXTS] = dict(self.reward_errors.first)
        return out
