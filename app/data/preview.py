"""Bounded previews for ``inspect`` and the UI's Detect: the first rows of a local file read directly (no full
load, so a large file previews in milliseconds), anything else through app.data.loading."""

from __future__ import annotations

import itertools
from pathlib import Path

from app.data.detect import DataError, Detection, detect_nested, flatten_row
from app.data.loading import (
    COUNT_LIMIT_BYTES,
    _count_lines,
    _csv_delimiter,
    _first_char,
    _jsonl_objects,
    _one_line,
    _suffixes,
    resolve_dataset,
    source_kind,
)
from app.data.profile import spread_sample
from app.data.splits import pick_split


def _peek_jsonl(path: Path, n: int) -> tuple[list[dict], int | None]:
    rows = list(itertools.islice(_jsonl_objects(path), n))
    # Blank lines are rare; counting newlines is a cheap upper bound that is exact for normal files.
    return rows, (len(rows) if len(rows) < n else _count_lines(path))


def _peek_csv(path: Path, n: int, sep: str) -> tuple[list[dict], list[str], int | None]:
    import pandas as pd

    try:
        df = pd.read_csv(path, nrows=n, sep=sep)
    except Exception as e:  # noqa: BLE001
        raise DataError(f"could not read '{path}' as CSV: {_one_line(e)}; check the delimiter and quoting") from None
    df = df.astype(object).where(df.notna(), None)
    total = len(df) if len(df) < n else None
    if total is None and not _suffixes(path)[1] and path.stat().st_size <= COUNT_LIMIT_BYTES:
        import csv

        with open(path, newline="", encoding="utf-8", errors="replace") as f:  # csv handles quoted newlines
            total = max(sum(1 for _ in csv.reader(f, delimiter=sep)) - 1, 0)
    return df.to_dict("records"), [str(c) for c in df.columns], total


def peek(spec: str, config_name: str | None, split: str | None, n: int, local_only: bool):
    """(rows, columns, num_rows or None, split name) reading a bounded number of rows where the format allows:
    the first rows of a parquet / JSONL / CSV file; other sources load normally (memory-mapped) and are sampled."""
    kind = source_kind(str(spec).strip())
    path = Path(spec).expanduser()
    ext = _suffixes(path)[0] if kind == "file" else ""
    if kind == "file" and ext in (".parquet", ".jsonl", ".ndjson", ".csv", ".tsv"):
        if split not in (None, "train"):
            raise DataError(f"a single file has only the 'train' split, not '{split}'; drop --split")
        if path.stat().st_size == 0 or (ext != ".parquet" and not _first_char(path)):
            raise DataError(f"'{path}' is empty; pass a file with at least one row")
        if ext == ".parquet":
            import pyarrow.parquet as pq

            try:
                # Streamed reads: without these pyarrow loads the whole first row group (often the whole file).
                pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 16)
                batch = next(pf.iter_batches(batch_size=n), None)
            except Exception as e:  # noqa: BLE001
                raise DataError(f"could not read '{path}' as parquet: {_one_line(e)}") from None
            if batch is None or pf.metadata.num_rows == 0:
                raise DataError(f"'{path}' has no rows; pass a file with at least one row")
            return batch.to_pylist(), list(pf.schema_arrow.names), pf.metadata.num_rows, "train"
        if ext in (".csv", ".tsv"):
            rows, cols, total = _peek_csv(path, n, "\t" if ext == ".tsv" else _csv_delimiter(path))
            if not rows:
                raise DataError(f"'{path}' has no rows; pass a file with at least one row")
            return rows, cols, total, "train"
        rows, total = _peek_jsonl(path, n)
        cols = list(dict.fromkeys(k for r in rows for k in r))
        return rows, cols, total, "train"
    dd = resolve_dataset(spec, config_name, local_only)
    name = pick_split(dd, split)
    ds = dd[name]
    if len(ds) == 0:
        raise DataError(f"split '{name}' has no rows; pick another with --split ({', '.join(dd)})")
    return spread_sample(ds, n), list(ds.column_names), len(ds), name


def inspect_detection(spec: str, config_name: str | None, split: str | None, prompt_field: str | None,
                      reference_field: str | None, local_only: bool, n: int = 64,
                      **pair_fields) -> tuple[Detection, list[dict], str]:
    """``pair_fields``: chosen_field / rejected_field overrides of preference data."""
    rows, cols, total, name = peek(spec, config_name, split, n, local_only)
    det, flattened = detect_nested(rows, cols, prompt_field, reference_field, total, **pair_fields)
    return det, ([flatten_row(r) for r in rows] if flattened else rows), name


def peek_detections(data_cfg, local_only: bool = True) -> list[Detection]:
    """Each dataset of a run's data detected from a peek at its first rows (a built-in, a local file, a cached hub
    dataset: nothing is downloaded unless ``local_only`` is false); one that cannot be read from here is left out
    (the run says why itself)."""
    out = []
    for part, _ in data_cfg.parts():
        try:
            det, _, _ = inspect_detection(part.dataset, part.config_name, part.split, part.prompt_field,
                                          part.reference_field, local_only, n=16)
        except Exception:  # noqa: BLE001 - a peek for a hint or an estimate: unreadable data is said by the run
            continue
        out.append(det)
    return out


def has_pictures(data_cfg, local_only: bool) -> bool:
    """Whether a run's data holds pictures, from a peek at its first rows (peek_detections)."""
    return any(d.image_field for d in peek_detections(data_cfg, local_only))
