"""DPO: TRL's DPOTrainer with a LoRA adapter on the 4-bit base, learning from preference pairs.

The reference model is the base with the adapter switched off (TRL's PEFT path: no second copy of the model in
memory); an adapter given by lora.init_from (an SFT run's) is copied by TRL into a frozen "ref" adapter, so DPO then
moves away from that adapter, as DPO after SFT should. The loss family (sigmoid = DPO, ipo, robust, apo_zero, sft
mixed in as RPO, ...) comes from dpo.loss_type, validated in app/config/schema.py.

ORPO (method orpo) lives in trl.experimental and is built here the same way: one loss that adds an odds-ratio term,
weighted by dpo.beta (ORPO's lambda), to SFT on the chosen answer; no reference model, no loss family.

KTO (method kto: TRL's KTOTrainer) learns from answers labelled good or bad, its reference the same switched-off
adapter; its rows and label weights are planned in app/train/planning/rows.py and app/train/planning/kto.py.
"""

from __future__ import annotations

from pathlib import Path

from app.train.methods.args import dpo_kwargs, kto_kwargs, orpo_kwargs
from app.train.methods.common import make_trainer
from app.train.planning.plan import RunPlan


def build_dpo_trainer(plan: RunPlan, model, tok, train_ds, run_dir: Path):
    """DPO, its reference the base with the adapter switched off."""
    from trl import DPOConfig, DPOTrainer  # heavy: imported when a trainer is built

    layers = getattr(model, "_no_split_modules", None)
    return make_trainer(DPOTrainer, DPOConfig(**dpo_kwargs(plan, run_dir, layers)), plan, model, tok, train_ds)


def build_orpo_trainer(plan: RunPlan, model, tok, train_ds, run_dir: Path):
    """ORPO: trl.experimental's ORPOTrainer, which needs no reference at all."""
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer  # heavy: imported when a trainer is built

    layers = getattr(model, "_no_split_modules", None)
    return make_trainer(ORPOTrainer, ORPOConfig(**orpo_kwargs(plan, run_dir, layers)), plan, model, tok, train_ds)


def build_kto_trainer(plan: RunPlan, model, tok, train_ds, run_dir: Path):
    """KTO on the plan's labelled answers (prompt / completion / label)."""
    from trl import KTOConfig, KTOTrainer  # heavy: imported when a trainer is built

    args = KTOConfig(**kto_kwargs(plan, run_dir, getattr(model, "_no_split_modules", None)))
    return make_trainer(KTOTrainer, args, plan, model, tok, train_ds)
