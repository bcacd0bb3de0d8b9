"""Distillation: TRL's DistillationTrainer with a LoRA adapter on the 4-bit student and the plan's teacher.

On-policy (distill.mode on_policy): the student samples an answer to each prompt, and the loss is the generalized
JSD (distill.beta) between its next-token distribution and the teacher's on every token of that answer: the signal
GRPO gets once per answer, here per token. Off-policy (off_policy): the teacher answers each training prompt once,
greedily (``teacher_answers``), and the student is SFT-trained on those answers (app/train/methods/sft.py).

TRL logs ``loss`` (the divergence, falling as the student closes on the teacher) and the student's ``entropy``;
the run's curves show both.

A teacher asked with another system prompt than the student (a run teacher trained with its own: the plan's
TeacherPlan.system_prompt) reads each row's ``teacher_prompt`` (app/train/planning/rows.py) before the student's
answer: on-policy, its forward sees its own prompt's tokens followed by the same answer tokens (the loss compares the
two models on the answer only); off-policy, it answers its own prompt.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from app.ask.asking import Asker
from app.train.methods.args import distill_kwargs
from app.train.methods.common import make_trainer
from app.train.methods.sft import build_sft_trainer
from app.train.planning.plan import RunPlan
from app.train.planning.rows import TEACHER_PROMPT

log = logging.getLogger("qlora_app")


def build_distill_trainer(plan: RunPlan, model, tok, train_ds, run_dir: Path, teacher):
    """On-policy distillation of ``teacher`` (loaded for inference: app.model.teacher.load_teacher) into the
    plan's LoRA on ``model``, on the plan's prompts."""
    from trl import DistillationConfig  # heavy: imported when a trainer is built

    args = DistillationConfig(**distill_kwargs(plan, run_dir, getattr(model, "_no_split_modules", None)))
    return make_trainer(teacher_prompt_trainer(), args, plan, model, tok, train_ds, teacher_model=teacher)


def teacher_prompt_trainer():
    """TRL's DistillationTrainer whose teacher reads each row's ``teacher_prompt`` where the rows carry one: the
    teacher's hidden states over its own prompt followed by the student's answer, the answer's positions kept (the
    loss reads the last ``logits_to_keep`` positions of both models, the answer's)."""
    import torch
    from trl import DistillationTrainer
    from trl.trainer.utils import pad

    class TeacherPromptTrainer(DistillationTrainer):
        _teacher_inputs = None

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            if inputs and TEACHER_PROMPT in inputs[0]:
                ids, _, _ = self._tokenize_prompts([x[TEACHER_PROMPT] for x in inputs])
                ids = [torch.tensor(i) for i in ids]
                device = out["prompt_ids"].device
                out["teacher_prompt_ids"] = pad(ids, padding_value=self._tokenizer.pad_token_id,
                                                padding_side="left").to(device)
                out["teacher_prompt_mask"] = pad([torch.ones_like(i) for i in ids], padding_value=0,
                                                 padding_side="left").to(device)
            return out

        def _compute_loss(self, unwrapped_student, inputs, num_items_in_batch):
            self._teacher_inputs = inputs
            try:
                return super()._compute_loss(unwrapped_student, inputs, num_items_in_batch)
            finally:
                self._teacher_inputs = None

        def _get_last_hidden_state(self, unwrapped_model, input_ids, attention_mask, logits_to_keep, **kw):
            inp = self._teacher_inputs
            if (inp is not None and "teacher_prompt_ids" in inp
                    and unwrapped_model is self.accelerator.unwrap_model(self.teacher_model)):
                input_ids = torch.cat([inp["teacher_prompt_ids"], inp["completion_ids"]], dim=1)
                attention_mask = torch.cat([inp["teacher_prompt_mask"], inp["completion_mask"]], dim=1)
            return super()._get_last_hidden_state(unwrapped_model, input_ids, attention_mask, logits_to_keep, **kw)

    return TeacherPromptTrainer


def build_off_policy_trainer(plan: RunPlan, model, tok, train_ds, run_dir: Path, teacher):
    """Off-policy distillation: the teacher answers, greedily, the prompts the run will train on (max_steps x the
    batch, or all of them), once; then SFT of the plan's LoRA on those answers (packing off: a prompt and its answer
    per row, as the on-policy run sees them)."""
    t = plan.cfg.training
    seen = t.max_steps * t.per_device_train_batch_size * t.gradient_accumulation_steps if t.max_steps > 0 else 0
    rows = train_ds.select(range(min(len(train_ds), seen))) if seen else train_ds
    log.info("the teacher answers %d training prompts once (off-policy distillation)", len(rows))
    asked = TEACHER_PROMPT if TEACHER_PROMPT in rows.column_names else "prompt"  # its own system prompt
    answers = teacher_answers(teacher, tok, list(rows[asked]), plan.cfg.distill.max_completion_length)
    chat = len(rows) > 0 and isinstance(rows[0]["prompt"], list)
    rows = rows.map(lambda _, i: {"completion": [{"role": "assistant", "content": answers[i]}] if chat
                                  else answers[i]}, with_indices=True, desc="the teacher's answers")
    rows = rows.select_columns(["prompt", "completion"])  # SFT's prompt-completion rows (the reference: the proof's)
    return build_sft_trainer(replace(plan, packing=False), model, tok, rows, run_dir)


def teacher_answers(teacher, tok, prompts: list, max_new_tokens: int, batch_size: int = 32,
                    on_batch=None) -> list[str]:
    """The teacher's greedy answer to each prompt (chat messages, or a model without a chat template's text): what
    off-policy distillation trains the student on, written once before training, asked as every model is asked."""
    items = [{"messages": p, "plain": p} if isinstance(p, list) else
             {"messages": [{"role": "user", "content": p}], "plain": p} for p in prompts]
    out = Asker(teacher, tok).answers(items, max_new_tokens=max_new_tokens, batch_size=batch_size, on_batch=on_batch)
    return [o["text"] for o in out]
