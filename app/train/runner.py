"""One training run, start to finish: data -> 4-bit model -> TRL trainer -> adapter + run directory.

The CLI, the UI (through a CLI subprocess) and the demo all come through `run_training`, so there is one engine.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
import warnings
from pathlib import Path

from app import rundir
from app.config import AppConfig, resolve, warnings_for, with_absolute_paths
from app.errors import UserError
from app.runtime import apply_local_only, pid_alive, quiet_library_noise

log = logging.getLogger("qlora_app")

LOGGERS = ("qlora_app", "transformers", "trl", "peft", "py.warnings", "app")

def _setup_logging(run_dir: Path) -> logging.Handler:
    handler = logging.FileHandler(Path(run_dir) / rundir.LOG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    for name in LOGGERS:
        lg = logging.getLogger(name)
        lg.addHandler(handler)
    # Our own messages at INFO; the libraries' INFO (every config file they read) would drown the log and,
    # through their own stderr handlers, the terminal.
    logging.getLogger("qlora_app").setLevel(logging.INFO)
    logging.captureWarnings(True)
    # transformers 5 renamed gradient_checkpointing -> activation_checkpointing and TRL still uses the old name
    # internally; the FutureWarning tells a user nothing actionable.
    warnings.filterwarnings("ignore", category=FutureWarning, module="transformers")
    return handler


def prepare_run_dir(cfg: AppConfig, resume: Path | None, run_dir: Path | None) -> Path:
    if resume is not None:
        d = rundir.require_run_dir(resume)
        if rundir.last_checkpoint(d) is None:
            raise UserError(f"'{d}' has no checkpoint to resume from (checkpoints/ is empty); start a new run instead")
        st = rundir.read_status(d) or {}
        if st.get("status") == rundir.RUNNING and pid_alive(st.get("pid")):
            raise UserError(f"run '{d.name}' is still running; stop it before resuming")
        return d
    if run_dir is not None:  # the UI pre-creates the folder and writes config.yaml into it
        d = Path(run_dir)
        if rundir.read_status(d) is not None:
            raise UserError(f"'{d}' already holds a run; pick a new --run-dir (runs are never overwritten)")
        d.mkdir(parents=True, exist_ok=True)
        return d
    return rundir.new_run_dir(cfg.output_dir, cfg.run_name or rundir.default_run_name(cfg.method, cfg.data.dataset))


def run_training(cfg: AppConfig, resume: Path | None = None, run_dir: Path | None = None,
                 progress: bool = True, console=None) -> Path:
    """Train and return the run directory. Raises UserError for bad input (nothing written is lost)."""
    apply_local_only(cfg.runtime.local_only)
    if cfg.runtime.local_only:
        remote = [r for r in cfg.runtime.report_to if r not in ("trackio", "tensorboard", "none")]
        if remote:
            raise UserError(f"--local-only forbids remote trackers {remote}; use runtime.report_to=[trackio]")
    if not cfg.data.dataset:
        raise UserError("no dataset given; pass --dataset NAME|FILE (try --dataset arith for the built-in data)")

    from app.models import check_model_source

    quiet_library_noise()
    check_model_source(resolve(cfg).model.name_or_path, cfg.runtime.local_only)  # fail fast, before data
    # Data first: a wrong column name should fail in a second, not after the model has loaded.
    from app.data import build_splits

    train_raw, heldout_raw, det = build_splits(cfg.data, cfg.training.seed, local_only=cfg.runtime.local_only)
    # Absolute paths in config.yaml: a resume (or the UI) started from another folder reads the same files.
    cfg = resolve(with_absolute_paths(cfg, Path.cwd()), num_rows=len(train_raw))
    d = prepare_run_dir(cfg, resume, run_dir)
    handler = _setup_logging(d)
    if resume is None:
        (d / rundir.CONFIG).write_text(cfg.to_yaml())
    rundir.write_status(d, rundir.RUNNING, pid=os.getpid(), started=time.time(), method=cfg.method,
                        model=cfg.model.name_or_path, dataset=cfg.data.dataset, step=0, error=None)
    for w in warnings_for(cfg):
        log.warning(w)
        if console:
            console.print(f"[yellow]note:[/] {w}")
    log.info("run %s: %s on %s, %d train rows, %d held out; fields %s", d.name, cfg.method, cfg.data.dataset,
             len(train_raw), len(heldout_raw), det.to_dict())
    try:
        _train(cfg, d, train_raw, det, resume is not None, progress, console)
    except BaseException as e:
        interrupted = isinstance(e, KeyboardInterrupt)
        rundir.write_status(d, rundir.INTERRUPTED if interrupted else rundir.FAILED, ended=time.time(),
                            error=None if interrupted else f"{type(e).__name__}: {e}".splitlines()[0])
        log.error("run ended: %s\n%s", type(e).__name__, traceback.format_exc())
        raise
    finally:
        for name in LOGGERS:
            logging.getLogger(name).removeHandler(handler)
        handler.close()
    return d


def _train(cfg: AppConfig, d: Path, train_raw, det, resuming: bool, progress: bool, console) -> None:
    from app.data import to_grpo, to_sft
    from app.models import load_for_training
    from app.train.callbacks import RunDirCallback, StopFlag, TerminalProgress

    model, tok, info = load_for_training(cfg)
    log.info("model %s loaded (4-bit=%s, compute %s, %s, backend %s)", cfg.model.name_or_path, info["4bit"],
             info["compute_dtype"], info["gpu"] or "CPU", info["backend"])
    stop = StopFlag().install()
    bar = TerminalProgress(cfg.method, enabled=progress)
    try:
        if cfg.method == "grpo":
            from app.rewards import reward_error_count
            from app.train.grpo import build_grpo_trainer

            if det.reference_field is None:
                msg = "dataset has no reference field: GRPO runs without the reference-match component"
                log.warning(msg)
                if console:
                    console.print(f"[yellow]note:[/] {msg}")
            train_ds = to_grpo(train_raw, det, tok, cfg.data.system_prompt)
            trainer = build_grpo_trainer(cfg, model, tok, train_ds, d, info, det.reference_field is not None)
            errors = reward_error_count
        else:
            from app.train.sft import build_sft_trainer

            train_ds = to_sft(train_raw, det, tok, cfg.data.system_prompt)
            trainer = build_sft_trainer(cfg, model, tok, train_ds, d, info)
            errors = lambda: 0  # noqa: E731 - SFT has no reward
        base_errors = errors()
        trainer.add_callback(RunDirCallback(d, stop, lambda: errors() - base_errors, bar))
        ckpt = rundir.last_checkpoint(d) if resuming else None
        trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    finally:
        bar.close()
        stop.uninstall()
    adapter_dir = d / rundir.ADAPTER
    trainer.model.save_pretrained(adapter_dir)
    tok.save_pretrained(adapter_dir)
    if stop.requested:
        rundir.write_status(d, rundir.INTERRUPTED, ended=time.time(), step=trainer.state.global_step)
        log.info("stopped at step %d; checkpoint saved, resume with --resume %s", trainer.state.global_step, d)
    else:
        rundir.write_status(d, rundir.FINISHED, ended=time.time(), step=trainer.state.global_step)
        log.info("finished at step %d; adapter in %s", trainer.state.global_step, adapter_dir)
    from app.plots import save_curves

    save_curves(d)
