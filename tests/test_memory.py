"""The memory-fit estimate: parameter counts, the terms that must grow with the config, and verdicts per card."""

import json

import pytest

from app.config import build_config, resolve
from app.memory import estimate_memory, format_estimate, model_shape, params_from_name
from app.presets import load_preset

QWEN_1_5B = {  # the real Qwen2.5-1.5B-Instruct shape
    "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
    "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True,
}


def _est(model: str, method: str = "grpo", sets=()):
    return estimate_memory(resolve(build_config({"method": method, "model": {"name_or_path": model}}, None,
                                                list(sets))))


@pytest.mark.parametrize("name,expected", [
    ("Qwen/Qwen2.5-1.5B-Instruct", 1_500_000_000),
    ("Qwen/Qwen2.5-7B", 7_000_000_000),
    ("meta-llama/Llama-3.1-8B-Instruct", 8_000_000_000),
    ("HuggingFaceTB/SmolLM2-360M-Instruct", 360_000_000),
    ("Qwen/Qwen3-0.6B", 600_000_000),
    ("gpt2", None),
])
def test_params_from_name(name, expected):
    assert params_from_name(name) == expected


def test_param_count_from_local_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN_1_5B))
    shape, params, source = model_shape(str(tmp_path))
    assert source == "config.json"
    assert shape["hidden"] == 1536 and shape["kv_heads"] == 2 and shape["tied"]
    assert abs(params - 1.54e9) / 1.54e9 < 0.02  # published size: 1.54B


def test_1_5b_grpo_fits_8gb_and_7b_does_not():
    small = estimate_memory(resolve(build_config(load_preset("gpu-8gb"))))
    assert small["verdicts"][8] == "fits", small
    # about 1.2 GB of 4-bit weights for 1.5B params (NF4 0.5 byte + constants, embeddings in 16-bit)
    assert 0.9 < small["weights_gb"] < 1.4
    big = _est("Qwen/Qwen2.5-7B-Instruct")
    assert big["verdicts"][8] == "too big" and big["verdicts"][24] == "fits"
    assert big["total_gb"] > small["total_gb"] + 3


def test_terms_grow_with_the_config():
    base = _est("Qwen/Qwen2.5-1.5B-Instruct", "sft", ["training.per_device_train_batch_size=1"])
    more_batch = _est("Qwen/Qwen2.5-1.5B-Instruct", "sft", ["training.per_device_train_batch_size=4"])
    assert more_batch["activations_gb"] > 3 * base["activations_gb"]
    no_ckpt = _est("Qwen/Qwen2.5-1.5B-Instruct", "sft",
                   ["training.per_device_train_batch_size=1", "gradient_checkpointing=false"])
    assert no_ckpt["activations_gb"] > base["activations_gb"]
    high_rank = _est("Qwen/Qwen2.5-1.5B-Instruct", "sft", ["training.per_device_train_batch_size=1", "lora.r=256"])
    # resolve() picks r=64 for SFT when the row count is unknown; LoRA memory is linear in r
    assert high_rank["lora_gb"] == pytest.approx(base["lora_gb"] * 256 / 64, rel=1e-6)
    fp16 = _est("Qwen/Qwen2.5-1.5B-Instruct", "sft",
                ["training.per_device_train_batch_size=1", "model.load_in_4bit=false"])
    assert fp16["weights_gb"] > 2.5 * base["weights_gb"]
    gens = _est("Qwen/Qwen2.5-1.5B-Instruct", "grpo", ["num_generations=16", "per_device_train_batch_size=16"])
    assert gens["generation_gb"] > _est("Qwen/Qwen2.5-1.5B-Instruct", "grpo")["generation_gb"]


def test_unknown_model_size_says_so():
    est = _est("gpt2")
    assert est["total_gb"] is None and set(est["verdicts"].values()) == {"unknown"}
    assert "size unknown" in format_estimate(est)


def test_tiny_local_model_is_tiny(tiny_model):
    est = _est(str(tiny_model), "grpo", ["max_completion_length=16"])
    assert est["params_source"] == "config.json" and est["params"] < 1_000_000
    assert est["total_gb"] < 1.0 and all(v == "fits" for v in est["verdicts"].values())
    assert "8 GB" in format_estimate(est)
