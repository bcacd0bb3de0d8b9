"""The data of qlora-app's shipped lm-evaluation-harness tasks (this folder's YAML files name these functions with
``custom_dataset: !function datasets_local.NAME``; the harness imports this file by its path and calls them with the
task's metadata as keyword arguments). Each returns a ``DatasetDict`` with a ``test`` split. Offline."""

from __future__ import annotations

from app.data.loading import resolve_dataset
from app.data.splits import pick_split


def arith(**_metadata):
    """The built-in arith problems' fixed test split (200 problems, disjoint from the training split)."""
    from datasets import DatasetDict

    return DatasetDict({"test": resolve_dataset("arith")["test"]})


def gsm8k_file(path: str | None = None, split: str | None = None, **_metadata):
    """Rows {question, answer} of a GSM8K-format file (``path``; .jsonl/.json/.csv/.parquet or a folder), its
    ``split`` (default: its test split, else its only split)."""
    from datasets import DatasetDict

    if not path:
        raise ValueError("qlora_gsm8k_file needs the file: pass --metadata path=FILE")
    dd = resolve_dataset(str(path))
    name = split or ("test" if "test" in dd else pick_split(dd, None))
    missing = {"question", "answer"} - set(dd[name].column_names)
    if missing:
        raise ValueError(f"'{path}' has no {' or '.join(sorted(missing))} column; a GSM8K-format file has rows "
                         "{question, answer} with the answer ending in '#### N'")
    return DatasetDict({"test": dd[name]})
