"""Several datasets in one run (``data.mix``): each read and detected on its own, mapped to the run's fields, drawn
to its share of the training rows, held out on its own.

How rows are drawn, said in the plan and recorded (``Detection.mix``):

- The mix has ``data.mix_rows`` training rows; by default the most the shares allow **without repeating a row**:
  ``min(rows_i / share_i)``, so the dataset that is smallest for its share is used whole and the others are sampled
  down (seeded, without replacement); the rows left out are counted.
- Asked for more (``data.mix_rows`` above that), a dataset that runs out is **repeated**: whole passes over it, then a
  seeded sample without replacement for the rest, so no row comes more often than its share needs.
- Without shares (``--dataset A --dataset B``), every dataset is used whole (shares by size).
- The drawn rows are shuffled together (seeded) so every stretch of training sees the mix, not one dataset then
  the other; ``data.max_samples`` then keeps the first rows of that order.

Each part keeps its own held-out rows (its test split, else a seeded slice: app/data/loading.py's rule) with the
name of its dataset in the ``source`` column, so the proof reports every dataset on its own. A part's columns are
mapped to the run's: prompt (as turns), reference and worked solution; or prompt, chosen and rejected for preference
data. A mix of preference data with prompt/reference data is refused: one method cannot train on both.

Heavy libraries are imported inside the functions (``datasets``).
"""

from __future__ import annotations

import logging
import math
import random
from pathlib import PurePath

from app.data.convert import completion_text, prompt_messages, reference_text
from app.data.detect import SOURCE, DataError, Detection
from app.data.preference import pair_of

log = logging.getLogger("app.data")


def allocate(sizes: list[int], shares: list[float | None], rows: int | None = None) -> list[int]:
    """Training rows drawn from each dataset: ``rows`` (default: the most without repeats) split by ``shares``
    (largest remainders, so they add up exactly); no shares: every dataset whole."""
    if shares[0] is None:
        return list(sizes)
    total = sum(shares)
    shares = [s / total for s in shares]
    if rows is None:
        rows = int(min(n / s for n, s in zip(sizes, shares)) + 1e-9)
    exact = [rows * s for s in shares]
    counts = [int(math.floor(x)) for x in exact]
    for i in sorted(range(len(exact)), key=lambda i: exact[i] - counts[i], reverse=True)[:rows - sum(counts)]:
        counts[i] += 1
    return counts


def draw(n: int, k: int, seed: int) -> list[int]:
    """``k`` row indices of ``n``: a seeded sample without replacement; past ``n``, whole passes plus a sample."""
    rng = random.Random(seed)
    passes, rest = divmod(k, n)
    out = [i for _ in range(passes) for i in range(n)]
    return out + rng.sample(range(n), rest)


def _kind(det: Detection) -> str:
    return "preference" if det.format == "preference" else "prompt/reference"


def _turns_row(row: dict, det: Detection, name: str) -> dict:
    return {"prompt": prompt_messages(row, det, None), "reference": reference_text(row, det),
            "solution": completion_text(row, det), SOURCE: name}


def _pair_row(row: dict, det: Detection, name: str) -> dict:
    pair = pair_of(row, det)
    return {"prompt": pair.prompt if pair else [], "chosen": pair.chosen if pair else None,
            "rejected": pair.rejected if pair else None, SOURCE: name}


def _features(kind: str):
    from datasets import Features, Value

    turn = [{"role": Value("string"), "content": Value("string")}]
    if kind == "preference":
        return Features({"prompt": turn, "chosen": Value("string"), "rejected": Value("string"),
                         SOURCE: Value("string")})
    return Features({"prompt": turn, "reference": Value("string"), "solution": Value("string"),
                     SOURCE: Value("string")})


def mapped(ds, det: Detection, name: str, kind: str):
    """A part's rows in the run's columns (prompt turns + reference + solution, or prompt + chosen + rejected)."""
    fn = _pair_row if kind == "preference" else _turns_row
    out = ds.map(fn, fn_kwargs={"det": det, "name": name}, remove_columns=ds.column_names, features=_features(kind),
                 desc=f"mapping {name} to the run's fields")
    if kind == "preference":
        out = out.filter(lambda c: c is not None, input_columns="chosen", desc="keeping whole pairs")
    return out


def mix_splits(data_cfg, seed: int, built: list[tuple]):
    """(train rows, held-out rows, Detection) of ``data_cfg.mix`` from each part as read alone (``built``: [(its
    DataConfig, share, train rows, held-out rows, Detection)], app/data/loading.py's); the Detection's ``mix`` says how
    each part was detected and drawn."""
    from datasets import concatenate_datasets

    kinds = {_kind(b[4]) for b in built}
    if len(kinds) > 1:
        said = "; ".join(f"'{dc.dataset}' is {_kind(det)} data" for dc, _, _, _, det in built)
        raise DataError(f"a mix trains one method on every dataset, and these are of two kinds ({said}); mix "
                        "datasets of one kind (prompt/reference with prompt/reference, pairs with pairs)")
    kind = kinds.pop()
    names = _names([b[0].dataset for b in built])
    trains = [mapped(b[2], b[4], n, kind) for b, n in zip(built, names)]
    helds = [mapped(b[3], b[4], n, kind) for b, n in zip(built, names)]
    counts = allocate([len(t) for t in trains], [b[1] for b in built], data_cfg.mix_rows)
    parts = []
    for i, (t, k) in enumerate(zip(trains, counts)):
        idx = draw(len(t), k, seed + i)
        trains[i] = t.select(idx)
        dc, share, _, _, det = built[i]
        parts.append({"dataset": dc.dataset, "name": names[i], "share": share, "rows": k, "available": len(t),
                      "repeats": round(k / len(t), 2) if k > len(t) else None, "unused": max(len(t) - k, 0),
                      "heldout_rows": len(helds[i]), "fields": det.fields_line().split(" (")[0],
                      "heldout": det.reasons.get("heldout"), "format": det.format})
    train = concatenate_datasets(trains).shuffle(seed=seed).flatten_indices()
    if data_cfg.max_samples:
        train = train.select(range(min(data_cfg.max_samples, len(train))))
    heldout = concatenate_datasets(helds)
    return train, heldout, _detection(kind, train, parts, built)


def _names(datasets: list[str]) -> list[str]:
    """Short, distinct names for the source column: a file's stem, a hub id's last part."""
    short = [PurePath(str(d)).name.split(".")[0] or str(d) for d in datasets]
    return [s if short.count(s) == 1 else f"{s}-{i + 1}" for i, s in enumerate(short)]


def _detection(kind: str, train, parts: list[dict], built) -> Detection:
    reasons = {"mix": "; ".join(f"{p['name']}: {p['fields']}" for p in parts),
               "heldout": "; ".join(f"{p['name']}: {p['heldout']}" for p in parts)}
    if kind == "preference":
        return Detection(format="preference", prompt_field="prompt", reference_field=None, context_fields=[],
                         messages_field=None, columns=list(train.column_names), num_rows=len(train), reasons=reasons,
                         chosen_field="chosen", rejected_field="rejected", mix=parts)
    has_ref = any(b[4].reference_field or b[4].pair_fields for b in built)
    return Detection(format="columns", prompt_field="prompt", reference_field="reference" if has_ref else None,
                     context_fields=[], messages_field=None, columns=list(train.column_names), num_rows=len(train),
                     reasons=reasons, solution_field="solution", mix=parts)


def mix_note(det: Detection) -> str:
    """The plan's sentence for a mix: per dataset its share and rows drawn of rows there, how, and what is held out."""
    drawn, held = [], []
    for p in det.mix or []:
        share = f" {p['share']:.0%}" if p.get("share") is not None else ""
        used = (f"{p['rows']} rows, its {p['available']} repeated x{p['repeats']}" if p.get("repeats") else
                f"{p['rows']} of {p['available']} rows" + (f" ({p['unused']} not used)" if p["unused"] else ""))
        drawn.append(f"{p['name']}{share}: {used}")
        held.append(f"{p['name']} {p['heldout_rows']}")
    how = ("each dataset whole (no shares given)" if det.mix and det.mix[0].get("share") is None else
           "a seeded sample without replacement" if not any(p.get("repeats") for p in det.mix or []) else
           "whole passes over a dataset that runs out, then a seeded sample without replacement")
    return (f"mix of {len(det.mix or [])} datasets: {'; '.join(drawn)}; drawn as {how}, shuffled together; "
            f"held out per dataset: {', '.join(held)} rows (the proof reports each)")
