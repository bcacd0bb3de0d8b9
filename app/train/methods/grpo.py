"""GRPO: TRL's GRPOTrainer with a LoRA adapter on the 4-bit base and the shaped reward.

Each reward component is its own reward function, combined by TRL with `reward_weights`, so TRL logs
`rewards/<component>/mean` for every component and the user can see which one moved.
"""

from __future__ import annotations

import logging
from pathlib import Path

from app.host.machine import torch_dtype
from app.tools.guard import Limits
from app.train.methods.args import grpo_kwargs
from app.train.methods.common import make_trainer
from app.train.methods.sampler import MergedSampler, sampling_trainer
from app.train.planning.plan import RunPlan

log = logging.getLogger("qlora_app")


def build_grpo_trainer(plan: RunPlan, model, tok, train_ds, run_dir: Path, rewards, counts, on_sampler_change=None):
    """``rewards``: the run's (reward functions, weights) (app.rewards.build_reward_funcs, made once per run);
    ``counts``: the run's app.run.counts.RunCounts (its tools count their calls there);
    ``on_sampler_change(sampler, reason)``: hears when the planned merged sampler cannot be used."""
    from trl import GRPOConfig, GRPOTrainer  # heavy: imported when a trainer is built

    cfg, where = plan.cfg, plan.where
    funcs, weights = rewards
    args = GRPOConfig(**grpo_kwargs(plan, run_dir, weights, fsdp_layers=getattr(model, "_no_split_modules", None)))
    extra = {}
    if plan.tools:  # every call through the guard (timeout, error results, output cap, counts: app/tools/guard.py)
        tools, environment = plan.tools.guarded(Limits.of(cfg.tools), counts.tools)
        extra = {"tools": tools or None, "environment_factory": environment}
    trainer = make_trainer(sampling_trainer(GRPOTrainer), args, plan, model, tok, train_ds, reward_funcs=list(funcs),
                           **extra)
    trainer.on_sampler_change = on_sampler_change
    if plan.fast.sampler == "merged":
        try:
            trainer.merged_sampler = MergedSampler(trainer.model, torch_dtype(where.compute_dtype),
                                                   compile=plan.fast.compiled)
        except Exception as e:  # noqa: BLE001 - out of memory, an architecture it cannot mirror: the plain path
            reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            log.warning("no merged copy for sampling (%s); sampling with the training model", reason)
            if on_sampler_change:
                on_sampler_change(None, reason)
    return trainer
