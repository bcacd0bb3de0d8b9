"""ORPO: learns from preference pairs with no reference model (TRL's experimental trainer); reads DPO's section."""

from __future__ import annotations

from app.config.methods.base import Method


class ORPO(Method):
    name = "orpo"
    learns_from = "learn from preference pairs without a reference model (TRL's experimental ORPO)"
    experimental = True
    learning_rate = 1e-5
    rows = "pair"
    section = "dpo"

    def check(self, cfg) -> str | None:
        if cfg.dpo.loss_type != ["sigmoid"] or cfg.dpo.loss_weights:
            return (f"dpo.loss_type={','.join(cfg.dpo.loss_type)} is a DPO setting and ORPO has one loss of its own; "
                    "drop it, or train with --method dpo")
        return None

    def card_line(self, cfg, named) -> str:
        return (f"- ORPO on preference pairs (TRL's experimental trainer): lambda {cfg.dpo.beta:g}, no reference "
                "model")


METHOD = ORPO()
