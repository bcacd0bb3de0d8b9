"""The one configuration object shared by the CLI, the UI and the presets: building and resolution.

Everything a run needs is an ``AppConfig`` (its schema: app/config_schema.py). It is built in one place
(``build_config``) from, in order of precedence: built-in defaults < preset YAML < explicit CLI flags <
``--set key=value`` overrides. Validation happens once, here, and every message says what to change. Values left
as ``None`` ("auto") are filled by ``resolve`` from the method and the "LoRA Without Regret" recipe, so the YAML
written into a run directory is complete and re-runnable on its own.

Only pydantic and yaml are imported at module level: the CLI loads this for ``--help``.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import ValidationError

from app.assets import BUILTIN_MODEL, builtin_model_path
from app.config_keys import format_validation_error, parse_set
from app.config_schema import (
    PREFERENCE_METHODS,
    AppConfig,
    DataConfig,
    GRPOConfig,
    LoraConfig,
    ModelConfig,
    RewardConfig,
    RuntimeConfig,
    TrainingConfig,
)
from app.errors import UserError

__all__ = ["AppConfig", "DataConfig", "GRPOConfig", "LoraConfig", "ModelConfig", "RewardConfig", "RuntimeConfig",
           "TrainingConfig", "BUILTIN_MODEL", "build_config", "validate", "load_yaml_file", "resolve",
           "with_absolute_paths", "with_values", "warnings_for", "effective_batch", "model_name"]

# A model that fits an 8 GB GPU for GRPO in 4-bit (about 1.2 GB of weights, room for 4-8 generations of
# 512 tokens) and already follows instructions well enough for GSM8K to give a useful reward signal.
DEFAULT_GRPO_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
DEFAULT_SFT_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"

# "LoRA Without Regret": LoRA wants ~10x the full fine-tuning learning rate; RL needs very little capacity. DPO: 10x
# TRL's full fine-tuning default (1e-6); its pairs carry about as little information per step as RL's rewards.
DEFAULT_LR = {"sft": 2e-4, "grpo": 3e-5, "dpo": 1e-5, "orpo": 1e-5}
DEFAULT_RANK = {"grpo": 16, "dpo": 16, "orpo": 16}
EFFECTIVE_BATCH_WARN = 32

# The prompt suffix that tells a model the answer format the shaped reward's format bonus looks for.
DEFAULT_GRPO_SYSTEM_PROMPT = (
    "Solve the problem step by step, briefly. End with a line of the form 'Final answer: <answer>'."
)


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


# ----------------------------------------------------------------------------------------------------------
# Resolution of "auto" values


def sft_rank_for_size(num_rows: int | None) -> int:
    """LoRA Without Regret: capacity should match the data. Small SFT sets need little; post-training scale ~256."""
    if num_rows is None:
        return 64
    if num_rows < 2_000:
        return 16
    if num_rows < 20_000:
        return 32
    if num_rows < 100_000:
        return 64
    return 256


def model_name(cfg: AppConfig) -> str:
    """The model a config trains: its name_or_path, the method's default, or the shipped tiny model's folder. The
    one rule, read by resolve and by the checks that must fail before anything is resolved or loaded."""
    if cfg.model.name_or_path is None:
        return DEFAULT_GRPO_MODEL if cfg.method == "grpo" else DEFAULT_SFT_MODEL
    if cfg.model.name_or_path == BUILTIN_MODEL:  # the tiny model shipped for the offline demo
        return str(builtin_model_path())
    return cfg.model.name_or_path


def resolve(cfg: AppConfig, num_rows: int | None = None) -> AppConfig:
    """Fill every auto value; returns a new, complete config (what gets written to the run directory)."""
    c = cfg.model_copy(deep=True)
    c.model.name_or_path = model_name(c)
    if c.lora.r is None:
        c.lora.r = DEFAULT_RANK[c.method] if c.method in DEFAULT_RANK else sft_rank_for_size(num_rows)
    if c.lora.alpha is None:
        c.lora.alpha = 32 if c.method in DEFAULT_RANK else max(16, c.lora.r // 4)
    t = c.training
    if t.learning_rate is None:
        t.learning_rate = DEFAULT_LR[c.method]
    if c.method == "grpo":
        if t.per_device_train_batch_size is None:
            t.per_device_train_batch_size = c.grpo.num_generations
        if t.gradient_accumulation_steps is None:
            t.gradient_accumulation_steps = 2
        if c.data.system_prompt is None:
            c.data.system_prompt = DEFAULT_GRPO_SYSTEM_PROMPT
    elif c.method in PREFERENCE_METHODS:  # pairs per micro-batch; each is two sequences (chosen, rejected) in a pass
        if t.per_device_train_batch_size is None:
            t.per_device_train_batch_size = 4
        if t.gradient_accumulation_steps is None:
            t.gradient_accumulation_steps = 2
    else:
        if t.per_device_train_batch_size is None:
            # A packed row holds several examples (about 4 GSM8K rows in 1024 tokens): one packed row per micro-batch
            # keeps both the examples per optimizer step and the activation memory near the padded default's.
            t.per_device_train_batch_size = 1 if sft_packs(c) else 4
        if t.gradient_accumulation_steps is None:
            t.gradient_accumulation_steps = 4
    return validate(c.model_dump())  # re-run cross-field checks on the filled values


def sft_packs(cfg: AppConfig) -> bool:
    """Whether SFT will pack, as far as the config tells (app.models.pick_packing decides with the kernel)."""
    return cfg.training.packing is not False and not cfg.model.trust_remote_code and cfg.runtime.backend != "unsloth"


def effective_batch(cfg: AppConfig, processes: int = 1) -> int:
    """Examples per optimizer step. For GRPO, TRL's batch counts completions; the examples are the prompts
    (each contributes a group of num_generations completions), which is what the batch-size advice is about."""
    t = cfg.training
    n = (t.per_device_train_batch_size or 1) * (t.gradient_accumulation_steps or 1) * processes
    return max(1, n // cfg.grpo.num_generations) if cfg.method == "grpo" else n


def warnings_for(cfg: AppConfig) -> list[str]:
    """Advice that does not stop a run."""
    out = []
    eb = effective_batch(cfg, cfg.runtime.num_processes * cfg.runtime.nnodes)  # every process adds its batch
    if eb >= EFFECTIVE_BATCH_WARN:
        out.append(
            f"effective batch {eb} {'prompts' if cfg.method == 'grpo' else 'examples'} >= {EFFECTIVE_BATCH_WARN}: LoRA tolerates large batches worse than full "
            "fine-tuning (LoRA Without Regret); lower per_device_train_batch_size or gradient_accumulation_steps"
        )
    if cfg.lora.target_modules != "all-linear":
        out.append("LoRA on a subset of layers underperforms all-linear even at higher rank (LoRA Without Regret)")
    if cfg.method == "grpo" and cfg.lora.r and cfg.lora.r > 64:
        out.append(f"lora.r={cfg.lora.r} is far above what RL needs (1-32 is enough); it only costs memory")
    return out
