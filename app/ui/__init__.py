"""The local web UI (`qlora-app ui`): Train with live curves and Stop, browse Runs, Compare base vs adapter.

Gradio is imported only inside the functions that build the page (app/ui/app.py, tabs/, widgets.py): the CLI
imports app.ui.serve at its top and must not pay for Gradio on --help.
"""
