"""Building a planned run: the base model as the plan placed it, the TRL trainer on it, and its callbacks.

Owns: loading the model for training (HF + bitsandbytes, or Unsloth on CUDA), choosing the trainer builder of the
method (app/train/methods/grpo.py, app/train/methods/sft.py, app/train/methods/preference_trainers.py) and attaching the
run's callbacks. Must not decide anything (the plan did: app/train/planning/plan.py) nor write the run's records (the
callbacks report to the session: app/train/running/session.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config.methods import method_of
from app.model.load import load_base_model
from app.model.teacher import load_teacher
from app.model.unsloth_backend import load_with_unsloth
from app.rewards import build_reward_funcs
from app.run import store
from app.run.counts import RunCounts
from app.train.methods.registry import TRAINERS
from app.train.planning.plan import RunPlan, answer_tokens


@dataclass
class Loaded:
    model: Any
    tokenizer: Any
    attention: str  # the kernel the model really runs ("unsloth": Unsloth's own)
    quantized: bool  # 4-bit layers were made (transformers quantizes none for some architectures)
    processor: Any = None  # a model that reads images: its processor (TRL's processing_class)
    teacher: Any = None  # a distillation run's teacher, loaded for inference (app.model.teacher.load_teacher)


def load_model(plan: RunPlan) -> Loaded:
    """The base model as the plan placed it: HF + bitsandbytes, or Unsloth on CUDA. The plan's tokenizer is reused.
    A distillation run's teacher loads beside it, for inference."""
    cfg = plan.cfg
    t = plan.teacher
    # a teacher outside the training process (a GGUF, an endpoint) is asked by its trainer, never loaded here
    teacher = load_teacher(t.source, plan.where, cfg.runtime.local_only, t.keep_rows) if t and not t.outside else None
    if plan.backend == "unsloth":
        model, tok = load_with_unsloth(cfg, plan.where.compute_dtype)
        return Loaded(model, tok, "unsloth", cfg.model.load_in_4bit, teacher=teacher)
    v = plan.vision  # the vision side and the processor as the plan decided and loaded them
    model, tok, info = load_base_model(cfg.model, local_only=cfg.runtime.local_only, fsdp=cfg.runtime.fsdp,
                                       where=plan.where, tok=plan.tokenizer, images=bool(cfg.model.images),
                                       vision_paths=v.kept_16bit if v else None, processor=v.processor if v else None,
                                       files=plan.model_files)
    return Loaded(model, tok, info["attention"], info["4bit"], info.get("processor"), teacher)


def run_rewards(plan: RunPlan, has_reference: bool, counts: RunCounts):
    """A GRPO run's (reward functions, weights), made once for the run (an out-of-memory attempt reuses them: one
    judge in memory) and counting in its ``counts``; None for the other methods, which train on no reward."""
    if not method_of(plan.cfg).rewarded:
        return None
    return build_reward_funcs(plan.cfg.reward, has_reference, counts, plan.cfg.runtime)


def build_trainer(plan: RunPlan, loaded: Loaded, run_dir: Path, counts: RunCounts, rewards=None,
                  on_sampler_change=None):
    """The method's TRL trainer on the loaded model; GRPO trains on the run's ``rewards`` (``run_rewards``), its
    tools count their calls in the run's ``counts``. ``on_sampler_change(sampler, reason)`` hears a fast sampler
    stepping down."""
    return TRAINERS[plan.cfg.method](plan, loaded, run_dir, rewards, counts, on_sampler_change)


def attach_callbacks(trainer, session, tokenizer, heldout: list[dict], processor=None):
    """(watch, stop, progress bar, best point): the run's callbacks on ``trainer``, reporting to ``session`` (its
    record, its say): metrics.jsonl and progress (RunDirCallback), Stop on a signal, QLORA_APP_FAULT's injected
    errors, the held-out evaluation every training.eval_every steps, and its best point (early_stop.py)."""
    # heavy (transformers' TrainerCallback), imported only after the session's import_first: Unsloth must patch
    # transformers before it loads
    from app.train.running.callbacks import FaultCallback, Reporting, RunDirCallback, StopFlag, TerminalProgress

    # heavy (transformers' TrainerCallback), imported after import_first for the same reason
    from app.train.running.early_stop import BestPoint

    # heavy (transformers' TrainerCallback), imported after import_first for the same reason
    from app.train.running.heldout_eval import HeldoutEval

    plan, main = session.plan, session.main
    stop = StopFlag().install()
    bar = TerminalProgress(plan.cfg.method, enabled=session.progress and main)
    watch = RunDirCallback(session.dir, stop, session.counts,
                           Reporting(record=session.record, warn=session.warn if main else None, progress=bar,
                                     write=main, cuda=plan.where.cuda, every_step=session.threads.adjust))
    trainer.add_callback(watch)
    if session.faults.at:
        trainer.add_callback(FaultCallback(session.faults))
        trainer.faults = session.faults
    t = plan.cfg.training
    best = None
    if heldout and t.eval_every != 0:  # on every rank: early stopping's decision is taken by all at once
        # a checkpoint made before the best point was kept in checkpoints: status.json's (a fresh start has none)
        restored = (store.read_status(session.dir) or {}) if session.ckpt is not None and main else None
        best = BestPoint(t.early_stop.patience, t.early_stop.min_delta, record=session.record, restored=restored)
    if main and best is not None:
        trainer.add_callback(HeldoutEval(session.dir, heldout, tokenizer, plan.cfg.reward, t.eval_every,
                                         answer_tokens(plan.cfg), t.keep_best, sink=watch.pending,
                                         record=session.record, beta=plan.cfg.dpo.beta, run_cfg=plan.cfg,
                                         rewards=session.rewards[0] if session.rewards else None,
                                         processor=processor, teacher=getattr(trainer, "teacher_model", None),
                                         best=best))
    if best is not None:
        trainer.add_callback(best)  # after the evaluation: a step's point is in before the step's stop decision
    elif t.early_stop.on and main:
        session.warn("early stopping is off for this run: it has no held-out rows to draw a curve from (set "
                     "data.heldout_size, or data.eval_split)")
    return watch, stop, bar, best
