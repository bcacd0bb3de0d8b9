"""Translate a run plan into TRL's SFTConfig / DPOConfig / GRPOConfig keyword arguments.

Owns the translation only: every value comes from the plan (app/train/planning/plan.py), which decided it; nothing here
decides again. Kept separate from the trainers so the translation can be unit-tested without loading a model.
"""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path

from app.config.schema import AppConfig
from app.errors import UserError
from app.run import layout
from app.train.planning.answer_loss import masks_turns
from app.train.planning.fastpaths import trl_kwargs
from app.train.planning.fsdp import fsdp_training_args


def common_kwargs(cfg: AppConfig, run_dir: Path, compute_dtype: str, cuda: bool,
                  fsdp_layers: list[str] | None = None) -> dict:
    t = cfg.training
    report_to = [r for r in cfg.runtime.report_to if r != "none"]
    kw = dict(
        output_dir=str(Path(run_dir) / layout.CHECKPOINTS),
        learning_rate=t.learning_rate,
        num_train_epochs=t.num_train_epochs,
        max_steps=t.max_steps,
        per_device_train_batch_size=t.per_device_train_batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        seed=t.seed,
        data_seed=t.seed,
        gradient_checkpointing=t.gradient_checkpointing,
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=t.save_total_limit,
        logging_steps=t.logging_steps,
        lr_scheduler_type=t.lr_scheduler_type,
        warmup_steps=t.warmup_steps,
        max_grad_norm=t.max_grad_norm,
        report_to=report_to or "none",
        run_name=Path(run_dir).name,
        bf16=cuda and compute_dtype == "bf16",
        fp16=cuda and compute_dtype == "fp16",
        use_cpu=not cuda,
        disable_tqdm=True,  # our own rich progress bar replaces tqdm
        # transformers would log a NaN / inf loss as the mean of the previous ones; the run must see it and stop.
        logging_nan_inf_filter=False,
        dataloader_num_workers=0,
        # Under DDP: every LoRA weight takes part in every forward pass, so the extra graph walk is wasted.
        ddp_find_unused_parameters=False,
        push_to_hub=False,
        # 8-bit paged AdamW is the QLoRA optimizer on GPU; bitsandbytes' paged optimizers need CUDA.
        optim="paged_adamw_8bit" if cuda else "adamw_torch",
        # trackio logs to a local database; without these transformers may create or freeze a public Space
        # after training. Users who want a Space set it via training.extra_args (refused under --local-only).
        project="qlora-app",
        trackio_space_id=None,
        trackio_static_space_id=False,
    )
    if cfg.runtime.fsdp:
        kw.update(fsdp_training_args(fsdp_layers, t.gradient_checkpointing))
    return kw


def sft_kwargs(plan, run_dir: Path, fsdp_layers: list[str] | None = None) -> dict:
    """SFTConfig's arguments for a plan whose packing is decided (app.train.planning.plan.decide_packing)."""
    if plan.packing is None:
        raise ValueError("the plan's packing is decided on the loaded model (app.train.planning.plan.decide_packing) "
                         "first")
    cfg = plan.cfg
    kw = common_kwargs(cfg, run_dir, plan.where.compute_dtype, plan.where.cuda, fsdp_layers)
    kw.update(trl_kwargs(plan.fast, cfg))
    # a row with images is never cut: an image's tokens must stay whole (TRL refuses to cut them)
    kw.update(max_length=None if plan.vision else cfg.training.max_length, packing=plan.packing,
              assistant_only_loss=masks_turns(plan))  # conversations split at their last answer need no mask
    return _with_extra(kw, cfg, "SFTConfig")


def dpo_kwargs(plan, run_dir: Path, fsdp_layers: list[str] | None = None) -> dict:
    """DPOConfig's arguments for a plan: the loss family, beta and the pair's token budget."""
    cfg = plan.cfg
    kw = common_kwargs(cfg, run_dir, plan.where.compute_dtype, plan.where.cuda, fsdp_layers)
    kw.update(trl_kwargs(plan.fast, cfg))
    d = cfg.dpo
    kw.update(loss_type=list(d.loss_type), loss_weights=d.loss_weights, beta=d.beta,
              # a pair with images is never cut: an image's tokens must stay whole (as SFT's)
              label_smoothing=d.label_smoothing, max_length=None if plan.vision else cfg.training.max_length,
              # prompt + answer cut at max_length keeps the prompt's start; the answer's end goes first
              truncation_mode="keep_start")
    return _with_extra(kw, cfg, "DPOConfig")


def kto_kwargs(plan, run_dir: Path, fsdp_layers: list[str] | None = None) -> dict:
    """KTOConfig's arguments for a plan: beta, the two labels' weights (the plan balanced them) and the token
    budget of a prompt and its answer."""
    cfg = plan.cfg
    kw = common_kwargs(cfg, run_dir, plan.where.compute_dtype, plan.where.cuda, fsdp_layers)
    k = cfg.kto
    kw.update(beta=k.beta, desirable_weight=k.desirable_weight or 1.0, undesirable_weight=k.undesirable_weight,
              max_length=cfg.training.max_length)
    return _with_extra(kw, cfg, "KTOConfig")


def distill_kwargs(plan, run_dir: Path, fsdp_layers: list[str] | None = None) -> dict:
    """DistillationConfig's arguments for a plan: the divergence (beta), the sampling temperature (also the loss's)
    and an answer's token budget; the teacher is passed to the trainer as a loaded model."""
    cfg = plan.cfg
    kw = common_kwargs(cfg, run_dir, plan.where.compute_dtype, plan.where.cuda, fsdp_layers)
    d = cfg.distill
    kw.update(beta=d.beta, temperature=d.temperature, max_completion_length=d.max_completion_length,
              log_completions=False)
    return _with_extra(kw, cfg, "DistillationConfig")


def orpo_kwargs(plan, run_dir: Path, fsdp_layers: list[str] | None = None) -> dict:
    """trl.experimental's ORPOConfig arguments for a plan: its lambda (dpo.beta) and the pair's token budget."""
    cfg = plan.cfg
    kw = common_kwargs(cfg, run_dir, plan.where.compute_dtype, plan.where.cuda, fsdp_layers)
    kw.update(beta=cfg.dpo.beta, max_length=cfg.training.max_length, remove_unused_columns=False)
    return _with_extra(kw, cfg, "ORPOConfig")


def grpo_kwargs(plan, run_dir: Path, reward_weights: list[float], fsdp_layers: list[str] | None = None) -> dict:
    """GRPOConfig's arguments for a plan."""
    cfg = plan.cfg
    kw = common_kwargs(cfg, run_dir, plan.where.compute_dtype, plan.where.cuda, fsdp_layers)
    g = cfg.grpo
    kw.update(
        num_generations=g.num_generations,
        max_completion_length=g.max_completion_length,
        temperature=g.temperature,
        top_p=g.top_p,
        beta=g.beta,
        loss_type=g.loss_type,
        importance_sampling_level=g.importance_sampling_level,
        scale_rewards=g.scale_rewards,
        mask_truncated_completions=g.mask_truncated_completions,
        epsilon=g.epsilon,
        epsilon_high=g.epsilon_high,
        reward_weights=reward_weights,
        log_completions=False,
    )
    if cfg.tools.enabled:
        kw["max_tool_calling_iterations"] = g.max_tool_calls
    kw.update(trl_kwargs(plan.fast, cfg))
    return _with_extra(kw, cfg, "GRPOConfig")


def _with_extra(kw: dict, cfg: AppConfig, cls_name: str) -> dict:
    import trl

    if cls_name == "ORPOConfig":  # experimental: not at trl's top level
        from trl.experimental.orpo import ORPOConfig as cls
    else:
        cls = getattr(trl, cls_name)
    names = {f.name for f in dataclasses.fields(cls)}
    for k, v in cfg.training.extra_args.items():
        if cfg.runtime.local_only and (k.startswith(("trackio_", "hub_")) or k == "push_to_hub") and v:
            raise UserError(f"training.extra_args.{k} would contact the hub, which --local-only forbids; remove it")
        if k not in names:
            hint = difflib.get_close_matches(k, sorted(names), n=1)
            raise UserError(
                f"training.extra_args.{k} is not a {cls_name} field" + (f"; did you mean '{hint[0]}'?" if hint else "")
            )
        kw[k] = v
    return kw
