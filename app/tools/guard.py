"""Every tool call a run makes goes through a guard: TRL runs tools as plain calls (a tool that hangs hangs the run,
a huge result fills the context), so each tool is wrapped once, keeping its name, signature and docstring (the
schema the model sees does not change), and the wrapper:

- checks the model's arguments against the signature (a missing or unknown argument is an error result);
- runs the call in a daemon thread and waits ``timeout_s``: a tool still running then is left behind (Python cannot
  stop a thread) and the model gets an error result, so the run goes on; the thread cannot keep the process alive;
- turns an exception into an error result: ``ToolFailed`` is raised to TRL, which counts a failure
  (``tools/failure_frequency``) and shows the model ``{'error': ...}`` (chat and compare do the same);
- cuts a result longer than ``max_output_chars`` and says how much was cut;
- counts per tool: calls, failures, timeouts, the time spent (``ToolStats``), logged every step as ``tools/<name>/...``
  (``as_metrics``).

An environment class (``--environment``) gets the same guard on each of its public methods through a subclass of
the same name, so TRL still finds its tools, ``reset`` and ``get_reward`` where it looks for them.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from dataclasses import dataclass, field

from app.run import layout

# The per-tool counters, in the order they are logged (tools/<name>/<counter>).
COUNTERS = ("calls", "failures", "timeouts", "seconds")


class ToolFailed(Exception):
    """A tool call that did not give a result; its message is what the model is shown."""


def error_result(message: str) -> str:
    """The tool turn's text for a failed call, exactly as TRL writes it (str of ``{"error": message}``)."""
    return str({"error": message})


@dataclass
class ToolStats:
    """Counters per tool name, for the whole run (``totals``) and since the last ``take``."""

    totals: dict[str, dict[str, float]] = field(default_factory=dict)
    _last: dict[str, dict[str, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, **deltas: float) -> None:
        with self._lock:
            row = self.totals.setdefault(name, dict.fromkeys(COUNTERS, 0))
            for k, v in deltas.items():
                row[k] += v

    def take_counts(self) -> dict[str, dict[str, float]]:
        """{name: {calls, failures, timeouts, seconds}} since the last take, for the tools called since."""
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
        """Carry on from a run's recorded totals (a summary(), as status.json keeps it): a resumed run's counts
        add to them, and take_counts() gives only the new calls."""
        with self._lock:
            for name, c in (counts or {}).items():
                seconds = (c.get("mean_latency_ms") or 0) * c.get("calls", 0) / 1000
                row = {"calls": c.get("calls", 0), "failures": c.get("failures", 0), "timeouts": c.get("timeouts", 0),
                       "seconds": seconds}
                self.totals[name], self._last[name] = dict(row), dict(row)

    def summary(self) -> dict[str, dict]:
        """{name: {calls, failures, timeouts, mean_latency_ms}} over the whole run (status.json, the summary)."""
        with self._lock:
            return {name: {"calls": int(r["calls"]), "failures": int(r["failures"]), "timeouts": int(r["timeouts"]),
                           "mean_latency_ms": round(1000 * r["seconds"] / r["calls"], 3) if r["calls"] else None}
                    for name, r in self.totals.items()}

    def __getstate__(self):  # the lock does not pickle; counts travel, a fresh lock is made
        return {"totals": self.totals, "_last": self._last}

    def __setstate__(self, state):
        self.totals, self._last, self._lock = state["totals"], state["_last"], threading.Lock()


def as_metrics(counts: dict[str, dict[str, float]], prefix: str = layout.TOOL_PREFIX) -> dict[str, float]:
    """take_counts() as metrics.jsonl's keys: <prefix><name>/calls, failures, timeouts, latency_ms (a call's mean);
    tools/<name>/... for tools, judge/... for the judge (prefix "")."""
    out: dict[str, float] = {}
    for name, c in counts.items():
        key = f"{prefix}{name}/"
        out.update({key + "calls": c["calls"], key + "failures": c["failures"], key + "timeouts": c["timeouts"],
                    key + "latency_ms": round(1000 * c["seconds"] / c["calls"], 3) if c["calls"] else 0.0})
    return out


@dataclass(frozen=True)
class Limits:
    """What a guarded call may take (the config's tools.timeout_s and tools.max_output_chars)."""

    timeout_s: float = 10.0
    max_output_chars: int = 2000

    @classmethod
    def of(cls, tools_cfg) -> "Limits":
        """A run's limits, from its ToolsConfig (training, compare, chat and the held-out evaluation alike)."""
        return cls(tools_cfg.timeout_s, tools_cfg.max_output_chars)


def cap(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [cut: {len(text) - limit} more characters]"


def _run(fn, args, kwargs, timeout_s: float):
    """(finished, result, error): ``fn`` run in a daemon thread for at most ``timeout_s`` seconds (an async tool on
    an event loop of that thread's own, so the guarded tool is a plain function to TRL and the chat loop)."""
    box: dict = {}

    def target():
        try:
            out = fn(*args, **kwargs)
            box["result"] = asyncio.run(out) if inspect.iscoroutine(out) else out
        except BaseException as e:  # noqa: BLE001 - handed to the caller, which makes it an error result
            box["error"] = e

    worker = threading.Thread(target=target, name=f"tool-{getattr(fn, '__name__', 'call')}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        return False, None, None
    return True, box.get("result"), box.get("error")


def guarded(fn, limits: Limits, stats: ToolStats, name: str | None = None):
    """``fn`` with the guard around it (see the module's doc); TRL and the chat loop call this one."""
    name = name or fn.__name__
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        t0 = time.perf_counter()
        stats.add(name, calls=1)
        try:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as e:
                raise ToolFailed(f"bad arguments for {name}: {e}") from None
            finished, result, error = _run(fn, args, kwargs, limits.timeout_s)
            if not finished:
                stats.add(name, timeouts=1)
                raise ToolFailed(f"{name} did not answer within {limits.timeout_s:g} s (tools.timeout_s)")
            if error is not None:  # anything the tool raised, sys.exit() included, is the model's to see
                raise ToolFailed(f"{type(error).__name__}: {error}" if not isinstance(error, (ValueError, ToolFailed))
                                 else str(error)) from None
            if isinstance(result, list):  # multimodal content blocks: TRL passes them through as they are
                return result
            return cap(str(result), limits.max_output_chars)
        except ToolFailed:
            stats.add(name, failures=1)
            raise
        finally:
            stats.add(name, seconds=time.perf_counter() - t0)

    call.__qlora_guarded__ = True
    return call


def public_methods(cls) -> list[str]:
    """An environment's tools, as TRL lists them: public functions of the class other than reset / get_reward."""
    return [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
            if n not in ("reset", "get_reward") and not n.startswith("_")]


def _guarded_reward(fn, limits: Limits, stats: ToolStats, name: str):
    """An environment's get_reward behind the same guard: a hang, an exception or something that is not a number
    scores the rollout None (TRL leaves it out of the mean) and is counted under ``name``, never the run's end."""

    @functools.wraps(fn)
    def get_reward(self):
        t0 = time.perf_counter()
        finished, result, error = _run(fn, (self,), {}, limits.timeout_s)
        stats.add(name, calls=1, seconds=time.perf_counter() - t0, timeouts=int(not finished))
        try:
            value = float(result) if finished and error is None else None
        except (TypeError, ValueError):
            value = None
        if value is None or value != value:  # failed, not a number, or NaN: no score
            stats.add(name, failures=1)
            return None
        return value

    return get_reward


def guarded_environment(cls, limits: Limits, stats: ToolStats):
    """A subclass of ``cls`` with the same name whose tool methods and get_reward are guarded; TRL's factory is
    this class."""
    wrapped = {n: guarded(getattr(cls, n), limits, stats, name=n) for n in public_methods(cls)}
    if callable(getattr(cls, "get_reward", None)) and not inspect.iscoroutinefunction(cls.get_reward):
        wrapped["get_reward"] = _guarded_reward(cls.get_reward, limits, stats, f"{cls.__name__}.get_reward")
    sub = type(cls.__name__, (cls,), {**wrapped, "__module__": cls.__module__, "__doc__": cls.__doc__})
    sub.__qualname__ = cls.__qualname__
    return sub
