"""The local web UI (`qlora-app ui`): Train with live curves and Stop, browse Runs, Compare base vs adapter.

Gradio is imported only inside the functions that build the page (app/ui/app.py, tabs/, widgets.py): the CLI
imports app.ui.serve at its top and must not pay for Gradio on --help.

The buttons' functions are plain modules: handlers.py (the form <-> the command line, start / resume) and
data_form.py (the form's dataset: upload, detect fields, column overrides); jobs.py (the one training
subprocess), run_view.py, compare_view.py, chat_view.py (what the Runs, Compare and Chat tabs show), folders.py
(where runs and uploads live), serve.py (the server's exposure).

Owns: the pages and what they show. Must not train, plan or write a run folder: Start builds the config and
runs `qlora-app train` in a subprocess; it may import the planner (app/train/planning/plan.py, memory.py) for per-card
verdicts, never the session or the trainers (tests/structure/test_architecture.py).
"""
