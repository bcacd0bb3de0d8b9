"""Held-out evaluation during training: points every eval_every steps and at the end, on the step's own
metrics.jsonl line, through compare's scoring; training itself unchanged by it (same rewards and losses as with
eval_every=0); the best step recorded, keep_best's adapter usable by compare and export."""

import json

import pytest

from app.run import layout, store

pytestmark = pytest.mark.slow


def _run(tmp_path, name, sets):
    from app.config.build import build_config
    from app.demo.recipe import base_model_path, grpo_preset
    from app.train.running.session import Session

    # runtime.threads fixed: with the thread count following the machine's load (as it does on a busy 16-core GPU
    # machine), two runs sum their matmuls in different orders, and "training untouched" compares them exactly.
    cfg = build_config({**grpo_preset(base_model_path()), "output_dir": str(tmp_path), "run_name": name},
                       sets=["training.max_steps=6", "training.seed=5", "logging_steps=1", "runtime.threads=2", *sets])
    return Session(cfg, progress=False).run()


def test_points_best_step_keep_best_and_training_untouched(tmp_path):
    from app.eval.compare import run_comparison
    from app.export.bundle import export_run
    from app.run.summary import run_summary

    # a proof of 12 rows to keep apart from (the plain run, which only trains, makes none: it ends after training)
    d = _run(tmp_path, "eval", ["training.eval_every=2", "training.eval_rows=12", "training.keep_best=true",
                                "training.proof_rows=12"])
    plain = _run(tmp_path, "plain", ["training.eval_every=0", "training.proof_rows=0"])
    recs = store.read_metrics(d)
    points = [r for r in recs if layout.EVAL_ACCURACY in r]
    assert [r["step"] for r in points] == [2, 4, 6]
    assert [r["step"] for r in recs] == [1, 2, 3, 4, 5, 6]  # still one line per logged step
    from app.eval.uncertainty import share_interval

    low, high = layout.interval_keys(layout.EVAL_ACCURACY)
    for r in points:
        assert 0 <= r[layout.EVAL_ACCURACY] <= 1 and r[layout.EVAL_REWARD] is not None
        # each point carries its 95% interval on the 12 rows it judged (what the curve draws through it)
        assert (r[low], r[high]) == pytest.approx(share_interval(round(r[layout.EVAL_ACCURACY] * 12), 12))
        assert {"eval/length", "eval/format", "eval/reference", "eval/boilerplate"} <= set(r)
    assert not [r for r in store.read_metrics(plain) if layout.EVAL_ACCURACY in r]
    log_text = (d / layout.LOG).read_text()  # the log the UI tails reads as plain lines, not Python dicts
    assert "fields: prompt question, reference answer" in log_text and "{'" not in log_text
    # the evaluations change nothing in training: it samples and updates exactly as without them
    train = lambda rs: [(r["step"], r.get("reward"), r.get("loss")) for r in rs if "reward" in r]  # noqa: E731
    assert train(recs) == train(store.read_metrics(plain)) and train(recs)
    st = store.read_status(d)
    best = max(points, key=lambda r: (r[layout.EVAL_ACCURACY], -r["step"]))
    assert st[layout.BEST_STEP] == best["step"] and st[layout.BEST_SCORE] == best[layout.EVAL_ACCURACY]
    assert run_summary(d)["heldout"].startswith(f"accuracy {points[0][layout.EVAL_ACCURACY]:.1%} at step 2 -> ")
    at_best = next(r for r in points if r["step"] == st[layout.BEST_STEP])
    assert f"at step {st[layout.BEST_STEP]} (95% interval {at_best[low]:.0%}-{at_best[high]:.0%})" in \
        run_summary(d)["heldout"]
    # the best adapter is kept beside the last one, and compare / export take it as they take the run's
    best_dir = d / layout.BEST_ADAPTER
    assert (best_dir / layout.ADAPTER_CONFIG).is_file()
    proof = (d / layout.COMPARE_JSON).read_text()  # the run's proof, of its final adapter
    # the last point (at the last step) and the proof score the same adapter on the same 12 rows: the same figures
    # (they read one numerics path: app.model.load.one_cpu_path; #59 had 19.4% vs 29.0%)
    summary = json.loads(proof)["summary"]["adapter"]
    assert points[-1]["step"] == 6 and summary["n_judged"] == 12
    assert points[-1][layout.EVAL_ACCURACY] == pytest.approx(summary["accuracy"])
    assert points[-1][layout.EVAL_REWARD] == pytest.approx(summary["mean_reward"], abs=1e-6)
    res = run_comparison(best_dir, num_samples=4, max_new_tokens=8, local_only=True)
    assert res.config["adapter"] == str(best_dir) and res.config["system_prompt"]  # the run's config was found
    assert (d / layout.COMPARE_JSON).read_text() == proof  # a compare of the best adapter is kept apart
    assert len(list((d / layout.COMPARISONS).glob("compare-*.json"))) == 1
    card = (export_run(best_dir, tmp_path / "best-export").out / "README.md").read_text()
    assert "How it was trained" in card


def test_auto_every_gives_about_ten_points():
    from app.train.running.heldout_eval import eval_every

    assert eval_every(None, 200) == 20 and eval_every(None, 60) == 6 and eval_every(None, 5) == 1
    assert eval_every(0, 200) == 0 and eval_every(7, 200) == 7 and eval_every(None, -1) == 0
    # automatic points fall on logged steps, so they share the step's metrics line
    assert eval_every(None, 200, 10) == 20 and eval_every(None, 50, 10) == 10 and eval_every(None, 300, 7) == 28


def test_points_on_steps_without_a_line_get_their_own_in_order(tmp_path):
    from app.train.running.callbacks import RunDirCallback, StopFlag

    cb = RunDirCallback(tmp_path, StopFlag())
    cb.pending.update({3: {"eval/accuracy": 0.5}, 4: {"eval/accuracy": 0.75}})
    cb.flush_pending(before=4)
    cb.pending[7] = {"eval/accuracy": 1.0}
    cb.flush_pending()
    assert store.read_metrics(tmp_path) == [{"step": 3, "eval/accuracy": 0.5}, {"step": 4, "eval/accuracy": 0.75},
                                             {"step": 7, "eval/accuracy": 1.0}]


def test_the_demo_curve_rises(quick_demo):
    """The quick demo's own evaluation during training (the session's shared quick demo, seed 7): >= 5 points, the
    last >= 10 points above the first."""
    r, out = quick_demo
    assert r.returncode == 0, r.stderr[-3000:]
    acc = [m[layout.EVAL_ACCURACY] for m in store.read_metrics(out / "demo-grpo") if layout.EVAL_ACCURACY in m]
    assert len(acc) >= 5 and acc[-1] >= acc[0] + 0.10, acc
    assert json.loads((out / "demo-grpo" / layout.STATUS).read_text())[layout.BEST_STEP] > 0
