"""app/model/experts.py: a mixture-of-experts model's fused experts found on every family transformers 5.23 builds,
counted as they load (the plan's figure within 10% of the bytes measured on the loaded 4-bit model), quantized to
NF4 after loading when asked, and named for PEFT."""

import pytest
from tiny import MOE_FAMILIES


def _loaded_bytes(model) -> int:
    """Parameter bytes of a loaded model, 4-bit layers' quantization constants included."""
    n = sum(p.numel() * p.element_size() for p in model.parameters())
    for m in model.modules():
        qs = getattr(getattr(m, "weight", None), "quant_state", None)
        if qs is not None:
            n += qs.absmax.numel() * qs.absmax.element_size()
            if qs.state2 is not None:
                n += qs.state2.absmax.numel() * qs.state2.absmax.element_size() + qs.state2.code.numel() * 4
    return n


def _load_4bit(path):
    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                           bnb_4bit_compute_dtype=torch.float32)
    return AutoModelForCausalLM.from_pretrained(path, quantization_config=q, device_map={"": "cpu"},
                                                dtype=torch.float32)


@pytest.mark.parametrize("family", sorted(MOE_FAMILIES))
def test_experts_are_found_and_counted_as_they_load(family, tiny_moe):
    import torch

    from app.config.schema import AppConfig
    from app.model.experts import census, expert_count, expert_parameters, quantize_experts
    from app.model.load import eval_keeping_4bit
    from app.model.shape import read_config
    from app.model.vision import meta_model
    from app.train.planning.memory import GB, Decisions, estimate_memory

    path = tiny_moe[family]
    n = expert_count(read_config(str(path)))
    assert n == max(v for k, v in MOE_FAMILIES[family].items() if k in ("num_experts", "num_local_experts",
                                                                          "n_routed_experts"))
    c = census(meta_model(str(path), local_only=True, images=False), (), n)
    assert c.experts > 0 and c.total == c.linear + c.experts + c.other
    assert set(c.targets) == {"mlp.experts.gate_up_proj", "mlp.experts.down_proj"}
    model = _load_4bit(path)
    assert sum(expert_parameters(model).values()) == c.experts  # bitsandbytes left every expert weight as it was
    measured = _loaded_bytes(model)
    cfg = AppConfig.model_validate({"model": {"name_or_path": str(path)}, "method": "sft"})
    est = estimate_memory(cfg, [32] * 8, Decisions(cuda=False, dtype="fp32", census=c))
    assert est["params"] == c.total and est["expert_params"] == c.experts and not est["experts_4bit"]
    assert abs(est["weights_gb"] * GB / measured - 1) < 0.10, (est["weights_gb"] * GB, measured)
    # quantized after loading: the bytes the plan says for it, and the model still computes what it did
    ids = torch.randint(0, 300, (1, 10), generator=torch.Generator().manual_seed(0))
    weights = sum(n for name, n in expert_parameters(model).items()  # the experts' biases stay as they are
                  if model.get_parameter(name).dim() >= 3)
    # the forwards in training mode for the 4-bit layers: an eval forward on a CPU with AVX512-BF16 repacks them for
    # bitsandbytes' CPU kernel (another layout, other bytes), and the bytes measured below are the loaded ones
    with torch.no_grad(), eval_keeping_4bit(model):
        before = model(input_ids=ids).logits
        assert quantize_experts(model) == weights
        after = model(input_ids=ids).logits
    cfg4 = AppConfig.model_validate({"model": {"name_or_path": str(path), "quantize_experts": True},
                                     "method": "sft"})
    est4 = estimate_memory(cfg4, [32] * 8, Decisions(cuda=False, dtype="fp32", census=c))
    assert est4["experts_4bit"] and est4["weights_gb"] < est["weights_gb"]
    assert abs(est4["weights_gb"] * GB / _loaded_bytes(model) - 1) < 0.10
    assert (after - before).abs().max() < 0.1 * before.abs().max()  # NF4 rounding, not a different model


def test_a_dense_model_has_no_experts(tiny_model):
    from app.model.experts import census, expert_count, router_settings
    from app.model.shape import read_config
    from app.model.vision import meta_model

    assert expert_count(read_config(str(tiny_model))) == 0 and router_settings(read_config(str(tiny_model))) == {}
    c = census(meta_model(str(tiny_model), local_only=True, images=False))
    assert c.experts == 0 and c.targets == () and c.linear > 0


def test_expert_count_and_router_read_any_family_key():
    from app.model.experts import expert_count, router_settings

    assert expert_count({"num_local_experts": 8}) == 8 and expert_count({"n_routed_experts": 64}) == 64
    assert expert_count({"text_config": {"num_experts": 128}, "vision_config": {}}) == 128
    assert expert_count({"num_experts": 1}) == 0 and expert_count(None) == 0  # one "expert" is a dense MLP
    assert router_settings({"num_experts_per_tok": 2, "router_aux_loss_coef": 0.001, "hidden_size": 8}) == {
        "num_experts_per_tok": 2, "router_aux_loss_coef": 0.001}
