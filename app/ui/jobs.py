"""The one training subprocess the UI may run at a time.

Training runs as `python -m app.cli train ...` in its own process (and process group), never inside the UI
process: a crash, an OOM or a CUDA error then kills the run, not the UI, and Stop can signal every process the run
started. The engine owns status.json; this module only fills in what a dead process cannot write itself (it was
killed, or failed before it wrote any status), so the Runs tab never shows a dead run as "running".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from app import rundir
from app.errors import UserError
from app.runtime import child_env, descendants, pid_alive

BUSY_MESSAGE = "a training run is already in progress"  # the UI clears it from the page once no longer true
STOP_GRACE_SECONDS = 60.0  # the engine finishes its step and saves a checkpoint; big models need a while


def train_command(run_dir: Path, resume: bool = False, max_steps: int | None = None) -> list[str]:
    """The argv the UI runs; the config was written into the run directory beforehand. A resume may extend the
    run to ``max_steps`` (as the CLI's --resume RUN --max-steps N)."""
    base = [sys.executable, "-m", "app.cli", "train"]
    if resume:
        return base + ["--resume", str(run_dir), "--no-progress"] + (
            ["--max-steps", str(max_steps)] if max_steps else [])
    return base + ["--config", str(Path(run_dir) / rundir.CONFIG), "--run-dir", str(run_dir), "--no-progress"]


def running_elsewhere(runs_dir: Path) -> Path | None:
    """A run in runs_dir whose status says running and whose process is alive (e.g. started from the CLI or by
    another UI); the single-GPU machine cannot take a second one."""
    for d in rundir.list_runs(runs_dir):
        st = rundir.read_status(d) or {}
        if st.get("status") == rundir.RUNNING and pid_alive(st.get("pid")):
            return d
    return None


def last_log_line(run_dir: Path, limit: int = 300) -> str | None:
    """The last meaningful line of train.log: for a process that died early it is usually the error."""
    try:
        lines = [ln.strip() for ln in (Path(run_dir) / rundir.LOG).read_text(errors="replace").splitlines()]
    except OSError:
        return None
    lines = [ln for ln in lines if ln]
    return lines[-1][:limit] if lines else None


class JobManager:
    """Start / stop / watch the single training subprocess. Thread-safe: Gradio calls handlers from a pool."""

    def __init__(self, runs_dir: Path, cwd: Path | None = None):
        self.runs_dir = Path(runs_dir)
        # The folder the user started the UI in: relative paths they type mean this folder, and the training
        # subprocess runs here too (start_run also writes them into config.yaml as absolute paths).
        self.cwd = Path(cwd or Path.cwd()).resolve()
        self._lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.run_dir: Path | None = None  # the current or most recent run started here
        self.stop_requested = False
        self.killed = False

    # ---------------------------------------------------------------------------------------------- state
    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_free(self) -> None:
        """One GPU trains one run at a time: a UserError while a run started here, or elsewhere, is running."""
        if self.is_running():
            raise UserError(f"{BUSY_MESSAGE} ({self.run_dir.name}); Stop it or wait "
                            "for it to finish before starting another")
        other = running_elsewhere(self.runs_dir)
        if other is not None:
            raise UserError(f"run '{other.name}' is still running (started outside this UI); wait for it or "
                            "stop it first: one GPU trains one run at a time")

    # ---------------------------------------------------------------------------------------------- start
    def start(self, run_dir: Path, resume: bool = False, max_steps: int | None = None) -> subprocess.Popen:
        with self._lock:
            self.check_free()
            run_dir = Path(run_dir)
            # The subprocess must find this `app` package even when the UI was started from another folder.
            env = {**child_env(), "PYTHONUNBUFFERED": "1"}  # the log tail should be live, not block-buffered
            # Console output goes to the end of train.log (the engine's logger appends there too), so an error
            # printed before the engine's logging starts (bad dataset, unknown model) is visible in the UI.
            log = open(run_dir / rundir.LOG, "ab")
            try:
                self.proc = subprocess.Popen(
                    train_command(run_dir, resume, max_steps), stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.cwd, env=env, start_new_session=True,  # own process group: Stop signals all of it
                )
            finally:
                log.close()  # the child holds its own descriptor
            self.run_dir = run_dir
            self.stop_requested = False
            self.killed = False
            threading.Thread(target=self._watch, args=(self.proc, run_dir), daemon=True).start()
            return self.proc

    def _watch(self, proc: subprocess.Popen, run_dir: Path) -> None:
        rc = proc.wait()
        self.reconcile(run_dir, rc)

    def reconcile(self, run_dir: Path, rc: int) -> None:
        """After the process exited: make status.json tell the truth when the engine could not."""
        st = rundir.read_status(run_dir) or {}
        status = st.get("status")
        if status in (rundir.FINISHED, rundir.FAILED, rundir.INTERRUPTED):
            return  # the engine said how it ended; that is the truth
        if self.stop_requested:
            note = "killed after the stop grace period" if self.killed else "stopped before training started"
            rundir.write_status(run_dir, rundir.INTERRUPTED, ended=time.time(), error=None, note=note)
        elif rc == 0:
            rundir.write_status(run_dir, rundir.FAILED, ended=time.time(),
                                error="the training process exited without finishing; see train.log")
        else:
            why = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
            line = last_log_line(run_dir)
            rundir.write_status(run_dir, rundir.FAILED, ended=time.time(),
                                error=f"training process ended with {why}" + (f": {line}" if line else ""))

    # ---------------------------------------------------------------------------------------------- stop
    def stop(self, grace: float = STOP_GRACE_SECONDS) -> str:
        """SIGTERM the process group (the engine checkpoints and exits at the end of the step); SIGKILL after
        `grace` seconds. Returns at once: the UI must stay responsive while the step finishes."""
        with self._lock:
            if not self.is_running():
                return "no training run in progress"
            proc = self.proc
            self.stop_requested = True
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                return "the run already ended"
        threading.Thread(target=self._kill_later, args=(proc, grace), daemon=True).start()
        return (f"stop requested: {self.run_dir.name} finishes its current step, saves a checkpoint and stops "
                f"(forced after {int(grace)} s)")

    def _kill_later(self, proc: subprocess.Popen, grace: float) -> None:
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.killed = True
            below = descendants(proc.pid)  # a multi-process run's launcher lives in a session of its own
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for pid in below:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def shutdown(self) -> None:
        """On UI exit: stop a running job the same graceful way (used by tests and atexit)."""
        if self.is_running():
            self.stop(grace=30)
            try:
                self.proc.wait(timeout=35)
            except subprocess.TimeoutExpired:
                pass
