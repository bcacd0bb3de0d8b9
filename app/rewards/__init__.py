"""The shaped reward: length, format, reference and boilerplate components (plus optional strict accuracy and
user functions), each a separate TRL reward function so TRL logs ``rewards/<component>/mean`` for each.

    total = sum(weight[c] * component[c])      (a None component counts 0, exactly as TRL's nansum does)

The components: components.py (length, format, reference, boilerplate, accuracy), answer.py (reading a final
answer), json_answer.py (the JSON an answer holds), match.py (how a reference is compared), formats.py (JSON and
patterns), judge/ (a model as judge).

``score_completion`` computes the same total for one completion, so ``score``, ``compare`` and the UI show the
number training optimised. Only the standard library is imported here; math-verify (sympy) loads on first use.

Owns: scoring a completion. Must not load models or data (a judge's model is app/rewards/judge's), nor keep state across
runs: a run's reward functions are made for it by ``build_reward_funcs`` and count in its app.run.counts.RunCounts;
the components cached here serve one-off scoring (score, compare, the UI), which counts for itself.
"""

from __future__ import annotations

from typing import Callable

from app.config.reward_components import BY_NAME, COMPONENTS
from app.config.schema import RewardConfig
from app.errors import UserError
from app.host.usercode import import_target
from app.rewards.answer import extract_final_answer, is_correct
from app.rewards.components import (
    AccuracyReward,
    BoilerplateReward,
    Component,
    FormatReward,
    LengthReward,
    ReferenceReward,
)
from app.rewards.formats import JsonReward, RegexReward
from app.rewards.judge.reward import JudgeReward
from app.run.counts import RewardErrors

__all__ = ["build_reward_funcs", "score_completion", "explain_completion", "is_correct", "extract_final_answer",
           "RewardErrors", "effective_weights"]

# The class behind each registry entry (the registry is the one place names, weights and ranges are spelled).
_CLASSES: dict[str, type[Component]] = {c.name: c for c in (LengthReward, FormatReward, ReferenceReward,
                                                           BoilerplateReward, AccuracyReward, JsonReward,
                                                           RegexReward, JudgeReward)}


def _cfg(reward_cfg):
    if reward_cfg is None:
        return RewardConfig()
    return reward_cfg


# Built components per reward config, for one-off scoring (score, compare, the UI) row after row: a judge (its client
# or local model, its cache) is made once per process, not once per row. A training run's reward functions are not
# these: build_reward_funcs makes them for the run, counting in the run's counts.
_BUILT: dict[str, list[Component]] = {}


def _make(cfg) -> list[Component]:
    return [_CLASSES[c.name].from_config(cfg) for c in COMPONENTS if cfg.enabled(c.name)]


def _usable(components, has_reference: bool) -> list:
    return [comp for comp in components if has_reference or not BY_NAME[comp.name].needs_reference]


def _components(cfg, has_reference: bool) -> list[Component]:
    key = cfg.model_dump_json()
    if key not in _BUILT:
        _BUILT[key] = _make(cfg)
    return _usable(_BUILT[key], has_reference)


def effective_weights(reward_cfg=None) -> dict[str, float]:
    """Every registry component's weight as training would use it, 0.0 for one that is off: what the UI's
    sliders show."""
    return _cfg(reward_cfg).effective_weights()


# ------------------------------------------------------------------------------------------ custom functions


class CustomReward:
    """A user reward function ("module:function" or "path/to/file.py:function") with the same containment as the
    built-ins. Pickles as its entry string and re-imports on first call, so file-based functions survive too."""

    def __init__(self, entry: str, errors: RewardErrors | None = None):
        self.entry = entry
        self._fn = load_custom(entry)
        self.__name__ = getattr(self._fn, "__name__", type(self._fn).__name__)
        self.errors = errors or RewardErrors()

    def __getstate__(self):
        return {"entry": self.entry, "__name__": self.__name__, "errors": self.errors}

    def __setstate__(self, state):
        self.entry, self.__name__, self._fn = state["entry"], state["__name__"], None
        self.errors = state["errors"]

    def __call__(self, completions, **kwargs) -> list[float | None]:
        if self._fn is None:
            self._fn = load_custom(self.entry)
        try:
            out = list(self._fn(completions=completions, **kwargs))
            if len(out) != len(completions):
                raise ValueError(f"returned {len(out)} rewards for {len(completions)} completions")
            return [None if v is None else float(v) for v in out]
        except Exception:  # noqa: BLE001 - retry one by one so only the offending samples lose their reward
            return [self._one(completions, kwargs, i) for i in range(len(completions))]

    def _one(self, completions, kwargs, i: int) -> float | None:
        sub = {k: ([v[i]] if isinstance(v, list) and len(v) == len(completions) else v) for k, v in kwargs.items()}
        try:
            out = list(self._fn(completions=[completions[i]], **sub))
            return None if not out or out[0] is None else float(out[0])
        except Exception as e:  # noqa: BLE001
            self.errors.add(self.__name__, e)
            return None


_CUSTOM_CACHE: dict[str, Callable] = {}


def load_custom(entry: str) -> Callable:
    """Import "module:function" or "path/to/file.py:function"; any problem is a one-line UserError.

    Cached per entry: compare and the UI score row after row, and a file must not be re-executed for each one.
    """
    fn = _CUSTOM_CACHE.get(entry)
    if fn is None:
        fn = _CUSTOM_CACHE[entry] = _load_custom(entry)
    return fn


def _load_custom(entry: str) -> Callable:
    if ":" not in entry:
        raise UserError(f"custom reward '{entry}' must look like 'module:function' or 'path/to/file.py:function'")
    target, func_name = entry.rsplit(":", 1)  # rsplit: a Windows path has its own colon
    if not target or not func_name:
        raise UserError(f"custom reward '{entry}' must look like 'module:function' or 'path/to/file.py:function'")
    module = import_target(target, "custom reward", entry)
    fn = getattr(module, func_name, None)
    if fn is None:
        raise UserError(f"custom reward '{entry}': '{target}' has no function '{func_name}'")
    if not callable(fn):
        raise UserError(f"custom reward '{entry}': '{func_name}' is not callable")
    return fn


# ------------------------------------------------------------------------------------------------- public API


def build_reward_funcs(reward_cfg, has_reference: bool, counts=None,
                       runtime=None) -> tuple[list[Callable], list[float]]:
    """A run's TRL reward functions, made for it, and their weights (pass the weights as
    ``GRPOConfig.reward_weights``). ``counts``: the run's app.run.counts.RunCounts (reward failures, the judge's
    calls); ``runtime``: the run's RuntimeConfig (where a local judge loads from and runs).

    Without a reference column the reference (and accuracy) components are dropped; the caller says so.
    """
    cfg = _cfg(reward_cfg)
    funcs: list[Callable] = _usable(_make(cfg), has_reference)
    for f in funcs:
        if counts is not None:
            f.count_in(counts)
        if isinstance(f, JudgeReward) and runtime is not None:
            f.place(runtime.local_only, runtime.device)  # a run's judge: placed as the run is
    weights = [cfg.weight(f.name) for f in funcs]
    for entry in cfg.custom:
        funcs.append(CustomReward(entry, counts.reward_errors if counts is not None else None))
        weights.append(float(cfg.weights.get(entry, 1.0)))
    return funcs, weights


def explain_completion(completion, reference, reward_cfg=None, prompt=None, funcs=None) -> list[dict]:
    """Per component: name, value (None -> counted 0), weight, weighted contribution and why. ``prompt``: the task
    the completion answers (the judge reads it); ``funcs``: a run's own reward functions (build_reward_funcs: the
    held-out evaluation during training scores with them, one judge in memory), else this process's components."""
    cfg = _cfg(reward_cfg)
    rows = []
    comps = [f for f in funcs if isinstance(f, Component)] if funcs is not None else _components(cfg, True)
    for comp in comps:
        value, why = comp.safe_score(completion, reference, prompt)
        w = cfg.weight(comp.name)
        rows.append({"name": comp.name, "value": value, "weight": w,
                     "weighted": 0.0 if value is None else w * value, "why": why})
    customs = {f.entry: f for f in funcs or () if isinstance(f, CustomReward)}
    for entry in cfg.custom:
        fn = customs.get(entry) or CustomReward(entry)
        value = fn([completion], reference=[reference], prompts=[""])[0]
        w = float(cfg.weights.get(entry, 1.0))
        rows.append({"name": fn.__name__, "value": value, "weight": w,
                     "weighted": 0.0 if value is None else w * value, "why": f"custom function {entry}"})
    return rows


def score_completion(completion, reference, reward_cfg=None, prompt=None, funcs=None) -> dict:
    """{"total": weighted sum, "components": {name: value}} -- the number GRPO training optimises.

    A component that does not apply (no reference) or failed counts 0, as in TRL's nansum.

    >>> s = score_completion("3 + 4 = 7.\\nFinal answer: 7", "#### 7")
    >>> s["components"]["reference"], s["components"]["format"], round(s["total"], 3)
    (1.0, 1.0, 2.498)
    """
    rows = explain_completion(completion, reference, reward_cfg, prompt, funcs)
    comps = {r["name"]: (0.0 if r["value"] is None else float(r["value"])) for r in rows}
    return {"total": float(sum(r["weighted"] for r in rows)), "components": comps}
