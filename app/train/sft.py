"""SFT: TRL's SFTTrainer with a LoRA adapter on the 4-bit base."""

from __future__ import annotations

from pathlib import Path

from app.train.args import sft_kwargs
from app.train.common import make_trainer
from app.train.plan import RunPlan


def build_sft_trainer(plan: RunPlan, model, tok, train_ds, run_dir: Path):
    """``plan.packing``: decided on the loaded model (app.train.plan.decide_packing)."""
    from trl import SFTConfig, SFTTrainer  # heavy: imported when a trainer is built

    args = SFTConfig(**sft_kwargs(plan, run_dir, fsdp_layers=getattr(model, "_no_split_modules", None)))
    return make_trainer(SFTTrainer, args, plan, model, tok, train_ds)
