"""Why a run's reward is flat: the signals TRL and the run log, turned into sentences a user can act on.

Checks count training steps, not logged lines: a metrics.jsonl line stands for the steps since the line before it
(TRL averages its figures over them), so a run logging every 10th step is read as early as one logging every step.
Each check reads the last ``WINDOW`` steps (nothing is said before there are that many; a figure TRL logs only on the
steps that sample needs ``MIN_POINTS`` steps of it) and, when its signal persists, says once what it sees, in
numbers, and what to change:

    constant      GRPO: every completion of every batch scored the same (reward_std 0): the reward cannot tell
                  answers apart, and more samples cannot help; names the reward functions that never varied
    flat_groups   GRPO: on average at least ``FLAT_GROUPS`` of the groups had identical rewards
                  (frac_reward_zero_std) while the batch's rewards differed: sampling is too narrow for the task
    truncated     GRPO: on average at least ``TRUNCATED`` of the completions hit max_completion_length
                  (completions/clipped_ratio): cut answers, usually unrewarded
    unreachable   a task component (reference, accuracy, judge) stayed at most ``UNREACHABLE`` of its range on every
                  step: nothing the model writes earns it
    gamed         a form component (format, json, regex) rose to at least ``SATURATED`` of its maximum while every
                  task component stayed at most ``GAMED_TASK`` of its range; or the training reward rose by
                  ``REWARD_RISE`` of its weights while held-out accuracy (3 points or more) did not rise
    saturated     the total reward is flat and a form component sat at its maximum from the first steps to the last:
                  it pays every completion the same, so it teaches nothing
    length_drift  GRPO: the completions' mean length grew by at least ``LENGTH_RISE`` of itself from the first steps to
                  the last while every task component stayed flat (rose less than ``TASK_RISE`` of its range): the
                  reward pays length (the commonest way a shaped reward is gamed)
    frozen        the adapter's weights moved less than ``FROZEN`` of their size over the window (adapter/update,
                  measured by the run) although gradients were not zero: the learning rate is too small to change what
                  the model writes (every method)
    judge_failing the judge failed at least ``JUDGE_FAILING`` of its judgements (at least ``JUDGE_MIN_CALLS`` of them,
                  said as soon as there are: no window to wait for): its component scores nothing

A run that is learning contradicts the checks that say it cannot: when a task component rose by ``TASK_RISE`` of
its range from the first steps to the last, or the later half of the held-out evaluations averages
``HELD_OUT_LEARNING`` above the first, flat_groups, saturated, frozen and gamed stay silent, and one of them said
before the run learned is withdrawn (``withdraw``: its words kept, with when and why; the proof's lift withdraws it
too, at the end) (measured: the tools
demo's format component sits at its maximum while its reference rises; docs/performance.md has the classifier's
table, `python bench/bench_diagnosis.py`).

The same function reads a finished run's metrics.jsonl (``qlora-app doctor RUN``) and a live run's lines (the run's
callback), so both say the same. Thresholds are listed in docs/rewards.md. Standard library only: `runs` and the UI
read it.

Owns: the diagnosis of a run's curves. Must not change a run (it says; the user decides).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from statistics import fmean

from app.config.methods import named
from app.config.reward_components import BY_NAME, TASK_COMPONENTS
from app.run import layout

WINDOW = 20  # training steps a signal must persist over
MIN_POINTS = 3  # steps of a figure a check needs within the window (TRL logs sampling figures only when it samples)
FLAT_GROUPS = 0.5
TRUNCATED = 0.3
UNREACHABLE = 0.01
SATURATED = 0.9
GAMED_TASK = 0.1
REWARD_RISE = 0.05  # of the sum of the weights: a rise of the total reward that is more than noise
FLAT_REWARD = 0.02  # of the sum of the weights: a total reward that moved less than this is flat
HELD_OUT_RISE = 0.02  # held-out accuracy that rose less than this did not rise
HELD_OUT_LEARNING = 0.05  # held-out accuracy whose later evaluations average this much above the first: learning
TASK_RISE = 0.1  # of a task component's range: a rise from the first steps to the last that is learning, not noise
# (a component sampled at temperature 1 on 16 completions a step moves ~0.05 between two 10-step means by chance)
FROZEN = 1e-4  # the adapter moved less than this share of its size over the window
LENGTH_RISE = 0.5  # the completions' mean length grew by half of itself: drift, not the noise of sampling
CONSTANT = 1e-9  # a batch's reward_std at most this: every completion scored the same
JUDGE_FAILING = 0.5  # share of the judge's judgements that failed
JUDGE_MIN_CALLS = 16  # judgements before the share is read
STEPS = "_steps"  # the training steps a line stands for (set on the diagnosis's own copies, never written)


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

    @property
    def rewarded(self) -> bool:
        """Whether the run sampled and scored rewards (GRPO): the reward's checks have something to read."""
        method = named(self.method)
        return bool(method and method.rewarded)

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


def _weight(record: dict) -> int:
    return record.get(STEPS, 1)


def step_mean(records: list[dict], key: str) -> float | None:
    """The mean of ``key`` over the steps the lines stand for (a line of 10 steps weighs 10)."""
    pairs = [(r[key], _weight(r)) for r in records if isinstance(r.get(key), (int, float))]
    total = sum(w for _, w in pairs)
    return sum(v * w for v, w in pairs) / total if total else None


def _points(records: list[dict], key: str) -> int:
    """How many steps of ``key`` the lines hold."""
    return sum(_weight(r) for r in records if isinstance(r.get(key), (int, float)))


def steps_of(lines: list[dict]) -> int:
    """The training steps the lines stand for."""
    return sum(_weight(r) for r in lines)


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


def marked_line(record: dict, before: int) -> dict:
    """A training step's line marked with the steps it stands for: those since ``before``, the previous line's."""
    return {**record, STEPS: max(1, int(record.get("step", before + 1)) - before)}


def step_lines(records: list[dict]) -> list[dict]:
    """The training steps' lines, each a copy marked with the steps it stands for (those since the line before)."""
    out, before = [], 0
    for r in records:
        if is_step(r):
            out.append(marked_line(r, before))
            before = max(before, int(r.get("step", before + 1)))
    return out


def window(lines: list[dict], steps: int = WINDOW, last: bool = True) -> list[dict]:
    """The fewest lines at the end (``last``) or the start that stand for ``steps`` steps, or all of them."""
    seq = reversed(lines) if last else iter(lines)
    out, n = [], 0
    for r in seq:
        if n >= steps:
            break
        out.append(r)
        n += _weight(r)
    return out[::-1] if last else out


def diagnose(records: list[dict], facts: Facts) -> list[Finding]:
    """Every finding the logged steps ``records`` (metrics.jsonl lines, in step order) show for a run of ``facts``;
    [] when fewer than WINDOW steps are logged or nothing persisted."""
    train = step_lines(records)
    return check_window(window(train, WINDOW // 2, last=False), window(train, WINDOW, last=True), steps_of(train),
                     _series(records, layout.EVAL_ACCURACY), facts, judge_totals(records))


def judge_totals(lines: list[dict]) -> tuple[float, float]:
    """(judgements, failed ones) the lines count (judge/calls, judge/failures)."""
    return (sum(_series(lines, layout.JUDGE_PREFIX + "calls")), sum(_series(lines, layout.JUDGE_PREFIX + "failures")))


def check_window(early: list[dict], last: list[dict], steps: int, held: list[float], facts: Facts,
              judged: tuple[float, float] = (0, 0)) -> list[Finding]:
    """The checks on the lines of the first WINDOW/2 steps, those of the last WINDOW, how many steps there were, the
    held-out accuracies and the judge's (judgements, failures) so far."""
    out = []
    step = int(last[-1].get("step", steps)) if last else 0
    judge = _judge_failing(judged, last)
    if judge:
        out.append(Finding(*judge[:1], step, *judge[1:]))
    if steps < WINDOW:
        return out
    learning = _learning(early, last, held, facts)
    for check in (_constant, _flat_groups, _truncated, _unreachable, _gamed, _length_drift, _saturated, _frozen):
        if learning and check.__name__.lstrip("_") in CONTRADICTED:
            continue
        found = check(last, early, held, facts)
        if found:
            kind, message, numbers = found
            out.append(Finding(kind, step, message, numbers))
    return out


def _learning(early, last, held, f: Facts) -> bool:
    """Whether the run shows it learns: a task component rose by TASK_RISE of its range, or held-out accuracy rose."""
    return learning_why(early, last, held, f) is not None


def learning_why(early, last, held, f: Facts) -> str | None:
    """What shows the run learns (a task component that rose by TASK_RISE of its range, or held-out accuracy whose
    later evaluations average HELD_OUT_LEARNING above the first), in words; None when nothing does."""
    for name in _task_components(f):
        first, late = step_mean(early, _component(name)), step_mean(last, _component(name))
        if first is not None and late is not None and late - first >= TASK_RISE * _range(name):
            return f"{name} rose from {first:.2f} to {late:.2f}"
    later = held[1:][len(held[1:]) // 2:]  # the second half of the evaluations after the first: not one lucky point
    if later and fmean(later) >= held[0] + HELD_OUT_LEARNING:
        return f"held-out accuracy rose from {held[0]:.1%} to {fmean(later):.1%} (its later evaluations)"
    return None


def _judge_failing(judged: tuple[float, float], last: list[dict]):
    calls, failures = judged
    if calls < JUDGE_MIN_CALLS or failures < JUDGE_FAILING * calls:
        return None
    span = f" by step {last[-1].get('step')}" if last else ""
    return ("judge_failing",
            f"the judge failed {int(failures)} of its {int(calls)} judgements{span}: its component scores nothing, so "
            "the run trains on the other components alone; the summary and `qlora-app runs show` say why it failed "
            "(its first failure); fix reward.judge (url, model, the judge's context) or set reward.weights.judge=0",
            {"judge_calls": int(calls), "judge_failures": int(failures)})


def _constant(last, early, held, f: Facts):
    spread = _series(last, "reward_std")
    if not f.rewarded or _points(last, "reward_std") < MIN_POINTS or max(spread) > CONSTANT:
        return None
    spreads = {k for r in last for k in r if k.startswith(layout.COMPONENT_PREFIX) and k.endswith("/std")}
    names = sorted(k[len(layout.COMPONENT_PREFIX):-len("/std")] for k in spreads
                   if max(_series(last, k), default=0) <= CONSTANT)
    level = step_mean(last, "reward")
    which = ", ".join(names) or "the reward"
    return ("constant",
            f"every completion scored the same over {_span(last)} (reward {level:.2f}, reward_std 0; {which} never "
            "varied): the reward cannot tell one answer from another, so GRPO has nothing to learn from and more "
            f"samples or a higher temperature cannot help; check {which} on a few answers with `qlora-app score`, or "
            "give weight to a component that tells answers apart", {"reward": round(level or 0, 4), "constant": names})


def _flat_groups(last, early, held, f: Facts):
    flat = step_mean(last, "frac_reward_zero_std")
    if not f.rewarded or _points(last, "frac_reward_zero_std") < MIN_POINTS or flat < FLAT_GROUPS:
        return None
    if max(_series(last, "reward_std") or [1.0]) <= CONSTANT:
        return None  # every completion scored the same: the reward's fault (constant), not the sampling's
    reward = step_mean(last, "reward")
    level = f" (mean reward {reward:.2f})" if reward is not None else ""
    return ("flat_groups",
            f"{flat:.0%} of GRPO's groups had identical rewards over {_span(last)} "
            f"(frac_reward_zero_std){level} while the batch's rewards differed: no advantage, nothing learned from "
            f"those groups; raise grpo.num_generations (now {f.num_generations}) or grpo.temperature (now "
            f"{f.temperature:g}), or the task is too hard or too easy for this model",
            {"frac_reward_zero_std": round(flat, 3)})


def _truncated(last, early, held, f: Facts):
    clipped = step_mean(last, "completions/clipped_ratio")
    if not f.rewarded or _points(last, "completions/clipped_ratio") < MIN_POINTS or clipped < TRUNCATED:
        return None
    return ("truncated",
            f"{clipped:.0%} of completions hit max_completion_length ({f.max_completion_length} tokens) over "
            f"{_span(last)}: their answers are cut off, so they rarely earn the reward; raise "
            "grpo.max_completion_length, or ask for shorter answers (the prompt, reward.length_target)",
            {"clipped_ratio": round(clipped, 3)})


def _task_components(f: Facts) -> list[str]:
    return [c for c in TASK_COMPONENTS if c in f.weights]


def _unreachable(last, early, held, f: Facts):
    for name in _task_components(f):
        values = _series(last, _component(name))
        low = BY_NAME[name].low
        if _points(last, _component(name)) >= MIN_POINTS and max(values) - low <= UNREACHABLE * _range(name):
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
    task_late = {n: v for n in tasks if (v := step_mean(last, _component(n))) is not None}
    if task_late and all(v - BY_NAME[n].low <= GAMED_TASK * _range(n) for n, v in task_late.items()):
        for name in f.weights:
            spec = BY_NAME.get(name)
            if spec is None or name in TASK_COMPONENTS or spec.high <= 0:
                continue
            late, first = step_mean(last, _component(name)), step_mean(early, _component(name))
            if late is not None and first is not None and late >= SATURATED * spec.high and late > first + 0.1:
                task = ", ".join(f"{n} stayed at {v:.2f}" for n, v in task_late.items())
                main = max(task_late, key=lambda n: f.weights.get(n, 0))
                return ("gamed",
                        f"{name} rose from {first:.2f} to {late:.2f} while {task}: the reward pays "
                        f"for the {name} alone; raise reward.weights.{main} or lower reward.weights.{name}, and check "
                        f"that {main} can score these answers (`qlora-app score`)",
                        {name: round(late, 3), **{n: round(v, 3) for n, v in task_late.items()}})
    late, first = step_mean(last, "reward"), step_mean(early, "reward")
    scale = sum(abs(w) for w in f.weights.values()) or 1.0
    if len(held) >= 3 and late is not None and first is not None:
        rise = late - first
        if rise >= REWARD_RISE * scale and max(held[1:]) <= held[0] + HELD_OUT_RISE:
            return ("gamed",
                    f"the training reward rose by {rise:.2f} while held-out accuracy stayed at {held[0]:.0%} -> "
                    f"{held[-1]:.0%} over {len(held)} evaluations: the model learns what the reward pays for, not the "
                    "task; look at which component rose (the curves) and weigh the task's component more",
                    {"reward_rise": round(rise, 3), "heldout_first": held[0], "heldout_last": held[-1]})
    return None


def _saturated(last, early, held, f: Facts):
    late, first = step_mean(last, "reward"), step_mean(early, "reward")
    scale = sum(abs(w) for w in f.weights.values()) or 1.0
    if late is None or first is None or abs(late - first) >= FLAT_REWARD * scale:
        return None
    for name in f.weights:
        spec = BY_NAME.get(name)
        if spec is None or name in TASK_COMPONENTS or spec.high <= 0:
            continue
        values = _series(early + last, _component(name))
        if _points(early + last, _component(name)) >= MIN_POINTS and min(values) >= spec.high - 1e-6:
            return ("saturated",
                    f"the reward is flat and {name} was at its maximum ({spec.high:g}) on every step: it pays every "
                    f"completion the same, so it teaches nothing; the signal has to come from the other components "
                    f"(their curves), or lower reward.weights.{name}", {name: spec.high})
    return None


def _frozen(last, early, held, f: Facts):
    moved, grads = _series(last, layout.ADAPTER_UPDATE), _series(last, "grad_norm")
    # no gradient (every GRPO group flat, a zero loss) is a reason of its own for standing still, said by the others
    if _points(last, layout.ADAPTER_UPDATE) < WINDOW - 1 or sum(moved) >= FROZEN or (grads and max(grads) == 0):
        return None
    lr = f" (training.learning_rate {f.learning_rate:g})" if f.learning_rate else ""
    return ("frozen",
            f"the adapter's weights moved {sum(moved):.1e} of their size over {_span(last)}{lr}: too little "
            "to change what the model writes; raise training.learning_rate (LoRA usually trains at 1e-5 to 2e-4, "
            "about 10x full fine-tuning)", {"adapter_update": sum(moved)})


def _length_drift(last, early, held, f: Facts):
    key = "completions/mean_length"
    if not f.rewarded or _points(last, key) < MIN_POINTS or _points(early, key) < MIN_POINTS:
        return None
    first, late = step_mean(early, key), step_mean(last, key)
    if not first or late < first * (1 + LENGTH_RISE):
        return None
    tasks = {n: (a, b) for n in _task_components(f) if (a := step_mean(early, _component(n))) is not None
             and (b := step_mean(last, _component(n))) is not None}
    if not tasks or any(b - a >= TASK_RISE * _range(n) for n, (a, b) in tasks.items()):
        return None  # no task figure to read, or the task rose with the length: it may be what the task needs
    flat = ", ".join(f"{n} {a:.2f} -> {b:.2f}" for n, (a, b) in tasks.items())
    main = max(tasks, key=lambda n: f.weights.get(n, 0))
    cap = f" (now {f.max_completion_length})" if f.max_completion_length else ""
    return ("length_drift",
            f"the completions grew from {first:.0f} to {late:.0f} tokens on average (+{late / first - 1:.0%}) over "
            f"{_span(early + last)} while the task stayed flat ({flat}): the reward pays length, not answers; give "
            f"length a weight that pays the right length (reward.weights.length, reward.length_target), cap it "
            f"(grpo.max_completion_length{cap}), or raise reward.weights.{main}",
            {"mean_length_first": round(first, 1), "mean_length_last": round(late, 1),
             **{n: round(b, 3) for n, (a, b) in tasks.items()}})


# The checks that say a run cannot learn or learns the wrong thing: a run that shows it learns (a task component
# rose, held-out accuracy rose, its proof's lift) contradicts them; app/run/watch.py withdraws them then.
CONTRADICTED = ("flat_groups", "saturated", "frozen", "gamed", "length_drift")
