"""GRPO: TRL's GRPOTrainer with a LoRA adapter on the 4-bit base and the shaped reward.

Each reward component is its own reward function, combined by TRL with `reward_weights`, so TRL logs
`rewards/<component>/mean` for every component and the user can see which one moved.
"""

from __future__ import annotations

from pathlib import Path

from app.config import AppConfig
from app.models import attach_or_describe_lora, match_adapter_dtype
from app.train.args import grpo_kwargs


def build_grpo_trainer(cfg: AppConfig, model, tok, train_ds, run_dir: Path, info: dict, has_reference: bool):
    from transformers import PrinterCallback
    from trl import GRPOConfig, GRPOTrainer

    from app.rewards import build_reward_funcs

    funcs, weights = build_reward_funcs(cfg.reward, has_reference=has_reference)
    args = GRPOConfig(**grpo_kwargs(cfg, run_dir, info["compute_dtype"], info["cuda"], weights))
    model, peft_config = attach_or_describe_lora(model, cfg.lora)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=funcs,
        args=args,
        train_dataset=train_ds,
        processing_class=tok,
        peft_config=peft_config,
    )
    match_adapter_dtype(trainer.model, info["compute_dtype"])
    trainer.remove_callback(PrinterCallback)  # it prints raw log dicts; our progress bar and metrics.jsonl replace it
    return trainer
