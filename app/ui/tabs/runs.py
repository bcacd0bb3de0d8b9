"""The Runs tab: every run in the runs folder with its status, curves and config; Resume."""

from app import rundir
from app.ui import handlers as h
from app.ui.widgets import Context, components_frame, err, frame, plots


def build(ctx: Context, tab):
    """Lays out the tab; returns its refresh function for the app's load event."""
    import gradio as gr

    runs_dir, jobs = ctx.runs_dir, ctx.jobs
    with gr.Row():
        refresh_btn = gr.Button("Refresh", size="sm", elem_id="runs-refresh")
    runs_df = gr.Dataframe(headers=h.RUN_COLUMNS, interactive=False, wrap=True, elem_id="runs-table")
    with gr.Row():
        run_pick = gr.Dropdown([], label="Run", elem_id="run-pick", scale=3)
        extend = gr.Number(None, label="Extend to steps (optional)", precision=0, elem_id="resume-steps", scale=1)
        resume_btn = gr.Button("Resume", elem_id="resume-btn", scale=1)
    run_msg = gr.Markdown(elem_id="run-message")
    run_md = gr.Markdown(elem_id="run-status")
    r_loss, r_reward, r_comps = plots("run")
    run_cfg = gr.Code(language="yaml", label="config.yaml", interactive=False, max_lines=30, elem_id="run-config")

    def on_refresh(current):
        rows = h.runs_rows(runs_dir)
        choices = [r[0] for r in rows]
        value = current if current in choices else (choices[0] if choices else None)
        return gr.update(value=rows), gr.update(choices=choices, value=value)

    for ev in (refresh_btn.click, tab.select):
        ev(on_refresh, run_pick, [runs_df, run_pick])

    def on_run(name):
        if not name:
            return "", "", frame([]), frame([]), components_frame([])
        d = runs_dir / name
        try:
            records = rundir.read_metrics(d)
            s = h.run_status(d, records)
            text = (d / rundir.CONFIG).read_text() if (d / rundir.CONFIG).is_file() else ""
        except Exception as e:  # noqa: BLE001
            return err(e), "", frame([]), frame([]), components_frame([])
        md = h.status_markdown(s) + f"  \nfolder: `{d}`" + (f"  \nlast log line: `{h.log_tail(d, 1)}`"
                                                           if s.get("error") else "")
        loss, reward, comps = h.curves(d, records)
        return md, text, frame(loss), frame(reward), components_frame(comps)

    run_pick.change(on_run, run_pick, [run_md, run_cfg, r_loss, r_reward, r_comps])

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
        return f"resumed **{d.name}**" + (f" to step {int(steps)}" if steps else "") + ": follow it on the Train tab"

    resume_btn.click(on_resume, [run_pick, extend], run_msg)
    return on_refresh, run_pick, [runs_df, run_pick]
