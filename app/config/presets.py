"""Presets: partial config YAMLs in the repository's presets/ folder.

``app/presets_yaml`` is a link to that folder, so the same files ship inside the wheel (package data) and a
non-editable ``pip install .`` finds them too.

Each file starts with a comment line showing the exact command that uses it, then a '# ' description line.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path

from app.config.build import load_yaml_file, validate
from app.errors import UserError


def presets_dir() -> Path:
    env = os.environ.get("QLORA_APP_PRESETS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1] / "presets_yaml"


def _names() -> list[str]:
    d = presets_dir()
    return sorted(p.stem for p in d.glob("*.yaml")) if d.is_dir() else []


def preset_path(name: str) -> Path:
    p = Path(name)
    if p.suffix in (".yaml", ".yml") and p.is_file():
        return p
    cand = presets_dir() / f"{name}.yaml"
    if cand.is_file():
        return cand
    names = _names()
    hint = difflib.get_close_matches(name, names, n=1)
    raise UserError(
        f"unknown preset '{name}'" + (f"; did you mean '{hint[0]}'?" if hint else "")
        + f" (available: {', '.join(names)}; or pass a YAML file path)"
    )


def load_preset(name: str) -> dict:
    return load_yaml_file(preset_path(name))


def _description(path: Path) -> str:
    """The description's first sentence, whole: the comment lines after the command line, joined, up to the first
    '. ' (a description wraps over several lines; its first line alone ends mid-sentence)."""
    comments = []
    for ln in path.read_text().splitlines()[1:]:
        if not ln.startswith("#"):
            break
        comments.append(ln.lstrip("#").strip())
    text = " ".join(c for c in comments if c)
    end = re.search(r"[.!?](\s|$)", text)
    return text[:end.start() + 1] if end else text


def list_presets() -> list[dict]:
    out = []
    for name in _names():
        path = presets_dir() / f"{name}.yaml"
        cfg = validate(load_yaml_file(path))
        out.append({
            "name": name,
            "method": cfg.method,
            "model": cfg.model.name_or_path or "(default)",
            "dataset": cfg.data.label or "",
            "description": _description(path),
        })
    return out
