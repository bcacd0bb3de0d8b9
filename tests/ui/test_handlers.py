"""The UI's handler functions in-process: the form builds the CLI's config, the preview is the same run, uploads,
field detection, run listing and curves. (The job manager is in test_jobs.py, the browser in test_ui_browser.py.)"""

import json
import os
import shlex
from pathlib import Path

import pytest
from repo_paths import SCHEMAS
from typer.testing import CliRunner

from app.cli.main import app as cli_app
from app.config.build import build_config
from app.config.presets import load_preset
from app.config.resolve import resolve
from app.errors import UserError
from app.run import layout, lookup, newrun, store
from app.run.summary import run_summary
from app.ui import data_form as df
from app.ui import handlers as h
from app.ui import run_view as rv
from app.ui.serve import launch_kwargs, parse_auth


def _edited_form(model: str, data: str) -> dict:
    """A user picks the 8 GB preset and changes a mix of flag-backed and --set-backed fields."""
    f = h.form_defaults("gpu-8gb")
    f.update(method="sft", model=model, dataset=data, prompt_field="question", reference_field="(auto)",
             max_steps=3.0, local_only=True, lora_r=8.0, lora_alpha=None, learning_rate=1e-4, batch_size=2,
             grad_accum=1, gradient_checkpointing=False, max_length=96, save_steps=2, num_generations=2,
             max_completion_length=12, w_format=0.75, run_name="my-run", early_stop=2)
    return f


def _cli_config(model: str, data: str, runs: Path):
    """build_config called exactly the way app/cli/main.py's `train` calls it for the same choices."""
    flags = {
        "method": "sft", "model": {"name_or_path": model},
        "data": {"dataset": data, "config_name": None, "prompt_field": "question", "reference_field": None},
        "training": {"max_steps": 3}, "runtime": {"local_only": True}, "reward": {"custom": None},
        "output_dir": str(runs),
    }
    sets = ["lora.r=8", "lora.alpha=", "training.learning_rate=1e-4", "per_device_train_batch_size=2",
            "gradient_accumulation_steps=1", "gradient_checkpointing=false", "training.max_length=96",
            "save_steps=2", "num_generations=2", "max_completion_length=12", "run_name=my-run",
            "training.early_stop.patience=2",
            "reward.weights.length=0.25", "reward.weights.format=0.75", "reward.weights.reference=2",
            "reward.weights.boilerplate=1"]
    return build_config(load_preset("gpu-8gb"), flags, sets)


def test_untouched_form_is_the_preset(tmp_path):
    form = h.form_defaults("gsm8k-grpo")
    preset, flags, sets, argv = h.form_to_cli(form, tmp_path)
    assert preset == "gsm8k-grpo" and sets == [] and form["early_stop"] == 4  # the preset's early stopping shown
    assert argv == ["qlora-app", "train", "--preset", "gsm8k-grpo", "--output-dir", str(tmp_path)]
    assert h.config_from_form(form, tmp_path) == build_config(load_preset("gsm8k-grpo"), {"output_dir": str(tmp_path)})


def test_form_config_equals_cli_config(tmp_path):
    form = _edited_form("/models/tiny", "/data/math.jsonl")
    ui_cfg = h.config_from_form(form, tmp_path)
    assert ui_cfg == _cli_config("/models/tiny", "/data/math.jsonl", tmp_path)
    # and the edits really landed (the comparison above is not vacuous)
    assert ui_cfg.method == "sft" and ui_cfg.lora.r == 8 and ui_cfg.lora.alpha is None
    assert ui_cfg.training.max_steps == 3 and ui_cfg.runtime.local_only and ui_cfg.data.prompt_field == "question"
    assert ui_cfg.reward.weights == {"length": 0.25, "format": 0.75, "reference": 2.0, "boilerplate": 1.0}
    assert ui_cfg.grpo.num_generations == 2 and ui_cfg.run_name == "my-run"


def test_cli_preview_runs_the_same_config(tmp_path, tiny_model):
    """The preview string, run through the real CLI (--dry-run), prints the resolved config the UI would run."""
    import shutil

    model = tmp_path / "models" / "tiny model"  # spaces must survive quoting; a dry run checks the folder is there
    shutil.copytree(tiny_model, model)
    data = tmp_path / "data" / "my data.jsonl"  # the dry run reads a local file as the run would
    data.parent.mkdir()
    data.write_text("".join(f'{{"question": "q{i}?", "answer": "{i}"}}\n' for i in range(20)))
    form = _edited_form(str(model), str(data))
    preview = h.form_view(form, tmp_path)[0]
    argv = shlex.split(preview)
    assert argv[:2] == ["qlora-app", "train"]
    res = CliRunner().invoke(cli_app, argv[1:] + ["--dry-run"])
    assert res.exit_code == 0, res.output
    printed = res.stdout.split("note:")[0].strip()
    # the plan's adjustments: the reference match it chose for the proof, and the best adapter kept for early
    # stopping (said on top, the values in the body)
    assert printed.startswith("# qlora-app adjusted") and "reward.reference_match: auto -> numeric" in printed
    assert "training.keep_best: false -> true (early stopping" in printed
    body = "\n".join(line for line in printed.splitlines() if not line.startswith("#"))
    cfg = h.config_from_form(form, tmp_path)
    cfg = cfg.model_copy(update={"reward": cfg.reward.model_copy(update={"reference_match": "numeric"}),
                                 "training": cfg.training.model_copy(update={"keep_best": True})})
    assert body.strip() == resolve(cfg).to_yaml().strip()


def test_one_weight_slider_keeps_the_other_weights(tmp_path):
    form = h.form_defaults(None)
    form["w_boilerplate"] = 0.0
    cfg = h.config_from_form(form, tmp_path)
    assert cfg.reward.weights == {"length": 0.25, "format": 0.5, "reference": 2.0, "boilerplate": 0.0}
    # only the moved slider is passed: weights merge key by key
    assert [s for s in h.form_to_cli(form, tmp_path)[2] if s.startswith("reward.")] == ["reward.weights.boilerplate=0.0"]


def test_processes_field_reaches_the_config_and_the_command(tmp_path):
    form = h.form_defaults(None)
    assert form["num_processes"] == 1
    form["num_processes"] = 2.0  # a Gradio number box sends floats
    preset, flags, sets, argv = h.form_to_cli(form, tmp_path)
    assert h.config_from_form(form, tmp_path).runtime.num_processes == 2
    assert argv[argv.index("--num-processes") + 1] == "2"


def test_text_number_boxes(tmp_path):
    """Rank, alpha, LR, batch and accumulation are text boxes so they can be empty (= auto)."""
    form = h.widget_values(h.form_defaults("gpu-8gb"))
    assert form["lora_r"] == "16" and form["learning_rate"] == "" and form["prompt_field"] == h.AUTO
    form.update(lora_r="8", learning_rate="5e-5", batch_size=" ", grad_accum="2")
    cfg = h.config_from_form(form, tmp_path)
    assert cfg.lora.r == 8 and cfg.training.learning_rate == 5e-5
    assert cfg.training.per_device_train_batch_size is None  # emptied: back to auto
    form["lora_r"] = "eight"
    assert "LoRA rank must be a number" in h.form_view(form, tmp_path)[0]


def test_invalid_form_shows_why_in_the_preview(tmp_path):
    form = h.form_defaults(None)
    form.update(batch_size=3, grad_accum=1, num_generations=4)  # 3 completions cannot form groups of 4
    assert h.form_view(form, tmp_path)[0].startswith("# not valid yet: ")
    assert "num_generations" in h.form_view(form, tmp_path)[0]
    with pytest.raises(UserError):
        h.config_from_form(form, tmp_path)
    assert "not available" in h.form_view(form, tmp_path)[1]


def test_memory_markdown_for_a_preset(tmp_path):
    md = h.form_view(h.form_defaults("gpu-8gb"), tmp_path)[1]
    assert "torch's peak" in md and "8 GB: <span style='color:#137333'>**fits**</span>" in md


def test_save_upload(tmp_path):
    src = tmp_path / "data.jsonl"
    src.write_text('{"question": "1+1?", "answer": "2"}\n')
    runs = tmp_path / "runs"
    p1 = Path(df.save_upload(str(src), runs))
    assert p1.parent == (runs / df.UPLOAD_DIR).resolve() and p1.read_text() == src.read_text()
    assert Path(df.save_upload(str(src), runs)) == p1  # same content, same file
    src.write_text('{"question": "2+2?", "answer": "4"}\n')
    p2 = Path(df.save_upload(str(src), runs))
    assert p2 != p1 and p1.read_text() != p2.read_text()  # new content never overwrites the old upload
    bad = tmp_path / "notes.txt"
    bad.write_text("x")
    with pytest.raises(UserError, match="upload one dataset file .*got notes.txt"):
        df.save_upload(str(bad), runs)
    assert lookup.list_runs(runs) == []  # the upload folder is not a run


def test_a_data_file_uploaded_with_its_pictures_finds_them(tmp_path):
    """The UI's upload takes the data file with its pictures: they are kept in one folder beside it, and the rows'
    picture paths (pics/0.png) are found there by name; Detect shows them. Anything but one data file (and
    pictures) is one line."""
    from PIL import Image

    rows = [{"image": f"pics/{i}.png", "question": "colour?", "answer": "red"} for i in range(3)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    for i in range(3):  # as Gradio hands them: each file in a temp folder of its own, the folders lost
        (tmp_path / f"up{i}").mkdir()
        Image.new("RGB", (8, 8), "red").save(tmp_path / f"up{i}" / f"{i}.png")
    runs = tmp_path / "runs"
    saved = Path(df.save_upload([str(tmp_path / "data.jsonl"), *(str(tmp_path / f"up{i}" / f"{i}.png")
                                                                 for i in range(3))], runs))
    assert saved.name == "data.jsonl" and sorted(p.name for p in saved.parent.iterdir()) == [
        ".pictures-by-name", "0.png", "1.png", "2.png", "data.jsonl"]  # marked: pictures kept by name
    res = df.detect(str(saved), local_only=True)
    assert res["detection"]["image_field"] == "image" and len(res["thumbnails"]) == 3
    for bad, said in ((["a.txt"], "got a.txt"), ([], "no file uploaded"),
                      ([str(tmp_path / "up0" / "0.png")], "got only pictures")):
        if bad and bad[0] == "a.txt":
            (tmp_path / "a.txt").write_text("x")
            bad = [str(tmp_path / "a.txt")]
        with pytest.raises(UserError, match=said):
            df.save_upload(bad, runs)


def test_pictures_in_class_folders_are_never_swapped(tmp_path):
    """cats/1.png and dogs/1.png: loose, the browser sends both as 1.png, so the upload is refused in one line that
    says to zip them; as a .zip their folders are kept and every row shows its own picture (Detect's thumbnails are
    the rows' colours). A zip that climbs out of its folder, or is no zip, is one line."""
    import zipfile

    from PIL import Image

    rows = [{"image": f"{k}/{i}.png", "question": "colour?", "answer": c}
            for k, c in (("cats", "red"), ("dogs", "blue")) for i in range(2)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    loose = []
    for k, c in (("cats", "red"), ("dogs", "blue")):
        for i in range(2):
            (tmp_path / "up" / k).mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8), c).save(tmp_path / "up" / k / f"{i}.png")
            loose.append(str(tmp_path / "up" / k / f"{i}.png"))
    runs = tmp_path / "runs"
    with pytest.raises(UserError, match=r"two different pictures are named '0.png'.*one \.zip that keeps their"):
        df.save_upload([str(tmp_path / "data.jsonl"), *loose], runs)
    assert not (runs / df.UPLOAD_DIR).exists() or not any((runs / df.UPLOAD_DIR).rglob("*.png"))
    with zipfile.ZipFile(tmp_path / "pics.zip", "w") as z:
        for k in ("cats", "dogs"):
            for i in range(2):
                z.write(tmp_path / "up" / k / f"{i}.png", f"{k}/{i}.png")
    saved = Path(df.save_upload([str(tmp_path / "data.jsonl"), str(tmp_path / "pics.zip")], runs))
    assert sorted(p.relative_to(saved.parent).as_posix() for p in saved.parent.rglob("*.png")) == [
        "cats/0.png", "cats/1.png", "dogs/0.png", "dogs/1.png"]
    assert not (saved.parent / ".pictures-by-name").exists()  # in their folders: read by their paths only
    res = df.detect(str(saved), local_only=True)
    colours = []
    for url in res["thumbnails"]:
        import base64
        import io

        img = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB")
        colours.append(img.getpixel((4, 4)))
    assert colours == [(255, 0, 0), (255, 0, 0), (0, 0, 255), (0, 0, 255)]
    with zipfile.ZipFile(tmp_path / "all.zip", "w") as z:  # the data file inside the zip too, under a folder
        z.write(tmp_path / "data.jsonl", "set/data.jsonl")
        z.write(tmp_path / "up/dogs/0.png", "set/cats/0.png")
    inside = Path(df.save_upload(str(tmp_path / "all.zip"), runs))
    assert inside.name == "data.jsonl" and (inside.parent / "cats" / "0.png").is_file()
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as z:
        z.writestr("../../escape.png", b"x")
        z.writestr("data.jsonl", "{}")
    with pytest.raises(UserError, match="a path outside its folder"):
        df.save_upload(str(tmp_path / "evil.zip"), runs)
    (tmp_path / "broken.zip").write_bytes(b"not a zip")
    with pytest.raises(UserError, match="not a readable .zip"):
        df.save_upload(str(tmp_path / "broken.zip"), runs)
    assert not list(tmp_path.rglob("escape.png"))


def test_detect_right_after_a_new_path_drops_the_presets_columns():
    """Detect clicked before the dataset's change event cleared the preset's column overrides: the preset's own
    columns on another dataset are dropped, a column the user picked is kept, the preset's own dataset keeps them."""
    picked = ["question", "answer", h.AUTO, h.AUTO, h.AUTO]  # demo-grpo's, still in the dropdowns
    other = str(SCHEMAS / "hh_rlhf.jsonl")
    assert df.fresh_overrides(other, "demo-grpo", picked) == [h.AUTO] * 5
    assert df.fresh_overrides(other, "demo-grpo", ["chosen", h.AUTO, h.AUTO, h.AUTO, h.AUTO]) == ["chosen"] + [
        h.AUTO] * 4
    assert df.fresh_overrides("arith", "demo-grpo", picked) == picked
    res = df.detect(other, None, *df.fresh_overrides(other, "demo-grpo", picked)[:2], local_only=True)
    assert res["detection"]["format"] == "preference"  # before: "column 'question' not found"


def test_detect_fields_and_override(math_jsonl):
    res = df.detect(str(math_jsonl))
    d = res["detection"]
    assert d["prompt_field"] == "question" and d["reference_field"] == "answer"
    assert d["reasons"]["prompt_field"] and d["num_rows"] == 40 and d["columns"] == ["question", "answer"]
    assert len(res["samples"]) == 3 and "apples" in res["samples"][0]["prompt (as the model sees it)"]
    md = df.detection_markdown(res)
    assert "`question`" in md and "`answer`" in md and "40 rows" in md
    # the reference match auto picks for this column, said as `inspect` says it
    assert res["reference_match"]["mode"] == "numeric" and "- **reference match** (auto): `numeric`" in md
    swapped = df.detect(str(math_jsonl), prompt_field="answer", reference_field="question")
    assert swapped["detection"]["prompt_field"] == "answer"
    assert "override" in swapped["detection"]["reasons"]["prompt_field"]


def test_detect_errors_are_user_errors(tmp_path):
    with pytest.raises(UserError):
        df.detect("")
    with pytest.raises(UserError):
        df.detect(str(tmp_path / "missing.jsonl"), local_only=True)


def _fake_run(runs: Path, name: str, status: str, pid=None, metrics=(), error=None, **fields) -> Path:
    d = newrun.new_run_dir(runs, name)
    (d / layout.CONFIG).write_text("method: grpo\nmodel: {name_or_path: tiny}\ndata: {dataset: arith}\n")
    store.write_status(d, status, pid=pid, started=1.7e9, step=len(metrics), max_steps=3, error=error, **fields)
    for rec in metrics:
        store.append_metrics(d, rec)
    return d


def test_runs_rows_curves_and_stale_runs(tmp_path):
    recs = [{"step": i, "loss": 1.0 / i, "reward": 0.1 * i, "rewards/format/mean": 0.2 * i,
             "rewards/length/mean": -0.1} for i in (1, 2, 3)]
    _fake_run(tmp_path, "done", layout.FINISHED, metrics=recs)
    _fake_run(tmp_path, "crashed", layout.FAILED, error="OutOfMemoryError: CUDA out of memory")
    _fake_run(tmp_path, "ghost", layout.RUNNING, pid=2**22 + 7)  # no such process
    rows = {r[0]: r for r in rv.runs_rows(tmp_path)}
    assert rows["done"][1] == "finished" and rows["done"][5] == "3/3" and rows["done"][7] == 0.3
    assert rows["crashed"][1] == "failed"
    assert rows["ghost"][1] == layout.CRASHED  # status.json says running, the process is gone
    fig = rv.curves(tmp_path / "done", max_steps=3)  # the figure curves.png is drawn from
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles[0].startswith("loss") and titles[1].startswith("reward (total") and "components" in titles[2]
    raw = fig.axes[0].get_lines()[0]  # every logged point, a marker each (the smoothed line over it)
    assert list(raw.get_ydata()) == [1.0, 0.5, 1 / 3] and raw.get_marker() == "o"
    assert [t.get_text() for t in fig.axes[2].get_legend().get_texts()] == ["length", "format"]
    waiting = rv.curves(tmp_path / "crashed")  # nothing logged yet: it says so, not a blank or empty chart
    assert [t.get_text() for t in waiting.texts] == ["waiting for the first logged step"]
    assert "OutOfMemoryError" in rv.status_markdown(run_summary(tmp_path / "crashed"))


def test_run_view_shows_peak_memory(tmp_path):
    gpu = {"peak_mem_allocated_gib": 5.2, "peak_mem_reserved_gib": 5.71, "peak_mem_device": "cuda"}
    fitted = "grpo.max_completion_length: 256 -> 128 (it filled the model's context)"
    _fake_run(tmp_path, "gpu", layout.FINISHED, fast_paths="sampling from a merged 16-bit copy, compiled",
              adjustments=[fitted], **gpu)
    shown = rv.status_markdown(run_summary(tmp_path / "gpu"))
    assert "peak memory: 5.71 GiB reserved (5.20 GiB allocated) on the GPU" in shown
    assert "fast paths: sampling from a merged 16-bit copy, compiled" in shown
    assert f"adjusted {fitted}" in shown  # what the plan changed, and why
    # a crashed run has no final status write: the last logged peak stands in
    cpu = {"peak_mem_allocated_gib": 0.8, "peak_mem_reserved_gib": 0.8, "peak_mem_device": "cpu (peak RSS)"}
    _fake_run(tmp_path, "cpu", layout.FAILED, metrics=[{"step": 1, "loss": 1.0, **cpu}])
    assert "peak memory: 0.80 GiB peak RSS (CPU)" in rv.status_markdown(run_summary(tmp_path / "cpu"))
    _fake_run(tmp_path, "old", layout.FINISHED)  # runs from before peak memory was recorded
    assert "peak memory" not in rv.status_markdown(run_summary(tmp_path / "old"))


def test_log_tail_shows_the_latest_progress_bar_state(tmp_path):
    (tmp_path / layout.LOG).write_text("start\n 10%\r 50%\r100%\nerror: boom\n")
    assert rv.log_tail(tmp_path) == "start\n100%\nerror: boom"
    assert rv.log_tail(tmp_path, 1) == "error: boom"
    assert rv.log_tail(None) == ""


def test_launch_defaults_are_safe(tmp_path):
    kw = launch_kwargs("127.0.0.1", 7860, False, None, tmp_path)
    assert kw["server_name"] == "127.0.0.1" and kw["share"] is False and kw["auth"] is None
    assert kw["allowed_paths"] == [str(tmp_path.resolve()), str(tmp_path.resolve() / df.UPLOAD_DIR)]
    assert kw["max_file_size"] and kw["enable_monitoring"] is False
    assert launch_kwargs("0.0.0.0", 1, True, "alice:pw:x", tmp_path)["auth"] == ("alice", "pw:x")
    for bad in ("alice", ":pw", "alice:"):
        with pytest.raises(UserError, match="USER:PASS"):
            parse_auth(bad)


def test_blocks_build_with_analytics_off(tmp_path):
    from app.ui.app import build_app

    demo = build_app(tmp_path / "runs")
    assert demo.analytics_enabled is False
    cfg = json.dumps(demo.get_config_file(), default=str)  # (gr.State carries a callback)
    for elem in ("start-btn", "stop-btn", "detect-btn", "cli-preview", "runs-table", "cmp-btn", "train-curves",
                 "run-curves"):
        assert elem in cfg, elem


def test_ui_errors_name_the_page_controls_not_cli_flags():
    from app.errors import UserError
    from app.ui.widgets import err, in_ui_words

    assert in_ui_words("no text column; pass --prompt-field NAME or a dataset with one") == \
        "no text column; pass 'Prompt field (override)' or a dataset with one"
    shown = err(UserError("run 'qlora-app prefetch --model org/x' or use --model arith-base"))
    assert "run 'qlora-app prefetch --model org/x' or use 'Model' = arith-base" in shown
    assert in_ui_words("--max-steps-x and --set lora.r=4 stay") == "--max-steps-x and --set lora.r=4 stay"


def test_runs_fingerprint_changes_whenever_a_runs_view_would(tmp_path, monkeypatch):
    """The Runs tab refreshes on its own when this changes: a step logged, a status written, a run made, and a
    'running' process that died without writing anything (kill -9)."""
    d = _fake_run(tmp_path, "r", layout.RUNNING, pid=os.getpid())
    seen = rv.runs_fingerprint(tmp_path)
    assert rv.runs_fingerprint(tmp_path) == seen  # nothing changed: no redraw
    store.append_metrics(d, {"step": 1, "loss": 1.0})
    assert rv.runs_fingerprint(tmp_path) != seen
    seen = rv.runs_fingerprint(tmp_path)
    store.write_status(d, layout.FINISHED)
    assert rv.runs_fingerprint(tmp_path) != seen
    seen = rv.runs_fingerprint(tmp_path)
    from app.run import benchmarks

    benchmarks.write_eval(d, {"table": []})  # `qlora-app eval` kept an evaluation: the run view shows it
    assert rv.runs_fingerprint(tmp_path) != seen
    seen = rv.runs_fingerprint(tmp_path)
    _fake_run(tmp_path, "ghost", layout.RUNNING, pid=2**22 + 7)
    assert rv.runs_fingerprint(tmp_path) != seen
    # the same files, but whether the process behind a "running" status lives changes
    before = rv.runs_fingerprint(tmp_path)
    monkeypatch.setattr(rv, "pid_alive", lambda pid: True)
    assert rv.runs_fingerprint(tmp_path) != before


def test_short_sources_fit_the_table():
    assert rv._short_source("/work/app/assets/arith-base") == "arith-base"
    assert rv._short_source("./data/my.jsonl") == "my.jsonl"
    assert rv._short_source("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"  # a hub id stays whole
    assert rv._short_source(None) == ""


def test_runs_from_the_demo_folder_are_shown_beside_the_runs_folder(tmp_path):
    """`qlora-app demo` writes demo-runs/ beside runs/: the Runs, Compare and Chat tabs list those runs too."""
    from app.run import layout, newrun
    from app.ui import compare_view as cv
    from app.ui.folders import run_path

    for folder, name in (("runs", "20261125-100000-grpo-arith"), ("demo-runs", "demo-grpo")):
        d = newrun.new_run_dir(tmp_path / folder, name)
        (d / layout.CONFIG).write_text("method: grpo\nmodel: {name_or_path: arith-base}\ndata: {dataset: arith}\n")
        (d / layout.ADAPTER).mkdir()
        (d / layout.ADAPTER / layout.ADAPTER_CONFIG).write_text("{}")
    rows = rv.runs_rows(tmp_path / "runs")
    assert [r[0] for r in rows] == ["20261125-100000-grpo-arith", "demo-runs/demo-grpo"]
    assert cv.compare_choices(tmp_path / "runs") == [r[0] for r in rows]
    assert run_path(tmp_path / "runs", "demo-runs/demo-grpo") == (tmp_path / "demo-runs" / "demo-grpo").resolve()
    with pytest.raises(UserError, match="is not in"):
        run_path(tmp_path / "runs", "nope")


def test_the_compare_summary_says_what_its_figures_are_of():
    from app.eval.render import summary_markdown
    from app.eval.result import Cell, Comparison, Row

    def cell(correct):
        return Cell(text="x", tokens=1, reward=1.0 if correct else 0.0, components={}, correct=correct)

    rows = [Row(prompt=f"q{i}", reference="1", source="heldout", base=cell(False), adapter=cell(i % 2 == 0))
            for i in range(6)]
    rows.append(Row(prompt="typed", reference=None, source="prompt", base=cell(None), adapter=cell(None)))
    md = summary_markdown(Comparison.of(rows, {}))
    assert "summary over 6 held-out rows (your 1 prompt(s) are shown, not counted" in md
    assert "| accuracy (6 with reference) | 0.0% | 50.0% |" in md and "| mean reward | 0.000 | 0.500 |" in md





def test_dpo_form_is_the_cli_config(tmp_path):
    """Method dpo, the pair overrides and the DPO accordion reach the same config the CLI builds."""
    f = h.form_defaults("dpo")
    f.update(dataset=str(SCHEMAS / "hh_rlhf.jsonl"), chosen_field="chosen", rejected_field="rejected",
             dpo_loss="sigmoid,sft", dpo_beta=0.25, max_steps=5.0)
    ui_cfg = h.config_from_form(f, tmp_path)
    assert ui_cfg.method == "dpo" and ui_cfg.dpo.loss_type == ["sigmoid", "sft"] and ui_cfg.dpo.beta == 0.25
    assert ui_cfg.data.chosen_field == "chosen" and ui_cfg.data.rejected_field == "rejected"
    _, _, sets, argv = h.form_to_cli(f, tmp_path)
    assert argv[argv.index("--chosen-field") + 1] == "chosen" and argv[argv.index("--rejected-field") + 1] == "rejected"
    cli_cfg = build_config(load_preset("dpo"), {
        "data": {"dataset": str(SCHEMAS / "hh_rlhf.jsonl"), "chosen_field": "chosen", "rejected_field": "rejected"},
        "training": {"max_steps": 5}, "output_dir": str(tmp_path)}, sets)
    assert ui_cfg == cli_cfg
    f["dpo_loss"] = "sigmoid,sfft"  # a bad loss name is a one-line reason in the preview, not a traceback
    with pytest.raises(UserError, match="sfft"):
        h.config_from_form(f, tmp_path)


def test_kto_form_is_the_cli_config(tmp_path):
    """Method kto and the KTO accordion (beta, the labels' weights: the good answers' empty = auto) reach the config
    the CLI builds with the kto preset."""
    f = h.widget_values(h.form_defaults("kto"))
    assert f["method"] == "kto" and f["kto_desirable_weight"] == ""  # auto, shown empty
    f.update(dataset=str(SCHEMAS / "hh_rlhf.jsonl"), kto_beta=0.2, kto_undesirable_weight=1.5, max_steps=5.0)
    auto = h.config_from_form(f, tmp_path)
    assert auto.kto.beta == 0.2 and auto.kto.undesirable_weight == 1.5 and auto.kto.desirable_weight is None
    f["kto_desirable_weight"] = "0.75"
    ui_cfg = h.config_from_form(f, tmp_path)
    assert ui_cfg.kto.desirable_weight == 0.75
    _, _, sets, _ = h.form_to_cli(f, tmp_path)
    cli_cfg = build_config(load_preset("kto"), {"data": {"dataset": str(SCHEMAS / "hh_rlhf.jsonl")},
                                                "training": {"max_steps": 5}, "output_dir": str(tmp_path)}, sets)
    assert ui_cfg == cli_cfg
    f["kto_desirable_weight"] = "lots"  # not a number: one line naming the box
    with pytest.raises(UserError, match="weight of good answers must be a number or empty for auto"):
        h.config_from_form(f, tmp_path)


def test_distill_is_picked_from_the_demo_and_its_teacher_reaches_the_cli(tmp_path):
    """Picking distill on the demo's form opens demo-distill (the same model and data, its built-in teacher); a
    teacher typed in the Distillation box is `--teacher` on the command line, the rest of the box `--set`s."""
    f = h.switch_method(h.widget_values(h.form_defaults("demo-grpo")), "distill")
    assert f["preset"] == "demo-distill" and f["method"] == "distill" and f["teacher"] == "arith-teacher"
    f.update(teacher=str(tmp_path / "my-teacher"), distill_beta=0.5, distill_mode="off_policy", teacher_4bit=False)
    preset, flags, sets, argv = h.form_to_cli(f, tmp_path)
    assert preset == "demo-distill" and argv[argv.index("--teacher") + 1] == str(tmp_path / "my-teacher")
    ui_cfg = h.config_from_form(f, tmp_path)
    assert (ui_cfg.distill.beta, ui_cfg.distill.mode, ui_cfg.distill.teacher_4bit) == (0.5, "off_policy", False)
    cli_cfg = build_config(load_preset("demo-distill"), {**flags, "output_dir": str(tmp_path)}, sets)
    assert ui_cfg == cli_cfg
    # the teacher box emptied: the estimate says why no run can go ahead, not "too big" for every card
    _, memory = h.form_view({**f, "teacher": ""}, tmp_path)
    assert "not available (method distill learns from a teacher" in memory and "too big" not in memory


def test_the_pair_overrides_reach_the_samples():
    # (detection of the pair itself: tests/data/test_preference.py); swapped overrides swap what each sample shows
    swapped = df.detect(str(SCHEMAS / "hh_rlhf.jsonl"), chosen_field="rejected", rejected_field="chosen")
    assert swapped["detection"]["chosen_field"] == "rejected"
    s = swapped["samples"][0]
    assert (s["chosen"], s["rejected"]) == ("It is 23, I believe.", "Adding them gives 22.")


def test_another_dataset_starts_from_auto_detection_and_the_presets_keeps_its_columns():
    # demo-grpo names arith's columns; typing a file of pairs must not carry 'question' over to it
    assert df.column_overrides("arith", "demo-grpo") == ["question", "answer", h.AUTO, h.AUTO, h.AUTO]
    assert df.column_overrides(str(SCHEMAS / "hh_rlhf.jsonl"), "demo-grpo") == [h.AUTO] * 5
    assert df.column_overrides("", "demo-grpo") == [h.AUTO] * 5
    assert df.column_overrides("arith", "no-such-preset") == [h.AUTO] * 5


def test_the_estimate_says_what_the_cli_would_refuse(tmp_path):
    """A text model on data with pictures, and a hub model not in the cache under Local only: the estimate says the
    refusal the dry run gives, never "fits" on every card."""
    form = h.widget_values(h.form_defaults("demo-grpo"))
    command, memory = h.form_view({**form, "dataset": "shapes", "method": "sft"}, tmp_path)
    assert "not available (the dataset has images" in memory and "fits" not in memory
    assert command.startswith("qlora-app train")  # the command stands; the run it starts would be refused
    _, memory = h.form_view({**form, "model": "nobody/not-cached-7b", "local_only": True}, tmp_path)
    assert "not available (model 'nobody/not-cached-7b' is not in the local HF cache" in memory
    assert "fits" not in memory
    _, memory = h.form_view(form, tmp_path)  # the demo as it is: an estimate
    assert "**fits**" in memory
