"""Early stopping on the held-out curve (training.early_stop): the patience count and its threshold, its state in
the checkpoints (a resume and the out-of-memory ladder continue the count), the best point's adapter made the run's
with the last kept beside it, the proof measured on rows that did not pick it, and the words in the summary, the
card and status.json."""

import json
from types import SimpleNamespace

import pytest

from app.run import layout, store


def _best(patience=2, min_delta=0.0):
    from app.train.running.early_stop import BestPoint

    said = []
    return BestPoint(patience, min_delta, record=lambda status, **f: said.append(f)), said


def test_patience_counts_points_without_a_rise_over_the_threshold():
    best, said = _best(patience=2, min_delta=0.05)
    assert best.point(10, 0.50) is True and best.waited == 0
    assert best.point(20, 0.53) is True  # a new best, but not by more than min_delta: still waiting
    assert best.waited == 1 and best.best_step == 20 and best.stopped_at is None
    assert best.point(30, 0.60) is True and best.waited == 0  # a real rise starts the count again
    assert best.point(40, 0.58) is False and best.point(50, 0.60) is False
    assert best.stopped_at == 50 and (best.best_step, best.best_score) == (30, 0.60)
    assert said[-1][layout.EARLY_STOP] == {"stopped_at": 50, "best_step": 30, "best_score": 0.60, "patience": 2,
                                           "min_delta": 0.05, "waited": 2}
    assert {layout.BEST_STEP: 30, layout.BEST_SCORE: 0.60} in said
    off, _ = _best(patience=0)
    for step in range(1, 20):
        off.point(step, 0.1)
    assert off.stopped_at is None and off.best_step == 1  # patience 0: the best point only, never a stop


def _state(step, saved):
    return SimpleNamespace(global_step=step, stateful_callbacks=saved)


def test_the_count_comes_back_from_the_checkpoint_and_a_stop_is_taken_on_its_step():
    best, _ = _best(patience=3)
    best.point(2, 0.4)
    best.point(4, 0.3)
    saved = {"BestPoint": best.state()}  # what trainer_state.json keeps in the checkpoint
    again, _ = _best(patience=3)
    again.on_train_begin(None, _state(4, saved), None)
    assert (again.best_step, again.best_score, again.waited) == (2, 0.4, 1)
    again.point(6, 0.3)
    control = SimpleNamespace(should_training_stop=False)
    again.on_step_end(None, _state(6, {}), control)
    assert not control.should_training_stop
    again.point(8, 0.35)
    again.on_step_end(None, _state(8, {}), control)
    assert control.should_training_stop and again.stopped_at == 8
    # a run that stopped, resumed with more patience, goes on; with the same patience it stops at once
    more, _ = _best(patience=5)
    more.on_train_begin(None, _state(8, {"BestPoint": again.state()}), None)
    assert more.stopped_at is None and more.waited == 3
    same, _ = _best(patience=3)
    same.on_train_begin(None, _state(8, {"BestPoint": again.state()}), None)
    assert same.stopped_at == 8
    # a fresh start reads nothing back (the state passed is its own), and a checkpoint made without this callback
    # gets its entry, which the trainer's save indexes
    fresh, _ = _best()
    old_checkpoint: dict = {}
    fresh.on_train_begin(None, _state(4, old_checkpoint), None)
    assert fresh.best_step is None and "BestPoint" in old_checkpoint


def test_status_best_is_the_fallback_for_a_checkpoint_without_the_state():
    from app.train.running.early_stop import BestPoint

    best = BestPoint(2, restored={layout.BEST_STEP: 6, layout.BEST_SCORE: 0.7})
    assert best.point(8, 0.65) is False and best.best_step == 6 and best.waited == 1


class _Saves:
    """A model / tokenizer whose save_pretrained writes a marker (what run_adapter copies and keeps)."""

    def __init__(self, tag):
        self.tag = tag

    def save_pretrained(self, path, **kw):
        from pathlib import Path

        Path(path).mkdir(parents=True, exist_ok=True)
        name = "tokenizer_config.json" if self.tag == "tok" else "adapter_config.json"
        (Path(path) / name).write_text(json.dumps({"tag": self.tag}))


def test_the_run_adapter_is_the_best_points_and_the_last_is_kept(tmp_path):
    from app.config.schema import EarlyStopConfig
    from app.train.methods.checkpoints import save_adapter
    from app.train.running.early_stop import run_adapter

    tag = lambda d: json.loads((d / "adapter_config.json").read_text())["tag"]  # noqa: E731
    best, _ = _best(patience=2)
    best.point(4, 0.6)
    save_adapter(_Saves("step 4"), _Saves("tok"), tmp_path, layout.BEST_ADAPTER)
    best.point(6, 0.5)
    adapter, fields = run_adapter(_Saves("step 8"), _Saves("tok"), tmp_path, best, 8, EarlyStopConfig(patience=2))
    assert tag(adapter) == "step 4" and tag(tmp_path / layout.LAST_ADAPTER) == "step 8"
    assert fields[layout.ADAPTER_STEP] == 4 and "best held-out point" in fields[layout.ADAPTER_CHOICE]
    assert fields[layout.EARLY_STOP]["best_step"] == 4
    # off, or the last point is the best: the last step's adapter, nothing beside it
    other = tmp_path / "other"
    adapter, fields = run_adapter(_Saves("step 8"), _Saves("tok"), other, best, 8, EarlyStopConfig())
    assert tag(adapter) == "step 8" and not (other / layout.LAST_ADAPTER).exists()
    assert fields == {layout.ADAPTER_STEP: 8, layout.ADAPTER_CHOICE: "the last step's"}
    best.point(8, 0.9)
    adapter, fields = run_adapter(_Saves("step 8"), _Saves("tok"), other, best, 8, EarlyStopConfig(patience=2))
    assert tag(adapter) == "step 8" and fields[layout.ADAPTER_STEP] == 8


def test_early_stop_needs_held_out_points_and_keeps_the_best():
    from app.config.build import build_config
    from app.train.planning.plan import keeps_best

    said = []
    off = build_config({}, None, ["training.early_stop.patience=3", "training.eval_every=0"])
    assert keeps_best(off, said.append) == {"training.early_stop.patience": 0}
    assert said.pop() == ("early stopping is off for this run: training.eval_every is 0, so there is no held-out "
                          "curve to stop on")
    cfg = build_config({}, None, ["training.early_stop.patience=3"])
    assert keeps_best(cfg, said.append) == {"training.keep_best": True} and "makes it the run's adapter" in said[0]
    assert keeps_best(build_config({}, None, []), said.append) == {}


def test_words_in_the_summary():
    from app.run.summary import chosen_line, early_stop_text

    st = {"step": 40, layout.ADAPTER_STEP: 20,
          layout.EARLY_STOP: {"stopped_at": 40, "best_step": 20, "patience": 2, "waited": 2}}
    assert early_stop_text(st) == ("stopped at step 40: the best held-out point was step 20; the run's adapter is "
                                   "step 20's, the last step's is in adapter-last/")
    ran = {"step": 60, layout.ADAPTER_STEP: 60,
           layout.EARLY_STOP: {"stopped_at": None, "best_step": 60, "patience": 3, "waited": 0}}
    assert early_stop_text(ran).startswith("not stopped early (0 of 3 held-out points without a rise by its last "
                                           "step): the best held-out point was step 60")
    assert early_stop_text({}) is None and chosen_line({}) is None
    assert chosen_line({"chosen_on": 32}).startswith("the 32 held-out rows the adapter was chosen on")


# ------------------------------------------------------------------------------------------ real runs (slow)

FLAT = ["training.learning_rate=1e-12",  # the adapter cannot move: every held-out point scores the same
        "training.eval_every=1", "training.eval_rows=8", "logging_steps=1", "runtime.threads=2", "training.seed=5",
        "training.per_device_train_batch_size=8", "grpo.num_generations=4"]


def _run(out, name, sets, resume=None):
    from app.config.build import build_config
    from app.demo.recipe import base_model_path, grpo_preset
    from app.train.running.session import Session

    cfg = build_config({**grpo_preset(base_model_path()), "output_dir": str(out), "run_name": name},
                       sets=FLAT + sets)
    return Session(cfg, progress=False, resume=resume).run()


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    out = tmp_path_factory.mktemp("early")
    return _run(out, "flat", ["training.max_steps=8", "training.early_stop.patience=2", "training.proof_rows=12"])


@pytest.mark.slow
def test_a_flat_curve_stops_and_the_best_adapter_is_the_runs(stopped):
    from safetensors.torch import load_file

    from app.export.card import write_card
    from app.run.summary import run_summary

    d = stopped
    st = store.read_status(d)
    assert st["status"] == layout.FINISHED and st["step"] == 3  # points 1 (best), 2, 3: two without a rise
    assert st[layout.EARLY_STOP]["stopped_at"] == 3 and st[layout.EARLY_STOP]["best_step"] == 1
    assert st[layout.ADAPTER_STEP] == 1
    assert [r["step"] for r in store.read_metrics(d) if layout.EVAL_ACCURACY in r] == [1, 2, 3]
    weights = lambda name: load_file(d / name / "adapter_model.safetensors")  # noqa: E731
    best, run, last = weights(layout.BEST_ADAPTER), weights(layout.ADAPTER), weights(layout.LAST_ADAPTER)
    assert all((best[k] == run[k]).all() for k in best)  # the run's adapter is the best point's, byte for byte
    assert any(not (last[k] == run[k]).all() for k in last)  # and the last one, kept beside it, is another
    config = yaml_config(d)
    assert config["training"]["keep_best"] is True  # the plan keeps the best as the run trains, and says why
    assert "makes it the run's adapter" in (d / layout.CONFIG).read_text()
    # the proof measures the run's adapter on held-out rows that did not pick it
    proof = json.loads((d / layout.COMPARE_JSON).read_text())
    assert proof["config"]["chosen_on"] == 8 and proof["config"]["adapter"] == str(d / layout.ADAPTER)
    words = "stopped at step 3: the best held-out point was step 1; the run's adapter is step 1's"
    assert run_summary(d)["early_stop"].startswith(words)
    assert run_summary(d)["comparison"].endswith("on 12 held-out rows (not the 8 the adapter was chosen on)")
    assert f"early stopping: {words}" in (d / layout.LOG).read_text()
    card = write_card(d / layout.ADAPTER, d, _cfg(d), "adapter", "base", {}, adapter_dir=d / layout.ADAPTER)
    text = card.read_text()
    assert f"- early stopping: {words}" in text and "The 8 held-out rows the adapter was chosen on" in text


def yaml_config(d):
    import yaml

    return yaml.safe_load((d / layout.CONFIG).read_text())


def _cfg(d):
    from app.config.build import load_yaml_file, validate

    return validate(load_yaml_file(d / layout.CONFIG))


@pytest.mark.slow
def test_resume_and_the_oom_ladder_keep_the_count(tmp_path, monkeypatch):
    # a run that took its 3 steps with 2 points without a rise, resumed for more: one more point stops it (with the
    # count lost, it would take three)
    d = _run(tmp_path, "resumed", ["training.max_steps=3", "training.early_stop.patience=3", "training.save_steps=1",
                                   "training.proof_rows=0"])
    assert store.read_status(d)[layout.EARLY_STOP]["waited"] == 2
    _run(tmp_path, "resumed", ["training.max_steps=8", "training.early_stop.patience=3", "training.save_steps=1",
                               "training.proof_rows=0"], resume=d)
    st = store.read_status(d)
    assert st["step"] == 4 and st[layout.EARLY_STOP]["stopped_at"] == 4 and st[layout.ADAPTER_STEP] == 1
    # out of memory at step 4: the ladder trains again from checkpoint 2, whose count (1) goes on: 3, 4 -> stop at 4
    monkeypatch.setenv("QLORA_APP_FAULT", "oom@4")
    d = _run(tmp_path, "ladder", ["training.max_steps=8", "training.early_stop.patience=3", "training.save_steps=2",
                                  "training.proof_rows=0"])
    st = store.read_status(d)
    assert st["oom_changes"] and st["oom_changes"][0]["from_step"] == 2
    assert st["step"] == 4 and st[layout.EARLY_STOP]["stopped_at"] == 4 and st[layout.EARLY_STOP]["best_step"] == 1


@pytest.mark.slow
def test_stop_still_stops_a_run_with_early_stopping_and_resume_finishes_it(tmp_path):
    import signal
    import subprocess
    import time

    from conftest import cli, cli_command

    run = tmp_path / "stopped"
    sets = [s for x in FLAT + ["training.max_steps=40", "training.save_steps=1", "training.proof_rows=0"]
            for s in ("--set", x)]
    p = subprocess.Popen([*cli_command(), "train", "--preset", "demo-grpo", "--run-dir", str(run), "--no-progress",
                          "--set", "training.early_stop.patience=30", *sets],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 300
    while time.time() < deadline and len([r for r in store.read_metrics(run) if layout.EVAL_ACCURACY in r]) < 2:
        time.sleep(0.3)
    p.send_signal(signal.SIGTERM)  # Stop in the UI
    p.wait(timeout=300)
    st = store.read_status(run)
    assert p.returncode == 130 and st["status"] == layout.INTERRUPTED and st["step"] < 40, st
    assert st[layout.EARLY_STOP]["stopped_at"] is None and st[layout.EARLY_STOP]["waited"] >= 1
    # resumed with less patience: the count from the checkpoint goes on and the run stops early, finished
    r = cli("train", "--resume", str(run), "--no-progress", "--set", "training.early_stop.patience=3", timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    st = store.read_status(run)
    assert st["status"] == layout.FINISHED and st[layout.EARLY_STOP]["stopped_at"] is not None
    assert st["step"] < 40 and st[layout.ADAPTER_STEP] == st[layout.EARLY_STOP]["best_step"] == 1
