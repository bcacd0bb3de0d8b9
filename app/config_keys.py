"""The config's keys as a user types them: dotted names, `--set key=value` parsing, help text per key, and the
one-line messages for bad keys and values. Split from app/config.py (the schema and its resolution), which calls
in here lazily; only pydantic and yaml at module level (the CLI loads this for `--help`).
"""

from __future__ import annotations

import difflib

import yaml
from pydantic import BaseModel, ValidationError

from app.config_schema import AppConfig
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


def explain_rows(cfg: AppConfig) -> list[tuple[str, str, str]]:
    """(dotted key, value as YAML, description) for every key of a config, in config order."""
    data = cfg.model_dump(mode="json")
    rows = []
    for key, text in field_help().items():
        v = data
        for part in key.split("."):
            v = v[part]
        shown = yaml.safe_dump(v, default_flow_style=True, width=10**6).strip().removesuffix("...").strip()
        rows.append((key, shown, text))
    return rows


def differences(old: AppConfig, new: AppConfig) -> list[tuple[str, str, str]]:
    """(key, old value, new value) as YAML for every key whose value differs, in config order."""
    before = {k: v for k, v, _ in explain_rows(old)}
    return [(k, before.get(k), v) for k, v, _ in explain_rows(new) if before.get(k) != v]


def changed_keys(old: AppConfig, new: AppConfig) -> list[str]:
    """'key: old -> new' for every key whose value differs, in config order."""
    return [f"{k}: {was} -> {now}" for k, was, now in differences(old, new)]


def unknown_key_message(dotted: str) -> str:
    keys = all_leaf_keys()
    sections = [k for k in AppConfig.model_fields]
    candidates = keys + sections
    close = difflib.get_close_matches(dotted, candidates, n=1, cutoff=0.5)
    if not close:  # compare on the last part too: 'lora.rank' -> 'lora.r'
        leaf = dotted.rsplit(".", 1)[-1]
        by_leaf = {k.rsplit(".", 1)[-1]: k for k in keys}
        hit = difflib.get_close_matches(leaf, list(by_leaf), n=1, cutoff=0.5)
        close = [by_leaf[hit[0]]] if hit else []
    hint = f"; did you mean '{close[0]}'?" if close else "; run 'qlora-app train --dry-run' to see all keys"
    return f"unknown config key '{dotted}'{hint}"


# The section a bare key of a method's own means: `--set beta=0.04` is grpo.beta in a GRPO run, dpo.beta in a DPO one.
METHOD_SECTIONS = {"grpo": "grpo", "dpo": "dpo", "orpo": "dpo"}


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
        if len(matches) == 1:
            return matches[0]
        own = [k for k in matches if k.split(".")[0] == METHOD_SECTIONS.get(method or "")]
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
        node = out
        parts = dotted.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
    return out


# ---------------------------------------------------------------------------------------------- flags and widgets


class Flag:
    """One config key as the CLI and the UI's Train form set it: ``cli`` is the `qlora-app train` option (None:
    only `--set key=value`), ``widget`` the form's widget name and ``label`` its label on the page (None: not on
    the form). ``kind`` says how an option's value becomes the key's: "value" as given, "on" (a switch that sets
    True), "off" (a switch that sets False: --no-fit-check), "list" (a repeatable option)."""

    def __init__(self, key: str, cli: str | None, widget: str | None, label: str | None = None,
                 kind: str = "value"):
        self.key, self.cli, self.widget, self.label, self.kind = key, cli, widget, label, kind

    @property
    def param(self) -> str | None:
        """The CLI option's Python parameter name (--dataset-config -> dataset_config; --no-fit-check -> no_fit_check;
        --reward -> reward)."""
        return self.cli[2:].replace("-", "_") if self.cli else None

    def value(self, given):
        """The config value an option's ``given`` value sets, or None (unset)."""
        if given is None:
            return None
        if self.kind == "on":
            return True if given else None
        if self.kind == "off":
            return False if given else None
        if self.kind == "list":
            return list(given) or None
        return given


# The one table of the keys the CLI and the UI set by name (everything else: --set key=value).
FLAGS = (
    Flag("method", "--method", "method", "Method"),
    Flag("model.name_or_path", "--model", "model", "Model"),
    Flag("data.dataset", "--dataset", "dataset", "Dataset"),
    Flag("data.config_name", "--dataset-config", "dataset_config", "Hub config"),
    Flag("data.prompt_field", "--prompt-field", "prompt_field", "Prompt field (override)"),
    Flag("data.reference_field", "--reference-field", "reference_field", "Reference field (override)"),
    Flag("data.chosen_field", "--chosen-field", "chosen_field", "Chosen field (override)"),
    Flag("data.rejected_field", "--rejected-field", "rejected_field", "Rejected field (override)"),
    Flag("training.max_steps", "--max-steps", "max_steps", "Max steps"),
    Flag("runtime.local_only", "--local-only", "local_only", "Local only (offline)", kind="on"),
    Flag("runtime.num_processes", "--num-processes", "num_processes", "Processes (GPUs)"),
    Flag("runtime.nnodes", "--nnodes", None),
    Flag("runtime.node_rank", "--node-rank", None),
    Flag("runtime.master_addr", "--master-addr", None),
    Flag("runtime.master_port", "--master-port", None),
    Flag("runtime.fit_check", "--no-fit-check", None, kind="off"),
    Flag("reward.custom", "--reward", None, kind="list"),
    Flag("output_dir", "--output-dir", None),
    Flag("run_name", None, "run_name", "Run name"),
    Flag("lora.r", None, "lora_r", "LoRA rank"),
    Flag("lora.alpha", None, "lora_alpha", "LoRA alpha"),
    Flag("training.learning_rate", None, "learning_rate", "Learning rate"),
    Flag("training.per_device_train_batch_size", None, "batch_size", "Per-device batch"),
    Flag("training.gradient_accumulation_steps", None, "grad_accum", "Grad. accumulation"),
    Flag("training.max_length", None, "max_length", "SFT max length"),
    Flag("training.save_steps", None, "save_steps", "Checkpoint every"),
    Flag("training.gradient_checkpointing", None, "gradient_checkpointing", "Gradient checkpointing"),
    Flag("grpo.num_generations", None, "num_generations", "Generations"),
    Flag("grpo.max_completion_length", None, "max_completion_length", "Max completion tokens"),
    Flag("grpo.temperature", None, "grpo_temperature", "Temperature"),
    Flag("grpo.beta", None, "beta", "KL beta"),
    Flag("dpo.loss_type", None, "dpo_loss", "DPO loss"),
    Flag("dpo.beta", None, "dpo_beta", "DPO beta"),
)
CLI_FLAGS = {f.param: f for f in FLAGS if f.cli}
WIDGETS = {f.widget: f for f in FLAGS if f.widget}


def flags_layer(values: dict) -> dict:
    """The nested config layer ({"data": {"dataset": ...}}) that option values ({"dataset": "arith"}, by
    Flag.param) set; unset ones are left out. What build_config takes as its ``flags``."""
    out: dict = {}
    for param, given in values.items():
        value = CLI_FLAGS[param].value(given)
        if value is None:
            continue
        node = out
        *parents, leaf = CLI_FLAGS[param].key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out
