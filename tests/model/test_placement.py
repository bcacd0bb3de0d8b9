"""Decisions around the CUDA-only parts, tested without a GPU."""

import pytest

from app.errors import UserError
from app.model.placement import pick_compute_dtype
from app.model.source import check_model_source
from app.model.unsloth_backend import pick_backend


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
    from app.config.schema import LoraConfig
    from app.model.unsloth_backend import ALL_LINEAR, unsloth_peft_kwargs

    kw = unsloth_peft_kwargs(LoraConfig(r=8, alpha=16), seed=3)
    assert kw["target_modules"] == ALL_LINEAR and kw["r"] == 8 and kw["lora_alpha"] == 16 and kw["random_state"] == 3
    kw = unsloth_peft_kwargs(LoraConfig(r=8, alpha=16, exclude_modules=["o_proj"]), seed=0)
    assert "o_proj" not in kw["target_modules"] and "down_proj" in kw["target_modules"]


def test_attention_and_packing_decisions():
    from app.errors import UserError
    from app.model.placement import pick_attention, pick_packing

    assert pick_attention("auto", cuda=True, flash_installed=True) == "flash_attention_2"
    assert pick_attention("auto", cuda=True, flash_installed=False) == "sdpa"
    assert pick_attention("auto", cuda=False, flash_installed=True) == "sdpa"
    assert pick_attention("eager", cuda=False, flash_installed=False) == "eager"
    with pytest.raises(UserError, match="needs a CUDA GPU"):
        pick_attention("flash_attention_2", cuda=False, flash_installed=True)
    with pytest.raises(UserError, match="flash-attn is not installed"):
        pick_attention("flash_attention_2", cuda=True, flash_installed=False)
    for kernel in ("flash_attention_2", "sdpa", "eager"):  # auto: the default wherever it is correct
        assert pick_packing(None, kernel) is True
    assert pick_packing(None, "unsloth") is False and pick_packing(None, "sdpa", remote_code=True) is False
    assert pick_packing(False, "flash_attention_2") is False
    with pytest.raises(UserError, match="packed examples would attend to each other"):
        pick_packing(True, "unsloth")
    with pytest.raises(UserError, match="trust_remote_code"):
        pick_packing(True, "sdpa", remote_code=True)


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_sft_batch_keeps_examples_apart(tiny_models, attention, tmp_path):
    """Why packing is the SFT default with sdpa/eager: TRL's padding-free collator (what packing=True builds) gives
    one row with restarting position_ids and no attention mask, and the trainer's own loss forward then gives each
    packed example exactly the logits it has alone. With a KV cache in the forward the block mask is not built and
    the second example sees the first: the reason the training forward must keep use_cache=False (TRL sets it)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from app.config.build import build_config
    from app.train.methods.args import sft_kwargs

    path = tiny_models["llama"]
    tok = AutoTokenizer.from_pretrained(path)
    m = AutoModelForCausalLM.from_pretrained(path, attn_implementation=attention)
    from conftest import plan_for

    from app.model.placement import pick_packing

    plan = plan_for(build_config({"method": "sft"}, sets=["runtime.device=cpu"]),
                    packing=pick_packing(None, attention))  # what decide_packing picks for this kernel
    kw = sft_kwargs(plan, tmp_path)
    assert kw["packing"] is True
    rows = [{"prompt": [{"role": "user", "content": f"Tom has {a} apples and buys {b} more."}],
             "completion": [{"role": "assistant", "content": f"Answer: {a} + {b} = {a + b}"}]}
            for a, b in ((3, 4), (12, 9))]
    kw.update(max_steps=1, per_device_train_batch_size=2, gradient_accumulation_steps=1, report_to="none")
    trainer = SFTTrainer(model=m, args=SFTConfig(**kw), train_dataset=Dataset.from_list(rows), processing_class=tok)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(trainer.train_dataset))])
    assert "attention_mask" not in batch and batch["input_ids"].shape[0] == 1  # one packed row
    pos = batch["position_ids"][0]
    starts = (pos == 0).nonzero().flatten().tolist()
    assert len(starts) == 2
    m.eval()
    with torch.no_grad():
        _, out = trainer.compute_loss(m, dict(batch), return_outputs=True)
        with_cache = m(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=True).logits
        for i, s in enumerate(starts):
            e = starts[i + 1] if i + 1 < len(starts) else len(pos)
            alone = m(input_ids=batch["input_ids"][:, s:e], use_cache=False).logits
            assert torch.allclose(out.logits[:, s:e], alone, atol=1e-4), f"packed example {i} saw another example"
    second = slice(starts[1], len(pos))
    assert not torch.allclose(with_cache[:, second], out.logits[:, second], atol=1e-4)
