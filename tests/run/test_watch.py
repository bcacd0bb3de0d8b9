"""app/run/watch.py: a live run's diagnosis withdraws what the run's learning contradicts. The tools demo (seed 3)
said 'saturated' at step 20 while its held-out accuracy went 46.9% -> 50.0%, 62.5% at the end, and its proof +22
points: the warning is withdrawn when the run shows it learns, with when and why, and by the proof at the end."""

from app.run import layout
from app.run.diagnosis import Facts
from app.run.watch import Watch

TOOLS = Facts("grpo", {"length": 0.25, "format": 0.5, "reference": 2.0, "boilerplate": 1.0}, 1e-5, 4, 1.0, 256,
              "numeric")


def _line(step, reference=0.3):
    """A tools-demo-like step: format at its maximum, a flat total reward, the reference not rising."""
    return {"step": step, "loss": 0.1, "grad_norm": 0.5, layout.ADAPTER_UPDATE: 0.01, "reward": 2.0 + 0.01 * (step % 3),
            "rewards/format/mean": 1.0, "rewards/reference/mean": reference + 0.02 * (step % 2),
            "frac_reward_zero_std": 0.1, "completions/clipped_ratio": 0.02, "reward_std": 0.4}


def _run(watch, steps, held):
    said = []
    for step in steps:
        if step in held:
            said += watch.add({"step": step, layout.EVAL_ACCURACY: held[step]})
        said += watch.add(_line(step))
    return said


def test_a_warning_the_held_out_points_contradict_is_withdrawn_with_when_and_why():
    watch = Watch(TOOLS)
    said = _run(watch, range(1, 21), {10: 0.469, 20: 0.500})
    assert [d["kind"] for d in said] == ["saturated"] and said[0]["step"] == 20  # not learning yet: said
    later = _run(watch, range(21, 61), {30: 0.56, 40: 0.59, 50: 0.62, 60: 0.625})
    assert [d["kind"] for d in later] == ["saturated_withdrawn"], later
    assert "held-out accuracy rose from 46.9% to" in later[0]["message"] and "said at step 20" in later[0]["message"]
    (kept,) = watch.found  # the warning's words stay, with when and why it no longer holds
    assert kept["withdrawn"]["step"] == later[0]["step"] and "[withdrawn at step" in kept["message"]
    assert kept["message"].startswith("the reward is flat and format was at its maximum")
    assert _run(watch, range(61, 81), {}) == []  # withdrawn once, never said again
    # a run that does not learn keeps its warning: the held-out points stay where they were
    flat = Watch(TOOLS)
    assert [d["kind"] for d in _run(flat, range(1, 61), {10: 0.47, 20: 0.47, 40: 0.48, 60: 0.47})] == ["saturated"]
    assert "withdrawn" not in flat.found[0]


def test_the_proof_withdraws_what_its_lift_contradicts():
    watch = Watch(TOOLS)
    _run(watch, range(1, 41), {})
    assert [d["kind"] for d in watch.found] == ["saturated"]
    assert watch.proved(0.38, 0.40) == [] and watch.proved(None, 0.6) == []  # +2 points: not a lift
    (notice,) = watch.proved(0.38, 0.60)
    assert notice["kind"] == "saturated_withdrawn" and "its proof: held-out accuracy 38.0% -> 60.0% (+22 points)" in \
        notice["message"]
    assert watch.found[0]["withdrawn"]["why"].startswith("its proof") and watch.proved(0.38, 0.60) == []


def test_the_runs_list_names_only_the_warnings_that_hold(tmp_path):
    from app.run import newrun, store
    from app.run.summary import run_summary

    d = newrun.new_run_dir(tmp_path, "20261127-120000-grpo-arith")
    (d / layout.CONFIG).write_text("method: grpo\nmodel: {name_or_path: tiny}\n")
    said = [{"kind": "saturated", "step": 20, "message": "the reward is flat ... [withdrawn at step 40: ...]",
             "withdrawn": {"step": 40, "why": "..."}},
            {"kind": "truncated", "step": 30, "message": "cut answers"}]
    store.write_status(d, layout.FINISHED, step=60, **{layout.DIAGNOSIS: said})
    st = run_summary(d)
    assert st["notes"] == "truncated" and st["diagnosis"][0].endswith("[withdrawn at step 40: ...]")


def test_what_still_stands_is_read_in_one_place():
    """The runs list (run/summary.py) and bench/bench_diagnosis.py read the standing diagnoses through one helper."""
    from app.run.watch import standing

    said = [{"kind": "flat_groups"}, {"kind": "saturated", "withdrawn": {"step": 30, "why": "it learned"}}]
    assert [d["kind"] for d in standing(said)] == ["flat_groups"] and standing(None) == []
