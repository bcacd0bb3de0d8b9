"""The run plan: decisions made once, and the run directory records what ran (config.yaml, status.json)."""

import json

import pytest
import yaml
from conftest import cli

from app.config.build import build_config, validate
from app.run import layout, store
from app.train.planning.adjustments import adjustment_lines
from app.train.planning.plan import make_plan


def _arith(*sets, method="grpo", tmp_path=None):
    """A request on the shipped 256-position model and the built-in data."""
    layer = {"method": method, "model": {"name_or_path": "arith-base"}, "data": {"dataset": "arith"}}
    if tmp_path is not None:
        layer["output_dir"] = str(tmp_path)
    return build_config(layer, None, ["runtime.device=cpu", *sets])


def _rows(cfg):
    from app.data import build_splits

    train, _, det = build_splits(cfg.data, cfg.training.seed, local_only=True)
    return train, det


def test_the_plan_adjusts_once_and_records_why():
    cfg = _arith("grpo.max_completion_length=256")
    said = []
    plan = make_plan(cfg, *_rows(cfg), note=said.append)
    assert plan.context == 256 and plan.cfg.grpo.max_completion_length == 128
    [adj] = [a for a in plan.adjustments if a.key == "grpo.max_completion_length"]
    assert (adj.was, adj.now) == ("256", "128") and "fills the model's whole 256-token context" in adj.reason
    assert any("using 128 so prompts fit" in line for line in said)
    text = plan.config_yaml()
    assert "# grpo.max_completion_length: 256 -> 128 (" in text
    assert yaml.safe_load(text)["grpo"]["max_completion_length"] == 128
    assert plan.status_fields()["adjustments"] == adjustment_lines(plan.adjustments, brief=True)
    # config.yaml re-plans to the same run: nothing left to adjust, the same fast paths and estimate
    again = make_plan(validate(yaml.safe_load(text)), *_rows(cfg))
    assert again.adjustments == () and again.cfg == plan.cfg
    assert again.fast == plan.fast and again.estimate["total_gb"] == plan.estimate["total_gb"]


def test_sft_max_length_is_cut_to_the_context_in_the_plan():
    cfg = _arith("training.max_length=1024", method="sft")
    plan = make_plan(cfg, *_rows(cfg))
    assert plan.cfg.training.max_length == 256
    # and the reference match its proof scores with, recorded for every method (app/train/planning/reward_checks.py)
    assert [(a.key, a.was, a.now) for a in plan.adjustments] == [("reward.reference_match", "auto", "numeric"),
                                                                 ("training.max_length", "1024", "256")]


def test_a_plan_without_data_or_model_files_says_so_and_adjusts_nothing():
    cfg = build_config({"data": {"dataset": "gsm8k"}})  # the default hub model is not on this machine
    said = []
    plan = make_plan(cfg, note=said.append, offline=True)
    assert plan.context is None and plan.adjustments == () and not plan.lengths_known
    assert any("context was not checked" in line for line in said)


def _dry_run(*args, cwd):
    r = cli("train", *args, "--dry-run", timeout=300, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.slow
def test_a_run_records_what_it_trained_and_its_config_replans_the_same(tmp_path):
    """The halved completion length is in config.yaml (with its reason) and status.json; `train --config
    RUN/config.yaml --dry-run` shows that plan again, with nothing left to adjust and the same fast paths."""
    from app.train.running.session import Session

    sets = ["grpo.max_completion_length=256", "training.max_steps=1", "training.save_steps=1",
            "per_device_train_batch_size=4", "gradient_accumulation_steps=1", "grpo.num_generations=4",
            "data.max_samples=16", "gradient_checkpointing=false"]
    d = Session(_arith(*sets, tmp_path=tmp_path / "runs"), progress=False).run()
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED
    recorded = yaml.safe_load((d / layout.CONFIG).read_text())
    assert recorded["grpo"]["max_completion_length"] == 128
    assert (d / layout.CONFIG).read_text().startswith("# qlora-app adjusted these values")
    assert any(a.startswith("grpo.max_completion_length: 256 -> 128") for a in st["adjustments"])
    assert "adjusted grpo.max_completion_length: 256 -> 128" in (d / layout.LOG).read_text()

    # a resume that extends the run rewrites config.yaml with the new max_steps and keeps the first start's reasons
    from app.config.build import load_yaml_file

    extended = validate(load_yaml_file(d / layout.CONFIG))
    extended.training.max_steps = 2
    Session(extended, resume=d, progress=False).run()
    text = (d / layout.CONFIG).read_text()
    assert "# grpo.max_completion_length: 256 -> 128 (" in text and yaml.safe_load(text)["training"]["max_steps"] == 2
    recorded = yaml.safe_load(text)

    replay = _dry_run("--config", str(d / layout.CONFIG), cwd=tmp_path)
    assert yaml.safe_load(replay.stdout) == recorded
    assert "adjusted" not in replay.stderr
    assert f"fast paths: {st['fast_paths']}" in " ".join(replay.stderr.split())
    first = _dry_run("--dataset", "arith", "--model", "arith-base", *[a for s in sets for a in ("--set", s)],
                     "--set", "runtime.device=cpu", cwd=tmp_path)
    assert "adjusted grpo.max_completion_length: 256 -> 128" in " ".join(first.stderr.split())
    assert yaml.safe_load(first.stdout[first.stdout.index("method:"):])["grpo"]["max_completion_length"] == 128


@pytest.mark.slow
@pytest.mark.parametrize("fails", [False, True])
def test_status_fast_paths_follow_the_sampler_that_sampled(tiny_model, math_jsonl, tmp_path, monkeypatch, fails):
    """The plan says the merged copy samples; when it fails mid-run the run samples with TRL's own path, and
    status.json's fast paths say so, with the step and the reason."""
    from app.train.methods import sampler
    from app.train.running.session import Session

    if fails:
        def broken(self, *a, **k):
            raise RuntimeError("a test failure of the merged copy")
        monkeypatch.setattr(sampler.MergedSampler, "generate", broken)
    cfg = build_config({"model": {"name_or_path": str(tiny_model)}, "data": {"dataset": str(math_jsonl)},
                        "output_dir": str(tmp_path)}, None,
                       ["training.max_steps=2", "per_device_train_batch_size=4", "gradient_accumulation_steps=1",
                        "num_generations=4", "max_completion_length=8", "grpo.sampler=merged",
                        "gradient_checkpointing=false", "runtime.device=cpu"])
    d = Session(cfg, progress=False).run()
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED
    if fails:
        assert "merged" not in st["fast_paths"]
        [change] = st["fast_path_changes"]
        assert change["fast_paths"] == st["fast_paths"] and change["reason"] == "RuntimeError at step 0"
    else:
        assert st["fast_paths"].startswith("sampling from a merged dense copy") and "fast_path_changes" not in st
    assert json.loads((d / layout.STATUS).read_text())["fast_paths"] == st["fast_paths"]
