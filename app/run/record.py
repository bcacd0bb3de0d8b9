"""A run's record: the only writer of config.yaml and status.json and the only maker of a run folder.

The session (app/train/running/session.py) holds one ``RunRecord`` for the run it trains and reports everything through
it; the UI's job watcher records a process that died before its session could close the run (``record_exit``) without
importing anything of training. Failures are classified here once (a failed write reads as the full-disk line of
app/run/faults.py; bad input keeps its one line; anything else is its type and first line).

Owns: creating the folder, writing config.yaml and status.json, the failure classification. Must not decide what a
run does (the plan) nor import torch, transformers or the trainers (tests/structure/test_one_door.py,
tests/structure/test_architecture.py).
"""

from __future__ import annotations

import logging
import time
import traceback
from pathlib import Path

from app.errors import RunFailed, UserError, write_failure
from app.run import layout, newrun, store
from app.run.faults import os_error_message

log = logging.getLogger("qlora_app")


class RunRecord:
    """The files that say what a run is and how it stands. ``main`` False (a torchrun worker other than rank 0):
    every write is skipped, rank 0 records for all."""

    def __init__(self, main: bool = True, folder: Path | None = None):
        self.main = main
        self.dir: Path | None = folder

    def create(self, output_dir, run_name: str | None, method: str, dataset: str | list[str] | None,
               run_dir: Path | None) -> Path:
        """The run folder (``run_dir`` when the caller named one); a worker adopts the folder rank 0 made."""
        if self.main:
            self.dir = newrun.create_run_dir(output_dir, run_name, method, dataset, run_dir)
        else:
            self.dir = Path(run_dir)
        return self.dir

    def config(self, text: str) -> None:
        """config.yaml: what trains (the plan's values, the reasons for what it changed as comments on top)."""
        if self.main and self.dir is not None:
            store.write_atomic(self.dir / layout.CONFIG, text)

    def status(self, status: str | None = None, **fields) -> None:
        """status.json: ``status`` None keeps the status word; ``fields`` are merged into what is there."""
        if self.main and self.dir is not None:
            store.write_status(self.dir, status, **fields)

    def failed(self, reason: str) -> None:
        """Failed, with the reason, and the traceback in train.log, as far as the disk allows."""
        try:
            self.status(layout.FAILED, ended=time.time(), error=reason)
        except OSError:
            pass
        try:
            log.error("run failed: %s\n%s", reason, traceback.format_exc())
        except OSError:
            pass

    def ended_early(self, e: BaseException, output_dir) -> BaseException:
        """Record how a run ended on ``e`` and return what the caller raises: a failed write (a full disk) becomes
        the one RunFailed line of app/run/faults.py; a stop is interrupted; bad input or a fault is failed with its
        one line."""
        failed_write = write_failure(e)
        if failed_write is not None:  # a full disk, or any other failure to write the run's files
            err = RunFailed(os_error_message(failed_write, self.dir or Path(output_dir)))
            if self.dir is not None:
                self.failed(str(err))
            return err
        if self.main and self.dir is not None:
            if isinstance(e, KeyboardInterrupt):
                self.status(layout.INTERRUPTED, ended=time.time(), error=None)
            else:
                self.failed(str(e) if isinstance(e, UserError) else f"{type(e).__name__}: {e}".splitlines()[0])
            log.error("run ended: %s\n%s", type(e).__name__, traceback.format_exc())
        return e


def record_exit(run_dir: Path, rc: int, stop_requested: bool, killed: bool, last_line: str | None) -> None:
    """A run's process exited (the UI's job watches it): when it could not close its run itself (killed, or gone
    before its session wrote a final status), the record says how it ended, so the Runs tab never shows a dead run
    as running."""
    st = store.read_status(run_dir)
    if st is None or st.get("status") in (layout.FINISHED, layout.FAILED, layout.INTERRUPTED):
        return  # no run was made, or its session said how it ended: that is the truth
    if stop_requested:
        note = "killed after the stop grace period" if killed else "stopped before training started"
        store.write_status(run_dir, layout.INTERRUPTED, ended=time.time(), error=None, note=note)
    elif rc == 0:
        store.write_status(run_dir, layout.FAILED, ended=time.time(),
                           error="the training process exited without finishing; see train.log")
    else:
        why = f"signal {-rc}" if rc < 0 else f"exit code {rc}"
        store.write_status(run_dir, layout.FAILED, ended=time.time(),
                           error=f"training process ended with {why}" + (f": {last_line}" if last_line else ""))


def record_export(run_dir: Path, fmt: str, out: str, measured: list[dict]) -> None:
    """An export of the run and what it measured of itself (app/export/measure.py), added to status.json's
    ``exports`` (the newest last): what ships, stated as measured."""
    st = store.read_status(run_dir) or {}
    exports = [*(st.get(layout.EXPORTS) or []), {"format": fmt, "out": out, "when": time.time(),
                                                  "measured": measured}]
    store.write_status(run_dir, None, **{layout.EXPORTS: exports})
