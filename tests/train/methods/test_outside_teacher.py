"""Distillation from a teacher outside the training process, through the real engine on CPU: a Q4_K_M GGUF in
llama.cpp's child process (on-policy and off-policy) and `qlora-app serve` as an endpoint teach the demo's student;
the plan, the record and the proof say where the teacher ran; the off-policy answers are written once and reused; a
teacher that dies mid-run stops the run at a checkpoint in one line, and --resume finishes it."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import cli, cli_command, free_port

from app.run import layout, store
from app.teacher.answers import FILE

pytestmark = pytest.mark.slow


def _train(out: Path, teacher, *extra, steps: int = 6):
    return ["train", "--preset", "demo-distill", "--teacher", teacher, "--output-dir", out, "--no-progress",
            "--max-steps", steps, "--set", "training.eval_every=0", "--set", "per_device_train_batch_size=8",
            *extra]


def _run(out: Path) -> Path:
    (run,) = [p for p in out.iterdir() if (p / layout.STATUS).is_file()]
    return run


@pytest.fixture(scope="module")
def gguf_runs(teacher_ggufs, tmp_path_factory):
    """{mode: (process, run)}: an on-policy and an off-policy run from the Q4_K_M teacher (6 steps, a 24-row proof),
    and a second off-policy run of the same teacher beside the first (its answers reused)."""
    root = tmp_path_factory.mktemp("outside")
    out = {}
    for mode in ("on_policy", "off_policy"):
        r = cli(*_train(root / mode, teacher_ggufs["q4_k_m"], "--set", f"distill.mode={mode}",
                        "--set", "training.proof_rows=24"))
        out[mode] = (r, _run(root / mode) if (root / mode).is_dir() else None)
    again = cli(*_train(root / "off_policy", teacher_ggufs["q4_k_m"], "--set", "distill.mode=off_policy", steps=3),
                "--run-dir", root / "off_policy" / "again")
    out["again"] = (again, root / "off_policy" / "again")
    return out


@pytest.mark.parametrize("mode", ["on_policy", "off_policy"])
def test_a_gguf_teacher_teaches_from_outside_the_training_process(gguf_runs, teacher_ggufs, mode):
    r, run = gguf_runs[mode]
    assert r.returncode == 0, r.stderr[-3000:]
    said = " ".join(r.stdout.split() + r.stderr.split())
    assert "in llama.cpp, a child process (never in training memory)" in said and "teacher probe:" in said
    st = store.read_status(run)
    where = st[layout.TEACHER]["where"]
    assert st["status"] == layout.FINISHED and st[layout.TEACHER]["outside"] == "gguf"
    assert where["kind"] == "gguf" and where["given"] == str(teacher_ggufs["q4_k_m"]) and where["tokens_per_s"] > 0
    recs = [m for m in store.read_metrics(run) if "loss" in m]
    assert len(recs) == 6 and all(m["loss"] >= 0 for m in recs)
    if mode == "on_policy":  # the student's samples scored each step: the teacher's throughput logged beside them
        assert all(m.get("teacher/tokens_per_s", 0) > 0 for m in recs)
    proof = json.loads((run / layout.COMPARE_JSON).read_text())
    assert proof["config"]["teacher"] == str(teacher_ggufs["q4_k_m"])
    s = proof["summary"]
    assert s["teacher"]["accuracy"] >= s["base"]["accuracy"] + 0.3  # the GGUF answers the proof as the teacher
    assert (run / "teacher.log").is_file()
    card = (run / layout.ADAPTER / "README.md").read_text()  # the model card says where its teacher ran
    assert "(a GGUF file run by llama.cpp, outside the training process): its top-20 log-probabilities" in card


def test_off_policy_answers_are_written_once_and_reused(gguf_runs):
    r, run = gguf_runs["off_policy"]
    lines = (run / FILE).read_text().splitlines()
    assert json.loads(lines[0])["fingerprint"]["top_k"] == 20 and len(lines) == 1 + 6 * 8
    first = json.loads(lines[1])
    assert first["ids"][-1] == 2 and len(first["top_ids"]) == len(first["ids"])  # closed with </s>, top-k each
    assert all(len(t) >= 1 for t in first["top_ids"])
    again, run2 = gguf_runs["again"]
    assert again.returncode == 0, again.stderr[-2000:]
    log = (run2 / layout.LOG).read_text()
    assert "48 teacher answers reused from an earlier run" in log
    assert "the teacher answers 0 of 24 training prompts once (off-policy; 24 written before)" in log


def test_qlora_app_serve_is_an_endpoint_teacher(tmp_path):
    """`qlora-app serve` on a run whose base is the demo teacher: its base side (the teacher itself) teaches the
    student through /v1/completions' echoed top-k log-probabilities."""
    from fakes import make_adapter, write_run

    from app.config.builtin import TEACHER_MODEL
    from app.demo.recipe import base_model_path

    teacher = base_model_path(name=TEACHER_MODEL)
    run = write_run(tmp_path / "teacher-run", teacher, make_adapter(teacher, tmp_path / "a"))
    port = free_port()
    server = subprocess.Popen(cli_command("serve", run, "--port", port, "--local-only"), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(port)
        url = f"http://127.0.0.1:{port}/v1"
        r = cli(*_train(tmp_path / "out", url, "--set", "distill.teacher_model=teacher-run-base",
                        "--set", "training.proof_rows=16", steps=4))
        assert r.returncode == 0, r.stderr[-3000:]
        said = " ".join(r.stdout.split() + r.stderr.split())
        assert f"{url} (model teacher-run-base), an OpenAI-compatible endpoint (never in training memory)" in said
        st = store.read_status(_run(tmp_path / "out"))
        assert st[layout.TEACHER]["where"]["kind"] == "endpoint" and st["status"] == layout.FINISHED
        proof = json.loads((_run(tmp_path / "out") / layout.COMPARE_JSON).read_text())["summary"]
        assert proof["teacher"]["accuracy"] >= proof["base"]["accuracy"] + 0.3
    finally:
        server.terminate()
        server.wait(timeout=30)


def _wait_for(port: int, timeout: float = 120) -> None:
    import socket

    end = time.time() + timeout
    while time.time() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    pytest.fail("the server did not start")


def _teacher_child(pid: int) -> int | None:
    import psutil

    for child in psutil.Process(pid).children(recursive=True):
        if "app.teacher.gguf_server" in " ".join(child.cmdline()):
            return child.pid
    return None


def test_a_teacher_that_dies_mid_run_stops_it_at_a_checkpoint_and_resume_finishes(teacher_ggufs, tmp_path):
    out = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.Popen(cli_command(*_train(out, teacher_ggufs["q4_k_m"], "--set", "training.proof_rows=0",
                                                steps=10)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    end = time.time() + 300
    run = None
    while time.time() < end and proc.poll() is None:
        runs = [p for p in out.iterdir()] if out.is_dir() else []
        run = runs[0] if runs else None
        steps = [m for m in store.read_metrics(run) if "loss" in m] if run is not None else []
        if len(steps) >= 3:
            break
        time.sleep(0.3)
    child = _teacher_child(proc.pid)
    assert child is not None and run is not None
    os.kill(child, signal.SIGKILL)  # the kernel's out-of-memory killer, as far as the run can tell
    _, stderr = proc.communicate(timeout=300)
    said = " ".join(stderr.split())
    assert proc.returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert "llama.cpp died serving the teacher (SIGKILL: killed, most often for memory" in said
    found = sorted(p.name for p in (run / layout.CHECKPOINTS).iterdir()) if (run / layout.CHECKPOINTS).is_dir() else []
    assert "saved as checkpoint-" in said and found, (said, found)
    assert f"--resume {run}" in said
    assert store.read_status(run)["status"] == layout.FAILED
    r = cli("train", "--resume", run, "--no-progress")
    assert r.returncode == 0, r.stderr[-3000:]
    st = store.read_status(run)
    assert st["status"] == layout.FINISHED and st["step"] == 10


def test_the_dry_run_probes_the_teacher_and_says_its_throughput(teacher_ggufs, tmp_path):
    """`--dry-run` starts the GGUF teacher as the run would, tokenizes a sample of the data on both sides and says
    the expected throughput; nothing is made."""
    r = cli(*_train(tmp_path / "runs", teacher_ggufs["q4_k_m"]), "--dry-run")
    said = " ".join(r.stderr.split())
    assert r.returncode == 0, r.stderr[-3000:]
    assert "in llama.cpp, a child process (never in training memory): a " in said and "MB file" in said
    assert "teacher probe: the data tokenizes alike on both sides (8 prompts);" in said and "tokens/s scored" in said
    assert not (tmp_path / "runs").exists()
