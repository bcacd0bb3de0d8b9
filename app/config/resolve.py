"""What "auto" (None) becomes for a run: the method's defaults from "LoRA Without Regret" (learning rate ~10x full
fine-tuning, small ranks for RL), the default models and system prompt, SFT's rank by data size; and the warnings a
config earns (a large effective batch). ``resolve`` is the one resolution of a run (the plan calls it)."""

from __future__ import annotations

from app.config.build import revalidate
from app.config.builtin import BUILTIN_MODELS, builtin_model_path
from app.config.methods import DEFAULT_MODEL, method_of
from app.config.schema import AppConfig

# ----------------------------------------------------------------------------------------------------------
# Resolution of "auto" values


def model_name(cfg: AppConfig) -> str:
    """The model a config trains: its name_or_path, the method's default, or the shipped tiny model's folder. The
    one rule, read by resolve and by the checks that must fail before anything is resolved or loaded."""
    if cfg.model.name_or_path is None:
        return DEFAULT_MODEL
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
    method = method_of(c)  # its "LoRA Without Regret" defaults and its batch (app/config/methods/)
    if c.lora.r is None:
        c.lora.r = method.default_rank(num_rows)
    if c.lora.alpha is None:
        c.lora.alpha = method.default_alpha(c.lora.r)
    if c.training.learning_rate is None:
        c.training.learning_rate = method.learning_rate
    method.fill_batch(c)
    if c.data.system_prompt is None and method.system_prompt:
        c.data.system_prompt = method.system_prompt
    return revalidate(c)  # re-run cross-field checks on the filled values


def effective_batch(cfg: AppConfig, processes: int = 1) -> int:
    """Examples per optimizer step. For GRPO, TRL's batch counts completions; the examples are the prompts
    (each contributes a group of num_generations completions), which is what the batch-size advice is about."""
    t = cfg.training
    n = (t.per_device_train_batch_size or 1) * (t.gradient_accumulation_steps or 1) * processes
    return method_of(cfg).examples_per_step(n, cfg)


def warnings_for(cfg: AppConfig) -> list[str]:
    """Advice that does not stop a run (first what building the config decided: a preset's data keys left out)."""
    out = list(cfg._notes)
    eb = effective_batch(cfg, cfg.runtime.num_processes * cfg.runtime.nnodes)  # every process adds its batch
    method = method_of(cfg)
    out += method.batch_warnings(cfg, eb)
    if method.experimental:
        out.append(f"method {cfg.method} is experimental: it runs TRL's experimental trainer, whose settings and "
                   "results may change between TRL versions (grpo, sft and dpo are the stable ones)")
    if cfg.lora.target_modules != "all-linear":
        out.append("LoRA on a subset of layers underperforms all-linear even at higher rank (LoRA Without Regret)")
    return out
