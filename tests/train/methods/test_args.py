"""AppConfig -> TRL arguments, without loading a model."""

import pytest
from conftest import plan_for

from app.config.build import build_config
from app.errors import UserError
from app.train.methods.args import grpo_kwargs, sft_kwargs


def _kw(sets, fn=grpo_kwargs, **kw):
    cfg = build_config(sets=["runtime.device=cpu", *sets])
    if fn is grpo_kwargs:
        return grpo_kwargs(plan_for(cfg), "/tmp/run", kw.get("weights", [1.0]))
    return sft_kwargs(plan_for(cfg, packing=True), "/tmp/run")


def test_grpo_translation():
    kw = _kw(["num_generations=8", "per_device_train_batch_size=8", "max_completion_length=64", "beta=0.04"])
    assert kw["num_generations"] == 8 and kw["max_completion_length"] == 64 and kw["beta"] == 0.04
    assert kw["use_cpu"] and not kw["bf16"] and kw["optim"] == "adamw_torch"
    assert kw["output_dir"].endswith("/checkpoints")
    from trl import GRPOConfig

    GRPOConfig(**kw)  # TRL accepts every key we pass


def test_gpu_dtype_choice_maps_to_trainer_flags():
    bf = grpo_kwargs(plan_for(build_config(), gpu_gb=24), "/tmp/r", [1.0])
    fp = grpo_kwargs(plan_for(build_config(sets=["model.compute_dtype=fp16"]), gpu_gb=24), "/tmp/r", [1.0])
    assert bf["bf16"] and not bf["fp16"] and fp["fp16"] and not fp["bf16"]
    assert bf["optim"] == "paged_adamw_8bit" and not bf["use_cpu"]


def test_trackio_never_publishes_a_space_by_default():
    kw = _kw(["report_to=[trackio]"])
    assert kw["report_to"] == ["trackio"]
    assert kw["trackio_space_id"] is None and kw["trackio_static_space_id"] is False


def test_extra_args_checked_against_trl_fields():
    kw = _kw(["method=sft", "training.extra_args={packing: false}"], fn=sft_kwargs)
    assert kw["packing"] is False  # TRL's own field, passed through as set
    with pytest.raises(UserError, match="did you mean 'packing'"):
        _kw(["method=sft", "training.extra_args={packng: true}"], fn=sft_kwargs)
    with pytest.raises(UserError, match="local-only"):
        _kw(["local_only=true", "training.extra_args={trackio_space_id: me/x}"])
