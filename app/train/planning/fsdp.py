"""FSDP + QLoRA: shard a 4-bit base across GPUs for models that do not fit one (runtime.fsdp).

The QLoRA-FSDP recipe (Answer.AI / Hugging Face): store the 4-bit weights in the compute dtype
(`bnb_4bit_quant_storage`) so FSDP can flatten and shard them together with the bf16 LoRA weights; wrap each
decoder layer; keep the original parameters off (frozen 4-bit and trainable LoRA weights share flat parameters);
load the weights on rank 0 only and broadcast them (cpu_ram_efficient_loading + sync_module_states), so N GPUs do
not need N copies in host memory; save sharded state during training. The decisions are pure functions, tested
on CPU; a GPU run is needed to measure them (see docs/scaling.md).
"""

from __future__ import annotations

from app.errors import UserError


def check_fsdp(runtime, cuda: bool) -> None:
    if not runtime.fsdp:
        return
    if not cuda:
        raise UserError("runtime.fsdp shards the model across GPUs and needs CUDA; drop runtime.fsdp on this machine")
    if runtime.num_processes * runtime.nnodes < 2:
        raise UserError("runtime.fsdp needs at least 2 processes; add --num-processes N (one per GPU)")


def fsdp_training_args(layer_classes: list[str] | None, gradient_checkpointing: bool) -> dict:
    """TrainingArguments keyword arguments for FSDP + QLoRA."""
    if not layer_classes:
        raise UserError("runtime.fsdp needs to know the model's decoder layer class to wrap, and this model does not "
                        "say (_no_split_modules); drop runtime.fsdp")
    return {
        "fsdp": True,
        "fsdp_config": {
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "transformer_layer_cls_to_wrap": list(layer_classes),
            "use_orig_params": False,
            "cpu_ram_efficient_loading": True,
            "sync_module_states": True,
            "state_dict_type": "SHARDED_STATE_DICT",
            "offload_params": False,
            # FSDP's own activation checkpointing replaces the Trainer's (both at once recompute twice).
            "activation_checkpointing": gradient_checkpointing,
        },
        "gradient_checkpointing": False,
    }
