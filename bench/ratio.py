"""Ratios that hold on a busy machine.

One run of each side gives one ratio, and on a shared 2-core machine one ratio can be anything (a packing
speed-up of 0.39 on a busy afternoon, 1.42 on a quiet one). So every ratio here comes from repeats run
*interleaved* (A B, then B A, ...: drift in the machine's speed and any first-run/second-run effect hit both sides
alike), one ratio per adjacent pair, reported as the median with the spread (lowest and highest pair). When the
middle half of the pairs is wider than ``tolerance`` (relative to the median) the ratio is not trusted: its value
is printed as null, the reason is said, and ``run.py --strict`` exits non-zero -- a wrong number is never printed
as a measurement.

Within one run, a step's time is the median over its optimizer steps (see steptimer.summary): a burst of load
that stalls a few steps moves a mean, not a median.

Each ratio is measured twice over the same pairs: in wall-clock time and in the CPU time the process spent (user +
system, all its threads). A neighbour on a shared machine steals wall time from one side of a pair and not the other;
the CPU time a fixed amount of work takes moves much less (less cache, a slower shared core: a few percent, not the
30% a stolen core costs the wall clock). ``steadier`` reports the wall clock where its pairs agree, else the CPU time
where those agree better, and says which; with OpenMP's threads made to sleep rather than spin while they wait
(OMP_WAIT_POLICY=PASSIVE, on both sides), a thread waiting for a stolen core does not bill its wait as CPU time. The two
need not agree where the sides use the cores differently (``steadier`` says why the wall clock comes first); on a GPU
the CPU time only measures the host's side, so there the wall clock is the one that counts (``wall_only``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

TOLERANCE = 0.10  # the middle half of the pairs wider than this (relative to the median): not trusted


@dataclass
class Ratio:
    name: str
    pairs: list[float]  # one ratio per interleaved pair
    tolerance: float = TOLERANCE
    sides: list[tuple[float, float]] = field(default_factory=list)  # the (a, b) measurements behind each pair
    measure: str = "wall"  # what the sides were measured in: "wall" (clock) or "cpu" (process CPU time)

    @property
    def median(self) -> float:
        return statistics.median(self.pairs)

    @property
    def low(self) -> float:
        return min(self.pairs)

    @property
    def high(self) -> float:
        return max(self.pairs)

    @property
    def quartiles(self) -> tuple[float, float]:
        if len(self.pairs) < 2:
            return self.pairs[0], self.pairs[0]
        q1, _, q3 = statistics.quantiles(self.pairs, n=4, method="inclusive")
        return q1, q3

    @property
    def spread(self) -> float:
        """Width of the middle half of the pairs, relative to the median. (Not the full range: on a shared
        machine one pair in five can meet a burst of load, and the median already ignores it; when half of them
        disagree, no number is right.)"""
        q1, q3 = self.quartiles
        return (q3 - q1) / abs(self.median) if self.median else float("inf")

    @property
    def trusted(self) -> bool:
        return len(self.pairs) >= 3 and self.spread <= self.tolerance

    def why_not(self) -> str | None:
        if self.trusted:
            return None
        if len(self.pairs) < 3:
            return f"{len(self.pairs)} pair(s) only: too few to judge the spread by (3 at least)"
        q1, q3 = self.quartiles
        return (f"the middle half of the pairs spans {q1:.3f}-{q3:.3f} ({self.spread:.0%} of the median, over the "
                f"{self.tolerance:.0%} allowed): the machine was too noisy to trust it; run again on a quiet machine")

    def text(self, nd: int = 3) -> str:
        """'1.021 (0.998-1.030, 5 pairs, CPU time)' or 'not trusted: ...' for tables."""
        head = (f"{self.median:.{nd}f} ({self.low:.{nd}f}-{self.high:.{nd}f}, {len(self.pairs)} pairs, "
                f"{'CPU time' if self.measure == 'cpu' else 'wall clock'})")
        return head if self.trusted else f"**not trusted**: median {head}; {self.why_not()}"


def interleave(run_a: Callable[[str], float], run_b: Callable[[str], float], reps: int) -> list[tuple[float, float]]:
    """``reps`` measurements of each side, alternating which goes first: [(a, b), ...]. Each callable gets a tag
    unique to its run (for its output folders) and returns its measurement."""
    out = []
    for rep in range(reps):
        if rep % 2 == 0:
            a = run_a(f"a{rep}")
            b = run_b(f"b{rep}")
        else:
            b = run_b(f"b{rep}")
            a = run_a(f"a{rep}")
        out.append((a, b))
    return out


def ratio(name: str, measured: list[tuple[float, float]], tolerance: float = TOLERANCE,
          invert: bool = False, measure: str = "wall") -> Ratio:
    """a / b per pair (b / a with ``invert``: a speed-up from times)."""
    pairs = [(b / a) if invert else (a / b) for a, b in measured]
    return Ratio(name, pairs, tolerance, list(measured), measure)


def steadier(wall: Ratio, cpu: Ratio | None, wall_only: bool = False) -> tuple[Ratio, Ratio | None]:
    """(the reported ratio, the other) of the same pairs measured in wall time and in CPU time: the wall clock
    (what a user waits for) whenever its pairs agree; where they do not (a neighbour took a core), the CPU time when
    its pairs agree better. Not the steadier of two trusted ones: CPU time counts work, so a side that keeps both
    cores busier looks slower in it than on the clock (the GRPO sampler: 3.12x on the clock, 2.63x in CPU time, both
    steady, on 2026-11-28). ``cpu`` None (not recorded) or ``wall_only`` (a GPU run: its CPU time is only the
    host's): the wall clock."""
    if cpu is None or wall_only or len(cpu.pairs) != len(wall.pairs) or wall.trusted:
        return wall, cpu
    return (cpu, wall) if cpu.spread < wall.spread else (wall, cpu)


def as_json(ratios: list[Ratio], nd: int = 3) -> dict:
    """{name: median or None, ..., "spread": {name: [low, high]}, "untrusted": {name: reason}}."""
    out: dict = {r.name: (round(r.median, nd) if r.trusted else None) for r in ratios}
    out["spread"] = {r.name: [round(r.low, nd), round(r.high, nd)] for r in ratios}
    out["pairs"] = {r.name: len(r.pairs) for r in ratios}
    out["untrusted"] = {r.name: r.why_not() for r in ratios if not r.trusted}
    out["measure"] = {r.name: r.measure for r in ratios}
    return out
