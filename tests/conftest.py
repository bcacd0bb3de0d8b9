"""Test setup: nothing here may touch the network, and tiny models are built once per session."""

import os
import subprocess
import sys
from pathlib import Path

# Before anything imports huggingface_hub / transformers / datasets: they read these at import time.
for k, v in {
    "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1", "GRADIO_ANALYTICS_ENABLED": "False", "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled",
}.items():
    os.environ[k] = v

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402

ARCHS = ("llama", "qwen2", "qwen3")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, Path]:
    """{'llama': dir, 'qwen2': dir, 'qwen3': dir}: random tiny models + a locally trained tokenizer."""
    import tiny

    root = tmp_path_factory.mktemp("tiny-models")
    tiny.build_tokenizer(root / "tok")
    return {a: tiny.build_model(a, root / a, root / "tok") for a in ARCHS}


@pytest.fixture(scope="session")
def tiny_moe(tmp_path_factory) -> dict[str, Path]:
    """{family: dir} of tiny random mixture-of-experts models (tests/tiny.py MOE_FAMILIES), ~0.2 s each."""
    import tiny

    root = tmp_path_factory.mktemp("tiny-moe")
    tiny.build_tokenizer(root / "tok")
    return {f: tiny.build_moe(f, root / f, root / "tok") for f in tiny.MOE_FAMILIES}


@pytest.fixture(scope="session")
def tiny_model(tiny_models) -> Path:
    return tiny_models["qwen3"]


@pytest.fixture(scope="session")
def quick_demo(tmp_path_factory):
    """(finished process, its output folder) of `qlora-app demo --quick --seed 7`: a real GRPO run that lifts the
    held-out accuracy, made once for the tests that read a trained run (test_demo checks the demo itself)."""
    out = tmp_path_factory.mktemp("quick-demo")
    r = subprocess.run([sys.executable, "-m", "app.cli", "demo", "--quick", "--output-dir", str(out), "--seed", "7"],
                       capture_output=True, text=True, timeout=900)
    return r, out


@pytest.fixture()
def math_jsonl(tmp_path) -> Path:
    """A small GSM8K-shaped local dataset."""
    import json

    p = tmp_path / "math.jsonl"
    with p.open("w") as f:
        for i in range(40):
            a, b = i % 9 + 1, i % 7 + 2
            f.write(json.dumps({"question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
                                "answer": f"He has {a} + {b} = {a + b} apples.\n#### {a + b}"}) + "\n")
    return p


@pytest.fixture()
def small_disk(tmp_path):
    """A 24 MiB tmpfs: a real ENOSPC. Needs root (CI and this project's machines are); skipped elsewhere."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (not root?)")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


def plan_for(cfg, gpu_gb: float | None = None, packing: bool | None = None):
    """A run plan made the way the product makes one (app.train.plan.make_plan, without data or weights), for this
    machine or for a planned CUDA card of ``gpu_gb`` GB (train --dry-run --gpu-memory). ``packing``: SFT's one
    decision taken on the loaded model (decide_packing), given here instead."""
    from dataclasses import replace

    from app.train.plan import decide_machine, make_plan

    plan = make_plan(cfg, offline=True, machine=decide_machine(cfg, card_gb=gpu_gb))
    return replace(plan, packing=packing) if plan.cfg.method == "sft" else plan


@pytest.fixture(scope="session")
def tiny_vlm(tmp_path_factory) -> Path:
    """A random tiny Gemma 3 vision-language model with its processor (PIL, no torchvision): the image demo's base
    before its pretraining (app.demo.build_vision_base.tiny_vision_model), built in about a second."""
    from app.demo.build_vision_base import tiny_vision_model

    return tiny_vision_model(tmp_path_factory.mktemp("tiny-vlm") / "gemma3")


@pytest.fixture(scope="session")
def images_demo(tmp_path_factory):
    """(finished process, its output folder) of `qlora-app demo --images --quick --seed 7`: a real QLoRA SFT run of
    a vision-language model on images, made once for the tests that read it (chat, export, the demo itself)."""
    out = tmp_path_factory.mktemp("images-demo")
    r = subprocess.run([sys.executable, "-m", "app.cli", "demo", "--images", "--quick", "--output-dir", str(out),
                        "--seed", "7"], capture_output=True, text=True, timeout=900)
    return r, out
