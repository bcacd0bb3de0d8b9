"""What a model's weights take in memory as they load: 4-bit NF4 linear layers with their quantization constants,
dense embeddings and head, a mixture-of-experts model counted by how its experts load. The one rule the memory
estimate (app/train/planning/memory.py) applies to the trained model and every model beside it (a judge, a
teacher: app/train/planning/teacher.py). Must not decide anything.
"""

from __future__ import annotations

from app.model.shape import embed_params


def weight_bytes(s: dict, params: int, load_in_4bit: bool, double_quant: bool, dense_bytes: int = 2) -> float:
    """Bytes of the base weights: 4-bit linear layers (0.5 byte/weight + absmax constants) and dense embeddings /
    LM head at ``dense_bytes`` (2 on a GPU in bf16/fp16, 4 on a CPU in fp32)."""
    embed = embed_params(s)
    linear = max(params - embed, 0)
    if not load_in_4bit:
        return params * dense_bytes
    return linear * (0.5 + _quant_consts(double_quant)) + embed * dense_bytes


def census_bytes(c, load_in_4bit: bool, double_quant: bool, experts_4bit: bool, dense_bytes: int = 2) -> float:
    """Bytes of a model counted by how it loads (a MoE model): 4-bit linear layers, the experts 4-bit only when
    quantized as they load (else at ``dense_bytes``, as transformers loads fused experts), the rest dense."""
    if not load_in_4bit:
        return c.total * dense_bytes
    q = 0.5 + _quant_consts(double_quant)
    return c.linear * q + c.experts * (q if experts_4bit else dense_bytes) + c.other * dense_bytes


def _quant_consts(double_quant: bool) -> float:
    """Bytes of quantization constants per 4-bit weight: 8-bit absmax + fp32 per 256 blocks, or fp32 absmax per
    64-weight block."""
    return 1 / 64 + 4 / (64 * 256) if double_quant else 4 / 64
