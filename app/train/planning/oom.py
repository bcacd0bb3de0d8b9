"""Out of GPU memory, and on: the fixed ladder a run steps down when a step or a generation round runs out of memory,
and the fault injection that checks it (QLORA_APP_FAULT).

The ladder keeps the effective batch (per-device batch x gradient accumulation) and the data, and takes the first
rung that still changes something:
  GRPO: sample one optimizer step's completions at a time (a smaller generation batch), then sample with the 4-bit
        model instead of the merged 16-bit copy, then half the per-device batch with twice the accumulation (again,
        down to one), then the same settings once more after freeing memory (a passing spike);
  SFT, DPO: half the per-device batch with twice the accumulation (down to one), then activation offloading (CUDA),
        then once more after freeing memory, then shorter examples (training.max_length halved, down to
        MIN_MAX_LENGTH: the change is recorded; longer examples are cut). The last two exist on every device.
  distillation: the batch and the retry as SFT's, then the student's answers shorter (distill.max_completion_length
        halved, down to MIN_COMPLETION); the teacher stays as planned (its precision is the user's choice).
transformers' auto_find_batch_size (accelerate's find_executable_batch_size) is not this: it restarts from step 0
with the batch times 0.9, which changes the effective batch and breaks GRPO's rule that the batch is a multiple of
num_generations.

QLORA_APP_FAULT=oom@N raises torch.OutOfMemoryError as optimizer step N begins (once), oom@gen in the first
generation round (once), oom@always at every step: on a CPU too (docs/reliability.md).

Owns: recognising an out-of-memory error, the ladder, the injected faults. Must not rebuild or record the run (the
session does: app/train/running/session.py).
"""

from __future__ import annotations

import os
import re

from app.config.fields import get_key
from app.config.methods import method_of
from app.errors import RunFailed, UserError
from app.run import integrity

FAULT_ENV = "QLORA_APP_FAULT"
RETRY = "the same settings once more after freeing memory"  # the rung's words, and how a plan tells it was taken
MIN_MAX_LENGTH = 128  # the shortest examples the ladder cuts to
MIN_COMPLETION = 64  # and the shortest answers a distillation student samples
OOM_TEXT = ("out of memory", "OutOfMemoryError")  # torch's message, and older / wrapped reports of it


def is_oom(e: BaseException) -> bool:
    """Whether ``e`` is the GPU running out of memory (torch.OutOfMemoryError, or a library's wrapper of it)."""
    import torch

    return isinstance(e, torch.OutOfMemoryError) or (
        isinstance(e, RuntimeError) and any(t in str(e).split("\n")[0] for t in OOM_TEXT))


class Faults:
    """The faults QLORA_APP_FAULT asks for in this process: ``step(n)`` before optimizer step n, ``generation()``
    before a generation round; each raises torch.OutOfMemoryError when due."""

    def __init__(self, spec: str | None = None):
        spec = (os.environ.get(FAULT_ENV, "") if spec is None else spec).strip()
        self.spec, self.at, self.fired = spec, None, False
        if not spec:
            return
        m = re.fullmatch(r"oom@(\d+|gen|always)", spec)
        if not m:
            raise UserError(f"{FAULT_ENV}={spec} is not a fault: use oom@N (optimizer step N), oom@gen (the first "
                            "generation round) or oom@always, or unset it")
        self.at = m.group(1)

    def step(self, n: int) -> None:
        if self.at == "always" or (self.at == str(n) and not self.fired):
            self._raise(f"optimizer step {n}")

    def generation(self) -> None:
        if self.at == "gen" and not self.fired:
            self._raise("the first generation round")

    def _raise(self, where: str) -> None:
        import torch

        self.fired = True
        raise torch.OutOfMemoryError(f"CUDA out of memory (injected by {FAULT_ENV}={self.spec} at {where})")


def next_rung(plan) -> tuple[dict, str] | None:
    """(config changes, what changed in words) of the next rung of the ladder for ``plan``, or None when it is
    spent."""
    cfg, fast = plan.cfg, plan.fast
    t = cfg.training
    per_step = t.per_device_train_batch_size * t.gradient_accumulation_steps
    method = method_of(cfg)
    if method.rewarded and (fast.completions_at_once or 0) > per_step:
        return ({"grpo.generation_batch_size": per_step},
                f"sampling {per_step} completions at a time (one optimizer step's worth), not "
                f"{fast.completions_at_once}")
    if method.rewarded and fast.sampler == "merged":
        return {"grpo.sampler": "plain"}, "sampling with the 4-bit model instead of the merged 16-bit copy"
    offload = not method.samples and fast.cuda and not fast.offloading and plan.backend != "unsloth"
    if offload and t.per_device_train_batch_size == 1:  # SFT / DPO: after the batch, offloading
        return {"training.activation_offloading": True}, "activation offloading on"
    if t.per_device_train_batch_size > 1:
        half = t.per_device_train_batch_size // 2
        accumulation = per_step // half
        if half * accumulation == per_step:
            return ({"training.per_device_train_batch_size": half,
                     "training.gradient_accumulation_steps": accumulation},
                    f"per-device batch {half} with {accumulation} accumulation steps (was "
                    f"{t.per_device_train_batch_size} x {t.gradient_accumulation_steps})")
    if not any(RETRY in note for note in plan.notes):
        return {}, f"{RETRY} (a passing spike)"
    key = method.completion_key
    # the student's samples (GRPO's are shortened by the user: its reward reads the whole answer)
    if key and not method.rewarded and get_key(cfg, key) > MIN_COMPLETION:
        shorter = max(MIN_COMPLETION, get_key(cfg, key) // 2)
        return ({key: shorter}, f"the student's answers cut at {shorter} tokens, not {get_key(cfg, key)} ({key})")
    if not method.samples and t.max_length > MIN_MAX_LENGTH:
        shorter = max(MIN_MAX_LENGTH, t.max_length // 2)
        return ({"training.max_length": shorter},
                f"examples cut at {shorter} tokens, not {t.max_length} (training.max_length): longer ones lose "
                "their end")
    return None


def next_attempt(plan, step: int, error: str, run_dir):
    """(changes, what changed, checkpoint, its step) of the attempt after running out of memory at ``step``: the
    ladder's next rung, from the run's last complete checkpoint (None and 0: from the start). A spent ladder is
    RunFailed: one line, exit 1, the checkpoints kept."""
    rung = next_rung(plan)
    if rung is None:
        raise RunFailed(spent_message(plan, step, error, run_dir))
    ckpt = integrity.last_checkpoint(run_dir)
    return (*rung, ckpt, integrity.checkpoint_step(ckpt) if ckpt else 0)


def memory_word(cuda: bool) -> str:
    """What runs out: "GPU memory" on a GPU, the process's "memory" on a CPU."""
    return "GPU memory" if cuda else "memory"


def spent_message(plan, step: int, error: str, run_dir) -> str:
    """One line for a run out of memory with no rung left: what ran out, where, what to change, what is kept."""
    cfg = plan.cfg
    ckpt = integrity.last_checkpoint(run_dir)
    keep = (f"checkpoints are kept (newest {ckpt.name}): after a change, qlora-app train --resume {run_dir} --set ..."
            if ckpt else "no checkpoint was saved yet")
    memory = memory_word(plan.where.cuda)
    method = method_of(cfg)
    if method.teacher:
        least = f"per-device batch 1, a retry and answers of at most {cfg.distill.max_completion_length} tokens"
        what = "load the teacher in 4-bit (distill.teacher_4bit=true) or use a smaller teacher, "
    elif method.rewarded:
        least = "per-device batch 1 and a retry"
        what = (f"lower grpo.max_completion_length (now {cfg.grpo.max_completion_length}) or grpo.num_generations "
                f"(now {cfg.grpo.num_generations}), ")
    else:
        least = (f"per-device batch 1, a retry and examples of at most {cfg.training.max_length} tokens"
                 + (", activation offloading" if plan.fast.offloading else ""))
        what = ""
    return (f"out of {memory} at step {step} ({error}), even at the least qlora-app can choose by itself "
            f"({least}); to go on: {what}use a smaller model, or a machine with more {memory}; {keep}")


def free_memory(cuda: bool) -> None:
    """What a failed attempt held goes back: Python's cycles collected, torch's cached GPU blocks released."""
    import gc

    gc.collect()
    if cuda:
        import torch

        torch.cuda.empty_cache()
