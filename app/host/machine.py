"""What this machine offers a run: the device ``runtime.device`` picks, what it can compute in, and which optional
libraries are installed. A planned card (``train --dry-run --gpu-memory GB``) stands in for the real device.

Owns: the one table of compute dtypes (DTYPES) and the device facts every placement decision reads. Must not decide
anything about a run itself (app/train/planning/plan.py does, once). Standard library only at module level; torch is
imported inside the functions that query it.
"""

from __future__ import annotations

from app.errors import UserError

# The compute dtypes a config names, and torch's names for them: the one table (quantization storage, Unsloth's
# dtype and every cast read it).
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def torch_dtype(name: str):
    import torch

    return getattr(torch, DTYPES[name])


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here, without importing it (optional libraries: unsloth, vllm, ...)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def use_cuda(setting: str, cuda_available: bool) -> bool:
    """runtime.device -> whether this run uses the GPU. 'auto' takes one when there is one; 'cpu' stays on the CPU
    even on a GPU machine; 'cuda' without a GPU is a user error, not a silent CPU run."""
    if setting == "cpu":
        return False
    if setting == "cuda" and not cuda_available:
        raise UserError("runtime.device=cuda but no CUDA GPU is visible (torch.cuda.is_available() is False); "
                        "use runtime.device=auto or cpu, or install the CUDA build of torch")
    return cuda_available


def an(gb: float) -> str:
    """'an 8', 'a 12' (GB): the article as the number is spoken (eight, eleven, eighteen, eighty)."""
    n = f"{gb:g}"
    return f"{'an' if n.startswith('8') or n.split('.')[0] in ('11', '18') else 'a'} {n}"


def planned_card(gb: float) -> dict:
    """The device facts of a CUDA card of ``gb`` GB that this machine may not have (bf16-capable, as every card
    since Ampere): what `--gpu-memory` plans for."""
    if gb <= 0:
        raise UserError(f"--gpu-memory {gb:g} is not a card size; pass the GPU's memory in GB, e.g. 24")
    return {"cuda": True, "bf16": True, "gpu": f"{an(gb)} GB CUDA GPU (planned)", "vram_gb": float(gb),
            "planned": True}


def device_facts(setting: str = "auto") -> dict:
    """What the chosen device can do: {cuda, bf16, gpu, vram_gb}. With runtime.device=cpu the GPU is not used
    (nor queried), so every decision downstream (dtype, optimizer, placement) takes the CPU branch."""
    import torch

    cuda = use_cuda(setting, torch.cuda.is_available())
    return {
        "cuda": cuda,
        "bf16": bool(cuda and torch.cuda.is_bf16_supported()),
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "vram_gb": (torch.cuda.get_device_properties(0).total_memory / 2**30) if cuda else None,
        "planned": False,
    }
