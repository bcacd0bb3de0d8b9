"""Distillation from a teacher outside the training process (a GGUF in its llama.cpp child, an endpoint): TRL's
DistillationTrainer with the teacher's top-k log-probabilities in place of its forward pass.

On-policy (distill.mode on_policy): the student samples its answers as TRL's trainer does; each generation batch
is sent to the teacher once (batched requests), which scores every answer token (its top-k and its log-probability
of the token itself); the loss is app.teacher.topk.topk_divergence (beta as the in-memory teacher's: TRL's
generalized JSD) on that support. Off-policy (off_policy): before the first step the teacher answers each prompt
the run will train on, greedily, once, with its top-k per token, written to the run folder as they come
(app/teacher/answers.py: a resumed or repeated run asks only for what is missing); the student then learns those
answers with the same loss (no sampling: TRL's generation is replaced by the written answers).

Faults: a teacher that fails (its child died, the endpoint down after retries) stops the run at a checkpoint of the
last finished step (the failure comes before the step's own training: a clean boundary), one line, resumable.
"""

from __future__ import annotations

import logging
import weakref
from pathlib import Path

from app.teacher.answers import FILE, Answers, prompt_key
from app.teacher.client import TeacherFailed
from app.teacher.connect import OutsideTeacher
from app.teacher.topk import teacher_tensors, topk_divergence
from app.train.methods.args import distill_kwargs
from app.train.methods.common import make_trainer
from app.train.planning.plan import RunPlan
from app.train.planning.rows import TEACHER_PROMPT

log = logging.getLogger("qlora_app")
TEACHER_LOG = "teacher.log"  # the llama.cpp child's own notes


def build_outside_trainer(plan: RunPlan, model, tok, train_ds, run_dir: Path):
    """The run's trainer on its outside teacher (plan.teacher.outside), which it opens here and closes when training
    ends (or the trainer goes unused: a step-down after out-of-memory builds another); off-policy, the teacher's
    answers are written first."""
    from trl import DistillationConfig  # heavy: imported when a trainer is built

    t = plan.teacher
    args = DistillationConfig(**distill_kwargs(plan, run_dir, getattr(model, "_no_split_modules", None)))
    trainer = make_trainer(outside_teacher_trainer(), args, plan, model, tok, train_ds, teacher_model=None)
    teacher = OutsideTeacher(t.outside.record(), tok, Path(run_dir) / TEACHER_LOG).open()
    weakref.finalize(trainer, teacher.close)
    trainer.teacher, trainer.top_k, trainer.run_dir = teacher, t.outside.top_k, Path(run_dir)
    if plan.cfg.distill.mode == "off_policy":
        d = plan.cfg.distill
        trainer.answers = Answers(Path(run_dir) / FILE, {"teacher": t.source.given, "top_k": t.outside.top_k,
                                                         "max_tokens": d.max_completion_length,
                                                         "system_prompt": t.system_prompt})
        reused = trainer.answers.reuse(Path(run_dir).parent)
        if reused:
            log.info("%d teacher answers reused from an earlier run of this teacher in %s", reused,
                     Path(run_dir).parent)
        tcfg = plan.cfg.training
        seen = tcfg.max_steps * tcfg.per_device_train_batch_size * tcfg.gradient_accumulation_steps
        # the rows the run will draw, in the order its sampler draws them (seeded: training's own first epoch)
        order = list(dict.fromkeys(int(i) for i in trainer._get_train_sampler()))
        trainer.write_answers(train_ds.select(order[:seen] if tcfg.max_steps > 0 else order),
                              d.max_completion_length)
    return trainer


def outside_teacher_trainer():
    """TRL's DistillationTrainer asking an outside teacher: ``OutsideTeacherSide`` before it in the order methods
    are found (its own generation, scoring and loss; TRL's the rest)."""
    from trl import DistillationTrainer  # heavy: imported when a trainer is built

    return type("OutsideTeacherTrainer", (OutsideTeacherSide, DistillationTrainer), {})


class OutsideTeacherSide:
    """What a DistillationTrainer does differently with an outside teacher (``teacher``:
    app.teacher.connect.OutsideTeacher): it asks it for its top-k; ``answers`` (off-policy) are the written answers
    the student learns instead of sampling its own. A mixin: TRL's trainer is heavy, imported when one is built."""

    teacher = answers = run_dir = None
    top_k = 20

    def train(self, *args, **kwargs):
        """TRL's training, the teacher ended with it (however it ends): the proof asks its own, never two at once."""
        try:
            return super().train(*args, **kwargs)
        finally:
            self.teacher.close()

    # ---------------------------------------------------------------------------------- the teacher's answers
    def write_answers(self, rows, max_tokens: int) -> None:
        """The teacher's answer to each of ``rows``' prompts not written yet, asked in batches, each kept as it
        comes; a teacher that fails here stops the run before its first step, what it wrote kept."""
        keys, asked = self._prompt_ids(rows)
        todo = [i for i, ids in enumerate(keys) if self.answers.get(prompt_key(ids)) is None]
        log.info("the teacher answers %d of %d training prompts once (off-policy; %d written before)", len(todo),
                 len(keys), len(keys) - len(todo))
        eos = self.eos_token_ids[0] if self.eos_token_ids else self._tokenizer.eos_token_id
        batch = self.teacher.client.batch
        for at in range(0, len(todo), batch):
            chunk = todo[at:at + batch]
            try:
                got = self.teacher.client.answer([asked[i] for i in chunk], max_tokens, self.top_k, eos)
            except TeacherFailed as e:
                raise TeacherFailed(f"{e}; {len(self.answers.known)} of {len(keys)} answers are kept in "
                                    f"{self.answers.path}: the same command again asks only for the rest") from None
            for i, scored in zip(chunk, got):
                self.answers.add(prompt_key(keys[i]), scored)

    def _prompt_ids(self, rows) -> tuple[list, list]:
        """(the student's prompt token ids, the teacher's) of ``rows``: the same unless the teacher is asked
        with its own system prompt (``teacher_prompt``)."""
        mine, theirs = [], []
        for at in range(0, len(rows), 64):
            part = rows.select(range(at, min(len(rows), at + 64)))
            ids = self._tokenize_prompts(list(part["prompt"]))[0]
            mine += ids
            theirs += (self._tokenize_prompts(list(part[TEACHER_PROMPT]))[0]
                       if TEACHER_PROMPT in part.column_names else ids)
        return mine, theirs

    def _written(self, ids):
        found = self.answers.get(prompt_key(ids))
        if found is None:  # a prompt outside the rows written first (another batch order): asked now
            eos = self.eos_token_ids[0] if self.eos_token_ids else self._tokenizer.eos_token_id
            found = self._asking(lambda: self.teacher.client.answer(
                [list(ids)], self.args.max_completion_length, self.top_k, eos))[0]
            self.answers.add(prompt_key(ids), found)
        return found

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, has_tool_images=False):
        if self.answers is None:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, has_tool_images)
        return [list(self._written(ids).ids) for ids in prompt_ids]  # off-policy: the teacher's answers

    def _generate_and_score_completions(self, inputs):
        out = super()._generate_and_score_completions(inputs)
        prompts = [row[m.bool()].tolist() for row, m in zip(out["prompt_ids"], out["prompt_mask"])]
        answers = [row[m.bool()].tolist() for row, m in zip(out["completion_ids"], out["completion_mask"])]
        if self.answers is not None:
            scored = [self._written(p) for p in prompts]
        else:
            asked = (self._tokenize_prompts([x[TEACHER_PROMPT] for x in inputs])[0]
                     if inputs and TEACHER_PROMPT in inputs[0] else prompts)
            client = self.teacher.client
            tokens, seconds = client.tokens, client.seconds
            scored = self._asking(lambda: client.score(
                [list(a) + c for a, c in zip(asked, answers)], [len(a) for a in asked], self.top_k))
            if client.seconds > seconds:  # the teacher's throughput, logged beside the loss
                mode = "train" if self.model.training else "eval"
                self._metrics[mode]["teacher/tokens_per_s"].append((client.tokens - tokens)
                                                                   / (client.seconds - seconds))
        out.update(teacher_tensors(scored, out["completion_ids"].size(1), self.top_k,
                                   out["completion_ids"].device))
        return out

    def _asking(self, ask):
        """``ask()``; a teacher that fails stops the run at a checkpoint of the last finished step."""
        try:
            return ask()
        except TeacherFailed as e:
            raise TeacherFailed(f"{e}; {self._stop_line()}") from None

    def _stop_line(self) -> str:
        step = self.state.global_step
        if step <= 0:
            return "no step had finished, nothing to keep: start the run again once the teacher answers"
        self._save_checkpoint(self.model, trial=None)
        self.control = self.callback_handler.on_save(self.args, self.state, self.control)
        return (f"training stopped at step {step}, saved as checkpoint-{step}: qlora-app train --resume "
                f"{self.run_dir} continues once the teacher answers")

    # ------------------------------------------------------------------------------------------- the loss
    def _compute_loss(self, unwrapped_student, inputs, num_items_in_batch):
        import torch  # heavy: this runs inside a built trainer

        completion_ids, completion_mask = inputs["completion_ids"], inputs["completion_mask"]
        input_ids = torch.cat([inputs["prompt_ids"], completion_ids], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], completion_mask], dim=1)
        loss_mask = completion_mask if "tool_mask" not in inputs else completion_mask * inputs["tool_mask"]
        hidden = self._get_last_hidden_state(unwrapped_student, input_ids, attention_mask,
                                             completion_ids.size(1))
        head = unwrapped_student.get_output_embeddings()
        logps = torch.log_softmax(head(hidden.to(head.weight.device)).float() / self.temperature, dim=-1)
        loss_mask = loss_mask.to(logps.device)
        per_token = topk_divergence(logps, completion_ids.to(logps.device), inputs["teacher_top_ids"],
                                    inputs["teacher_top_lps"], inputs["teacher_lps"], loss_mask, self.beta)
        n_valid = loss_mask.sum()
        denom = num_items_in_batch if num_items_in_batch is not None else n_valid.clamp(min=1)
        loss = per_token.sum() / denom
        with torch.no_grad():
            entropy = -(logps.exp() * logps).sum(-1)
            entropy_sum = (entropy * loss_mask).sum()
        return loss, entropy_sum, n_valid
