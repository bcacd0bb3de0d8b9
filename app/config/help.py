"""The help a user reads for each key (`--dry-run --explain`, the UI's tooltips): the schema's description, and for
a key whose auto value differs by method, each method's value, computed by ``resolve`` itself so it cannot drift
from what a run gets."""

from __future__ import annotations

from functools import lru_cache

from app.config.build import validate
from app.config.fields import get_key
from app.config.keys import field_help, value_rows
from app.config.resolve import resolve
from app.config.methods import METHODS

# The keys "auto" fills differently per method (app/config/resolve.py), with what depends on the data for SFT.
BY_METHOD = {
    "training.learning_rate": None,
    "lora.r": "sft: 16-256 by the number of rows",
    "lora.alpha": "sft: max(16, r/4)",
    "training.per_device_train_batch_size": "sft: 1 packed row, 4 unpacked",
    "training.gradient_accumulation_steps": None,
}


@lru_cache(maxsize=1)
def method_defaults() -> dict[str, dict[str, object]]:
    """For each key of BY_METHOD, each method's auto value as ``resolve`` fills it (SFT with no row count)."""
    resolved = {m: resolve(validate({"method": m})) for m in METHODS}
    return {key: {m: get_key(cfg, key) for m, cfg in resolved.items()} for key in BY_METHOD}


def key_help() -> dict[str, str]:
    """Dotted key -> the text `--explain` and the UI show."""
    out = field_help()
    for key, values in method_defaults().items():
        line = ", ".join(f"{m} {v:g}" if isinstance(v, float) else f"{m} {v}" for m, v in values.items()
                         if not (BY_METHOD[key] and BY_METHOD[key].startswith(m + ":")))
        out[key] = f"{out[key]}; auto by method: {line}" + (f" ({BY_METHOD[key]})" if BY_METHOD[key] else "")
    return out


def explain_rows(cfg) -> list[tuple[str, str, str]]:
    """(key, value as YAML, help) for every key of ``cfg``, in config order: `--dry-run --explain`."""
    help_ = key_help()
    return [(k, v, help_.get(k, text)) for k, v, text in value_rows(cfg)]
