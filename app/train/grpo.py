"""GRPO: TRL's GRPOTrainer with a LoRA adapter on the 4-bit base and the shaped reward.

Each reward component is its own reward function, combined by TRL with `reward_weights`, so TRL logs
`rewards/<component>/mean` for every component and the user can see which one moved.
"""

from __future__ import annotations

import logging
from pathlib import Path

from app.host.machine import torch_dtype
from app.rewards import build_reward_funcs
from app.tools.guard import Limits
from app.train.args import grpo_kwargs
from app.train.common import make_trainer
from app.train.plan import RunPlan
from app.train.sampler import MergedSampler, sampling_trainer

log = logging.getLogger("qlora_app")


def build_grpo_trainer(plan: RunPlan, model, tok, train_ds, run_dir: Path, has_reference: bool, reward_errors=None,
                       on_sampler_change=None, tool_stats=None, judge_stats=None):
    """``reward_errors``: the run's counter of reward failures (app.rewards.RewardErrors);
    ``on_sampler_change(sampler, reason)``: hears when the planned merged sampler cannot be used; ``tool_stats``:
    the run's per-tool counts (app.tools.guard.ToolStats), for a run with tools; ``judge_stats``: the run's judge
    counts (the same kind), for a run with a judge."""
    from trl import GRPOConfig, GRPOTrainer  # heavy: imported when a trainer is built

    cfg, where = plan.cfg, plan.where
    funcs, weights = build_reward_funcs(cfg.reward, has_reference=has_reference, errors=reward_errors,
                                        runtime=cfg.runtime, judge_stats=judge_stats)
    args = GRPOConfig(**grpo_kwargs(plan, run_dir, weights, fsdp_layers=getattr(model, "_no_split_modules", None)))
    extra = {}
    if plan.tools:  # every call through the guard (timeout, error results, output cap, counts: app/tools/guard.py)
        tools, environment = plan.tools.guarded(Limits.of(cfg.tools), tool_stats)
        extra = {"tools": tools or None, "environment_factory": environment}
    trainer = make_trainer(sampling_trainer(GRPOTrainer), args, plan, model, tok, train_ds, reward_funcs=funcs,
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
