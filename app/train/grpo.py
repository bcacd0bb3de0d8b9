"""GRPO: TRL's GRPOTrainer with a LoRA adapter on the 4-bit base and the shaped reward.

Each reward component is its own reward function, combined by TRL with `reward_weights`, so TRL logs
`rewards/<component>/mean` for every component and the user can see which one moved.
"""

from __future__ import annotations

import logging
from pathlib import Path

from app.config import AppConfig
from app.train.args import grpo_kwargs
from app.train.common import make_trainer

log = logging.getLogger("qlora_app")


def build_grpo_trainer(cfg: AppConfig, model, tok, train_ds, run_dir: Path, info: dict, has_reference: bool):
    from trl import GRPOConfig, GRPOTrainer

    from app.rewards import build_reward_funcs

    from app.train.sampler import MergedSampler, sampling_trainer

    funcs, weights = build_reward_funcs(cfg.reward, has_reference=has_reference)
    args = GRPOConfig(**grpo_kwargs(cfg, run_dir, info["compute_dtype"], info["cuda"], weights,
                                    fsdp_layers=getattr(model, "_no_split_modules", None),
                                    fast=info.get("fast")))
    trainer = make_trainer(sampling_trainer(GRPOTrainer), args, cfg, model, tok, train_ds, info, reward_funcs=funcs)
    fast = info.get("fast")
    if fast is not None and fast.sampler == "merged":
        from app.models import torch_dtype

        try:
            trainer.merged_sampler = MergedSampler(trainer.model, torch_dtype(info["compute_dtype"]),
                                                   compile=info["cuda"])
        except Exception as e:  # noqa: BLE001 - out of memory, an architecture it cannot mirror: the plain path
            log.warning("no merged copy for sampling (%s: %s); sampling with the training model",
                        type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    return trainer
