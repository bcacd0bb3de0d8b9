"""The training rows in TRL's format for the run's method, fitted to the model's context: GRPO's prompts (those that
leave no room dropped), preference pairs (DPO, ORPO), labelled answers (KTO), SFT's rows with the loss on the
answers (app/train/planning/answer_loss.py). A step of app/train/planning/plan.make_plan, which hands it its ``steps``
(say and apply: each change recorded with the lines said for it).

Owns choosing the conversion for the method. Must not load weights; the conversions themselves live in app/data.
"""

from __future__ import annotations

from app.config.methods import method_of
from app.data import to_grpo, to_sft
from app.data.convert import to_dpo, to_kto
from app.data.turns import reasked
from app.tools.toolbox import try_environment
from app.train.planning.answer_loss import plan_answer_loss
from app.train.planning.context import fit_grpo, fit_sft_length
from app.train.planning.kto import plan_kto


TEACHER_PROMPT = "teacher_prompt"  # a distillation row's prompt as its teacher is asked it (another system prompt)


def training_rows(cfg, rows, det, tok, context, vision, tools, steps, teacher=None):
    """(cfg with the changes made, the rows as the method's trainer takes them): built by the kind of row the method
    trains on (app/config/methods/: its ``rows``). ``teacher``: a distillation's TeacherPlan; asked with another
    system prompt than the student, each row carries ``teacher_prompt`` too."""
    method = method_of(cfg)
    build = ROWS[method.rows]
    return build(cfg, method, rows, det, tok, context, vision, tools, steps, teacher)


def _prompts(cfg, method, rows, det, tok, context, vision, tools, steps, teacher):
    """Prompts the trained model answers itself (GRPO's, a distillation's student's); the reference column stays for
    the reward and the proof."""
    system = cfg.data.system_prompt
    if method.rewarded and det.reference_field is None:
        steps.say("dataset has no reference field: GRPO runs without the reference-match component")
    ds = to_grpo(rows, det, tok, system, keep_columns=bool(cfg.tools.environment))
    changes, train_ds = fit_grpo(cfg, ds, tok, context, steps.say,
                                 tools.schemas() if tools else None)  # says how many it dropped
    if tools and tools.environment is not None and len(train_ds):
        try_environment(tools.environment, dict(train_ds[0]))  # reset with a row, as TRL will
    if teacher is not None and teacher.reasks:  # the same prompt as the teacher was taught to be asked it
        was, now = teacher.student_system, teacher.system_prompt
        train_ds = train_ds.map(lambda r: {TEACHER_PROMPT: reasked(r["prompt"], was, now)},
                                desc="the teacher's prompts")
    return steps.apply(cfg, changes), train_ds


def _pairs(cfg, method, rows, det, tok, context, vision, tools, steps, teacher):
    """Preference pairs (DPO, ORPO), cut to the context."""
    changes, train_ds = fit_sft_length(cfg, context, steps.say), to_dpo(rows, det, tok, cfg.data.system_prompt)
    return steps.apply(cfg, changes), train_ds


def _labelled(cfg, method, rows, det, tok, context, vision, tools, steps, teacher):
    """Answers labelled good or bad (KTO), cut to the context, with KTO's class weights planned."""
    train_ds = to_kto(rows, det, tok, cfg.data.system_prompt)
    cfg = steps.apply(cfg, fit_sft_length(cfg, context, steps.say))
    return steps.apply(cfg, plan_kto(cfg, train_ds, steps.say)), train_ds


def _conversations(cfg, method, rows, det, tok, context, vision, tools, steps, teacher):
    """SFT's rows with the loss on the answers; rows with images are never cut (check_image_rows): no max_length to
    fit."""
    answers, loss = plan_answer_loss(cfg, det, tok, vision, steps.say)
    cfg = steps.apply(cfg, loss)
    changes = {} if vision else fit_sft_length(cfg, context, steps.say)
    return steps.apply(cfg, changes), to_sft(rows, det, tok, cfg.data.system_prompt, answers)


# One builder per kind of row (app/config/methods/base.ROW_KINDS).
ROWS = {"prompt": _prompts, "pair": _pairs, "labelled": _labelled, "conversation": _conversations}
