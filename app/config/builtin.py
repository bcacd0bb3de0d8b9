"""Where the tiny built-in base model lives: shipped in the package (app/assets/arith-base) or, for an install
without it, built once into the user cache by app.demo.recipe. The name ``arith-base`` is also what a config's
``model.name_or_path`` may say to mean it. Standard library only: app.config reads this for ``--help``."""

from __future__ import annotations

import os
from pathlib import Path

BUILTIN_MODEL = "arith-base"


def shipped_dir() -> Path:
    return Path(__file__).resolve().parents[1] / "assets" / BUILTIN_MODEL


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "qlora-app" / BUILTIN_MODEL


def builtin_model_path() -> Path:
    """The shipped model when the package has it, else its place in the user cache (which may not exist yet)."""
    shipped = shipped_dir()
    return shipped if (shipped / "model.safetensors").is_file() else cache_dir()
