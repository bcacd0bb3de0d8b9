"""The local web UI (`qlora-app ui`): Train with live curves and Stop, browse Runs, Compare base vs adapter.

Gradio is imported only inside functions (app.ui.app / app.ui.launch): the CLI imports nothing from here for --help.
"""
