"""KTO: learns from answers labelled good or bad (one per row, or both sides of preference pairs), each beside a
mismatched answer for its KL estimate; the batch advice is TRL's KTO guide's, not LoRA Without Regret's."""

from __future__ import annotations

from app.config.methods.base import Method

# KTO estimates its KL term within each step's batch: TRL's KTO guide asks a per-step batch of at least 4 and an
# effective batch of 16 to 128, which LoRA Without Regret's "under 32" would contradict, so KTO is checked against it
STEP_BATCH, EFFECTIVE = 4, (16, 128)


class KTO(Method):
    name = "kto"
    learns_from = "learn from answers labelled good or bad, one per row, or both sides of preference pairs (KTO)"
    learning_rate = 1e-5
    rows = "labelled"
    section = "kto"
    demo = "pairs"

    def batch_warnings(self, cfg, effective: int) -> list[str]:
        step = cfg.training.per_device_train_batch_size
        if step >= STEP_BATCH and EFFECTIVE[0] <= effective <= EFFECTIVE[1]:
            return []
        return [f"KTO with a per-step batch of {step} and an effective batch of {effective}: TRL's KTO guide asks at "
                f"least {STEP_BATCH} per step and {EFFECTIVE[0]}-{EFFECTIVE[1]} in all (KTO estimates its KL term "
                "within a step's batch); change per_device_train_batch_size or gradient_accumulation_steps"]

    def card_line(self, cfg, named) -> str:
        k = cfg.kto
        return (f"- KTO on answers labelled good or bad: beta {k.beta:g}, desirable_weight "
                f"{k.desirable_weight or 1:g}, undesirable_weight {k.undesirable_weight:g}; the reference is the "
                "base with the adapter switched off")


METHOD = KTO()
