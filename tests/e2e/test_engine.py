"""The real QLoRA path on CPU: 4-bit tiny models, TRL SFT and GRPO for a few steps, the run directory contract."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import cli, cli_command, tiny_sets

from app.config.build import build_config
from app.run import integrity, layout, store
from app.train.running.session import Session

pytestmark = pytest.mark.slow

def _cfg(model: Path, data: Path, out: Path, method: str, steps: int = 2, extra=()):
    # conftest.tiny_sets: runtime.device=cpu (the same path, fp32 compute and AdamW, on a machine with a GPU too), no
    # proof or held-out points (tests/train/running/test_heldout_eval.py checks those)
    return build_config(
        {"method": method, "model": {"name_or_path": str(model)}, "data": {"dataset": str(data)},
         "output_dir": str(out), "run_name": f"{method}-test"},
        {"training": {"max_steps": steps}},
        [*tiny_sets(method), "training.save_steps=2", "training.max_length=96", *extra],
    )


def _check_run_dir(d: Path, method: str, steps: int):
    for name in (layout.CONFIG, layout.METRICS, layout.LOG, layout.STATUS):
        assert (d / name).is_file(), name
    assert (d / layout.ADAPTER / "adapter_config.json").is_file()
    assert (d / layout.ADAPTER / "adapter_model.safetensors").is_file()
    assert integrity.last_checkpoint(d) is not None
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == steps
    recs = store.read_metrics(d)
    assert [r["step"] for r in recs] == list(range(1, steps + 1))
    assert all(r.get("learning_rate") is not None and "loss" in r for r in recs)
    if method == "grpo":
        # TRL logs rewards on the steps that sampled; the auto generation batch samples for several steps at once
        spg = store.read_status(d)["fast_paths"]
        sampled = [r for r in recs if r.get("reward") is not None]
        assert sampled and sampled[0]["step"] == 1, spg
        for comp in ("length", "format", "reference", "boilerplate"):
            assert all(r.get(f"rewards/{comp}/mean") is not None for r in sampled), comp
    # peak memory on record (CPU: the process's peak RSS in the same fields), per logged step and in the status
    from app.run.summary import run_summary
    from app.train.running import peakmem

    assert all(r[peakmem.RESERVED] > 0.05 and r[peakmem.DEVICE] == "cpu (peak RSS)" for r in recs)
    assert [r[peakmem.RESERVED] for r in recs] == sorted(r[peakmem.RESERVED] for r in recs)  # a running peak
    assert st[peakmem.RESERVED] >= recs[-1][peakmem.RESERVED]
    assert run_summary(d)["peak_memory"] == f"{st[peakmem.RESERVED]:.2f} GiB peak RSS (CPU)"
    cfg = yaml.safe_load((d / layout.CONFIG).read_text())
    assert cfg["method"] == method and cfg["lora"]["r"] > 0  # resolved, complete


def _loads_as_peft(model_dir: Path, adapter: Path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(model_dir)
    m = PeftModel.from_pretrained(base, str(adapter))
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    # all-linear: attention and MLP projections both carry LoRA
    targets = cfg["target_modules"]
    leaf_names = {t.rsplit(".", 1)[-1] for t in (targets if isinstance(targets, list) else [targets])}
    assert {"q_proj", "v_proj", "up_proj", "down_proj"} <= leaf_names, targets
    assert any("lora_A" in n for n, _ in m.named_parameters())


def test_base_loads_in_4bit(tiny_model):
    import bitsandbytes as bnb

    from app.config.schema import ModelConfig
    from app.model.load import load_base_model

    model, tok, info = load_base_model(ModelConfig(name_or_path=str(tiny_model)), device="cpu")
    kinds = {type(m) for m in model.modules()}
    assert bnb.nn.Linear4bit in kinds and info["4bit"] and info["compute_dtype"] == "fp32"
    assert tok.pad_token is not None


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_sft_few_steps_each_architecture(arch, tiny_models, math_jsonl, tmp_path):
    d = Session(_cfg(tiny_models[arch], math_jsonl, tmp_path, "sft", steps=2), progress=False).run()
    _check_run_dir(d, "sft", 2)
    _loads_as_peft(tiny_models[arch], d / layout.ADAPTER)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_grpo_few_steps_logs_each_reward_component(arch, tiny_models, math_jsonl, tmp_path):
    d = Session(_cfg(tiny_models[arch], math_jsonl, tmp_path, "grpo", steps=2), progress=False).run()
    _check_run_dir(d, "grpo", 2)
    _loads_as_peft(tiny_models[arch], d / layout.ADAPTER)
    assert (d / layout.CURVES).is_file()


def test_resume_continues_and_new_runs_never_overwrite(tiny_model, math_jsonl, tmp_path):
    cfg = _cfg(tiny_model, math_jsonl, tmp_path, "grpo", steps=2)
    d = Session(cfg, progress=False).run()
    adapter_bytes = (d / layout.ADAPTER / "adapter_model.safetensors").read_bytes()
    d2 = Session(cfg, progress=False).run()  # same run_name: a new folder, the finished one untouched
    assert d2 != d and d2.name == d.name + "-2"
    assert (d / layout.ADAPTER / "adapter_model.safetensors").read_bytes() == adapter_bytes
    # Resume from the last checkpoint with a longer budget (extending a run), through the CLI.
    r = cli("train", "--resume", str(d), "--max-steps", "4", "--no-progress", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == 4
    assert [m["step"] for m in store.read_metrics(d)] == [1, 2, 3, 4]
    # Resuming a run that already reached its end trains nothing (Hugging Face's Trainer would add a step each time)
    before = sorted(p.name for p in integrity.checkpoints(d))
    # config.yaml records the extended plan, so a bare resume (the crashed-run hint) continues the same one
    assert yaml.safe_load((d / layout.CONFIG).read_text())["training"]["max_steps"] == 4
    assert "config.yaml updated for this resume: training.max_steps: 2 -> 4" in (d / layout.LOG).read_text()
    for extra, planned in (([], 4), (["--max-steps", "4"], 4)):
        r = cli("train", "--resume", str(d), "--no-progress", *extra, timeout=600)
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            f"error: run '{d.name}' has already trained 4 steps (max_steps {planned}); pass --max-steps N (more than "
            "4) to train it further"]
    assert store.read_status(d)["status"] == layout.FINISHED and store.read_status(d)["step"] == 4
    assert sorted(p.name for p in integrity.checkpoints(d)) == before and len(store.read_metrics(d)) == 4


def test_sigterm_saves_checkpoint_and_marks_interrupted(tiny_model, math_jsonl, tmp_path):
    run = tmp_path / "stopme"
    cfg = _cfg(tiny_model, math_jsonl, tmp_path, "grpo", steps=500, extra=["save_steps=1000"])
    request = tmp_path / "request.yaml"
    request.write_text(cfg.to_yaml())
    p = subprocess.Popen([*cli_command(), "train", "--config", str(request),
                          "--run-dir", str(run), "--no-progress"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and len(store.read_metrics(run)) < 2:
        time.sleep(0.5)
    assert store.read_metrics(run), "training never logged a step"
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=300)
    assert p.returncode == 130  # stopped, not a success: what a shell reports for Ctrl-C
    st = store.read_status(run)
    assert st["status"] == layout.INTERRUPTED, st
    assert integrity.last_checkpoint(run) is not None and st["step"] < 500
    assert (run / layout.ADAPTER / "adapter_config.json").is_file()


def test_reward_that_raises_does_not_kill_training(tiny_model, math_jsonl, tmp_path):
    bad = tmp_path / "bad_reward.py"
    bad.write_text("def flaky(completions, **kw):\n"
                   "    return [1.0 if i % 2 else (_ for _ in ()).throw(ValueError('boom')) "
                   "for i, _ in enumerate(completions)]\n")
    cfg = _cfg(tiny_model, math_jsonl, tmp_path, "grpo", steps=2, extra=[f"reward.custom=['{bad}:flaky']"])
    d = Session(cfg, progress=False).run()
    assert store.read_status(d)["status"] == layout.FINISHED
    assert store.read_metrics(d)[-1]["reward_errors"] > 0


def test_lora_weights_stay_fp32_on_a_4bit_base_with_fp32_compute(tiny_model, math_jsonl, tmp_path):
    """TRL casts a quantized model's LoRA weights to bf16; on CPU that stalled learning (the demo lost its lift)."""
    import torch

    from app.data import build_splits
    from app.run.counts import RunCounts
    from app.train.planning.plan import make_plan
    from app.train.running.build import build_trainer, load_model, run_rewards

    cfg = _cfg(tiny_model, math_jsonl, tmp_path, "grpo")
    train, _, det = build_splits(cfg.data, 0)
    plan = make_plan(cfg, train, det)
    trainer = build_trainer(plan, load_model(plan), tmp_path / "r", RunCounts(), run_rewards(plan, True, RunCounts()))
    dtypes = {p.dtype for p in trainer.model.parameters() if p.requires_grad}
    assert dtypes == {torch.float32}


def test_export_copies_or_merges_and_never_overwrites(tiny_model, math_jsonl, tmp_path):
    from app.errors import UserError
    from app.export.bundle import export_run

    d = Session(_cfg(tiny_model, math_jsonl, tmp_path, "sft", steps=1), progress=False).run()
    copied = export_run(d, tmp_path / "copy").out
    assert (copied / "adapter_model.safetensors").read_bytes() == (
        d / layout.ADAPTER / "adapter_model.safetensors").read_bytes()
    before = {p.name: p.read_bytes() for p in copied.iterdir()}
    with pytest.raises(UserError, match=r"is not empty \(an earlier export\?\); add --force to replace"):
        export_run(d, tmp_path / "copy")
    assert {p.name: p.read_bytes() for p in copied.iterdir()} == before  # nothing overwritten
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".copy.")]  # no staging folder left
    merged = export_run(d, tmp_path / "merged", fmt="merged", local_only=True).out
    import json
    import os

    import torch
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(merged)  # a plain model: no adapter needed any more
    assert not any("lora" in n for n, _ in m.named_parameters())
    # 16-bit as the command says (bf16 by default, on a CPU too), or as asked
    assert json.loads((merged / "config.json").read_text())["dtype"] == "bfloat16"
    full = export_run(d, tmp_path / "merged32", fmt="merged", local_only=True, dtype="fp32").out
    assert AutoModelForCausalLM.from_pretrained(full, dtype="auto").dtype == torch.float32
    with pytest.raises(UserError, match="--dtype int8 is not one of bf16, fp16, fp32"):
        export_run(d, tmp_path / "bad", fmt="merged", dtype="int8")
    # every exported file has the umask's mode (the libraries' temporary files are 0600)
    umask = os.umask(0)
    os.umask(umask)
    for folder in (copied, merged):
        assert {p.stat().st_mode & 0o777 for p in folder.rglob("*") if p.is_file()} == {0o666 & ~umask}


def test_local_only_training_never_opens_a_network_connection(tiny_model, math_jsonl, tmp_path):
    """From an environment with no offline flags at all (conftest sets them for the test process, so this runs in a
    fresh one): `train --local-only` must set them before any hub library is imported, and open no socket."""
    probe = tmp_path / "probe.json"
    code = f"""
import json, socket, sys
attempts = []
def refuse(self, address):
    attempts.append(str(address))
    raise OSError("network disabled by test")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
from app.cli.main import main
sys.argv = ["qlora-app", "train", "--local-only", "--no-progress", "--method", "grpo", "--model", {str(tiny_model)!r},
            "--dataset", {str(math_jsonl)!r}, "--max-steps", "1", "--output-dir", {str(tmp_path / "runs")!r},
            "--set", "report_to=[trackio]", "--set", "per_device_train_batch_size=2",
            "--set", "gradient_accumulation_steps=1", "--set", "num_generations=2",
            "--set", "max_completion_length=8", "--set", "gradient_checkpointing=false"]
try:
    main()
finally:
    import datasets.config, huggingface_hub.constants, transformers.utils.hub
    json.dump({{"attempts": attempts, "hub": huggingface_hub.constants.HF_HUB_OFFLINE,
               "datasets": datasets.config.HF_HUB_OFFLINE,
               "transformers": transformers.utils.hub.is_offline_mode()}}, open({str(probe)!r}, "w"))
"""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HF_", "TRANSFORMERS_")) and k not in ("DO_NOT_TRACK", "GRADIO_ANALYTICS_ENABLED")}
    env["HF_HOME"] = str(tmp_path / "hf-home")  # an empty cache: nothing there to fall back on
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    seen = json.loads(probe.read_text())
    assert seen["attempts"] == []
    # the offline flags were in force when the libraries were imported (a broken apply_local_only fails here)
    assert seen["hub"] and seen["datasets"] and seen["transformers"], seen
    (d,) = (tmp_path / "runs").iterdir()
    assert store.read_status(d)["status"] == layout.FINISHED
    assert "step 1/1" in (d / layout.LOG).read_text()


def test_grpo_on_a_few_rows_trains_and_a_run_that_cannot_step_says_so(tiny_model, tmp_path, monkeypatch):
    """3 prompts: the auto generation batch (8 prompts) would give TRL no full batch, and the run 'finished' at step 0
    with an untrained adapter. Now it samples what the data holds and trains; a run that still steps nothing (TRL's
    own knobs set too big) is a one-line error, not 'finished'."""
    import json as _json

    from app.errors import UserError

    data = tmp_path / "three.jsonl"
    data.write_text("".join(_json.dumps({"question": f"What is {i}+1?", "answer": str(i + 1)}) + "\n"
                            for i in range(3)))
    cfg = _cfg(tiny_model, data, tmp_path, "grpo", steps=2, extra=["gradient_accumulation_steps=2"])
    d = Session(cfg, progress=False).run()
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == 2
    assert "the training data has 3 prompts: sampling 2 at a time" in (d / layout.LOG).read_text()
    stuck = _cfg(tiny_model, data, tmp_path, "grpo", steps=2,
                 extra=["gradient_accumulation_steps=2", "training.extra_args={steps_per_generation: 8}"])
    with pytest.raises(UserError, match="no training step ran: the 3 training rows gave no full batch"):
        Session(stuck, progress=False).run()
