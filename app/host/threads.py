"""How many CPU threads torch may use: the cores other processes leave free, re-checked while a run trains.

Measured on 2 cores (docs/performance.md, "CPU threads"): two `demo --quick` side by side took 369 s each with
torch's default (a thread per core in each process: OpenMP threads spin waiting for a core the other process
holds), 35-37 s each with one thread each, against 26 s for one demo alone with two threads. So a process takes
the cores that are idle when it starts (at least one), and a training run looks again every few seconds: when
another job starts it steps down, when the job ends it takes the cores back.

An explicit choice is never overridden: runtime.threads, or OMP_NUM_THREADS in the environment. Standard library
only at import; torch is imported when threads are set.
"""

from __future__ import annotations

import os
import time

RECHECK_SECONDS = 5.0  # how often a training run looks at the machine again (no sleeping: between two looks)
PROBE_SECONDS = 0.3  # the first look, at start: a short window of /proc/stat


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _snapshot() -> tuple[float, float, float] | None:
    """(all jiffies, idle jiffies, this process's jiffies), or None without /proc."""
    try:
        with open("/proc/stat") as f:
            cpu = [float(x) for x in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    idle = cpu[3] + (cpu[4] if len(cpu) > 4 else 0.0)  # idle + iowait
    return sum(cpu[:8]), idle, float(own[11]) + float(own[12])  # utime + stime of every thread of this process


def others_busy(before, after, cores: int) -> float | None:
    """Cores' worth of CPU that other processes used between two snapshots."""
    if before is None or after is None or after[0] <= before[0]:
        return None
    total, idle, own = (a - b for a, b in zip(after, before))
    # /proc/stat counts all CPUs; its jiffies advance ncpu times faster than a process's own
    all_cpus = os.cpu_count() or cores
    busy_share = max(0.0, (total - idle) / total)
    own_share = max(0.0, own * all_cpus / total)
    return max(0.0, (busy_share * all_cpus - own_share)) * cores / all_cpus


def fair_threads(cores: int, busy: float | None) -> int:
    """The cores left free by others (rounded), at least one."""
    if busy is None:
        return cores
    return max(1, min(cores, int(cores - busy + 0.5)))


def explicit_threads(setting: int | None) -> int | None:
    """runtime.threads, else OMP_NUM_THREADS: a number the user chose."""
    if setting:
        return setting
    try:
        return int(os.environ["OMP_NUM_THREADS"]) or None
    except (KeyError, ValueError):
        return None


class ThreadGovernor:
    """Sets torch's intra-op threads at start and, when ``adjust`` is called (a training step's end), follows the
    machine's load. ``note(line)`` hears once when the machine is busy at start."""

    def __init__(self, setting: int | None = None, note=None):
        self.fixed = explicit_threads(setting)
        self.cores = usable_cores()
        self.threads = self.fixed or self.cores
        self._last = None
        self._last_time = 0.0
        self._up = 0
        if self.fixed is None:
            self.threads, self._last = _probe(self.cores, note, "adjusting as the load changes")
            self._last_time = time.monotonic()
        _set(self.threads)

    def adjust(self) -> int:
        if self.fixed is not None or time.monotonic() - self._last_time < RECHECK_SECONDS:
            return self.threads
        now = _snapshot()
        busy = others_busy(self._last, now, self.cores)
        self._last, self._last_time = now, time.monotonic()
        want = fair_threads(self.cores, busy)
        # Down at once (threads waiting for a core spin and cost 10x); up only after two looks in a row say so,
        # since the other job's own quiet moments (between its steps) would otherwise make both step up together.
        self._up = self._up + 1 if want > self.threads else 0
        if want < self.threads or self._up >= 2:
            self.threads, self._up = want, 0
            _set(want)
        return self.threads


def _probe(cores: int, note, then: str):
    """(threads, the snapshot it ended on): a short look at how busy the machine is, and the fair share of cores;
    ``note(line)`` hears it when others are using some."""
    before = _snapshot()
    time.sleep(PROBE_SECONDS)
    last = _snapshot()
    busy = others_busy(before, last, cores)
    threads = fair_threads(cores, busy)
    if note and threads < cores:
        note(f"the machine is busy (other processes use about {busy:.1f} of {cores} cores): using {threads} CPU "
             f"thread(s), {then} (runtime.threads or OMP_NUM_THREADS fixes it)")
    return threads, last


def use_free_cores(setting: int | None = None, note=None) -> int:
    """Set torch's threads once, to the cores other processes leave free (a compare, a chat: no training steps to
    follow the load from); returns the number set."""
    threads = explicit_threads(setting) or _probe(usable_cores(), note, "for this command")[0]
    _set(threads)
    return threads


def _set(n: int) -> None:
    import torch  # heavy: only when threads are set, in a process that trains or generates

    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
