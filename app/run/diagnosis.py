"""Why a run's reward is flat: the signals TRL and the run log every step, turned into sentences a user can act on.

Each check reads the last ``WINDOW`` logged steps (metrics.jsonl lines; nothing is said before there are that many;
a figure TRL logs only on the steps that sample needs ``MIN_POINTS`` values in them) and, when its signal persists,
says once what it sees, in numbers, and what to change:

    flat_groups   GRPO: on average at least ``FLAT_GROUPS`` of the groups had identical rewards
                  (frac_reward_zero_std): no advantage, nothing learned from them
    truncated     GRPO: on average at least ``TRUNCATED`` of the completions hit max_completion_length
                  (completions/clipped_ratio): cut answers, usually unrewarded
    unreachable   a task component (reference, accuracy, judge) stayed at most ``UNREACHABLE`` of its range on every
                  step: nothing the model writes earns it
    gamed         a form component (format, json, regex) rose to at least ``SATURATED`` of its maximum while every
                  task component stayed at most ``GAMED_TASK`` of its range; or the training reward rose by
                  ``REWARD_RISE`` of its weights while held-out accuracy (3 points or more) did not rise
    saturated     the total reward is flat and a form component sat at its maximum from the first steps to the last:
                  it pays every completion the same, so it teaches nothing
    frozen        the adapter's weights moved less than ``FROZEN`` of their size over the window (adapter/update,
                  measured by the run) although gradients were not zero: the learning rate is too small to change what
                  the model writes (every method)

The same function reads a finished run's metrics.jsonl (``qlora-app doctor RUN``) and a live run's lines (the run's
callback), so both say the same. Thresholds are chosen to stay silent on the demo's runs (3 seeds, tested) and on
healthy runs; docs/rewards.md lists them. Standard library only: `runs` and the UI read it.

Owns: the diagnosis of a run's curves. Must not change a run (it says; the user decides).
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field
from statistics import fmean

from app.config.reward_components import BY_NAME, TASK_COMPONENTS
from app.run import layout

WINDOW = 20  # logged steps a signal must persist over
MIN_POINTS = 3  # values a check needs within the window (TRL logs sampling figures only on steps that sample)
FLAT_GROUPS = 0.5
TRUNCATED = 0.3
UNREACHABLE = 0.01
SATURATED = 0.9
GAMED_TASK = 0.1
REWARD_RISE = 0.05  # of the sum of the weights: a rise of the total reward that is more than noise
FLAT_REWARD = 0.02  # of the sum of the weights: a total reward that moved less than this is flat
HELD_OUT_RISE = 0.02  # held-out accuracy that rose less than this did not rise
FROZEN = 1e-4  # the adapter moved less than this share of its size over the window


@dataclass(frozen=True)
class Facts:
    """What the diagnosis needs of a run's config."""

    method: str
    weights: dict  # component -> weight, the components the run scores with
    learning_rate: float | None = None
    num_generations: int | None = None
    temperature: float | None = None
    max_completion_length: int | None = None
    reference_match: str | None = None

    @classmethod
    def of(cls, cfg) -> "Facts":
        """From an AppConfig (the run's config.yaml)."""
        g = cfg.grpo
        return cls(cfg.method, {k: w for k, w in cfg.reward.effective_weights().items() if w},
                   cfg.training.learning_rate, g.num_generations, g.temperature, g.max_completion_length,
                   cfg.reward.reference_match)


@dataclass
class Finding:
    kind: str
    step: int
    message: str
    numbers: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _series(records: list[dict], key: str) -> list[float]:
    return [r[key] for r in records if isinstance(r.get(key), (int, float))]


def _span(last: list[dict]) -> str:
    """The steps a window covers, in words ("steps 41-60")."""
    return f"steps {last[0].get('step', '?')}-{last[-1].get('step', '?')}"


def _component(name: str) -> str:
    return f"{layout.COMPONENT_PREFIX}{name}{layout.COMPONENT_SUFFIX}"


def _range(name: str) -> float:
    spec = BY_NAME.get(name)
    return (spec.high - spec.low) if spec else 1.0


def is_step(record: dict) -> bool:
    """A training step's line (a held-out evaluation of a step that was not logged has a line of its own)."""
    return any(k in record for k in ("loss", "reward", layout.ADAPTER_UPDATE))


def diagnose(records: list[dict], facts: Facts) -> list[Finding]:
    """Every finding the logged steps ``records`` (metrics.jsonl lines, in step order) show for a run of ``facts``;
    [] when fewer than WINDOW steps are logged or nothing persisted."""
    train = [r for r in records if is_step(r)]
    return _diagnose(train[:WINDOW // 2], train[-WINDOW:], len(train), _series(records, layout.EVAL_ACCURACY), facts)


def _diagnose(early: list[dict], last: list[dict], steps: int, held: list[float], facts: Facts) -> list[Finding]:
    """The checks on the first WINDOW/2 logged steps, the last WINDOW, how many there were and the held-out
    accuracies."""
    if steps < WINDOW:
        return []
    step = int(last[-1].get("step", steps))
    out = []
    for check in (_flat_groups, _truncated, _unreachable, _gamed, _saturated, _frozen):
        found = check(last, early, held, facts)
        if found:
            kind, message, numbers = found
            out.append(Finding(kind, step, message, numbers))
    return out


def _flat_groups(last, early, held, f: Facts):
    flat = _series(last, "frac_reward_zero_std")
    if f.method != "grpo" or len(flat) < MIN_POINTS or fmean(flat) < FLAT_GROUPS:
        return None
    reward = _series(last, "reward")
    level = f" (mean reward {fmean(reward):.2f})" if reward else ""
    return ("flat_groups",
            f"{fmean(flat):.0%} of GRPO's groups had identical rewards over {_span(last)} "
            f"(frac_reward_zero_std){level}: no advantage, nothing learned from them; raise grpo.num_generations "
            f"(now {f.num_generations}) or grpo.temperature (now {f.temperature:g}), or the task is too hard or too "
            "easy for this model", {"frac_reward_zero_std": round(fmean(flat), 3)})


def _truncated(last, early, held, f: Facts):
    clipped = _series(last, "completions/clipped_ratio")
    if f.method != "grpo" or len(clipped) < MIN_POINTS or fmean(clipped) < TRUNCATED:
        return None
    return ("truncated",
            f"{fmean(clipped):.0%} of completions hit max_completion_length ({f.max_completion_length} tokens) over "
            f"{_span(last)}: their answers are cut off, so they rarely earn the reward; raise "
            "grpo.max_completion_length, or ask for shorter answers (the prompt, reward.length_target)",
            {"clipped_ratio": round(fmean(clipped), 3)})


def _task_components(f: Facts) -> list[str]:
    return [c for c in TASK_COMPONENTS if c in f.weights]


def _unreachable(last, early, held, f: Facts):
    for name in _task_components(f):
        values = _series(last, _component(name))
        if len(values) >= MIN_POINTS and max(values) - BY_NAME[name].low <= UNREACHABLE * _range(name):
            how = f" (reward.reference_match={f.reference_match})" if name == "reference" and f.reference_match else ""
            hint = ("for free-text references set reward.reference_match=overlap, or judge the answers "
                    "(reward.judge.url / reward.judge.model); else the task is too hard for this model"
                    if name == "reference" else "check it on a few answers with `qlora-app score`; the task may be "
                    "too hard for this model")
            return ("unreachable",
                    f"{name} stayed at {max(values):.2f} on every logged step of {_span(last)}{how}: nothing the "
                    f"model writes earns it, so it cannot guide training; {hint}", {name: round(max(values), 4)})
    return None


def _gamed(last, early, held, f: Facts):
    tasks = _task_components(f)
    task_late = {n: fmean(v) for n in tasks if (v := _series(last, _component(n)))}
    if task_late and all(v - BY_NAME[n].low <= GAMED_TASK * _range(n) for n, v in task_late.items()):
        for name in f.weights:
            spec = BY_NAME.get(name)
            if spec is None or name in TASK_COMPONENTS or spec.high <= 0:
                continue
            late, first = _series(last, _component(name)), _series(early, _component(name))
            if late and first and fmean(late) >= SATURATED * spec.high and fmean(late) > fmean(first) + 0.1:
                task = ", ".join(f"{n} stayed at {v:.2f}" for n, v in task_late.items())
                main = max(task_late, key=lambda n: f.weights.get(n, 0))
                return ("gamed",
                        f"{name} rose from {fmean(first):.2f} to {fmean(late):.2f} while {task}: the reward pays "
                        f"for the {name} alone; raise reward.weights.{main} or lower reward.weights.{name}, and check "
                        f"that {main} can score these answers (`qlora-app score`)",
                        {name: round(fmean(late), 3), **{n: round(v, 3) for n, v in task_late.items()}})
    late, first = _series(last, "reward"), _series(early, "reward")
    scale = sum(abs(w) for w in f.weights.values()) or 1.0
    if len(held) >= 3 and late and first:
        rise = fmean(late) - fmean(first)
        if rise >= REWARD_RISE * scale and max(held[1:]) <= held[0] + HELD_OUT_RISE:
            return ("gamed",
                    f"the training reward rose by {rise:.2f} while held-out accuracy stayed at {held[0]:.0%} -> "
                    f"{held[-1]:.0%} over {len(held)} evaluations: the model learns what the reward pays for, not the "
                    "task; look at which component rose (the curves) and weigh the task's component more",
                    {"reward_rise": round(rise, 3), "heldout_first": held[0], "heldout_last": held[-1]})
    return None


def _saturated(last, early, held, f: Facts):
    late, first = _series(last, "reward"), _series(early, "reward")
    scale = sum(abs(w) for w in f.weights.values()) or 1.0
    if not late or not first or abs(fmean(late) - fmean(first)) >= FLAT_REWARD * scale:
        return None
    for name in f.weights:
        spec = BY_NAME.get(name)
        if spec is None or name in TASK_COMPONENTS or spec.high <= 0:
            continue
        values = _series(early + last, _component(name))
        if len(values) >= MIN_POINTS and min(values) >= spec.high - 1e-6:
            return ("saturated",
                    f"the reward is flat and {name} was at its maximum ({spec.high:g}) on every step: it pays every "
                    f"completion the same, so it teaches nothing; the signal has to come from the other components "
                    f"(their curves), or lower reward.weights.{name}", {name: spec.high})
    return None


def _frozen(last, early, held, f: Facts):
    moved, grads = _series(last, layout.ADAPTER_UPDATE), _series(last, "grad_norm")
    # no gradient (every GRPO group flat, a zero loss) is a reason of its own for standing still, said by the others
    if len(moved) < WINDOW - 1 or sum(moved) >= FROZEN or (grads and max(grads) == 0):
        return None
    lr = f" (training.learning_rate {f.learning_rate:g})" if f.learning_rate else ""
    return ("frozen",
            f"the adapter's weights moved {sum(moved):.1e} of their size over {_span(last)}{lr}: too little "
            "to change what the model writes; raise training.learning_rate (LoRA usually trains at 1e-5 to 2e-4, "
            "about 10x full fine-tuning)", {"adapter_update": sum(moved)})


class Watch:
    """A live run's diagnosis: ``add(record)`` after each logged line returns what is new (each kind is said once per
    run; a resumed run keeps what it said). Keeps only what the checks read: the first WINDOW/2 steps, the last
    WINDOW, the held-out accuracies."""

    def __init__(self, facts: Facts, said: list[dict] | None = None):
        self.facts = facts
        self.early: list[dict] = []
        self.last: deque[dict] = deque(maxlen=WINDOW)
        self.steps = 0
        self.held: list[float] = []
        self.found: list[dict] = list(said or [])

    def add(self, record: dict) -> list[dict]:
        if isinstance(record.get(layout.EVAL_ACCURACY), (int, float)):
            self.held.append(record[layout.EVAL_ACCURACY])
        if not is_step(record):
            return []
        self.steps += 1
        if len(self.early) < WINDOW // 2:
            self.early.append(record)
        self.last.append(record)
        known = {d["kind"] for d in self.found}
        new = [d.to_dict() for d in _diagnose(self.early, list(self.last), self.steps, self.held, self.facts)
               if d.kind not in known]
        self.found += new
        return new
