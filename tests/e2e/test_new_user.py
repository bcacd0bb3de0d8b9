"""The first hour of a new user (#38): a preset's settings that belong to its own dataset, errors that say where a
value came from, a dry run that checks what the run checks, one name for one option."""

import json
from pathlib import Path

import pytest
from conftest import cli as in_a_process
from conftest import cli_here

from app.config.build import build_config
from app.config.presets import load_preset

# Dry runs, refusals and short commands run in this process (conftest.cli_here); compare sets this process's CPU
# threads, so it gets a process of its own (conftest.cli).
cli = cli_here


@pytest.fixture
def own_file(tmp_path) -> Path:
    """A user's GSM8K-style file: columns the demo presets do not name, one split only."""
    p = tmp_path / "mine.jsonl"
    p.write_text("".join(json.dumps({"problem": f"What is {i} plus {i + 3}?", "solution": f"{i}+{i + 3}\n#### "
                                     f"{2 * i + 3}"}) + "\n" for i in range(40)))
    return p


# ------------------------------------------------------------------------------------------ 1. presets and data


@pytest.mark.parametrize("preset", ["demo-grpo", "demo-dpo"])
def test_a_presets_data_settings_do_not_follow_another_dataset(preset, own_file):
    layer = load_preset(preset)
    cfg = build_config(layer, {"data": {"dataset": str(own_file)}}, source=f"preset {preset}")
    assert layer == load_preset(preset)  # the caller's layer is left as it was
    d = cfg.data
    assert (d.eval_split, d.prompt_field, d.reference_field, d.system_prompt) == (None, None, None, None)
    assert d.dataset == str(own_file)
    note = " ".join(cfg._notes)
    assert f"preset {preset}" in note and "eval_split='test'" in note and "arith" in note
    # the same through --set, and the preset's other settings (learning rate, steps) still apply
    via_set = build_config(load_preset(preset), sets=[f"data.dataset={own_file}"], source="preset x")
    assert via_set.data.eval_split is None and via_set.training.learning_rate == 1e-4
    # the preset's own dataset keeps them
    same = build_config(load_preset(preset), {"data": {"dataset": "arith"}})
    assert same.data.eval_split == "test" and not same._notes


def test_explicit_values_still_apply_with_another_dataset(own_file):
    cfg = build_config(load_preset("demo-grpo"), {"data": {"dataset": str(own_file), "prompt_field": "problem"}},
                       sets=["data.eval_split=train2"])
    assert cfg.data.prompt_field == "problem" and cfg.data.eval_split == "train2"
    assert cfg.data.said_as("prompt_field") == "--prompt-field"
    assert cfg.data.said_as("eval_split") == "--set data.eval_split"


def test_a_value_the_user_did_not_type_is_named_with_where_it_came_from(tmp_path, own_file):
    preset = tmp_path / "mine.yaml"
    preset.write_text(f"method: grpo\ndata: {{dataset: {own_file}, prompt_field: question}}\n")
    r = cli("train", "--preset", str(preset), "--dry-run")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert f"data.prompt_field 'question' (from preset {preset})" in line and "problem, solution" in line
    # typed: named as typed
    r = cli("train", "--dataset", str(own_file), "--prompt-field", "nope", "--dry-run")
    assert r.returncode == 2 and "--prompt-field 'nope'" in r.stderr


def test_the_default_preset_with_your_own_file_plans_and_the_dry_run_checks_the_data(own_file, tmp_path):
    r = cli("train", "--preset", "demo-grpo", "--dataset", str(own_file), "--dry-run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "fields: prompt problem, reference solution" in r.stderr
    assert "not used with" in r.stderr  # the note says which preset keys were left out
    # what the run would refuse (an eval split this file lacks), the dry run refuses, in one line
    r = cli("train", "--preset", "demo-grpo", "--dataset", str(own_file), "--set", "data.eval_split=test",
            "--dry-run", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "eval split 'test' (data.eval_split) not found" in r.stderr and "--set data.eval_split=" in r.stderr
    assert not (tmp_path / "runs").exists()


def test_one_name_for_the_hub_datasets_config():
    r = cli("train", "--config", "main", "--dataset", "gsm8k", "--dry-run")
    assert r.returncode == 2 and "--dataset-config main" in r.stderr
    r = cli("inspect", "--help")
    assert "--dataset-config" in r.stdout and "--config " not in r.stdout



# ------------------------------------------------------------------------------------- 2. the card asked about


def _plan(*args):
    text = cli("train", "--dataset", "gsm8k", "--dry-run", *args)
    js = cli("train", "--dataset", "gsm8k", "--dry-run", "--json", *args)
    return text, js, json.loads(js.stdout) if js.stdout.strip() else None


def test_the_planner_answers_the_card_asked_about_first_in_one_vocabulary():
    from app.train.planning.memory import VERDICTS

    for model, gb, word in (("Qwen/Qwen3-8B", 24, "tight"), ("Qwen/Qwen3-8B", 12, "fits with changes"),
                            ("Qwen/Qwen2.5-7B-Instruct", 8, "fits with changes")):
        text, js, plan = _plan("--model", model, "--gpu-memory", str(gb))
        assert text.returncode == 0 and js.returncode == 0, text.stderr
        assert plan["verdict"] == word and plan["card_gb"] == gb and plan["verdicts"][str(gb)] == word
        assert set(plan["verdicts"].values()) <= set(VERDICTS) and plan["verdict_words"] == VERDICTS
        said = " ".join(text.stderr.split())
        card = "an 8 GB" if gb == 8 else f"a {gb} GB"
        # the line about memory starts with the answer for this card, in the JSON's word and its meaning
        assert f"memory estimate on {card} CUDA GPU (planned): {word} ({VERDICTS[word]})" in said
        assert f"{gb} GB {word}" in said  # the per-card line uses the same words
        assert "a 8 GB" not in said


def test_a_refusal_says_what_cannot_help_and_keeps_its_numbers():
    text, js, plan = _plan("--model", "Qwen/Qwen3-14B", "--gpu-memory", "8")
    assert text.returncode == 2 and js.returncode == 2  # the run would be refused: so is its dry run
    said = " ".join(text.stderr.split())
    assert "weights alone take 8.9 GB" in said and "no setting makes it fit" in said and "smaller model" in said
    assert "--set" not in said.split("would be refused:")[1]  # no knob that cannot help
    assert plan["verdict"] == "too big" and plan["total_gb"] > 8 and plan["verdicts"]["8"] == "too big"
    # at 10 GB the weights fit but nothing else does: said so, after the knobs tried
    text, _, _ = _plan("--model", "Qwen/Qwen3-14B", "--gpu-memory", "10")
    said = " ".join(text.stderr.split())
    assert text.returncode == 2 and "even with --set" in said and "use a smaller model or a larger GPU" in said


def test_a_card_size_that_is_no_card_is_bad_input():
    r = cli("train", "--dataset", "gsm8k", "--dry-run", "--gpu-memory", "-3")
    assert r.returncode == 2 and "not a card size" in r.stderr and "Traceback" not in r.stderr


# ------------------------------------------------------------------------------------------ 4. DPO's figures


def _fake_run(root: Path, name: str, created: float, method: str = "dpo", preference: dict | None = None,
              recs: list[dict] | None = None) -> Path:
    d = root / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"method: {method}\nmodel: {{name_or_path: m}}\ndata: {{dataset: d}}\n")
    (d / "status.json").write_text(json.dumps({"status": "finished", "created": created, "started": created,
                                               "step": 2}))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs or []))
    if preference:
        side = {"accuracy": 0.5, "mean_reward": 1.0}
        summary = {"base": side, "adapter": side, "wins": 0, "losses": 0, "ties": 4, "n": 4}
        (d / "compare.json").write_text(json.dumps({"rows": [], "summary": summary, "preference": preference}))
    return d


def test_dpo_figures_have_one_definition_per_name_and_a_column_of_their_own(tmp_path):
    from app.run import layout
    from app.run.summary import preference_text, run_summary

    # the case: neither side finds the chosen answer more likely, yet training raised it against the base
    p = {"n": 16, "accuracy": 1.0, "margin": 0.02, "base_likelier": 0.0, "adapter_likelier": 0.0, "beta": 0.1}
    text = preference_text(p)
    assert text == ("preference accuracy 100.0%, reward margin +0.02; chosen more likely base 0.0% -> adapter 0.0%; "
                    "on 16 held-out pairs")
    # a compare.json of an older version reads the same
    old = {"n": 16, "reward_accuracy": 1.0, "margin": 0.02, "base_accuracy": 0.0, "adapter_accuracy": 0.0,
           "beta": 0.1}
    assert preference_text(old) == text
    assert set(layout.PREFERENCE_WORDS) == {"preference accuracy", "reward margin", "chosen more likely"}
    recs = [{"step": 1, "loss": 0.69, layout.DPO_ACCURACY: 0.5, layout.DPO_MARGIN: 0.3}]
    run = _fake_run(tmp_path, "r-dpo", 1.0, preference=p, recs=recs)
    s = run_summary(run)
    assert s["reward"] is None and s["pref_accuracy"] == "100.0%"  # the margin is not shown as a reward
    r = cli("runs", "list", "--output-dir", str(tmp_path))
    assert r.returncode == 0 and "pref. acc." in r.stdout and "100.0%" in r.stdout


def test_runs_are_listed_by_when_they_were_made_not_last_touched(tmp_path):
    import os

    from app.run.lookup import list_runs

    old = _fake_run(tmp_path, "a-old", 1000.0, method="grpo")
    new = _fake_run(tmp_path, "b-new", 2000.0, method="grpo")
    os.utime(old / "status.json", None)  # a compare or an export touched the old run just now
    os.utime(old, None)
    assert list_runs(tmp_path) == [new, old]


# ------------------------------------------------------------------------------------------ 5. pairs hand-off


def _manifest(pairs: int, done: int = 48, adapter: str | None = None) -> dict:
    return {"settings": {"model": "Qwen/Qwen2.5-1.5B-Instruct", "sampled_with": "/models/mine", "adapter": adapter},
            "splits": {"train": {"done": done, "pairs": pairs, "rows": pairs, "bytes": 0},
                       "test": {"done": 4, "pairs": 1, "rows": 4, "bytes": 0}}}


def test_pairs_hands_off_the_model_that_answered_or_says_how_to_get_more():
    from app.cli.pairs import hand_off
    from app.synth.pairs import PairsRequest

    req = PairsRequest(samples=4, temperature=0.7, min_gap=0.25)
    lines = hand_off(_manifest(30), Path("out"), req)
    assert lines[-1] == "train: qlora-app train --method dpo --dataset out --model /models/mine"
    lines = hand_off(_manifest(30, adapter="runs/r1"), Path("out"), req)
    assert lines[-1].endswith("--model /models/mine --set lora.init_from=runs/r1")
    few = " ".join(hand_off(_manifest(1), Path("out"), req))
    assert "only 1 of 48 prompts made a pair" in few and "--samples 8" in few and "--temperature" in few
    assert "--min-gap" in few and "train:" not in few and "less than one DPO step" in few


def _apples_run(tmp_path: Path, tiny_models, n: int) -> tuple[Path, Path]:
    """(run, its data): a GRPO run folder on a tiny Qwen3 with a random adapter, trained on ``n`` apple sums."""
    from fakes import make_adapter, write_run

    rows = [{"question": f"Tom has {a} apples and buys {b} more. How many apples?", "answer": str(a + b)}
            for a in range(6) for b in range(n // 6)]
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = tiny_models["qwen3"]
    return write_run(tmp_path / "run", model, make_adapter(model, tmp_path / "a"), data), data


@pytest.mark.slow
def test_pairs_from_a_runs_adapter_use_the_runs_own_data(tmp_path, tiny_models):
    run, data = _apples_run(tmp_path, tiny_models, 24)
    out = tmp_path / "pairs"
    r = cli("pairs", "--adapter", str(run), "--out", str(out), "--max-prompts", "4", "--max-heldout", "2",
            "--samples", "2", "--max-new-tokens", "6", "--local-only", "--no-progress", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    settings = json.loads((out / ".qlora-pairs.json").read_text())["settings"]
    assert settings["dataset"] == str(data) and settings["sampled_with"] == str(tiny_models["qwen3"])
    said = " ".join(r.stdout.split())
    assert "only" in said and "make more before training" in said  # 4 prompts cannot make a DPO step


# ------------------------------------------------------------------------------------ 6. preference layouts


def _answers(i: int) -> tuple[str, str]:
    return (f"Start with the {i} small steps, then check each one twice before you move on to the next part.",
            f"Just guess {i}; it does not matter much and nobody will check the result anyway, honestly.")


def _detect(rows, **kw):
    from app.data.detect import detect_nested

    columns = list(dict.fromkeys(k for r in rows for k in r))
    return detect_nested(rows, columns, **kw)


def _shp(i: int, scores: bool = True) -> dict:
    good, bad = _answers(i)
    a_better = i % 3 != 0
    row = {"post_id": f"p{i:05d}", "domain": "askscience_train", "upvote_ratio": 0.97,
           "history": f"How should I approach problem number {i} in my homework when I am stuck on it?",
           "c_root_id_A": f"c{i}a", "c_root_id_B": f"c{i}b",
           "human_ref_A": good if a_better else bad, "human_ref_B": bad if a_better else good,
           "labels": 1 if a_better else 0}
    if scores:
        row.update(score_A=40 + i if a_better else 3, score_B=3 if a_better else 40 + i)
    return row


@pytest.mark.parametrize("scores", [True, False])
def test_stanford_shp_is_two_answers_ranked_and_sft_learns_the_better_one(scores):
    from app.data.convert import completion_text, reference_text
    from app.data.preference import pair_of

    rows = [_shp(i, scores) for i in range(24)]
    det, flat = _detect(rows)
    assert not flat and det.format == "preference", det.reasons
    assert det.prompt_field == "history" and det.pair_fields == ["human_ref_A", "human_ref_B"]
    assert det.preference_field == (["score_A", "score_B"] if scores else "labels")
    for i, row in enumerate(rows):
        good, _ = _answers(i)
        pair = pair_of(row, det)
        assert pair.chosen == good and pair.chosen != pair.rejected
        assert completion_text(row, det) == good == reference_text(row, det)  # never the worse answer


@pytest.mark.parametrize("chosen, rejected", [("BetterAnswer", "WorseAnswer"), ("GOOD_RESPONSE", "BAD_RESPONSE"),
                                              ("answer_winner", "answer_loser"), ("correct", "incorrect"),
                                              ("accepted_reply", "refused_reply")])
def test_two_answers_ordered_by_their_names_in_any_casing_are_a_pair(chosen, rejected):
    rows = []
    for i in range(16):
        good, bad = _answers(i)
        rows.append({"Question": f"What is the careful way to do task {i}?", rejected: bad, chosen: good})
    det, _ = _detect(rows)
    assert (det.format, det.chosen_field, det.rejected_field) == ("preference", chosen, rejected), det.reasons
    assert det.prompt_field == "Question" and det.reference_field != rejected


@pytest.mark.parametrize("shape", ["strings", "messages"])
def test_a_pair_nested_inside_objects_is_a_pair(shape):
    from app.data.preference import pair_of

    def wrap(text):
        return text if shape == "strings" else [{"role": "assistant", "content": text}]

    rows = []
    for i in range(16):
        good, bad = _answers(i)
        rows.append({"prompt": f"What is the careful way to do task {i}?",
                     "responses": {"worse": wrap(bad), "better": wrap(good)}, "meta": {"source": "x"}})
    det, flat = _detect(rows)
    assert flat and det.format == "preference"
    assert (det.chosen_field, det.rejected_field) == ("responses.better", "responses.worse")
    from app.data.detect import flatten_row

    assert pair_of(flatten_row(rows[0]), det).chosen == _answers(0)[0]


def test_a_losing_answer_is_never_the_reference():
    rows = [{"question": f"What is the careful way to do task {i}?", "worse_answer": _answers(i)[1]}
            for i in range(16)]
    det, _ = _detect(rows)
    assert det.reference_field != "worse_answer" and det.prompt_field == "question"


def test_two_answers_nothing_orders_are_said_so_and_an_override_makes_them_a_pair():
    from app.data.preference import pair_of, require_pairs
    from app.errors import UserError

    rows = []
    for i in range(16):
        good, bad = _answers(i)
        rows.append({"prompt": f"What is the careful way to do task {i}?", "response_1": bad, "response_2": good})
    det, _ = _detect(rows)
    assert det.format != "preference" and "--chosen-field NAME --rejected-field NAME" in det.reasons["format"]
    with pytest.raises(UserError):
        require_pairs(det)
    det, _ = _detect(rows, chosen_field="response_2")  # one side named: the other answer is the other side
    assert (det.format, det.chosen_field, det.rejected_field) == ("preference", "response_2", "response_1")
    assert pair_of(rows[0], det).chosen == _answers(0)[0]


def test_an_override_on_a_label_ranked_file_is_obeyed_or_refused():
    from app.errors import DataError

    rows = [_shp(i, scores=False) for i in range(24)]
    det, _ = _detect(rows, chosen_field="human_ref_B")
    assert (det.chosen_field, det.rejected_field) == ("human_ref_B", "human_ref_A")  # obeyed, every row
    with pytest.raises(DataError, match="not one of the two answers"):
        _detect(rows, chosen_field="history", said={"chosen_field": "--chosen-field"})


# --------------------------------------------------------------------------------------- 7. bad input escapes


def test_a_model_folder_without_weights_is_one_line_and_makes_no_run(tmp_path):
    import shutil

    from app.demo.recipe import base_model_path

    model = tmp_path / "noweights"
    shutil.copytree(base_model_path(), model)
    for f in model.glob("*.safetensors"):
        f.unlink()
    r = cli("train", "--dataset", "arith", "--model", str(model), "--max-steps", "1", "--output-dir",
            str(tmp_path / "runs"))
    assert r.returncode == 2 and "no weights" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "runs").exists()
    # a dry run plans from config.json alone (for any machine), and says the run would stop there
    r = cli("train", "--dataset", "arith", "--model", str(model), "--dry-run")
    assert r.returncode == 0 and "no weights" in r.stderr and "a run from it would stop here" in " ".join(
        r.stderr.split())


@pytest.mark.parametrize("typed, meant", [("training.lr", "training.learning_rate"), ("lr", "training.learning_rate"),
                                          ("training.epochs", "training.num_train_epochs"),
                                          ("grpo.num_gen", "grpo.num_generations"), ("lora.rank", "lora.r"),
                                          ("batch_size", "training.per_device_train_batch_size")])
def test_a_mistyped_key_suggests_the_key_it_means(typed, meant):
    from app.config.keys import unknown_key_message

    assert unknown_key_message(typed) == f"unknown config key '{typed}'; did you mean '{meant}'?"


def test_pairs_that_are_all_equal_say_so_with_the_held_out_rows_counted(tmp_path):
    data = tmp_path / "same.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"q{i} what?", "chosen": f"a{i}", "rejected": f"a{i}"}) + "\n"
                            for i in range(80)))
    r = cli("train", "--method", "dpo", "--dataset", str(data), "--dry-run")
    line = " ".join(r.stderr.split())
    assert r.returncode == 2 and "none of the 64 training rows (16 more are held out)" in line
    assert "the same in every row" in line and "--chosen-field" not in line  # no override can help


# ------------------------------------------------------------------------------------ 8. SFT out of memory on CPU


@pytest.mark.slow
def test_sft_at_batch_1_on_a_cpu_survives_a_passing_out_of_memory(tmp_path):
    import os

    from app.run import layout, lookup, store

    r = in_a_process("train", "--method", "sft", "--dataset", "arith-sft", "--model", "arith-base", "--max-steps", "3",
                     "--output-dir", str(tmp_path), "--no-progress", "--local-only", "--set",
                     "per_device_train_batch_size=1", "--set", "gradient_accumulation_steps=1", "--set",
                     "training.proof_rows=0", "--set", "training.eval_every=0", "--set", "training.max_length=256",
                     timeout=600, env={**os.environ, "QLORA_APP_FAULT": "oom@2"})
    assert r.returncode == 0, r.stderr[-2000:]
    (d,) = lookup.list_runs(tmp_path)
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == 3
    [change] = st["oom_changes"]
    assert change["change"].startswith("the same settings once more after freeing memory")
    assert "out of memory at step 2" in " ".join(r.stdout.split()) and "GPU" not in change["change"]


def test_a_spent_sft_ladder_on_a_cpu_says_plainly_what_was_tried(tmp_path):
    from conftest import plan_for

    from app.config.build import build_config
    from app.train.planning.oom import next_rung, spent_message
    from app.train.planning.plan import replan

    plan = plan_for(build_config({"method": "sft"}, None, ["per_device_train_batch_size=1",
                                                           "gradient_accumulation_steps=2", "runtime.device=cpu",
                                                           "training.max_length=512"]), packing=True)
    while (rung := next_rung(plan)) is not None:
        plan = replan(plan, rung[0], f"out of memory at step 1 ({rung[1]})")
    line = spent_message(plan, 3, "injected", tmp_path)
    assert line.startswith("out of memory at step 3 (injected), even at the least qlora-app can choose by itself "
                           "(per-device batch 1, a retry and examples of at most 128 tokens)")
    assert "GPU" not in line and "ladder" not in line


# ----------------------------------------------------------------------------------------------------- 10. words


def test_orpo_says_it_is_experimental():
    from app.config.build import build_config
    from app.config.resolve import resolve, warnings_for

    said = " ".join(warnings_for(resolve(build_config({"method": "orpo"}))))
    assert "method orpo is experimental" in said
    assert "experimental" not in " ".join(warnings_for(resolve(build_config({"method": "dpo"}))))


def test_a_curve_with_too_few_points_to_smooth_is_drawn_as_its_points():
    from app.run import curves

    recs = [{"step": s, "loss": 1.0 / s, "reward": 0.1 * s} for s in range(1, 6)]
    fig = curves.figure(recs, "r", 5)
    labels = [ln.get_label() for ax in fig.axes for ln in ax.get_lines()]
    assert not any("EMA over ~1 " in str(label) for label in labels) and not any("smoothed" in str(x) for x in labels)


def test_an_unreachable_hub_is_one_line_at_once(tmp_path):
    import time

    env = {k: None for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")}  # left out
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # a hub that refuses connections: no network touched
    env["HF_HOME"] = str(tmp_path / "hf")  # an empty cache
    for args, needle in ((["inspect", "someorg/uncached-data"], "dataset someorg/uncached-data is not in the local"),
                         (["train", "--dataset", "arith", "--model", "someorg/uncached-1B", "--output-dir",
                           str(tmp_path / "runs")], "model 'someorg/uncached-1B' is not in the local HF cache")):
        t0 = time.time()
        r = in_a_process(*args, timeout=120, env=env)
        assert r.returncode == 2 and needle in r.stderr and "cannot be reached" in r.stderr, r.stderr[-2000:]
        assert "Traceback" not in r.stderr and time.time() - t0 < 20
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_compare_says_where_it_kept_the_comparison_and_how_many_rows_it_had(tmp_path, tiny_models):
    run, _ = _apples_run(tmp_path, tiny_models, 30)
    r = in_a_process("compare", "--adapter", str(run), "--num-samples", "20", "--max-new-tokens", "4", "--local-only")
    said = " ".join(r.stdout.split())
    assert r.returncode == 0, r.stderr[-2000:]
    assert "6 held-out rows compared, not 20" in said  # 30 rows, a fifth held out
    (kept,) = (run / "comparisons").glob("compare-*.json")
    assert f"kept in {kept}" in said and not (run / "compare.json").exists()  # never over the proof


@pytest.mark.parametrize("layout", ["stack-exchange-paired", "messages-as-objects", "signed-strength"])
def test_more_public_preference_layouts(layout):
    rows = []
    for i in range(16):
        good, bad = _answers(i)
        if layout == "stack-exchange-paired":  # response_j is the better answer by the dataset's convention
            rows.append({"qid": i, "question": f"How do I do task {i} well?", "date": "2020-01-01",
                         "response_j": good, "response_k": bad})
        elif layout == "messages-as-objects":
            rows.append({"prompt": f"Do task {i}.", "chosen": {"role": "assistant", "content": good},
                         "rejected": {"role": "assistant", "content": bad}})
        else:  # HelpSteer2-style: a signed strength (-3..3) names neither answer by itself
            rows.append({"prompt": f"Do task {i}.", "response_1": good, "response_2": bad,
                         "preference_strength": -2})
    det, _ = _detect(rows)
    if layout == "stack-exchange-paired":
        assert (det.format, det.chosen_field, det.rejected_field) == ("preference", "response_j", "response_k")
        assert det.reference_field == "response_j"
    elif layout == "messages-as-objects":
        assert (det.chosen_field, det.rejected_field, det.reference_field) == (
            "chosen.content", "rejected.content", "chosen.content")
    else:  # not read as "-2 names response_2": unordered, said so, and neither answer is learnt
        assert det.format != "preference" and det.reference_field is None
        assert "--chosen-field NAME --rejected-field NAME" in det.reasons["format"]


def test_unpaired_preference_data_learns_only_the_answers_labelled_good(tmp_path):
    """TRL's unpaired format (prompt / completion / label, as KTO trains on): a false label marks an answer to
    avoid, so it is never a reference nor an SFT target, and DPO says the data has no pairs."""
    from app.config.schema import DataConfig
    from app.data import build_splits
    from app.data.convert import completion_text
    from app.data.preference import require_pairs
    from app.errors import UserError

    rows = [{"prompt": f"Do task {i}.", "completion": _answers(i)[i % 2], "label": i % 2 == 0} for i in range(40)]
    data = tmp_path / "kto.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    train, held, det = build_splits(DataConfig(dataset=str(data), heldout_size=4), seed=1)
    assert det.desirable_field == "label" and det.reference_field == "completion"
    assert len(train) + len(held) == 20 and all(r["label"] for r in train) and all(r["label"] for r in held)
    assert all(completion_text(r, det).startswith("Start with") for r in train)
    with pytest.raises(UserError, match="unpaired"):
        require_pairs(det)


# ------------------------------------------------------------------------------------------------------ 9. UI


def test_the_form_from_the_default_preset_with_your_own_file(own_file, tmp_path):
    from app.ui import handlers as h

    form = h.widget_values(h.form_defaults(h.DEFAULT_PRESET))
    form.update(dataset=str(own_file), prompt_field=h.AUTO, reference_field=h.AUTO)
    _, _, sets, argv = h.form_to_cli(form, tmp_path)
    assert "--dataset" in argv and not any(s.startswith("data.") for s in sets)  # no unsetting of preset keys
    cfg = h.config_from_form(form, tmp_path)
    assert cfg.data.eval_split is None and cfg.data.prompt_field is None
    # picking DPO: the DPO preset on the same model and data, what the user typed kept; back again
    dpo = h.switch_method(form, "dpo")
    assert (dpo["preset"], dpo["method"], dpo["dataset"], dpo["prompt_field"]) == ("demo-dpo", "dpo",
                                                                                  str(own_file), h.AUTO)
    assert h.preset_info("demo-dpo") != h.preset_info("demo-grpo")
    back = h.switch_method(dpo, "grpo")
    assert (back["preset"], back["dataset"]) == ("demo-grpo", str(own_file))
    none = h.switch_method({**h.widget_values(h.form_defaults(h.NO_PRESET)), "dataset": "arith"}, "sft")
    assert none["preset"] == h.NO_PRESET and none["method"] == "sft"
