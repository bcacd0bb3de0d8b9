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


def test_runs_from_data_files_of_one_name_are_told_apart(tmp_path, capsys):
    """`runs list` names a data file with its folder (people's data files are all data.json); a model folder and a
    hub id as before."""
    from app.cli.plan_report import print_runs

    for i, folder in enumerate(("shapes", "colors")):
        d = newrun.new_run_dir(tmp_path / "runs", f"20261127-12000{i}-sft-data-json")
        (d / layout.CONFIG).write_text(f"method: sft\nmodel: {{name_or_path: {tmp_path}/models/tiny-vlm}}\n"
                                       f"data: {{dataset: {tmp_path}/{folder}/data.json}}\n")
        store.write_status(d, layout.FINISHED, step=1)
    hub = newrun.new_run_dir(tmp_path / "runs", "20261127-120009-sft-gsm8k")
    (hub / layout.CONFIG).write_text("method: sft\nmodel: {name_or_path: Qwen/Qwen3-0.6B}\n"
                                     "data: {dataset: openai/gsm8k}\n")
    store.write_status(hub, layout.FINISHED, step=1)
    console = Console(record=True, width=250)
    print_runs(tmp_path / "runs", console)
    text = console.export_text() + capsys.readouterr().out  # piped (as here): every column, on stdout
    assert "shapes/data.json" in text and "colors/data.json" in text and "tiny-vlm" in text
    assert "openai/gsm8k" in text and "Qwen/Qwen3-0.6B" in text
    assert str(tmp_path / "shapes") not in text and str(tmp_path / "models") not in text  # a path's last parts
