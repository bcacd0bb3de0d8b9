"""Scale-out: the same run on N processes (and N machines) through torch.distributed.run (torchrun).

Why torchrun and not `accelerate launch`: it ships with torch (nothing to install or configure), its flags map one
to one onto ours (--nproc-per-node, --nnodes, --node-rank, --master-addr, --master-port), it forwards SIGINT and
SIGTERM to every worker, and transformers' Trainer (through accelerate's state) reads the environment it sets up
(RANK, LOCAL_RANK, WORLD_SIZE), choosing gloo on CPU and NCCL on GPUs. No process management of our own beyond
invoking it.

The command a user types starts the launcher; each worker is `python -m app.cli train --config RUN/config.yaml
--run-dir RUN` (or `--resume RUN`). Only rank 0 writes the run directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from app import rundir
from app.config import with_absolute_paths
from app.errors import RunFailed, UserError
from app.runtime import child_env, descendants

WORKER_ENV = "QLORA_APP_WORKER"  # set in every worker: a worker never launches again


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def is_main() -> bool:
    """Rank 0: the one process that writes the run directory, logs and shows progress."""
    return rank() == 0


def is_worker() -> bool:
    return bool(os.environ.get(WORKER_ENV))


def wants_launcher(runtime) -> bool:
    return (runtime.num_processes > 1 or runtime.nnodes > 1) and not is_worker()


def launcher_argv(runtime, worker_args: list[str]) -> list[str]:
    """python -m torch.distributed.run ... -m app.cli train <worker_args>."""
    argv = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={runtime.num_processes}",
            f"--nnodes={runtime.nnodes}", f"--node-rank={runtime.node_rank}",
            f"--master-addr={runtime.master_addr}", f"--master-port={runtime.master_port}"]
    return argv + ["-m", "app.cli", "train", *worker_args, "--no-progress"]


def check_same_world(recorded, runtime) -> None:
    """--resume must run on the world it was saved by: DDP's optimizer and RNG states are per process."""
    if (recorded.num_processes, recorded.nnodes) != (runtime.num_processes, runtime.nnodes):
        raise UserError(
            f"this run was trained with {recorded.num_processes} process(es) on {recorded.nnodes} machine(s); resume "
            f"it with the same (--num-processes {recorded.num_processes} --nnodes {recorded.nnodes}), not "
            f"{runtime.num_processes} on {runtime.nnodes}")


def run_launcher(runtime, worker_args: list[str]) -> int:
    """Start torchrun (no shell) in a session of its own and wait. Ctrl-C or SIGTERM (the UI's Stop) reach this
    process only; it passes one SIGTERM to every worker, which checkpoint at the end of the step and stop
    together (the ranks agree on the step), and torchrun then exits cleanly. Signalling torchrun itself would make
    it print a traceback and signal the workers a second time."""
    # The workers must import this same `app` whatever folder the command was started from.
    env = {**child_env(), WORKER_ENV: "1", "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(launcher_argv(runtime, worker_args), env=env, start_new_session=True)

    def stop_workers(signum, frame):
        workers = descendants(proc.pid)
        for pid in workers or [proc.pid]:  # no /proc: torchrun forwards it (with its own noise)
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    previous = {s: signal.signal(s, stop_workers) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        return proc.wait()
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        if proc.poll() is None:  # this process is being torn down: take the workers with it
            for pid in [proc.pid, *descendants(proc.pid)]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def launch_run(cfg, resume: Path | None, run_dir: Path | None, sets: list[str], max_steps: int | None,
               console) -> Path:
    """`qlora-app train` with more than one process: make the run directory and its config.yaml (a new run), then
    run the same config on runtime.num_processes x runtime.nnodes workers through torchrun. Returns the run dir."""
    rt = cfg.runtime
    if resume is not None:
        d = rundir.require_run_dir(resume).resolve()
        worker = ["--resume", str(d)] + (["--max-steps", str(max_steps)] if max_steps is not None else [])
        worker += [a for s in sets for a in ("--set", s)]
    else:
        if rt.nnodes > 1 and run_dir is None:
            raise UserError("a multi-machine run needs --run-dir PATH, the same folder on every machine (a shared "
                            "filesystem), so every node finds the run")
        cfg = with_absolute_paths(cfg, Path.cwd())
        if run_dir is not None and rt.node_rank != 0:  # node 0 made (and checked) it; it may be running already
            d = Path(run_dir).resolve()
            d.mkdir(parents=True, exist_ok=True)
        else:
            d = rundir.create_run_dir(cfg.output_dir, cfg.run_name, cfg.method, cfg.data.dataset,
                                      Path(run_dir).resolve() if run_dir is not None else None)
        if rt.node_rank == 0 or not (d / rundir.CONFIG).exists():  # what every worker starts from
            rundir.write_atomic(d / rundir.CONFIG, cfg.to_yaml())
        worker = ["--config", str(d / rundir.CONFIG), "--run-dir", str(d)]
    console.print(f"launching {rt.num_processes} process(es) x {rt.nnodes} machine(s) through torchrun: {d}")
    rc = run_launcher(rt, worker)
    if rc != 0:
        st = rundir.read_status(d) or {}
        if st.get("status") == rundir.INTERRUPTED:
            return d
        raise RunFailed(f"the distributed run ended with exit code {rc}: "
                        f"{st.get('error') or 'see ' + str(d / rundir.LOG)}")
    return d
