"""The one held-out sampler: which rows base and adapter are compared on.

``split_seed`` must be the training run's ``training.seed``: it decides which rows were held out when the dataset
has no test split, so any other value could hand back rows the adapter was trained on. ``seed`` only picks which
held-out rows to return.
"""

from __future__ import annotations

import random

from app.data import build_splits
from app.data.convert import plain_prompt, prompt_messages, prompt_text, reference_text
from app.data.detect import SOURCE
from app.data.images import IMAGES, decoded
from app.data.mixing import allocate
from app.run import layout
from app.data.preference import pair_of


def heldout_examples(data_cfg, n: int, seed: int, local_only: bool = False, *, split_seed: int,
                     system_prompt: str | None = None) -> list[dict]:
    """A seeded sample of n held-out rows: [{prompt, reference, row, messages, plain, pair}].

    ``messages`` / ``plain`` are the prompt exactly as training built it (app.data's GRPO conversion with the
    run's system prompt); which one a model sees depends on whether its tokenizer has a chat template."""
    return heldout_sample(data_cfg, n, seed, local_only, split_seed=split_seed, system_prompt=system_prompt)[0]


def heldout_sample(data_cfg, n: int, seed: int, local_only: bool = False, *, split_seed: int,
                   system_prompt: str | None = None, chosen_on: int = 0) -> tuple[list[dict], dict | None]:
    """(heldout_examples' rows, the leak check of the split they are drawn from: how many held-out rows repeated a
    training row and were left out, app/data/leaks.Leaks.to_dict; None for a mix, checked per dataset).
    ``chosen_on``: the rows each evaluation during training scored, when the adapter was picked as the best of
    those evaluations: they are left out (``chosen_on_rows``)."""
    _, heldout, det = build_splits(data_cfg, split_seed, local_only)
    return sample_examples(heldout, det, n, seed, system_prompt,
                           leave_out=_indices(heldout, det, chosen_on, split_seed) if chosen_on else ()), det.leaks


def chosen_on_rows(status: dict, adapter_dir) -> int:
    """How many held-out rows an adapter was chosen on: the rows each evaluation during training scored (status.json's
    eval_rows), when the adapter is the best of those evaluations (RUN/adapter-best, or RUN/adapter that early
    stopping made the best point's); else 0. Figures on the rows that picked it would favour it by the choice alone,
    the way a test set used for model selection stops being one (the proof leaves them out)."""
    name = getattr(adapter_dir, "name", None)
    picked = name == layout.BEST_ADAPTER or (
        name == layout.ADAPTER and status.get(layout.ADAPTER_STEP) is not None
        and status.get(layout.ADAPTER_STEP) != status.get("step"))
    return int(status.get(layout.EVAL_ROWS) or 0) if picked else 0


def sample_examples(heldout, det, n: int, seed: int, system_prompt: str | None = None,
                    leave_out=()) -> list[dict]:
    """``n`` rows of a held-out split, seeded, as prompts the way training built them (also the evaluation during
    training: the same rows for the same seed). A mix's rows are drawn from each dataset by its share (``dataset``:
    its name), so every dataset is in the figures. ``leave_out``: indices of rows never drawn."""
    if leave_out:
        away = set(leave_out)
        heldout = heldout.select([i for i in range(len(heldout)) if i not in away])
    idx = _indices(heldout, det, n, seed)
    rows = heldout.select(idx).to_list() if idx else []
    return [{"prompt": prompt_text(r, det), "reference": reference_text(r, det), "row": r,
             "messages": prompt_messages(r, det, system_prompt), "plain": plain_prompt(r, det, system_prompt),
             "pair": _pair(r, det), **({"dataset": r.get(SOURCE)} if det.mix else {}),
             **({"images": decoded(r[IMAGES])} if r.get(IMAGES) else {})} for r in rows]


def _indices(heldout, det, n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    if not det.mix or SOURCE not in heldout.column_names:
        return rng.sample(range(len(heldout)), min(n, len(heldout)))
    where: dict[str, list[int]] = {}
    for i, name in enumerate(heldout[SOURCE]):
        where.setdefault(name, []).append(i)
    parts = [p for p in det.mix if where.get(p["name"])]
    sizes = [len(where[p["name"]]) for p in parts]
    shares = [p.get("share") for p in parts]
    if None in shares:  # each dataset whole: shares by size
        shares = [k / sum(sizes) for k in sizes]
    asked = allocate(sizes, shares, min(n, sum(allocate(sizes, shares))))  # never more than a dataset holds
    out = []
    for p, k in zip(parts, asked):
        rows = where[p["name"]]
        out += rng.sample(rows, min(k, len(rows)))
    return out


def _pair(row: dict, det) -> tuple[str, str] | None:
    """Preference data: the row's (chosen, rejected) answers, for preference accuracy (app/eval/preference.py)."""
    pair = pair_of(row, det) if det.format == "preference" else None
    return (pair.chosen, pair.rejected) if pair else None
