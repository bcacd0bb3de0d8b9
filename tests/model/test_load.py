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


def test_every_4bit_layer_is_kept_off_the_cpu_repack_kernel(moe_pair):
    """One numerics path on CPU: no layer repacks for bitsandbytes' bf16 kernel, the one-output shared_expert_gate it
    cannot repack included (app.model.load.one_cpu_path)."""
    from bitsandbytes.nn import Linear4bit

    model, _ = moe_pair
    layers = [m for m in model.modules() if isinstance(m, Linear4bit)]
    assert layers and all(m.support_avx512bf16_for_cpu is False for m in layers)
    assert any(p.endswith("shared_expert_gate") for p, m in model.named_modules() if isinstance(m, Linear4bit))


def test_an_inference_forward_runs_and_computes_what_training_mode_computes(moe_pair):
    """The eval forward without grad (compare, chat, the proof) that stopped on "N must be divisible by block_n" on
    CPUs with AVX512-BF16: it runs, and gives exactly the logits of the same model with its 4-bit layers in training
    mode (the held-out points during training): one path, so the two never disagree."""
    import torch

    from app.model.load import eval_keeping_4bit

    model, tok = moe_pair
    ids = torch.tensor([tok("Tom has 3 apples and buys 4 more.")["input_ids"]])
    with torch.no_grad(), eval_keeping_4bit(model):
        plain = model(input_ids=ids).logits
    with torch.no_grad():
        model.eval()
        fast = model(input_ids=ids).logits
    assert torch.isfinite(fast).all() and torch.equal(fast, plain)
    from bitsandbytes.nn import Linear4bit

    assert not [m for m in model.modules() if isinstance(m, Linear4bit)
                and getattr(m.weight.quant_state, "packing_format_for_cpu", False)]  # nothing was repacked
