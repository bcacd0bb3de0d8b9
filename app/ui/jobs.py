"""The one training subprocess the UI may run at a time.

Training runs as `python -m app.cli train ...` in its own process (and process group), never inside the UI
process: a crash, an OOM or a CUDA error then kills the run, not the UI, and Stop can signal every process the run
started. The UI hands the run over as the command line its form shows, with `--run-dir` naming the folder the
run's session will create (app/train/running/session.py); it never writes into a run folder. The process's console goes
to <runs>/.console/<run name>.log, so an error printed before any run folder exists is still shown. When the process
dies without closing its run (killed), its exit is reported to the run record's ``record_exit``
(app/run/record.py), so the Runs tab never shows a dead run as "running".
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from app.errors import UserError
from app.host.procs import child_env, descendants, pid_alive
from app.run import layout, lookup, store
from app.run.record import record_exit

CONSOLE_DIR = ".console"  # inside the runs folder: not a run (no config.yaml), so `runs` ignores it
BUSY_MESSAGE = "a training run is already in progress"  # the UI clears it from the page once no longer true
STOP_GRACE_SECONDS = 60.0  # the engine finishes its step and saves a checkpoint; big models need a while


def train_command(run_dir: Path, resume: bool = False, max_steps: int | None = None,
                  args: list[str] = ()) -> list[str]:
    """The argv the UI runs: a new run is `train ARGS --run-dir RUN` (ARGS: the form's command line); a resume
    may extend the run to ``max_steps`` (as the CLI's --resume RUN --max-steps N)."""
    base = [sys.executable, "-m", "app.cli", "train"]
    if resume:
        return base + ["--resume", str(run_dir), "--no-progress"] + (
            ["--max-steps", str(max_steps)] if max_steps else [])
    return base + [*args, "--run-dir", str(run_dir), "--no-progress"]


def console_path(runs_dir: Path, run_dir: Path) -> Path:
    return Path(runs_dir) / CONSOLE_DIR / f"{Path(run_dir).name}.log"


def console_tail(path: Path | None, limit: int = 80) -> str:
    """The last lines of a job's console (a progress bar's carriage returns folded to its latest state)."""
    try:
        text = Path(path).read_text(errors="replace") if path else ""
    except OSError:
        return ""
    shown = [ln.rstrip("\r").rsplit("\r", 1)[-1] for ln in text.rstrip("\n").split("\n")]
    return "\n".join(shown[-limit:])


def running_elsewhere(runs_dir: Path) -> Path | None:
    """A run in runs_dir whose status says running and whose process is alive (e.g. started from the CLI or by
    another UI); the single-GPU machine cannot take a second one."""
    for d in lookup.list_runs(runs_dir):
        st = store.read_status(d) or {}
        if st.get("status") == layout.RUNNING and pid_alive(st.get("pid")):
            return d
    return None


def last_line(path: Path, limit: int = 300) -> str | None:
    """The last meaningful line of a log: for a process that died early it is usually the error."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines()]
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
        self.run_dir: Path | None = None  # the current or most recent run started here (may not exist yet)
        self.console: Path | None = None  # its process's console output
        self.error: str | None = None  # why it ended before its session made the run folder
        self.error_at: float = 0.0  # when: a run made after it (from the CLI, another UI) supersedes the refusal
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
    def start(self, run_dir: Path, resume: bool = False, max_steps: int | None = None,
              args: list[str] = ()) -> subprocess.Popen:
        """Start `qlora-app train` for ``run_dir``: a new run (``args``: its command line, the session creates the
        folder) or a resume of an existing one."""
        with self._lock:
            self.check_free()
            run_dir = Path(run_dir)
            # The subprocess must find this `app` package even when the UI was started from another folder.
            env = {**child_env(), "PYTHONUNBUFFERED": "1"}  # the log tail should be live, not block-buffered
            console = console_path(self.runs_dir, run_dir)
            console.parent.mkdir(parents=True, exist_ok=True)
            log = open(console, "wb")
            try:
                self.proc = subprocess.Popen(
                    train_command(run_dir, resume, max_steps, args), stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=self.cwd, env=env, start_new_session=True,  # own process group: Stop signals all of it
                )
            finally:
                log.close()  # the child holds its own descriptor
            self.run_dir, self.console, self.error = run_dir, console, None
            self.stop_requested = False
            self.killed = False
            threading.Thread(target=self._watch, args=(self.proc, run_dir), daemon=True).start()
            return self.proc

    def _watch(self, proc: subprocess.Popen, run_dir: Path) -> None:
        rc = proc.wait()
        self.reconcile(run_dir, rc)

    def reconcile(self, run_dir: Path, rc: int) -> None:
        """After the process exited: a run it could not close is reported to its session's records; a process that
        ended before any run folder was made leaves its last console line as the job's error."""
        line = last_line(console_path(self.runs_dir, run_dir))
        if store.read_status(run_dir) is None:
            if rc != 0 and not self.stop_requested:
                # the CLI's "error: ..." line, without its label: the page labels it once
                self.error = (re.sub(r"^(error:\s*)+", "", line or "")
                              or f"the training process ended with exit code {rc}")
                self.error_at = time.time()
            return
        record_exit(run_dir, rc, self.stop_requested, self.killed, line)

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
