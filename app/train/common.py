"""What SFT and GRPO trainers share once TRL has built them."""

from __future__ import annotations

from app.config import AppConfig
from app.models import attach_or_describe_lora, match_adapter_dtype


def make_trainer(trainer_cls, args, cfg: AppConfig, model, tok, train_ds, info: dict, **extra):
    """Build a TRL trainer on the 4-bit base with the configured LoRA adapter, then apply our fix-ups."""
    from transformers import PrinterCallback

    from app.train.checkpoints import atomic_trainer

    model, peft_config = attach_or_describe_lora(model, cfg.lora)
    trainer = atomic_trainer(trainer_cls)(model=model, args=args, train_dataset=train_ds, processing_class=tok,
                          peft_config=peft_config, **extra)
    match_adapter_dtype(trainer.model, info["compute_dtype"])
    trainer.remove_callback(PrinterCallback)  # it prints raw log dicts; our progress bar and metrics.jsonl replace it
    return trainer
