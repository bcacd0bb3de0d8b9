"""The one option -> config key -> UI widget table: `qlora-app train`'s options and the Train form's widgets are
both made from ``FLAGS`` (tests/structure/test_one_door.py), so a new setting is added once and its help states each
method's default from the config itself."""

from __future__ import annotations

from pathlib import Path

from app.config.fields import set_key
from app.errors import UserError

# ---------------------------------------------------------------------------------------------- flags and widgets


class Flag:
    """One config key as the CLI and the UI's Train form set it: ``cli`` is the `qlora-app train` option (None:
    only `--set key=value`), ``widget`` the form's widget name and ``label`` its label on the page (None: not on
    the form). ``kind`` says how an option's value becomes the key's: "value" as given, "on" (a switch that sets
    True), "off" (a switch that sets False: --no-fit-check), "list" (a repeatable option), "datasets" (a repeatable
    --dataset: one is data.dataset, several are data.mix) and "shares" (--mix 0.7,0.3: the mix's shares)."""

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
        if self.kind in ("list", "datasets"):
            items = [given] if isinstance(given, str) else list(given)
            return [x for x in items if str(x).strip()] or None
        return given


# The one table of the keys the CLI and the UI set by name (everything else: --set key=value).
FLAGS = (
    Flag("method", "--method", "method", "Method"),
    Flag("model.name_or_path", "--model", "model", "Model"),
    Flag("data.dataset", "--dataset", "dataset", "Dataset", kind="datasets"),
    Flag("data.mix", "--mix", "mix", "Mix shares", kind="shares"),
    Flag("data.config_name", "--dataset-config", "dataset_config", "Hub config"),
    Flag("data.prompt_field", "--prompt-field", "prompt_field", "Prompt field (override)"),
    Flag("data.reference_field", "--reference-field", "reference_field", "Reference field (override)"),
    Flag("data.chosen_field", "--chosen-field", "chosen_field", "Chosen field (override)"),
    Flag("data.rejected_field", "--rejected-field", "rejected_field", "Rejected field (override)"),
    Flag("data.label_field", "--label-field", "label_field", "Label field (override)"),
    Flag("training.max_steps", "--max-steps", "max_steps", "Max steps"),
    Flag("runtime.local_only", "--local-only", "local_only", "Local only (offline)", kind="on"),
    Flag("runtime.num_processes", "--num-processes", "num_processes", "Processes (GPUs)"),
    Flag("runtime.nnodes", "--nnodes", None),
    Flag("runtime.node_rank", "--node-rank", None),
    Flag("runtime.master_addr", "--master-addr", None),
    Flag("runtime.master_port", "--master-port", None),
    Flag("runtime.fit_check", "--no-fit-check", None, kind="off"),
    Flag("reward.custom", "--reward", None, kind="list"),
    Flag("tools.use", "--tools", "tools", "Tools", kind="list"),
    Flag("tools.environment", "--environment", "environment", "Environment (FILE.py:Class)"),
    Flag("grpo.max_tool_calls", None, "max_tool_calls", "Tool-call rounds"),
    Flag("model.chat_template", "--chat-template", None),
    Flag("reward.reference_match", "--reference-match", "reference_match", "Reference match"),
    Flag("reward.json_schema", None, "json_schema", "JSON Schema file (json component)"),
    Flag("reward.regex", None, "regex", "Answer must match (regex)"),
    Flag("reward.regex_forbid", None, "regex_forbid", "Answer must not match (regex)"),
    Flag("reward.judge.url", "--judge-url", "judge_url", "Judge endpoint (OpenAI-compatible URL)"),
    Flag("reward.judge.model", "--judge-model", "judge_model", "Judge model"),
    Flag("reward.judge.rubric", "--judge-rubric", "judge_rubric", "Judge rubric file"),
    Flag("output_dir", "--output-dir", None),
    Flag("run_name", None, "run_name", "Run name"),
    Flag("lora.r", None, "lora_r", "LoRA rank"),
    Flag("lora.alpha", None, "lora_alpha", "LoRA alpha"),
    Flag("training.learning_rate", None, "learning_rate", "Learning rate"),
    Flag("training.per_device_train_batch_size", None, "batch_size", "Per-device batch"),
    Flag("training.gradient_accumulation_steps", None, "grad_accum", "Grad. accumulation"),
    Flag("training.max_length", None, "max_length", "SFT max length"),
    Flag("training.save_steps", None, "save_steps", "Checkpoint every"),
    Flag("training.early_stop.patience", None, "early_stop", "Early stop: flat held-out points (0 = off)"),
    Flag("training.gradient_checkpointing", None, "gradient_checkpointing", "Gradient checkpointing"),
    Flag("grpo.num_generations", None, "num_generations", "Generations"),
    Flag("grpo.max_completion_length", None, "max_completion_length", "Max completion tokens"),
    Flag("grpo.temperature", None, "grpo_temperature", "Temperature"),
    Flag("grpo.beta", None, "beta", "KL beta"),
    Flag("dpo.loss_type", None, "dpo_loss", "DPO loss"),
    Flag("dpo.beta", None, "dpo_beta", "DPO beta"),
    Flag("kto.beta", None, "kto_beta", "KTO beta"),
    Flag("kto.desirable_weight", None, "kto_desirable_weight", "Weight of good answers"),
    Flag("kto.undesirable_weight", None, "kto_undesirable_weight", "Weight of bad answers"),
    Flag("distill.teacher", "--teacher", "teacher", "Teacher (model, run, .gguf file or http(s) endpoint)"),
    Flag("distill.mode", None, "distill_mode", "Distillation"),
    Flag("distill.beta", None, "distill_beta", "Divergence beta (0 forward KL, 1 reverse KL)"),
    Flag("distill.teacher_4bit", None, "teacher_4bit", "Teacher in 4-bit"),
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
        set_key(out, CLI_FLAGS[param].key, value)
    if "data" in out:
        out["data"] = mix_layer(out["data"])
    return out


def parse_shares(text: str, n: int) -> list[float]:
    """'0.7,0.3' (or '70,30', or '70%,30%') -> [0.7, 0.3] for ``n`` datasets."""
    try:
        shares = [float(x.strip().rstrip("%")) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--mix '{text}' is not a list of numbers; pass one share per --dataset, e.g. --mix 0.7,0.3") \
            from None
    if len(shares) != n:
        raise UserError(f"--mix has {len(shares)} share(s) for {n} dataset(s); pass one per --dataset, in the same "
                        "order, e.g. --mix 0.7,0.3")
    if any(s <= 0 for s in shares):
        raise UserError(f"--mix '{text}': every share must be above 0; drop a dataset rather than give it 0")
    if abs(sum(shares) - 100) < 0.5:  # typed as percentages
        shares = [s / 100 for s in shares]
    return shares


def mix_layer(data: dict) -> dict:
    """One --dataset is data.dataset; several are data.mix, each with its --mix share (no --mix: each whole)."""
    data = dict(data)
    names, shares = data.pop("dataset", None), data.pop("mix", None)
    if names is None and shares is None:
        return data
    names = [names] if isinstance(names, str) else list(names or [])
    if len(names) < 2:
        if shares is not None:
            raise UserError("--mix gives the shares of two or more datasets: --dataset A --dataset B --mix 0.7,0.3")
        data["dataset"] = names[0]
        return data
    split = parse_shares(shares, len(names)) if shares is not None else [None] * len(names)
    data["mix"] = [{"dataset": n, "share": s} for n, s in zip(names, split)]
    return data


def split_datasets(text: str | None) -> list[str] | None:
    """The UI's Dataset box: one dataset, or several separated by commas (a mix); a path that exists is one
    dataset whatever its name holds."""
    if not text:
        return None
    if Path(text).expanduser().exists():
        return [text]
    return [x.strip() for x in text.split(",") if x.strip()] or None
