"""What every command shares at run time: the offline environment, quieter libraries, process checks and the
device choice that ``runtime.device`` drives.

Standard library only at module level: the CLI calls ``apply_local_only`` before anything imports
huggingface_hub, transformers or datasets (they read the offline flags at import time).
"""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

from app.errors import UserError

# Everything that keeps the HF stack, Gradio and friends off the network and from reporting usage.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "GRADIO_ANALYTICS_ENABLED": "False",
    "DO_NOT_TRACK": "1",
}


def apply_local_only(enabled: bool) -> None:
    """Must run before transformers / datasets / huggingface_hub are imported: they read these at import time."""
    if enabled:
        os.environ.update(OFFLINE_ENV)


def quiet_library_noise() -> None:
    """Keep the terminal readable: our own progress bars replace the libraries' (loading shards, generating
    splits), and bitsandbytes' warning that an optional hub 'kernels' package is absent is not actionable (its
    fallback CPU kernel is what we want offline). Must run before those libraries are imported."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")

    class _Drop(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "kernels" not in record.getMessage()

    for name in ("bitsandbytes", "bitsandbytes.backends.cpu.ops", ""):
        logging.getLogger(name).addFilter(_Drop())
    # datasets logs its own line for a file it cannot parse, before our one-line error says which line and why.
    logging.getLogger("datasets.packaged_modules.json.json").setLevel(logging.CRITICAL)
    # The libraries' deprecation notices (transformers' is_gradient_checkpointing, TRL's use of renamed arguments)
    # are addressed to their callers' authors, not to someone running `qlora-app compare`; they broke the progress
    # bar and read like errors. Our own code raises neither category.
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)


def pid_alive(pid) -> bool:
    """Whether a process with this pid exists (a status.json's writer, a UI's job)."""
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
        return True
    except PermissionError:  # it exists, owned by someone else
        return True
    except (OSError, TypeError, ValueError):
        return False


def hub_offline() -> bool:
    """Whether the hub is off limits for this process (HF_HUB_OFFLINE, as huggingface_hub reads it)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def child_env() -> dict[str, str]:
    """The environment for a `python -m app.cli` child (the UI's training run, torchrun's workers): this process's,
    with this `app` package first on PYTHONPATH, so the child imports the same code from any working folder."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first), from /proc; empty where /proc is not there."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo += children.get(p, [])
    return out


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here, without importing it (optional libraries: unsloth, vllm, ...)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def use_cuda(setting: str, cuda_available: bool) -> bool:
    """runtime.device -> whether this run uses the GPU. 'auto' takes one when there is one; 'cpu' stays on the CPU
    even on a GPU machine; 'cuda' without a GPU is a user error, not a silent CPU run."""
    if setting == "cpu":
        return False
    if setting == "cuda" and not cuda_available:
        raise UserError("runtime.device=cuda but no CUDA GPU is visible (torch.cuda.is_available() is False); "
                        "use runtime.device=auto or cpu, or install the CUDA build of torch")
    return cuda_available


def device_facts(setting: str = "auto") -> dict:
    """What the chosen device can do: {cuda, bf16, gpu, vram_gb}. With runtime.device=cpu the GPU is not used
    (nor queried), so every decision downstream (dtype, optimizer, placement) takes the CPU branch."""
    import torch

    cuda = use_cuda(setting, torch.cuda.is_available())
    return {
        "cuda": cuda,
        "bf16": bool(cuda and torch.cuda.is_bf16_supported()),
        "gpu": torch.cuda.get_device_name(0) if cuda else None,
        "vram_gb": (torch.cuda.get_device_properties(0).total_memory / 2**30) if cuda else None,
    }
