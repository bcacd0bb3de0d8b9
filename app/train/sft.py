"""SFT: TRL's SFTTrainer with a LoRA adapter on the 4-bit base."""

from __future__ import annotations

import logging
from pathlib import Path

from app.config import AppConfig
from app.train.args import sft_kwargs
from app.train.common import make_trainer

log = logging.getLogger("qlora_app")


def build_sft_trainer(cfg: AppConfig, model, tok, train_ds, run_dir: Path, info: dict, note=log.warning):
    from trl import SFTConfig, SFTTrainer

    from app.models import PACKING_KERNELS, packed_examples_stay_apart

    # the Unsloth backend brings its own kernels: packing stays off there
    attention = info.get("attention", "unsloth")
    kept_apart = True
    # FSDP shards the model only inside the trainer: before that it cannot run a forward to measure
    if (cfg.training.packing is not False and attention in PACKING_KERNELS and not cfg.model.trust_remote_code
            and not cfg.runtime.fsdp):
        try:
            kept_apart = packed_examples_stay_apart(model)
            why = f"{type(model).__name__} lets packed examples attend to each other (measured)"
        except Exception as e:  # noqa: BLE001 - a forward with restarting positions failed: packing would too
            kept_apart, why = False, f"a packed forward failed on {type(model).__name__} ({type(e).__name__})"
        if not kept_apart and cfg.training.packing is None:
            note(f"packing is off: {why}, so each example trains in its own padded row")
    args = SFTConfig(**sft_kwargs(cfg, run_dir, info["compute_dtype"], info["cuda"],
                                  fsdp_layers=getattr(model, "_no_split_modules", None), attention=attention,
                                  fast=info.get("fast"), kept_apart=kept_apart))
    return make_trainer(SFTTrainer, args, cfg, model, tok, train_ds, info)
