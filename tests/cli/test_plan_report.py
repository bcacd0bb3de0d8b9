"""app/cli/plan_report.py: the end of a run says each of the plan's steps once, briefly, and where the whole reasons
are (config.yaml's header)."""

from rich.console import Console

from app.cli.plan_report import print_run_summary
from app.run import layout, newrun, store


def test_the_summary_says_each_step_once_and_points_at_the_whole_reasons(tmp_path):
    d = newrun.new_run_dir(tmp_path, "20261127-120000-sft-shapes")
    (d / layout.CONFIG).write_text("method: sft\nmodel: {name_or_path: tiny}\n")
    steps = ["model.images: null -> true, training.packing: null -> false (images: column 'image', 1 per row)",
             "training.max_length: 1024 -> 256 (the model's context is 256 tokens)"]
    store.write_status(d, layout.FINISHED, step=3, adjustments=steps)
    console = Console(record=True, width=200)
    print_run_summary(d, console)
    text = console.export_text()
    assert [line for line in text.splitlines() if "adjusted" in line and "model.images" in line][0].count(
        "images: column 'image'") == 1
    assert text.count("adjusted") == 2 and text.count("(the whole reasons: config.yaml's header)") == 1
    store.write_status(d, layout.FINISHED, adjustments=[])
    quiet = Console(record=True, width=200)
    print_run_summary(d, quiet)
    assert "config.yaml's header" not in quiet.export_text()
