"""The offline demo's recipe: presets/demo-grpo.yaml (the one home of its hyperparameters and of why they differ
from the GPU defaults) and where the shipped base model lives.

``qlora-app demo`` runs one real GRPO run through the normal engine on the built-in ``arith`` data, straight from
the tiny shipped base model (app.config.builtin) with the shaped reward, then base vs adapter,
greedy, on the whole held-out test split. Measured numbers and timings over 5 seeds are in docs/performance.md
(``python bench/run.py --only demo``).
"""

from __future__ import annotations

import os
from pathlib import Path

from app.config.builtin import BUILTIN_MODEL, TEACHER_MODEL, TOOLS_MODEL, VISION_MODEL, builtin_model_path, cache_dir
from app.config.presets import load_preset
from app.demo.build_base import build
from app.demo.build_teacher import build as build_teacher
from app.demo.build_tools_base import build as build_tools_base
from app.demo.build_vision_base import build as build_vision_base

BUILDERS = {BUILTIN_MODEL: build, TOOLS_MODEL: build_tools_base, VISION_MODEL: build_vision_base,
            TEACHER_MODEL: build_teacher}

EVAL_SIZE = 200  # held-out problems scored greedily for base vs adapter (the test split, all of it)


def grpo_preset(model_path: str | Path | None = None) -> dict:
    """The demo's GRPO run as an AppConfig-shaped dict (pass to ``app.config.build.build_config(preset=...)``)."""
    d = load_preset("demo-grpo")
    d["model"]["name_or_path"] = str(model_path or base_model_path())
    return d


def base_model_path(build_if_missing: bool = True, name: str = BUILTIN_MODEL) -> Path:
    """The shipped tiny base model ``name``; if the package was installed without it, build it once into the user
    cache.

    Building takes ~3 (arith-base), ~5 (arith-tools-base), ~0.5 (shapes-vlm-base) or ~8 (arith-teacher) minutes on
    2 CPU cores. It is written to a temporary
    sibling and renamed, so an interrupted build never leaves a half-written model that a later run would trust."""
    found = builtin_model_path(name)
    if (found / "model.safetensors").is_file() or not build_if_missing:
        return found
    if name == TEACHER_MODEL:  # the teacher is trained on the student's tokenizer
        base_model_path(name=BUILTIN_MODEL)
    cached = cache_dir(name)
    tmp = cached.with_name(cached.name + f".tmp-{os.getpid()}")
    BUILDERS[name](tmp, log_every=0)
    tmp.rename(cached)
    return cached


def tools_preset(model_path: str | Path | None = None) -> dict:
    """The tools demo's GRPO run (presets/demo-tools.yaml) as an AppConfig-shaped dict."""
    d = load_preset("demo-tools")
    d["model"]["name_or_path"] = str(model_path or base_model_path(name=TOOLS_MODEL))
    return d


def images_preset(model_path: str | Path | None = None, grpo: bool = False) -> dict:
    """The image demo's SFT run (presets/demo-images.yaml; ``grpo``: its GRPO run, demo-images-grpo.yaml) as an
    AppConfig-shaped dict."""
    d = load_preset("demo-images-grpo" if grpo else "demo-images")
    d["model"]["name_or_path"] = str(model_path or base_model_path(name=VISION_MODEL))
    return d
