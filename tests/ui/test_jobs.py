"""The UI's single training subprocess: one at a time, Stop via the process group, crashes recorded (through the
session's records), an early refusal shown, and a real tiny run started through the same path the Start button
uses: the form's command line with --run-dir, the folder made by the run's own session."""

import sys
import time
from pathlib import Path

import pytest
from conftest import cli

from app.errors import UserError
from app.run import layout, lookup, newrun, store
from app.ui import data_form as df
from app.ui import handlers as h
from app.ui import jobs as jobs_mod
from app.ui import run_view as rv
from app.ui.jobs import JobManager


def _fake(monkeypatch, code: str):
    """Replace `python -m app.cli train ...` by a small script; the process handling stays the real one."""
    monkeypatch.setattr(jobs_mod, "train_command", lambda run_dir, *args: [sys.executable, "-c", code])


def _new_run(runs: Path, name: str = "r") -> Path:
    """A run folder as a session leaves it once training started (a stand-in: these tests fake the engine)."""
    d = newrun.new_run_dir(runs, name)
    (d / layout.CONFIG).write_text("method: grpo\n")
    store.write_status(d, layout.RUNNING, step=0)
    return d


def _wait(pred, timeout=30.0):
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


def test_second_start_is_refused_and_stop_signals_the_group(tmp_path, monkeypatch):
    # The "engine" starts a grandchild in the same process group: Stop must reach both.
    _fake(monkeypatch, "import subprocess, sys, time; "
                       "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                       "print('child started', flush=True); time.sleep(60)")
    jobs = JobManager(tmp_path)
    d = _new_run(tmp_path)
    proc = jobs.start(d)
    assert jobs.is_running()
    with pytest.raises(UserError, match="already in progress"):
        jobs.start(_new_run(tmp_path, "second"))
    assert _wait(lambda: "child started" in jobs_mod.console_tail(jobs.console))  # the console is kept
    msg = jobs.stop(grace=10)
    assert "stop requested" in msg
    assert _wait(lambda: proc.poll() is not None)
    assert proc.returncode == -15
    assert _wait(lambda: (store.read_status(d) or {}).get("status") == layout.INTERRUPTED)
    assert jobs.stop() == "no training run in progress"


def test_stop_escalates_to_sigkill(tmp_path, monkeypatch):
    _fake(monkeypatch, "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                       "print('ready', flush=True); time.sleep(60)")
    jobs = JobManager(tmp_path)
    d = _new_run(tmp_path)
    proc = jobs.start(d)
    assert _wait(lambda: "ready" in jobs_mod.console_tail(jobs.console))
    jobs.stop(grace=1)
    assert _wait(lambda: proc.poll() is not None, timeout=10) and proc.returncode == -9
    assert _wait(lambda: (store.read_status(d) or {}).get("status") == layout.INTERRUPTED)
    assert "killed" in store.read_status(d)["note"]


def test_a_run_refused_before_its_folder_exists_shows_why(tmp_path, monkeypatch):
    """The session checks and plans before it makes the folder: a refusal leaves no folder, and the Train tab shows
    the one line the process printed."""
    _fake(monkeypatch, "import sys; print('error: dataset file not found; pass an existing file'); sys.exit(2)")
    jobs = JobManager(tmp_path)
    d = tmp_path / "never-made"
    jobs.start(d)
    assert _wait(lambda: not jobs.is_running() and jobs.error)
    # the CLI's "error:" label is dropped: the page says "error" once
    assert jobs.error == "dataset file not found; pass an existing file" and not d.exists()
    live = rv.live_status(jobs, tmp_path)
    assert "did not start" in live["markdown"] and "dataset file not found" in live["markdown"]
    assert live["markdown"].count("error") == 1
    assert "dataset file not found" in live["log"]
    # the UI is fine and can start the next run
    _fake(monkeypatch, "print('ok')")
    jobs.start(_new_run(tmp_path, "next"))


def test_a_process_that_dies_after_its_session_started_is_recorded_with_its_error(tmp_path, monkeypatch):
    _fake(monkeypatch, "import sys; print('Killed: out of host memory'); sys.exit(137)")
    jobs = JobManager(tmp_path)
    d = _new_run(tmp_path)
    jobs.start(d)
    assert _wait(lambda: (store.read_status(d) or {}).get("status") == layout.FAILED)
    err = store.read_status(d)["error"]
    assert "exit code 137" in err and "out of host memory" in err


def test_engine_status_is_not_overwritten(tmp_path, monkeypatch):
    code = ("import pathlib, sys; import app.run.store as r; "
            "r.write_status(pathlib.Path({d!r}), 'failed', error='ValueError: real cause'); sys.exit(1)")
    d = _new_run(tmp_path)
    _fake(monkeypatch, code.format(d=str(d)))
    jobs = JobManager(tmp_path)
    proc = jobs.start(d)
    assert _wait(lambda: proc.poll() is not None)
    time.sleep(0.3)
    assert store.read_status(d)["error"] == "ValueError: real cause"


def test_start_refused_while_another_process_runs_a_run(tmp_path):
    import os

    other = _new_run(tmp_path, "cli-run")
    store.write_status(other, layout.RUNNING, pid=os.getpid())  # alive: this test process
    jobs = JobManager(tmp_path)
    with pytest.raises(UserError, match="still running"):
        jobs.start(_new_run(tmp_path, "ui-run"))


@pytest.mark.slow
def test_start_run_trains_for_real_and_resume(tiny_model, math_jsonl, tmp_path, monkeypatch):
    """The Start button's path, with the real engine: a fresh run dir, config.yaml, a finished run with curves.
    The UI is started from its own folder and the user types paths relative to it (not the package root)."""
    import os
    import shutil

    import yaml

    home = tmp_path / "where-the-ui-started"
    home.mkdir()
    shutil.copy(math_jsonl, home / "my-data.jsonl")
    monkeypatch.chdir(home)
    runs = tmp_path / "runs"
    jobs = JobManager(runs)
    form = h.form_defaults(None)
    form.update(method="sft", model=os.path.relpath(tiny_model, home), dataset="my-data.jsonl", max_steps=3,
                local_only=True, batch_size=2, grad_accum=1, gradient_checkpointing=False, max_length=96,
                save_steps=2)
    assert df.detect("my-data.jsonl")["detection"]["prompt_field"] == "question"  # "Detect fields" reads it too
    d = h.start_run(jobs, runs, form)
    assert d.parent == runs.resolve() or d.parent == runs
    assert _wait(lambda: lookup.is_run_dir(d), timeout=300), jobs_mod.console_tail(jobs.console)  # its session made it
    cfg = yaml.safe_load((d / layout.CONFIG).read_text())
    assert cfg["data"]["dataset"] == str(home / "my-data.jsonl")  # absolute: a resume from anywhere finds it
    assert cfg["model"]["name_or_path"] == str(Path(tiny_model).resolve())
    with pytest.raises(UserError, match="already in progress"):
        h.start_run(jobs, runs, form)
    assert _wait(lambda: not jobs.is_running(), timeout=300), rv.log_tail(d)
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED, (st, rv.log_tail(d))
    live = rv.live_status(jobs, runs)
    assert live["status"] == layout.FINISHED and "3 / 3" in live["markdown"]
    assert list(rv.curves(d).axes[0].get_lines()[0].get_xdata()) == [1, 2, 3]
    assert rv.runs_rows(runs)[0][:2] == [d.name, "finished"]
    with pytest.raises(UserError, match="already finished; set 'Extend to steps' to train it further"):
        h.resume_run(jobs, runs, d.name)
    with pytest.raises(UserError, match="is at step 3; set 'Extend to steps' above that"):
        h.resume_run(jobs, runs, d.name, 3)
    # Resume can extend a finished run, as the CLI's --resume RUN --max-steps N does
    h.resume_run(jobs, runs, d.name, 5)
    assert _wait(lambda: not jobs.is_running(), timeout=300), rv.log_tail(d)
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == 5, (st, rv.log_tail(d))
    assert [r["step"] for r in store.read_metrics(d)] == [1, 2, 3, 4, 5]
    # a second run never reuses the first one's folder
    d2 = h.start_run(jobs, runs, form)
    assert d2 != d
    jobs.shutdown()


def test_start_refuses_a_model_it_cannot_find_before_making_a_folder(tmp_path, monkeypatch):
    """The memory panel already said 'model size unknown'; Start must not launch a run that can only fail."""
    from app.ui import handlers as h

    runs = tmp_path / "runs"
    jobs = JobManager(runs, cwd=tmp_path)
    form = h.form_defaults(None)
    form.update(dataset="arith", model=str(tmp_path / "no-such-model"))
    with pytest.raises(UserError, match="model path .* not found"):
        h.start_run(jobs, runs, form)
    form.update(model="org/not-in-the-cache")  # a hub id on an offline machine (the tests run with HF_HUB_OFFLINE=1)
    with pytest.raises(UserError, match="prefetch --model org/not-in-the-cache"):
        h.start_run(jobs, runs, form)
    assert not runs.exists() or not any(runs.iterdir())
    assert jobs.proc is None


def test_an_offline_miss_of_the_default_model_says_what_to_do_and_leaves_no_folder(tmp_path):
    import os

    r = cli("train", "--dataset", "arith", "--output-dir", str(tmp_path / "runs"), timeout=300,
            env={**os.environ, "HF_HUB_OFFLINE": "1"}, cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    line = " ".join(r.stderr.split())
    assert "Qwen/Qwen2.5-1.5B-Instruct" in line and "qlora-app prefetch --model Qwen/Qwen2.5-1.5B-Instruct" in line
    assert "--model arith-base" in line
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_a_refused_start_gives_way_to_a_run_made_after_it(tmp_path, monkeypatch):
    """A refusal shown under the status (the process said why before any folder was made) stands until a run is
    made after it: a run started from the CLI then is what the Train tab shows, not the old error (which the UI
    kept across page reloads)."""
    _fake(monkeypatch, "import sys; print('error: dataset file not found; pass an existing file'); sys.exit(2)")
    jobs = JobManager(tmp_path)
    jobs.start(tmp_path / "never-made")
    assert _wait(lambda: not jobs.is_running() and jobs.error)
    assert "did not start" in rv.live_status(jobs, tmp_path)["markdown"]
    later = _new_run(tmp_path, "from-the-cli")  # a run made after the refusal (the CLI, another UI)
    store.write_status(later, layout.FINISHED, step=3, max_steps=3)
    live = rv.live_status(jobs, tmp_path)
    assert "did not start" not in live["markdown"] and live["run_dir"] == later and live["status"] == layout.FINISHED
