"""Decisions around the CUDA-only parts, tested without a GPU."""

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
