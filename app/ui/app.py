"""The Gradio Blocks layout: Train, Runs, Compare. Wiring only; the logic lives in handlers / jobs / compare_view.

Every handler is wrapped so that a failure shows up on the page as one red line (the UserError text, or the
exception type and message for a bug) instead of Gradio's generic "Error" toast: errors are never hidden.
"""

import logging
import traceback
from pathlib import Path

from app.config import DEFAULT_GRPO_MODEL
from app.errors import UserError
from app.ui import compare_view as cv
from app.ui import handlers as h
from app.ui.jobs import JobManager

log = logging.getLogger("qlora_app.ui")
POLL_SECONDS = 2.0
PLOT_COLUMNS = ["step", "value", "series"]
# Gradio's LinePlot fixes its colour domain from the first value it renders, so the component plot starts with
# one empty (NaN) point per known component; a series missing from it would be drawn without a colour.
# (Custom reward functions therefore show in the Runs tab's curves.png only, not in the live plot.)
KNOWN_COMPONENTS = ("length", "format", "reference", "boilerplate", "accuracy")
COMPONENT_SEED = [{"step": 1, "value": float("nan"), "series": c} for c in KNOWN_COMPONENTS]


def _err(e: BaseException) -> str:
    if isinstance(e, UserError):
        return f"<span style='color:#b3261e'>error: {e}</span>"
    log.error("UI handler failed:\n%s", traceback.format_exc())
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return f"<span style='color:#b3261e'>error: {type(e).__name__}: {first}</span>"


def _frame(records: list[dict]):
    """Long-format curve data with fixed dtypes: the plot takes its axis types from the dtypes, and an empty
    frame would otherwise be all-object (a discrete axis, no lines drawn)."""
    import pandas as pd

    df = pd.DataFrame(records, columns=PLOT_COLUMNS)
    return df.astype({"step": "int64", "value": "float64", "series": "string"})


def build_app(runs_dir: str | Path, local_only: bool = False, jobs: JobManager | None = None):
    import gradio as gr

    runs_dir = Path(runs_dir).resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    jobs = jobs or JobManager(runs_dir)
    dflt = h.widget_values(h.form_defaults(None, local_only))

    def plots(label_prefix: str, ids: str):
        with gr.Row():
            loss = gr.LinePlot(_frame([]), x="step", y="value", title="loss", height=280,
                               label=f"{label_prefix}loss", elem_id=f"{ids}-loss-plot")
            reward = gr.LinePlot(_frame([]), x="step", y="value", title="reward (total)", height=280,
                                 label=f"{label_prefix}reward", elem_id=f"{ids}-reward-plot")
            comps = gr.LinePlot(_frame(COMPONENT_SEED), x="step", y="value", color="series",
                                title="reward components",
                                height=280, label=f"{label_prefix}reward components", elem_id=f"{ids}-comp-plot")
        return loss, reward, comps

    with gr.Blocks(title="qlora-app", analytics_enabled=False) as demo:
        gr.Markdown(f"## qlora-app — QLoRA fine-tuning on one GPU  \n<small>runs folder: `{runs_dir}`</small>")
        with gr.Tabs():
            # ------------------------------------------------------------------------------------------ Train
            with gr.Tab("Train", id="train", elem_id="tab-train"):
                with gr.Row():
                    with gr.Column(scale=3):
                        w = {}
                        with gr.Row():
                            w["preset"] = gr.Dropdown(h.preset_choices(), value=h.NO_PRESET, label="Preset",
                                                      elem_id="preset")
                            w["method"] = gr.Radio(["grpo", "sft"], value=dflt["method"], label="Method",
                                                   elem_id="method")
                        w["model"] = gr.Textbox(label="Model: hub id or local folder", elem_id="model",
                                                placeholder=f"{DEFAULT_GRPO_MODEL} (default)")
                        with gr.Row():
                            w["dataset"] = gr.Textbox(label="Dataset: name, hub id or local file", scale=3,
                                                      elem_id="dataset", placeholder="gsm8k, arith, data.jsonl")
                            w["dataset_config"] = gr.Textbox(label="Hub config", scale=1, elem_id="dataset-config",
                                                             placeholder="e.g. main")
                        upload = gr.File(label="…or upload a dataset file", file_types=list(h.UPLOAD_TYPES),
                                         height=120, elem_id="upload")
                        detect_btn = gr.Button("Detect fields", elem_id="detect-btn", size="sm")
                        detect_md = gr.Markdown(elem_id="detect-md")
                        samples = gr.Dataframe(headers=["prompt (as the model sees it)", "reference"], wrap=True,
                                               interactive=False, max_height=220, visible=False, elem_id="samples")
                        with gr.Row():
                            w["prompt_field"] = gr.Dropdown([h.AUTO], value=h.AUTO, allow_custom_value=True,
                                                            label="Prompt field (override)", elem_id="prompt-field")
                            w["reference_field"] = gr.Dropdown([h.AUTO], value=h.AUTO, allow_custom_value=True,
                                                               label="Reference field (override)",
                                                               elem_id="reference-field")
                        with gr.Accordion("Training settings", open=True):
                            with gr.Row():
                                w["lora_r"] = gr.Textbox(label="LoRA rank", placeholder="auto", elem_id="lora-r")
                                w["lora_alpha"] = gr.Textbox(label="LoRA alpha", placeholder="auto", elem_id="lora-alpha")
                                w["learning_rate"] = gr.Textbox(label="Learning rate", placeholder="auto",
                                                                elem_id="learning-rate")
                                w["max_steps"] = gr.Number(dflt["max_steps"], label="Max steps (-1 = epochs)",
                                                           precision=0, elem_id="max-steps")
                            with gr.Row():
                                w["batch_size"] = gr.Textbox(label="Per-device batch", placeholder="auto",
                                                             elem_id="batch-size")
                                w["grad_accum"] = gr.Textbox(label="Grad. accumulation", placeholder="auto",
                                                             elem_id="grad-accum")
                                w["max_length"] = gr.Number(dflt["max_length"], label="SFT max length",
                                                            precision=0, elem_id="max-length")
                                w["save_steps"] = gr.Number(dflt["save_steps"], label="Checkpoint every",
                                                            precision=0, elem_id="save-steps")
                            with gr.Row():
                                w["gradient_checkpointing"] = gr.Checkbox(dflt["gradient_checkpointing"],
                                                                          label="Gradient checkpointing",
                                                                          elem_id="grad-ckpt")
                                w["local_only"] = gr.Checkbox(dflt["local_only"], label="Local only (offline)",
                                                              elem_id="local-only")
                                w["run_name"] = gr.Textbox(label="Run name", placeholder="auto", elem_id="run-name")
                        with gr.Accordion("GRPO settings", open=True):
                            with gr.Row():
                                w["num_generations"] = gr.Number(dflt["num_generations"], label="Generations",
                                                                 precision=0, elem_id="num-generations")
                                w["max_completion_length"] = gr.Number(
                                    dflt["max_completion_length"], label="Max completion tokens", precision=0, elem_id="max-completion")
                                w["grpo_temperature"] = gr.Number(dflt["grpo_temperature"], label="Temperature",
                                                                  elem_id="grpo-temperature")
                                w["beta"] = gr.Number(dflt["beta"], label="KL beta", elem_id="beta")
                            with gr.Row():
                                for name, comp in h.WEIGHTS.items():
                                    w[name] = gr.Slider(0, 4, value=dflt[name], step=0.05,
                                                        label=f"reward weight: {comp}", elem_id=f"w-{comp}")
                    with gr.Column(scale=2):
                        memory = gr.Markdown(h.memory_markdown(dflt, runs_dir), elem_id="memory")
                        preview = gr.Textbox(h.cli_preview(dflt, runs_dir), label="Equivalent command", lines=3,
                                             max_lines=8, interactive=False, buttons=["copy"],
                                             elem_id="cli-preview")
                        with gr.Row():
                            start_btn = gr.Button("Start", variant="primary", elem_id="start-btn")
                            stop_btn = gr.Button("Stop", variant="stop", elem_id="stop-btn")
                        message = gr.Markdown(elem_id="train-message")
                        status = gr.Markdown("No run started yet.", elem_id="train-status")
                        progress = gr.HTML(elem_id="train-progress")
                t_loss, t_reward, t_comps = plots("", "train")
                log_box = gr.Textbox(label="train.log (live tail)", lines=12, max_lines=12, autoscroll=True,
                                     interactive=False, elem_id="train-log")
                timer = gr.Timer(POLL_SECONDS)

            # ------------------------------------------------------------------------------------------ Runs
            with gr.Tab("Runs", id="runs", elem_id="tab-runs") as runs_tab:
                with gr.Row():
                    refresh_btn = gr.Button("Refresh", size="sm", elem_id="runs-refresh")
                runs_df = gr.Dataframe(headers=h.RUN_COLUMNS, interactive=False, wrap=True, elem_id="runs-table")
                with gr.Row():
                    run_pick = gr.Dropdown([], label="Run", elem_id="run-pick", scale=3)
                    resume_btn = gr.Button("Resume", elem_id="resume-btn", scale=1)
                run_msg = gr.Markdown(elem_id="run-message")
                run_md = gr.Markdown(elem_id="run-status")
                r_loss, r_reward, r_comps = plots("", "run")
                run_cfg = gr.Code(language="yaml", label="config.yaml", interactive=False, max_lines=30,
                                  elem_id="run-config")

            # ------------------------------------------------------------------------------------------ Compare
            with gr.Tab("Compare", id="compare", elem_id="tab-compare") as cmp_tab:
                with gr.Row():
                    cmp_run = gr.Dropdown([], label="Run (with an adapter)", elem_id="cmp-run", scale=3)
                    cmp_n = gr.Number(0, label="Held-out rows to sample", precision=0, elem_id="cmp-n")
                    cmp_tokens = gr.Number(128, label="Max new tokens", precision=0,
                                           elem_id="cmp-tokens")
                    cmp_local = gr.Checkbox(local_only, label="Local only", elem_id="cmp-local")
                cmp_prompt = gr.Textbox(label="Prompt (optional when sampling rows)", lines=2, elem_id="cmp-prompt")
                cmp_btn = gr.Button("Compare base vs adapter", variant="primary", elem_id="cmp-btn")
                cmp_summary = gr.Markdown(elem_id="cmp-summary")
                cmp_html = gr.HTML(css_template=cv.COMPARE_CSS, elem_id="cmp-html")

        names = list(w)  # the order of the inputs below
        inputs = [w[n] for n in names]

        def form_of(values) -> dict:
            return dict(zip(names, values))

        # --- Train: form -> preview, memory, preset fill, data detection
        def on_form(*values):
            f = form_of(values)
            return h.cli_preview(f, runs_dir), h.memory_markdown(f, runs_dir)

        gr.on([c.change for c in inputs], on_form, inputs, [preview, memory], show_progress="hidden")

        def on_preset(preset):
            try:
                d = h.widget_values(h.form_defaults(preset, local_only))
            except UserError as e:
                return [gr.update() for _ in names] + [_err(e)]
            return [gr.update(value=d[n]) if n != "preset" else gr.update() for n in names] + [""]

        w["preset"].change(on_preset, w["preset"], inputs + [message])

        def on_upload(path):
            try:
                return h.save_upload(path, runs_dir), ""
            except Exception as e:  # noqa: BLE001
                return gr.update(), _err(e)

        upload.upload(on_upload, upload, [w["dataset"], message])

        def on_detect(dataset, config_name, pf, rf, lo):
            try:
                res = h.detect(dataset, config_name, pf, rf, lo)
            except Exception as e:  # noqa: BLE001
                return _err(e), gr.update(visible=False), gr.update(), gr.update()
            cols = [h.AUTO, *res["detection"]["columns"]]
            rows = [list(s.values()) for s in res["samples"]]
            return (h.detection_markdown(res), gr.update(value=rows, visible=True),
                    gr.update(choices=cols), gr.update(choices=cols))

        detect_btn.click(on_detect, [w["dataset"], w["dataset_config"], w["prompt_field"], w["reference_field"],
                                     w["local_only"]], [detect_md, samples, w["prompt_field"], w["reference_field"]])

        # --- Train: start / stop / live view
        def on_start(*values):
            try:
                d = h.start_run(jobs, runs_dir, form_of(values))
            except Exception as e:  # noqa: BLE001
                return _err(e)
            return f"started **{d.name}**"

        start_btn.click(on_start, inputs, message)
        stop_btn.click(lambda: jobs.stop(), None, message)

        def on_tick():
            s = h.live_status(jobs, runs_dir)
            loss, reward, comps = h.curves(s["run_dir"])
            return s["markdown"], s["progress"], s["log"], _frame(loss), _frame(reward), _frame(COMPONENT_SEED + comps)

        timer.tick(on_tick, None, [status, progress, log_box, t_loss, t_reward, t_comps], show_progress="hidden")

        # --- Runs
        def on_refresh(current):
            rows = h.runs_rows(runs_dir)
            choices = [r[0] for r in rows]
            value = current if current in choices else (choices[0] if choices else None)
            return gr.update(value=rows), gr.update(choices=choices, value=value)

        for ev in (refresh_btn.click, runs_tab.select):
            ev(on_refresh, run_pick, [runs_df, run_pick])

        def on_run(name):
            if not name:
                return "", "", _frame([]), _frame([]), _frame(COMPONENT_SEED)
            d = runs_dir / name
            try:
                s = h.run_status(d)
                text = (d / "config.yaml").read_text() if (d / "config.yaml").is_file() else ""
            except Exception as e:  # noqa: BLE001
                return _err(e), "", _frame([]), _frame([]), _frame(COMPONENT_SEED)
            md = h.status_markdown(s) + f"  \nfolder: `{d}`" + (f"  \nlast log line: `{h.log_tail(d, 1)}`"
                                                               if s.get("error") else "")
            loss, reward, comps = h.curves(d)
            return md, text, _frame(loss), _frame(reward), _frame(COMPONENT_SEED + comps)

        run_pick.change(on_run, run_pick, [run_md, run_cfg, r_loss, r_reward, r_comps])

        # (no `from __future__ import annotations` in this module: Gradio reads this annotation at runtime)
        def on_select_row(df, evt: gr.SelectData):
            try:
                return df.iloc[evt.index[0], 0]
            except Exception:  # noqa: BLE001 - a click outside the data rows changes nothing
                return gr.update()

        runs_df.select(on_select_row, runs_df, run_pick)

        def on_resume(name):
            try:
                d = h.resume_run(jobs, runs_dir, name)
            except Exception as e:  # noqa: BLE001
                return _err(e)
            return f"resumed **{d.name}**: follow it on the Train tab"

        resume_btn.click(on_resume, run_pick, run_msg)

        # --- Compare
        def on_cmp_tab(current):
            choices = cv.compare_choices(runs_dir)
            return gr.update(choices=choices, value=current if current in choices else
                             (choices[0] if choices else None))

        cmp_tab.select(on_cmp_tab, cmp_run, cmp_run)

        def on_compare(name, prompt, n, tokens, lo, progress=gr.Progress()):
            try:
                res = cv.compare(jobs, runs_dir, name, prompt, n, tokens, lo,
                                 progress=lambda done, total: progress(done / max(total, 1), desc="generating"))
            except Exception as e:  # noqa: BLE001
                return _err(e), ""
            return cv.compare_summary_markdown(res), cv.compare_html(res)

        cmp_btn.click(on_compare, [cmp_run, cmp_prompt, cmp_n, cmp_tokens, cmp_local], [cmp_summary, cmp_html])

        demo.load(on_refresh, run_pick, [runs_df, run_pick])
    demo.jobs = jobs  # tests and launch() reach the manager through the app
    return demo

