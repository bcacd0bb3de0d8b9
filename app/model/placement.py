"""Where and how a model runs, decided before it loads: compute dtype, attention kernel, packing, 4-bit storage type,
the context length a config declares. Small pure functions over the machine's facts (app/host/machine.py) or a
planned card, unit-tested without a GPU; the plan (app/train/planning/plan.py) calls them once per run."""

from __future__ import annotations

from dataclasses import dataclass

from app.config.schema import ModelConfig
from app.errors import UserError
from app.host import machine
from app.host.machine import DTYPES, installed


def pick_compute_dtype(setting: str, cuda: bool, bf16_supported: bool) -> str:
    """'auto' = bf16 where the GPU supports it (Ampere+), fp16 on older GPUs, fp32 on CPU (CPU kernels want fp32)."""
    if setting != "auto":
        if setting == "bf16" and cuda and not bf16_supported:
            raise UserError("model.compute_dtype=bf16 needs an Ampere or newer GPU; use fp16 or auto")
        return setting
    if not cuda:
        return "fp32"
    return "bf16" if bf16_supported else "fp16"


# Kernels that keep packed examples apart. flash_attention_2 reads the example boundaries from position_ids
# (varlen); with sdpa and eager, transformers >= 5 builds a block-diagonal causal mask from position_ids when the
# batch has no attention_mask and no KV cache, which is how TRL's padding-free collator feeds training (it sets
# use_cache=False). Measured: tests/model/test_placement.py. Unsloth and a model's own remote code bring their own
# attention.
PACKING_KERNELS = ("flash_attention_2", "sdpa", "eager")


def pick_attention(setting: str, cuda: bool, flash_installed: bool) -> str:
    """'auto' = flash_attention_2 where it can run (CUDA + the flash-attn package), else PyTorch's sdpa."""
    if setting == "flash_attention_2":
        if not cuda:
            raise UserError("model.attn_implementation=flash_attention_2 needs a CUDA GPU; use auto or sdpa here")
        if not flash_installed:
            raise UserError("model.attn_implementation=flash_attention_2 but flash-attn is not installed; "
                            "pip install flash-attn, or use auto")
        return setting
    if setting == "auto":
        return "flash_attention_2" if cuda and flash_installed else "sdpa"
    return setting


def pick_packing(setting: bool | None, attention: str, remote_code: bool = False, kept_apart: bool = True) -> bool:
    """SFT packing (best-fit-decreasing, padding-free: position_ids mark where each example starts). auto = on
    wherever the attention kernel keeps packed examples apart (PACKING_KERNELS), off for the Unsloth backend and
    for models with their own code; an explicit true where examples would see each other is refused.
    ``kept_apart``: what packed_examples_stay_apart measured on the loaded model."""
    ok = attention in PACKING_KERNELS and not remote_code and kept_apart
    if setting is None:
        return ok
    if setting and not ok:
        why = ("the model's own code (trust_remote_code)" if remote_code else
               "this architecture (measured: its positions or mask ignore where packed examples start)"
               if not kept_apart else f"the {attention} attention path")
        raise UserError(f"training.packing=true: with {why} packed examples would attend to each other; leave "
                        "training.packing empty (auto) or set it to false")
    return bool(setting)




# Where configs keep their context length: Llama/Qwen/Mistral/Gemma, GPT-2, BLOOM-style, ChatGLM/Qwen-1, GPT-J.
CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def context_length(config) -> int | None:
    """The model's context in tokens, from its config; None where the config does not say. Past it a learned
    position table (GPT-2, OPT) fails with an IndexError and a rotary model degrades silently."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    for key in CONTEXT_KEYS:
        value = getattr(text, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def flash_attn_installed() -> bool:
    return installed("flash_attn")


def quant_storage(compute_dtype: str) -> str:
    """bnb_4bit_quant_storage under FSDP (app/train/planning/fsdp.py): the 4-bit weights packed in the compute dtype, so
    FSDP can flatten and shard them together with the LoRA weights."""
    return DTYPES[compute_dtype]


@dataclass(frozen=True)
class Placement:
    """Where a model runs and in what precision: decided once per process (app.train.planning.plan for a run, the
    comparison for inference) from the config and this machine."""

    cuda: bool
    bf16: bool  # the GPU supports it
    gpu: str | None
    vram_gb: float | None
    compute_dtype: str  # bf16 | fp16 | fp32
    attention: str  # the kernel asked for (the model may fall back, see load_base_model)
    planned: bool = False  # a card this machine does not have (train --dry-run --gpu-memory GB)


def placement(mc: ModelConfig, device: str = "auto", facts: dict | None = None) -> Placement:
    """Where a model runs: on this machine's device (``runtime.device``), or on the device ``facts`` describe (a
    planned card: app.host.machine.planned_card)."""
    facts = facts or machine.device_facts(device)
    return Placement(cuda=facts["cuda"], bf16=facts["bf16"], gpu=facts["gpu"], vram_gb=facts["vram_gb"],
                     compute_dtype=pick_compute_dtype(mc.compute_dtype, facts["cuda"], facts["bf16"]),
                     attention=pick_attention(mc.attn_implementation, facts["cuda"], flash_attn_installed()),
                     planned=bool(facts.get("planned")))
