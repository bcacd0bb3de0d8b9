"""The Train tab: the form (one widget per config key, its description as the tooltip), field detection, the
memory estimate, the equivalent CLI command, Start / Stop and the live view of the run."""

import time

from app.config.flags import WIDGETS
from app.config.methods import DEFAULT_MODEL
from app.config.reward_components import BY_NAME
from app.config.methods import METHODS
from app.config.schema import DPO_LOSS_TYPES, REFERENCE_MATCHES
from app.data.images import IMAGE_SUFFIXES
from app.errors import UserError
from app.run import lookup
from app.tools.builtin import BUILTIN_TOOLS
from app.ui import data_form as df
from app.ui import handlers as h
from app.ui import run_view as rv
from app.ui.jobs import BUSY_MESSAGE
from app.ui.widgets import Context, config_help, err, plots

POLL_SECONDS = 2.0
STARTED = "started"  # the message Start leaves, until the run's own status takes over
FOLLOW_LOG_JS = ("() => { const t = document.querySelector('#train-log textarea'); "
                 "if (t) t.scrollTop = t.scrollHeight; }")


def _info(name: str) -> str | None:
    return config_help(WIDGETS[name].key)


def _label(name: str) -> str:
    return WIDGETS[name].label


def _form(dflt: dict) -> tuple[dict, object, object, object, object]:
    """The widgets, keyed by the names app.config.flags.WIDGETS / handlers.WEIGHTS use; plus the parts that are not
    config (upload, detect, samples, the method's settings boxes)."""
    import gradio as gr

    w = {}
    with gr.Row():
        w["preset"] = gr.Dropdown(h.preset_choices(), value=h.DEFAULT_PRESET, label="Preset", elem_id="preset",
                                  info=h.preset_info(h.DEFAULT_PRESET))
        w["method"] = gr.Radio(list(METHODS), value=dflt["method"], label=_label("method"), elem_id="method",
                               info=_info("method"))
    w["model"] = gr.Textbox(dflt["model"], label=f"{_label('model')}: hub id or local folder", elem_id="model",
                            info=_info("model"), placeholder=f"{DEFAULT_MODEL} (default)")
    with gr.Row():
        w["dataset"] = gr.Textbox(dflt["dataset"], label=f"{_label('dataset')}: name, hub id or local file (several, "
                                                         "comma-separated: a mix)", scale=3, elem_id="dataset",
                                  placeholder="gsm8k, arith, data.jsonl", info=_info("dataset"))
        w["mix"] = gr.Textbox(dflt["mix"], label=_label("mix"), scale=1, elem_id="mix", placeholder="0.7,0.3",
                              info="each dataset's share of the training rows, in order (empty: each whole)")
        w["dataset_config"] = gr.Textbox(dflt["dataset_config"], label=_label("dataset_config"), scale=1,
                                         elem_id="dataset-config",
                                         placeholder="e.g. main", info=_info("dataset_config"))
    parts = {}
    parts["upload"] = gr.File(label="…or upload a dataset file (with its pictures, if it has any: in class "
                                    "folders, as one .zip)",
                              file_types=[*df.UPLOAD_TYPES, *df.ARCHIVES, *IMAGE_SUFFIXES], file_count="multiple",
                              height=120,
                              elem_id="upload")
    parts["detect_btn"] = gr.Button("Detect fields", elem_id="detect-btn", size="sm")
    parts["detect_md"] = gr.Markdown(elem_id="detect-md")
    parts["samples"] = gr.Dataframe(headers=["prompt (as the model sees it)", "reference"], wrap=True,
                                    interactive=False, max_height=220, visible=False, elem_id="samples")
    with gr.Row():
        for name in h.FIELD_OVERRIDES:  # prompt, reference; chosen, rejected of pairs; the label of unpaired answers
            w[name] = gr.Dropdown(list(dict.fromkeys([h.AUTO, dflt[name]])), value=dflt[name], allow_custom_value=True,
                                  label=_label(name), elem_id=name.replace("_", "-"), info=_info(name))
    with gr.Accordion("Training settings", open=True):
        with gr.Row():
            # "auto" numbers are text boxes: Gradio's Number box cannot be empty (see handlers.AUTO_NUMBERS).
            for name, elem in (("lora_r", "lora-r"), ("lora_alpha", "lora-alpha"), ("learning_rate", "learning-rate")):
                w[name] = gr.Textbox(dflt[name], label=_label(name), placeholder="auto", elem_id=elem,
                                     info=_info(name))
            w["max_steps"] = gr.Number(dflt["max_steps"], label=f"{_label('max_steps')} (-1 = epochs)", precision=0,
                                       elem_id="max-steps", info=_info("max_steps"))
        with gr.Row():
            for name, elem in (("batch_size", "batch-size"), ("grad_accum", "grad-accum")):
                w[name] = gr.Textbox(dflt[name], label=_label(name), placeholder="auto", elem_id=elem,
                                     info=_info(name))
            w["max_length"] = gr.Number(dflt["max_length"], label=_label("max_length"), precision=0,
                                        elem_id="max-length", info=_info("max_length"))
            w["save_steps"] = gr.Number(dflt["save_steps"], label=_label("save_steps"), precision=0,
                                        elem_id="save-steps", info=_info("save_steps"))
            w["early_stop"] = gr.Number(dflt["early_stop"], label=_label("early_stop"), precision=0, minimum=0,
                                        elem_id="early-stop", info=_info("early_stop"))
        with gr.Row():
            w["gradient_checkpointing"] = gr.Checkbox(dflt["gradient_checkpointing"],
                                                      label=_label("gradient_checkpointing"),
                                                      elem_id="grad-ckpt", info=_info("gradient_checkpointing"))
            w["local_only"] = gr.Checkbox(dflt["local_only"], label=_label("local_only"), elem_id="local-only",
                                          info=_info("local_only"))
            w["run_name"] = gr.Textbox(dflt["run_name"], label=_label("run_name"), placeholder="auto",
                                       elem_id="run-name", info=_info("run_name"))
            w["num_processes"] = gr.Number(dflt["num_processes"], label=_label("num_processes"), precision=0,
                                           minimum=1, elem_id="num-processes", info=_info("num_processes"))
    _method_settings(w, parts, dflt)
    return w, parts


# The settings boxes, each of one config section (GRPO's, DPO's, KTO's, distillation's), in the form's order.
BOX_SECTIONS = ("grpo", "dpo", "kto", "distill")


def _opens(method: str) -> list[bool]:
    """Which boxes are open for ``method``: the one of the section it reads (app/config/methods/)."""
    section = METHODS[method].section
    return [section == box for box in BOX_SECTIONS]


def _method_settings(w: dict, parts: dict, dflt: dict) -> None:
    """GRPO's and DPO's own settings, each in a box: the method picked has its box open, the other folded away
    (on_method keeps it so)."""
    import gradio as gr

    with gr.Accordion("GRPO settings", open=_opens(dflt["method"])[0]) as parts["grpo_box"]:
        with gr.Row():
            w["num_generations"] = gr.Number(dflt["num_generations"], label=_label("num_generations"), precision=0,
                                             elem_id="num-generations", info=_info("num_generations"))
            w["max_completion_length"] = gr.Number(dflt["max_completion_length"], label=_label("max_completion_length"),
                                                   precision=0, elem_id="max-completion",
                                                   info=_info("max_completion_length"))
            w["grpo_temperature"] = gr.Number(dflt["grpo_temperature"], label=_label("grpo_temperature"),
                                              elem_id="grpo-temperature", info=_info("grpo_temperature"))
            w["beta"] = gr.Number(dflt["beta"], label=_label("beta"), elem_id="beta", info=_info("beta"))
        with gr.Row():  # tools: the built-in ones to pick, or a tool file's path typed in
            w["tools"] = gr.Dropdown(list(BUILTIN_TOOLS), value=dflt["tools"], multiselect=True,
                                     allow_custom_value=True, label=f"{_label('tools')}: built-in, or type FILE.py",
                                     elem_id="tools", info=_info("tools"), scale=2)
            w["environment"] = gr.Textbox(dflt["environment"] or "", label=_label("environment"), scale=2,
                                          placeholder="none", elem_id="environment", info=_info("environment"))
            w["max_tool_calls"] = gr.Number(dflt["max_tool_calls"], label=_label("max_tool_calls"), precision=0,
                                            elem_id="max-tool-calls", info=_info("max_tool_calls"), scale=1)
        with gr.Row():  # how the reference is compared, and the format components' settings
            w["reference_match"] = gr.Dropdown(list(REFERENCE_MATCHES), value=dflt["reference_match"],
                                               label=_label("reference_match"), elem_id="reference-match",
                                               info=_info("reference_match"), scale=1)
            for name, elem in (("json_schema", "json-schema"), ("regex", "answer-must"),
                               ("regex_forbid", "answer-must-not")):
                w[name] = gr.Textbox(dflt[name] or "", label=_label(name), placeholder="none", elem_id=elem,
                                     info=_info(name), scale=1)
        with gr.Row():  # a judge: an endpoint, or a local model
            for name, elem, hint in (("judge_url", "judge-url", "none, e.g. http://127.0.0.1:8080/v1"),
                                     ("judge_model", "judge-model", "the endpoint's first, or a local model"),
                                     ("judge_rubric", "judge-rubric", "ours")):
                w[name] = gr.Textbox(dflt[name] or "", label=_label(name), placeholder=hint, elem_id=elem,
                                     info=_info(name), scale=1)
        with gr.Row():
            for name, comp in h.WEIGHTS.items():  # one slider per registry component, accuracy included
                w[name] = gr.Slider(0, 4, value=dflt[name], step=0.05, label=f"reward weight: {comp}",
                                    elem_id=f"w-{comp}", info=BY_NAME[comp].description)
    with gr.Accordion("DPO settings (preference pairs)", open=_opens(dflt["method"])[1]) as \
            parts["dpo_box"]:
        with gr.Row():
            w["dpo_loss"] = gr.Dropdown(list(DPO_LOSS_TYPES), value=dflt["dpo_loss"], allow_custom_value=True,
                                        label=f"{_label('dpo_loss')} (several: comma-separated, e.g. sigmoid,sft)",
                                        elem_id="dpo-loss", info=_info("dpo_loss"))
            w["dpo_beta"] = gr.Number(dflt["dpo_beta"], label=_label("dpo_beta"), elem_id="dpo-beta",
                                      info=_info("dpo_beta"))
    with gr.Accordion("KTO settings (answers labelled good / bad)", open=_opens(dflt["method"])[2]) as \
            parts["kto_box"]:
        with gr.Row():
            w["kto_beta"] = gr.Number(dflt["kto_beta"], label=_label("kto_beta"), elem_id="kto-beta",
                                      info=_info("kto_beta"))
            w["kto_desirable_weight"] = gr.Textbox(dflt["kto_desirable_weight"], label=_label("kto_desirable_weight"),
                                                   placeholder="auto", elem_id="kto-desirable-weight",
                                                   info=_info("kto_desirable_weight"))
            w["kto_undesirable_weight"] = gr.Number(dflt["kto_undesirable_weight"],
                                                    label=_label("kto_undesirable_weight"),
                                                    elem_id="kto-undesirable-weight",
                                                    info=_info("kto_undesirable_weight"))
    with gr.Accordion("Distillation settings (a teacher: model, run, GGUF file or endpoint)",
                      open=_opens(dflt["method"])[3]) as parts["distill_box"]:
        with gr.Row():
            w["teacher"] = gr.Textbox(dflt["teacher"] or "", label=_label("teacher"), scale=2, elem_id="teacher",
                                      placeholder="a model id or folder, a run folder, a .gguf file or an "
                                      "http(s)://host:port/v1 endpoint", info=_info("teacher"))
            w["distill_mode"] = gr.Radio(["on_policy", "off_policy"], value=dflt["distill_mode"],
                                         label=_label("distill_mode"), elem_id="distill-mode",
                                         info=_info("distill_mode"))
            w["distill_beta"] = gr.Number(dflt["distill_beta"], label=_label("distill_beta"), elem_id="distill-beta",
                                          info=_info("distill_beta"))
            w["teacher_4bit"] = gr.Checkbox(dflt["teacher_4bit"], label=_label("teacher_4bit"),
                                            elem_id="teacher-4bit", info=_info("teacher_4bit"))


def build(ctx: Context) -> None:
    import gradio as gr

    dflt = h.widget_values(h.form_defaults(h.DEFAULT_PRESET, ctx.local_only))
    with gr.Row():
        with gr.Column(scale=4):
            w, parts = _form(dflt)
        with gr.Column(scale=3):  # beside Start: what a run does is in view while it runs, not a page below
            panel = _panel(dflt, ctx.runs_dir)
            panel["curves"] = plots("train")
            panel["log"] = gr.Textbox(label="train.log (live tail)", lines=10, max_lines=10, autoscroll=True,
                                      interactive=False, elem_id="train-log")
    _wire_form(ctx, w, parts, panel)
    _wire_run(ctx, w, panel)


def _panel(dflt: dict, runs_dir) -> dict:
    """The right-hand column: memory estimate, equivalent command, Start / Stop and the run's status."""
    import gradio as gr

    shown_cli, shown_memory = h.form_view(dflt, runs_dir)
    p = {"memory": gr.Markdown(shown_memory, elem_id="memory"),
         "preview": gr.Textbox(shown_cli, label="Equivalent command", lines=3, max_lines=8, interactive=False,
                               buttons=["copy"], elem_id="cli-preview")}
    with gr.Row():
        p["start"] = gr.Button("Start", variant="primary", elem_id="start-btn")
        p["stop"] = gr.Button("Stop", variant="stop", elem_id="stop-btn")
    p["message"] = gr.Markdown(elem_id="train-message")
    p["status"] = gr.Markdown("No run started yet.", elem_id="train-status")
    p["progress"] = gr.HTML(elem_id="train-progress")
    return p


def _wire_method_boxes(w: dict, parts: dict) -> None:
    """The picked method's settings open, the others' closed."""
    import gradio as gr

    def on_method(method):
        return tuple(gr.update(open=o) for o in _opens(method))

    w["method"].change(on_method, w["method"], [parts["grpo_box"], parts["dpo_box"], parts["kto_box"],
                                                parts["distill_box"]])


def _wire_form(ctx: Context, w: dict, parts: dict, panel: dict) -> None:
    """The form's events: the command and estimate follow every edit; presets, upload, field detection, the method's
    settings."""
    import gradio as gr

    upload, detect_btn, detect_md, samples = (parts[k] for k in ("upload", "detect_btn", "detect_md", "samples"))

    names, inputs = list(w), list(w.values())

    def on_form(*values):
        return h.form_view(dict(zip(names, values)), ctx.runs_dir)

    gr.on([c.change for c in inputs], on_form, inputs, [panel["preview"], panel["memory"]], show_progress="hidden")

    # The preset whose values the form holds: a preset set by picking a method (below) has its values in the form
    # already, with the user's edits kept; only a preset the user picks resets the form to it.
    shown_preset = gr.State(h.DEFAULT_PRESET)

    def on_preset(preset, shown):
        if preset == shown:
            return [gr.update() for _ in names] + [gr.update(), shown]
        try:
            d = h.widget_values(h.form_defaults(preset, ctx.local_only))
        except UserError as e:
            return [gr.update() for _ in names] + [err(e), shown]
        return [gr.update(value=d[n]) if n != "preset" else gr.update(info=h.preset_info(preset))
                for n in names] + ["", preset]

    # .input: a preset the user picks (the one picking a method sets is not a pick; the state guards it too)
    w["preset"].input(on_preset, [w["preset"], shown_preset], inputs + [panel["message"], shown_preset])

    def on_method_picked(*values):
        form = dict(zip(names, values))
        try:
            d = h.switch_method(form, form["method"], ctx.local_only)
        except UserError as e:
            return [gr.update() for _ in names] + [err(e), gr.update()]
        return [gr.update(value=d[n], info=h.preset_info(d[n])) if n == "preset" else gr.update(value=d[n])
                for n in names] + ["", d["preset"]]

    # .input: the method the user picks (a preset's method set by on_preset is not a pick)
    w["method"].input(on_method_picked, inputs, inputs + [panel["message"], shown_preset])

    def on_upload(path):
        try:
            return df.save_upload(path, ctx.runs_dir), ""
        except Exception as e:  # noqa: BLE001
            return gr.update(), err(e)

    upload.upload(on_upload, upload, [w["dataset"], panel["message"]])

    overrides = [w[n] for n in h.FIELD_OVERRIDES]
    def on_dataset(dataset, preset):
        return df.column_overrides(dataset, preset, ctx.local_only)

    w["dataset"].change(on_dataset, [w["dataset"], w["preset"]], overrides, show_progress="hidden")
    _wire_reward(w)
    _wire_method_boxes(w, parts)

    def on_detect(dataset, config_name, lo, preset, *picked):
        pf, rf, cf, xf, lf = df.fresh_overrides(dataset, preset, list(picked), lo)
        try:
            res = df.detect(dataset, config_name, pf, rf, lo, chosen_field=cf, rejected_field=xf, label_field=lf)
        except Exception as e:  # noqa: BLE001
            return [err(e), gr.update(visible=False)] + [gr.update() for _ in overrides] + [gr.update()]
        cols = [h.AUTO, *res["detection"]["columns"]]
        table = {"headers": list(res["samples"][0]) if res["samples"] else [],
                 "data": [list(s.values()) for s in res["samples"]]}
        # a good detect clears an earlier error about the data from the page (its message box too)
        # every column in view (wrapped text): the first would otherwise take the width and hide the pair's answers
        n = len(table["headers"])
        widths = ["40%"] + [f"{60 // (n - 1)}%"] * (n - 1) if n > 1 else None
        return ([df.detection_markdown(res), gr.update(value=table, visible=True, column_widths=widths)]
                + [gr.update(choices=cols, value=v) for v in (pf, rf, cf, xf, lf)] + [""])

    detect_btn.click(on_detect, [w["dataset"], w["dataset_config"], w["local_only"], w["preset"], *overrides],
                     [detect_md, samples, *overrides, panel["message"]])


def _wire_reward(w: dict) -> None:
    """A reward setting that switches an opt-in component on (a schema, a pattern, a judge) moves its slider to the
    weight it will train with; clearing it moves the slider back to 0 (app.ui.handlers.opt_in_sliders)."""
    import gradio as gr

    names, inputs = list(w), list(w.values())
    switches = [n for n in ("json_schema", "regex", "regex_forbid", "judge_url", "judge_model") if n in w]

    def on_reward_setting(*values):
        moved = h.opt_in_sliders(dict(zip(names, values)))
        return [gr.update(value=moved[n]) if n in moved else gr.update() for n in h.WEIGHTS]

    gr.on([w[n].change for n in switches], on_reward_setting, inputs, [w[n] for n in h.WEIGHTS],
          show_progress="hidden")


def _wire_run(ctx: Context, w: dict, panel: dict) -> None:
    """Start, Stop and the live view of the run (status, progress, curves, log tail) on a timer."""
    import gradio as gr

    names, inputs = list(w), list(w.values())
    shown_curves = gr.State(None)  # the curves_key of what the curves show: redraw only when it changes
    timer = gr.Timer(POLL_SECONDS)

    refused_at = gr.State(0.0)  # when Start was last refused: a run made after it makes that error history

    def on_start(*values):
        try:
            d = h.start_run(ctx.jobs, ctx.runs_dir, dict(zip(names, values)))
        except Exception as e:  # noqa: BLE001
            return err(e), time.time()
        return f"{STARTED} **{d.name}**", 0.0

    panel["start"].click(on_start, inputs, [panel["message"], refused_at])
    panel["stop"].click(lambda: ctx.jobs.stop(), None, panel["message"])

    def on_tick(shown_message, shown_key, refused):
        s = rv.live_status(ctx.jobs, ctx.runs_dir)
        key = s["curves_key"]
        if key == shown_key:
            curves = gr.update()
        else:
            curves = rv.curves(s["run_dir"], s["records"], (s["summary"] or {}).get("max_steps"))
        # A refusal ("already in progress") stops being true when the run ends, and "started X" when X did not
        # start (the status says why): do not leave them on the page.
        stale = bool(shown_message) and not ctx.jobs.is_running() and (
            BUSY_MESSAGE in shown_message or (shown_message.startswith(STARTED) and bool(ctx.jobs.error)))
        # a refused Start's error, once a run was made after it (here, from the CLI or another UI)
        stale = stale or bool(refused and s["run_dir"] is not None and lookup.created(s["run_dir"]) > refused)
        return (gr.update(value="") if stale else gr.update(), s["markdown"], s["progress"], s["log"], curves, key)

    timer.tick(on_tick, [panel["message"], shown_curves, refused_at],
               [panel["message"], panel["status"], panel["progress"], panel["log"], panel["curves"], shown_curves],
               show_progress="hidden")
    # Gradio's own autoscroll does not follow a value set from the server (found in Chromium: at 10/10 the box still
    # showed steps 1-3); after each new tail the page scrolls the box to its newest line.
    panel["log"].change(None, None, None, js=FOLLOW_LOG_JS)
