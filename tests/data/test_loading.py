"""Dataset sources, bad input (one-line DataError), offline hub cache, and train / held-out splits."""

from __future__ import annotations

import glob
import json
import os
import shutil
import socket
from pathlib import Path

import pytest
from repo_paths import ROOT, SCHEMAS

from app.config.schema import DataConfig
from app.data import DataError, build_splits, resolve_dataset
from app.errors import UserError
from app.eval.heldout import heldout_examples

CORPUS = SCHEMAS


def _qa(n, start=0):
    return [{"question": f"What is {i} plus {i + 1}?", "answer": f"{i} + {i + 1} = {2 * i + 1}\n#### {2 * i + 1}"}
            for i in range(start, start + n)]


def _jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _one_line_error(fn, *a, **k) -> str:
    with pytest.raises(DataError) as e:
        fn(*a, **k)
    assert isinstance(e.value, UserError)
    msg = str(e.value)
    assert msg and "\n" not in msg
    return msg


# ------------------------------------------------------------------------------------------------ sources


def test_local_formats_all_load(tmp_path):
    rows = _qa(10)
    import pandas as pd

    _jsonl(tmp_path / "a.jsonl", rows)
    (tmp_path / "b.json").write_text(json.dumps(rows))  # JSON array
    (tmp_path / "c.json").write_text("".join(json.dumps(r) + "\n" for r in rows))  # JSON lines named .json
    (tmp_path / "d.json").write_text(json.dumps({"data": rows}, indent=2))  # wrapped, pretty-printed
    pd.DataFrame(rows).to_csv(tmp_path / "e.csv", index=False)
    pd.DataFrame(rows).to_parquet(tmp_path / "f.parquet")
    pd.DataFrame(rows).to_csv(tmp_path / "g.tsv", sep="\t", index=False)
    for name in ("a.jsonl", "b.json", "c.json", "d.json", "e.csv", "f.parquet", "g.tsv"):
        dd = resolve_dataset(str(tmp_path / name))
        assert list(dd) == ["train"], name
        assert dd["train"].column_names == ["question", "answer"], name
        assert dd["train"][3] == rows[3], name


def test_files_as_spreadsheets_and_windows_editors_write_them(tmp_path):
    """A byte-order mark (Notepad, Excel's "UTF-8 CSV") and ';' as the delimiter (Excel in many locales): the same
    rows as a plain file, in training and in inspect. A comma file whose text holds ';' keeps its commas."""
    import gzip

    import pandas as pd

    from app.data.preview import inspect_detection

    rows = _qa(10)
    bom = b"\xef\xbb\xbf"
    lines = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (tmp_path / "bom.jsonl").write_bytes(bom + lines)
    with gzip.open(tmp_path / "bom.jsonl.gz", "wb") as f:
        f.write(bom + lines)
    (tmp_path / "bom.json").write_bytes(bom + json.dumps(rows).encode())
    (tmp_path / "bom.csv").write_bytes(bom + pd.DataFrame(rows).to_csv(index=False).encode())
    pd.DataFrame(rows).to_csv(tmp_path / "semi.csv", sep=";", index=False)
    for name in ("bom.jsonl", "bom.jsonl.gz", "bom.json", "bom.csv", "semi.csv"):
        ds = resolve_dataset(str(tmp_path / name))["train"]
        assert ds.column_names == ["question", "answer"] and ds[3] == rows[3], name
        det, peeked, _ = inspect_detection(str(tmp_path / name), None, None, None, None, False)
        assert (det.prompt_field, det.reference_field) == ("question", "answer") and peeked[3] == rows[3], name
    text = [{"question": f"a; b; c {i}", "answer": f"x;y {i}"} for i in range(5)]
    pd.DataFrame(text).to_csv(tmp_path / "commas.csv", index=False)
    assert resolve_dataset(str(tmp_path / "commas.csv"))["train"].to_list() == text


def test_wrapped_json_with_split_keys(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"train": _qa(6), "test": _qa(3, 100)}))
    dd = resolve_dataset(str(tmp_path / "s.json"))
    assert {k: len(v) for k, v in dd.items()} == {"train": 6, "test": 3}


def test_save_to_disk_dataset_and_datasetdict(tmp_path):
    from datasets import Dataset, DatasetDict

    Dataset.from_list(_qa(5)).save_to_disk(str(tmp_path / "one"))
    DatasetDict({"train": Dataset.from_list(_qa(5)), "test": Dataset.from_list(_qa(2, 50))}).save_to_disk(
        str(tmp_path / "two"))
    assert len(resolve_dataset(str(tmp_path / "one"))["train"]) == 5
    assert sorted(resolve_dataset(str(tmp_path / "two"))) == ["test", "train"]


def test_builtin_arith_is_used(monkeypatch):
    from datasets import Dataset, DatasetDict

    from app.data import loading

    monkeypatch.setattr(loading, "arith_dataset", lambda final_answer=False: DatasetDict(
        {"train": Dataset.from_list(_qa(8)), "test": Dataset.from_list(_qa(2, 9))}))
    dd = resolve_dataset("arith")
    assert {k: len(v) for k, v in dd.items()} == {"train": 8, "test": 2}


def test_builtin_arith_real_module():
    dd = resolve_dataset("arith")
    assert {"train", "test"} <= set(dd) and dd["train"].column_names == ["question", "answer"]
    assert "####" in dd["train"][0]["answer"]


# ------------------------------------------------------------------------------------------------ bad input


def test_missing_file(tmp_path):
    msg = _one_line_error(resolve_dataset, str(tmp_path / "nope.jsonl"))
    assert "not found" in msg
    assert "not found" in _one_line_error(resolve_dataset, "data/nope.csv")


def test_empty_files(tmp_path):
    (tmp_path / "e.jsonl").write_text("")
    (tmp_path / "w.jsonl").write_text("\n  \n")
    (tmp_path / "h.csv").write_text("question,answer\n")
    assert "empty" in _one_line_error(resolve_dataset, str(tmp_path / "e.jsonl"))
    assert "empty" in _one_line_error(resolve_dataset, str(tmp_path / "w.jsonl"))
    assert "no rows" in _one_line_error(resolve_dataset, str(tmp_path / "h.csv"))


def test_corrupt_jsonl_names_the_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    lines = [json.dumps(r) for r in _qa(6)]
    lines[3] = lines[3][:-5]  # truncated object on line 4
    p.write_text("\n".join(lines) + "\n")
    msg = _one_line_error(resolve_dataset, str(p))
    assert "line 4" in msg and "bad.jsonl" in msg


def test_unsupported_extension(tmp_path):
    (tmp_path / "x.xlsx").write_bytes(b"PK\x03\x04")
    assert "unsupported file type" in _one_line_error(resolve_dataset, str(tmp_path / "x.xlsx"))


def test_hub_id_offline_is_one_line_and_makes_no_network_attempt(monkeypatch):
    """local_only must not touch the network even if the offline env vars were not set at import time."""
    import datasets.config as dcfg
    import huggingface_hub.constants as hcst

    monkeypatch.setattr(dcfg, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hcst, "HF_HUB_OFFLINE", False)
    attempts = []

    def no_connect(self, *a, **k):
        attempts.append(a)
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", no_connect)
    msg = _one_line_error(resolve_dataset, "someorg/not-cached-data", local_only=True)
    assert "not in the local cache" in msg and "prefetch" in msg
    assert attempts == []
    assert dcfg.HF_HUB_OFFLINE is False  # restored afterwards


def test_gsm8k_alias_resolves_from_local_cache(tmp_path, monkeypatch):
    """Simulate a prefetched openai/gsm8k 'main' in the datasets cache; --local-only must find it by alias."""
    import datasets
    import datasets.config as dcfg

    cache = tmp_path / "hf-datasets"
    monkeypatch.setattr(dcfg, "HF_DATASETS_CACHE", cache)
    src = _jsonl(tmp_path / "g.jsonl", _qa(7))
    datasets.load_dataset("json", data_files={"train": str(src), "test": str(src)}, cache_dir=str(cache / "tmp"))
    built = Path(glob.glob(str(cache / "tmp" / "json" / "*" / "0.0.0" / "*" / "dataset_info.json"))[0]).parent
    dst = cache / "openai___gsm8k" / "main" / "0.0.0" / "0123abcd"
    shutil.copytree(built, dst)
    for f in dst.glob("json-*.arrow"):
        f.rename(f.with_name(f.name.replace("json-", "gsm8k-")))
    info = json.loads((dst / "dataset_info.json").read_text())
    info.update(config_name="main", dataset_name="gsm8k")
    (dst / "dataset_info.json").write_text(json.dumps(info))
    dd = resolve_dataset("gsm8k", local_only=True)
    assert {k: len(v) for k, v in dd.items()} == {"train": 7, "test": 7}
    assert dd["train"][0]["question"] == "What is 0 plus 1?"


# ------------------------------------------------------------------------------------------------ splits


def test_heldout_slice_no_overlap_and_deterministic(tmp_path):
    p = _jsonl(tmp_path / "d.jsonl", _qa(200))
    cfg = DataConfig(dataset=str(p), heldout_size=30)
    tr1, ho1, det = build_splits(cfg, seed=3)
    tr2, ho2, _ = build_splits(cfg, seed=3)
    tr3, ho3, _ = build_splits(cfg, seed=4)
    assert len(ho1) == 30 and len(tr1) == 170
    q = lambda ds: [r["question"] for r in ds]  # noqa: E731
    assert not set(q(tr1)) & set(q(ho1))
    assert q(ho1) == q(ho2) and q(tr1) == q(tr2)
    assert q(ho1) != q(ho3)
    assert "seed 3" in det.reasons["heldout"]


def test_heldout_uses_test_split_and_max_samples(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"train": _qa(50), "test": _qa(10, 500)}))
    tr, ho, _ = build_splits(DataConfig(dataset=str(tmp_path / "s.json"), max_samples=20), seed=0)
    assert len(tr) == 20 and len(ho) == 10
    assert tr[0]["question"] == "What is 0 plus 1?"  # the first rows, in order
    assert ho[0]["question"] == "What is 500 plus 501?"


def test_eval_split_and_bad_split_names(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps({"train": _qa(20), "validation": _qa(4, 300), "test": _qa(5, 600)}))
    p = str(tmp_path / "s.json")
    _, ho, _ = build_splits(DataConfig(dataset=p, eval_split="validation"), seed=0)
    assert len(ho) == 4
    _, ho, _ = build_splits(DataConfig(dataset=p), seed=0)
    assert len(ho) == 5  # 'test' preferred when no eval_split
    assert "validation" in _one_line_error(build_splits, DataConfig(dataset=p, eval_split="dev"), 0)
    assert "train, validation, test" in _one_line_error(build_splits, DataConfig(dataset=p, split="nope"), 0)
    assert "also the training split" in _one_line_error(build_splits, DataConfig(dataset=p, eval_split="train"), 0)


def test_small_dataset_keeps_most_rows_for_training(tmp_path):
    p = _jsonl(tmp_path / "d.jsonl", _qa(40))
    tr, ho, _ = build_splits(DataConfig(dataset=str(p)), seed=0)  # heldout_size defaults to 100
    assert len(ho) == 8 and len(tr) == 32


def test_overrides_flow_through_build_splits(tmp_path):
    p = _jsonl(tmp_path / "d.jsonl", [dict(r, notes="x y z") for r in _qa(20)])
    _, _, det = build_splits(DataConfig(dataset=str(p), reference_field="notes"), seed=0)
    assert det.reference_field == "notes"
    msg = _one_line_error(build_splits, DataConfig(dataset=str(p), prompt_field="nope"), 0)
    assert "question, answer, notes" in msg


def test_heldout_examples(tmp_path, math_jsonl):
    cfg = DataConfig(dataset=str(math_jsonl))
    ex = heldout_examples(cfg, n=5, seed=1, split_seed=1)
    assert len(ex) == 5 and ex == heldout_examples(cfg, n=5, seed=1, split_seed=1)
    train, held, _ = build_splits(cfg, 1)
    held_q = {r["question"] for r in held}
    for e in ex:
        assert set(e) == {"prompt", "reference", "row", "messages", "plain", "pair"} and e["pair"] is None
        assert e["messages"][-1] == {"role": "user", "content": e["prompt"]} and e["plain"] == e["prompt"]
        assert e["prompt"] == e["row"]["question"] and e["row"]["question"] in held_q
        assert e["reference"] == e["row"]["answer"] and "####" in e["reference"]  # GSM8K answers kept whole
    assert len(heldout_examples(cfg, n=1000, seed=1, split_seed=1)) == len(held)


def test_heldout_examples_never_return_training_rows(math_jsonl):
    cfg = DataConfig(dataset=str(math_jsonl))
    train, _, _ = build_splits(cfg, 42)
    trained = {r["question"] for r in train}
    for sample_seed in (0, 1, 7):
        ex = heldout_examples(cfg, n=8, seed=sample_seed, split_seed=42)
        assert ex and not any(e["row"]["question"] in trained for e in ex)


def test_package_import_is_light():
    import subprocess
    import sys

    code = ("import sys, app.data, app.cli.inspect; "
            "print([m for m in ('datasets', 'pyarrow', 'pandas', 'torch', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT, env={**os.environ})
    assert out.stdout.strip() == "[]"


def test_nested_objects_are_read_as_dotted_columns(tmp_path):
    """{"data": {"question", "answer"}}: no top-level text column, so the nested fields are the columns, in
    training (train and the dataset's own test split alike), inspect and with a dotted override."""
    from app.data import prompt_text, reference_text
    from app.data.preview import inspect_detection

    nest = lambda rows: [{"data": r, "meta": {"id": i}} for i, r in enumerate(rows)]  # noqa: E731
    (tmp_path / "n.json").write_text(json.dumps({"train": nest(_qa(20)), "test": nest(_qa(5, 500))}))
    tr, ho, det = build_splits(DataConfig(dataset=str(tmp_path / "n.json")), seed=0)
    assert (det.prompt_field, det.reference_field) == ("data.question", "data.answer")
    assert "dotted columns" in det.reasons["format"]
    assert prompt_text(tr[0], det) == "What is 0 plus 1?" and reference_text(ho[0], det).endswith("#### 1001")
    p = _jsonl(tmp_path / "n.jsonl", nest(_qa(10)))
    det, rows, _ = inspect_detection(str(p), None, None, None, None, False)
    assert det.prompt_field == "data.question" and prompt_text(rows[0], det) == "What is 0 plus 1?"
    _, _, det = build_splits(DataConfig(dataset=str(p), reference_field="data.question"), seed=0)
    assert det.reference_field == "data.question" and det.prompt_field != "data.question"
    assert "data.question, data.answer, meta.id" in _one_line_error(
        build_splits, DataConfig(dataset=str(p), prompt_field="data.nope"), 0)


def test_answer_objects_and_metadata_stay_whole_beside_a_text_column(tmp_path):
    p = _jsonl(tmp_path / "s.jsonl", [{"question": f"Who is {i}?", "answers": {"text": [f"n{i}"], "answer_start": [0]},
                                       "meta": {"source": "web"}} for i in range(10)])
    tr, _, det = build_splits(DataConfig(dataset=str(p)), seed=0)
    assert det.reference_field == "answers" and "answers" in tr.column_names and "meta" in tr.column_names
