"""What the UI's buttons do, as plain functions (no Gradio imports): testable in-process and used by the tabs
(app/ui/tabs/).

The Train form is turned into exactly what a user would type on the command line -- a preset, the CLI's own flags
(the one widget -> flag -> config key table, app.config.flags.FLAGS) and ``--set`` overrides -- and Start runs that
command line in a subprocess (app/ui/jobs.py). So the run the UI starts is, by construction, the run the shown CLI
command starts; the UI never writes into a run folder (the run's session does).
"""

from __future__ import annotations

import shlex
from pathlib import Path

from app.config.build import build_config, with_absolute_paths, with_values
from app.config.fields import get_key
from app.config.flags import WIDGETS, flags_layer, split_datasets
from app.config.presets import list_presets, load_preset, presets_dir
from app.config.resolve import model_name
from app.config.reward_components import BY_NAME as REWARD_SPECS
from app.config.reward_components import NAMES as REWARD_COMPONENTS
from app.config.schema import AppConfig, RewardConfig
from app.errors import UserError
from app.host.offline import hub_offline
from app.data.preview import peek_detections
from app.model.source import check_model_source, run_model_hint
from app.rewards import effective_weights
from app.run import integrity, layout, lookup, newrun
from app.run.summary import run_summary
from app.train.planning.memory import format_estimate
from app.train.planning.plan import card_verdicts
from app.ui.folders import run_path

NO_PRESET = "(none)"
# What the Train form starts from: the offline demo's recipe, which shows learning in about a minute on a CPU (the
# built-in defaults with the tiny model learn nothing in 40 steps); a GPU user picks gsm8k-grpo or a gpu-* preset.
DEFAULT_PRESET = "demo-grpo"
AUTO = "(auto)"

WEIGHTS = {f"w_{c}": c for c in REWARD_COMPONENTS}
LIST_WIDGETS = ("tools",)  # multi-select widgets: their value is the list itself (one --tools per item)
FIELD_OVERRIDES = ("prompt_field", "reference_field", "chosen_field", "rejected_field", "label_field")  # columns
# Numbers that may be left empty (= auto). Gradio's Number box cannot be empty (it shows and sends 0), so these
# are text boxes and their text is parsed here.
AUTO_NUMBERS = {"lora_r": "LoRA rank", "lora_alpha": "LoRA alpha", "learning_rate": "learning rate",
                "batch_size": "per-device batch", "grad_accum": "gradient accumulation",
                "kto_desirable_weight": "weight of good answers"}


# ------------------------------------------------------------------------------------------------ form <-> config


def widget_value(v):
    """Widget value -> config value: empty text and the '(auto)' choice mean unset; whole floats from number
    boxes become ints (pydantic would refuse 4.0 for an int field)."""
    if isinstance(v, str):
        v = v.strip()
        return None if v in ("", AUTO) else v
    if isinstance(v, float) and v.is_integer() and not isinstance(v, bool):
        return int(v)
    if isinstance(v, (list, tuple)):  # a multi-select: its chosen items, blanks dropped
        return [x.strip() for x in v if isinstance(x, str) and x.strip()]
    return v


def _number(name: str, v):
    """Text of an AUTO_NUMBERS box -> int / float / None (auto)."""
    v = widget_value(v)
    if not isinstance(v, str):
        return v
    try:
        return widget_value(float(v))
    except ValueError:
        raise UserError(f"{AUTO_NUMBERS[name]} must be a number or empty for auto (got '{v}')") from None


def _same(a, b) -> bool:
    if isinstance(b, list) and isinstance(a, str):  # a list key shown as text (dpo.loss_type: "sigmoid,sft")
        b = ",".join(map(str, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return float(a) == float(b)
    return a == b


def _fmt(v) -> str:
    if v is None:
        return ""  # `--set key=` resets a key to auto
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def _load_preset(preset: str | None) -> dict:
    if not preset or preset == NO_PRESET:
        return {}

    return load_preset(preset)


def preset_info(preset: str | None) -> str:
    """The preset's one-line description (its file's second comment line), shown under the dropdown."""
    if not preset or preset == NO_PRESET:
        return "no preset: the built-in defaults of the method picked"
    found = {p["name"]: p for p in list_presets()}.get(preset)
    return found["description"] if found else ""


def switch_method(form: dict, method: str, local_only: bool = False) -> dict:
    """The form after picking ``method``: a preset made for another method gives way to the one for this method on
    the same model and data (demo-grpo -> demo-dpo), else to none; every value the user changed from the old
    preset's stays, the rest follows the new preset."""
    old = form.get("preset") or NO_PRESET
    dataset = form.get("dataset")
    old_values = widget_values(form_defaults(old, local_only, dataset))
    if old_values.get("method") == method:
        return dict(form)
    new = _preset_for(old, method)
    new_values = widget_values(form_defaults(new, local_only, dataset))
    own = widget_values(form_defaults(old, local_only))  # the old preset on its own dataset: its fields too
    kept = {k: v for k, v in form.items() if k not in ("preset", "method")
            and not any(_same(widget_value(v), widget_value(d.get(k))) for d in (old_values, own))}
    return {**new_values, **kept, "preset": new, "method": method}


def _preset_for(preset: str, method: str) -> str:
    """The preset for ``method`` on the same model and dataset as ``preset``, else none."""
    if preset == NO_PRESET:
        return NO_PRESET
    by_name = {p["name"]: p for p in list_presets()}
    mine = by_name.get(preset)
    if mine is None:
        return NO_PRESET
    return next((p["name"] for p in by_name.values() if p["method"] == method and p["model"] == mine["model"]
                 and p["dataset"] == mine["dataset"]), NO_PRESET)


def _preset_on(preset: str | None, dataset: str | None) -> AppConfig:
    """The preset as it applies to ``dataset`` (None: its own): its split and fields belong to its own dataset
    (app.config.build.DATASET_KEYS)."""
    dataset = widget_value(dataset)
    return build_config(_load_preset(preset), {"data": {"dataset": dataset}} if dataset else None)


def preset_choices() -> list[str]:
    return [NO_PRESET, *sorted(p.stem for p in presets_dir().glob("*.yaml"))]


def form_defaults(preset: str | None = None, local_only: bool = False, dataset: str | None = None) -> dict:
    """Widget values for a preset (or the built-in defaults): what the form shows before the user edits it.
    Auto values stay empty so that an untouched field keeps meaning "auto". ``dataset``: the preset as it applies
    to this dataset (its split and fields belong to its own: app.config.build.DATASET_KEYS)."""
    data = _preset_on(preset, dataset).model_dump(mode="json")
    out = {"preset": preset or NO_PRESET}
    for name, flag in WIDGETS.items():
        out[name] = get_key(data, flag.key, None)
        if isinstance(out[name], list) and name not in LIST_WIDGETS:  # shown as comma-separated text
            out[name] = ",".join(map(str, out[name]))
    if data["data"]["mix"]:  # a mix: its datasets in the Dataset box, their shares in the Mix box
        out["dataset"] = ", ".join(p["dataset"] for p in data["data"]["mix"])
        out["mix"] = ",".join(f"{p['share']:g}" for p in data["data"]["mix"] if p["share"] is not None)
    out["local_only"] = bool(out["local_only"] or local_only)

    weights = effective_weights(RewardConfig.model_validate(data["reward"]))
    for name, comp in WEIGHTS.items():
        out[name] = weights[comp]
    return out


def widget_values(form: dict) -> dict:
    """form_defaults() values as the widgets display them: text boxes get text, unset overrides get '(auto)'."""
    out = dict(form)
    for name in AUTO_NUMBERS:
        out[name] = "" if form.get(name) is None else str(form[name])
    for name in ("model", "dataset", "dataset_config", "run_name", "teacher"):
        out[name] = form.get(name) or ""
    for name in FIELD_OVERRIDES:
        out[name] = form.get(name) or AUTO
    return out


def form_to_cli(form: dict, runs_dir: str | Path) -> tuple[str | None, dict, list[str], list[str]]:
    """(preset, flags, sets, argv): the CLI's inputs for these widget values. ``flags`` has the same shape as the
    dict app/cli/main.py's `train` builds; only values that differ from the preset/defaults are passed at all."""
    preset = _form_preset(form)
    base_cfg = _preset_on(preset, form.get("dataset"))
    base = base_cfg.model_dump(mode="json")
    base["data"]["dataset"] = _preset_on(preset, None).data.dataset  # the dataset itself is passed when it differs
    given: dict = {"output_dir": str(runs_dir)}  # option values by parameter name, as the CLI's train gets them
    argv = ["qlora-app", "train"] + (["--preset", preset] if preset else [])
    sets: list[str] = []
    for name, flag in WIDGETS.items():
        v = _number(name, form.get(name)) if name in AUTO_NUMBERS else widget_value(form.get(name))
        if name == "local_only":
            v = bool(v)
        if flag.kind == "datasets":  # 'a.jsonl, b.jsonl': a mix, one --dataset each
            v = split_datasets(v)
            if len(v or []) > 1 and any(widget_value(form.get(f)) for f in FIELD_OVERRIDES):
                raise UserError("the column overrides name columns of one dataset; with a mix of datasets set them "
                                "back to (auto): each dataset's fields are detected on its own")
            if v == ([base["data"]["dataset"]] if base["data"]["dataset"] else None):
                continue
        elif flag.kind == "shares" and not v:
            continue
        elif _same(v, get_key(base, flag.key, None)):
            continue
        if flag.cli and flag.kind in ("list", "datasets") and v:  # a repeatable option, once per item
            given[flag.param] = list(v)
            argv += [x for item in v for x in (flag.cli, str(item))]
        elif flag.cli and v is not None and v is not False and v != []:  # a flag sets a value, never unsets one
            given[flag.param] = v
            argv += [flag.cli] if v is True else [flag.cli, str(v)]
        else:
            sets.append(f"{flag.key}={_fmt(v)}")

    weights = effective_weights(_form_reward(form, base_cfg))
    for name, comp in WEIGHTS.items():
        if name in form:  # weights merge key by key: only the sliders the user moved are passed
            w = float(widget_value(form.get(name)) or 0.0)
            if not _same(weights[comp], w):
                sets.append(f"reward.weights.{comp}={_fmt(w)}")
    argv += ["--output-dir", str(runs_dir)]
    for s in sets:
        argv += ["--set", s]
    return preset, flags_layer(given), sets, argv


def _form_preset(form: dict) -> str | None:  # the preset the form is built on (None: none)
    return None if form.get("preset") in (None, "", NO_PRESET) else form["preset"]


def _form_reward(form: dict, base: AppConfig) -> RewardConfig:
    """The reward section the form's reward settings (json schema, patterns, judge) make of ``base`` (the preset's),
    weights aside: what the weight sliders are measured against. Settings that do not validate yet: the preset's."""
    values = {f.key: widget_value(form.get(n)) for n, f in WIDGETS.items() if f.key.startswith("reward.") and n in form}
    try:
        return with_values(base, values).reward
    except UserError:
        return base.reward


def opt_in_sliders(form: dict) -> dict[str, float]:
    """The opt-in components' sliders as the form's reward settings switch them: one switched on shows its weight
    when its slider is at 0, one switched off shows 0; a slider the user moved keeps its value."""
    weights = effective_weights(_form_reward(form, _preset_on(_form_preset(form), form.get("dataset"))))
    out = {}
    for name, comp in WEIGHTS.items():
        shown = float(widget_value(form.get(name)) or 0.0)
        if weights[comp] and not shown:
            out[name] = weights[comp]
        elif not weights[comp] and shown and not REWARD_SPECS[comp].weight_switches:
            out[name] = 0.0
    return out


def config_from_form(form: dict, runs_dir: str | Path) -> AppConfig:
    preset, flags, sets, _ = form_to_cli(form, runs_dir)
    return build_config(_load_preset(preset), flags, sets)


def form_view(form: dict, runs_dir: str | Path) -> tuple[str, str]:
    """(equivalent command line, memory estimate) for the form, the config built once. An invalid form gives the
    validation error, as a comment in the command box."""
    try:
        preset, flags, sets, argv = form_to_cli(form, runs_dir)
        cfg = build_config(_load_preset(preset), flags, sets)
    except UserError as e:
        return f"# not valid yet: {e}", f"**Memory estimate:** not available ({e})"
    try:
        # what the dry run refuses before it plans: a model not to be had here (Local only), data with pictures
        # for a text model (the plan reads the data's detection, from a peek that downloads nothing); the command
        # itself stands, the run it starts would be refused
        check_model_source(model_name(cfg), cfg.runtime.local_only, loads=False, hint=run_model_hint(cfg))
        found = peek_detections(cfg.data) if not cfg.data.mix else []
        verdicts, plan = card_verdicts(cfg, det=found[0] if found else None)
    except UserError as e:
        return shlex.join(argv), f"**Memory estimate:** not available ({e})"
    if plan is None:  # too big for every card
        return shlex.join(argv), "**Memory estimate:** too big for an 80 GB card; " + ", ".join(
            f"{g} GB: **{v}**" for g, v in verdicts.items())
    return shlex.join(argv), format_estimate(plan.estimate, verdicts)


# ------------------------------------------------------------------------------------------------ train / runs


def start_run(jobs, runs_dir: str | Path, form: dict) -> Path:
    """Validate the form and start its command line (`qlora-app train ... --run-dir RUN`) in a subprocess; returns
    RUN, the folder the run's session creates once the run is planned (a run it refuses leaves none). Paths typed
    in the form are relative to the folder the UI was started in, where the subprocess runs too; the session
    writes them into config.yaml as absolute paths."""
    cfg = with_absolute_paths(config_from_form(form, runs_dir), jobs.cwd)
    if not cfg.data.datasets:
        raise UserError("no dataset: enter a hub id, a local file path or 'arith', or upload a file")
    # a model that cannot be found is said here, before a run is started that would only fail
    check_model_source(model_name(cfg), cfg.runtime.local_only or hub_offline(),
                       "'Local only (offline)' forbids downloads" if cfg.runtime.local_only else
                       "this machine is offline (HF_HUB_OFFLINE=1 where the UI was started)", hint=run_model_hint(cfg))
    jobs.check_free()
    _, _, _, argv = form_to_cli(form, runs_dir)
    d = newrun.unused_run_dir(runs_dir, cfg.run_name or newrun.default_run_name(cfg.method, cfg.data.datasets))
    jobs.start(d, args=argv[2:])
    return d


def resume_run(jobs, runs_dir: str | Path, name: str, max_steps: int | None = None) -> Path:
    """Continue a stopped run, or extend any run with a checkpoint to ``max_steps`` (more than it has done)."""
    if not name:
        raise UserError("select a run to resume")
    d = lookup.require_run_dir(run_path(runs_dir, name))
    s = run_summary(d)
    max_steps = int(max_steps) if max_steps else None
    if max_steps is not None and max_steps <= (s.get("step") or 0):
        raise UserError(f"run '{name}' is at step {s.get('step') or 0}; set 'Extend to steps' above that, or clear it")
    if s["status"] == layout.FINISHED and max_steps is None:
        raise UserError(f"run '{name}' already finished; set 'Extend to steps' to train it further, or start a new "
                        "run")
    if integrity.last_checkpoint(d) is None:
        raise UserError(f"run '{name}' has no checkpoint to resume from; start a new run instead")
    jobs.start(d, resume=True, max_steps=max_steps)
    return d
