"""Faults must never cost a user their work: torn checkpoints, kill -9, a full disk, NaN losses, a dead "running"
run, an exposed UI. The slow tests reproduce each fault for real (a subprocess killed with SIGKILL, a tmpfs that
fills up) and then resume to the planned step."""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli, cli_command, cli_here, tiny_sets

from app.errors import UserError
from app.run import integrity, layout, lookup, newrun, store

FAST = [*tiny_sets("sft"), "max_length=64"]  # SFT's (conftest.tiny_sets: no proof, no held-out points)


def _train_argv(model, data, out, steps, extra=()):
    argv = [*cli_command(), "train", "--method", "sft", "--model", str(model), "--dataset",
            str(data), "--max-steps", str(steps), "--output-dir", str(out), "--local-only", "--no-progress"]
    for s in FAST + list(extra):
        argv += ["--set", s]
    return argv


def _wait(pred, timeout=120.0, what="condition"):
    """Poll for a file or a state (never a fixed sleep)."""
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _runs(out: Path) -> list[Path]:
    """Run directories that have their config.yaml (a folder is created a moment before its config)."""
    return [p for p in Path(out).iterdir() if lookup.is_run_dir(p)] if Path(out).is_dir() else []


def _only_run(out: Path) -> Path:
    (d,) = _runs(out)
    return d


def _fake_checkpoint(d: Path, step: int) -> Path:
    """A complete checkpoint's files, written the way transformers / PEFT / torch write them."""
    import torch
    from safetensors.torch import save_file

    ck = d / layout.CHECKPOINTS / f"checkpoint-{step}"
    ck.mkdir(parents=True)
    (ck / layout.TRAINER_STATE).write_text(json.dumps({"global_step": step, "log_history": []}))
    save_file({"w": torch.zeros(64, 64)}, str(ck / "adapter_model.safetensors"))
    torch.save({"state": {0: {"exp_avg": torch.zeros(64, 64)}}}, ck / layout.OPTIMIZER)
    return ck


# ------------------------------------------------------------------------------------------ fast, in process


def test_torn_checkpoints_are_named_and_skipped(tmp_path):
    good = _fake_checkpoint(tmp_path, 2)
    assert integrity.checkpoint_problem(good) is None
    tears = {
        4: lambda ck: (ck / layout.TRAINER_STATE).write_text('{"global_step": 4, "log_hi'),
        6: lambda ck: os.truncate(ck / "adapter_model.safetensors", 200),
        8: lambda ck: os.truncate(ck / layout.OPTIMIZER, (ck / layout.OPTIMIZER).stat().st_size // 2),
        10: lambda ck: (ck / layout.OPTIMIZER).unlink(),
    }
    for step, tear in tears.items():
        tear(_fake_checkpoint(tmp_path, step))
    problems = {p.name: integrity.checkpoint_problem(p) for p in integrity.checkpoints(tmp_path)}
    assert problems["checkpoint-4"] == "trainer_state.json is cut short or corrupt"
    assert problems["checkpoint-6"] == "adapter_model.safetensors is cut short or corrupt"
    assert problems["checkpoint-8"] == "optimizer.pt is cut short or corrupt"
    assert problems["checkpoint-10"] == "no optimizer.pt"
    notes = []
    assert integrity.last_checkpoint(tmp_path, note=notes.append) == good
    assert [n.split(":")[0] for n in notes] == [f"skipping torn checkpoint checkpoint-{s}" for s in (10, 8, 6, 4)]


def test_resume_with_only_torn_checkpoints_is_a_clean_user_error(tmp_path):
    from app.train.planning.request import resume_point

    (_fake_checkpoint(tmp_path, 3) / layout.TRAINER_STATE).write_text("{")
    with pytest.raises(UserError, match=r"no complete checkpoint to resume from \(checkpoint-3 torn\)"):
        resume_point(tmp_path)


def test_metrics_are_cut_back_to_the_resumed_step(tmp_path):
    for s in range(1, 9):
        store.append_metrics(tmp_path, {"step": s, "loss": 1.0 / s})
    with open(tmp_path / layout.METRICS, "a") as f:
        f.write('{"step": 9, "lo')  # the line a kill -9 cut in half
    assert store.truncate_metrics(tmp_path, 4) == 5
    assert [r["step"] for r in store.read_metrics(tmp_path)] == [1, 2, 3, 4]
    assert store.truncate_metrics(tmp_path, 4) == 0


def test_status_is_rewritten_in_place_when_the_disk_is_full(tmp_path, monkeypatch):
    store.write_status(tmp_path, layout.RUNNING, step=3)

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store.os, "replace", full)
    store.write_status(tmp_path, layout.FAILED, error="the disk is full")
    st = store.read_status(tmp_path)
    assert st["status"] == layout.FAILED and st["step"] == 3 and st["error"] == "the disk is full"
    assert not list(tmp_path.glob("*.tmp"))


def test_concurrent_atomic_writers_of_one_file_never_collide(tmp_path):
    """Two launchers of a multi-node run on a shared folder write config.yaml at the same moment: each renames its
    own temporary copy (a shared '.tmp' name let one rename the other's away: FileNotFoundError)."""
    import multiprocessing as mp

    procs = [mp.get_context("fork").Process(target=_write_many, args=(tmp_path / "config.yaml", i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert (tmp_path / "config.yaml").read_text().startswith("writer ") and not list(tmp_path.glob("*.tmp"))


def _write_many(path, i):
    for _ in range(300):
        store.write_atomic(path, f"writer {i}\n" * 50)


def test_runs_started_at_the_same_moment_each_get_their_own_folder(tmp_path):
    """The UI and a CLI (or two CLIs) starting runs of the same name in the same second: an exists-then-mkdir check
    let the second one fail with 'cannot create a run directory'; each must get a folder of its own."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_new_runs, args=(tmp_path, results)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    made = [results.get(timeout=5) for _ in range(4 * 25)]
    assert len(set(made)) == 100 and len(list(tmp_path.iterdir())) == 100


def _new_runs(root, results):
    for _ in range(25):
        results.put(str(newrun.new_run_dir(root, "20261123-090000-grpo-arith")))


def test_a_dead_running_run_shows_as_crashed_with_the_resume_command(tmp_path):
    from app.run.summary import run_summary
    from app.ui.run_view import runs_rows, status_markdown

    d = newrun.new_run_dir(tmp_path, "r")
    (d / layout.CONFIG).write_text("method: sft\n")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    store.write_status(d, layout.RUNNING, pid=dead.pid, step=4)
    assert run_summary(d)["status"] == layout.CRASHED and run_summary(d)["resume_command"] is None
    _fake_checkpoint(d, 4)
    s = run_summary(d)
    assert s["status"] == layout.CRASHED and s["resume_command"] == f"qlora-app train --resume {d}"
    assert runs_rows(tmp_path)[0][1] == layout.CRASHED
    assert s["resume_command"] in status_markdown(s)
    r = cli("runs", "list", "--output-dir", str(tmp_path), env={**os.environ, "COLUMNS": "200"})
    assert "crashed" in r.stdout and f"qlora-app train --resume {d}" in r.stdout.replace("\n", "")
    store.write_status(d, layout.RUNNING, pid=os.getpid())  # alive: still running, not crashed
    assert run_summary(d)["status"] == layout.RUNNING


class _Control:
    should_save = False
    should_training_stop = False


class _State:
    def __init__(self, step):
        self.global_step, self.max_steps = step, 100


def test_nan_loss_stops_without_saving_and_flat_groups_warn(tmp_path):
    from app.run.counts import RunCounts
    from app.run.diagnosis import WINDOW, Facts
    from app.run.watch import Watch
    from app.train.running.callbacks import Reporting, RunDirCallback, StopFlag

    warnings = []
    cb = RunDirCallback(tmp_path, StopFlag(), report=Reporting(warn=warnings.append))
    c = _Control()
    cb.on_log(None, _State(1), c, logs={"loss": 1.0, "grad_norm": 0.5})
    assert cb.nonfinite is None and not c.should_training_stop
    c.should_save = True  # this step's checkpoint was due
    cb.on_log(None, _State(2), c, logs={"loss": 1.0, "grad_norm": float("inf")})
    assert cb.nonfinite == {"key": "grad_norm", "value": "inf", "step": 2}
    assert c.should_training_stop and not c.should_save  # the broken weights are never saved

    recorded = {}
    facts = Facts("grpo", {"reference": 2.0, "format": 0.5}, 1e-5, 4, 1.0, 256, "numeric")
    cb = RunDirCallback(tmp_path, StopFlag(), RunCounts(diagnosis=Watch(facts)),
                        Reporting(warn=warnings.append, record=lambda status, **f: recorded.update(f)))
    for step in range(1, WINDOW):  # flat groups, but not yet for a whole window: nothing said
        cb.on_log(None, _State(step), _Control(), logs={"reward": 1.0, "frac_reward_zero_std": 0.8})
    assert warnings == []
    for step in range(WINDOW, 3 * WINDOW):  # said once, however long it lasts
        cb.on_log(None, _State(step), _Control(), logs={"reward": 1.0, "frac_reward_zero_std": 0.8})
    assert len(warnings) == 1 and "80% of GRPO's groups had identical rewards" in warnings[0]
    assert "grpo.num_generations (now 4)" in warnings[0]
    assert [d["kind"] for d in recorded["diagnosis"]] == ["flat_groups"] and recorded["diagnosis"][0]["step"] == WINDOW


@pytest.mark.parametrize("argv, needle", [
    (["--host", "0.0.0.0"], "--host 0.0.0.0 serves the UI beyond this machine; add --auth USER:PASS"),
    (["--host", "192.168.1.5", "--port", "7999"], "add --auth"),
    (["--share"], "--share publishes the UI on the internet; add --auth"),
])
def test_exposed_ui_without_auth_is_refused(argv, needle):
    r = cli_here("ui", *argv)
    assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_loopback_needs_no_auth_and_auth_allows_exposure():
    from app.ui.serve import check_ui_exposure, launch_kwargs

    for host in ("127.0.0.1", "localhost", "::1", "127.0.0.2"):
        check_ui_exposure(host, False, None)
    check_ui_exposure("0.0.0.0", True, "alice:s3cret")
    assert launch_kwargs("0.0.0.0", 1, False, "alice:s3cret", Path("runs"))["auth"] == ("alice", "s3cret")


def test_with_auth_an_unauthenticated_client_sees_nothing_of_the_app(tmp_path):
    import socket
    import urllib.error
    import urllib.request

    from app.ui.serve import launch

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    demo = launch(host="127.0.0.1", port=port, auth="alice:s3cret", runs_dir=tmp_path / "runs", block=False)
    try:
        base = f"http://127.0.0.1:{port}"
        page = urllib.request.urlopen(base + "/").read().decode(errors="replace")
        assert "Detect fields" not in page and "tab-train" not in page  # a login shell, not the app
        for path in ("/config", "/gradio_api/info", f"/gradio_api/file={tmp_path}/runs"):
            with pytest.raises(urllib.error.HTTPError) as e:
                urllib.request.urlopen(base + path)
            assert e.value.code == 401, path
    finally:
        demo.close()
        demo.jobs.shutdown()


def test_ui_port_in_use_is_a_clean_error():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = cli_here("ui", "--port", str(port))
    assert r.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in r.stderr and "Traceback" not in r.stderr
    r = cli_here("ui", "--port", "99999")  # before: socket's OverflowError traceback
    assert r.returncode == 2 and "--port 99999 is not a TCP port" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------------------------------ slow, real faults


@pytest.mark.slow
def test_kill_9_and_a_torn_newest_checkpoint_then_resume_reaches_the_planned_step(tiny_model, math_jsonl, tmp_path):
    out, steps = tmp_path / "runs", 40
    p = subprocess.Popen(_train_argv(tiny_model, math_jsonl, out, steps, ["save_steps=3"]),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait(lambda: _runs(out), what="the run directory")
    d = _only_run(out)

    def far_enough():
        done = [int(c.name.split("-")[1]) for c in integrity.checkpoints(d)]
        logged = [r["step"] for r in store.read_metrics(d)]
        return len(done) >= 2 and logged and logged[-1] > max(done)

    _wait(far_enough, what="two checkpoints and steps logged after them")
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -9
    newest, older = integrity.checkpoints(d)[:2]
    assert store.read_status(d)["status"] == layout.RUNNING  # what the dead process left
    from app.run.summary import run_summary

    assert run_summary(d)["status"] == layout.CRASHED
    (newest / layout.TRAINER_STATE).write_text('{"global_step": ')  # and a save torn by the crash
    r = cli("train", "--resume", str(d), "--no-progress", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"skipping torn checkpoint {newest.name}" in r.stdout + r.stderr
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == steps
    logged = [r["step"] for r in store.read_metrics(d)]
    assert logged == list(range(1, steps + 1))  # every step once, the curve continuous
    assert f"resuming from {older.name}" in (d / layout.LOG).read_text()
    assert (d / layout.ADAPTER / "adapter_model.safetensors").is_file()
    assert not list((d / layout.CHECKPOINTS).glob(".partial/*"))  # nothing half-written left behind
    assert len(integrity.checkpoints(d)) <= 2  # save_total_limit held


@pytest.mark.slow
def test_full_disk_fails_cleanly_and_resume_finishes_after_space_is_freed(tiny_model, math_jsonl, small_disk):
    out, steps = small_disk / "runs", 30
    filler = small_disk / "filler"
    p = subprocess.Popen(_train_argv(tiny_model, math_jsonl, out, steps, ["save_steps=4", "save_total_limit=2"]),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait(lambda: _runs(out), what="the run directory")
    d = _only_run(out)
    _wait(lambda: integrity.last_checkpoint(d) is not None, what="a first complete checkpoint")
    with open(filler, "wb") as f:  # fill every remaining byte while the run goes on
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC
    stdout, stderr = p.communicate(timeout=600)
    assert p.returncode == 1, stderr[-3000:]
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert "Traceback" not in stderr and len(lines) == 1, stderr[-3000:]
    assert lines[0].startswith("error: the disk is full (") and "MiB free on" in lines[0]
    kept = integrity.last_checkpoint(d)
    assert kept is not None and f"the newest complete checkpoint is {kept.name}" in lines[0]
    assert f"qlora-app train --resume {d}" in lines[0]
    st = store.read_status(d)
    assert st["status"] == layout.FAILED and st["error"].startswith("the disk is full")
    # every checkpoint left is complete, none half-published, and the limit held
    assert all(integrity.checkpoint_problem(c) is None for c in integrity.checkpoints(d))
    assert len(integrity.checkpoints(d)) <= 2

    filler.unlink()
    r = cli("train", "--resume", str(d), "--no-progress", timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == steps
    assert [r["step"] for r in store.read_metrics(d)] == list(range(1, steps + 1))


@pytest.mark.slow
def test_nan_loss_stops_the_run_keeps_the_last_good_checkpoint(tiny_model, math_jsonl, tmp_path):
    out = tmp_path / "runs"
    # A sane start, then an absurd learning rate from step 5 on: the loss turns NaN soon after.
    r = subprocess.run(_train_argv(tiny_model, math_jsonl, out, 30, ["save_steps=2", "learning_rate=1e25",
                                                                       "warmup_steps=4",
                                                                       "lr_scheduler_type=constant_with_warmup"]),
                       capture_output=True, text=True, timeout=600)
    d = _only_run(out)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert "became nan at step" in r.stderr and "learning rate too high" in r.stderr
    st = store.read_status(d)
    assert st["status"] == layout.FAILED and "became nan" in st["error"]
    bad_step = int(st["error"].split("at step ")[1].split(":")[0])
    assert not (d / layout.ADAPTER).exists()  # NaN weights are not published as the adapter
    ck = integrity.last_checkpoint(d)
    if ck is not None:  # whatever was saved predates the NaN
        assert int(ck.name.split("-")[1]) < bad_step


@pytest.mark.slow
def test_a_dataset_that_disappears_mid_run(tiny_model, math_jsonl, tmp_path):
    """The rows are read once at the start: deleting the file mid-run changes nothing; a later resume that needs
    the file again says which file is missing, exit 2, and loses nothing already saved."""
    import shutil

    data = tmp_path / "data.jsonl"
    shutil.copy(math_jsonl, data)
    out = tmp_path / "runs"
    p = subprocess.Popen(_train_argv(tiny_model, data, out, 12, ["save_steps=4"]), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    _wait(lambda: _runs(out) and store.read_metrics(_only_run(out)), what="step 1")
    data.unlink()
    _, err = p.communicate(timeout=600)
    d = _only_run(out)
    assert p.returncode == 0, err[-3000:]
    assert store.read_status(d)["status"] == layout.FINISHED
    before = sorted(p.name for p in d.rglob("*"))
    r = cli("train", "--resume", str(d), "--max-steps", "16", "--no-progress", timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert str(data) in r.stderr and "not found" in r.stderr
    assert sorted(p.name for p in d.rglob("*")) == before and store.read_status(d)["status"] == layout.FINISHED


def test_run_listings_check_structure_and_resume_checks_every_byte(tmp_path):
    """The UI polls run summaries every few seconds: they must not read whole optimizer files. A flipped byte
    inside an archive is caught by resume's CRC check; a cut archive by both."""
    from app.run.summary import run_summary

    ck = _fake_checkpoint(tmp_path, 2)
    (tmp_path / layout.CONFIG).write_text("method: sft\n")
    opt = ck / layout.OPTIMIZER
    raw = bytearray(opt.read_bytes())
    start = raw.index(b"PK\x03\x04") + 200  # inside the first stored member's data
    raw[start] ^= 0xFF
    opt.write_bytes(bytes(raw))
    assert integrity.checkpoint_problem(ck) == "optimizer.pt is cut short or corrupt"
    assert integrity.checkpoint_problem(ck, verify_data=False) is None
    assert run_summary(tmp_path)["resumable"] and integrity.last_checkpoint(tmp_path) is None


def test_wrapped_write_errors_read_as_failed_writes():
    """safetensors and torch.save wrap a full disk in their own exception types; they must still reach the
    disk-full message (a checkpoint save that hit ENOSPC first ended in a traceback before)."""
    from app.errors import UserError, write_failure

    class SafetensorError(Exception):
        pass

    e = write_failure(SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)"))
    assert e.errno == errno.ENOSPC
    assert write_failure(RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed "
                                      "writing file data/0: file write failed")).errno == errno.EIO
    assert write_failure(OSError(errno.EDQUOT, "quota")).errno == errno.EDQUOT
    for other in (RuntimeError("shape mismatch"), UserError("No space left on device"), KeyboardInterrupt()):
        assert write_failure(other) is None


@pytest.mark.slow
def test_a_full_disk_inside_a_checkpoint_save_is_one_line_and_leaves_no_torn_copy(tiny_model, math_jsonl,
                                                                                   tmp_path, monkeypatch):
    import safetensors
    from trl import SFTTrainer

    from app.config.build import build_config
    from app.errors import RunFailed
    from app.train.running.session import Session

    def torn(self, model, trial):  # what a full disk does inside TRL's save: half a file, then safetensors' error
        ckpt = Path(self.args.output_dir) / f"checkpoint-{self.state.global_step}"
        ckpt.mkdir(parents=True, exist_ok=True)
        (ckpt / "adapter_model.safetensors").write_bytes(b"\0" * 100)
        raise safetensors.SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(SFTTrainer, "_save_checkpoint", torn)
    cfg = build_config({"method": "sft", "model": {"name_or_path": str(tiny_model)},
                        "data": {"dataset": str(math_jsonl)}, "output_dir": str(tmp_path / "runs")},
                       {"training": {"max_steps": 4}}, FAST)
    with pytest.raises(RunFailed, match=r"^the disk is full \(.* no complete checkpoint was saved yet"):
        Session(cfg, progress=False).run()
    d = _only_run(tmp_path / "runs")
    assert store.read_status(d)["status"] == layout.FAILED
    assert not list((d / layout.CHECKPOINTS).rglob("checkpoint-*"))  # the torn save was removed, not kept


@pytest.mark.slow
def test_a_disk_full_before_the_run_starts_is_one_line(tiny_model, math_jsonl, small_disk):
    out = small_disk / "runs"
    out.mkdir()
    with open(small_disk / "filler", "wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    r = subprocess.run(_train_argv(tiny_model, math_jsonl, out, 2), capture_output=True, text=True, timeout=600)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 1 and "Traceback" not in r.stderr and len(lines) == 1, r.stderr[-3000:]
    assert lines[0].startswith("error: the disk is full (") and "start the run again" in lines[0]
    assert not [p for p in out.rglob("*.tmp")]  # no half-written temporary left behind


@pytest.mark.slow
def test_checkpoints_rotate_by_step_without_noise(tiny_model, math_jsonl, tmp_path):
    """Saves under a second apart (a small model's steps): rotation keeps the newest steps, as --resume reads them,
    and prints nothing (Hugging Face's mtime ordering printed "mtime may not be reliable" on stderr)."""
    out = tmp_path / "runs"
    r = subprocess.run(_train_argv(tiny_model, math_jsonl, out, 5, ["save_steps=1", "save_total_limit=2"]),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "mtime" not in r.stderr, r.stderr[-3000:]
    d = _only_run(out)
    assert [p.name for p in integrity.checkpoints(d)] == ["checkpoint-5", "checkpoint-4"]
