"""The Runs tab: every run in the runs folder with its status, curves and config; Resume (and Extend). The tab
follows the folder: when a run's status or metrics change (a run training, resumed, finished, killed), the table
and the selected run's view refresh on their own."""

from app.run import layout, store
from app.run.summary import run_summary
from app.ui import handlers as h
from app.ui import run_view as rv
from app.ui.folders import run_path
from app.ui.widgets import Context, err, plots

REFRESH_SECONDS = 3.0


def build(ctx: Context, tab):
    """Lays out the tab; returns its refresh function for the app's load event."""
    import gradio as gr

    runs_dir, jobs = ctx.runs_dir, ctx.jobs
    with gr.Row():
        refresh_btn = gr.Button("Refresh", size="sm", elem_id="runs-refresh")
    # Narrow columns get narrow widths so the eleven fit a 1400 px page; the table scrolls sideways below that. Cells
    # wrap: a run's name is what people copy into --resume / compare, so it is shown whole, never cut.
    runs_df = gr.Dataframe(headers=rv.RUN_COLUMNS, interactive=False, wrap=True, elem_id="runs-table",
                           column_widths=["20%", "7%", "6%", "10%", "9%", "6%", "6%", "6%", "6%", "14%", "10%"])
    with gr.Row():
        run_pick = gr.Dropdown([], label="Run", elem_id="run-pick", scale=3)
        extend = gr.Number(None, label="Extend to steps (optional)", precision=0, elem_id="resume-steps", scale=1)
        resume_btn = gr.Button("Resume", elem_id="resume-btn", scale=1)
    run_msg = gr.Markdown(elem_id="run-message")
    run_md = gr.Markdown(elem_id="run-status")
    r_curves = plots("run")
    run_cfg = gr.Code(language="yaml", label="config.yaml", interactive=False, max_lines=30, elem_id="run-config")
    seen = gr.State(None)  # run_view.runs_fingerprint of what the tab shows
    timer = gr.Timer(REFRESH_SECONDS)

    def table(current):
        rows = rv.runs_rows(runs_dir)
        choices = [r[0] for r in rows]
        value = current if current in choices else (choices[0] if choices else None)
        return gr.update(value=rows), gr.update(choices=choices, value=value)

    def view(name):
        if not name:
            return "", "", None
        try:
            d = run_path(runs_dir, name)
            records = store.read_metrics(d)
            s = run_summary(d, records)
            text = (d / layout.CONFIG).read_text() if (d / layout.CONFIG).is_file() else ""
        except Exception as e:  # noqa: BLE001
            return err(e), "", None
        md = rv.status_markdown(s) + f"  \nfolder: `{d}`" + (f"  \nlast log line: `{rv.log_tail(d, 1)}`"
                                                           if s.get("error") else "")
        return md, text, rv.curves(d, records, s.get("max_steps"))

    def on_refresh(current):
        return (*table(current), rv.runs_fingerprint(runs_dir))

    for ev in (refresh_btn.click, tab.select):
        ev(on_refresh, run_pick, [runs_df, run_pick, seen])

    run_pick.change(view, run_pick, [run_md, run_cfg, r_curves])

    def on_tick(current, shown):
        fp = rv.runs_fingerprint(runs_dir)
        if fp == shown:
            return (gr.update(),) * 5 + (shown,)
        rows, pick = table(current)
        return (rows, pick, *(view(current) if current else (gr.update(),) * 3), fp)

    timer.tick(on_tick, [run_pick, seen], [runs_df, run_pick, run_md, run_cfg, r_curves, seen],
               show_progress="hidden")

    # (no `from __future__ import annotations` in this module: Gradio reads this annotation at runtime)
    def on_select_row(df, evt: gr.SelectData):
        try:
            return df.iloc[evt.index[0], 0]
        except Exception:  # noqa: BLE001 - a click outside the data rows changes nothing
            return gr.update()

    runs_df.select(on_select_row, runs_df, run_pick)

    def on_resume(name, steps):
        try:
            d = h.resume_run(jobs, runs_dir, name, steps)
        except Exception as e:  # noqa: BLE001
            return err(e)
        return (f"resumed **{d.name}**" + (f" to step {int(steps)}" if steps else "") +
                ": this view follows it; the Train tab shows its log")

    resume_btn.click(on_resume, [run_pick, extend], run_msg)
    return on_refresh, run_pick, [runs_df, run_pick, seen]
