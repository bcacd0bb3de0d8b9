"""`inspect`: the JSON contract, the human table, bounded reads of big files, and errors as DataError."""

from __future__ import annotations

import json

import pytest
from repo_paths import SCHEMAS

from app.cli.inspect import run_inspect
from app.data import DataError, loading

CORPUS = SCHEMAS
KEYS = ["format", "prompt_field", "reference_field", "context_fields", "messages_field", "columns", "num_rows",
        "reasons", "chosen_field", "rejected_field", "pair_fields", "preference_field", "desirable_field"]


def test_json_is_one_object_with_exact_keys(capsys):
    assert run_inspect(str(CORPUS / "squad.jsonl"), None, None, None, None, False, True) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    d = json.loads(out)
    assert list(d) == KEYS + ["reference_match", "leaks"]
    assert d["leaks"]["heldout"] == 2 and d["leaks"]["leaked"] == 0  # the rows a run would hold out: none repeat
    assert d["reference_match"]["mode"] == "numeric" and "are numbers" in d["reference_match"]["why"]  # years
    assert d["format"] == "columns" and d["prompt_field"] == "question" and d["reference_field"] == "answers"
    assert d["context_fields"] == ["context"] and d["messages_field"] is None and d["num_rows"] == 12
    assert d["columns"] == ["id", "title", "context", "question", "answers"]
    assert all(isinstance(v, str) and v for v in d["reasons"].values())


def test_json_with_overrides(capsys):
    run_inspect(str(CORPUS / "caps_headers.csv"), None, None, "question", "answer", False, True)
    d = json.loads(capsys.readouterr().out)
    assert (d["prompt_field"], d["reference_field"]) == ("Question", "Answer")
    assert "override" in d["reasons"]["prompt_field"]


def test_table_shows_roles_reasons_and_samples(capsys):
    assert run_inspect(str(CORPUS / "deepmath.jsonl"), None, None, None, None, False, False) == 0
    out = capsys.readouterr().out
    assert "final_answer" in out and "question" in out and "worked solution" in out
    assert "sample rows" in out and "12 rows" in out
    first = json.loads((CORPUS / "deepmath.jsonl").read_text().splitlines()[0])
    assert first["question"][:30] in out


def test_chat_table(capsys):
    run_inspect(str(CORPUS / "sharegpt.json"), None, None, None, None, False, False)
    out = capsys.readouterr().out
    assert "chat" in out and "conversations" in out


def test_errors_are_data_errors(tmp_path):
    with pytest.raises(DataError, match="not found"):
        run_inspect(str(tmp_path / "missing.parquet"), None, None, None, None, False, True)
    with pytest.raises(DataError, match="questoin"):
        run_inspect(str(CORPUS / "gsm8k.jsonl"), None, None, "questoin", None, False, True)
    with pytest.raises(DataError, match="only the 'train' split"):
        run_inspect(str(CORPUS / "gsm8k.jsonl"), None, "test", None, None, False, True)
    with pytest.raises(DataError, match="not in the local cache"):
        run_inspect("someorg/never-downloaded", None, None, None, None, True, True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "a", "answer": "b"}\n{"question": \n')
    with pytest.raises(DataError, match="line 2"):
        run_inspect(str(bad), None, None, None, None, False, True)


def test_split_choice_on_builtin(capsys):
    run_inspect("arith", None, "test", None, None, False, True)
    d = json.loads(capsys.readouterr().out)
    assert d["num_rows"] == 200 and d["prompt_field"] == "question" and d["reference_field"] == "answer"
    with pytest.raises(DataError, match="train, test"):
        run_inspect("arith", None, "validation", None, None, False, True)


def test_big_parquet_is_read_boundedly(tmp_path, monkeypatch, capsys):
    """inspect reads the parquet footer and one small batch -- never the whole file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 200_000
    table = pa.table({"question": [f"What is {i} plus one?" for i in range(n)],
                      "answer": [str(i + 1) for i in range(n)]})
    p = tmp_path / "big.parquet"
    pq.write_table(table, p, row_group_size=20_000)
    monkeypatch.setattr(loading, "resolve_dataset", lambda *a, **k: pytest.fail("full load during inspect"))
    read = []
    orig = pq.ParquetFile.iter_batches

    def spy(self, batch_size=65536, *a, **k):
        read.append(batch_size)
        return orig(self, batch_size, *a, **k)

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", spy)
    run_inspect(str(p), None, None, None, None, False, True)
    d = json.loads(capsys.readouterr().out)
    assert d["num_rows"] == n and d["prompt_field"] == "question"
    assert read == [64]


def test_large_jsonl_row_count_is_skipped_above_limit(tmp_path, monkeypatch, capsys):
    p = tmp_path / "d.jsonl"
    p.write_text("".join(json.dumps({"question": f"q {i} ?", "answer": str(i)}) + "\n" for i in range(500)))
    run_inspect(str(p), None, None, None, None, False, True)
    assert json.loads(capsys.readouterr().out)["num_rows"] == 500
    monkeypatch.setattr(loading, "COUNT_LIMIT_BYTES", 100)
    run_inspect(str(p), None, None, None, None, False, True)
    assert json.loads(capsys.readouterr().out)["num_rows"] is None


def test_one_column_and_a_chat_prompt_read_right(tmp_path, capsys):
    one = tmp_path / "one.jsonl"
    one.write_text('{"text": "hello"}\n{"text": "world"}\n')
    assert run_inspect(str(one), None, None, None, None, False, False) == 0
    assert "2 rows, 1 column (text)" in capsys.readouterr().out
    chat = tmp_path / "chat.jsonl"
    chat.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"What is {i}+2?"},
                                                     {"role": "assistant", "content": str(i + 2)}]}) + "\n"
                            for i in range(3)))
    run_inspect(str(chat), None, None, None, None, False, False)
    out = " ".join(capsys.readouterr().out.split())
    assert "prompt │ messages │ the turns before the last assistant turn" in out and "prompt │ - │" not in out


def test_the_table_shows_the_label_column_however_it_is_spelled(tmp_path, capsys):
    rows = [{"prompt": f"What is {i} + 1?", "completion": f"It is {i + 1 + i % 2}.", "label": "👍" if i % 2 == 0
             else "👎"} for i in range(30)]
    data = tmp_path / "thumbs.jsonl"
    data.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows))
    assert run_inspect(str(data), None, None, None, None, False, False) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "label label" in out and "KTO" in out, out[-1500:]


def test_image_data_is_read_as_a_run_reads_it(tmp_path, capsys, monkeypatch):
    """inspect checks the sampled rows' pictures where a newcomer checks data: a missing file, a broken one, a URL
    with downloads off and a row without a picture are each the line train would refuse with (exit 2); readable
    pictures say so (exit 0)."""
    from PIL import Image

    monkeypatch.setenv("COLUMNS", "600")  # the table's cells on one line each
    Image.new("RGB", (8, 8), "red").save(tmp_path / "red.png")
    (tmp_path / "broken.png").write_bytes(b"\x89PNG not really")
    good = [{"image": "red.png", "question": f"colour {i}?", "answer": "red"} for i in range(4)]
    (tmp_path / "good.jsonl").write_text("\n".join(json.dumps(r) for r in good))
    assert run_inspect(str(tmp_path / "good.jsonl"), None, None, None, None, True, False) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "4 picture(s) of all 4 rows read as a run reads them: all readable" in out
    assert "name images" in out and "would refuse" not in out
    cases = {"missing.png": "not found (looked for", "broken.png": "is not a readable image",
             "https://example.com/a.png": "is a URL and downloads are off (--local-only or HF_HUB_OFFLINE)",
             "": "has no image in"}
    for i, (bad, said) in enumerate(cases.items()):
        rows = good[:3] + [{"image": bad or None, "question": "colour?", "answer": "red"}]
        (tmp_path / f"bad{i}.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
        assert run_inspect(str(tmp_path / f"bad{i}.jsonl"), None, None, None, None, True, False) == 2, bad
        out = " ".join(capsys.readouterr().out.split())
        assert "1 row(s) a run would refuse (below)" in out and "train would refuse this data: row 4" in out
        assert said in out, (bad, out[-600:])
        assert run_inspect(str(tmp_path / f"bad{i}.jsonl"), None, None, None, None, True, True) == 2
        checked = json.loads(capsys.readouterr().out)["images_checked"]
        assert checked["pictures"] == 3 and len(checked["problems"]) == 1 and said in checked["problems"][0]
        assert checked["rows"] == checked["of_rows"] == 4
    # a bad picture far past the sampled rows (row 41 of 60) is found: every row of a small dataset is checked
    far = good * 10 + [{"image": "missing.png", "question": "colour?", "answer": "red"}] + good * 5
    (tmp_path / "far.jsonl").write_text("\n".join(json.dumps(r) for r in far))
    assert run_inspect(str(tmp_path / "far.jsonl"), None, None, None, None, True, False) == 2
    out = " ".join(capsys.readouterr().out.split())
    assert "60 picture(s) of all 61 rows" in out and "train would refuse this data: row 41" in out


def test_the_share_of_a_large_datasets_rows_whose_pictures_were_checked():
    from app.cli.inspect import _checked_rows

    assert _checked_rows(2000, 10_000) == "the first 2,000 rows, 20% of 10,000"
    assert _checked_rows(61, 61) == "all 61 rows" and _checked_rows(2000, None) == "the first 2,000 rows"
