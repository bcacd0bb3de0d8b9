"""Each method's trainer, found by the method's name: the one table the running layer builds a trainer from
(app/config/methods/ says what each method is; this says how it trains). Every entry takes the same arguments:
(plan, loaded model, run folder, the run's rewards, its counts, on_sampler_change)."""

from __future__ import annotations

from app.train.methods.distill import build_distill_trainer, build_off_policy_trainer
from app.train.methods.grpo import build_grpo_trainer
from app.train.methods.outside_teacher import build_outside_trainer
from app.train.methods.preference_trainers import build_dpo_trainer, build_kto_trainer, build_orpo_trainer
from app.train.methods.sft import build_sft_trainer


def _sft(plan, loaded, run_dir, rewards, counts, on_sampler_change):
    return build_sft_trainer(plan, loaded.model, loaded.processor or loaded.tokenizer, plan.train_ds, run_dir)


def _grpo(plan, loaded, run_dir, rewards, counts, on_sampler_change):
    return build_grpo_trainer(plan, loaded.model, loaded.processor or loaded.tokenizer, plan.train_ds, run_dir,
                              rewards, counts, on_sampler_change=on_sampler_change)


def _dpo(plan, loaded, run_dir, rewards, counts, on_sampler_change):
    return build_dpo_trainer(plan, loaded.model, loaded.processor or loaded.tokenizer, plan.train_ds, run_dir)


def _orpo(plan, loaded, run_dir, rewards, counts, on_sampler_change):
    return build_orpo_trainer(plan, loaded.model, loaded.processor or loaded.tokenizer, plan.train_ds, run_dir)


def _kto(plan, loaded, run_dir, rewards, counts, on_sampler_change):
    return build_kto_trainer(plan, loaded.model, loaded.tokenizer, plan.train_ds, run_dir)


def _distill(plan, loaded, run_dir, rewards, counts, on_sampler_change):
    if plan.teacher.outside is not None:  # a GGUF or an endpoint: its top-k log-probabilities, either mode
        return build_outside_trainer(plan, loaded.model, loaded.tokenizer, plan.train_ds, run_dir)
    build = build_off_policy_trainer if plan.cfg.distill.mode == "off_policy" else build_distill_trainer
    return build(plan, loaded.model, loaded.tokenizer, plan.train_ds, run_dir, loaded.teacher)


# Method name -> its trainer; the same names as app/config/methods.METHODS (tests/train/methods/test_registry.py).
TRAINERS = {"sft": _sft, "grpo": _grpo, "dpo": _dpo, "orpo": _orpo, "kto": _kto, "distill": _distill}
