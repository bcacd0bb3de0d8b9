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
    default_on: bool  # part of the default shaped reward; "accuracy" is opt-in
    colour: str  # the same colour in the UI's live plot and the docs
    description: str


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
                  "reward.accuracy=true or it is given a weight"),
)

BY_NAME: dict[str, ComponentSpec] = {c.name: c for c in COMPONENTS}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def default_weights() -> dict[str, float]:
    """The weights a config starts with: the default-on components only (accuracy is added when enabled)."""
    return {c.name: c.weight for c in COMPONENTS if c.default_on}


def spec(name: str) -> ComponentSpec:
    return BY_NAME[name]
