"""The config's keys as a user types them: dotted names, ``--set key=value`` parsing (a bare key means the method's
own section), help text per key for --explain, the differences between two configs, and the one-line messages for
bad keys and values (with a suggestion for a mistyped one)."""

from __future__ import annotations

import difflib

import yaml
from pydantic import BaseModel, ValidationError

from app.config.fields import get_key, set_key
from app.config.methods import METHODS, named
from app.config.schema import AppConfig
from app.errors import UserError


def format_validation_error(err: ValidationError) -> str:
    """One line per problem, each naming the dotted key and what to do."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"])
        if e["type"] == "extra_forbidden":
            lines.append(unknown_key_message(loc))
            continue
        msg = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        got_s = f" (got {got!r})" if got is not None and not isinstance(got, dict) else ""
        lines.append(f"config {loc}: {msg}{got_s}" if loc else f"config: {msg}")
    return "; ".join(lines)


def all_leaf_keys(model: type[BaseModel] = AppConfig, prefix: str = "") -> list[str]:
    """Dotted names of every settable key, e.g. 'training.save_steps'."""
    keys = []
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            keys += all_leaf_keys(ann, f"{prefix}{name}.")
        else:
            keys.append(f"{prefix}{name}")
    return keys


def field_help(model: type[BaseModel] = AppConfig, prefix: str = "") -> dict[str, str]:
    """Dotted key -> its description (the text `--explain` and the UI's tooltips show)."""
    out = {}
    for name, field in model.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out.update(field_help(ann, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = field.description or ""
    return out


def value_rows(cfg: AppConfig) -> list[tuple[str, str, str]]:
    """(dotted key, value as YAML, description) for every key of a config, in config order."""
    data = cfg.model_dump(mode="json")
    rows = []
    for key, text in field_help().items():
        v = get_key(data, key)
        shown = yaml.safe_dump(v, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()
        rows.append((key, shown, text))
    return rows


def differences(old: AppConfig, new: AppConfig) -> list[tuple[str, str, str]]:
    """(key, old value, new value) as YAML for every key whose value differs, in config order."""
    before = {k: v for k, v, _ in value_rows(old)}
    return [(k, before.get(k), v) for k, v, _ in value_rows(new) if before.get(k) != v]


def changed_keys(old: AppConfig, new: AppConfig) -> list[str]:
    """'key: old -> new' for every key whose value differs, in config order."""
    return [f"{k}: {was} -> {now}" for k, was, now in differences(old, new)]


# What people type for a key from other tools' names (Hugging Face's, LLaMA-Factory's, Axolotl's): the leaf it means.
ALIASES = {"lr": "learning_rate", "rank": "r", "lora_r": "r", "lora_alpha": "alpha", "lora_rank": "r",
           "epochs": "num_train_epochs", "num_epochs": "num_train_epochs", "steps": "max_steps",
           "batch_size": "per_device_train_batch_size", "micro_batch_size": "per_device_train_batch_size",
           "bs": "per_device_train_batch_size", "grad_accum": "gradient_accumulation_steps",
           "gradient_accumulation": "gradient_accumulation_steps", "cutoff_len": "max_length",
           "sequence_len": "max_length", "max_seq_length": "max_length", "model": "name_or_path",
           "model_name": "name_or_path", "base_model": "name_or_path", "system": "system_prompt",
           "generations": "num_generations", "kl": "beta", "warmup": "warmup_steps"}


def unknown_key_message(dotted: str) -> str:
    """One line for a key that is no config key, with the key it most likely means: in the section typed first
    ('training.lr' -> 'training.learning_rate'), then anywhere; a whole key before a bare section name."""
    keys = all_leaf_keys()
    section, _, leaf = dotted.rpartition(".")
    by_leaf: dict[str, list[str]] = {}
    for k in keys:
        by_leaf.setdefault(k.rsplit(".", 1)[-1], []).append(k)

    def in_section(cands: list[str]) -> list[str]:
        return [k for k in cands if k.startswith(section + ".")] or cands

    close = in_section(by_leaf.get(ALIASES.get(leaf.lower(), ""), []))
    if not close:
        same = [k for k in keys if k.startswith(section + ".")] if section else []
        close = difflib.get_close_matches(dotted, same or keys, n=1, cutoff=0.5)
    if not close:  # compare on the last part too: 'lora.rank' -> 'lora.r'
        hit = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.5)
        close = in_section(by_leaf[hit[0]]) if hit else []
    if not close:
        close = difflib.get_close_matches(dotted, list(AppConfig.model_fields), n=1, cutoff=0.5)
    hint = f"; did you mean '{close[0]}'?" if close else "; run 'qlora-app train --dry-run --explain' to see all keys"
    return f"unknown config key '{dotted}'{hint}"


def resolve_set_key(key: str, method: str | None = None) -> str:
    """Turn a bare leaf name ('save_steps') into its dotted key; dotted keys pass through if they exist. A name
    several sections have ('beta') is the run's ``method``'s own."""
    keys = all_leaf_keys()
    if key in keys or key in AppConfig.model_fields:
        return key
    if key.startswith(("reward.weights.", "training.extra_args.")):
        return key
    if "." not in key:
        matches = [k for k in keys if k.rsplit(".", 1)[-1] == key]
        # The section a bare key of a method's own means: `--set beta=0.04` is grpo.beta in a GRPO run, dpo.beta in
        # a DPO one; a shadowed section's keys (distillation's take TRL's names, GRPO's) only in its own run
        mine = named(method)
        section = mine.section if mine else None
        if len(matches) > 1:
            shadowed = {m.section for m in METHODS.values() if m.shadowed} - {section}
            matches = [k for k in matches if k.split(".")[0] not in shadowed]
        if len(matches) == 1:
            return matches[0]
        own = [k for k in matches if k.split(".")[0] == section]
        if len(own) == 1:
            return own[0]
        if len(matches) > 1:
            raise UserError(f"--set key '{key}' is ambiguous ({', '.join(matches)}); use the dotted form")
    raise UserError(unknown_key_message(key))


def parse_set(items: list[str], method: str | None = None) -> dict:
    """['training.save_steps=5', 'r=8'] -> nested dict. Values are parsed as YAML scalars (5 -> int). ``method``:
    the run's, whose section a bare key several sections share belongs to."""
    out: dict = {}
    for item in items:
        if "=" not in item:
            raise UserError(f"--set '{item}' needs the form key=value, e.g. --set training.save_steps=5")
        key, raw = item.split("=", 1)
        dotted = resolve_set_key(key.strip(), method)
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        if isinstance(value, str):  # YAML 1.1 reads "1e-4" as a string; users mean a number
            try:
                value = float(value)
            except ValueError:
                pass
        set_key(out, dotted, value)
    return out
