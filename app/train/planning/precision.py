"""4-bit or 16-bit LoRA: both are planned and estimated alike (``model.load_in_4bit``); for a family whose 4-bit
base is known to lose more than usual, the plan shows both estimates and recommends one. Today that is Qwen3.5,
dense or MoE: Unsloth's guide finds its quantization differences larger than usual and recommends 16-bit LoRA.

Owns ``precision_lines`` (RunPlan.describe says them). Must not change the config: the user picks, the plan says.
"""

from __future__ import annotations

from app.config.build import with_values
from app.train.planning.memory import estimate_memory, verdict

# model_type prefix -> why its 4-bit base is not recommended (a family's text, MoE and vision-language types share it)
FOUR_BIT_HURTS = {
    "qwen3_5": "Qwen3.5 loses more than usual in 4-bit (Unsloth's guide recommends 16-bit LoRA for it, dense or MoE)",
}


def four_bit_caveat(config: dict | None) -> str | None:
    """Why this model's family is better trained on a 16-bit base, or None."""
    kind = str(((config or {}).get("text_config") or config or {}).get("model_type") or "")
    return next((why for prefix, why in FOUR_BIT_HURTS.items() if kind.startswith(prefix)), None)


def precision_lines(plan) -> list[str]:
    """The 4-bit and the 16-bit estimate side by side, and which one to use, for a family FOUR_BIT_HURTS names."""
    cfg = plan.cfg
    why = four_bit_caveat(plan.model_files.config if plan.model_files else None)
    if not why or plan.estimate.get("total_gb") is None:
        return []
    other = estimate_memory(with_values(cfg, {"model.load_in_4bit": not cfg.model.load_in_4bit}), plan.lengths,
                            plan.decisions())
    four, sixteen = (plan.estimate, other) if cfg.model.load_in_4bit else (other, plan.estimate)
    card = plan.where.vram_gb if plan.where.cuda else None
    if card is None:
        pick = f"16-bit LoRA (model.load_in_4bit=false) on a card that holds ~{sixteen['total_gb']:.1f} GB"
    elif verdict(sixteen["total_gb"], card) == "fits":
        pick = "16-bit LoRA (model.load_in_4bit=false): it fits this card"
    else:
        pick = f"4-bit here: 16-bit does not fit this {card:.0f} GB card"
    used = "4-bit" if cfg.model.load_in_4bit else "16-bit"
    return [f"precision: {why}; 4-bit ~{four['total_gb']:.1f} GB, 16-bit ~{sixteen['total_gb']:.1f} GB on the card; "
            f"recommended: {pick} (this run: {used})"]
