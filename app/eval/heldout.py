"""The one held-out sampler: which rows base and adapter are compared on.

``split_seed`` must be the training run's ``training.seed``: it decides which rows were held out when the dataset
has no test split, so any other value could hand back rows the adapter was trained on. ``seed`` only picks which
held-out rows to return.
"""

from __future__ import annotations

import random

from app.data import build_splits
from app.data.convert import plain_prompt, prompt_messages, prompt_text, reference_text
from app.data.preference import pair_of


def heldout_examples(data_cfg, n: int, seed: int, local_only: bool = False, *, split_seed: int,
                     system_prompt: str | None = None) -> list[dict]:
    """A seeded sample of n held-out rows: [{prompt, reference, row, messages, plain, pair}].

    ``messages`` / ``plain`` are the prompt exactly as training built it (app.data's GRPO conversion with the
    run's system prompt); which one a model sees depends on whether its tokenizer has a chat template."""
    _, heldout, det = build_splits(data_cfg, split_seed, local_only)
    return sample_examples(heldout, det, n, seed, system_prompt)


def sample_examples(heldout, det, n: int, seed: int, system_prompt: str | None = None) -> list[dict]:
    """``n`` rows of a held-out split, seeded, as prompts the way training built them (also the evaluation during
    training: the same rows for the same seed)."""
    idx = random.Random(seed).sample(range(len(heldout)), min(n, len(heldout)))
    rows = heldout.select(idx).to_list() if idx else []
    return [{"prompt": prompt_text(r, det), "reference": reference_text(r, det), "row": r,
             "messages": prompt_messages(r, det, system_prompt), "plain": plain_prompt(r, det, system_prompt),
             "pair": _pair(r, det)} for r in rows]


def _pair(row: dict, det) -> tuple[str, str] | None:
    """Preference data: the row's (chosen, rejected) answers, for preference accuracy (app/eval/preference.py)."""
    pair = pair_of(row, det) if det.format == "preference" else None
    return (pair.chosen, pair.rejected) if pair else None
