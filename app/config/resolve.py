"""What "auto" (None) becomes for a run: the method's defaults from "LoRA Without Regret" (learning rate ~10x full
fine-tuning, small ranks for RL), the default models and system prompt, SFT's rank by data size; and the warnings a
config earns (a large effective batch). ``resolve`` is the one resolution of a run (the plan calls it)."""

from __future__ import annotations

from app.config.build import revalidate
from app.config.builtin import BUILTIN_MODELS, builtin_model_path
from app.config.schema import EXPERIMENTAL_METHODS, PREFERENCE_METHODS, AppConfig

# A model that fits an 8 GB GPU for GRPO in 4-bit (about 1.2 GB of weights, room for 4-8 generations of
# 512 tokens) and already follows instructions well enough for GSM8K to give a useful reward signal.
DEFAULT_GRPO_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
DEFAULT_SFT_MODEL = "Qwen/Qwen2.5-1.5B-Instruct"

# "LoRA Without Regret": LoRA wants ~10x the full fine-tuning learning rate; RL needs very little capacity. DPO: 10x
# TRL's full fine-tuning default (1e-6); its pairs carry about as little information per step as RL's rewards.
# Distillation: a target on every token of every answer, as SFT's, but on the student's own samples: SFT's LoRA rate
# halved (the answers move with the adapter), rank as RL's small one (it learns one behaviour: the teacher's).
DEFAULT_LR = {"sft": 2e-4, "grpo": 3e-5, "dpo": 1e-5, "orpo": 1e-5, "kto": 1e-5, "distill": 1e-4}
DEFAULT_RANK = {"grpo": 16, "dpo": 16, "orpo": 16, "kto": 16, "distill": 16}
EFFECTIVE_BATCH_WARN = 32
# KTO estimates its KL term within each step's batch: TRL's KTO guide asks a per-step batch of at least 4 and an
# effective batch of 16 to 128, which LoRA Without Regret's "under 32" would contradict, so KTO is checked against it
KTO_STEP_BATCH, KTO_EFFECTIVE = 4, (16, 128)

# The prompt suffix that tells a model the answer format the shaped reward's format bonus looks for.
DEFAULT_GRPO_SYSTEM_PROMPT = (
    "Solve the problem step by step, briefly. End with a line of the form 'Final answer: <answer>'."
)


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
    if cfg.model.name_or_path in BUILTIN_MODELS:  # the tiny models shipped for the offline demos
        return str(builtin_model_path(cfg.model.name_or_path))
    return cfg.model.name_or_path


def resolve(cfg: AppConfig, num_rows: int | None = None) -> AppConfig:
    """Fill every auto value; returns a new, complete config (what gets written to the run directory)."""
    c = cfg.model_copy(deep=True)
    c.model.name_or_path = model_name(c)
    j = c.reward.judge
    if j.model in BUILTIN_MODELS and not j.url:  # a shipped tiny model as a local judge, by the same names
        j.model = str(builtin_model_path(j.model))
    if c.distill.teacher in BUILTIN_MODELS:  # and as a teacher (arith-teacher: the distillation demo's)
        c.distill.teacher = str(builtin_model_path(c.distill.teacher))
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
    elif c.method in (*PREFERENCE_METHODS, "kto", "distill"):  # pairs, KTO's answer + KL answer, or two models
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
    return revalidate(c)  # re-run cross-field checks on the filled values


def sft_packs(cfg: AppConfig) -> bool:
    """Whether SFT will pack, as far as the config tells (app.model.placement.pick_packing decides with the kernel)."""
    return cfg.training.packing is not False and not cfg.model.trust_remote_code and cfg.runtime.backend != "unsloth"


def effective_batch(cfg: AppConfig, processes: int = 1) -> int:
    """Examples per optimizer step. For GRPO, TRL's batch counts completions; the examples are the prompts
    (each contributes a group of num_generations completions), which is what the batch-size advice is about."""
    t = cfg.training
    n = (t.per_device_train_batch_size or 1) * (t.gradient_accumulation_steps or 1) * processes
    return max(1, n // cfg.grpo.num_generations) if cfg.method == "grpo" else n


def warnings_for(cfg: AppConfig) -> list[str]:
    """Advice that does not stop a run (first what building the config decided: a preset's data keys left out)."""
    out = list(cfg._notes)
    eb = effective_batch(cfg, cfg.runtime.num_processes * cfg.runtime.nnodes)  # every process adds its batch
    step = cfg.training.per_device_train_batch_size
    if cfg.method == "kto" and (step < KTO_STEP_BATCH or not KTO_EFFECTIVE[0] <= eb <= KTO_EFFECTIVE[1]):
        out.append(f"KTO with a per-step batch of {step} and an effective batch of {eb}: TRL's KTO guide asks at least "
                   f"{KTO_STEP_BATCH} per step and {KTO_EFFECTIVE[0]}-{KTO_EFFECTIVE[1]} in all (KTO estimates its KL "
                   "term within a step's batch); change per_device_train_batch_size or gradient_accumulation_steps")
    elif cfg.method != "kto" and eb >= EFFECTIVE_BATCH_WARN:
        out.append(
            f"effective batch {eb} {'prompts' if cfg.method == 'grpo' else 'examples'} >= {EFFECTIVE_BATCH_WARN}: LoRA tolerates large batches worse than full "
            "fine-tuning (LoRA Without Regret); lower per_device_train_batch_size or gradient_accumulation_steps"
        )
    if cfg.method in EXPERIMENTAL_METHODS:
        out.append(f"method {cfg.method} is experimental: it runs TRL's experimental trainer, whose settings and "
                   "results may change between TRL versions (grpo, sft and dpo are the stable ones)")
    if cfg.lora.target_modules != "all-linear":
        out.append("LoRA on a subset of layers underperforms all-linear even at higher rank (LoRA Without Regret)")
    if cfg.method == "grpo" and cfg.lora.r and cfg.lora.r > 64:
        out.append(f"lora.r={cfg.lora.r} is far above what RL needs (1-32 is enough); it only costs memory")
    return out
