"""SFT: TRL's SFTTrainer with a LoRA adapter on the 4-bit base."""

from __future__ import annotations

from pathlib import Path

from app.config import AppConfig
from app.models import attach_or_describe_lora, match_adapter_dtype
from app.train.args import sft_kwargs


def build_sft_trainer(cfg: AppConfig, model, tok, train_ds, run_dir: Path, info: dict):
    from transformers import PrinterCallback
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(**sft_kwargs(cfg, run_dir, info["compute_dtype"], info["cuda"]))
    model, peft_config = attach_or_describe_lora(model, cfg.lora)
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        processing_class=tok,
        peft_config=peft_config,
    )
    match_adapter_dtype(trainer.model, info["compute_dtype"])
    trainer.remove_callback(PrinterCallback)  # it prints raw log dicts; our progress bar and metrics.jsonl replace it
    return trainer
