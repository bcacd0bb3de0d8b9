"""Mixed datasets (`--dataset A --dataset B --mix 0.7,0.3`, data.mix, the Train form): each dataset detected on its own
and mapped to the run's fields, rows drawn to their shares (without repeats; with whole passes when data.mix_rows asks
for more), held out per dataset and reported per dataset by the proof; bad mixes are one line, exit 2, no folder."""

import json
import math
import random
from collections import Counter
from pathlib import Path

import pytest
from conftest import cli as _cli

from app.config.build import build_config
from app.data import build_splits
from app.data.mixing import allocate, draw
from app.errors import UserError
from app.run import layout


@pytest.fixture()
def sums(tmp_path) -> Path:
    """A GSM8K-like file in another schema than arith's (problem / solution), 300 distinct rows."""
    rng = random.Random(5)
    path = tmp_path / "sums.jsonl"
    with path.open("w") as f:
        for a, b in rng.sample([(a, b) for a in range(21) for b in range(21)], 300):
            f.write(json.dumps({"problem": f"A shop sells {a} cups in the morning and {b} cups later. How many cups "
                                           "does it sell?", "solution": f"{a} + {b} = {a + b}.\n#### {a + b}"}) + "\n")
    return path


@pytest.fixture()
def pairs(tmp_path) -> tuple[Path, Path]:
    """Two preference files in two layouts: prompt/chosen/rejected, and chat turns that share their prompt."""
    rng = random.Random(3)
    a, b = tmp_path / "pairs_a.jsonl", tmp_path / "pairs_b.jsonl"
    with a.open("w") as f:
        for _ in range(50):
            x, y = rng.randint(0, 20), rng.randint(0, 20)
            f.write(json.dumps({"prompt": f"Tom has {x} apples and buys {y} more. How many now?",
                                "chosen": f"{x} + {y} = {x + y}.", "rejected": f"{x} - {y} = {x - y}."}) + "\n")
    with b.open("w") as f:
        for _ in range(30):
            x, y = rng.randint(0, 20), rng.randint(0, 20)
            q = {"role": "user", "content": f"There are {x} pens and {y} more. How many pens?"}
            f.write(json.dumps({"chosen": [q, {"role": "assistant", "content": f"{x} + {y} = {x + y}."}],
                                "rejected": [q, {"role": "assistant", "content": f"{x} * {y} = {x * y}."}]}) + "\n")
    return a, b


def test_shares_split_the_rows_exactly_and_repeats_are_whole_passes():
    assert allocate([2000, 240], [0.7, 0.3]) == [560, 240]  # the file is the limit: all of it, arith sampled down
    assert allocate([2000, 240], [0.7, 0.3], 1000) == [700, 300]  # asked for more: the file runs out (repeats)
    assert allocate([10, 10, 10], [1 / 3, 1 / 3, 1 / 3], 10) == [4, 3, 3]  # largest remainders add up exactly
    assert allocate([5, 7], [None, None]) == [5, 7]  # no shares: each dataset whole
    idx = draw(240, 300, seed=1)
    counts = Counter(idx)
    assert len(idx) == 300 and set(counts) == set(range(240)) and max(counts.values()) == 2
    assert sorted(draw(100, 40, seed=2)) == sorted(set(draw(100, 40, seed=2)))  # without replacement


def test_each_dataset_is_detected_on_its_own_and_held_out_on_its_own(sums):
    cfg = build_config(None, {"data": {"mix": [{"dataset": "arith", "share": 0.7}, {"dataset": str(sums),
                                                                                     "share": 0.3}]}})
    train, held, det = build_splits(cfg.data, 42)
    by = Counter(train["source"])
    assert by == {"arith": 560, "sums": 240} and len(train) == 800
    parts = {p["name"]: p for p in det.mix}
    assert parts["arith"]["fields"] == "prompt question, reference answer"
    assert parts["sums"]["fields"] == "prompt problem, reference solution"
    assert parts["arith"]["unused"] == 1440 and parts["sums"]["unused"] == 0
    assert Counter(held["source"]) == {"arith": 200, "sums": 60}  # arith's test split; a fifth of the file
    row = next(r for r in train if r["source"] == "sums")
    assert row["prompt"][-1]["content"].startswith("A shop sells") and "\n#### " in row["reference"]
    # no held-out row of the file is trained on
    held_file = {r["prompt"][-1]["content"] for r in held if r["source"] == "sums"}
    assert not held_file & {r["prompt"][-1]["content"] for r in train if r["source"] == "sums"}
    # the shuffled mix: the file's rows are spread over the order, not one block
    first = train.select(range(200))["source"]
    assert 0.15 < first.count("sums") / 200 < 0.45
    # more rows than the shares allow without repeats: the file is passed over again, said in the plan's note
    more = build_config(None, {"data": {"mix": cfg.data.model_dump()["mix"], "mix_rows": 1000}})
    train2, _, det2 = build_splits(more.data, 42)
    assert Counter(train2["source"]) == {"arith": 700, "sums": 300}
    assert det2.mix[1]["repeats"] == 1.25
    from app.data.mixing import mix_note

    assert "repeated x1.25" in mix_note(det2) and "whole passes" in mix_note(det2)
    # the proof's held-out rows: from every dataset by its share, never more than a dataset holds
    from app.eval.heldout import sample_examples

    def drawn(d, n):
        return Counter(x["dataset"] for x in sample_examples(held, d, n, seed=0))

    assert drawn(det, 100) == {"arith": 70, "sums": 30}
    assert drawn(det, 1000) == {"arith": 140, "sums": 60}  # the file's 60 held-out rows are the limit
    whole = build_config(None, {"data": {"mix": [{"dataset": "arith"}, {"dataset": str(sums)}]}})
    _, held_w, det_w = build_splits(whole.data, 42)
    assert Counter(x["dataset"] for x in sample_examples(held_w, det_w, 26, seed=0)) == {"arith": 20, "sums": 6}


def test_a_mix_of_pairs_maps_every_layout_to_chosen_and_rejected(pairs):
    from app.data.preference import pair_of

    cfg = build_config(None, {"method": "dpo", "data": {"mix": [{"dataset": str(pairs[0])},
                                                                {"dataset": str(pairs[1])}]}})
    train, held, det = build_splits(cfg.data, 42)
    assert det.format == "preference" and Counter(train["source"]) == {"pairs_a": 40, "pairs_b": 24}
    for r in train.select(range(10)):
        pair = pair_of(r, det)
        assert pair and " + " in pair.chosen and " + " not in pair.rejected and pair.prompt[-1]["role"] == "user"


@pytest.mark.parametrize("flags, says", [
    ({"dataset": ["arith", "b.jsonl"], "mix": "0.7,0.4"}, "shares add up to 1.1, not 1"),
    ({"dataset": ["arith"], "mix": "1"}, "--mix gives the shares of two or more datasets"),
    ({"dataset": ["arith", "b.jsonl"], "mix": "0.5,0.3,0.2"}, "--mix has 3 share(s) for 2 dataset(s)"),
    ({"dataset": ["arith", "b.jsonl"], "mix": "0.7,x"}, "is not a list of numbers"),
    ({"dataset": ["arith", "arith"]}, "names 'arith' twice"),
    ({"dataset": ["arith", "b.jsonl"], "prompt_field": "question"}, "describes one dataset"),
])
def test_a_bad_mix_is_one_line(flags, says):
    from app.config.flags import flags_layer

    with pytest.raises(UserError) as e:
        build_config(None, flags_layer(flags))
    assert says in str(e.value) and "\n" not in str(e.value)


def test_percent_shares_and_the_train_form(sums):
    from app.config.flags import flags_layer
    from app.ui import handlers as h

    cfg = build_config(None, flags_layer({"dataset": ["arith", str(sums)], "mix": "70,30"}))
    assert [p.share for p in cfg.data.mix] == [0.7, 0.3] and cfg.data.dataset is None
    form = h.form_defaults("demo-grpo")
    form.update(dataset=f"arith, {sums}", mix="0.7,0.3", prompt_field=h.AUTO, reference_field=h.AUTO)
    _, _, _, argv = h.form_to_cli(form, "runs")
    assert argv[argv.index("--mix") + 1] == "0.7,0.3" and argv.count("--dataset") == 2
    built = h.config_from_form(form, "runs")
    assert built.data.label == f"arith 70% + {sums} 30%" and built.data.dataset is None
    with pytest.raises(UserError, match="column overrides name columns of one dataset"):
        h.form_to_cli({**form, "prompt_field": "question"}, "runs")
    assert h.form_defaults(None)["mix"] == ""
    preset = sums.parent / "my-mix.yaml"  # a config with a mix shows it in the form as it would type it
    preset.write_text(f"method: grpo\ndata:\n  mix:\n    - {{dataset: arith, share: 0.6}}\n"
                      f"    - {{dataset: {sums}, share: 0.4}}\n")
    shown = h.form_defaults(str(preset))
    assert shown["dataset"] == f"arith, {sums}" and shown["mix"] == "0.6,0.4"


def test_preference_pairs_and_prompts_do_not_mix(tmp_path, sums, pairs):
    r = _cli("train", "--method", "dpo", "--model", "arith-base", "--dataset", str(pairs[0]), "--dataset", str(sums),
             "--output-dir", str(tmp_path / "runs"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line = " ".join(r.stderr.split())
    assert "two kinds" in line and "'sums.jsonl' is prompt/reference data" in line.replace(str(sums.parent) + "/", "")
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


SEEN = '''
import json, os


def seen(completions, source=None, **kwargs):
    """Records the dataset of every prompt GRPO scores (TRL passes the row's columns)."""
    with open(os.environ["SEEN_FILE"], "a") as f:
        f.write(json.dumps(source) + "\\n")
    return [0.0] * len(completions)
'''


@pytest.mark.slow
def test_a_two_dataset_mix_trains_end_to_end_in_its_shares(tmp_path, sums, monkeypatch):
    (tmp_path / "seen.py").write_text(SEEN)
    seen_file = tmp_path / "seen.jsonl"
    monkeypatch.setenv("SEEN_FILE", str(seen_file))
    run = tmp_path / "runs" / "mix"
    r = _cli("train", "--preset", "demo-grpo", "--dataset", "arith", "--dataset", str(sums), "--mix", "0.7,0.3",
             "--max-steps", "16", "--reward", f"{tmp_path / 'seen.py'}:seen", "--no-progress",
             "--set", "training.proof_rows=40", "--run-dir", str(run), cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    said = " ".join((r.stdout + r.stderr).split())
    assert "mix of 2 datasets: arith 70%: 560 of 2000 rows (1440 not used); sums 30%: 240 of 240 rows" in said
    # the prompts GRPO actually drew: within sampling error of the asked shares (each prompt scored 8 times)
    # (the held-out scoring calls the reward too, one answer at a time and without the row's columns: left out)
    seen = [s for line in seen_file.read_text().splitlines() for s in json.loads(line) or []]
    prompts = len(seen) / 8
    share = seen.count("arith") / len(seen)
    assert abs(share - 0.7) <= 3 * math.sqrt(0.7 * 0.3 / prompts), (share, prompts)
    # recorded: config.yaml (re-runnable), status.json (as drawn), the proof per dataset, the card, runs show
    import yaml

    cfg = yaml.safe_load((run / layout.CONFIG).read_text())
    assert [(p["dataset"], p["share"]) for p in cfg["data"]["mix"]] == [("arith", 0.7), (str(sums), 0.3)]
    st = json.loads((run / layout.STATUS).read_text())
    assert [(p["name"], p["rows"]) for p in st[layout.MIX]] == [("arith", 560), ("sums", 240)]
    proof = json.loads((run / layout.COMPARE_JSON).read_text())
    by = proof["summary"]["by_dataset"]
    assert {k: v["n"] for k, v in by.items()} == {"arith": 28, "sums": 12}
    assert {r["dataset"] for r in proof["rows"]} == {"arith", "sums"}
    card = (run / layout.ADAPTER / "README.md").read_text()
    assert "a mix of `arith` (70%, 560 of its 2000 rows)" in card and "Per dataset of the mix" in card
    (listed,) = [json.loads(x) for x in _cli("runs", "list", str(run.parent), "--json").stdout.splitlines()]
    assert "per dataset: arith (28 rows)" in listed["comparison"] and "sums (12 rows)" in listed["comparison"]
    assert listed["dataset"] == f"arith 70% + {sums} 30%"
