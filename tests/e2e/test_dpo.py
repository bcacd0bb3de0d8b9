"""DPO end to end on the tiny shipped base in 4-bit (issue #34): pairs from a reward (resumable, never over a folder),
a DPO run with held-out preference accuracy during training and in its proof, resume, compare, chat and export; the
preference log-probabilities checked against a plain forward; the demo's path."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import cli, cli_command, cli_here

from app.run import layout, lookup, store

pytestmark = pytest.mark.slow
# A small pairs folder: enough prompts for a few DPO steps, a few held-out rows (seconds on 2 cores).
SMALL = {"samples": 4, "max_new_tokens": 24, "max_prompts": 96, "max_heldout": 24, "batch_prompts": 32}


def _cfg(**extra):
    from app.config.build import build_config
    from app.demo.dpo import demo_config
    from app.demo.recipe import base_model_path

    return build_config({**demo_config(base_model_path(), dataset="arith"), **extra})


@pytest.fixture(scope="module")
def pairs_dir(tmp_path_factory) -> Path:
    from app.synth.pairs import PairsRequest, make_pairs

    out = tmp_path_factory.mktemp("pairs") / "p"
    make_pairs(_cfg(), out, PairsRequest(**SMALL))
    return out


@pytest.fixture(scope="module")
def dpo_run(pairs_dir, tmp_path_factory) -> Path:
    from app.config.build import build_config
    from app.demo.dpo import demo_config
    from app.demo.recipe import base_model_path
    from app.train.running.session import Session

    root = tmp_path_factory.mktemp("dpo")
    cfg = build_config({**demo_config(base_model_path(), dataset=str(pairs_dir), system_prompt=None),
                        "output_dir": str(root), "run_name": "dpo"},
                       sets=["training.max_steps=6", "training.save_steps=3", "training.eval_every=3",
                             "training.learning_rate=1e-3",  # a few steps must move the margin
                             "logging_steps=1", "training.per_device_train_batch_size=8", "training.proof_rows=24"])
    return Session(cfg, progress=False).run()


def test_pairs_are_best_vs_worst_with_their_scores_and_the_held_out_rows(pairs_dir):
    from app.data.preview import inspect_detection

    manifest = json.loads((pairs_dir / ".qlora-pairs.json").read_text())
    assert manifest["complete"] and manifest["splits"]["train"]["done"] == 96
    train = [json.loads(line) for line in (pairs_dir / "train.jsonl").open()]
    test = [json.loads(line) for line in (pairs_dir / "test.jsonl").open()]
    assert len(train) == manifest["splits"]["train"]["pairs"] > 20 and len(test) == 24  # every held-out row
    for row in train:
        assert row["chosen_score"] - row["rejected_score"] >= 0.25 and row["chosen"] != row["rejected"]
        # the conversation without the system turn: the system prompt is the folder's (a run on it takes it)
        assert [m["role"] for m in row["prompt"]] == ["user"] and row["reference"].endswith(
            row["reference"].split()[-1])
    assert manifest["settings"]["system_prompt"] == _cfg().data.system_prompt
    from app.rewards import score_completion

    row = train[0]
    assert score_completion(row["chosen"], row["reference"], _cfg().reward)["total"] == pytest.approx(
        row["chosen_score"], abs=1e-3)
    # the source's held-out rows, never its training rows
    arith_test = {json.dumps(r["prompt"][-1]["content"]) for r in test}
    assert not arith_test & {json.dumps(r["prompt"][-1]["content"]) for r in train}
    det, _, _ = inspect_detection(str(pairs_dir), None, None, None, None, True)
    assert (det.format, det.prompt_field, det.chosen_field, det.rejected_field, det.reference_field) == (
        "preference", "prompt", "chosen", "rejected", "reference")


def test_pairs_resume_after_a_crash_writes_what_one_run_writes(pairs_dir, tmp_path):
    from app.errors import UserError
    from app.synth.pairs import PairsRequest, make_pairs

    req = PairsRequest(**{**SMALL, "max_prompts": 64, "batch_prompts": 16, "max_heldout": 8})
    out = tmp_path / "p"

    def crash(done, total):
        if done >= 32:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        make_pairs(_cfg(), out, req, on_progress=crash)
    with open(out / "train.jsonl", "ab") as f:  # a batch torn mid-write, after the progress record was saved
        f.write(b'{"prompt": [{"role": "user", "cont')
    with pytest.raises(UserError, match="already exists and is not an empty folder"):
        make_pairs(_cfg(), out, req)
    with pytest.raises(UserError, match="other settings"):
        make_pairs(_cfg(), out, PairsRequest(**{**SMALL, "max_prompts": 64, "batch_prompts": 16, "samples": 6}),
                   resume=True)
    make_pairs(_cfg(), out, req, resume=True)
    whole = tmp_path / "whole"
    make_pairs(_cfg(), whole, req)
    for name in ("train.jsonl", "test.jsonl"):
        assert (out / name).read_text() == (whole / name).read_text()


def test_pairs_cli_bad_input_is_one_line_and_makes_nothing(tmp_path):
    from app.demo.recipe import base_model_path

    for args, message in ((["--samples", "1"], "--samples must be at least 2"),
                          (["--model", "no/such/dir"], "no/such/dir"),
                          (["--dataset", str(tmp_path / "none.jsonl")], "none.jsonl")):
        r = cli_here("pairs", "--dataset", "arith", "--model", str(base_model_path()), "--out", str(tmp_path / "out"),
                     "--local-only", *args)
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, r.stderr
        assert not (tmp_path / "out").exists()


def test_dpo_run_learns_records_and_proves_on_held_out_pairs(dpo_run):
    from app.run.summary import run_summary

    st = store.read_status(dpo_run)
    assert st["status"] == layout.FINISHED and st["method"] == "dpo"
    recs = store.read_metrics(dpo_run)
    assert all(layout.DPO_ACCURACY in r and layout.DPO_MARGIN in r and "logps/chosen" in r for r in recs)
    points = [r for r in recs if layout.EVAL_PREF_ACCURACY in r]
    assert [r["step"] for r in points] == [3, 6] and all(0 <= r[layout.EVAL_PREF_ACCURACY] <= 1 for r in points)
    assert 0 <= st[layout.PREF_BASE_LIKELIER] <= 1 and st[layout.PREF_ROWS] > 0
    assert all(0 <= r[layout.EVAL_PREF_LIKELIER] <= 1 for r in points)
    assert all(isinstance(r[layout.EVAL_PREF_MARGIN], float) for r in points)
    cmp = json.loads((dpo_run / layout.COMPARE_JSON).read_text())
    p = cmp["preference"]
    assert p["n"] > 0 and p["beta"] == 0.1 and 0 <= p["base_likelier"] <= 1 and 0 <= p["adapter_likelier"] <= 1
    assert 0 <= p["accuracy"] <= 1
    assert cmp["summary"]["n"] == 24 and cmp["summary"]["base"]["accuracy"] is not None  # references: scored
    summary = run_summary(dpo_run)
    assert f"preference accuracy {p['accuracy']:.1%}" in summary["comparison"] and \
        f"on {p['n']} held-out pairs" in summary["comparison"] and "chosen more likely base" in summary["comparison"]
    assert "preference accuracy" in summary["heldout"]
    assert summary["pref_accuracy"] == f"{p['accuracy']:.1%}" and summary["reward"] is None  # a column of its own
    card = (dpo_run / layout.ADAPTER / "README.md").read_text()
    assert f"On {p['n']} held-out preference pairs" in card and "| adapter |" in card
    assert "- DPO on preference pairs: loss sigmoid, beta 0.1" in card
    assert (dpo_run / layout.CURVES).is_file()
    assert "ref" not in json.loads((dpo_run / layout.ADAPTER / layout.ADAPTER_CONFIG).read_text()).get(
        "base_model_name_or_path", "")


def test_preference_logprobs_match_a_plain_forward_and_a_fresh_adapter_is_the_base(dpo_run):
    import torch

    from app.ask.asking import Asker
    from app.ask.logprobs import _encode
    from app.eval.preference import compare_pairs
    from app.model.pair import find_target, load_pair

    pair = load_pair(find_target(dpo_run), True, device="cpu")
    model, tok, run_cfg = pair.model, pair.tok, pair.target.run_cfg
    rows = [json.loads(line) for line in (Path(run_cfg.data.dataset) / "test.jsonl").open()]
    items = [{"messages": r["prompt"], "plain": "", "pair": (r["chosen"], r["rejected"])} for r in rows
             if r["chosen"]][:5]
    asker = Asker(model, tok, run_cfg=run_cfg)
    batched = asker.logprobs(items)
    for item, (c, _) in zip(items, batched):
        prompt, answer = _encode(tok, item)[0]  # the chosen answer's ids
        with torch.no_grad():
            logits = model(torch.tensor([prompt + answer])).logits[0].float()
        logps = torch.log_softmax(logits[len(prompt) - 1:-1], dim=-1)
        assert c == pytest.approx(float(logps.gather(-1, torch.tensor(answer)[:, None]).sum()), abs=1e-3)
    with model.disable_adapter():  # the adapter off is the base: margins 0, the same accuracy on both sides
        pref, _ = compare_pairs(asker, items, beta=0.1, base=asker.logprobs(items))
    assert pref.margin == pytest.approx(0, abs=1e-6) and pref.base_likelier == pref.adapter_likelier
    # DPO learned the pairs it trained on: their chosen answers moved above the rejected ones, against the base
    train = [json.loads(line) for line in (Path(run_cfg.data.dataset) / "train.jsonl").open()]
    learned, _ = compare_pairs(asker, [{"messages": r["prompt"], "plain": "", "pair": (r["chosen"], r["rejected"])}
                                       for r in train], beta=0.1)
    assert learned.margin > 0 and learned.accuracy > 0.6, learned


def test_dpo_resume_extends_and_compare_chat_export_take_it(dpo_run, tmp_path):
    from app.eval.chat import Chat
    from app.eval.compare import run_comparison
    from app.export.bundle import export_run

    r = cli("train", "--resume", str(dpo_run), "--max-steps", "8", "--no-progress", timeout=600)
    assert r.returncode == 0, r.stderr
    assert "resuming from checkpoint-6 (step 6)" in " ".join(r.stdout.split())  # says which checkpoint
    st = store.read_status(dpo_run)
    assert st["status"] == layout.FINISHED and st["step"] == 8
    assert [x["step"] for x in store.read_metrics(dpo_run)] == list(range(1, 9))
    res = run_comparison(dpo_run, num_samples=6, max_new_tokens=16, local_only=True)
    assert res.preference is not None and res.summary.n == 6
    chat = Chat(dpo_run, local_only=True)
    reply = chat.reply("adapter", "Tom has 3 pens and finds 4 more. How many pens now?", max_new_tokens=16)
    assert isinstance(reply, str)
    # the run took the system prompt its pairs were sampled for: training, chat and compare all use it
    sampled = _cfg().data.system_prompt
    assert chat.default_system == sampled == res.config["system_prompt"]
    assert yaml.safe_load((dpo_run / "config.yaml").read_text())["data"]["system_prompt"] == sampled
    assert not any(r.prompt.startswith("System:") for r in res.rows)
    merged = export_run(dpo_run, tmp_path / "merged", fmt="merged")
    assert (merged.out / "config.json").is_file() and "preference pairs" in (merged.out / "README.md").read_text()


def test_the_dpo_demo_runs_pairs_then_dpo_and_records_both(tmp_path, monkeypatch):
    from rich.console import Console

    from app.demo import dpo

    # the demo's own path on a budget of seconds (its lift is measured by bench/bench_dpo.py, over seeds)
    monkeypatch.setattr(dpo, "QUICK", {"max_prompts": 64, "steps": 5, "eval": 12})
    monkeypatch.setattr(dpo, "PAIRS", dpo.PairsRequest(samples=4, max_new_tokens=24, max_heldout=12))
    console = Console(record=True, width=140)
    result = dpo.run_dpo_demo(tmp_path, quick=True, console=console, progress=False, seed=3)
    demo = result.config["demo"]
    assert demo["method"] == "dpo" and demo["stages"]["dpo"]["preference_accuracy"] is not None
    saved = json.loads((tmp_path / layout.DEMO_DPO_JSON).read_text())
    assert saved["config"]["demo"]["dpo_lift"] == pytest.approx(demo["dpo_lift"])
    text = console.export_text()
    assert "DPO's lift" in text and "chosen more likely base" in text and "pref. acc." in text
    # a line as the stage goes, the last at 64 training + 12 held-out prompts
    assert "pairs: 16 of 76 prompts" in text and "pairs: 76 of 76 prompts sampled and scored" in text
    # the demo does not note its own settings back to the user (the pairs' system prompt is the preset's)
    assert "sampled for prompts with this system prompt" not in text
    assert yaml.safe_load((tmp_path / "demo-dpo" / "config.yaml").read_text())["data"]["system_prompt"]
    again = dpo.run_dpo_demo(tmp_path, quick=True, console=Console(record=True, width=140), progress=False, seed=3)
    assert again.config["demo"]["pairs"] == demo["pairs"]  # the complete pairs folder is reused


def test_the_kto_demo_trains_on_the_same_pairs_split_in_two(tmp_path, monkeypatch):
    """`demo --method kto`: the DPO demo's pairs, each a good and a bad answer, then KTO; its own record and line
    (its lift over seeds: bench/bench_dpo.py --method kto, docs/performance.md)."""
    from rich.console import Console

    from app.demo import dpo

    monkeypatch.setattr(dpo, "QUICK", {"max_prompts": 64, "steps": 5, "eval": 12})
    monkeypatch.setattr(dpo, "PAIRS", dpo.PairsRequest(samples=4, max_new_tokens=24, max_heldout=12))
    console = Console(record=True, width=140)
    result = dpo.run_dpo_demo(tmp_path, quick=True, console=console, progress=False, seed=3, method="kto")
    demo = result.config["demo"]
    assert demo["method"] == "kto" and "kto_lift" in demo and demo["stages"]["kto"]["accuracy"] is not None
    saved = json.loads((tmp_path / layout.demo_preference_json("kto")).read_text())
    assert saved["config"]["demo"]["kto_lift"] == pytest.approx(demo["kto_lift"])
    assert not (tmp_path / layout.DEMO_DPO_JSON).exists()
    run_cfg = yaml.safe_load((tmp_path / "demo-kto" / "config.yaml").read_text())
    assert run_cfg["method"] == "kto" and run_cfg["kto"]["desirable_weight"] is not None  # balanced by the plan
    text = console.export_text()
    assert "KTO on the pairs (each pair as a good and a bad answer)" in text and "KTO's lift" in text


def test_dpo_on_two_processes_writes_one_run_from_rank_0(pairs_dir, tmp_path):
    from app.demo.recipe import base_model_path

    out = tmp_path / "runs"
    argv = [*cli_command(), "train", "--preset", "demo-dpo", "--model", str(base_model_path()),
            "--dataset", str(pairs_dir), "--max-steps", "3", "--num-processes", "2", "--output-dir", str(out),
            "--no-progress", "--set", "training.per_device_train_batch_size=4", "--set", "logging_steps=1",
            "--set", "training.proof_rows=4", "--set", "training.eval_rows=4", "--set", "data.system_prompt=null"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (d,) = [p for p in out.iterdir() if lookup.is_run_dir(p)]
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == 3 and st["world_size"] == 2
    recs = store.read_metrics(d)
    assert [x["step"] for x in recs] == [1, 2, 3]  # rank 0 alone writes: one row per step
    assert all(x.get("rewards/accuracies") is not None for x in recs)  # DPO's own logs, gathered over both ranks
    assert (d / layout.ADAPTER / "adapter_config.json").is_file()
    assert r.stdout.count(f"run {d.name}: finished") == 1


def test_orpo_the_experimental_one_trains_on_the_same_pairs(pairs_dir, tmp_path):
    """--method orpo: TRL's experimental ORPOTrainer, no reference model; a short run finishes and saves an adapter."""
    from app.demo.recipe import base_model_path

    out = tmp_path / "runs"
    r = cli("train", "--preset", "demo-dpo", "--method", "orpo", "--model", str(base_model_path()), "--dataset",
            str(pairs_dir), "--max-steps", "2", "--output-dir", str(out), "--no-progress", "--set", "dpo.loss_type=",
            "--set", "training.per_device_train_batch_size=4", "--set", "logging_steps=1", "--set",
            "training.proof_rows=4", "--set", "training.eval_rows=4", "--set", "data.system_prompt=", timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (d,) = [p for p in out.iterdir() if lookup.is_run_dir(p)]
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["method"] == "orpo" and st["step"] == 2
    recs = store.read_metrics(d)
    assert [x["step"] for x in recs] == [1, 2] and all(isinstance(x.get("loss"), float) for x in recs)
    assert (d / layout.ADAPTER / "adapter_config.json").is_file()


def test_kto_trains_from_the_pairs_folder_each_side_labelled(pairs_dir, tmp_path):
    """KTO on a pairs folder: each pair becomes its chosen answer (good) and its rejected one (bad), balanced, and
    the run's proof carries the held-out pairs' preference figures as DPO's does; the card names KTO."""
    from app.config.build import build_config
    from app.demo.dpo import demo_config
    from app.demo.recipe import base_model_path
    from app.train.running.session import Session

    cfg = build_config({**demo_config(base_model_path(), dataset=str(pairs_dir), system_prompt=None),
                        "method": "kto", "output_dir": str(tmp_path), "run_name": "kto"},
                       sets=["training.max_steps=4", "training.learning_rate=1e-3", "logging_steps=1",
                             "training.per_device_train_batch_size=8", "training.proof_rows=24"])
    run = Session(cfg, progress=False).run()
    saved = yaml.safe_load((run / layout.CONFIG).read_text())
    assert saved["method"] == "kto" and saved["kto"]["desirable_weight"] == 1.0  # as many bad answers as good
    metrics = [json.loads(line) for line in (run / layout.METRICS).open()]
    assert any("rewards/chosen_sum" in m or "kl" in m for m in metrics), metrics[0].keys()
    proof = json.loads((run / layout.COMPARE_JSON).read_text())
    assert proof["preference"]["n"] > 0 and proof["preference"]["accuracy"] is not None  # the held-out pairs
    card = cli("export", str(run), "--out", str(tmp_path / "card"), timeout=300)
    assert card.returncode == 0 and "KTO on answers labelled good or bad" in (tmp_path / "card/README.md").read_text()
