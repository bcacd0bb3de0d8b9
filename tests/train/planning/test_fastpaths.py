"""GPU fast paths: the auto decisions per machine, the refusals when one is forced where it cannot run, and their
translation into TRL's own arguments (accepted by GRPOConfig / SFTConfig)."""

from dataclasses import replace

import pytest
from conftest import plan_for

from app.config.build import build_config
from app.config.resolve import resolve
from app.errors import UserError
from app.train.methods.args import grpo_kwargs, sft_kwargs
from app.train.planning.batching import AUTO_GENERATION_SEQUENCES, MAX_STEPS_PER_GENERATION, steps_per_generation
from app.train.planning.fastpaths import Env, decide, pick_sampler

GPU_ALL = Env(cuda=True, vllm=True, liger=True)
GPU_BARE = Env(cuda=True)
CPU_ALL = Env(cuda=False, vllm=True, liger=True)


def _cfg(*sets, method="grpo"):
    return resolve(build_config({"method": method}, None, list(sets)))


@pytest.mark.parametrize("env, vllm, liger", [
    (GPU_ALL, True, True),        # auto: on where CUDA is and the library imports
    (GPU_BARE, False, False),     # CUDA but no libraries: the plain path
    (CPU_ALL, False, False),      # libraries but no GPU: never on the CPU
    (Env(cuda=True, vllm=True, liger=True, backend="unsloth"), False, False),  # Unsloth brings its own
])
def test_auto_turns_each_fast_path_on_only_where_it_runs(env, vllm, liger):
    fp = decide(_cfg(), env)
    assert (fp.vllm, fp.liger) == (vllm, liger)


@pytest.mark.parametrize("key, env, needle", [
    ("grpo.use_vllm", CPU_ALL, "needs a CUDA GPU"),
    ("grpo.use_vllm", GPU_BARE, "pip install vllm"),
    ("training.use_liger_kernel", GPU_BARE, "pip install liger-kernel"),
    ("training.use_liger_kernel", Env(cuda=True, liger=True, backend="unsloth"), "Unsloth backend"),
    ("training.activation_offloading", CPU_ALL, "needs a CUDA GPU"),
])
def test_forcing_a_fast_path_where_it_cannot_run_is_a_user_error(key, env, needle):
    method = "sft" if "offloading" in key else "grpo"
    with pytest.raises(UserError, match=needle) as e:
        decide(_cfg(f"{key}=true", method=method), env)
    assert f"{key}=true" in str(e.value) and "\n" not in str(e.value)


def test_forced_off_stays_off_and_offloading_is_sft_and_dpo_only():
    fp = decide(_cfg("grpo.use_vllm=false", "training.use_liger_kernel=false"), GPU_ALL)
    assert not fp.vllm and not fp.liger
    with pytest.raises(UserError, match="SFT / DPO option"):
        decide(_cfg("training.activation_offloading=true"), GPU_ALL)
    for method in ("sft", "dpo"):  # TRL offers it to both: whole sequences trained, no sampling
        cfg = _cfg(method=method)
        assert not decide(cfg, GPU_ALL).offloading  # auto: only when the fit check needs the room
        assert decide(cfg, GPU_ALL, needs_room=True).offloading
        assert not decide(cfg, CPU_ALL, needs_room=True).offloading
        assert decide(_cfg("training.activation_offloading=true", method=method), GPU_ALL).offloading


def test_translation_into_trl_arguments():
    from trl import GRPOConfig, SFTConfig

    cfg = build_config(sets=["grpo.vllm_gpu_memory_utilization=0.4"])
    gpu = plan_for(cfg, gpu_gb=80)  # as planned for a card, with vLLM and Liger installed there
    kw = grpo_kwargs(replace(gpu, fast=decide(gpu.cfg, GPU_ALL)), "/tmp/r", [1.0])
    assert kw["use_vllm"] and kw["vllm_mode"] == "colocate" and kw["vllm_gpu_memory_utilization"] == 0.4
    assert kw["use_liger_kernel"] and kw["steps_per_generation"] % gpu.cfg.training.gradient_accumulation_steps == 0
    cpu = grpo_kwargs(plan_for(build_config(sets=["runtime.device=cpu"])), "/tmp/r", [1.0])
    assert cpu["use_vllm"] is False and cpu["use_liger_kernel"] is False and "vllm_mode" not in cpu
    GRPOConfig(**cpu)  # TRL accepts every key on the CPU path
    sft = plan_for(build_config({"method": "sft"}), gpu_gb=80, packing=True)
    skw = sft_kwargs(replace(sft, fast=decide(sft.cfg, GPU_ALL, needs_room=True)), "/tmp/r")
    assert skw["activation_offloading"] and skw["use_liger_kernel"]
    SFTConfig(**sft_kwargs(plan_for(build_config({"method": "sft"}, sets=["runtime.device=cpu"]), packing=True),
                           "/tmp/r"))


@pytest.mark.parametrize("batch, accum, want", [
    (4, 2, 2 * MAX_STEPS_PER_GENERATION),   # 8 per step: capped at 4 optimizer steps' worth (32 completions)
    (32, 1, 2),                             # the demo: 64 completions serve 2 optimizer steps
    (64, 1, 1),                             # already 64 per step: nothing to batch up
    (8, 16, 16),                            # 128 per step: one generation per optimizer step
])
def test_auto_generation_batch(batch, accum, want):
    spg = steps_per_generation(batch, accum, None, 4)
    assert spg == want and spg % accum == 0
    assert batch * spg <= max(AUTO_GENERATION_SEQUENCES, batch * accum)


def test_explicit_generation_batch_is_checked_and_trl_knobs_win():
    assert steps_per_generation(8, 1, 48, 4) == 6
    with pytest.raises(UserError, match="multiple of training.per_device_train_batch_size"):
        steps_per_generation(8, 1, 20, 4)
    with pytest.raises(UserError, match="multiple of grpo.num_generations"):
        steps_per_generation(2, 1, 6, 4)
    cfg = _cfg("training.extra_args={steps_per_generation: 2}")
    assert decide(cfg, CPU_ALL).steps_per_generation is None  # the user's own TRL setting is passed through
    plan = plan_for(build_config(sets=["runtime.device=cpu", "training.extra_args={steps_per_generation: 2}"]))
    assert grpo_kwargs(plan, "/tmp/r", [1.0])["steps_per_generation"] == 2


def test_auto_can_be_typed_as_well_as_left_empty():
    cfg = build_config(sets=["grpo.use_vllm=auto", "training.use_liger_kernel=Auto", "training.packing=auto",
                             "training.activation_offloading=auto"])
    assert (cfg.grpo.use_vllm, cfg.training.use_liger_kernel, cfg.training.packing,
            cfg.training.activation_offloading) == (None, None, None, None)
    with pytest.raises(UserError, match="grpo.use_vllm"):
        build_config(sets=["grpo.use_vllm=sometimes"])


def test_generation_batch_fits_the_data():
    """TRL drops an incomplete generation batch: with fewer prompts than one batch nothing trains (it logs "not a
    single sample" and the run 'finished' at step 0). The auto batch shrinks to the data; one step too big is an
    error; an explicit size is the user's to lower."""
    from app.train.planning.fastpaths import fit_generation_to_data

    cfg = _cfg("per_device_train_batch_size=4", "gradient_accumulation_steps=2", "num_generations=4")
    fp = decide(cfg, Env(cuda=False))
    assert fp.optimizer_steps_per_generation == 4 and fp.steps_per_generation == 8  # 8 prompts at a time
    said = []
    small = fit_generation_to_data(fp, cfg, 5, note=said.append)  # 2 prompts per optimizer step
    assert (small.steps_per_generation, small.optimizer_steps_per_generation, small.completions_at_once) == (4, 2, 16)
    assert "has 5 prompts: sampling 4 at a time (2 optimizer step(s)' worth), not 8" in said[0]
    assert fit_generation_to_data(fp, cfg, 8) == fp and fit_generation_to_data(fp, cfg, 2).steps_per_generation == 2
    assert fit_generation_to_data(fp, cfg, 4, world=2).steps_per_generation == 2  # two processes: 4 prompts a step
    with pytest.raises(UserError, match="one GRPO step takes 2 prompts .* the training data has 1"):
        fit_generation_to_data(fp, cfg, 1)
    fixed = _cfg("per_device_train_batch_size=4", "gradient_accumulation_steps=2", "num_generations=4",
                 "grpo.generation_batch_size=32")
    with pytest.raises(UserError, match="grpo.generation_batch_size=32 samples 8 prompts at a time and the training"):
        fit_generation_to_data(decide(fixed, Env(cuda=False)), fixed, 5)
    trl_own = _cfg("training.extra_args={steps_per_generation: 8}")
    fp = decide(trl_own, Env(cuda=False))
    assert fit_generation_to_data(fp, trl_own, 3) is fp  # TRL's own knobs: passed through as set


# ------------------------------------------------------------------ the GRPO sampler (app/train/methods/sampler.py)

@pytest.mark.parametrize("setting, kw, want", [
    ("auto", dict(cuda=True, vllm=False, backend="hf", fsdp=False, copy_fits=True), "merged"),
    ("auto", dict(cuda=True, vllm=False, backend="hf", fsdp=False, copy_fits=False), "plain"),  # no room
    ("auto", dict(cuda=False, vllm=False, backend="hf", fsdp=False, copy_fits=True), "merged"),
    ("auto", dict(cuda=True, vllm=True, backend="hf", fsdp=False, copy_fits=True), "plain"),    # vLLM samples
    ("auto", dict(cuda=True, vllm=False, backend="unsloth", fsdp=False, copy_fits=True), "plain"),
    ("auto", dict(cuda=True, vllm=False, backend="hf", fsdp=True, copy_fits=True), "plain"),
    ("plain", dict(cuda=True, vllm=False, backend="hf", fsdp=False, copy_fits=True), "plain"),
    ("merged", dict(cuda=True, vllm=False, backend="hf", fsdp=False, copy_fits=False), "merged"),  # fit check says
])
def test_pick_sampler(setting, kw, want):
    assert pick_sampler(setting, **kw) == want


def test_forcing_merged_with_vllm_is_refused():
    with pytest.raises(UserError, match="grpo.sampler=merged does not combine with vLLM"):
        pick_sampler("merged", cuda=True, vllm=True, backend="hf", fsdp=False, copy_fits=True)


# ------------------------------------------------------------ linear attention (Qwen3.5's Gated DeltaNet layers)

def test_linear_attention_kernels_are_decided_and_named_when_missing():
    from app.train.planning.fastpaths import linear_kernels

    assert linear_kernels(0, GPU_BARE) == (None, None)  # a full-attention model: nothing to say
    on_cpu, said = linear_kernels(3, Env(cuda=False))
    assert on_cpu.startswith("pure torch (CPU") and said is None  # the kernels are CUDA-only
    fast, said = linear_kernels(3, Env(cuda=True, fla=True, causal_conv1d=True))
    assert fast == "flash-linear-attention + causal-conv1d" and said is None
    slow, said = linear_kernels(3, Env(cuda=True, fla=True))
    assert slow == "pure torch (missing causal-conv1d)"
    assert "3 linear-attention layers need causal-conv1d" in said and "10-50x slower" in said
    assert "pip install 'qlora-app[fla]'" in said


def test_a_dry_run_for_a_gpu_card_names_the_missing_kernels_and_records_them(tiny_moe, math_jsonl, tmp_path):
    """A tiny Qwen3.5-MoE (one linear-attention layer of two) planned for a 24 GB card on this machine, which has
    neither kernel: the plan says what the card will need, and status.json's fast paths carry it."""
    import json

    from conftest import cli_here

    r = cli_here("train", "--model", str(tiny_moe["qwen3_5_moe_text"]), "--dataset", str(math_jsonl), "--method",
                 "sft", "--dry-run", "--gpu-memory", "24", "--local-only", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    plan = json.loads(r.stdout)
    said = " ".join(plan["notes"])
    assert "this model's 1 linear-attention layers need flash-linear-attention and causal-conv1d" in said
    here = cli_here("train", "--model", str(tiny_moe["qwen3_5_moe_text"]), "--dataset", str(math_jsonl), "--method",
                    "sft", "--dry-run", "--local-only", "--json", cwd=tmp_path)  # this CPU: nothing to miss
    assert "linear-attention layers need" not in " ".join(json.loads(here.stdout)["notes"])
