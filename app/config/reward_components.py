"""The one table of shaped-reward components: name, default weight, range, description, plot colour.

Config validation (known names, default weights), ``build_reward_funcs``, ``score``, the UI's weight sliders and
live plot, and the docs all read this table; a component's name is spelled here and in its class
(``app.rewards.components``), nowhere else. Standard library only: the CLI imports it for ``--help``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ComponentSpec:
    name: str
    weight: float  # default weight in the shaped total
    low: float  # the component's own value range, before weighting
    high: float
    needs_reference: bool  # dropped (and said so) when the dataset has no reference column
    default_on: bool  # part of the default shaped reward; the others are opt-in (RewardConfig.opted_in)
    colour: str  # the same colour in the UI's live plot and the docs
    description: str
    # An opt-in component is on when one of these reward settings (dotted, under reward.) is set, or, when
    # ``weight_switches``, when it is given a weight (a component that needs its settings to work is not).
    switches: tuple[str, ...] = ()
    weight_switches: bool = True


BOILERPLATE = "boilerplate"  # the penalty component: compare reports the share of answers it penalised

COMPONENTS: tuple[ComponentSpec, ...] = (
    ComponentSpec("length", 0.25, -1.0, 0.0, False, True, "#1f77b4",
                  "compact answers: a gentle slope to -0.1 at reward.length_target characters, down to -0.6 at "
                  "reward.length_limit, up to -0.5 more for repeated text, -1 for an empty answer"),
    ComponentSpec("format", 0.5, 0.0, 1.0, False, True, "#ff7f0e",
                  "1 for a closing 'Final answer: X' / 'Answer: X' line or \\boxed{X}; 0.5 for 'the answer is X', "
                  "a marked answer followed by more text, or two marked answers that disagree; 0 otherwise"),
    ComponentSpec("reference", 2.0, 0.0, 1.0, True, True, "#2ca02c",
                  "1 when the final answer matches the reference (numbers after normalisation, LaTeX through "
                  "math-verify, else text), 0 otherwise"),
    ComponentSpec(BOILERPLATE, 1.0, -1.0, 0.0, False, True, "#d62728",
                  "refusals and AI disclaimers cost 1, uncertainty 0.5, filler and hedges 0.25 (each phrase once, "
                  "capped at -1); 0 for a clean answer"),
    ComponentSpec("accuracy", 1.0, 0.0, 1.0, True, False, "#9467bd",
                  "strict math-verify equivalence with the reference (LoRA Without Regret's reward); off unless "
                  "reward.accuracy=true or it is given a weight", switches=("accuracy",)),
    ComponentSpec("json", 1.0, 0.0, 1.0, False, False, "#8c564b",
                  "1 when the answer is (or holds, in a ```json block) JSON that parses and fits "
                  "reward.json_schema; 0.5 when it parses but does not fit; 0 otherwise; off unless it is given a "
                  "weight or reward.json_schema", switches=("json_schema",)),
    ComponentSpec("regex", 1.0, 0.0, 1.0, False, False, "#e377c2",
                  "the share of the pattern rules the answer keeps: it matches reward.regex, it does not match "
                  "reward.regex_forbid; off unless one is set", switches=("regex", "regex_forbid"),
                  weight_switches=False),
    ComponentSpec("judge", 2.0, 0.0, 1.0, False, False, "#17becf",
                  "a model's score of the answer against a rubric (and the reference, when the row has one), 0..1; "
                  "off unless reward.judge.url or reward.judge.model is set", switches=("judge.url", "judge.model"),
                  weight_switches=False),
)

# The components that score the task itself (against the reference or by a judge); the others shape the form of an
# answer. The flat-reward diagnosis reads a form component that pays while every task component stays near zero as a
# gamed reward.
TASK_COMPONENTS = ("reference", "accuracy", "judge")

BY_NAME: dict[str, ComponentSpec] = {c.name: c for c in COMPONENTS}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def default_weights() -> dict[str, float]:
    """The weights a config starts with: the default-on components only (accuracy is added when enabled)."""
    return {c.name: c.weight for c in COMPONENTS if c.default_on}


def spec(name: str) -> ComponentSpec:
    return BY_NAME[name]
