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
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from app.errors import UserError
from app.rewards.registry import NAMES as COMPONENT_NAMES
from app.rewards.registry import default_weights

# A model that fits an 8 GB GPU for GRPO in 4-bit (about 1.2 GB of weights, room for 4-8 generations of
# 512 tokens) and already follows instructions well enough for GSM8K to give a useful reward signal.
DEFAULT_GRPO_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
DEFAULT_SFT_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
BUILTIN_MODEL = "arith-base"  # `model.name_or_path: arith-base` = the tiny model shipped in app/assets/

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


def _auto_is_empty(v):
    return None if isinstance(v, str) and v.strip().lower() == "auto" else v


# A switch whose empty value means auto; `auto` itself is accepted too (--set grpo.use_vllm=auto).
AutoBool = Annotated[bool | None, BeforeValidator(_auto_is_empty)]


def _d(default, description: str, **kw):
    """A field with the help text `train --dry-run --explain` and the UI's tooltips show."""
    return Field(default, description=description, **kw)


class ModelConfig(StrictModel):
    name_or_path: str | None = _d(None, "hub id or local model folder; empty = the method's default model")
    load_in_4bit: bool = _d(True, "load the base in 4-bit (QLoRA); false loads it in the compute dtype")
    quant_type: Literal["nf4", "fp4"] = _d("nf4", "4-bit data type; NF4 is the QLoRA paper's choice")
    double_quant: bool = _d(True, "quantize the quantization constants too (~0.37 bit/parameter saved)")
    compute_dtype: Literal["auto", "bf16", "fp16", "fp32"] = _d(
        "auto", "dtype of the matmuls: auto = bf16 on Ampere+ GPUs, fp16 on older GPUs, fp32 on CPU")
    attn_implementation: Literal["auto", "sdpa", "eager", "flash_attention_2"] = _d(
        "auto", "attention kernels: auto = flash_attention_2 on a CUDA GPU when flash-attn is installed, else sdpa")
    revision: str | None = _d(None, "hub revision (branch, tag or commit) of the model")
    trust_remote_code: bool = _d(False, "allow the model repository's own Python code to run")


class LoraConfig(StrictModel):
    r: int | None = _d(None, "LoRA rank; empty = auto: 16 for GRPO, 16-256 for SFT by data size (LoRA Without "
                             "Regret)", gt=0, le=1024)
    alpha: int | None = _d(None, "LoRA alpha (scale = alpha / r); empty = auto: 32 for GRPO, max(16, r/4) for SFT",
                           gt=0)
    dropout: float = _d(0.0, "dropout on the LoRA input", ge=0.0, lt=1.0)
    target_modules: str | list[str] = _d("all-linear", "layers that get an adapter: all-linear (attention and "
                                                        "MLP, what LoRA Without Regret recommends), layer names "
                                                        "(q_proj,v_proj), or a regex over full module names")
    exclude_modules: list[str] = Field(default_factory=list, description="module names to leave without adapter")
    init_from: str | None = _d(None, "start from an existing adapter (a run folder or adapter folder) instead of a "
                                     "fresh one, e.g. GRPO after SFT; r, alpha and targets then come from it")

    @field_validator("target_modules")
    @classmethod
    def _names_are_a_list(cls, v):
        # PEFT reads a string as a regex that must match the WHOLE module name, so "q_proj" would match nothing
        # ("model.layers.0.self_attn.q_proj"); plain names, one or comma-separated, are meant as a list.
        if isinstance(v, str) and v != "all-linear" and re.fullmatch(r"\s*[\w.-]+(\s*,\s*[\w.-]+)*\s*", v):
            return [name.strip() for name in v.split(",")]
        return v


class DataConfig(StrictModel):
    dataset: str | None = _d(None, "hub id, local .jsonl/.json/.csv/.parquet file or folder, or a built-in name "
                                   "(arith, arith-sft)")
    config_name: str | None = _d(None, "hub dataset config, e.g. 'main' for openai/gsm8k")
    split: str = _d("train", "split to train on")
    eval_split: str | None = _d(None, "held-out split; empty = the dataset's test split if any, else a seeded "
                                      "slice of heldout_size rows")
    prompt_field: str | None = _d(None, "column holding the prompt; empty = auto-detect (qlora-app inspect shows why)")
    reference_field: str | None = _d(None, "column holding the reference answer; empty = auto-detect")
    max_samples: int | None = _d(None, "use at most this many training rows", gt=0)
    heldout_size: int = _d(100, "rows held out when the dataset has no test split", ge=0)
    system_prompt: str | None = _d(None, "system prompt put before every prompt; empty = the method's default "
                                         "(GRPO asks for 'Final answer: ...')")


class TrainingConfig(StrictModel):
    learning_rate: float | None = _d(None, "empty = auto: 2e-4 for SFT, 3e-5 for GRPO (LoRA wants ~10x the full "
                                           "fine-tuning rate)", gt=0)
    num_train_epochs: float = _d(1.0, "passes over the data when max_steps is -1", gt=0)
    max_steps: int = _d(-1, "optimizer steps to run; -1 = run num_train_epochs", ge=-1)
    per_device_train_batch_size: int | None = _d(None, "rows (SFT) or completions (GRPO) per forward pass; empty "
                                                       "= auto: 4 for SFT (1 packed row when packing), "
                                                       "num_generations for GRPO", gt=0)
    gradient_accumulation_steps: int | None = _d(None, "forward passes per optimizer step; empty = auto: 4 for "
                                                       "SFT, 2 for GRPO", gt=0)
    max_length: int = _d(1024, "SFT: longest tokenized example; longer ones are truncated", gt=0)
    packing: AutoBool = _d(None, "SFT: pack examples into full rows with no padding (each still attends only to "
                                    "itself); empty = auto: on, except with the Unsloth backend or a model's own "
                                    "remote code, whose attention would let packed examples see each other")
    seed: int = _d(42, "seed for data order, LoRA init, sampling, and the held-out split")
    gradient_checkpointing: bool = _d(True, "recompute activations in backward: much less memory, ~30% slower")
    activation_offloading: AutoBool = _d(None, "SFT on CUDA: park checkpointed activations in CPU memory; empty "
                                                  "= auto: on only when the fit check says the run needs it")
    use_liger_kernel: AutoBool = _d(None, "Liger's fused Triton kernels; empty = auto: on on CUDA when "
                                             "liger-kernel is installed")
    save_steps: int = _d(50, "save a resumable checkpoint every this many steps", gt=0)
    save_total_limit: int = _d(2, "keep at most this many checkpoints (oldest removed)", gt=0)
    logging_steps: int = _d(1, "write a metrics.jsonl row every this many steps", gt=0)
    lr_scheduler_type: str = _d("constant_with_warmup", "transformers scheduler name")
    warmup_steps: int = _d(0, "steps of linear learning-rate warm-up", ge=0)
    max_grad_norm: float = _d(1.0, "gradient clipping norm", gt=0)
    extra_args: dict[str, Any] = Field(default_factory=dict, description=(
        "passed straight to TRL's SFTConfig / GRPOConfig for knobs not surfaced here; checked against its fields"))

    @field_validator("max_steps")
    @classmethod
    def _not_zero(cls, v: int) -> int:
        if v == 0:  # Hugging Face's Trainer reads 0 as "unset" and would run a whole epoch
            raise ValueError("0 steps trains nothing; pass a number of steps >= 1, or -1 to run num_train_epochs")
        return v


class GRPOConfig(StrictModel):
    num_generations: int = _d(4, "completions sampled per prompt (the group GRPO compares within)", ge=2)
    max_completion_length: int = _d(256, "tokens a completion may take", gt=0)
    temperature: float = _d(1.0, "sampling temperature; groups need spread, so keep it near 1", gt=0)
    top_p: float = _d(1.0, "nucleus sampling", gt=0, le=1.0)
    beta: float = _d(0.0, "KL coefficient; 0 = no reference model (saves memory)", ge=0)
    loss_type: str = _d("dapo", "TRL GRPO loss: dapo, grpo, dr_grpo, bnpo, ...")
    generation_batch_size: int | None = _d(None, "completions sampled at once (they serve several optimizer steps); "
                                                 "empty = auto: about 64, at most 4 optimizer steps' worth", gt=0)
    sampler: Literal["auto", "merged", "plain"] = _d(
        "auto", "where completions are sampled: merged = a dense copy of the base with the current LoRA merged in "
                "(refreshed every step; compiled with a static cache on CUDA); plain = the 4-bit training model; "
                "auto = merged where the copy fits")
    use_vllm: AutoBool = _d(None, "sample with vLLM in colocate mode (same GPU); empty = auto: on on CUDA when "
                                     "vllm is installed")
    vllm_gpu_memory_utilization: float = _d(0.3, "share of the GPU vLLM may take for weights and KV cache",
                                            gt=0, le=1.0)


class RewardConfig(StrictModel):
    # The default weights and every component's meaning live in app/rewards/registry.py (see docs/rewards.md).
    weights: dict[str, float] = Field(default_factory=default_weights, description=(
        "weight of each shaped-reward component (" + ", ".join(COMPONENT_NAMES) + ") or custom function; keys "
        "left out keep their defaults, so reward.weights.format=1 changes one"))
    length_target: int = _d(400, "characters of visible answer the length component allows with only a gentle "
                                 "slope (to -0.1)", gt=0)
    length_limit: int = _d(2000, "characters at which the length penalty reaches its -0.6 floor", gt=0)
    accuracy: bool = _d(False, "add the strict math-verify accuracy component (LoRA Without Regret's reward)")
    custom: list[str] = Field(default_factory=list, description=(
        "extra reward functions: 'module:function' or 'path/to/file.py:function'"))

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
    backend: Literal["auto", "hf", "unsloth"] = _d("auto", "auto = Unsloth on CUDA when installed, else HF")
    local_only: bool = _d(False, "air-gapped: local paths and the HF cache only, never the network")
    report_to: list[str] = Field(default_factory=list, description=(
        "trackers, e.g. [trackio]; remote ones are refused under local_only"))
    device: Literal["auto", "cpu", "cuda"] = _d("auto", "auto = the GPU when there is one; cpu stays on the CPU")
    # Scale-out through torch.distributed.run (torchrun): one process per GPU (or CPU worker) on each machine.
    num_processes: int = _d(1, "training processes on this machine (one per GPU); > 1 runs DDP through torchrun",
                            ge=1, le=1024)
    nnodes: int = _d(1, "machines taking part; every machine runs the same command with its own node_rank", ge=1)
    node_rank: int = _d(0, "this machine's index among nnodes (0 = the machine at master_addr)", ge=0)
    master_addr: str = _d("127.0.0.1", "address of the node_rank 0 machine, reachable from every machine")
    master_port: int = _d(29500, "a free TCP port on the master machine", ge=1, le=65535)
    fit_check: bool = _d(True, "refuse, before any download, a run the memory estimate says cannot fit the "
                               "detected GPU; false (--no-fit-check) tries anyway")
    fsdp: bool = _d(False, "shard the 4-bit base across the GPUs (FSDP + QLoRA) for a model that does not fit one; "
                           "needs CUDA and num_processes > 1")

    @model_validator(mode="after")
    def _node_rank_in_range(self) -> "RuntimeConfig":
        if self.node_rank >= self.nnodes:
            raise ValueError(f"runtime.node_rank ({self.node_rank}) must be below runtime.nnodes ({self.nnodes}); "
                             "number the machines 0 .. nnodes-1")
        return self


class AppConfig(StrictModel):
    method: Literal["sft", "grpo"] = _d("grpo", "sft (learn from reference answers) or grpo (learn from rewards)")
    model: ModelConfig = Field(default_factory=ModelConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    output_dir: str = _d("runs", "parent folder; each run gets its own sub-directory")
    run_name: str | None = _d(None, "run folder name; empty = <date>-<method>-<dataset>")

    @model_validator(mode="after")
    def _check_grpo_batch(self) -> "AppConfig":
        # TRL generates `generation_batch_size` completions at a time (default: per-device batch x accumulation
        # steps) and they must form whole groups of num_generations; catch it here, not deep inside TRL.
        t = self.training
        if self.method == "grpo" and t.per_device_train_batch_size and t.gradient_accumulation_steps:
            total = self.grpo.generation_batch_size or t.extra_args.get("generation_batch_size") or (
                t.per_device_train_batch_size * t.extra_args.get("steps_per_generation", t.gradient_accumulation_steps)
            )
            if total % self.grpo.num_generations:
                source = ("grpo.generation_batch_size" if self.grpo.generation_batch_size
                          else "training.extra_args" if "generation_batch_size" in t.extra_args
                          or "steps_per_generation" in t.extra_args
                          else "per_device_train_batch_size x gradient_accumulation_steps")
                raise ValueError(
                    f"a generation batch of {total} completions ({source}) is not a multiple of "
                    f"grpo.num_generations = {self.grpo.num_generations}; change one so it divides"
                )
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


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
        from app.config_keys import format_validation_error

        raise UserError(format_validation_error(e)) from None


def build_config(preset: dict | None = None, flags: dict | None = None, sets: list[str] | None = None) -> AppConfig:
    """Merge the layers and validate once. ``flags`` is a nested dict of explicit CLI options (None = unset)."""
    from app.config_keys import parse_set

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


def resolve(cfg: AppConfig, num_rows: int | None = None) -> AppConfig:
    """Fill every auto value; returns a new, complete config (what gets written to the run directory)."""
    c = cfg.model_copy(deep=True)
    if c.model.name_or_path is None:
        c.model.name_or_path = DEFAULT_GRPO_MODEL if c.method == "grpo" else DEFAULT_SFT_MODEL
    elif c.model.name_or_path == BUILTIN_MODEL:  # the tiny model shipped for the offline demo
        from app.demo.recipe import base_model_path

        c.model.name_or_path = str(base_model_path(build_if_missing=False))
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
