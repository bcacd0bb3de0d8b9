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
    from app.model.shape import meta_model
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
    from app.model.shape import meta_model

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


@pytest.mark.parametrize("family", sorted(MOE_FAMILIES))
def test_experts_are_quantized_as_they_load(family, tiny_moe):
    """model.quantize_experts: every fused expert weight becomes NF4 the moment the loader places it (none is left to
    quantize afterwards), and the model computes what the 16-bit one does, within NF4's rounding."""
    import torch

    from app.config.schema import ModelConfig
    from app.model.experts import expert_parameters
    from app.model.load import eval_keeping_4bit, load_base_model

    path = str(tiny_moe[family])
    plain, _, info16 = load_base_model(ModelConfig(name_or_path=path), local_only=True, device="cpu")
    weights = sum(n for name, n in expert_parameters(plain).items() if plain.get_parameter(name).dim() >= 3)
    four, _, info4 = load_base_model(ModelConfig(name_or_path=path, quantize_experts=True), local_only=True,
                                     device="cpu")
    assert info16["experts"]["quantized_as_loaded"] == 0 and not info16["experts"]["4bit"]
    assert info4["experts"] == {"params": info16["experts"]["params"], "4bit": True, "quantized_as_loaded": weights,
                                "quantized_after": 0}
    assert not expert_parameters(four)  # no fused expert weight is left 16-bit
    ids = torch.randint(0, 300, (1, 10), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), eval_keeping_4bit(plain), eval_keeping_4bit(four):
        before, after = plain(input_ids=ids).logits, four(input_ids=ids).logits
    assert (after - before).abs().max() < 0.1 * before.abs().max()


# A load in a fresh process, its peak anonymous memory sampled every 2 ms (the tensors it makes: the safetensors file's
# mapped pages are left out, as the page cache keeps or drops them with what else the machine does)
LOAD = """
import json, sys, threading, time
from app.config.schema import ModelConfig
from app.model.load import load_base_model

def anon():
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
peak, done = [anon()], threading.Event()
def watch():
    while not done.is_set():
        peak[0] = max(peak[0], anon())
        time.sleep(0.002)
threading.Thread(target=watch, daemon=True).start()
before = anon()
model, _, info = load_base_model(ModelConfig(name_or_path=sys.argv[1], quantize_experts=sys.argv[2] == "1"),
                                 local_only=True, device="cpu")
done.set()
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/model"]  # tests/ (tiny.py) and this file's folder
from test_experts import _loaded_bytes
print(json.dumps({"peak": max(peak[0], anon()) - before, "bytes": _loaded_bytes(model),
                  "dtype": info["compute_dtype"], "experts": info["experts"]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("family, extra", [
    ("qwen3_moe", dict(moe_intermediate_size=512, num_experts=8, head_dim=64)),
    ("mixtral", dict(num_local_experts=8)),
])
def test_a_mid_size_moe_loads_without_its_16bit_experts_and_as_planned(family, extra, tmp_path):
    """About 100M expert parameters (200 MB in 16-bit, 16 layers of 8 experts: the loader converts one layer's
    experts at a time, as a real model's 48 layers) of two families, each load in a fresh process: with the
    experts quantized as they load, the load's peak memory (the tensors it makes) is below the 16-bit load's by most
    of what the experts save (the 16-bit moment is gone), and the plan's weight bytes are within 10% of the loaded
    model's, both ways."""
    import json
    import os
    import subprocess
    import sys

    import tiny
    from repo_paths import ROOT

    from app.config.schema import AppConfig
    from app.model.experts import census, expert_count
    from app.model.shape import read_config
    from app.model.shape import meta_model
    from app.train.planning.memory import GB, Decisions, estimate_memory

    tiny.build_tokenizer(tmp_path / "tok")
    path = tiny.build_from_config(family, tmp_path / family, tmp_path / "tok", hidden_size=512, intermediate_size=512,
                                  num_hidden_layers=16, num_attention_heads=8, num_key_value_heads=2,
                                  num_experts_per_tok=2, max_position_embeddings=512, tie_word_embeddings=False,
                                  dtype="bfloat16", **extra)
    # glibc serves every block over 64 KB from its own mapping and unmaps it when freed, so the process's memory
    # follows the tensors alive, not what its heap kept after they were freed
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "MALLOC_MMAP_THRESHOLD_": "65536"}
    runs = {}
    for q in ("0", "1"):
        r = subprocess.run([sys.executable, "-c", LOAD, str(path), q, str(ROOT / "tests")],
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]
        runs[q] = json.loads(r.stdout.strip().splitlines()[-1])
    sixteen, four = runs["0"], runs["1"]
    assert four["experts"]["quantized_as_loaded"] > 90e6 and four["experts"]["quantized_after"] == 0
    saved = sixteen["bytes"] - four["bytes"]
    print(f"{family}: load peak {sixteen['peak'] / 1e6:.0f} MB with 16-bit experts, {four['peak'] / 1e6:.0f} MB "
          f"quantized as they load; the experts save {saved / 1e6:.0f} MB")
    assert saved > 100e6, saved
    assert sixteen["peak"] - four["peak"] > 0.5 * saved, (sixteen["peak"], four["peak"], saved)
    c = census(meta_model(str(path), local_only=True, images=False), (), expert_count(read_config(str(path))))
    d = {"fp32": "fp32"}.get(four["dtype"], "bf16")
    for q, run in runs.items():
        cfg = AppConfig.model_validate({"model": {"name_or_path": str(path), "quantize_experts": q == "1"},
                                        "method": "sft"})
        planned = estimate_memory(cfg, [32] * 8, Decisions(cuda=False, dtype=d, census=c))["weights_gb"] * GB
        assert abs(planned / run["bytes"] - 1) < 0.10, (q, planned, run["bytes"])
