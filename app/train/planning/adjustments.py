"""What the plan changed in a run's config, and why: each planning step's changes applied with the lines it said
as their reason (``Steps``), kept as ``Adjustment`` values, and said a line per step (``adjustment_lines``: whole in
the dry run and config.yaml's header, brief at the end of a run).

Owns the record of the plan's changes. Must not decide any of them (the planning modules do, make_plan applies).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.config.build import with_values
from app.config.keys import differences
from app.config.schema import AppConfig


@dataclass(frozen=True)
class Adjustment:
    """A config value the plan changed, and why."""

    key: str
    was: str  # as YAML
    now: str
    reason: str

    def line(self) -> str:
        return f"{self.key}: {self.was} -> {self.now} ({self.reason})"


BRIEF = 100  # characters of a reason the end of a run shows (config.yaml keeps it whole)


def adjustment_lines(adjustments, brief: bool = False) -> list[str]:
    """A line per planning step: the keys one step changed together, with its reason once (an image run's step sets
    model.images and training.packing for one reason). ``brief``: the reason's first clause, at most BRIEF
    characters, for status.json and the run's summary; the dry run and config.yaml's header keep it whole."""
    groups: list[list] = []
    for a in adjustments:
        if groups and groups[-1][0].reason == a.reason:
            groups[-1].append(a)
        else:
            groups.append([a])
    lines = []
    for group in groups:
        reason = group[0].reason
        if brief:
            reason = reason.split("; ")[0]
            reason = reason if len(reason) <= BRIEF else reason[:BRIEF - 3].rsplit(" ", 1)[0] + "..."
        lines.append(", ".join(f"{a.key}: {a.was} -> {a.now}" for a in group) + f" ({reason})")
    return lines


@dataclass
class Steps:
    """Applies what each planning step decided, paired with the lines it said (the reasons)."""

    note: Any = None
    said: list[str] = field(default_factory=list)
    adjustments: list[Adjustment] = field(default_factory=list)
    _mark: int = 0

    def say(self, line: str) -> None:
        self.said.append(line)
        if self.note:
            self.note(line)

    def settle(self) -> None:
        """The lines said so far are news of their own, not reasons for the next change."""
        self._mark = len(self.said)

    def apply(self, cfg: AppConfig, changes: dict) -> AppConfig:
        """``cfg`` with ``changes`` ({dotted key: value}) applied, each recorded with the lines said since the
        last step as its reason."""
        if not changes:
            return cfg
        after = with_values(cfg, changes)
        reason = "; ".join(self.said[self._mark:]) or "fitted by the plan"
        self._mark = len(self.said)
        self.adjustments += [Adjustment(k, was, now, reason) for k, was, now in differences(cfg, after)]
        return after
