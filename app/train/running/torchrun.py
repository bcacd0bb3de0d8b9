"""Scale-out: the same run on N processes (and N machines) through torch.distributed.run (torchrun).

Why torchrun and not `accelerate launch`: it ships with torch (nothing to install or configure), its flags map one
to one onto ours (--nproc-per-node, --nnodes, --node-rank, --master-addr, --master-port), it forwards SIGINT and
SIGTERM to every worker, and transformers' Trainer (through accelerate's state) reads the environment it sets up
(RANK, LOCAL_RANK, WORLD_SIZE), choosing gloo on CPU and NCCL on GPUs. No process management of our own beyond
invoking it.

The command a user types starts the launcher (app.train.running.launcher.launch: a session checks the request, then it
runs this module's ``run_launcher``); each worker is `python -m app.cli train --config REQUEST.yaml --run-dir RUN` (or
`--resume RUN`), a session of its own. Only rank 0's session writes the run directory.

Owns: the torchrun process (a process's rank and the world's size: app/host/procs.py). Must not write a run folder.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from app.config.build import with_absolute_paths
from app.errors import UserError
from app.host.procs import child_env, descendants
from app.run import newrun

WORKER_ENV = "QLORA_APP_WORKER"  # set in every worker: a worker never launches again


def is_worker() -> bool:
    return bool(os.environ.get(WORKER_ENV))


def wants_launcher(runtime) -> bool:
    return (runtime.num_processes > 1 or runtime.nnodes > 1) and not is_worker()


MULTI_NODE_PORT = 29500  # torchrun's own default: every machine of a multi-node run must name the same port


def master_port(runtime) -> int:
    """runtime.master_port, else: one machine, a port free right now (the OS picks it; two runs on one machine, or
    two test workers, never meet on 29500); several machines, MULTI_NODE_PORT (they cannot agree on a random one)."""
    if runtime.master_port is not None:
        return runtime.master_port
    if runtime.nnodes > 1:
        return MULTI_NODE_PORT
    with socket.socket() as s:
        s.bind((runtime.master_addr, 0))
        return s.getsockname()[1]


def launcher_argv(runtime, worker_args: list[str]) -> list[str]:
    """python -m torch.distributed.run ... -m app.cli train <worker_args>."""
    argv = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={runtime.num_processes}",
            f"--nnodes={runtime.nnodes}", f"--node-rank={runtime.node_rank}",
            f"--master-addr={runtime.master_addr}", f"--master-port={master_port(runtime)}"]
    return argv + ["-m", "app.cli", "train", *worker_args, "--no-progress"]


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


def worker_run_dir(cfg, run_dir: Path | None) -> Path:
    """Where the workers' new run goes: --run-dir (new or empty; a multi-machine run needs one on a shared
    filesystem), else a new name under output_dir. Not made here: rank 0's session makes it."""
    rt = cfg.runtime
    if rt.nnodes > 1 and run_dir is None:
        raise UserError("a multi-machine run needs --run-dir PATH, the same folder on every machine (a shared "
                        "filesystem), so every node finds the run")
    if run_dir is not None:
        # node 0 checks it; the other nodes' workers may find node 0's run in it already
        return (newrun.check_new_run_dir(run_dir) if rt.node_rank == 0 else Path(run_dir)).resolve()
    cfg = with_absolute_paths(cfg, Path.cwd())
    return newrun.unused_run_dir(cfg.output_dir, cfg.run_name or newrun.default_run_name(cfg.method,
                                                                                           cfg.data.datasets))


def launch_workers(cfg, run_dir: Path, resume: bool, sets: list[str], max_steps: int | None) -> int:
    """Run the request on torchrun's workers and wait: a resume continues RUN from its config.yaml (with the
    resume's --max-steps / --set); a new run hands the request to the workers as a temporary YAML file (not a run
    file: rank 0's session writes config.yaml). Returns torchrun's exit code."""
    if resume:
        worker = ["--resume", str(run_dir)] + (["--max-steps", str(max_steps)] if max_steps is not None else [])
        return run_launcher(cfg.runtime, worker + [a for s in sets for a in ("--set", s)])
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="qlora-app-request-", delete=False) as f:
        f.write(with_absolute_paths(cfg, Path.cwd()).to_yaml())
    try:
        return run_launcher(cfg.runtime, ["--config", f.name, "--run-dir", str(run_dir)])
    finally:
        Path(f.name).unlink(missing_ok=True)
