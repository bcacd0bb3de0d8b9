"""`qlora-app train` with more than one process: the request checked here, then torchrun's workers, each a Session.

Owns: turning one checked request into a torchrun run and reading how it ended. The workers' own machinery (ranks,
the torchrun command line, the run folder they share) is app/train/running/torchrun.py's; every worker is a Session
whose rank 0 creates and records the run. Must not train, plan or write the run folder itself.
"""

from __future__ import annotations

from pathlib import Path

from app.errors import RunFailed
from app.run import layout, store
from app.train.running.session import INTERRUPTED_EXIT, Session
from app.train.running.torchrun import launch_workers, worker_run_dir


def launch(session: Session, sets: list[str], max_steps: int | None) -> Path:
    """The request is checked by ``session`` (one line, exit 2, nothing made), then runs on runtime.num_processes x
    runtime.nnodes workers through torchrun. Sets the session's status and exit code; returns the run folder."""
    session.open(launcher=True)
    request = session.request
    rt = request.runtime
    d = session.dir.resolve() if session.dir is not None else worker_run_dir(request, session.run_dir)
    if session.console:
        session.console.print(f"launching {rt.num_processes} process(es) x {rt.nnodes} machine(s) through "
                              f"torchrun: {d}")
    rc = launch_workers(request, d, resume=session.dir is not None, sets=sets, max_steps=max_steps)
    st = store.read_status(d) or {}
    session.status = st.get("status")
    if rc != 0 and session.status != layout.INTERRUPTED:
        raise RunFailed(f"the distributed run ended with exit code {rc}: "
                        f"{st.get('error') or 'see ' + str(d / layout.LOG)}")
    session.exit_code = INTERRUPTED_EXIT if session.status == layout.INTERRUPTED else 0
    return d
