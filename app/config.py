"""The one configuration object shared by the CLI, the UI and the presets.

Everything a run needs is an ``AppConfig``. It is built in one place (``build_config``) from, in order of
precedence: built-in defaults < preset YAML < explicit CLI flags < ``--set key=value`` overrides. Validation
happens once, here, and every message says what to change. Values left as ``None`` ("auto") are filled by
``resolve`` from the method and the "LoRA Without Regret" recipe, so the YAML written into a run directory is
complete and re-runnable on its own.

Only pydantic and yaml are imported at module level: the CLI loads this for ``--help``.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from app.errors import UserError

# A model that fits an 8 GB GPU for GRPO in 4-bit (about 1.2 GB of weights, room for 4-8 generations of
# 512 tokens) and already follows instructions well enough for GSM8K to give a useful reward signal.
DEFAULT_GRPO_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
DEFAULT_SFT_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"

# "LoRA Without Regret": LoRA wants ~10x the full fine-tuning learning rate; RL needs very little capacity.
DEFAULT_LR = {"sft": 2e-4, "grpo": 3e-5}
DEFAULT_RANK = {"grpo": 16}
EFFECTIVE_BATCH_WARN = 32

# The prompt suffix that tells a model the answer format the shaped reward's format bonus looks for.
DEFAULT_GRPO_SYSTEM_PROMPT = (
    "Solve the problem step by step, briefly. End with a line of the form 'Final answer: <answer>'."
)


class StrictModel(BaseModel):
    """Base for every section: unknown keys are errors (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ModelConfig(StrictModel):
    name_or_path: str | None = None  # hub id or local directory; None = the method's default
    load_in_4bit: bool = True
    quant_type: Literal["nf4", "fp4"] = "nf4"
    double_quant: bool = True
    compute_dtype: Literal["auto", "bf16", "fp16", "fp32"] = "auto"
    revision: str | None = None
    trust_remote_code: bool = False


class LoraConfig(StrictModel):
    r: int | None = Field(None, gt=0, le=1024)  # None = auto from method and data size
    alpha: int | None = Field(None, gt=0)  # None = auto (32, as in both LWR recipes' spirit)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: str | list[str] = "all-linear"
    exclude_modules: list[str] = Field(default_factory=list)
    # Start from an existing adapter (a run directory or adapter folder) instead of a fresh one, e.g. GRPO after
    # an SFT warm-up. r/alpha/targets then come from that adapter.
    init_from: str | None = None


class DataConfig(StrictModel):
    dataset: str | None = None  # hub id, local file/dir, or built-in name ("arith")
    config_name: str | None = None  # hub dataset config, e.g. "main" for openai/gsm8k
    split: str = "train"
    eval_split: str | None = None  # None = the dataset's test split if present, else a seeded held-out slice
    prompt_field: str | None = None  # None = auto-detect
    reference_field: str | None = None  # None = auto-detect
    max_samples: int | None = Field(None, gt=0)
    heldout_size: int = Field(100, ge=0)  # rows held out when the dataset has no test split
    system_prompt: str | None = None  # None = method default (GRPO asks for "Final answer: ...")


class TrainingConfig(StrictModel):
    learning_rate: float | None = Field(None, gt=0)
    num_train_epochs: float = Field(1.0, gt=0)
    max_steps: int = Field(-1, ge=-1)  # -1 = run the epochs
    per_device_train_batch_size: int | None = Field(None, gt=0)
    gradient_accumulation_steps: int | None = Field(None, gt=0)
    max_length: int = Field(1024, gt=0)  # SFT sequence length
    seed: int = 42
    gradient_checkpointing: bool = True
    save_steps: int = Field(50, gt=0)
    save_total_limit: int = Field(2, gt=0)
    logging_steps: int = Field(1, gt=0)
    lr_scheduler_type: str = "constant_with_warmup"
    warmup_steps: int = Field(0, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    # Passed straight to SFTConfig / GRPOConfig for knobs we do not surface; checked against TRL's fields.
    extra_args: dict[str, Any] = Field(default_factory=dict)


class GRPOConfig(StrictModel):
    num_generations: int = Field(4, ge=2)
    max_completion_length: int = Field(256, gt=0)
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1.0)
    beta: float = Field(0.0, ge=0)  # KL coefficient; 0 = no reference model (saves memory)
    loss_type: str = "dapo"


class RewardConfig(StrictModel):
    # Weights of the shaped reward components (see docs/rewards.md). Reference (0/1) at 2.0 dominates: a correct
    # answer without the format (2.0) beats a wrong one with it (0.5), even with the worst boilerplate (-1.0) and
    # length (-0.25) penalties. Keys left out keep these defaults, so `--set reward.weights.format=1` changes one.
    # "accuracy" (strict math-verify, LoRA Without Regret) is off unless `accuracy: true` or given a weight.
    weights: dict[str, float] = Field(
        default_factory=lambda: {"length": 0.25, "format": 0.5, "reference": 2.0, "boilerplate": 1.0}
    )
    length_target: int = Field(400, gt=0)  # characters of visible answer: only a gentle slope (to -0.1) up to here
    length_limit: int = Field(2000, gt=0)  # characters: the length penalty reaches its -0.6 floor here
    accuracy: bool = False  # add the strict math-verify accuracy reward (LoRA Without Regret), weight 1.0 by default
    custom: list[str] = Field(default_factory=list)  # "module:function" or "path/to/file.py:function"

    @field_validator("weights")
    @classmethod
    def _known_components(cls, v: dict[str, float]) -> dict[str, float]:
        known = {"length", "format", "reference", "boilerplate", "accuracy"}
        for k in v:
            if k not in known and ":" not in k:
                hint = difflib.get_close_matches(k, sorted(known), n=1)
                raise ValueError(
                    f"unknown reward component '{k}'"
                    + (f"; did you mean '{hint[0]}'?" if hint else f"; known: {', '.join(sorted(known))}")
                )
        return {**cls.model_fields["weights"].default_factory(), **v}

    @field_validator("custom")
    @classmethod
    def _custom_form(cls, v: list[str]) -> list[str]:
        for entry in v:
            target, _, func = entry.rpartition(":")
            if not target or not func:
                raise ValueError(f"custom reward '{entry}' must look like 'module:function' or 'path/to/file.py:function'")
        return v

    @model_validator(mode="after")
    def _length_order(self) -> "RewardConfig":
        if self.length_limit <= self.length_target:
            raise ValueError(
                f"reward.length_limit ({self.length_limit}) must be greater than reward.length_target "
                f"({self.length_target}); raise the limit or lower the target"
            )
        return self


class RuntimeConfig(StrictModel):
    backend: Literal["auto", "hf", "unsloth"] = "auto"
    local_only: bool = False
    report_to: list[str] = Field(default_factory=list)  # e.g. ["trackio"]; never remote under local_only
    device: Literal["auto", "cpu", "cuda"] = "auto"


class AppConfig(StrictModel):
    method: Literal["sft", "grpo"] = "grpo"
    model: ModelConfig = Field(default_factory=ModelConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    output_dir: str = "runs"  # parent folder; each run gets its own sub-directory
    run_name: str | None = None  # None = <date>-<method>-<dataset>

    @model_validator(mode="after")
    def _check_grpo_batch(self) -> "AppConfig":
        # TRL generates `generation_batch_size` completions at a time (default: per-device batch x accumulation
        # steps) and they must form whole groups of num_generations; catch it here, not deep inside TRL.
        t = self.training
        if self.method == "grpo" and t.per_device_train_batch_size and t.gradient_accumulation_steps:
            total = t.extra_args.get("generation_batch_size") or (
                t.per_device_train_batch_size * t.extra_args.get("steps_per_generation", t.gradient_accumulation_steps)
            )
            if total % self.grpo.num_generations:
                raise ValueError(
                    f"a generation batch of {total} completions (per_device_train_batch_size x "
                    f"gradient_accumulation_steps) is not a multiple of grpo.num_generations = "
                    f"{self.grpo.num_generations}; change one so it divides"
                )
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


# ----------------------------------------------------------------------------------------------------------
# Building: defaults < preset < flags < --set


def _format_validation_error(err: ValidationError) -> str:
    """One line per problem, each naming the dotted key and what to do."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            lines.append(_unknown_key_message(loc))
            continue
        msg = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        got_s = f" (got {got!r})" if got is not None and not isinstance(got, dict) else ""
        lines.append(f"config {loc}: {msg}{got_s}" if loc else f"config: {msg}")
    return "; ".join(lines)


def all_leaf_keys(model: type[BaseModel] = AppConfig, prefix: str = "") -> list[str]:
    """Dotted names of every settable key, e.g. 'training.save_steps'."""
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys += all_leaf_keys(ann, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def _unknown_key_message(dotted: str) -> str:
    keys = all_leaf_keys()
    sections = [k for k in AppConfig.model_fields]
    candidates = keys + sections
    close = difflib.get_close_matches(dotted, candidates, n=1, cutoff=0.5)
    if not close:  # compare on the last part too: 'lora.rank' -> 'lora.r'
        leaf = dotted.rsplit(".", 1)[-1]
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in keys}
        hit = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.5)
        close = [by_leaf[hit[0]]] if hit else []
    hint = f"; did you mean '{close[0]}'?" if close else "; run 'qlora-app train --dry-run' to see all keys"
    return f"unknown config key '{dotted}'{hint}"


def _deep_merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):  # key by key, so one --set keeps the rest
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def resolve_set_key(key: str) -> str:
    """Turn a bare leaf name ('save_steps') into its dotted key; dotted keys pass through if they exist."""
    keys = all_leaf_keys()
    if key in keys or key in AppConfig.model_fields:
        return key
    if key.startswith(("reward.weights.", "training.extra_args.")):
        return key
    if "." not in key:
        matches = [k for k in keys if k.rsplit(".", 1)[-1] == key]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise UserError(f"--set key '{key}' is ambiguous ({', '.join(matches)}); use the dotted form")
    raise UserError(_unknown_key_message(key))


def parse_set(items: list[str]) -> dict:
    """['training.save_steps=5', 'r=8'] -> nested dict. Values are parsed as YAML scalars (5 -> int)."""
    out: dict = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"--set '{item}' needs the form key=value, e.g. --set training.save_steps=5")
        key, raw = item.split("=", 1)
        dotted = resolve_set_key(key.strip())
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        if isinstance(value, str):  # YAML 1.1 reads "1e-4" as a string; users mean a number
            try:
                value = float(value)
            except ValueError:
                pass
        node = out
        parts = dotted.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
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
        raise UserError(_format_validation_error(e)) from None


def build_config(preset: dict | None = None, flags: dict | None = None, sets: list[str] | None = None) -> AppConfig:
    """Merge the layers and validate once. ``flags`` is a nested dict of explicit CLI options (None = unset)."""
    data: dict = {}
    for layer in (preset or {}, _drop_none(flags or {}), parse_set(sets or [])):
        data = _deep_merge(data, layer)
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


def resolve(cfg: AppConfig, num_rows: int | None = None) -> AppConfig:
    """Fill every auto value; returns a new, complete config (what gets written to the run directory)."""
    c = cfg.model_copy(deep=True)
    if c.model.name_or_path is None:
        c.model.name_or_path = DEFAULT_GRPO_MODEL if c.method == "grpo" else DEFAULT_SFT_MODEL
    if c.lora.r is None:
        c.lora.r = DEFAULT_RANK["grpo"] if c.method == "grpo" else sft_rank_for_size(num_rows)
    if c.lora.alpha is None:
        c.lora.alpha = 32 if c.method == "grpo" else max(16, c.lora.r // 4)
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
    else:
        if t.per_device_train_batch_size is None:
            t.per_device_train_batch_size = 4
        if t.gradient_accumulation_steps is None:
            t.gradient_accumulation_steps = 4
    return validate(c.model_dump())  # re-run cross-field checks on the filled values


def effective_batch(cfg: AppConfig, processes: int = 1) -> int:
    """Examples per optimizer step. For GRPO, TRL's batch counts completions; the examples are the prompts
    (each contributes a group of num_generations completions), which is what the batch-size advice is about."""
    t = cfg.training
    n = (t.per_device_train_batch_size or 1) * (t.gradient_accumulation_steps or 1) * processes
    return max(1, n // cfg.grpo.num_generations) if cfg.method == "grpo" else n


def warnings_for(cfg: AppConfig) -> list[str]:
    """Advice that does not stop a run."""
    out = []
    eb = effective_batch(cfg)
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
