"""Dataset sources -> ``datasets.DatasetDict`` (the train / held-out splits made of one: splits.py; previews for
``inspect``: preview.py).

Sources: the built-in ``arith``; a local .jsonl / .json / .csv / .tsv / .parquet / .txt file (optionally .gz);
a ``save_to_disk`` folder or a folder of data files; a Hugging Face Hub id. Local files go through
``datasets.load_dataset`` like hub data (memory-mapped Arrow, cached), and every failure becomes a one-line
``DataError`` that says what to do -- e.g. the line number of a corrupt JSONL line, not a pyarrow traceback.
``datasets`` / ``pyarrow`` are imported inside functions: the CLI imports this package for --help.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import re
from pathlib import Path

from app.data.arith import CALC_OPERANDS, arith_dataset
from app.data.detect import DataError
from app.data.shapes import shapes_dataset
from app.host.offline import hub_reachable, offline

# Short names people type. GSM8K lives under the openai org and needs its 'main' config.
ALIASES = {"gsm8k": ("openai/gsm8k", "main")}
BUILTINS = ("arith", "arith-sft", "arith-calc", "shapes")
LOADERS = {".jsonl": "json", ".ndjson": "json", ".json": "json", ".csv": "csv", ".tsv": "csv",
           ".parquet": "parquet", ".txt": "text"}
OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
HELDOUT_SPLITS = ("test", "validation", "valid", "val", "dev", "eval")
# Extensions that mean "a file", so a missing one is reported as a missing file rather than looked up on the hub.
FILE_LIKE = {*LOADERS, ".xlsx", ".xls", ".arrow", ".feather", ".avro", ".orc", ".zip", ".tar", ".yaml", ".yml"}
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
# Above this, inspect does not count the lines of a JSONL/CSV file (its cost must not grow with the file).
COUNT_LIMIT_BYTES = 64 * 2**20


def _one_line(msg: str, limit: int = 240) -> str:
    msg = " ".join(str(msg).split())
    return msg if len(msg) <= limit else msg[: limit - 3] + "..."


def _suffixes(path: Path) -> tuple[str, str | None]:
    """('.jsonl', '.gz') for data.jsonl.gz; ('.csv', None) for data.csv."""
    sfx = [s.lower() for s in path.suffixes]
    comp = sfx[-1] if sfx and sfx[-1] in OPENERS else None
    if comp:
        sfx = sfx[:-1]
    return (sfx[-1] if sfx else ""), comp


def _open(path: Path, binary: bool = False):
    """The file's content, decompressed where its name says so. Text drops a byte-order mark (utf-8-sig: Windows
    editors write one; a file without one reads the same)."""
    _, comp = _suffixes(path)
    opener = OPENERS[comp] if comp else open
    return opener(path, "rb") if binary else opener(path, "rt", encoding="utf-8-sig", errors="replace")


def _has_bom(path: Path) -> bool:
    with _open(path, binary=True) as f:
        return f.read(3) == b"\xef\xbb\xbf"


def _csv_delimiter(path: Path) -> str:
    """',' unless the header and first rows say otherwise: spreadsheets in many locales export ';'."""
    import csv

    with _open(path) as f:
        sample = f.read(65536)
    try:
        found = csv.Sniffer().sniff(sample, delimiters=",;\t|").delimiter
    except csv.Error:  # one column, or too irregular to tell: the standard comma
        return ","
    # Only a header that has no comma but splits on the other character: text with ';' in a comma file stays put.
    header = next(csv.reader([sample.split("\n", 1)[0]]), [])
    return found if len(header) == 1 and len(next(csv.reader([header[0]], delimiter=found))) > 1 else ","


def source_kind(spec: str) -> str:
    """'builtin' | 'file' | 'dir' | 'hub'. A missing path that looks like a file is an error, not a hub id."""
    if spec in BUILTINS:
        return "builtin"
    p = Path(spec).expanduser()
    if p.is_dir():
        return "dir"
    if p.is_file():
        return "file"
    looks_local = spec.startswith(("/", ".", "~")) or _suffixes(p)[0] in FILE_LIKE or spec.count("/") > 1
    if looks_local or not HUB_ID.match(spec):
        raise DataError(f"dataset file '{spec}' not found; check the path, or pass a hub id or 'arith'")
    return "hub"


# ------------------------------------------------------------------------------------------------ full loads


def resolve_dataset(spec: str, config_name: str | None = None, local_only: bool = False):
    """Any supported source -> ``DatasetDict`` (a single file becomes its 'train' split)."""
    if not spec or not str(spec).strip():
        raise DataError("no dataset given; pass --dataset NAME|FILE (try --dataset arith for the built-in data)")
    spec = str(spec).strip()
    kind = source_kind(spec)
    if kind == "builtin":
        if spec == "shapes":
            return shapes_dataset()
        if spec == "arith-calc":
            return arith_dataset(operands=CALC_OPERANDS)
        return arith_dataset(final_answer=spec == "arith-sft")
    if kind == "file":
        return _load_file(Path(spec).expanduser())
    if kind == "dir":
        return _load_dir(Path(spec).expanduser(), config_name)
    return _load_hub(spec, config_name, local_only)


def _first_char(path: Path) -> str:
    """First non-whitespace character ('' for an empty file); stops reading as soon as it finds one."""
    with _open(path) as f:
        while chunk := f.read(65536):
            stripped = chunk.lstrip()
            if stripped:
                return stripped[0]
    return ""


def _jsonl_objects(path: Path):
    """Yield each non-blank line's JSON object; the first bad line raises DataError naming its number."""
    with _open(path) as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"line {i} of '{path}' is not valid JSON ({e.msg} at column {e.colno}); "
                                "fix or delete that line") from None
            if not isinstance(obj, dict):
                raise DataError(f"line {i} of '{path}' is a JSON {type(obj).__name__}, not an object; "
                                "each line must be {...}")
            yield obj


def _bad_json_line(path: Path) -> str | None:
    """Describe the first line that is not a JSON object, or None."""
    try:
        for _ in _jsonl_objects(path):
            pass
    except DataError as e:
        return str(e)
    return None


def _wrapped_json(path: Path):
    """A .json file holding one object: {"train": [...], "test": [...]} or {"data": [...]} -> DatasetDict."""
    from datasets import Dataset, DatasetDict

    with _open(path) as f:
        try:
            obj = json.load(f)
        except json.JSONDecodeError as e:
            raise DataError(f"'{path}' is not valid JSON (line {e.lineno}: {e.msg}); fix the file") from None
    lists = {k: v for k, v in obj.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)}
    if not lists:
        return None
    try:
        if len(lists) > 1 or next(iter(lists)) in ("train", *HELDOUT_SPLITS):
            return DatasetDict({k: Dataset.from_list(v) for k, v in lists.items()})
        return DatasetDict({"train": Dataset.from_list(next(iter(lists.values())))})
    except Exception as e:  # noqa: BLE001 - arrow type clashes between rows
        raise DataError(f"could not read '{path}': {_one_line(e)}; make each field the same type in every row"
                        ) from None


def _load_file(path: Path):
    import datasets

    ext, _ = _suffixes(path)
    if ext not in LOADERS:
        raise DataError(f"unsupported file type '{path.name}'; use .jsonl, .json, .csv, .tsv, .parquet, .txt "
                        "or a save_to_disk folder")
    if path.stat().st_size == 0 or (ext != ".parquet" and not _first_char(path)):
        raise DataError(f"'{path}' is empty; pass a file with at least one row")
    loader, kwargs = LOADERS[ext], {}
    if ext in (".csv", ".tsv"):
        kwargs["sep"] = "\t" if ext == ".tsv" else _csv_delimiter(path)
    elif loader == "json" and _has_bom(path):
        kwargs["encoding"] = "utf-8-sig"
    if ext == ".json" and _first_char(path) == "{":
        with _open(path) as f:
            first, more = f.readline(), f.read(4096).strip()
        try:
            obj = json.loads(first)
            # One line holding {"data": [{...}, ...]} is a wrapper, not a one-row JSON-lines file.
            is_lines = isinstance(obj, dict) and (bool(more) or not any(
                isinstance(v, list) and v and all(isinstance(x, dict) for x in v) for v in obj.values()))
        except json.JSONDecodeError:
            is_lines = False  # a pretty-printed single object spans many lines
        if not is_lines and (dd := _wrapped_json(path)) is not None:
            return dd
    try:
        dd = datasets.load_dataset(loader, data_files={"train": str(path)}, **kwargs)
    except Exception as e:  # noqa: BLE001 - every loader failure becomes one actionable line
        if loader == "json" and (_first_char(path) != "[") and (bad := _bad_json_line(path)):
            raise DataError(bad) from None
        if loader == "csv" and _count_lines(path) in (0, 1):
            raise DataError(f"'{path}' has a header but no rows; pass a file with at least one row") from None
        cause = e.__cause__ or e.__context__ or e
        raise DataError(f"could not read '{path}' as {ext[1:]}: {_one_line(cause)}; check the file format") from None
    if sum(len(s) for s in dd.values()) == 0:
        raise DataError(f"'{path}' has no rows; pass a file with at least one row")
    return dd


def _load_dir(path: Path, config_name: str | None):
    import datasets

    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        try:
            obj = datasets.load_from_disk(str(path))
        except Exception as e:  # noqa: BLE001
            raise DataError(f"could not load the saved dataset in '{path}': {_one_line(e)}") from None
        return obj if isinstance(obj, datasets.DatasetDict) else datasets.DatasetDict({"train": obj})
    try:  # a folder of data files, e.g. a downloaded hub repo; datasets infers splits from the file names
        return datasets.load_dataset(str(path), name=config_name)
    except Exception as e:  # noqa: BLE001
        raise DataError(f"could not load a dataset from folder '{path}': {_one_line(e)}; pass a data file, "
                        "a save_to_disk folder or a folder of .jsonl/.csv/.parquet files") from None


# A folder `qlora-app pairs` wrote (app/synth/pairs.py owns its format) holds its settings in this hidden file.
PAIRS_MANIFEST = ".qlora-pairs.json"


def sampled_system_prompt(spec: str | None) -> str | None:
    """The system prompt the answers of a pairs folder (or one of its files) were sampled for, or None: a run on it
    takes it as its own, so its rows, chat, compare and serve all see the prompt the answers followed."""
    if not spec:
        return None
    p = Path(str(spec)).expanduser()
    for folder in (p, p.parent):
        manifest = folder / PAIRS_MANIFEST
        if manifest.is_file():
            try:
                return (json.loads(manifest.read_text()).get("settings") or {}).get("system_prompt") or None
            except (OSError, ValueError):
                return None
    return None


def _load_hub(spec: str, config_name: str | None, local_only: bool):
    import datasets

    if config_name is None and spec.lower() in ALIASES:
        spec, config_name = ALIASES[spec.lower()]
    elif spec.lower() in ALIASES:
        spec = ALIASES[spec.lower()][0]
    import datasets.config as dcfg

    offline_now = local_only or dcfg.HF_HUB_OFFLINE
    unreachable = not offline_now and not hub_reachable()  # then the cache only, at once (no minute of retries)
    try:
        with offline(local_only or unreachable):
            return datasets.load_dataset(spec, config_name)
    except Exception as e:  # noqa: BLE001 - translate the many hub/caching failures into one line each
        msg = _one_line(e)
        if isinstance(e, ValueError) and ("config" in msg.lower()) and not unreachable:
            raise DataError(f"dataset '{spec}': {msg}; pass --dataset-config NAME") from None
        if unreachable:
            raise DataError(f"the Hugging Face Hub cannot be reached from here and dataset {spec} is not in the local "
                            f"cache; pass a local file, or run `qlora-app prefetch --dataset {spec}` on a connected "
                            "machine") from None
        if offline_now:
            raise DataError(f"dataset {spec} is not in the local cache; run `qlora-app prefetch --dataset {spec}` "
                            "on a connected machine or pass a local file") from None
        if type(e).__name__ == "DatasetNotFoundError":
            raise DataError(f"dataset '{spec}' was not found on the Hugging Face Hub (or is gated); check the id "
                            "or pass a local file") from None
        if isinstance(e, (ConnectionError, OSError)):
            raise DataError(f"could not reach the Hugging Face Hub for '{spec}' ({msg}); pass a local file, or "
                            "prefetch it on a connected machine and use --local-only") from None
        raise DataError(f"could not load dataset '{spec}': {msg}") from None


def _count_lines(path: Path) -> int | None:
    if path.stat().st_size > COUNT_LIMIT_BYTES or _suffixes(path)[1]:
        return None
    n, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(2**20):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (last != b"\n")
