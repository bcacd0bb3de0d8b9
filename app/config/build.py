"""Building the one AppConfig: built-in defaults < preset YAML < explicit flags < ``--set`` overrides, validated once
with messages that say what to change, and paths made absolute against where a config came from.

Only pydantic and yaml are imported at module level: the CLI loads this for ``--help``."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from app.config.keys import format_validation_error, parse_set
from app.config.schema import (
    AppConfig,
)
from app.errors import UserError

# ----------------------------------------------------------------------------------------------------------
# Building: defaults < preset < flags < --set


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):  # key by key, so one --set keeps the rest
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def load_yaml_file(path: str | Path) -> dict:
    p = Path(path)
    if not p.is_file():
        raise UserError(f"config file '{p}' not found; pass an existing YAML file")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise UserError(f"'{p}' is not valid YAML{where}; fix the syntax") from None
    if not isinstance(data, dict):
        raise UserError(f"'{p}' must hold a mapping of config sections (method:, model:, lora:, ...)")
    return data


def validate(data: dict) -> AppConfig:
    try:
        return AppConfig.model_validate(data)
    except ValidationError as e:
        raise UserError(format_validation_error(e)) from None


def build_config(preset: dict | None = None, flags: dict | None = None, sets: list[str] | None = None) -> AppConfig:
    """Merge the layers and validate once. ``flags`` is a nested dict of explicit CLI options (None = unset)."""
    data: dict = {}
    for layer in (preset or {}, _drop_none(flags or {})):
        data = _deep_merge(data, layer)
    # a bare key several sections have ('beta') is the method's own: the method --set gives, else the layers'
    said = [s.split("=", 1)[1].strip() for s in sets or [] if s.split("=", 1)[0].strip() == "method" and "=" in s]
    method = said[-1] if said else data.get("method") or AppConfig.model_fields["method"].default
    return validate(_deep_merge(data, parse_set(sets or [], method)))


def with_values(cfg: AppConfig, values: dict) -> AppConfig:
    """A copy of ``cfg`` with these dotted keys set ({"grpo.generation_batch_size": 16}), validated again: the one
    way a decided change enters a config (the run plan's adjustments, its trial estimates, the out-of-memory ladder)."""
    data = cfg.model_dump()
    for dotted, value in values.items():
        node = data
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    return validate(data)


def _drop_none(d: dict) -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            v = _drop_none(v)
            if v:
                out[k] = v
        elif v is not None:
            out[k] = v
    return out


def with_absolute_paths(cfg: AppConfig, base: str | Path) -> AppConfig:
    """The config with every local path it holds (model, dataset, init_from, custom reward files, output_dir)
    made absolute against ``base``, the folder the user typed them in. A value that does not name an existing
    path under ``base`` (a hub id, a built-in dataset name) is left as typed."""
    base = Path(base)

    def absolute(value: str | None) -> str | None:
        if not value:
            return value
        p = Path(value).expanduser()
        if p.is_absolute():
            return str(p)
        return str((base / p).resolve()) if (base / p).exists() else value

    c = cfg.model_copy(deep=True)
    c.model.name_or_path = absolute(c.model.name_or_path)
    c.data.dataset = absolute(c.data.dataset)
    c.lora.init_from = absolute(c.lora.init_from)
    renamed = {}
    for entry in c.reward.custom:
        target, _, func = entry.rpartition(":")
        renamed[entry] = f"{absolute(target)}:{func}" if target.endswith(".py") else entry
    c.reward.custom = list(renamed.values())
    # A custom function's weight is keyed by its entry string: it moves with the entry.
    c.reward.weights = {renamed.get(k, k): v for k, v in c.reward.weights.items()}
    c.output_dir = str((base / Path(c.output_dir).expanduser()).resolve())
    return c
