"""A dataset's train and held-out rows, with its detected fields: the split to train on, the held-out rows (a split
the config names, the dataset's own test split, or rows drawn from train and removed from it), every row's images
read and checked once, unpaired data kept to its answers to learn, a mix drawn to its shares (app/data/mixing.py).

Owns ``build_splits`` (the engine's, compare's and the dry run's one way to read a dataset's rows), ``pick_split`` and
``detect_dataset``. Must not read a source itself (app/data/loading.py does) or load a model.
"""

from __future__ import annotations

import logging
import random

from app.data.detect import DataError, detect_nested
from app.data.convert import prompt_text
from app.data.images import IMAGES, attach_images, dataset_shared_names, images_folder, undecoded
from app.data.leaks import find_leaks, with_pictures
from app.data.loading import HELDOUT_SPLITS, resolve_dataset
from app.data.mixing import mix_splits
from app.data.profile import label_value, spread_sample

log = logging.getLogger("app.data")


def pick_split(dd, split: str | None, flag: str = "--split NAME"):
    """The named split; the default 'train' also accepts a dataset whose only split has another name. ``flag``:
    how the caller's user names a split (train: --set data.split=NAME)."""
    name = split or "train"
    if name in dd:
        return name
    if split in (None, "train") and len(dd) == 1:
        return next(iter(dd))
    raise DataError(f"split '{name}' not found; this dataset has: {', '.join(dd)} (pass {flag})")


def detect_dataset(ds, prompt_field: str | None = None, reference_field: str | None = None, sample_rows: int = 64,
                   **pair_fields):
    """(ds, Detection): ``ds`` flattened into dotted columns where only its nested objects hold the prompt.
    ``pair_fields``: chosen_field / rejected_field overrides of preference data."""
    det, flattened = detect_nested(spread_sample(ds, sample_rows), list(ds.column_names), prompt_field,
                                   reference_field, len(ds), **pair_fields)
    return (ds.flatten() if flattened else ds), det


def _desirable(ds, det):
    """Unpaired preference data: only the rows whose answer is one to learn (app.data.preference.with_desirable)."""
    if not det.desirable_field or det.desirable_field not in ds.column_names:
        return ds
    kept = ds.filter(lambda v: label_value(v) is True, input_columns=det.desirable_field,
                     desc="keeping the answers to learn")
    if len(kept) == 0:
        raise DataError(f"no row has '{det.desirable_field}' true: there is no answer to learn; pass a file with good "
                        "answers, or pairs for DPO")
    log.info("kept %d of %d rows whose %s is true (the others are answers to avoid)", len(kept), len(ds),
             det.desirable_field)
    return kept


def _like(split, train):
    """Another split in the train split's shape (flattened when train was)."""
    return split.flatten() if set(split.column_names) != set(train.column_names) else split


def build_splits(data_cfg, seed: int, local_only: bool = False, labelled: bool = False):
    """(train rows, held-out rows, Detection). Held-out rows are never in train. A mix (data.mix): every dataset's,
    drawn to its share (app/data/mixing.py). ``labelled``: unpaired data keeps its training rows labelled false
    too (KTO learns from both); the held-out rows are always the ones labelled true (the answers to compare with)."""
    if getattr(data_cfg, "mix", None):  # each dataset as if alone, then drawn to its share
        built = []
        for i, (dc, share) in enumerate(data_cfg.parts()):
            try:
                built.append((dc, share, *build_splits(dc, seed, local_only, labelled)))
            except DataError as e:
                raise DataError(f"mix dataset {i + 1} ('{dc.dataset}'): {e}") from None
        return mix_splits(data_cfg, seed, built)
    dd = resolve_dataset(data_cfg.dataset, data_cfg.config_name, local_only)
    train_name = pick_split(dd, data_cfg.split, "--set data.split=NAME")
    train = dd[train_name]
    if len(train) == 0:
        raise DataError(f"split '{train_name}' of '{data_cfg.dataset}' has no rows; pick another with --set "
                        "data.split=NAME")
    said = {k: data_cfg.said_as(k) for k in ("prompt_field", "reference_field", "chosen_field", "rejected_field",
                                              "label_field", "eval_split")} if hasattr(data_cfg, "said_as") else {}
    train, det = detect_dataset(train, data_cfg.prompt_field, data_cfg.reference_field,
                                chosen_field=data_cfg.chosen_field, rejected_field=data_cfg.rejected_field,
                                label_field=getattr(data_cfg, "label_field", None),
                                said=said)
    # every row's images read and checked once, before anything trains on them (row numbers: the file's)
    base = images_folder(data_cfg.dataset)
    # a file name two folders of the data share is never resolved by the name alone, in any split
    shared = dataset_shared_names(list(dd.values()), det.image_field) if det.image_field else frozenset()
    train = attach_images(train, det, base, local_only, shared=shared)
    train = train if labelled else _desirable(train, det)
    if data_cfg.eval_split:
        if data_cfg.eval_split not in dd:
            where = said["eval_split"] if said.get("eval_split", "").startswith("data.") else "data.eval_split"
            raise DataError(f"eval split '{data_cfg.eval_split}' ({where}) not found; this dataset has: "
                            f"{', '.join(dd)}; name one of those, or unset it (--set data.eval_split=) to hold out "
                            "rows automatically")
        if data_cfg.eval_split == train_name:
            raise DataError(f"eval split '{train_name}' is also the training split; pick another, or unset it to "
                            "hold out rows automatically")
        heldout = attach_images(_like(dd[data_cfg.eval_split], train), det, base, local_only, data_cfg.eval_split,
                                shared=shared)
        det.reasons["heldout"] = f"split '{data_cfg.eval_split}' (set in the config)"
    elif other := next((s for s in HELDOUT_SPLITS if s in dd and s != train_name), None):
        heldout = attach_images(_like(dd[other], train), det, base, local_only, other, shared=shared)
        det.reasons["heldout"] = f"the dataset's own '{other}' split"
    else:
        # At most a fifth of the rows, so a small dataset still has something to train on.
        k = min(data_cfg.heldout_size, len(train) // 5)
        held = set(random.Random(seed).sample(range(len(train)), k))
        heldout = train.select(sorted(held))
        train = train.select([i for i in range(len(train)) if i not in held])
        det.reasons["heldout"] = f"{k} rows drawn from '{train_name}' with seed {seed} (removed from training)"
    heldout = _desirable(heldout, det)
    missing = [c for c in (det.prompt_field, det.messages_field, det.chosen_field, det.rejected_field,
                           *(det.pair_fields or ())) if c and c not in heldout.column_names]
    if missing:
        raise DataError(f"the held-out split lacks column(s) {', '.join(missing)}; set data.eval_split to a split "
                        "with the same columns, or unset it")
    if data_cfg.max_samples:
        train = train.select(range(min(data_cfg.max_samples, len(train))))
    return train, without_leaks(train, heldout, det, getattr(data_cfg, "max_leak", None)), det


def without_leaks(train, heldout, det, max_leak: float | None):
    """The held-out rows less those whose prompt repeats a training row's (app/data/leaks.py), recorded in
    ``det.leaks`` and said in ``det.reasons["leaks"]``; above ``max_leak`` of them (data.max_leak), one line."""
    if not len(heldout) or not len(train):
        return heldout

    def key(r: dict) -> str:  # a row with pictures is its text and its pictures (app/data/leaks.with_pictures)
        return with_pictures(prompt_text(r, det), r.get(IMAGES)) if det.image_field else prompt_text(r, det)

    leaks = find_leaks([key(r) for r in undecoded(train)], [key(r) for r in undecoded(heldout)],
                       near=not det.image_field)
    det.leaks = leaks.to_dict()
    line = leaks.line()
    if not line:
        return heldout
    det.reasons["leaks"] = line
    if max_leak is not None and leaks.share > max_leak:
        raise DataError(f"{line.split(': left out')[0]}: {leaks.share:.0%}, more than data.max_leak={max_leak:g} "
                        "allows; remove the repeats from the data, hold out another split (data.eval_split), or raise "
                        "data.max_leak")
    log.warning(line)
    gone = set(leaks.leaked)
    return heldout.select([i for i in range(len(heldout)) if i not in gone])
