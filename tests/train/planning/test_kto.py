"""KTO: TRL's KTOTrainer on answers labelled good or bad. Unpaired rows (prompt / completion / label) keep both
labels for KTO (other methods train on the good ones only); preference pairs become their two sides; the plan
balances the two labels' weights; data with no labels, or one label only, is one line, exit 2, no folder. (KTO on
a pairs folder end to end: tests/e2e/test_dpo.py.)"""

import json

import pytest
from conftest import cli as _cli
from conftest import cli_here

from app.run import layout


def _write(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


# How people write the label: a bool, words, numbers, thumbs
SPELLINGS = {"bool": (True, False), "yes/no": ("yes", "no"), "true/false text": ("true", "false"), "1/0": (1, 0),
             "thumbs": ("\U0001F44D", "\U0001F44E")}


@pytest.fixture(params=sorted(SPELLINGS))
def labelled(tmp_path, request):
    good_word, bad_word = SPELLINGS[request.param]
    rows = []
    for a in range(16):
        for b in range(5):
            good = (a + b) % 3 != 0  # two good answers for each bad one
            ans = a + b if good else a + b + 1
            rows.append({"prompt": f"What is {a} + {b}?", "completion": f"{a} + {b} = {ans}. Final answer: {ans}",
                         "label": good_word if good else bad_word})
    return _write(tmp_path / "kto.jsonl", rows)


def test_unpaired_rows_keep_both_labels_for_kto_only(labelled):
    from app.config.build import build_config
    from app.data.convert import to_kto
    from app.data.splits import build_splits

    cfg = build_config({"method": "kto", "data": {"dataset": str(labelled)}})
    kept, heldout, det = build_splits(cfg.data, 42, local_only=True, labelled=True)
    only_good, _, _ = build_splits(cfg.data, 42, local_only=True)
    from app.data.profile import label_value

    assert det.desirable_field == "label" and {label_value(v) for v in kept["label"]} == {True, False}
    # SFT, GRPO and compare take the good answers only, however the label is spelled
    assert {label_value(v) for v in only_good["label"]} == {True} == {label_value(v) for v in heldout["label"]}
    assert len(only_good) + len(heldout) < len(kept) + len(heldout)

    class NoTemplate:
        chat_template = None

    rows = to_kto(kept, det, NoTemplate(), None)
    assert rows.column_names == ["prompt", "completion", "label"] and len(rows) == len(kept)
    assert rows[0]["completion"].startswith("\n") and rows["label"] == [label_value(v) for v in kept["label"]]


def test_pairs_become_their_two_sides(tmp_path):
    from app.config.build import build_config
    from app.data.convert import to_kto
    from app.data.splits import build_splits

    pairs = _write(tmp_path / "pairs.jsonl", [{"prompt": f"Q{i}?", "chosen": f"good {i}", "rejected": f"bad {i}"}
                                              for i in range(20)])
    train, _, det = build_splits(build_config({"method": "kto", "data": {"dataset": str(pairs)}}).data, 42,
                                 local_only=True, labelled=True)

    class NoTemplate:
        chat_template = None

    rows = to_kto(train, det, NoTemplate(), None)
    assert len(rows) == 2 * len(train) and rows["label"] == [True, False] * len(train)
    assert rows[0]["prompt"] == rows[1]["prompt"] and rows[0]["completion"].strip().startswith("good")
    assert rows[1]["completion"].strip().startswith("bad")


@pytest.mark.parametrize("case", ["no labels", "one label"])
def test_kto_without_good_and_bad_answers_is_one_line(tiny_model, math_jsonl, tmp_path, case):
    data = math_jsonl if case == "no labels" else _write(tmp_path / "good.jsonl", [
        {"prompt": f"What is {a} + 1?", "completion": f"{a + 1}", "label": True} for a in range(30)])
    r = cli_here("train", "--model", str(tiny_model), "--dataset", str(data), "--method", "kto", "--output-dir",
             str(tmp_path / "runs"), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert ("has none (no good / bad column" if case == "no labels" else "every training row is labelled good") \
        in r.stderr
    assert not (tmp_path / "runs").exists()


def test_sentence_answers_are_scored_by_their_number_and_the_dry_run_says_so(tiny_model, tmp_path):
    """Answers written as sentences ("20 - 16 = 4. So the answer is 4."): the plan picks numeric (the number the
    sentence states), says so, and records it for the proof, where a wrong sum in the same words is wrong (ROUGE-L
    overlap counted it right: a proof of 100% -> 100%)."""
    from app.rewards import match

    rows = [{"prompt": f"What is {a} - {b}?", "completion": f"{a} - {b} = {a - b}. So the answer is {a - b}.",
             "label": (a + b) % 3 != 0} for a in range(20, 36) for b in range(1, 6)]
    data = _write(tmp_path / "sentences.jsonl", rows)
    r = cli_here("train", "--model", str(tiny_model), "--dataset", str(data), "--method", "kto", "--dry-run",
                 "--output-dir", str(tmp_path / "runs"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    said = " ".join((r.stdout + r.stderr).split())
    assert "reference match: numeric" in said and "the proof scores answers this way" in said
    ref = "20 - 16 = 4. So the answer is 4."
    assert match.correct("numeric", "20 + 16 = 36. So the answer is 36.", ref) is False
    assert match.correct("numeric", "20 - 16 = 4, so the answer is 4.", ref) is True
    assert match.correct("overlap", "20 + 16 = 36. So the answer is 36.", ref) is True  # what scored it before


@pytest.mark.slow
@pytest.mark.parametrize("labelled", ["yes/no"], indirect=True)  # one run: a label spelled as words, end to end
def test_kto_trains_from_an_unpaired_file(tiny_model, labelled, tmp_path):
    r = _cli("train", "--model", str(tiny_model), "--dataset", str(labelled), "--method", "kto", "--max-steps", "3",
             "--run-dir", str(tmp_path / "run"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    run = tmp_path / "run"
    config = (run / layout.CONFIG).read_text()
    # about one bad answer for every two good ones (the held-out slice takes a few): good ones weigh about half
    weight = float(config.split("kto.desirable_weight: null -> ")[1].split(" ")[0])
    assert "method: kto" in config and 0.4 < weight < 0.6 and "balanced by their counts" in config
    assert "reward.reference_match: auto -> numeric" in config  # the proof reads the plan's matcher
    assert json.loads((run / layout.STATUS).read_text())["status"] == "finished"
    assert (run / "adapter" / "adapter_model.safetensors").is_file() and (run / layout.COMPARE_JSON).is_file()


def test_a_label_column_of_any_name_is_named_with_label_field(tiny_model, tmp_path):
    """'thumbs' holds good / bad but its name says no label: refused in one line naming it and the override;
    --label-field thumbs (data.label_field) takes it (inspect, the dry run); a column that spells no label, or
    one that is not there, is one line."""
    rows = [{"prompt": f"What is {a} + 2?", "completion": f"{a + 2 if a % 3 else a + 3}",
             "thumbs": "\U0001F44D" if a % 3 else "\U0001F44E", "rating": a % 5 + 1} for a in range(40)]
    data = _write(tmp_path / "thumbs.jsonl", rows)
    args = ("train", "--model", str(tiny_model), "--dataset", str(data), "--method", "kto", "--output-dir",
            str(tmp_path / "runs"))
    r = cli_here(*args, cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "'thumbs' holds good / bad values; name it with --label-field thumbs" in " ".join(r.stderr.split())
    ok = cli_here(*args, "--label-field", "thumbs", "--dry-run", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    seen = cli_here("inspect", str(data), "--label-field", "thumbs", "--json", cwd=tmp_path)
    assert seen.returncode == 0 and json.loads(seen.stdout)["desirable_field"] == "thumbs"
    for bad, said in (("rating", "'rating' holds '1', '2', '3', '4', '5', which spell no good / bad label"),
                      ("nope", "--label-field 'nope' is not a column of this dataset")):
        r = cli_here(*args, "--label-field", bad, cwd=tmp_path)
        assert r.returncode == 2 and said in " ".join(r.stderr.split()), r.stderr
    assert not (tmp_path / "runs").exists()
