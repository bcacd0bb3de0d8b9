"""A live run's diagnosis, and what withdraws it: the checks of app/run/diagnosis.py read after each logged line
(``Watch``: each kind said once per run), and a warning that a learning run contradicts withdrawn with when and why
(``withdraw``: during training when its curves or held-out points show it learns, at the end when its proof does).

Owns the live reading and the withdrawals. Must not define a check (app/run/diagnosis.py does). Standard library
only.
"""

from __future__ import annotations

from app.run import layout
from app.run.diagnosis import (
    CONTRADICTED,
    HELD_OUT_LEARNING,
    STEPS,
    WINDOW,
    Facts,
    Finding,
    check_window,
    is_step,
    judge_totals,
    learning_why,
    marked_line,
    window,
)

CONTRADICTED_KINDS = CONTRADICTED  # what a run that learns withdraws (app/run/diagnosis.py says which)


def standing(found: list[dict] | None) -> list[dict]:
    """The diagnoses of a run (status.json's, as the watch recorded them) that still stand: not withdrawn."""
    return [d for d in found or [] if not d.get("withdrawn")]


def withdraw(found: list[dict], step: int, why: str) -> list[dict]:
    """Withdraw what ``found`` said that a learning run contradicts (CONTRADICTED_KINDS, not withdrawn yet): each
    keeps its words and gains why it no longer holds; returns a notice per withdrawal (kind ``<kind>_withdrawn``)."""
    notices = []
    for d in found:
        if d.get("kind") in CONTRADICTED_KINDS and not d.get("withdrawn"):
            d["withdrawn"] = {"step": step, "why": why}
            d["message"] = f"{d['message']} [withdrawn at step {step}: the run learned since: {why}]"
            notices.append(Finding(f"{d['kind']}_withdrawn", step, f"the diagnosis '{d['kind']}' (said at step "
                                   f"{d['step']}) is withdrawn: {why}").to_dict())
    return notices


class Watch:
    """A live run's diagnosis: ``add(record)`` after each logged line returns what is new (each kind is said once per
    run; a resumed run keeps what it said). Keeps only what the checks read: the lines of the first WINDOW/2 steps,
    those of the last WINDOW, the held-out accuracies, the judge's totals."""

    def __init__(self, facts: Facts, said: list[dict] | None = None):
        self.facts = facts
        self.early: list[dict] = []
        self.last: list[dict] = []
        self.steps = 0
        self.before = 0  # the step of the last training line
        self.held: list[float] = []
        self.judged = (0.0, 0.0)
        self.found: list[dict] = list(said or [])

    def add(self, record: dict) -> list[dict]:
        if isinstance(record.get(layout.EVAL_ACCURACY), (int, float)):
            self.held.append(record[layout.EVAL_ACCURACY])
        calls, failures = judge_totals([record])  # a count may come on a line of its own (the run's end)
        self.judged = (self.judged[0] + calls, self.judged[1] + failures)
        if is_step(record):
            line = marked_line(record, self.before)
            self.before = max(self.before, int(record.get("step", self.before + 1)))
            self.steps += line[STEPS]
            self.early = window(self.early + [line], WINDOW // 2, last=False)
            self.last = window(self.last + [line])
        elif not calls:
            return []  # a held-out evaluation's line: kept for the next step's checks
        known = {d["kind"] for d in self.found}
        new = [d.to_dict() for d in check_window(self.early, self.last, self.steps, self.held, self.facts,
                                                 self.judged)
               if d.kind not in known]
        self.found += new
        why = learning_why(self.early, self.last, self.held, self.facts) if self.steps >= WINDOW else None
        return new + (withdraw(self.found, self.before, why) if why else [])

    def proved(self, base: float | None, adapter: float | None) -> list[dict]:
        """The run's proof (held-out accuracy of the base and of the adapter): a lift of HELD_OUT_LEARNING or more
        withdraws what the run's learning contradicts, so the end of a run never says it teaches nothing above a
        proof that it did; returns the notices."""
        if base is None or adapter is None or adapter - base < HELD_OUT_LEARNING:
            return []
        return withdraw(self.found, self.before, f"its proof: held-out accuracy {base:.1%} -> {adapter:.1%} "
                                                 f"({(adapter - base) * 100:+.0f} points)")
