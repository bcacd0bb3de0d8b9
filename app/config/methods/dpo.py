"""DPO: learns from preference pairs (a chosen and a rejected answer), the base with the adapter off as reference."""

from __future__ import annotations

from app.config.methods.base import Method


class DPO(Method):
    name = "dpo"
    learns_from = "learn from preference pairs"
    learning_rate = 1e-5  # 10x TRL's full fine-tuning default: pairs carry about as little per step as RL's rewards
    rows = "pair"
    section = "dpo"
    pictures = True
    demo = "pairs"

    def card_line(self, cfg, named) -> str:
        d = cfg.dpo
        return (f"- DPO on preference pairs: loss {' + '.join(d.loss_type)}"
                + (f" (weights {', '.join(f'{w:g}' for w in d.loss_weights)})" if d.loss_weights else "")
                + f", beta {d.beta:g}; the reference is the base with the adapter switched off")


METHOD = DPO()
