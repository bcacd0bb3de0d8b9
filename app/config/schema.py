"""The configuration schema: every section and key of ``AppConfig``, its default, its bounds and the help text
that `train --dry-run --explain` and the UI's tooltips show. Building (defaults < preset < flags < --set) and
resolution of auto values live in app/config/build.py; dotted keys and messages in app/config/keys.py.

Only pydantic at module level: the CLI loads this for ``--help``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import yaml
from pydantic import (
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)

from app.config.data_section import DataConfig, MixPart  # noqa: F401 - re-exported: the data section's own file
from app.config.fields import AutoBool, StrictModel, _d
from app.config.methods import METHODS, NAMES, with_
from app.config.method_sections import (  # noqa: F401 - re-exported: the sections live with their method
    DPO_LOSS_TYPES,
    LOSS_TYPES,
    DistillSection,
    DPOSection,
    GRPOConfig,
    KTOSection,
    ToolsConfig,
)
from app.config.reward_section import (  # noqa: F401 - re-exported: the reward's section lives with its table
    REFERENCE_MATCHES,
    JudgeConfig,
    RewardConfig,
)


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
    chat_template: str | None = _d(None, "use one of the chat templates TRL ships instead of the model's own, by name "
                                         "(qwen2_5, qwen3, llama3_1, ...): a tool run needs one TRL can parse calls of")
    images: bool | None = _d(None, "load the model whole, vision tower and processor, to read images (a "
                                   "vision-language model); empty = auto: on when the data has images")
    quantize_experts: bool | None = _d(None, "a mixture-of-experts model: its fused experts in 4-bit (NF4, each "
                                              "quantized as it loads: bitsandbytes' parametrizations) or 16-bit (as "
                                              "transformers loads them); empty = auto: 4-bit when 16-bit experts "
                                              "would not fit the GPU, else 16-bit")

    @property
    def experts_in_4bit(self) -> bool:
        """A MoE model's fused experts end up 4-bit: quantized as they load, on a 4-bit run only."""
        return self.load_in_4bit and bool(self.quantize_experts)


class LoraConfig(StrictModel):
    r: int | None = _d(None, "LoRA rank; empty = auto (LoRA Without Regret)", gt=0, le=1024)
    alpha: int | None = _d(None, "LoRA alpha (scale = alpha / r); empty = auto", gt=0)
    dropout: float = _d(0.0, "dropout on the LoRA input", ge=0.0, lt=1.0)
    target_modules: str | list[str] = _d("all-linear", "layers that get an adapter: all-linear (attention and "
                                                        "MLP, what LoRA Without Regret recommends), layer names "
                                                        "(q_proj,v_proj), or a regex over full module names")
    exclude_modules: list[str] = Field(default_factory=list, description="module names to leave without adapter")
    target_experts: bool = _d(False, "a mixture-of-experts model: LoRA on its experts too (PEFT's "
                                     "target_parameters); off by default: the experts are most of the model and "
                                     "each token uses few of them, so attention and the dense layers take the "
                                     "adapter")
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


class EarlyStopConfig(StrictModel):
    """Stop a run whose held-out curve stopped rising (training.eval_every's points), keeping its best adapter."""

    patience: int = _d(0, "held-out points in a row that may fail to beat the best by min_delta before the run stops; "
                          "the best point's adapter becomes the run's adapter (the last is kept in "
                          "RUN/adapter-last/); 0 = off", ge=0)
    min_delta: float = _d(0.0, "the least rise over the best held-out score (accuracy as a share: 0.02 = 2 points) "
                               "that counts as still learning", ge=0)

    @property
    def on(self) -> bool:
        return self.patience > 0


class TrainingConfig(StrictModel):
    learning_rate: float | None = _d(None, "empty = auto (LoRA wants ~10x the full fine-tuning rate)", gt=0)
    num_train_epochs: float = _d(1.0, "passes over the data when max_steps is -1", gt=0)
    max_steps: int = _d(-1, "optimizer steps to run; -1 = run num_train_epochs", ge=-1)
    per_device_train_batch_size: int | None = _d(None, "rows (SFT), pairs (DPO, ORPO) or completions (GRPO) per "
                                                       "forward pass; empty = auto", gt=0)
    gradient_accumulation_steps: int | None = _d(None, "forward passes per optimizer step; empty = auto", gt=0)
    max_length: int = _d(1024, "SFT: longest tokenized example; longer ones are truncated", gt=0)
    assistant_only_loss: AutoBool = _d(None, "SFT on conversations: the loss on the assistant's answers only, "
                                              "never on the system prompt or the user's words; empty = auto: on "
                                              "(false trains on every token of the conversation)")
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
    early_stop: EarlyStopConfig = Field(default_factory=EarlyStopConfig, description=(
        "early stopping on the held-out curve (patience in held-out points, a minimum rise); off by default"))
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
    master_port: int | None = _d(None, "a free TCP port on the master machine; empty = on one machine, a free port "
                                       "picked at launch (two runs on one machine never collide), on several: 29500",
                                 ge=1, le=65535)
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


class AppConfig(StrictModel):
    method: str = _d(NAMES[0], "; ".join(f"{k}: {m.learns_from}" for k, m in METHODS.items()))
    model: ModelConfig = Field(default_factory=ModelConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    dpo: DPOSection = Field(default_factory=DPOSection)
    kto: KTOSection = Field(default_factory=KTOSection)
    distill: DistillSection = Field(default_factory=DistillSection)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)
    output_dir: str = _d("runs", "parent folder; each run gets its own sub-directory")
    run_name: str | None = _d(None, "run folder name; empty = <date>-<method>-<dataset>")
    # What building this config decided and the user should hear (a preset's data keys left out), not saved;
    # the run and the dry run say them (app/config/resolve.py warnings_for).
    _notes: list[str] = PrivateAttr(default_factory=list)

    @field_validator("method")
    @classmethod
    def _known_method(cls, v: str) -> str:
        # read from the registry when checked, not frozen into a type: a method is its module's (app/config/methods/)
        if v not in METHODS:
            raise ValueError(f"method {v!r} is not one of {', '.join(METHODS)}; pick one of them (--method)")
        return v

    @model_validator(mode="after")
    def _method_checks(self) -> "AppConfig":
        problem = METHODS[self.method].check(self)  # what the method itself refuses (app/config/methods/)
        if problem:
            raise ValueError(problem)
        if self.tools.enabled and not METHODS[self.method].rewarded:
            raise ValueError(f"tools and environments train with GRPO (the model learns from the rewards of its "
                             f"rollouts); use --method {' or '.join(with_('rewarded'))}, or drop --tools / "
                             f"--environment for {self.method.upper()}")
        return self

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)
