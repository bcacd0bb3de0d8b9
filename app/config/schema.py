"""The configuration schema: every section and key of ``AppConfig``, its default, its bounds and the help text
that `train --dry-run --explain` and the UI's tooltips show. Building (defaults < preset < flags < --set) and
resolution of auto values live in app/config/build.py; dotted keys and messages in app/config/keys.py.

Only pydantic at module level: the CLI loads this for ``--help``.
"""

from __future__ import annotations

import difflib
import re
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from app.config.reward_components import NAMES as COMPONENT_NAMES
from app.config.reward_components import default_weights


class StrictModel(BaseModel):
    """Base for every section: unknown keys are errors (a typo must not be silently ignored)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    def __eq__(self, other) -> bool:
        # what a config says, not what building it noted (private attributes: where values came from, notes)
        return type(self) is type(other) and self.__dict__ == other.__dict__


def _auto_is_empty(v):
    return None if isinstance(v, str) and v.strip().lower() == "auto" else v


def _one_is_a_list(v):
    """--set reward.custom=file.py:fn means a list of that one entry."""
    return [v] if isinstance(v, str) else v


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
    r: int | None = _d(None, "LoRA rank; empty = auto (LoRA Without Regret)", gt=0, le=1024)
    alpha: int | None = _d(None, "LoRA alpha (scale = alpha / r); empty = auto", gt=0)
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
    chosen_field: str | None = _d(None, "preference data: column holding the preferred answer; empty = auto-detect")
    rejected_field: str | None = _d(None, "preference data: column holding the answer that lost; empty = "
                                          "auto-detect")
    max_samples: int | None = _d(None, "use at most this many training rows", gt=0)
    heldout_size: int = _d(100, "rows held out when the dataset has no test split", ge=0)
    system_prompt: str | None = _d(None, "system prompt put before every prompt; empty = the method's default "
                                         "(GRPO asks for 'Final answer: ...')")
    # Where a key's value came from when it was not typed as its own flag ("data.eval_split from preset demo-grpo"):
    # set by app/config/build.py, not saved; messages about a value name it (said_as).
    _origin: dict[str, str] = PrivateAttr(default_factory=dict)

    def said_as(self, key: str) -> str:
        """How a message names this key's value: the flag that set it, or the preset or config it came from."""
        return self._origin.get(key) or f"--{key.replace('_', '-')}"


class TrainingConfig(StrictModel):
    learning_rate: float | None = _d(None, "empty = auto (LoRA wants ~10x the full fine-tuning rate)", gt=0)
    num_train_epochs: float = _d(1.0, "passes over the data when max_steps is -1", gt=0)
    max_steps: int = _d(-1, "optimizer steps to run; -1 = run num_train_epochs", ge=-1)
    per_device_train_batch_size: int | None = _d(None, "rows (SFT), pairs (DPO, ORPO) or completions (GRPO) per "
                                                       "forward pass; empty = auto", gt=0)
    gradient_accumulation_steps: int | None = _d(None, "forward passes per optimizer step; empty = auto", gt=0)
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
    eval_every: int | None = _d(None, "score held-out rows (greedy, the shaped reward, as compare does) every this "
                                      "many steps and at the end; empty = auto: about 10 points per run, on logged "
                                      "steps; 0 = off", ge=0)
    eval_rows: int = _d(32, "held-out rows each evaluation scores (a seeded sample of the held-out split)", ge=1)
    keep_best: bool = _d(False, "also keep the adapter of the best evaluation in RUN/adapter-best/ (compare and "
                                "export take that folder)")
    proof_rows: int = _d(100, "held-out rows base and adapter are compared on when training ends (greedy, scored with "
                              "the shaped reward): the run's proof, RUN/compare.json, which runs, the UI and the "
                              "model card show; 0 = none", ge=0)
    lr_scheduler_type: str = _d("constant_with_warmup", "transformers scheduler name")
    warmup_steps: int = _d(0, "steps of linear learning-rate warm-up", ge=0)
    max_grad_norm: float = _d(1.0, "gradient clipping norm", gt=0)
    extra_args: dict[str, Any] = Field(default_factory=dict, description=(
        "passed straight to the method's TRL config (SFTConfig, GRPOConfig, DPOConfig, ORPOConfig) for knobs "
        "not surfaced here; checked against its fields"))

    @field_validator("max_steps")
    @classmethod
    def _not_zero(cls, v: int) -> int:
        if v == 0:  # Hugging Face's Trainer reads 0 as "unset" and would run a whole epoch
            raise ValueError("0 steps trains nothing; pass a number of steps >= 1, or -1 to run num_train_epochs")
        return v


# TRL's GRPO losses (trl 1.16, GRPOConfig.loss_type), checked here so a typo is one line before anything loads;
# tests/test_config.py keeps this list equal to the names the installed TRL documents.
LOSS_TYPES = {
    "dapo": "token-level, normalised by the tokens in the whole batch (TRL's default)",
    "grpo": "per-sequence mean (length bias: prefers short right and long wrong answers)",
    "dr_grpo": "normalised by a constant (max_completion_length): no length bias",
    "bnpo": "token-level, normalised by the tokens in the local batch",
    "cispo": "clipped importance weights on a REINFORCE loss (ScaleRL; epsilon_high ~5)",
    "sapo": "soft gates instead of hard clipping (SAPO)",
    "luspo": "length-unbiased sequence-level loss (needs importance_sampling_level=sequence)",
    "vespo": "variance-reduced sequence-level weights (importance_sampling_level=token)",
}


class GRPOConfig(StrictModel):
    num_generations: int = _d(4, "completions sampled per prompt (the group GRPO compares within)", ge=2)
    max_completion_length: int = _d(256, "tokens a completion may take", gt=0)
    temperature: float = _d(1.0, "sampling temperature; groups need spread, so keep it near 1", gt=0)
    top_p: float = _d(1.0, "nucleus sampling", gt=0, le=1.0)
    beta: float = _d(0.0, "KL coefficient; 0 = no reference model (saves memory)", ge=0)
    loss_type: str = _d("dapo", "TRL's GRPO loss: " + "; ".join(f"{k} = {v}" for k, v in LOSS_TYPES.items()))
    importance_sampling_level: Literal["token", "sequence"] = _d(
        "token", "importance ratio per token, or one per sequence (sequence = GSPO, often steadier)")
    scale_rewards: Literal["group", "batch", "none"] = _d(
        "group", "divide advantages by the reward spread of each group, of the whole batch, or not at all (none: "
                 "Dr. GRPO's advice against a difficulty bias)")
    mask_truncated_completions: bool = _d(False, "leave completions cut at max_completion_length out of the loss "
                                                 "(DAPO: they are not wrong, only unfinished)")
    epsilon: float = _d(0.2, "lower clip range of the importance ratio", gt=0)
    epsilon_high: float | None = _d(None, "upper clip range; empty = epsilon (DAPO's clip-higher uses 0.28; cispo "
                                          "reads it as its max, ~5)", gt=0)

    @field_validator("loss_type")
    @classmethod
    def _known_loss(cls, v: str) -> str:
        if v not in LOSS_TYPES:
            hint = difflib.get_close_matches(v, LOSS_TYPES, n=1)
            raise ValueError(f"unknown GRPO loss '{v}'" + (f"; did you mean '{hint[0]}'?" if hint else "")
                             + f"; TRL's losses: {', '.join(LOSS_TYPES)}")
        return v
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


# TRL's DPO losses (trl 1.16, DPOConfig.loss_type); tests/test_dpo.py keeps this list equal to the names the installed
# TRL documents.
DPO_LOSS_TYPES = {
    "sigmoid": "DPO's logistic loss on the chosen-rejected reward difference (the original)",
    "hinge": "hinge loss on it (SLiC)",
    "ipo": "squared loss toward 1/(2 beta) (IPO: does not overfit to deterministic preferences)",
    "exo_pair": "reverse-KL to the preference distribution (EXO)",
    "nca_pair": "absolute rewards, not only their difference (NCA)",
    "robust": "DPO that expects some labels to be flipped (label_smoothing is the flip rate)",
    "bco_pair": "a binary classifier of chosen vs rejected (BCO)",
    "sppo_hard": "self-play preference optimization, hard labels (SPPO)",
    "aot": "alignment via optimal transport, paired (AOT)",
    "aot_unpaired": "alignment via optimal transport, unpaired",
    "apo_zero": "anchored: push chosen up and rejected down (APO-zero, for chosen better than the model)",
    "apo_down": "anchored: push both down, rejected more (APO-down, for chosen worse than the model)",
    "discopop": "log-ratio modulated loss (DiscoPOP)",
    "sft": "the chosen answer's negative log-likelihood: mixed in with loss_weights it is RPO",
    "sigmoid_norm": "DPO on length-normalized log-probabilities",
}


def _known_dpo_loss(v):
    if v is None:  # `--set dpo.loss_type=`: back to the default, as an empty value means for every key
        return ["sigmoid"]
    names = [v] if isinstance(v, str) else list(v)
    names = [n.strip() for name in names for n in str(name).split(",") if n.strip()]
    for name in names:
        if name not in DPO_LOSS_TYPES:
            hint = difflib.get_close_matches(name, DPO_LOSS_TYPES, n=1)
            raise ValueError(f"unknown DPO loss '{name}'" + (f"; did you mean '{hint[0]}'?" if hint else "")
                             + f"; TRL's losses: {', '.join(DPO_LOSS_TYPES)}")
    if not names:
        raise ValueError("name at least one DPO loss, e.g. sigmoid")
    return names


class DPOSection(StrictModel):
    loss_type: list[str] = _d(["sigmoid"], "TRL's DPO loss, or several mixed by loss_weights (sigmoid,sft is RPO): "
                              + "; ".join(f"{k} = {v}" for k, v in DPO_LOSS_TYPES.items()))
    loss_weights: list[float] | None = _d(None, "one weight per loss in loss_type; empty = 1 each")
    beta: float = _d(0.1, "DPO: how far the adapter may move from the base (the reference, the adapter switched "
                          "off): higher stays closer; ORPO: the weight of its odds-ratio term (lambda)", gt=0)
    label_smoothing: float = _d(0.0, "robust / exo_pair: the share of labels taken to be flipped", ge=0, lt=0.5)

    @field_validator("loss_type", mode="before")
    @classmethod
    def _losses(cls, v):
        return _known_dpo_loss(v)

    @model_validator(mode="after")
    def _weights_match(self) -> "DPOSection":
        if self.loss_weights is not None and len(self.loss_weights) != len(self.loss_type):
            raise ValueError(f"dpo.loss_weights has {len(self.loss_weights)} weight(s) for {len(self.loss_type)} "
                             f"loss(es) ({', '.join(self.loss_type)}); give one weight per loss")
        return self


class RewardConfig(StrictModel):
    # The default weights and every component's meaning live in app/config/reward_components.py (see docs/rewards.md).
    weights: dict[str, float] = Field(default_factory=default_weights, description=(
        "weight of each shaped-reward component (" + ", ".join(COMPONENT_NAMES) + ") or custom function; keys "
        "left out keep their defaults, so reward.weights.format=1 changes one"))
    length_target: int = _d(400, "characters of visible answer the length component allows with only a gentle "
                                 "slope (to -0.1)", gt=0)
    length_limit: int = _d(2000, "characters at which the length penalty reaches its -0.6 floor", gt=0)
    accuracy: bool = _d(False, "add the strict math-verify accuracy component (LoRA Without Regret's reward)")
    custom: Annotated[list[str], BeforeValidator(_one_is_a_list)] = Field(default_factory=list, description=(
        "extra reward functions: 'module:function' or 'path/to/file.py:function' (one, or a list)"))

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
    threads: int | None = _d(None, "CPU threads torch may use; empty = auto: the cores other processes leave free "
                                   "(at least one), re-checked while training; OMP_NUM_THREADS also fixes it", ge=1)
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


# The methods and what each learns from (the UI's radio, the CLI's help, the config's check).
METHODS = {"grpo": "learn from rewards", "sft": "learn from reference answers", "dpo": "learn from preference pairs",
           "orpo": "learn from preference pairs without a reference model (TRL's experimental ORPO)"}
EXPERIMENTAL_METHODS = ("orpo",)
# How help and descriptions name the methods: "GRPO, SFT and DPO; ORPO experimental".
_STABLE = [m.upper() for m in METHODS if m not in EXPERIMENTAL_METHODS]
METHODS_IN_WORDS = (", ".join(_STABLE[:-1]) + " and " + _STABLE[-1]
                    + "".join(f"; {m.upper()} experimental" for m in EXPERIMENTAL_METHODS))
PREFERENCE_METHODS = ("dpo", "orpo")  # trained on preference pairs (app/data/preference.py)


class AppConfig(StrictModel):
    method: Literal["grpo", "sft", "dpo", "orpo"] = _d("grpo", "; ".join(f"{k}: {v}" for k, v in METHODS.items()))
    model: ModelConfig = Field(default_factory=ModelConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    dpo: DPOSection = Field(default_factory=DPOSection)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    output_dir: str = _d("runs", "parent folder; each run gets its own sub-directory")
    run_name: str | None = _d(None, "run folder name; empty = <date>-<method>-<dataset>")
    # What building this config decided and the user should hear (a preset's data keys left out), not saved;
    # the run and the dry run say them (app/config/resolve.py warnings_for).
    _notes: list[str] = PrivateAttr(default_factory=list)

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

    @model_validator(mode="after")
    def _orpo_has_one_loss(self) -> "AppConfig":
        if self.method == "orpo" and (self.dpo.loss_type != ["sigmoid"] or self.dpo.loss_weights):
            raise ValueError(f"dpo.loss_type={','.join(self.dpo.loss_type)} is a DPO setting and ORPO has one loss of "
                             "its own; drop it, or train with --method dpo")
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)
