"""The training rows in TRL's format for the run's method, fitted to the model's context: GRPO's prompts (those that
leave no room dropped), preference pairs (DPO, ORPO), labelled answers (KTO), SFT's rows with the loss on the
answers (app/train/planning/answer_loss.py). A step of app/train/planning/plan.make_plan, which hands it its ``steps``
(say and apply: each change recorded with the lines said for it).

Owns choosing the conversion for the method. Must not load weights; the conversions themselves live in app/data.
"""

from __future__ import annotations

from app.data import to_grpo, to_sft
from app.data.convert import to_dpo, to_kto
from app.data.turns import reasked
from app.tools.toolbox import try_environment
from app.train.planning.answer_loss import plan_answer_loss
from app.train.planning.context import fit_grpo, fit_sft_length
from app.train.planning.kto import plan_kto


TEACHER_PROMPT = "teacher_prompt"  # a distillation row's prompt as its teacher is asked it (another system prompt)


def training_rows(cfg, rows, det, tok, context, vision, tools, steps, teacher=None):
    """(cfg with the changes made, the rows as the method's trainer takes them). ``teacher``: a distillation's
    TeacherPlan; asked with another system prompt than the student, each row carries ``teacher_prompt`` too."""
    system = cfg.data.system_prompt
    if cfg.method == "grpo":
        if det.reference_field is None:
            steps.say("dataset has no reference field: GRPO runs without the reference-match component")
        ds = to_grpo(rows, det, tok, system, keep_columns=bool(cfg.tools.environment))
        changes, train_ds = fit_grpo(cfg, ds, tok, context, steps.say,
                                     tools.schemas() if tools else None)  # says how many it dropped
        if tools and tools.environment is not None and len(train_ds):
            try_environment(tools.environment, dict(train_ds[0]))  # reset with a row, as TRL will
    elif cfg.method == "distill":  # prompts the student answers; the reference column stays for the proof
        ds = to_grpo(rows, det, tok, system)
        changes, train_ds = fit_grpo(cfg, ds, tok, context, steps.say, None)
        if teacher is not None and teacher.reasks:  # the same prompt as the teacher was taught to be asked it
            was, now = teacher.student_system, teacher.system_prompt
            train_ds = train_ds.map(lambda r: {TEACHER_PROMPT: reasked(r["prompt"], was, now)},
                                    desc="the teacher's prompts")
    elif cfg.method in ("dpo", "orpo"):
        changes, train_ds = fit_sft_length(cfg, context, steps.say), to_dpo(rows, det, tok, system)
    elif cfg.method == "kto":
        train_ds = to_kto(rows, det, tok, system)
        cfg = steps.apply(cfg, fit_sft_length(cfg, context, steps.say))
        changes = plan_kto(cfg, train_ds, steps.say)
    else:  # rows with images are never cut (check_image_rows): no max_length to fit
        answers, loss = plan_answer_loss(cfg, det, tok, vision, steps.say)
        cfg = steps.apply(cfg, loss)
        changes = {} if vision else fit_sft_length(cfg, context, steps.say)
        train_ds = to_sft(rows, det, tok, system, answers)
    return steps.apply(cfg, changes), train_ds
