"""Building a planned run: the base model as the plan placed it, and the TRL trainer on it.

Owns: loading the model for training (HF + bitsandbytes, or Unsloth on CUDA) and choosing the trainer builder of
the method (app/train/grpo.py, app/train/sft.py). Must not decide anything (the plan did: app/train/plan.py) nor
write the run folder (the session does: app/train/session.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.models import load_base_model
from app.rewards import reward_error_count
from app.train.grpo import build_grpo_trainer
from app.train.plan import RunPlan
from app.train.sft import build_sft_trainer
from app.unsloth_backend import load_with_unsloth


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    attention: str  # the kernel the model really runs ("unsloth": Unsloth's own)
    quantized: bool  # 4-bit layers were made (transformers quantizes none for some architectures)


def load_model(plan: RunPlan) -> Loaded:
    """The base model as the plan placed it: HF + bitsandbytes, or Unsloth on CUDA. The plan's tokenizer is reused."""
    cfg = plan.cfg
    if plan.backend == "unsloth":
        model, tok = load_with_unsloth(cfg, plan.where.compute_dtype)
        return Loaded(model, tok, "unsloth", cfg.model.load_in_4bit)
    model, tok, info = load_base_model(cfg.model, local_only=cfg.runtime.local_only, fsdp=cfg.runtime.fsdp,
                                       where=plan.where, tok=plan.tokenizer)
    return Loaded(model, tok, info["attention"], info["4bit"])


def build_trainer(plan: RunPlan, loaded: Loaded, run_dir: Path, has_reference: bool, on_sampler_change=None):
    """(trainer, reward_errors): the method's TRL trainer on the loaded model, and a counter of reward-function
    failures (always 0 for SFT). ``on_sampler_change(sampler, reason)`` hears a fast sampler stepping down."""
    if plan.cfg.method == "grpo":
        trainer = build_grpo_trainer(plan, loaded.model, loaded.tokenizer, plan.train_ds, run_dir, has_reference,
                                     on_sampler_change=on_sampler_change)
        return trainer, reward_error_count
    return build_sft_trainer(plan, loaded.model, loaded.tokenizer, plan.train_ds, run_dir), lambda: 0
