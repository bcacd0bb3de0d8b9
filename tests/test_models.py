"""Decisions around the CUDA-only parts, tested without a GPU."""

from pathlib import Path

import pytest

from app.errors import UserError
from app.models import check_model_source, pick_backend, pick_compute_dtype


@pytest.mark.parametrize("setting, cuda, bf16, want", [
    ("auto", False, False, "fp32"), ("auto", True, True, "bf16"), ("auto", True, False, "fp16"),
    ("fp16", True, True, "fp16"), ("fp32", True, True, "fp32"),
])
def test_compute_dtype(setting, cuda, bf16, want):
    assert pick_compute_dtype(setting, cuda, bf16) == want


def test_bf16_on_old_gpu_is_a_clear_error():
    with pytest.raises(UserError, match="Ampere"):
        pick_compute_dtype("bf16", True, False)


@pytest.mark.parametrize("setting, cuda, installed, want", [
    ("auto", False, True, "hf"), ("auto", True, True, "unsloth"), ("auto", True, False, "hf"), ("hf", True, True, "hf"),
])
def test_backend(setting, cuda, installed, want):
    assert pick_backend(setting, cuda, installed) == want


@pytest.mark.parametrize("cuda, installed, needle", [(False, True, "CUDA"), (True, False, "not installed")])
def test_unsloth_refusals(cuda, installed, needle):
    with pytest.raises(UserError, match=needle):
        pick_backend("unsloth", cuda, installed)


def test_model_source_checks(tmp_path, tiny_model):
    check_model_source(str(tiny_model), local_only=True)  # a local folder is fine offline
    with pytest.raises(UserError, match="not found"):
        check_model_source(str(tmp_path / "missing"), local_only=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="config.json"):
        check_model_source(str(tmp_path / "empty"), local_only=False)
    with pytest.raises(UserError, match="not in the local HF cache"):
        check_model_source("some-org/model-that-is-not-cached", local_only=True)


def test_unsloth_translation_keeps_all_linear_and_excludes():
    from app.config import LoraConfig
    from app.unsloth_backend import ALL_LINEAR, unsloth_peft_kwargs

    kw = unsloth_peft_kwargs(LoraConfig(r=8, alpha=16), seed=3)
    assert kw["target_modules"] == ALL_LINEAR and kw["r"] == 8 and kw["lora_alpha"] == 16 and kw["random_state"] == 3
    kw = unsloth_peft_kwargs(LoraConfig(r=8, alpha=16, exclude_modules=["o_proj"]), seed=0)
    assert "o_proj" not in kw["target_modules"] and "down_proj" in kw["target_modules"]


def test_attention_and_packing_decisions():
    from app.errors import UserError
    from app.models import pick_attention, pick_packing

    assert pick_attention("auto", cuda=True, flash_installed=True) == "flash_attention_2"
    assert pick_attention("auto", cuda=True, flash_installed=False) == "sdpa"
    assert pick_attention("auto", cuda=False, flash_installed=True) == "sdpa"
    assert pick_attention("eager", cuda=False, flash_installed=False) == "eager"
    with pytest.raises(UserError, match="needs a CUDA GPU"):
        pick_attention("flash_attention_2", cuda=False, flash_installed=True)
    with pytest.raises(UserError, match="flash-attn is not installed"):
        pick_attention("flash_attention_2", cuda=True, flash_installed=False)
    assert pick_packing(None, "flash_attention_2") is True  # auto: the default where it is correct
    assert pick_packing(None, "sdpa") is False and pick_packing(None, "unsloth") is False
    assert pick_packing(False, "flash_attention_2") is False
    with pytest.raises(UserError, match="packed examples would attend to each other"):
        pick_packing(True, "sdpa")


def test_sdpa_lets_packed_examples_see_each_other(tiny_model):
    """Why packing stays off without flash attention: two examples packed in one row with restarting position_ids
    give the second one different logits under sdpa than on its own (it attends to the first). If a transformers
    release fixes this, this test fails: then pick_packing may allow sdpa too."""
    import torch
    from transformers import AutoModelForCausalLM

    from app.train.args import sft_kwargs
    from app.config import build_config

    m = AutoModelForCausalLM.from_pretrained(tiny_model, attn_implementation="sdpa").eval()
    g = torch.Generator().manual_seed(0)
    a, b = torch.randint(5, 300, (1, 12), generator=g), torch.randint(5, 300, (1, 9), generator=g)
    with torch.no_grad():
        alone = m(input_ids=b).logits
        packed = m(input_ids=torch.cat([a, b], 1),
                   position_ids=torch.cat([torch.arange(12), torch.arange(9)]).unsqueeze(0)).logits[:, 12:]
    assert not torch.allclose(packed, alone, atol=1e-4)
    assert sft_kwargs(build_config({"method": "sft"}), Path("/tmp/x"), "fp32", False, attention="sdpa")["packing"] is False
