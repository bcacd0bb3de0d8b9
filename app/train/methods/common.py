"""What every method's trainer (SFT, GRPO, DPO, ORPO) shares once TRL has built it."""

from __future__ import annotations

from app.errors import UserError
from app.model.load import match_adapter_dtype
from app.model.lora import attach_or_describe_lora, linear_layer_names
from app.train.methods.checkpoints import atomic_trainer


def make_trainer(trainer_cls, args, plan, model, tok, train_ds, **extra):
    """Build a TRL trainer on the 4-bit base with the plan's LoRA adapter, then apply our fix-ups."""
    from peft.utils.error import (
        NoMatchingPeftModuleError,  # heavy: imported when a trainer is built
    )
    from transformers import PrinterCallback

    cfg = plan.cfg

    model, peft_config = attach_or_describe_lora(model, cfg.lora, images=bool(cfg.model.images))
    try:
        trainer = atomic_trainer(trainer_cls)(model=model, args=args, train_dataset=train_ds, processing_class=tok,
                                              peft_config=peft_config, **extra)
    except NoMatchingPeftModuleError:
        names = ", ".join(linear_layer_names(model)) or "none"
        raise UserError(f"lora.target_modules={cfg.lora.target_modules!r} matches no layer of this model; its linear "
                        f"layers are: {names} (or use all-linear)") from None
    match_adapter_dtype(trainer.model, plan.where.compute_dtype)
    trainer.remove_callback(PrinterCallback)  # it prints raw log dicts; our progress bar and metrics.jsonl replace it
    return trainer
