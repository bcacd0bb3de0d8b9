"""Every tool call a run makes goes through a guard: TRL runs tools as plain calls (a tool that hangs hangs the run,
a huge result fills the context), so each tool is wrapped once, keeping its name, signature and docstring (the
schema the model sees does not change), and the wrapper:

- checks the model's arguments against the signature (a missing or unknown argument is an error result);
- runs the call in a daemon thread and waits ``timeout_s``: a tool still running then is left behind (Python cannot
  stop a thread) and the model gets an error result, so the run goes on; the thread cannot keep the process alive;
- turns an exception into an error result: ``ToolFailed`` is raised to TRL, which counts a failure
  (``tools/failure_frequency``) and shows the model ``{'error': ...}`` (chat and compare do the same);
- cuts a result longer than ``max_output_chars`` and says how much was cut;
- counts per tool: calls, failures, timeouts, the time spent and the first failure's text, in the run's counts
  (app/run/counts.py ``CallCounts``: logged with every step as ``tools/<name>/...``, totals in status.json).

An environment class (``--environment``) gets the same guard on each of its public methods through a subclass of
the same name, so TRL still finds its tools, ``reset`` and ``get_reward`` where it looks for them.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from dataclasses import dataclass

from app.run.counts import CallCounts, error_text


class ToolFailed(Exception):
    """A tool call that did not give a result; its message is what the model is shown."""


def error_result(message: str) -> str:
    """The tool turn's text for a failed call, exactly as TRL writes it (str of ``{"error": message}``)."""
    return str({"error": message})


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


def guarded(fn, limits: Limits, stats: CallCounts, name: str | None = None):
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
        except ToolFailed as e:
            stats.add(name, failures=1, error=str(e))
            raise
        finally:
            stats.add(name, seconds=time.perf_counter() - t0)

    call.__qlora_guarded__ = True
    return call


def public_methods(cls) -> list[str]:
    """An environment's tools, as TRL lists them: public functions of the class other than reset / get_reward."""
    return [n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
            if n not in ("reset", "get_reward") and not n.startswith("_")]


def _guarded_reward(fn, limits: Limits, stats: CallCounts, name: str):
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
            why = (f"did not answer within {limits.timeout_s:g} s (tools.timeout_s)" if not finished
                   else error_text(error) if error is not None else f"returned {result!r:.80}")
            stats.add(name, failures=1, error=why)
            return None
        return value

    return get_reward


def guarded_environment(cls, limits: Limits, stats: CallCounts):
    """A subclass of ``cls`` with the same name whose tool methods and get_reward are guarded; TRL's factory is
    this class."""
    wrapped = {n: guarded(getattr(cls, n), limits, stats, name=n) for n in public_methods(cls)}
    if callable(getattr(cls, "get_reward", None)) and not inspect.iscoroutinefunction(cls.get_reward):
        wrapped["get_reward"] = _guarded_reward(cls.get_reward, limits, stats, f"{cls.__name__}.get_reward")
    sub = type(cls.__name__, (cls,), {**wrapped, "__module__": cls.__module__, "__doc__": cls.__doc__})
    sub.__qualname__ = cls.__qualname__
    return sub
