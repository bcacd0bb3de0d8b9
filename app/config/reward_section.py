"""The ``reward`` section: the shaped reward's weights and settings, how the reference is compared, the format
components (JSON, a regular expression) and the judge. Re-exported by app/config/schema.py, where ``AppConfig``
holds it; the components themselves are listed in app/config/reward_components.py.

Only pydantic at module level: the CLI loads this for ``--help``.
"""

from __future__ import annotations

import difflib
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from app.config.fields import StrictModel, _d, _one_is_a_list, get_key
from app.config.reward_components import BY_NAME, COMPONENTS, default_weights
from app.config.reward_components import NAMES as COMPONENT_NAMES

# How the reference component compares an answer with the reference (app/rewards/match.py does each).
REFERENCE_MATCHES = {
    "auto": "chosen from the reference column: JSON objects or lists -> json, numbers -> numeric, LaTeX -> math, "
            "short answers -> exact, sentences, code and longer text -> overlap",
    "exact": "the final answer equals the reference as text (case, spaces, markdown and end punctuation ignored; a "
             "choice letter or yes/no read as such)",
    "numeric": "numbers compared as numbers (1,000 = 1000.0, $18 = 18), anything else as exact text",
    "math": "math-verify equivalence (1/2 = 0.5 = \\frac{1}{2}), numbers as numeric",
    "overlap": "ROUGE-L F1 between the answer and the reference (0..1, Google's rouge-score), for free text",
    "json": "the answer's JSON equals the reference's (1), else the share of its fields with equal values",
}


class JudgeConfig(StrictModel):
    url: str | None = _d(None, "an OpenAI-compatible endpoint that judges each completion, e.g. "
                               "http://127.0.0.1:8080/v1 (llama.cpp's server, Ollama, vLLM)")
    model: str | None = _d(None, "with judge.url: the model name the endpoint serves (empty: the first it lists); "
                                 "without: a local model (hub id or folder) qlora-app loads in 4-bit to judge")
    rubric: str | None = _d(None, "a text file with the judge's instructions, {prompt}, {completion} and "
                                  "{reference} where they go; empty = ours (helpful, correct, matches the reference)")
    timeout_s: float = _d(30.0, "seconds one judgement may take before it is retried", gt=0)
    retries: int = _d(2, "tries after a failed judgement (timeout, refused, unreadable); then it scores None", ge=0)
    batch_size: int = _d(8, "completions judged at once: requests in flight for an endpoint, a forward pass's rows "
                            "for a local judge", ge=1)
    max_tokens: int = _d(64, "tokens an endpoint's judge may write in its reply", ge=1)
    api_key_env: str = _d("OPENAI_API_KEY", "environment variable holding the endpoint's API key (sent to judge.url "
                                            "only; empty variable: no key)")

    @property
    def enabled(self) -> bool:
        return bool(self.url or self.model)

    @field_validator("url")
    @classmethod
    def _http(cls, v: str | None) -> str | None:
        if v and not v.startswith(("http://", "https://")):
            raise ValueError(f"reward.judge.url '{v}' is not an http(s) URL; give the endpoint's base URL, e.g. "
                             "http://127.0.0.1:8080/v1")
        return v or None


def _compiles(v: str | None, key: str) -> str | None:
    if not v:
        return None
    import regex  # transformers' own dependency; lazily: the CLI's --help does not need it

    try:
        regex.compile(v)
    except regex.error as e:
        raise ValueError(f"{key} '{v}' is not a regular expression ({e}); fix the pattern") from None
    return v


class RewardConfig(StrictModel):
    # The default weights and every component's meaning live in app/config/reward_components.py (see docs/rewards.md).
    weights: dict[str, float] = Field(default_factory=default_weights, description=(
        "weight of each shaped-reward component (" + ", ".join(COMPONENT_NAMES) + ") or custom function; keys "
        "left out keep their defaults, so reward.weights.format=1 changes one"))
    length_target: int = _d(400, "characters of visible answer the length component allows with only a gentle "
                                 "slope (to -0.1)", gt=0)
    length_limit: int = _d(2000, "characters at which the length penalty reaches its -0.6 floor", gt=0)
    reference_match: Literal[tuple(REFERENCE_MATCHES)] = _d(  # type: ignore[valid-type]
        "auto", "how the reference component compares: auto (chosen from the reference column, said in the plan), "
                "exact, numeric, math, or overlap (ROUGE-L, for free text); docs/rewards.md has each")
    accuracy: bool = _d(False, "add the strict math-verify accuracy component (LoRA Without Regret's reward)")
    json_schema: str | None = _d(None, "a JSON Schema file the answer's JSON must fit: switches the json component on "
                                       "(reward.weights.json=1 alone checks that the answer parses)")
    regex: str | None = _d(None, "a regular expression the answer must match (the regex component)")
    regex_forbid: str | None = _d(None, "a regular expression the answer must not match (the regex component)")
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    custom: Annotated[list[str], BeforeValidator(_one_is_a_list)] = Field(default_factory=list, description=(
        "extra reward functions: 'module:function' or 'path/to/file.py:function' (one, or a list)"))

    def weight(self, name: str) -> float:
        """A component's (or custom function's) weight: as set, else the table's default."""
        spec = BY_NAME.get(name)
        return float(self.weights.get(name, spec.weight if spec else 1.0))

    def enabled(self, name: str) -> bool:
        """Default-on components always run; an opt-in one when its settings or a weight switch it on."""
        return BY_NAME[name].default_on or self.opted_in(name)

    def effective_weights(self) -> dict[str, float]:
        """Every table component's weight as training uses it, 0.0 for one that is off (the UI's sliders)."""
        return {c.name: self.weight(c.name) if self.enabled(c.name) else 0.0 for c in COMPONENTS}

    def opted_in(self, name: str) -> bool:
        """Whether an opt-in component (off by default) is switched on by its own settings or a weight (the table
        says which: ComponentSpec.switches, weight_switches)."""
        spec = BY_NAME[name]
        return any(get_key(self, key) for key in spec.switches) or (spec.weight_switches and bool(self.weights.get(name)))

    @field_validator("weights")
    @classmethod
    def _known_components(cls, v: dict[str, float]) -> dict[str, float]:
        for k in v:
            if k not in COMPONENT_NAMES and ":" not in k:
                hint = difflib.get_close_matches(k, COMPONENT_NAMES, n=1)
                raise ValueError(
                    f"unknown reward component '{k}'"
                    + (f"; did you mean '{hint[0]}'?" if hint else f"; known: {', '.join(COMPONENT_NAMES)}")
                )
        return {**default_weights(), **v}

    @field_validator("regex")
    @classmethod
    def _regex(cls, v):
        return _compiles(v, "reward.regex")

    @field_validator("regex_forbid")
    @classmethod
    def _regex_forbid(cls, v):
        return _compiles(v, "reward.regex_forbid")

    @field_validator("custom")
    @classmethod
    def _custom_form(cls, v: list[str]) -> list[str]:
        for entry in v:
            target, _, func = entry.rpartition(":")
            if not target or not func:
                raise ValueError(f"custom reward '{entry}' must look like 'module:function' or "
                                 "'path/to/file.py:function'")
        return v

    @model_validator(mode="after")
    def _length_order(self) -> "RewardConfig":
        if self.length_limit <= self.length_target:
            raise ValueError(
                f"reward.length_limit ({self.length_limit}) must be greater than reward.length_target "
                f"({self.length_target}); raise the limit or lower the target"
            )
        return self

    @model_validator(mode="after")
    def _needs_settings(self) -> "RewardConfig":
        for spec in COMPONENTS:
            if not spec.weight_switches and self.weights.get(spec.name) and not self.opted_in(spec.name):
                needs = " or ".join(f"reward.{k}" for k in spec.switches)
                raise ValueError(f"reward.weights.{spec.name} is set but the {spec.name} component has nothing to "
                                 f"work with; set {needs}")
        return self
