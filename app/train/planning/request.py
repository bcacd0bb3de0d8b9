"""What is checked of a training request before anything is made, and where a resumed run continues from.

Owns: the request checks (trackers, a dataset, --local-only, the world a run resumes on) and the resume point (the
newest complete checkpoint, and whether it has work left). Called by the session (app/train/running/session.py); writes
no run file but metrics.jsonl's cut back to the resumed step.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from app.config.schema import AppConfig
from app.errors import UserError
from app.host.machine import installed
from app.host.procs import pid_alive
from app.rewards import load_custom
from app.run import integrity, layout, lookup, store
from app.tools.toolbox import load_toolbox, try_environment

log = logging.getLogger("qlora_app")

# report_to names whose package (same name) transformers' integration imports; without it, it raises a bare
# RuntimeError deep inside Trainer(). tensorboard is satisfied by tensorboardX too.
TRACKERS = ("trackio", "tensorboard", "wandb", "mlflow", "comet_ml", "clearml", "swanlab")


def missing_trackers(report_to: list[str]) -> list[str]:
    def absent(name: str) -> bool:
        alternatives = (name, "tensorboardX") if name == "tensorboard" else (name,)
        return not any(installed(m) for m in alternatives)

    return [r for r in report_to if r in TRACKERS and absent(r)]


def check_request(cfg: AppConfig) -> None:
    """What is wrong with the request itself, before any data or model is read."""
    if cfg.runtime.local_only:
        remote = [r for r in cfg.runtime.report_to if r not in ("trackio", "tensorboard", "none")]
        if remote:
            raise UserError(f"--local-only forbids remote trackers {remote}; use runtime.report_to=[trackio]")
    missing = missing_trackers(cfg.runtime.report_to)
    if missing:
        raise UserError(f"runtime.report_to names {', '.join(missing)}, which is not installed: pip install "
                        f"{' '.join(missing)}, or drop it from runtime.report_to")
    if not cfg.data.datasets:
        raise UserError("no dataset given; pass --dataset NAME|FILE (try --dataset arith for the built-in data)")


def check_user_code(cfg: AppConfig) -> None:
    """The user's own code, before the data is read and before any folder is made (a run and its dry run alike):
    a custom reward that cannot be loaded, a misspelt built-in tool, a tool file or an environment that is wrong,
    each one line. (The plan reads them again, from the modules already imported.)"""
    for entry in cfg.reward.custom:
        load_custom(entry)
    if cfg.tools.enabled:
        box = load_toolbox(cfg.tools)
        if box.environment is not None:
            try_environment(box.environment)  # made as TRL makes it: no arguments


def check_same_world(recorded, runtime) -> None:
    """--resume must run on the world it was saved by: DDP's optimizer and RNG states are per process."""
    if (recorded.num_processes, recorded.nnodes) != (runtime.num_processes, runtime.nnodes):
        raise UserError(
            f"this run was trained with {recorded.num_processes} process(es) on {recorded.nnodes} machine(s); resume "
            f"it with the same (--num-processes {recorded.num_processes} --nnodes {recorded.nnodes}), not "
            f"{runtime.num_processes} on {runtime.nnodes}")


def resumable_dir(path: Path, main: bool = True) -> Path:
    """The run folder --resume names, when no live process is training it (rank 0 checks; the workers of a
    distributed resume find rank 0's launcher running it)."""
    d = lookup.require_run_dir(path)
    st = store.read_status(d) or {}
    if main and st.get("status") == layout.RUNNING and pid_alive(st.get("pid")):
        raise UserError(f"run '{d.name}' is still running; stop it before resuming")
    return d


def require_checkpoint(d: Path) -> None:
    """A run with no complete checkpoint has nothing to resume: said before the model or the data are checked."""
    if integrity.last_checkpoint(d, verify_data=False) is None:
        raise _nothing_to_resume(d)


def _nothing_to_resume(d: Path) -> UserError:
    torn = [p.name for p in integrity.checkpoints(d)]
    return UserError(f"'{d}' has no complete checkpoint to resume from"
                     + (f" ({', '.join(torn)} torn)" if torn else " (checkpoints/ is empty)")
                     + "; start a new run instead")


def check_work_left(ckpt: Path, cfg: AppConfig, d: Path) -> None:
    """A run whose checkpoint already reached the planned end has nothing left to train. (Hugging Face's Trainer
    would still run one more step past max_steps, and again on every such resume.)"""
    try:
        state = json.loads((ckpt / layout.TRAINER_STATE).read_text())
        step, planned = int(state["global_step"]), int(state["max_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # app.run.integrity.checkpoint_problem vetted the file; an older layout just trains on
    t = cfg.training
    target = t.max_steps if t.max_steps > 0 else (planned if t.num_train_epochs <= state.get("num_train_epochs", 0)
                                                   else None)
    if target is not None and step >= target:
        raise UserError(f"run '{d.name}' has already trained {step} steps (max_steps {target}); pass --max-steps N "
                        f"(more than {step}) to train it further")


def resume_point(d: Path, note=None, cfg: AppConfig | None = None, main: bool = True) -> Path:
    """The newest complete checkpoint of run ``d``; torn newer ones are named (``note``) and skipped, none is a user
    error. metrics.jsonl is cut back to that step (by rank 0), so the steps trained again are logged once."""
    ckpt = integrity.last_checkpoint(d, note=note)
    if ckpt is None:
        raise _nothing_to_resume(d)
    if cfg is not None:
        check_work_left(ckpt, cfg, d)
    step = integrity.checkpoint_step(ckpt)
    if note is not None:  # which checkpoint, said where the user looks (the terminal and train.log)
        note(f"resuming from {ckpt.name} (step {step})")
    dropped = store.truncate_metrics(d, step) if main else 0
    if dropped:
        log.info("resuming from %s: dropped %d metrics rows logged after step %d", ckpt.name, dropped, step)
    return ckpt
