"""Out of GPU memory is a step down, not the end: the ladder (app/train/planning/oom.py) keeps the effective batch and
the data, the run continues from its last complete state, each change is recorded, and a spent ladder is one line.
QLORA_APP_FAULT raises the real torch.OutOfMemoryError where it says, on a CPU too."""

import os
import subprocess

import pytest
import yaml
from conftest import cli, cli_command, plan_for
from repo_paths import ROOT

from app.config.build import build_config
from app.errors import UserError
from app.run import integrity, layout, lookup, store
from app.train.planning.oom import Faults, is_oom, next_rung


def test_faults_are_parsed_and_fire_where_asked():
    import torch

    with pytest.raises(UserError, match="QLORA_APP_FAULT=oom@two is not a fault: use oom@N"):
        Faults("oom@two")
    f = Faults("oom@3")
    f.step(2)
    with pytest.raises(torch.OutOfMemoryError, match="injected by QLORA_APP_FAULT=oom@3 at optimizer step 3"):
        f.step(3)
    f.step(3)  # once: the step trained again after the recovery goes through
    always = Faults("oom@always")
    for n in (1, 1, 2):
        with pytest.raises(torch.OutOfMemoryError):
            always.step(n)
    gen = Faults("oom@gen")
    gen.step(1)
    with pytest.raises(torch.OutOfMemoryError, match="the first generation round"):
        gen.generation()
    gen.generation()
    assert Faults("").at is None
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("CUDA error: out of memory")) and not is_oom(RuntimeError("shape mismatch"))


def _walk(plan):
    """Every rung of the ladder from ``plan``, each applied as a run applies it."""
    from app.train.planning.plan import replan

    rungs = []
    while (rung := next_rung(plan)) is not None:
        rungs.append(rung[1])
        plan = replan(plan, rung[0], f"out of memory at step 1 ({rung[1]})")  # as the session words it
        t = plan.cfg.training
        assert t.per_device_train_batch_size * t.gradient_accumulation_steps == 16  # the effective batch kept
    return rungs, plan


def test_the_grpo_ladder_on_a_gpu_plan():
    cfg = build_config({"method": "grpo"}, None, ["per_device_train_batch_size=8", "gradient_accumulation_steps=2",
                                                  "grpo.num_generations=8"])
    plan = plan_for(cfg, gpu_gb=80)
    assert plan.fast.sampler == "merged" and plan.fast.completions_at_once == 64
    rungs, last = _walk(plan)
    assert rungs == ["sampling 16 completions at a time (one optimizer step's worth), not 64",
                     "sampling with the 4-bit model instead of the merged 16-bit copy",
                     "per-device batch 4 with 4 accumulation steps (was 8 x 2)",
                     "per-device batch 2 with 8 accumulation steps (was 4 x 4)",
                     "per-device batch 1 with 16 accumulation steps (was 2 x 8)",
                     "the same settings once more after freeing memory (a passing spike)"]
    assert last.fast.sampler == "plain" and last.cfg.grpo.generation_batch_size == 16
    assert last.estimate["torch_peak_gb"] < plan.estimate["torch_peak_gb"] - 2  # each rung frees memory
    assert [a.key for a in last.adjustments][:2] == ["grpo.generation_batch_size", "grpo.sampler"]


def test_the_sft_ladder_ends_with_offloading_on_a_gpu_and_without_it_on_a_cpu():
    cfg = build_config({"method": "sft"}, None, ["per_device_train_batch_size=4", "gradient_accumulation_steps=4"])
    rungs, last = _walk(plan_for(cfg, gpu_gb=24, packing=True))
    assert rungs[2] == "activation offloading on" and last.fast.offloading
    # then, on every device: once more after freeing memory, then shorter examples down to 128 tokens
    shorter = [r for r in rungs if r.startswith("examples cut at")]
    assert rungs[3].startswith("the same settings once more") and len(shorter) == 3 and rungs[-1] == shorter[-1]
    assert last.cfg.training.max_length == 128
    assert [a.key for a in last.adjustments].count("training.max_length") == 3
    rungs, _ = _walk(plan_for(build_config({"method": "sft"}, None, [
        "per_device_train_batch_size=4", "gradient_accumulation_steps=4", "runtime.device=cpu"]), packing=True))
    assert len(rungs) == 2 + 1 + 3 and "activation offloading on" not in rungs  # CUDA's offloading: not on a CPU


def test_the_dpo_ladder_halves_its_pairs_then_offloads():
    cfg = build_config({"method": "dpo"}, None, ["per_device_train_batch_size=4", "gradient_accumulation_steps=4"])
    rungs, last = _walk(plan_for(cfg, gpu_gb=24))
    assert rungs[:4] == ["per-device batch 2 with 8 accumulation steps (was 4 x 4)",
                         "per-device batch 1 with 16 accumulation steps (was 2 x 8)", "activation offloading on",
                         "the same settings once more after freeing memory (a passing spike)"]
    assert last.fast.offloading and last.cfg.training.per_device_train_batch_size == 1


def _train(out, *extra, env=None, steps=6):
    argv = [*cli_command(), "train", "--preset", "demo-grpo", "--max-steps", str(steps),
            "--output-dir", str(out), "--no-progress", "--set", "training.eval_every=0", "--set",
            "training.proof_rows=0", *extra]  # no held-out points or proof: the ladder is what these check
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["oom@2", "oom@gen"])
def test_the_demo_recipe_recovers_and_finishes_with_the_same_effective_batch(tmp_path, fault):
    r = _train(tmp_path, "--set", "logging_steps=1", env={"QLORA_APP_FAULT": fault})
    assert r.returncode == 0, r.stderr[-3000:]
    (d,) = lookup.list_runs(tmp_path)
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == 6
    [change] = st["oom_changes"]
    assert change["step"] == (2 if fault == "oom@2" else 1) and change["from_step"] == 0
    assert change["change"] == "sampling 32 completions at a time (one optimizer step's worth), not 64"
    cfg = yaml.safe_load((d / layout.CONFIG).read_text())
    assert cfg["grpo"]["generation_batch_size"] == 32  # what trained, with why and from which step on top
    assert cfg["training"]["per_device_train_batch_size"] * cfg["training"]["gradient_accumulation_steps"] == 32
    # on a CPU the words say memory, not GPU memory
    assert "# grpo.generation_batch_size: null -> 32 (out of memory at step" in (d / layout.CONFIG).read_text()
    assert "out of memory at step" in (d / layout.LOG).read_text()
    assert "out of memory at step" in " ".join(r.stdout.split())  # said in the terminal too
    assert [rec["step"] for rec in store.read_metrics(d)] == [1, 2, 3, 4, 5, 6]  # each step logged once


@pytest.mark.slow
def test_a_spent_ladder_is_one_line_exit_1_and_the_checkpoints_stay(tmp_path):
    r = _train(tmp_path, "--set", "training.save_steps=2", "--set", "logging_steps=1", steps=2)
    assert r.returncode == 0, r.stderr[-3000:]
    (d,) = lookup.list_runs(tmp_path)
    r = cli("train", "--resume", str(d), "--max-steps", "4", "--no-progress", timeout=600,
            env={**os.environ, "QLORA_APP_FAULT": "oom@always"}, cwd=ROOT)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert lines[0].startswith("error: out of memory at step 3") and "checkpoints are kept" in lines[0]
    assert "even at the least qlora-app can choose by itself (per-device batch 1 and a retry)" in lines[0]
    assert integrity.last_checkpoint(d).name == "checkpoint-2"
    st = store.read_status(d)
    assert st["status"] == layout.FAILED and len(st["oom_changes"]) >= 3
    r = cli("train", "--resume", str(d), "--no-progress", timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert store.read_status(d)["status"] == layout.FINISHED and store.read_status(d)["step"] == 4
