"""`qlora-app doctor`: what this machine can do, and what to change if something is missing."""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil


def _default_fast_paths() -> str:
    """What `qlora-app train --dataset gsm8k` would pick here: sampler, vLLM, kernels, and its memory estimate."""
    from app.config import build_config, resolve
    from app.errors import UserError
    from app.train.preflight import describe, preflight

    try:
        return describe(preflight(resolve(build_config({"data": {"dataset": "gsm8k"}})))).replace("\n", "; ")
    except UserError as e:
        return f"the default run would be refused here: {e}"


def report(console) -> None:
    from rich.table import Table

    from app.models import pick_backend, pick_compute_dtype
    from app.runtime import device_facts

    t = Table(title="qlora-app doctor")
    t.add_column("check")
    t.add_column("value")
    for pkg in ("torch", "transformers", "trl", "peft", "bitsandbytes", "datasets", "accelerate", "gradio",
                "math-verify", "trackio"):
        try:
            t.add_row(pkg, md.version(pkg))
        except md.PackageNotFoundError:
            t.add_row(pkg, "[red]not installed[/]")
    f = device_facts()
    t.add_row("GPU", f["gpu"] or "none (CPU: works, slowly; 4-bit via bitsandbytes CPU kernels)")
    if f["vram_gb"]:
        t.add_row("VRAM", f"{f['vram_gb']:.1f} GB")
    t.add_row("compute dtype (auto)", pick_compute_dtype("auto", f["cuda"], f["bf16"]))
    try:
        md.version("unsloth")
        unsloth = True
    except md.PackageNotFoundError:
        unsloth = False
    t.add_row("backend (auto)", pick_backend("auto", f["cuda"], unsloth))
    for pkg, why in (("flash-attn", "packed SFT without masks"), ("vllm", "GRPO sampling in colocate mode"),
                     ("liger-kernel", "fused kernels")):
        try:
            t.add_row(pkg, f"{md.version(pkg)} ({why})")
        except md.PackageNotFoundError:
            t.add_row(pkg, f"not installed (optional, CUDA: {why})")
    t.add_row("GRPO fast paths (auto)", _default_fast_paths())
    t.add_row("HF_HUB_OFFLINE", os.environ.get("HF_HUB_OFFLINE", "unset"))
    t.add_row("chromium (UI tests)", shutil.which("chromium") or "not found (apt-get install chromium)")
    console.print(t)
