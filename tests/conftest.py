"""Test setup: nothing here may touch the network, and tiny models are built once per session."""

import json
import os
import shutil
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

# What a qlora-app process quiets at its entry (the libraries' lines a user cannot act on), made once for this one:
# a command run here (cli_here) says what it says in a process of its own.
from app.host.process import quiet_library_noise  # noqa: E402

quiet_library_noise()

import pytest  # noqa: E402

ARCHS = ("llama", "qwen2", "qwen3")
E2E = Path(__file__).parent / "e2e"


@pytest.hookimpl(tryfirst=True)  # before -m deselects: the marker it adds is what `-m "not e2e"` reads
def pytest_collection_modifyitems(items):
    """The e2e tier: a slow test in tests/e2e/ (a user's whole path: the family matrix, the demo-sized runs, faults
    survived) is `e2e` too, beside the tests elsewhere marked so by hand (a demo of their own); docs/testing.md."""
    for item in items:
        if item.get_closest_marker("slow") and E2E in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)


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


def shared_dir(tmp_path_factory) -> Path:
    """A folder every worker of this test session sees (pytest-xdist's workers share their base temp's parent;
    without xdist, the base temp itself)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def built_once(tmp_path_factory, name: str, build) -> Path:
    """The folder ``name``, made by ``build(folder)`` once per test session whichever worker asks first (in
    ``shared_dir``); the others wait on its lock and read it. Readers copy before they change anything in it. A
    build that raised is made again by the next asker."""
    from filelock import FileLock

    root = shared_dir(tmp_path_factory)
    out = root / f"once-{name}"
    with FileLock(str(root / f"once-{name}.lock")):
        if not (out / ".built").is_file():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            build(out)
            (out / ".built").touch()
    return out


def cli(*args, cwd=None, timeout: float = 600, env: dict | None = None, stdin: str | None = None,
        script: str | None = None) -> subprocess.CompletedProcess:
    """`qlora-app ARGS` (``python -m app.cli``; or a script of the repository) in a process of its own: for a test whose
    subject is the process (a real run's output, exit code on a signal, import order, what a user's terminal shows).
    A one-line refusal is checked in this process instead: ``cli_here``. ``env``: added to this process's environment;
    a variable set to None is left out (a process without HF_HUB_OFFLINE, say)."""
    cmd = [sys.executable, script] if script else cli_command()
    # this checkout's app, wherever the command runs from (an installed copy could be another one)
    root = str(Path(__file__).resolve().parent.parent)
    here = {"PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
    merged = {k: v for k, v in {**os.environ, **here, **(env or {})}.items() if v is not None}
    return subprocess.run([*cmd, *map(str, args)], capture_output=True, text=True, cwd=cwd, timeout=timeout,
                          input=stdin, env=merged)


def free_port() -> int:
    """A TCP port free on loopback now (for a server a test starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cli_command(*args) -> list[str]:
    """The command line of `qlora-app ARGS` for a test that needs the process itself (Popen: a signal, a kill, a
    server it stops), the one spelling of it beside ``cli``."""
    return [sys.executable, "-m", "app.cli", *map(str, args)]


def cli_here(*args, cwd=None) -> subprocess.CompletedProcess:
    """The same command in this process through Typer's runner (the way ``main`` runs it, less the process-wide
    settings it makes once at entry): a refusal's one line and exit code without a new interpreter's imports.
    Returns what ``cli`` returns."""
    from typer.testing import CliRunner

    from app.cli.main import run_args

    here = Path.cwd()
    code = 0
    with CliRunner().isolation() as (out, err, _):
        try:
            if cwd is not None:
                os.chdir(cwd)
            run_args([str(a) for a in args])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        finally:
            os.chdir(here)
            sys.stdout.flush()
            sys.stderr.flush()
        stdout, stderr = out.getvalue().decode(), err.getvalue().decode()
    return subprocess.CompletedProcess(["qlora-app", *map(str, args)], code, stdout, stderr)


def tiny_sets(method: str, proof_rows: int = 0, eval_every: int = 0) -> list[str]:
    """--set values of a tiny training run in a test: CPU, no gradient checkpointing, short completions, a step a
    line, the proof and the held-out points off (each a generation pass a test pays for) unless it asks for them,
    batch sizes that make one optimizer step a batch (GRPO: 4 completions of one prompt)."""
    sizes = (["per_device_train_batch_size=4", "num_generations=4"] if method == "grpo"
             else ["per_device_train_batch_size=2"])
    return ["gradient_checkpointing=false", "max_completion_length=12", "logging_steps=1", "runtime.device=cpu",
            f"training.proof_rows={proof_rows}", f"training.eval_every={eval_every}",
            "gradient_accumulation_steps=1", *sizes]


def _demo(tmp_path_factory, name: str, *args: str):
    """(finished process, its output folder) of `qlora-app demo ARGS`, run once per test session."""
    def build(folder: Path) -> None:
        r = cli("demo", *args, "--output-dir", folder / "out", timeout=900)
        (folder / "process.json").write_text(json.dumps({"returncode": r.returncode, "stdout": r.stdout,
                                                         "stderr": r.stderr}))

    folder = built_once(tmp_path_factory, name, build)
    done = json.loads((folder / "process.json").read_text())
    return subprocess.CompletedProcess(["qlora-app", "demo", *args], **done), folder / "out"


@pytest.fixture(scope="session")
def quick_demo(tmp_path_factory):
    """(finished process, its output folder) of `qlora-app demo --quick --seed 7`: a real GRPO run that lifts the
    held-out accuracy, made once per test session (all workers) for the tests that read a trained run; they read
    it, never write into it (tests/demo/test_run.py checks the demo itself)."""
    return _demo(tmp_path_factory, "quick-demo", "--quick", "--seed", "7")


@pytest.fixture(scope="session")
def teacher_ggufs(tmp_path_factory) -> dict[str, Path]:
    """The distillation demo's teacher (arith-teacher) as GGUF files, {"f16": ..., "q4_k_m": ...}, written once a
    test session (app/demo/build_teacher.teacher_gguf: llama.cpp's converter and quantizer)."""
    pytest.importorskip("llama_cpp")
    from app.config.builtin import TEACHER_MODEL
    from app.demo.build_teacher import teacher_gguf
    from app.demo.recipe import base_model_path

    def build(folder: Path) -> None:
        src = base_model_path(name=TEACHER_MODEL)
        for outtype in ("f16", "q4_k_m"):
            teacher_gguf(src, outtype, out=folder / f"arith-teacher-{outtype}.gguf")

    folder = built_once(tmp_path_factory, "teacher-ggufs", build)
    return {t: folder / f"arith-teacher-{t}.gguf" for t in ("f16", "q4_k_m")}


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
    """A run plan made the way the product makes one (app.train.planning.plan.make_plan, without data or weights), for
    this machine or for a planned CUDA card of ``gpu_gb`` GB (train --dry-run --gpu-memory). ``packing``: SFT's one
    decision taken on the loaded model (decide_packing), given here instead."""
    from dataclasses import replace

    from app.train.planning.plan import decide_machine, make_plan

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
    a vision-language model on images, made once per test session for the tests that read it (chat, export, serve,
    the demo itself)."""
    return _demo(tmp_path_factory, "images-demo", "--images", "--quick", "--seed", "7")
