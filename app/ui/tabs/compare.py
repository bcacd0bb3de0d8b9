"""The Compare tab: base vs adapter for a run, the summary and each prompt side by side (app.eval.render)."""

from app.eval import render
from app.ui import compare_view as cv
from app.ui.widgets import Context, err


def build(ctx: Context, tab) -> None:
    import gradio as gr

    runs_dir, jobs = ctx.runs_dir, ctx.jobs
    with gr.Row():
        cmp_run = gr.Dropdown([], label="Run (with an adapter)", elem_id="cmp-run", scale=3)
        cmp_n = gr.Number(cv.DEFAULT_ROWS, label="Held-out rows to sample (0: only the prompt below)", precision=0,
                          minimum=0, elem_id="cmp-n")
        cmp_tokens = gr.Number(128, label="Max new tokens", precision=0, elem_id="cmp-tokens")
        cmp_local = gr.Checkbox(ctx.local_only, label="Local only", elem_id="cmp-local")
    cmp_prompt = gr.Textbox(label="Prompt (optional when sampling rows)", lines=2, elem_id="cmp-prompt")
    cmp_btn = gr.Button("Compare base vs adapter", variant="primary", elem_id="cmp-btn")
    cmp_summary = gr.Markdown(elem_id="cmp-summary")
    cmp_html = gr.HTML(css_template=render.CSS, elem_id="cmp-html")

    def on_tab(current):
        choices = cv.compare_choices(runs_dir)
        return gr.update(choices=choices, value=current if current in choices else (choices[0] if choices else None))

    tab.select(on_tab, cmp_run, cmp_run)

    def on_compare(name, prompt, n, tokens, lo, progress=gr.Progress()):
        try:
            res = cv.compare(jobs, runs_dir, name, prompt, n, tokens, lo,
                             progress=lambda done, total: progress(done / max(total, 1), desc="generating"))
        except Exception as e:  # noqa: BLE001
            return err(e), ""
        return render.summary_markdown(res), render.rows_html(res)

    cmp_btn.click(on_compare, [cmp_run, cmp_prompt, cmp_n, cmp_tokens, cmp_local], [cmp_summary, cmp_html])
