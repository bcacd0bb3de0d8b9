"""Scale-out through torchrun on CPU (gloo): the same `qlora-app train` on 2 processes, SFT and GRPO, rank 0 alone
writing the run directory; Ctrl-C of a 2-process run leaves a checkpoint that --resume continues; two "machines"
over loopback; a resume on a different world size is refused."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import cli, cli_command, cli_here, tiny_sets

from app.run import integrity, layout, lookup, newrun, store

FAST = [*tiny_sets("sft"), "max_length=64"]  # SFT's (conftest.tiny_sets: no proof, no held-out points)


def _argv(model, data, method, steps, extra=(), flags=()):
    argv = [*cli_command(), "train", "--method", method, "--model", str(model), "--dataset",
            str(data), "--max-steps", str(steps), "--local-only", "--no-progress", *flags]
    for s in FAST + list(extra):
        argv += ["--set", s]
    return argv


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _runs(out: Path) -> list[Path]:
    return [p for p in out.iterdir() if lookup.is_run_dir(p)] if out.is_dir() else []


def _only_run(out: Path) -> Path:
    (d,) = _runs(out)
    return d


def _check_finished(d: Path, steps: int):
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == steps and st["world_size"] == 2
    assert "world size 2 (DistributedType.MULTI_CPU)" in (d / layout.LOG).read_text()
    assert [r["step"] for r in store.read_metrics(d)] == list(range(1, steps + 1))  # one row per step: rank 0
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = json.loads((d / layout.ADAPTER / "adapter_config.json").read_text())
    base = AutoModelForCausalLM.from_pretrained(cfg["base_model_name_or_path"])
    PeftModel.from_pretrained(base, str(d / layout.ADAPTER))  # one adapter, saved once, loads


@pytest.mark.slow
@pytest.mark.parametrize("method, extra", [
    ("sft", ["save_steps=2"]),
    ("grpo", ["save_steps=2", "per_device_train_batch_size=4", "num_generations=4", "max_completion_length=8"]),
])
def test_two_processes_train_and_rank_0_writes_once(tiny_model, math_jsonl, tmp_path, method, extra):
    out = tmp_path / "runs"
    r = subprocess.run(_argv(tiny_model, math_jsonl, method, 4, extra,
                             ["--num-processes", "2", "--output-dir", str(out)]),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    d = _only_run(out)
    _check_finished(d, 4)
    import yaml

    assert yaml.safe_load((d / layout.CONFIG).read_text())["runtime"]["num_processes"] == 2
    assert r.stdout.count(f"run {d.name}: finished") == 1  # the summary once, not once per rank
    if method == "grpo":
        recs = store.read_metrics(d)
        # rewards are logged on the steps that sampled (the auto generation batch serves several steps)
        sampled = [r for r in recs if r.get("reward") is not None]
        assert sampled and sampled[0]["step"] == 1
        assert all(r.get("rewards/length/mean") is not None for r in sampled)
        # TRL gathers completions over both ranks: 2 ranks x 4 completions x (prompt + completion) tokens a step
        assert recs[0]["num_tokens"] > 8 * 8


@pytest.mark.slow
def test_ctrl_c_of_two_processes_checkpoints_and_resume_reaches_the_planned_step(tiny_model, math_jsonl, tmp_path):
    out, steps = tmp_path / "runs", 40
    p = subprocess.Popen(_argv(tiny_model, math_jsonl, "sft", steps, ["save_steps=100"],
                               ["--num-processes", "2", "--output-dir", str(out)]),
                         start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    end = time.time() + 300
    while not (_runs(out) and len(store.read_metrics(_only_run(out))) >= 3):
        assert time.time() < end and p.poll() is None, "the run never logged 3 steps"
        time.sleep(0.05)
    os.killpg(p.pid, signal.SIGINT)  # Ctrl-C in a terminal: the whole foreground group
    output, _ = p.communicate(timeout=300)
    d = _only_run(out)
    assert p.returncode == 130, output[-3000:]  # stopped, as a shell reports Ctrl-C; the workers exit quietly
    assert "Traceback" not in output and "SignalException" not in output
    st = store.read_status(d)
    assert st["status"] == layout.INTERRUPTED and integrity.last_checkpoint(d) is not None
    stopped = int(integrity.last_checkpoint(d).name.split("-")[1])
    assert 3 <= stopped < steps
    assert f"qlora-app train --resume {d}" in output.replace("\n", "")
    r = cli("train", "--resume", str(d), "--no-progress", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    _check_finished(d, steps)


@pytest.mark.slow
def test_two_machines_over_loopback(tiny_model, math_jsonl, tmp_path):
    run, port = tmp_path / "shared" / "run", _free_port()
    common = ["--num-processes", "1", "--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", str(port),
              "--run-dir", str(run)]
    argv = _argv(tiny_model, math_jsonl, "sft", 4, ["save_steps=2"], common)
    other = subprocess.Popen(argv + ["--node-rank", "1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    r = subprocess.run(argv + ["--node-rank", "0"], capture_output=True, text=True, timeout=600)
    out1, _ = other.communicate(timeout=600)
    assert r.returncode == 0 and other.returncode == 0, r.stderr[-2000:] + out1[-2000:]
    _check_finished(run, 4)


def test_resume_on_another_world_size_and_bad_node_rank_are_refused(tmp_path):
    d = newrun.new_run_dir(tmp_path, "r")
    (d / layout.CONFIG).write_text("method: sft\nruntime: {num_processes: 2}\n")
    r = cli_here("train", "--resume", str(d), "--num-processes", "3")
    assert r.returncode == 2 and "trained with 2 process(es) on 1 machine(s)" in r.stderr
    assert "--num-processes 2" in r.stderr and "Traceback" not in r.stderr
    r = cli_here("train", "--dry-run", "--nnodes", "2", "--node-rank", "2")
    assert r.returncode == 2 and "runtime.node_rank (2) must be below runtime.nnodes (2)" in r.stderr


def test_launcher_command():
    from app.config.schema import RuntimeConfig
    from app.train.running.torchrun import launcher_argv

    rt = RuntimeConfig(num_processes=4, nnodes=2, node_rank=1, master_addr="10.0.0.1", master_port=29600)
    argv = launcher_argv(rt, ["--config", "r/config.yaml", "--run-dir", "r"])
    assert argv[1:3] == ["-m", "torch.distributed.run"]
    assert {"--nproc-per-node=4", "--nnodes=2", "--node-rank=1", "--master-addr=10.0.0.1",
            "--master-port=29600"} <= set(argv)
    assert argv[argv.index("-m", 3):] == ["-m", "app.cli", "train", "--config", "r/config.yaml", "--run-dir", "r",
                                          "--no-progress"]
    # no port given: several machines meet on torchrun's 29500; one machine takes a port free right now, so two runs
    # on one machine (or two test workers) never collide on it
    assert "--master-port=29500" in launcher_argv(RuntimeConfig(num_processes=4, nnodes=2, master_addr="10.0.0.1"),
                                                  [])
    ports = {int(next(a for a in launcher_argv(RuntimeConfig(num_processes=2), []) if a.startswith(
        "--master-port=")).split("=")[1]) for _ in range(3)}
    assert 29500 not in ports and all(1024 < p < 65536 for p in ports)


def test_fsdp_qlora_translation(tiny_model, tmp_path):
    """The FSDP + QLoRA configuration we generate (not a GPU run): TRL accepts the arguments, the decoder layer of
    the real model is what gets wrapped, the 4-bit weights are stored in the compute dtype so FSDP can shard them,
    and asking for FSDP without CUDA or with one process is a one-line error."""
    import torch
    from transformers import AutoModelForCausalLM
    from trl import SFTConfig

    from app.config.build import build_config
    from app.config.schema import ModelConfig
    from app.errors import UserError
    from app.model.load import quantization_config
    from app.train.methods.args import sft_kwargs
    from app.train.planning.fsdp import check_fsdp

    cfg = build_config({"method": "sft"}, sets=["runtime.fsdp=true", "runtime.num_processes=2",
                                                  "gradient_checkpointing=true"])
    layers = AutoModelForCausalLM.from_pretrained(tiny_model)._no_split_modules
    assert set(layers) == {"Qwen3DecoderLayer"}
    from conftest import plan_for

    plan = plan_for(cfg, gpu_gb=24, packing=False)
    kw = sft_kwargs(plan, tmp_path, fsdp_layers=layers)
    assert kw["fsdp"] is True and kw["gradient_checkpointing"] is False
    fc = kw["fsdp_config"]
    assert fc["transformer_layer_cls_to_wrap"] == ["Qwen3DecoderLayer"] and fc["activation_checkpointing"] is True
    assert fc["use_orig_params"] is False and fc["cpu_ram_efficient_loading"] and fc["sync_module_states"]
    args = SFTConfig(**{**kw, "bf16": False, "use_cpu": True, "optim": "adamw_torch"})  # parses and validates
    assert args.fsdp_config["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert quantization_config(ModelConfig(), "bf16", fsdp=True).bnb_4bit_quant_storage == torch.bfloat16
    assert quantization_config(ModelConfig(), "bf16").bnb_4bit_quant_storage == torch.uint8  # unchanged without
    with pytest.raises(UserError, match="needs CUDA"):
        check_fsdp(cfg.runtime, cuda=False)
    with pytest.raises(UserError, match="at least 2 processes"):
        check_fsdp(build_config(sets=["runtime.fsdp=true"]).runtime, cuda=True)
    with pytest.raises(UserError, match="decoder layer"):
        sft_kwargs(plan, tmp_path, fsdp_layers=None)
