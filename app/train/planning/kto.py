"""KTO: TRL's KTOTrainer with a LoRA adapter on the 4-bit base, learning from answers labelled good or bad (one per
row, TRL's prompt / completion / label; or both sides of preference pairs). As DPO's, its reference is the base
with the adapter switched off (no second copy). The plan balances the two labels' weights by their counts, as the
KTO paper advises (good x desirable_weight about bad x undesirable_weight), and records them.

Owns ``plan_kto`` (the weights, called by app/train/planning/rows.py). Must not convert data (app/data/convert.to_kto
does) nor build the trainer (app/train/methods/preference_trainers.py builds the preference trainers, KTO's among them).
"""

from __future__ import annotations

from app.errors import UserError


def plan_kto(cfg, train_ds, say) -> dict:
    """The config changes KTO's rows call for: desirable_weight balanced by the counts when left empty. One line for
    rows that are all one label (KTO needs both to learn what to prefer)."""
    labels = train_ds["label"]
    good, bad = sum(1 for x in labels if x), sum(1 for x in labels if not x)
    if not good or not bad:
        which = "good" if good else "bad"
        raise UserError(f"every training row is labelled {which} ({len(labels)} rows): KTO learns from answers labelled "
                        "good and answers labelled bad; add rows of the other label (or use --method sft on the good "
                        "ones)")
    k = cfg.kto
    weight = k.desirable_weight or round(bad * k.undesirable_weight / good, 3)
    say(f"KTO: {good} answers labelled good and {bad} bad; desirable_weight {weight:g} and undesirable_weight "
        f"{k.undesirable_weight:g} (good x weight = {good * weight:g}, bad x weight = {bad * k.undesirable_weight:g})"
        + ("" if k.desirable_weight else ": balanced by their counts, as the KTO paper advises"))
    return {} if k.desirable_weight else {"kto.desirable_weight": weight}
