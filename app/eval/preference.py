"""Preference accuracy on held-out pairs: does the model prefer the chosen answer to the rejected one, base (adapter
off) vs adapter?

For each held-out pair, the summed log-probability of the chosen and of the rejected answer after the prompt, as
app/ask/logprobs.py reads them through the Asker (the prompt as training built it, the answer as TRL's DPO tokenizes
it). Then, in the
words of app.run.layout.PREFERENCE_WORDS (one definition per name, as TRL's are during training):
  - reward margin: DPO's implicit reward of chosen minus rejected, beta x ((adapter - base) of chosen - (adapter -
    base) of rejected), as TRL's rewards/margins; preference accuracy: the share of pairs above 0, as TRL's
    rewards/accuracies;
  - chosen more likely (per side): the share of pairs where chosen is more likely than rejected.
Used by the held-out evaluation during training (app/train/running/heldout_eval.py) and by the proof at the end
(app/eval/compare.py). torch is imported inside the functions.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from app.model.pair import base_side


@dataclass
class PreferenceSummary:
    n: int  # held-out pairs
    accuracy: float  # preference accuracy: share of pairs with a positive implicit reward margin (rewards/accuracies)
    margin: float  # reward margin: the mean implicit reward margin (rewards/margins)
    base_likelier: float  # chosen more likely: share of pairs where the base (adapter off) finds chosen more likely
    adapter_likelier: float  # the same for the adapter
    beta: float

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(base: list[tuple[float, float]], adapter: list[tuple[float, float]], beta: float) -> PreferenceSummary:
    margins = [beta * ((ac - bc) - (ar - br)) for (bc, br), (ac, ar) in zip(base, adapter)]
    n = len(margins)
    return PreferenceSummary(n=n, accuracy=sum(m > 0 for m in margins) / n, margin=sum(margins) / n,
                             base_likelier=sum(c > r for c, r in base) / n,
                             adapter_likelier=sum(c > r for c, r in adapter) / n, beta=beta)


def compare_pairs(asker, items: list[dict], beta: float, base: list | None = None):
    """(PreferenceSummary, the base's log-probs) of the items that hold a pair, or (None, None) when none does.
    ``asker``: the run's PEFT model as app/ask/asking.Asker asks it (its ``logprobs``); ``base``: the base's
    log-probs from an earlier call (they do not change while the adapter trains)."""
    pairs = [it for it in items if it.get("pair")]
    if not pairs:
        return None, None
    if base is None:
        with base_side(asker.model):
            base = asker.logprobs(pairs)
    adapter = asker.logprobs(pairs)
    return summarize(base, adapter, beta), base
