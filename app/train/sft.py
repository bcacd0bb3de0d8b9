"""SFT: TRL's SFTTrainer with a LoRA adapter on the 4-bit base."""

from __future__ import annotations

from pathlib import Path

from app.config import AppConfig
from app.train.args import sft_kwargs
from app.train.common import make_trainer


def build_sft_trainer(cfg: AppConfig, model, tok, train_ds, run_dir: Path, info: dict):
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(**sft_kwargs(cfg, run_dir, info["compute_dtype"], info["cuda"],
                                  fsdp_layers=getattr(model, "_no_split_modules", None),
                                  # the Unsloth backend brings its own kernels: packing stays off there
                                  attention=info.get("attention", "unsloth"), fast=info.get("fast")))
    return make_trainer(SFTTrainer, args, cfg, model, tok, train_ds, info)
