"""The typed result of a base-vs-adapter comparison. The CLI table, ``--json``, the HTML page, the UI's view and
the demo all render from a ``Comparison``; ``to_dict`` is the JSON schema (compare.json), ``from_dict`` reads it
back. Standard library only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Iterable

from app.config.reward_components import BOILERPLATE
from app.eval.uncertainty import accuracy_lift, reward_lift

SIDES = ("base", "adapter")
# Rewards closer than this count as a tie when correctness did not change: the length component alone moves the
# shaped total by a few thousandths between two wrong answers, which says nothing about which one is better.
REWARD_TOLERANCE = 0.05


@dataclass
class Cell:
    """One side's answer to one prompt, scored with the run's shaped reward."""

    text: str
    tokens: int
    reward: float
    components: dict[str, float | None]
    correct: bool | None  # None: the row has no reference to judge against
    # A tool run's answer: the turns after the prompt (calls, results, the answer), its calls and failed calls
    turns: list[dict] | None = None
    tool_calls: int = 0
    tool_failures: int = 0

    @property
    def tools_worked(self) -> bool:
        """The answer called a tool and every call gave a result."""
        return self.tool_calls > 0 and self.tool_failures == 0


@dataclass
class Row:
    prompt: str
    reference: str | None
    source: str  # "heldout" or "prompt"
    base: Cell
    adapter: Cell
    dataset: str | None = None  # a mix's held-out row: the name of the dataset it is from (data.mix)
    images: list[str] | None = None  # a row with pictures: small copies as data URLs (the page and the UI show them)
    teacher: Cell | None = None  # a distillation run: its teacher's answer to the same prompt

    @property
    def delta(self) -> float:
        return self.adapter.reward - self.base.reward

    @property
    def verdict(self) -> str:
        """'win' / 'loss' / 'tie' for the adapter: a change in correctness decides; otherwise the reward, beyond
        REWARD_TOLERANCE."""
        b, a = self.base.correct, self.adapter.correct
        if b is not None and a is not None and a != b:
            return "win" if a else "loss"
        return "win" if self.delta > REWARD_TOLERANCE else "loss" if self.delta < -REWARD_TOLERANCE else "tie"


@dataclass
class SideSummary:
    accuracy: float | None  # over rows with a reference
    n_judged: int
    mean_reward: float | None
    components: dict[str, float | None]
    mean_length: float | None  # characters
    mean_tokens: float | None
    boilerplate_rate: float | None  # share of answers the boilerplate component penalised
    # A tool run: the share of answers whose tool calls all succeeded (None: no tools), the calls per answer
    tool_success: float | None = None
    tool_calls: float | None = None


@dataclass
class Summary:
    """Over the held-out rows only, when there are any: a prompt someone typed has no reference and is not a sample
    of the data, so it never moves the held-out accuracy or mean reward (it is shown, and counted in ``prompts``)."""

    base: SideSummary
    adapter: SideSummary
    wins: int
    losses: int
    ties: int
    n: int  # rows the figures are of
    heldout: bool = True  # whether those rows are held-out rows (else: only typed prompts were compared)
    prompts: int = 0  # typed prompts beside them, not in the figures
    # A mix: the same figures per dataset ({name: {n, base: {accuracy, mean_reward}, adapter: {...}, wins, ...}})
    by_dataset: dict[str, dict] | None = None
    # what "correct" means in the accuracy: the run's reference match in words ("overlap: ROUGE-L F1 ... >= 0.5")
    correct_when: str | None = None
    # a distillation run: its teacher on the same rows, and the share of the teacher's lead over the base the
    # adapter closed ((adapter - base) / (teacher - base), by accuracy, else mean reward; None: no lead to close)
    teacher: SideSummary | None = None
    closed: float | None = None
    # how sure the lift is (app/eval/uncertainty.py): {"accuracy": Lift.to_dict() or None, "mean_reward": ...}
    lift: dict | None = None

    @classmethod
    def of(cls, rows: list[Row]) -> "Summary":
        held = [r for r in rows if r.source == "heldout"]
        judged = held or rows
        sides = {side: side_summary([getattr(r, side) for r in judged]) for side in SIDES}
        verdicts = [r.verdict for r in judged]
        names = list(dict.fromkeys(r.dataset for r in held if r.dataset))
        by = {name: _figures([r for r in held if r.dataset == name]) for name in names} if names else None
        teacher = side_summary([r.teacher for r in judged]) if judged and all(r.teacher for r in judged) else None
        return cls(**sides, wins=verdicts.count("win"), losses=verdicts.count("loss"), ties=verdicts.count("tie"),
                   n=len(judged), heldout=bool(held), prompts=len(rows) - len(held), by_dataset=by, teacher=teacher,
                   closed=closed_share(sides["base"], sides["adapter"], teacher), lift=lifts(judged))


def lifts(rows: list[Row]) -> dict:
    """The accuracy's and the mean reward's adapter-minus-base difference over ``rows``, each with its interval
    (and McNemar's test for the accuracy), as compare.json keeps them; None for a figure without rows."""
    right = [(r.base.correct, r.adapter.correct) for r in rows
             if r.base.correct is not None and r.adapter.correct is not None]
    accuracy, reward = accuracy_lift(right), reward_lift([(r.base.reward, r.adapter.reward) for r in rows])
    return {"accuracy": accuracy.to_dict() if accuracy else None, "mean_reward": reward.to_dict() if reward else None}


def closed_share(base: SideSummary, adapter: SideSummary, teacher: SideSummary | None) -> float | None:
    """The share of the teacher's lead over the base that the adapter closed: by accuracy where the rows have
    references, else by mean reward; None without a teacher or when the teacher does not lead."""
    if teacher is None:
        return None
    key = "accuracy" if base.accuracy is not None and teacher.accuracy is not None else "mean_reward"
    b, a, t = getattr(base, key), getattr(adapter, key), getattr(teacher, key)
    if None in (b, a, t) or t - b <= 1e-9:
        return None
    return (a - b) / (t - b)


def _figures(rows: list[Row]) -> dict:
    """One dataset's part of a mix's comparison: its rows, each side's accuracy and mean reward, the verdicts."""
    verdicts = [r.verdict for r in rows]
    return {"n": len(rows), **{side: {k: getattr(side_summary([getattr(r, side) for r in rows]), k)
                                      for k in ("accuracy", "mean_reward")} for side in SIDES},
            "wins": verdicts.count("win"), "losses": verdicts.count("loss"), "ties": verdicts.count("tie")}


def _mean(xs: Iterable[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def side_summary(cells: list[Cell]) -> SideSummary:
    judged = [c.correct for c in cells if c.correct is not None]
    comps = list(dict.fromkeys(k for c in cells for k in c.components))  # reward order, not a-z
    return SideSummary(
        accuracy=_mean(float(x) for x in judged),
        n_judged=len(judged),
        mean_reward=_mean(c.reward for c in cells),
        components={k: _mean(c.components.get(k) for c in cells) for k in comps},
        mean_length=_mean(len(c.text) for c in cells),
        mean_tokens=_mean(c.tokens for c in cells),
        # The boilerplate component is 0 for a clean answer and a penalty (< 0) otherwise.
        boilerplate_rate=_mean(None if c.components.get(BOILERPLATE) is None
                               else float(c.components[BOILERPLATE] < 0) for c in cells),
        tool_success=_mean(float(c.tools_worked) for c in cells) if any(c.turns is not None for c in cells) else None,
        tool_calls=_mean(c.tool_calls for c in cells) if any(c.turns is not None for c in cells) else None,
    )


@dataclass
class Comparison:
    rows: list[Row]
    summary: Summary
    config: dict = field(default_factory=dict)  # what was compared and how (adapter, base, dataset, seed, ...)
    # preference data: app.eval.preference.PreferenceSummary of the held-out rows' pairs, as a dict; else None
    preference: dict | None = None

    @classmethod
    def of(cls, rows: list[Row], config: dict, preference: dict | None = None) -> "Comparison":
        return cls(rows=rows, summary=Summary.of(rows), config=config, preference=preference)

    def to_dict(self) -> dict:
        d = asdict(self)
        for row in d["rows"]:  # text rows keep compare.json's shape, and so does a run without a teacher
            for key in ("images", "teacher"):
                if row.get(key) is None:
                    row.pop(key, None)
        if d["summary"]["teacher"] is None:
            d["summary"].pop("teacher")
            d["summary"].pop("closed")
        return d

    @classmethod
    def from_dict(cls, data: dict) -> "Comparison":
        rows = [Row(prompt=r["prompt"], reference=r.get("reference"), source=r.get("source", "heldout"),
                    base=Cell(**r["base"]), adapter=Cell(**r["adapter"]), dataset=r.get("dataset"),
                    images=r.get("images"), teacher=Cell(**r["teacher"]) if r.get("teacher") else None)
                for r in data["rows"]]
        s = data["summary"]
        summary = Summary(base=SideSummary(**s["base"]), adapter=SideSummary(**s["adapter"]), wins=s["wins"],
                          losses=s["losses"], ties=s["ties"], n=s["n"], heldout=s.get("heldout", True),
                          prompts=s.get("prompts", 0), by_dataset=s.get("by_dataset"),
                          correct_when=s.get("correct_when"),
                          teacher=SideSummary(**s["teacher"]) if s.get("teacher") else None, closed=s.get("closed"),
                          lift=s.get("lift"))
        return cls(rows=rows, summary=summary, config=dict(data.get("config") or {}),
                   preference=data.get("preference"))
