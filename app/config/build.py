"""Building the one AppConfig: built-in defaults < preset YAML < explicit flags < ``--set`` overrides, validated once
with messages that say what to change, and paths made absolute against where a config came from.

Only pydantic and yaml are imported at module level: the CLI loads this for ``--help``."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from pydantic import ValidationError

from app.config.fields import set_key
from app.config.flags import FLAGS
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


def load_config_file(path: str | Path) -> dict:
    """``--config FILE``: a full config YAML (as written into run folders). A name that is no file here is most
    likely a hub dataset's config ('main'), which is --dataset-config."""
    p = Path(path)
    if not p.is_file() and p.suffix not in (".yaml", ".yml"):
        raise UserError(f"config file '{p}' not found; --config takes a config YAML (as written into run folders); "
                        f"a hub dataset's config is --dataset-config {p}")
    return load_yaml_file(p)


def validate(data: dict) -> AppConfig:
    try:
        return AppConfig.model_validate(data)
    except ValidationError as e:
        raise UserError(format_validation_error(e)) from None


# The data keys that describe one dataset: a preset's eval split 'test' or prompt field 'question' means nothing on
# another dataset, so a layer's values of these follow its own dataset only.
DATASET_KEYS = ("config_name", "split", "eval_split", "prompt_field", "reference_field", "chosen_field",
                "rejected_field", "label_field", "system_prompt")


def build_config(preset: dict | None = None, flags: dict | None = None, sets: list[str] | None = None, *,
                 source: str = "the preset") -> AppConfig:
    """Merge the layers and validate once. ``flags`` is a nested dict of explicit CLI options (None = unset);
    ``source`` names the first layer in messages ("preset demo-grpo", "config my.yaml").

    When the flags or ``--set`` name another dataset than the first layer's, that layer's DATASET_KEYS are left
    out (the config's ``notes`` say which). Where each data key's value came from is kept on ``cfg.data`` so an
    error about it names what the user typed, or the preset it came from."""
    base = copy.deepcopy(preset or {})  # its dataset keys may be left out below: never the caller's dict
    flags = _drop_none(flags or {})
    # a bare key several sections have ('beta') is the method's own: the method --set gives, else the layers'
    said = [s.split("=", 1)[1].strip() for s in sets or [] if s.split("=", 1)[0].strip() == "method" and "=" in s]
    method = said[-1] if said else flags.get("method") or base.get("method") or AppConfig.model_fields["method"].default
    set_layer = parse_set(sets or [], method)
    notes = _other_dataset(base, flags, set_layer, source)
    data = _deep_merge(_deep_merge(base, flags), set_layer)
    cfg = validate(data)
    origins = {k: f"data.{k} from {source}" for k in (base.get("data") or {})}
    origins.update({k: _flag_name(f"data.{k}") for k in (flags.get("data") or {})})
    origins.update({k: f"--set data.{k}" for k in (set_layer.get("data") or {})})
    cfg.data._origin = origins
    cfg._notes = notes
    return cfg


def _other_dataset(base: dict, flags: dict, set_layer: dict, source: str) -> list[str]:
    """Drop ``base``'s DATASET_KEYS when a later layer names another dataset; the note that says so."""
    ours = (base.get("data") or {}).get("dataset")
    theirs = [layer["data"]["dataset"] for layer in (flags, set_layer) if "dataset" in (layer.get("data") or {})]
    mixes = [layer["data"]["mix"] for layer in (flags, set_layer) if (layer.get("data") or {}).get("mix")]
    if mixes:  # a mix typed over a preset's one dataset replaces it (a mix lists every dataset, the first included)
        theirs = [" + ".join(str(p.get("dataset") if isinstance(p, dict) else p) for p in mixes[-1])]
        if base.get("data"):
            base["data"].pop("dataset", None)
    if not ours or not theirs or _same_dataset(ours, theirs[-1]):
        return []
    dropped = {k: base["data"].pop(k) for k in DATASET_KEYS if k in base["data"]}
    defaults = AppConfig.model_fields["data"].default_factory()
    said = ", ".join(f"{k}={v!r}" for k, v in dropped.items() if v != getattr(defaults, k))
    if not said:  # only values that are the defaults anyway (split 'train'): nothing worth a note
        return []
    return [f"{source} is set up for dataset '{ours}'; its {said} are not used with '{theirs[-1]}' (they describe "
            "that dataset): fields are detected, or set them with --prompt-field / --set data.KEY=VALUE"]


def _same_dataset(a, b) -> bool:
    if a == b:
        return True
    pa, pb = Path(str(a)).expanduser(), Path(str(b)).expanduser()
    return pa.exists() and pb.exists() and pa.resolve() == pb.resolve()


def _flag_name(key: str) -> str:
    return next((f.cli for f in FLAGS if f.key == key and f.cli), f"--set {key}")


def with_values(cfg: AppConfig, values: dict) -> AppConfig:
    """A copy of ``cfg`` with these dotted keys set ({"grpo.generation_batch_size": 16}), validated again: the one
    way a decided change enters a config (the run plan's adjustments, its trial estimates, the out-of-memory ladder)."""
    data = cfg.model_dump()
    for dotted, value in values.items():
        set_key(data, dotted, value)
    return revalidate(cfg, data)


def revalidate(cfg: AppConfig, data: dict | None = None) -> AppConfig:
    """``data`` (default: ``cfg`` as it is now) validated again, keeping what building ``cfg`` noted (where its
    data keys came from, its notes): the checks and messages downstream need them."""
    out = validate(cfg.model_dump() if data is None else data)
    out.data._origin, out._notes = dict(cfg.data._origin), list(cfg._notes)
    return out


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
    """The config with every local path it holds (model, dataset, init_from, the teacher, custom reward files, the
    JSON Schema, the judge's rubric and local model, tool files, the environment's file, output_dir) made absolute
    against ``base``, the folder the user typed them in. A value that does not name an existing path under ``base`` (a hub id, a
    built-in dataset name) is left as typed."""
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
    for part in c.data.mix:
        part.dataset = absolute(part.dataset)
    c.lora.init_from = absolute(c.lora.init_from)
    c.distill.teacher = absolute(c.distill.teacher)  # a model folder or a run's (a bare run name stays: runs/NAME)
    c.reward.json_schema = absolute(c.reward.json_schema)
    c.reward.judge.rubric = absolute(c.reward.judge.rubric)
    if not c.reward.judge.url:  # a local judge model's folder (with a URL, judge.model is the endpoint's name)
        c.reward.judge.model = absolute(c.reward.judge.model)
    renamed = {}
    for entry in c.reward.custom:
        target, _, func = entry.rpartition(":")
        renamed[entry] = f"{absolute(target)}:{func}" if target.endswith(".py") else entry
    c.reward.custom = list(renamed.values())
    # A custom function's weight is keyed by its entry string: it moves with the entry.
    c.reward.weights = {renamed.get(k, k): v for k, v in c.reward.weights.items()}

    def absolute_entry(entry: str) -> str:  # FILE.py or FILE.py:names (a built-in or module:names stays)
        if entry.endswith(".py"):
            return absolute(entry)
        target, _, names = entry.rpartition(":")
        return f"{absolute(target)}:{names}" if target.endswith(".py") else entry

    c.tools.use = [absolute_entry(e) for e in c.tools.use]
    c.tools.environment = absolute_entry(c.tools.environment) if c.tools.environment else None
    c.output_dir = str((base / Path(c.output_dir).expanduser()).resolve())
    return c
