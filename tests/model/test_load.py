"""app/model/load.py: what a loaded 4-bit model is given before anything runs on it."""

import pytest


@pytest.fixture(scope="module")
def moe_pair(tiny_moe):
    """Tiny Qwen2-MoE loaded for inference the way compare and chat load a base (its shared_expert_gate has one
    output row)."""
    from app.config.schema import ModelConfig
    from app.model.load import load_base_model

    model, tok, _ = load_base_model(ModelConfig(name_or_path=str(tiny_moe["qwen2_moe"])), local_only=True,
                                    for_training=False, device="cpu")
    return model, tok


def test_layers_bitsandbytes_cannot_repack_for_its_cpu_kernel_are_kept_off_it(moe_pair):
    from bitsandbytes.nn import Linear4bit

    from app.model.load import CPU_REPACK_ROWS, keep_off_cpu_repack

    model, _ = moe_pair
    kept = keep_off_cpu_repack(model)
    assert kept and all(p.endswith("shared_expert_gate") for p in kept), kept  # one output row: 1 % 32 != 0
    layers = {p: m for p, m in model.named_modules() if isinstance(m, Linear4bit)}
    assert all(layers[p].out_features % CPU_REPACK_ROWS for p in kept)
    # every other projection keeps bitsandbytes' own choice (its fast CPU kernel where the CPU has one)
    others = [m for p, m in layers.items() if p not in kept]
    assert others and all(getattr(m, "support_avx512bf16_for_cpu", None) is not False for m in others)
    assert all(layers[p].support_avx512bf16_for_cpu is False for p in kept)


def test_an_inference_forward_runs_and_computes_what_training_mode_computes(moe_pair):
    """The eval forward without grad (compare, chat, the proof) that stopped on "N must be divisible by block_n" on
    CPUs with AVX512-BF16: it runs, and gives the logits of the same model with its 4-bit layers in training mode
    (bitsandbytes' generic path, no repack)."""
    import torch

    from app.model.load import eval_keeping_4bit

    model, tok = moe_pair
    ids = torch.tensor([tok("Tom has 3 apples and buys 4 more.")["input_ids"]])
    with torch.no_grad(), eval_keeping_4bit(model):
        plain = model(input_ids=ids).logits
    with torch.no_grad():
        model.eval()
        fast = model(input_ids=ids).logits
    assert torch.isfinite(fast).all()
    assert (fast - plain).abs().max() <= 0.05 * plain.abs().max()  # bf16 kernel vs fp32 dequantize: rounding only
