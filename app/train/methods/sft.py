"""SFT: TRL's SFTTrainer with a LoRA adapter on the 4-bit base."""

from __future__ import annotations

from pathlib import Path

from app.errors import UserError
from app.train.methods.args import sft_kwargs
from app.train.methods.common import make_trainer
from app.train.planning.plan import RunPlan


def build_sft_trainer(plan: RunPlan, model, tok, train_ds, run_dir: Path):
    """``plan.packing``: decided on the loaded model (app.train.planning.plan.decide_packing)."""
    from trl import SFTConfig, SFTTrainer  # heavy: imported when a trainer is built

    args = SFTConfig(**sft_kwargs(plan, run_dir, fsdp_layers=getattr(model, "_no_split_modules", None)))
    trainer = make_trainer(SFTTrainer, args, plan, model, tok, train_ds)
    if train_ds is not None and len(train_ds) and not carries_loss(trainer.train_dataset):
        raise UserError(f"no training example keeps an answer token within training.max_length="
                        f"{plan.cfg.training.max_length}: the prompt (system prompt and chat template included) fills "
                        "it in every one of them; raise training.max_length or shorten the prompts")
    return trainer


def carries_loss(ds) -> bool:
    """Whether any example of TRL's prepared dataset has a token that carries the loss. TRL cuts each example to
    max_length and then drops the ones left with none (not packed), or packs them as they are (every label -100: the
    run would train on a loss of 0 and learn nothing); without this check the first stops in torch's sampler
    ("num_samples=0") and the second says nothing. Reads rows until the first that trains (the first, normally)."""
    if not hasattr(ds, "column_names") or "labels" not in (ds.column_names or ()):
        return True  # a format whose labels TRL makes in its collator: not checked here
    return any(any(label != -100 for label in row["labels"]) for row in ds.select_columns(["labels"]))
