"""Preference data and the DPO config, without training (issue #34): detection beyond the corpus layouts, overrides,
pairs skipped and counted, one-line refusals before any model loads, the loss family's validation, the memory of a
pair, the curves and the UI's detect."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from conftest import cli_here
from repo_paths import SCHEMAS

from app.data.detect import DataError, detect_from_rows
from app.data.preference import pair_of

R = range(20)


def _q(i: int) -> str:
    return f"Ana has {i} apples and buys {i + 2} more at the market. How many apples does she have?"


def _detect(rows, **kw):
    return detect_from_rows(rows, list(dict.fromkeys(k for r in rows for k in r)), **kw)


@pytest.mark.parametrize("label, first_wins", [("A", True), ("b", False), ("response_a", True), ("model_b", False),
                                                ("1", True), ("2", False)])
def test_a_label_names_the_better_of_two_lettered_answers(label, first_wins):
    rows = [{"question": _q(i), "response_a": f"It is {2 * i + 2}.", "response_b": f"Maybe {i}.",
             "preferred": label} for i in R]
    det = _detect(rows)
    assert (det.format, det.pair_fields, det.preference_field) == ("preference", ["response_a", "response_b"],
                                                                   "preferred")
    pair = pair_of(rows[0], det)
    assert (pair.chosen, pair.rejected) == (("It is 2.", "Maybe 0.") if first_wins else ("Maybe 0.", "It is 2."))


def test_ties_and_labels_naming_neither_answer_make_no_pair():
    rows = [{"prompt": _q(i), "completion_0": "x", "completion_1": "y", "score_0": 1.0, "score_1": 1.0} for i in R]
    det = _detect(rows)
    assert det.preference_field == ["score_0", "score_1"] and pair_of(rows[0], det) is None
    rows = [{"prompt": _q(i), "response_a": "x", "response_b": "y", "winner": "tie"} for i in R]
    assert pair_of(rows[0], _detect(rows)) is None


def test_metadata_about_an_answer_is_not_the_answer():
    rows = [{"prompt": _q(i), "chosen_model": "gpt", "chosen": f"It is {2 * i + 2}.", "rejected_model": "llama",
             "rejected": "no idea", "score_chosen": 9.0} for i in R]
    det = _detect(rows)
    assert (det.chosen_field, det.rejected_field, det.prompt_field) == ("chosen", "rejected", "prompt")


def test_overrides_name_the_pair_and_one_without_the_other_is_one_line():
    rows = [{"prompt": _q(i), "good_answer": f"It is {2 * i + 2}.", "other_answer": "no"} for i in R]
    assert _detect(rows).format == "columns"  # nothing says which is better: not preference data
    det = _detect(rows, chosen_field="good_answer", rejected_field="other_answer")
    assert (det.format, det.chosen_field, det.rejected_field) == ("preference", "good_answer", "other_answer")
    assert det.reasons["chosen_field"].startswith("set by override")
    with pytest.raises(DataError, match="--chosen-field is set but no column holds the other answer"):
        _detect(rows, chosen_field="good_answer")
    with pytest.raises(DataError, match="--rejected-field 'nope' is not a column"):
        _detect(rows, chosen_field="good_answer", rejected_field="nope")


def test_inspect_json_reports_the_pair_and_takes_the_overrides(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text("".join(json.dumps({"q": _q(i), "reply_one": f"It is {2 * i + 2}.", "reply_two": "no"}) + "\n"
                         for i in R))
    r = cli_here("inspect", str(p), "--json", "--chosen-field", "reply_one", "--rejected-field", "reply_two")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["format"], d["prompt_field"], d["chosen_field"], d["rejected_field"]) == ("preference", "q",
                                                                                      "reply_one", "reply_two")
    r = cli_here("inspect", str(p))
    assert r.returncode == 0 and "--chosen-field" not in r.stdout  # not preference data without the overrides


def _pref_file(path: Path, good: int, equal: int, missing: int) -> Path:
    rows = [{"prompt": _q(i), "chosen": f"It is {2 * i + 2}.", "rejected": f"It is {i}."} for i in range(good)]
    rows += [{"prompt": _q(i), "chosen": "same", "rejected": "same"} for i in range(equal)]
    rows += [{"prompt": _q(i), "chosen": f"It is {i}.", "rejected": None} for i in range(missing)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_rows_without_a_pair_are_counted_and_skipped(tmp_path, caplog):
    from transformers import AutoTokenizer

    from app.config.schema import DataConfig
    from app.data import build_splits
    from app.data.convert import to_dpo
    from app.demo.recipe import base_model_path

    tok = AutoTokenizer.from_pretrained(base_model_path())
    train, _, det = build_splits(DataConfig(dataset=str(_pref_file(tmp_path / "p.jsonl", 30, 6, 4)),
                                            heldout_size=0), seed=0)
    with caplog.at_level(logging.WARNING, logger="app.data"):
        ds = to_dpo(train, det, tok, "Be brief.")
    assert len(ds) == 30 and "skipped 10 of 40 rows that make no preference pair" in caplog.text
    assert ds[0]["prompt"][0] == {"role": "system", "content": "Be brief."}
    assert ds[0]["chosen"] == [{"role": "assistant", "content": "It is 2."}]
    bad, _, det = build_splits(DataConfig(dataset=str(_pref_file(tmp_path / "b.jsonl", 0, 5, 5)), heldout_size=0),
                               seed=0)
    with pytest.raises(DataError, match="none of the 10 training rows makes a preference pair"):
        to_dpo(bad, det, tok, None)


def test_a_csv_of_numeric_answers_is_pairs_of_text(tmp_path):
    """pandas reads a CSV's short answers ("42" vs "41") as numbers: they are still the two answers."""
    import pandas as pd
    from transformers import AutoTokenizer

    from app.config.schema import DataConfig
    from app.data import build_splits
    from app.data.convert import to_dpo
    from app.demo.recipe import base_model_path

    path = tmp_path / "pairs.csv"
    pd.DataFrame([{"prompt": _q(i), "chosen": 2 * i + 2, "rejected": i, "chosen_score": 9, "rejected_score": 2}
                  for i in R]).to_csv(path, index=False)
    train, _, det = build_splits(DataConfig(dataset=str(path), heldout_size=0), seed=0)
    assert (det.format, det.prompt_field, det.chosen_field, det.rejected_field) == ("preference", "prompt", "chosen",
                                                                                    "rejected")
    ds = to_dpo(train, det, AutoTokenizer.from_pretrained(base_model_path()), None)
    row = next(r for r in ds if r["prompt"][-1]["content"] == _q(3))
    assert (row["chosen"], row["rejected"]) == ([{"role": "assistant", "content": "8"}],
                                                [{"role": "assistant", "content": "3"}])


@pytest.mark.parametrize("args, message", [
    (["--set", "dpo.loss_type=sigmod"], "unknown DPO loss 'sigmod'; did you mean 'sigmoid'?"),
    (["--set", "dpo.loss_type=sigmoid,sft", "--set", "dpo.loss_weights=[1.0]"],
     "dpo.loss_weights has 1 weight(s) for 2 loss(es)"),
])
def test_a_bad_loss_is_one_line_before_anything_loads(tmp_path, args, message):
    data = _pref_file(tmp_path / "p.jsonl", 30, 0, 0)
    r = cli_here("train", "--method", "dpo", "--dataset", str(data), "--model", "no/such-model", "--output-dir",
             str(tmp_path / "runs"), *args)
    assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) <= 3  # one line, wrapped by the terminal width at most
    assert not (tmp_path / "runs").exists()


def test_data_with_no_pairs_is_one_line_and_no_run_folder(tmp_path):
    from app.demo.recipe import base_model_path

    for data, message in ((_pref_file(tmp_path / "bad.jsonl", 0, 8, 8), "none of the"),
                          (SCHEMAS / "gsm8k.jsonl", "trains on preference pairs")):
        r = cli_here("train", "--method", "dpo", "--dataset", str(data), "--model", str(base_model_path()),
                 "--output-dir", str(tmp_path / "runs"), "--local-only")
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (tmp_path / "runs").exists()


def test_the_loss_family_is_trls_and_orpo_takes_none_of_it():
    import re

    import trl

    from app.config.build import build_config
    from app.config.schema import DPO_LOSS_TYPES
    from app.errors import UserError

    field = next(f for f in trl.DPOConfig.__dataclass_fields__.values() if f.name == "loss_type")
    assert set(re.findall(r"`'(\w+)'`", field.metadata["help"])) == set(DPO_LOSS_TYPES)
    cfg = build_config({"method": "dpo"}, sets=["dpo.loss_type=sigmoid, sft", "dpo.loss_weights=[1.0, 0.2]"])
    assert cfg.dpo.loss_type == ["sigmoid", "sft"]
    # an empty value is the default, as for every key (it was a TypeError traceback)
    assert build_config({"method": "dpo", "dpo": {"loss_type": ["ipo"]}}, sets=["dpo.loss_type="]).dpo.loss_type == [
        "sigmoid"]
    with pytest.raises(UserError, match="ORPO has one loss"):
        build_config({"method": "orpo"}, sets=["dpo.loss_type=ipo"])


def test_dpo_args_and_defaults_follow_the_plan(tmp_path):
    from conftest import plan_for

    from app.config.build import build_config
    from app.config.resolve import resolve
    from app.train.methods.args import dpo_kwargs

    cfg = build_config({"method": "dpo", "data": {"dataset": "x"}}, sets=["dpo.loss_type=sigmoid,sft",
                                                                         "dpo.loss_weights=[1, 0.5]", "dpo.beta=0.2"])
    r = resolve(cfg)
    # LoRA Without Regret: ~10x TRL's full fine-tuning rate (1e-6), rank 16 as for RL; 2 pairs per micro-batch x 4
    assert (r.training.learning_rate, r.lora.r, r.training.per_device_train_batch_size,
            r.training.gradient_accumulation_steps) == (1e-5, 16, 4, 2)
    kw = dpo_kwargs(plan_for(cfg), tmp_path)
    assert (kw["loss_type"], kw["loss_weights"], kw["beta"]) == (["sigmoid", "sft"], [1.0, 0.5], 0.2)
    assert kw["max_length"] == r.training.max_length


def test_a_pair_is_estimated_as_two_padded_sequences_and_no_reference_copy():
    from app.config.build import build_config
    from app.config.resolve import resolve
    from app.train.planning.memory import Decisions, estimate_memory, micro_batch_tokens

    lengths = [100] * 50 + [300] * 50
    sft = resolve(build_config({"method": "sft", "model": {"name_or_path": "Qwen/Qwen2.5-1.5B-Instruct"}},
                               sets=["training.per_device_train_batch_size=4"]))
    dpo = resolve(build_config({"method": "dpo", "model": {"name_or_path": "Qwen/Qwen2.5-1.5B-Instruct"}},
                               sets=["training.per_device_train_batch_size=4"]))
    assert micro_batch_tokens(dpo, lengths, packing=False) == 2 * micro_batch_tokens(sft, lengths, packing=False)
    e_sft, e_dpo = (estimate_memory(c, lengths, Decisions(packing=False)) for c in (sft, dpo))
    assert e_dpo["weights_gb"] == e_sft["weights_gb"] and e_dpo["sampler_copy_gb"] == 0  # the base is the reference
    assert e_dpo["activations_gb"] > e_sft["activations_gb"]


def test_dpo_curves_have_their_panels():
    from app.run import layout
    from app.run.curves import curve_keys, panels

    recs = [{"step": s, "loss": 0.69 - s / 100, layout.DPO_ACCURACY: 0.5 + s / 40, layout.DPO_MARGIN: s / 50}
            for s in range(1, 11)]
    recs[4].update({layout.EVAL_ACCURACY: 0.3, layout.EVAL_PREF_ACCURACY: 0.6, layout.EVAL_PREF_MARGIN: 0.1})
    shown, _ = panels(recs)
    by = {p.key: p for p in shown}
    assert by["pairs"].percent and [s.name for s in by["pairs"].series] == [layout.DPO_ACCURACY,
                                                                            layout.EVAL_PREF_ACCURACY]
    assert "preference accuracy" in by["pairs"].title
    assert [s.name for s in by["margin"].series] == [layout.DPO_MARGIN, layout.EVAL_PREF_MARGIN]
    assert {layout.DPO_ACCURACY, layout.EVAL_PREF_ACCURACY} <= set(curve_keys(recs))


def test_ui_detect_shows_the_pair_and_the_form_sends_the_dpo_keys(tmp_path):
    from app.ui import data_form as df
    from app.ui import handlers as h

    res = df.detect(str(SCHEMAS / "hh_rlhf.jsonl"))
    assert set(res["samples"][0]) == {"prompt (as the model sees it)", "reference", "chosen", "rejected"}
    assert "Ana has" in res["samples"][0]["prompt (as the model sees it)"] and "Human:" not in \
        res["samples"][0]["prompt (as the model sees it)"]
    md = df.detection_markdown(res)
    assert "**chosen**: `chosen`" in md and "**rejected**: `rejected`" in md
    form = h.widget_values(h.form_defaults(None))
    assert form["dpo_loss"] == "sigmoid"
    form.update(method="dpo", dataset="pairs/", chosen_field="better", dpo_loss="sigmoid,sft", dpo_beta=0.3)
    _, flags, sets, argv = h.form_to_cli(form, tmp_path)
    assert argv[argv.index("--method") + 1] == "dpo" and argv[argv.index("--chosen-field") + 1] == "better"
    assert "dpo.loss_type=sigmoid,sft" in sets and "dpo.beta=0.3" in sets
    cfg = h.config_from_form(form, tmp_path)
    assert (cfg.method, cfg.data.chosen_field, cfg.dpo.loss_type, cfg.dpo.beta) == ("dpo", "better",
                                                                                     ["sigmoid", "sft"], 0.3)
