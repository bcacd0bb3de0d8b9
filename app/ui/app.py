"""The Gradio Blocks app: a header and four tabs, each laid out and wired by its own builder in app/ui/tabs/.

The logic lives in handlers / jobs / compare_view (no Gradio there). Every handler shows a failure on the page as
one red line (the UserError text, or the exception type and message for a bug) instead of Gradio's generic
"Error" toast: errors are never hidden.
"""

from pathlib import Path

from app.ui.jobs import JobManager
from app.ui.tabs import chat as chat_tab
from app.ui.tabs import compare as compare_tab
from app.ui.tabs import runs as runs_tab
from app.ui.tabs import train as train_tab
from app.ui.widgets import Context

# The log box shows tables and aligned columns (the end-of-run summary): a monospace font that does not wrap them.
# A run's name in the Runs table is what people copy into --resume / compare: it wraps (at its dashes), never cut.
CSS = ("#train-log textarea {font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; "
       "white-space: pre; overflow-x: auto} "
       "#runs-table td:first-child .cell-wrap {white-space: normal; overflow-wrap: anywhere}")


def build_app(runs_dir: str | Path, local_only: bool = False, jobs: JobManager | None = None):
    import gradio as gr

    runs_dir = Path(runs_dir).resolve()
    runs_dir.mkdir(parents=True, exist_ok=True)
    ctx = Context(runs_dir=runs_dir, jobs=jobs or JobManager(runs_dir), local_only=local_only)

    with gr.Blocks(title="qlora-app", analytics_enabled=False) as demo:
        gr.Markdown(f"## qlora-app — QLoRA fine-tuning on one GPU  \n<small>runs folder: `{runs_dir}`</small>")
        with gr.Tabs():
            with gr.Tab("Train", id="train", elem_id="tab-train"):
                train_tab.build(ctx)
            with gr.Tab("Runs", id="runs", elem_id="tab-runs") as tab:
                refresh, run_pick, refreshed = runs_tab.build(ctx, tab)
            with gr.Tab("Compare", id="compare", elem_id="tab-compare") as tab:
                compare_tab.build(ctx, tab)
            with gr.Tab("Chat", id="chat", elem_id="tab-chat") as tab:
                chat_tab.build(ctx, tab)
        demo.load(refresh, run_pick, refreshed)
    demo.jobs = ctx.jobs  # tests and launch() reach the manager through the app
    return demo
