"""Datasets: load any supported source, detect which fields are prompt / reference, convert for TRL.

Public API (used by the engine, compare and the UI)::

    resolve_dataset, detect_fields, build_splits, prompt_text, to_grpo, to_sft,
    Detection, DataError

    loading.py    every source (hub id, local file, built-in) read, with one-line errors; splits.py: the train
                  and held-out rows of one (build_splits); preview.py, profile.py: `inspect`'s rows and column profiles;
                  leaks.py: held-out rows that repeat training rows (exactly once normalised, or nearly), left out
    detect.py, rules.py, vocabulary.py
                  which column is prompt / reference / chosen / rejected, and why; preference.py: pair layouts
    convert.py, turns.py
                  rows to TRL's formats; the text of cells and conversations
    arith.py      the built-in arith word problems;  shapes.py: the built-in images (the image demo's)
    images.py     which column holds images, and every row's images read and checked into one ``images`` column

A mix of datasets (data.mix) is each dataset read and detected alone, then drawn to its share: mixing.py.

Importing this package is cheap (standard library only); ``datasets`` is imported when data is loaded.

Owns: reading every supported source and deciding its fields, with reasons. Must not load models or rewards.
"""

from app.data.convert import prompt_text, reference_text, to_grpo, to_sft
from app.data.detect import DataError, Detection, detect_fields
from app.data.loading import resolve_dataset
from app.data.splits import build_splits

__all__ = ["DataError", "Detection", "resolve_dataset", "detect_fields", "build_splits", "to_grpo", "to_sft",
           "prompt_text", "reference_text"]
