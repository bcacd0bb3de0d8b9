"""One training run, start to finish: data -> 4-bit model -> TRL trainer -> adapter + run directory.

The CLI, the UI (through a CLI subprocess) and the demo all come through `run_training`, so there is one engine.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import time
import traceback
from dataclasses import replace
from pathlib import Path

from app import rundir
from app.config import AppConfig, load_yaml_file, resolve, validate, warnings_for
from app.config_keys import changed_keys
from app.cpu_alloc import reuse_freed_memory
from app.cpu_threads import ThreadGovernor
from app.data import build_splits
from app.errors import RunFailed, UserError
from app.eval.heldout import sample_examples
from app.models import check_model_source
from app.plots import save_curves
from app.rewards import reward_error_count
from app.runs import peak_memory_text
from app.runtime import apply_local_only, installed, pid_alive, quiet_library_noise
from app.train import peakmem
from app.train.checkpoints import save_adapter
from app.train.grpo import build_grpo_trainer
from app.train.launch import is_main
from app.train.plan import RunPlan, decide_packing, load_model, make_plan
from app.train.runlog import close_logging, setup_logging
from app.train.sft import build_sft_trainer
from app.unsloth_backend import import_first

log = logging.getLogger("qlora_app")

# report_to names whose package (same name) transformers' integration imports; without it, it raises a bare
# RuntimeError deep inside Trainer(). tensorboard is satisfied by tensorboardX too.
TRACKERS = ("trackio", "tensorboard", "wandb", "mlflow", "comet_ml", "clearml", "swanlab")


def missing_trackers(report_to: list[str]) -> list[str]:
    def absent(name: str) -> bool:
        alternatives = (name, "tensorboardX") if name == "tensorboard" else (name,)
        return not any(installed(m) for m in alternatives)

    return [r for r in report_to if r in TRACKERS and absent(r)]


def prepare_run_dir(cfg: AppConfig, resume: Path | None, run_dir: Path | None) -> Path:
    if not is_main():  # a worker of a distributed run: rank 0 owns (and checked) the folder the launcher made
        return rundir.require_run_dir(resume) if resume is not None else Path(run_dir)
    if resume is not None:
        d = rundir.require_run_dir(resume)
        st = rundir.read_status(d) or {}
        if st.get("status") == rundir.RUNNING and pid_alive(st.get("pid")):
            raise UserError(f"run '{d.name}' is still running; stop it before resuming")
        return d
    # run_dir: the UI and the torchrun launcher pre-create the folder and write config.yaml into it
    return rundir.create_run_dir(cfg.output_dir, cfg.run_name, cfg.method, cfg.data.dataset, run_dir)


def check_work_left(ckpt: Path, cfg: AppConfig, d: Path) -> None:
    """A run whose checkpoint already reached the planned end has nothing left to train. (Hugging Face's Trainer
    would still run one more step past max_steps, and again on every such resume.)"""
    try:
        state = json.loads((ckpt / rundir.TRAINER_STATE).read_text())
        step, planned = int(state["global_step"]), int(state["max_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # rundir.checkpoint_problem vetted the file; an older layout just trains on
    t = cfg.training
    target = t.max_steps if t.max_steps > 0 else (planned if t.num_train_epochs <= state.get("num_train_epochs", 0)
                                                   else None)
    if target is not None and step >= target:
        raise UserError(f"run '{d.name}' has already trained {step} steps (max_steps {target}); pass --max-steps N "
                        f"(more than {step}) to train it further")


def _changed_on_resume(d: Path, cfg: AppConfig) -> bool:
    """Whether a resume changes the run's plan (--max-steps N extends it, --set changes a key). config.yaml then
    records the plan the run now follows, so a later bare --resume (the crashed-run hint) continues the same one."""
    changed = changed_keys(validate(load_yaml_file(d / rundir.CONFIG)), cfg)
    if changed:
        log.info("config.yaml updated for this resume: %s", "; ".join(changed))
    return bool(changed)


def resume_point(d: Path, console=None, cfg: AppConfig | None = None) -> Path:
    """The newest complete checkpoint of run ``d``; torn newer ones are named and skipped, none is a user error.
    metrics.jsonl is cut back to that step, so the steps trained again are logged once."""
    ckpt = rundir.last_checkpoint(d, note=_say(console, "note") if is_main() else None)
    if ckpt is None:
        torn = [p.name for p in rundir.checkpoints(d)]
        raise UserError(f"'{d}' has no complete checkpoint to resume from"
                        + (f" ({', '.join(torn)} torn)" if torn else " (checkpoints/ is empty)")
                        + "; start a new run instead")
    if cfg is not None:
        check_work_left(ckpt, cfg, d)
    step = rundir.checkpoint_step(ckpt)
    dropped = rundir.truncate_metrics(d, step) if is_main() else 0
    if dropped:
        log.info("resuming from %s: dropped %d metrics rows logged after step %d", ckpt.name, dropped, step)
    return ckpt


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
    if not cfg.data.dataset:
        raise UserError("no dataset given; pass --dataset NAME|FILE (try --dataset arith for the built-in data)")


def run_training(cfg: AppConfig, resume: Path | None = None, run_dir: Path | None = None,
                 progress: bool = True, console=None) -> Path:
    """Train and return the run directory: plan, run directory, train, record. Raises UserError for bad input
    (nothing written is lost)."""
    apply_local_only(cfg.runtime.local_only)
    check_request(cfg)
    import_first(cfg.runtime.backend, cfg.runtime.device)  # before anything imports transformers / trl / peft
    quiet_library_noise()
    busy: list[str] = []  # said with the plan's notes, once the run directory exists
    threads = ThreadGovernor(cfg.runtime.threads, note=busy.append)
    reuse_freed_memory()  # before the model's first tensors: see app/cpu_alloc.py
    check_model_source(resolve(cfg).model.name_or_path, cfg.runtime.local_only)  # fail fast, before data
    # Data first: a wrong column name should fail in a second, not after the model has loaded.
    train_raw, heldout_raw, det = build_splits(cfg.data, cfg.training.seed, local_only=cfg.runtime.local_only)
    main = is_main()  # only rank 0 writes the run directory and speaks; every rank trains
    d = handler = ckpt = None
    try:
        if resume is not None:  # nothing to resume is said first, and leaves the run exactly as it was
            d = prepare_run_dir(cfg, resume, None)
            handler = setup_logging(d) if main else None
            ckpt = resume_point(d, console, cfg)
        planned = make_plan(cfg, train_raw, det)  # its notes are said once the run directory (and its log) exists
        plan = planned.plan
        if resume is None:  # a run the plan refuses leaves no folder behind
            d = prepare_run_dir(plan.cfg, None, run_dir)
            handler = setup_logging(d) if main else None
    except BaseException:
        close_logging(handler)
        raise
    try:
        if main:
            _record_start(d, plan, resume, ckpt, console, busy)
            log.info("run %s: %s on %s, %d train rows, %d held out; fields: %s", d.name, plan.cfg.method,
                     plan.cfg.data.dataset, len(train_raw), len(heldout_raw), det.fields_line())
        _train(plan, d, planned, det.reference_field is not None, ckpt, progress and main, console if main else None,
               threads, heldout=sample_examples(heldout_raw, det, cfg.training.eval_rows, cfg.training.seed,
                                                plan.cfg.data.system_prompt))
    except BaseException as e:
        failed_write = write_failure(e)
        if failed_write is not None:  # a full disk, or any other failure to write the run's files
            err = RunFailed(os_error_message(failed_write, d))
            if main:
                _record_failure(d, str(err))
            raise err from None
        if main:
            if isinstance(e, KeyboardInterrupt):
                rundir.write_status(d, rundir.INTERRUPTED, ended=time.time(), error=None)
            else:
                _record_failure(d, str(e) if isinstance(e, UserError) else f"{type(e).__name__}: {e}".splitlines()[0])
            log.error("run ended: %s\n%s", type(e).__name__, traceback.format_exc())
        raise
    finally:
        close_logging(handler)
    return d


def _record_start(d: Path, plan: RunPlan, resume: Path | None, ckpt: Path | None, console,
                  notes: list[str] = ()) -> None:
    """config.yaml (what trains, adjusted values included), status.json and the plan in train.log."""
    if resume is None or _changed_on_resume(d, plan.cfg):
        text = plan.config_yaml()
        if resume is not None and not plan.adjustments:  # the first start's reasons stay beside its values
            old = (d / rundir.CONFIG).read_text().splitlines(keepends=True)
            text = "".join(line for line in old if line.startswith("#")) + text
        rundir.write_atomic(d / rundir.CONFIG, text)
    fields = plan.status_fields()
    if resume is not None and not plan.adjustments:
        fields.pop("adjustments")  # the first start's reasons stay on record
    rundir.write_status(d, rundir.RUNNING, pid=os.getpid(), started=time.time(), method=plan.cfg.method,
                        model=plan.cfg.model.name_or_path, dataset=plan.cfg.data.dataset,
                        step=rundir.checkpoint_step(ckpt) if ckpt else 0, error=None, **fields)
    for line in warnings_for(plan.cfg) + list(plan.notes) + list(notes):
        _say(console, "note")(line)
    log.info(plan.describe().replace("\n", "; "))


def _record_plan_change(d: Path, plan: RunPlan, main: bool) -> None:
    """A decision taken after loading (SFT packing) changed the plan: config.yaml and status.json follow."""
    if main:
        rundir.write_atomic(d / rundir.CONFIG, plan.config_yaml())
        rundir.write_status(d, None, adjustments=[a.line() for a in plan.adjustments])


# How a failed write reads when a library wraps the OSError in its own type: safetensors (SafetensorError "...I/O
# error: No space left on device (os error 28)") and torch.save (RuntimeError "... file write failed").
WRAPPED_WRITE_ERRORS = {"No space left on device": errno.ENOSPC, "os error 28": errno.ENOSPC,
                        "Disk quota exceeded": errno.EDQUOT, "os error 122": errno.EDQUOT,
                        "file write failed": errno.EIO}


def write_failure(e: BaseException) -> OSError | None:
    """The failed write behind ``e``, or None when ``e`` is not one."""
    if isinstance(e, OSError):
        return e
    if not isinstance(e, Exception) or isinstance(e, UserError):
        return None
    text = str(e).splitlines()[0] if str(e) else ""
    code = next((c for needle, c in WRAPPED_WRITE_ERRORS.items() if needle in text), None)
    return None if code is None else OSError(code, text)


def os_error_message(e: OSError, d: Path) -> str:
    """One line for a failed write: what happened, how much room is left, and what a resume would continue from."""
    try:
        free = f"{shutil.disk_usage(d).free / 2**20:.0f} MiB free"
    except OSError:
        free = "free space unknown"
    ckpt = rundir.last_checkpoint(d)
    keep = (f"the newest complete checkpoint is {ckpt.name}" if ckpt else "no complete checkpoint was saved yet")
    what = "the disk is full" if e.errno in (errno.ENOSPC, errno.EDQUOT) else f"a file could not be written ({e})"
    then = f"free space, then: qlora-app train --resume {d}" if ckpt else "free space, then start the run again"
    return f"{what} ({free} on {d}); {keep}; {then}"


def _record_failure(d: Path, reason: str) -> None:
    """status.json says failed with the reason, and train.log gets the traceback, as far as the disk allows."""
    try:
        rundir.write_status(d, rundir.FAILED, ended=time.time(), error=reason)
    except OSError:
        pass
    try:
        log.error("run failed: %s\n%s", reason, traceback.format_exc())
    except OSError:
        pass


def _train(plan: RunPlan, d: Path, planned, has_reference: bool, ckpt: Path | None, progress: bool,
           console, threads: ThreadGovernor | None = None, heldout: list[dict] = ()) -> None:
    # heavy (transformers), and only after import_first: Unsloth must patch transformers before it loads
    from app.train.callbacks import RunDirCallback, StopFlag, TerminalProgress

    # heavy (transformers' TrainerCallback), imported after import_first for the same reason
    from app.train.heldout_eval import HeldoutEval, eval_tokens

    main = is_main()
    say = _say(console, "note")
    loaded = load_model(plan, planned.tokenizer)
    model, tok = loaded.model, loaded.tokenizer
    log.info("model %s loaded (4-bit=%s, compute %s, %s, backend %s)", plan.cfg.model.name_or_path,
             loaded.quantized, plan.where.compute_dtype, plan.where.gpu or "CPU", plan.backend)
    if plan.cfg.model.load_in_4bit and not loaded.quantized:  # a user sizing a GPU must hear it in plain words
        say(f"transformers quantized none of the layers of {type(model).__name__} (its architecture is not "
            "covered by its 4-bit loader): the model trains unquantized, at full size")
    packed = decide_packing(plan, loaded, say if main else None)
    if packed.cfg != plan.cfg:
        _record_plan_change(d, packed, main)
    plan = packed
    stop = StopFlag().install()
    bar = TerminalProgress(plan.cfg.method, enabled=progress)
    try:
        if plan.cfg.method == "grpo":
            trainer = build_grpo_trainer(plan, model, tok, planned.train_ds, d, has_reference,
                                         on_sampler_change=_sampler_recorder(d, plan, main))
            errors = reward_error_count
        else:
            trainer = build_sft_trainer(plan, model, tok, planned.train_ds, d)
            errors = lambda: 0  # noqa: E731 - SFT has no reward
        if main:
            log.info("world size %d (%s)", trainer.args.world_size, trainer.accelerator.state.distributed_type)
        base_errors = errors()
        watch = RunDirCallback(d, stop, lambda: errors() - base_errors, bar, warn=_say(console), write=main,
                               cuda=plan.where.cuda, every_step=threads.adjust if threads else None)
        trainer.add_callback(watch)
        tr = plan.cfg.training
        if main and heldout and tr.eval_every != 0:
            trainer.add_callback(HeldoutEval(d, list(heldout), tok, plan.cfg.reward, tr.eval_every,
                                             eval_tokens(plan.cfg), tr.keep_best, sink=watch.pending))
        trainer.train(resume_from_checkpoint=str(ckpt) if ckpt else None)
    finally:
        bar.close()
        stop.uninstall()
    _record_end(d, plan, trainer, tok, watch, stop, main, len(planned.train_ds))


def _sampler_recorder(d: Path, plan: RunPlan, main: bool):
    """status.json's fast paths follow the sampler that samples: a fallback is recorded with its step."""
    changes: list[dict] = []

    def record(sampler, reason: str) -> None:
        fast = replace(plan.fast, sampler="merged" if sampler is not None else "plain",
                       compiled=sampler is not None and sampler.compile)
        changes.append({"fast_paths": fast.describe(), "reason": reason})
        if main:
            rundir.write_status(d, None, fast_paths=fast.describe(), fast_path_changes=changes)
    return record


def _record_end(d: Path, plan: RunPlan, trainer, tok, watch, stop, main: bool, n_rows: int) -> None:
    step = trainer.state.global_step
    if step == 0 and not stop.requested:  # TRL / HF say "not a single sample", then finish
        raise UserError(f"no training step ran: the {n_rows} training rows gave no full batch; lower "
                        "training.per_device_train_batch_size or gradient_accumulation_steps, or add rows")
    if watch.nonfinite:
        if main:
            rundir.write_status(d, rundir.FAILED, step=step)
        raise RunFailed(nonfinite_message(watch.nonfinite, plan.cfg, d))
    if not main:
        return
    adapter_dir = save_adapter(trainer.model, tok, d)
    peak = peakmem.sample(plan.where.cuda)
    log.info("peak memory: %s", peak_memory_text(peak))
    if stop.requested:
        rundir.write_status(d, rundir.INTERRUPTED, ended=time.time(), step=step, **peak)
        log.info("stopped at step %d; checkpoint saved, resume with --resume %s", step, d)
    else:
        rundir.write_status(d, rundir.FINISHED, ended=time.time(), step=step, **peak)
        log.info("finished at step %d; adapter in %s", step, adapter_dir)
    save_curves(d)


def _say(console, label: str = "warning"):
    def warn(line: str) -> None:
        log.warning(line)
        if console:
            console.print(f"[yellow]{label}:[/] {line}")
    return warn


def nonfinite_message(bad: dict, cfg: AppConfig, d: Path) -> str:
    """Why a run stopped on a NaN / inf loss or gradient norm, the likely causes, and what is kept."""
    ckpt = rundir.last_checkpoint(d)
    keep = f"the last good checkpoint is {ckpt.name}" if ckpt else "no checkpoint was saved before it"
    fp16 = (" or fp16 overflow (use model.compute_dtype=bf16 on Ampere+ GPUs, or fp32)"
            if cfg.model.compute_dtype == "fp16" else " or fp16 overflow on a GPU without bf16")
    return (f"{bad['key']} became {bad['value']} at step {bad['step']}: training stopped; likely a learning rate too "
            f"high (training.learning_rate={cfg.training.learning_rate:g}: try a third of it){fp16}; {keep}")
