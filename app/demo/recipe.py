"""The offline demo's recipe: the two phases as presets (presets/demo-sft.yaml, presets/demo-grpo.yaml, the one
home of their hyperparameters and of why they differ from the GPU defaults) and where the shipped base model lives.

``qlora-app demo`` runs two real training runs through the normal engine on the built-in ``arith`` data and the
tiny shipped base model (the built-in model name ``arith-base``): an SFT warm-up that teaches the 'Final answer: N'
format, then GRPO (continuing that adapter) with the shaped reward; then base vs adapter, greedy, on the held-out
test split. Measured numbers and timings are in docs/performance.md (``python bench/run.py --only demo``).
Standard library and app.config only (pydantic, yaml).
"""

from __future__ import annotations

import os
from pathlib import Path

from app.config import DEFAULT_GRPO_SYSTEM_PROMPT

ASSET_NAME = "arith-base"  # also the built-in model name a config may use (app.config.resolve maps it here)
EVAL_SIZE = 200  # held-out problems scored greedily for base vs adapter (the test split, all of it)
EVAL_MAX_NEW_TOKENS = 48  # answers are ~25 tokens; anything longer is already wrong


def _preset(name: str) -> dict:
    from app.presets import load_preset

    return load_preset(name)


def sft_preset(model_path: str | Path | None = None) -> dict:
    """The warm-up run as an AppConfig-shaped dict (pass to ``app.config.build_config(preset=...)``)."""
    d = _preset("demo-sft")
    d["model"]["name_or_path"] = str(model_path or base_model_path())
    # SFT has no default system prompt; the warm-up must show the one GRPO will use, or the format it teaches
    # would be tied to a prompt GRPO never shows.
    d["data"]["system_prompt"] = DEFAULT_GRPO_SYSTEM_PROMPT
    return d


def grpo_preset(init_from: str | Path, model_path: str | Path | None = None) -> dict:
    """The GRPO run, continuing the adapter saved by the warm-up run at ``init_from``."""
    d = _preset("demo-grpo")
    d["model"]["name_or_path"] = str(model_path or base_model_path())
    d["lora"]["init_from"] = str(init_from)
    return d


def assets_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "assets" / ASSET_NAME


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "qlora-app" / ASSET_NAME


def base_model_path(build_if_missing: bool = True) -> Path:
    """The shipped tiny base model; if the package was installed without it, build it once into the user cache.

    Building takes ~3 minutes on 2 CPU cores. It is written to a temporary sibling and renamed, so an interrupted
    build never leaves a half-written model that a later run would trust."""
    shipped = assets_dir()
    if (shipped / "model.safetensors").is_file():
        return shipped
    cached = cache_dir()
    if (cached / "model.safetensors").is_file() or not build_if_missing:
        return cached
    from app.demo.build_base import build

    tmp = cached.with_name(cached.name + f".tmp-{os.getpid()}")
    build(tmp, log_every=0)
    tmp.rename(cached)
    return cached
