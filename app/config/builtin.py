"""Where the tiny built-in base models live: shipped in the package (app/assets/<name>) or, for an install without
them, built once into the user cache by app.demo.recipe. Their names are also what a config's
``model.name_or_path`` may say to mean them: ``arith-base`` (the demo's) and ``arith-tools-base`` (the tools demo's:
Qwen2.5's tool-call format, app.demo.build_tools_base), ``shapes-vlm-base`` (the image demo's: a Gemma 3 shaped
vision-language model, app.demo.build_vision_base) and ``arith-teacher`` (the distillation demo's teacher: larger
than arith-base, on its tokenizer, and right far more often, app.demo.build_teacher). Standard library only:
app.config reads this for ``--help``.
"""

from __future__ import annotations

import os
from pathlib import Path

BUILTIN_MODEL = "arith-base"
TOOLS_MODEL = "arith-tools-base"
VISION_MODEL = "shapes-vlm-base"
TEACHER_MODEL = "arith-teacher"
BUILTIN_MODELS = (BUILTIN_MODEL, TOOLS_MODEL, VISION_MODEL, TEACHER_MODEL)


def shipped_dir(name: str = BUILTIN_MODEL) -> Path:
    return Path(__file__).resolve().parents[1] / "assets" / name


def cache_dir(name: str = BUILTIN_MODEL) -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "qlora-app" / name


def builtin_model_path(name: str = BUILTIN_MODEL) -> Path:
    """The shipped model when the package has it, else its place in the user cache (which may not exist yet)."""
    shipped = shipped_dir(name)
    return shipped if (shipped / "model.safetensors").is_file() else cache_dir(name)
