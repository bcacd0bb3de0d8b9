"""Why a run's reward is flat (app/run/diagnosis.py): each finding on the curves that show it, silence on healthy
ones, said once; and real runs built to show each kind (a constant reward + truncation + an unreachable reference,
a gamed component, a frozen learning rate), read back in status.json, train.log, the terminal, `runs`, the UI's run
view and `qlora-app doctor RUN`."""

import json
import os
from pathlib import Path

import pytest
from repo_paths import ROOT
from conftest import cli as _cli

from app.run import layout, store
from app.run.diagnosis import WINDOW, Facts, diagnose
from app.run.watch import Watch

GRPO = Facts("grpo", {"length": 0.25, "format": 0.5, "reference": 2.0, "boilerplate": 1.0}, 1e-5, 4, 1.0, 256,
             "numeric")


def _steps(n, **series):
    """n logged steps; each keyword is a value or a function of the step index."""
    out = []
    for i in range(n):
        rec = {"step": i + 1, "loss": 0.1, "grad_norm": 0.5, layout.ADAPTER_UPDATE: 0.01}
        for k, v in series.items():
            rec[k.replace("__", "/")] = v(i) if callable(v) else v
        out.append(rec)
    return out


HEALTHY = dict(reward=lambda i: 0.5 + 0.01 * i, frac_reward_zero_std=0.1, completions__clipped_ratio=0.02,
               reward_std=0.4, rewards__format__mean=lambda i: 0.5 + 0.005 * i,
               rewards__reference__mean=lambda i: 0.2 + 0.01 * i)
# A run whose task component does not rise: the checks that say "cannot learn" are not contradicted.
STEADY = {**HEALTHY, "rewards__reference__mean": lambda i: 0.3 + 0.02 * (i % 2)}


def _kinds(records, facts=GRPO):
    return [f.kind for f in diagnose(records, facts)]


def test_a_healthy_run_is_silent_and_short_runs_say_nothing():
    assert _kinds(_steps(60, **HEALTHY)) == []
    assert _kinds(_steps(WINDOW - 1, frac_reward_zero_std=1.0, reward=0.0)) == []  # too few steps to tell


def test_each_signal_raises_its_own_finding():
    flat = _steps(30, **{**STEADY, "frac_reward_zero_std": 0.62})
    (f,) = diagnose(flat, GRPO)
    assert f.kind == "flat_groups" and f.step == 30 and f.numbers == {"frac_reward_zero_std": 0.62}
    assert f.message.startswith("62% of GRPO's groups had identical rewards over steps 11-30")
    assert "grpo.num_generations (now 4)" in f.message and "grpo.temperature (now 1)" in f.message

    (f,) = diagnose(_steps(30, **{**HEALTHY, "completions__clipped_ratio": 0.4}), GRPO)
    assert f.kind == "truncated" and "40% of completions hit max_completion_length (256 tokens)" in f.message

    (f,) = diagnose(_steps(30, **{**HEALTHY, "rewards__reference__mean": 0.0}), GRPO)
    assert f.kind == "unreachable" and "reward.reference_match=numeric" in f.message and "overlap" in f.message

    gamed = _steps(40, **{**STEADY, "rewards__format__mean": lambda i: min(1.0, 0.3 + 0.05 * i),
                          "rewards__reference__mean": 0.05})
    (f,) = diagnose(gamed, GRPO)
    assert f.kind == "gamed" and "format rose from" in f.message and "reference stayed at 0.05" in f.message
    assert "raise reward.weights.reference or lower reward.weights.format" in f.message

    held_out = _steps(40, **STEADY) + [{"step": 40, layout.EVAL_ACCURACY: a} for a in (0.30, 0.31, 0.29, 0.30)]
    (f,) = diagnose(sorted(held_out, key=lambda r: r["step"]), GRPO)
    assert f.kind == "gamed" and "held-out accuracy stayed at 30% -> 30%" in f.message

    saturated = _steps(30, **{**STEADY, "reward": 1.0, "rewards__format__mean": 1.0})
    (f,) = diagnose(saturated, GRPO)
    assert f.kind == "saturated" and "format was at its maximum (1)" in f.message

    frozen = _steps(30, **{**STEADY, "adapter/update": 3e-8})
    frozen = [{**r, layout.ADAPTER_UPDATE: 3e-8} for r in frozen]
    (f,) = diagnose(frozen, Facts("dpo", {}, 1e-9))
    assert f.kind == "frozen" and "training.learning_rate 1e-09" in f.message and "6.0e-07" in f.message
    no_gradient = [{**r, "grad_norm": 0.0} for r in frozen]  # standing still for want of a gradient is not the LR
    assert _kinds(no_gradient, Facts("dpo", {}, 1e-9)) == []


def test_grpo_figures_logged_only_on_sampling_steps_still_count():
    """TRL logs its sampling figures on the steps that sample (every 4th, say): the window has a few, enough."""
    recs = _steps(24, **STEADY)
    for i, r in enumerate(recs):
        r["frac_reward_zero_std"] = 0.9 if i % 4 == 0 else None
    assert _kinds(recs) == ["flat_groups"]


def test_a_live_run_says_each_finding_once_and_a_resume_keeps_them():
    watch = Watch(GRPO)
    said = [x for r in _steps(80, **{**STEADY, "frac_reward_zero_std": 0.9}) for x in watch.add(r)]
    assert [d["kind"] for d in said] == ["flat_groups"] and said[0]["step"] == WINDOW
    again = Watch(GRPO, said=watch.found)
    assert [x for r in _steps(40, **{**STEADY, "frac_reward_zero_std": 0.9}) for x in again.add(r)] == []


def _every(n, records):
    """The lines a run logging every n-th step writes: each the mean of its steps, as TRL averages them."""
    out = []
    for k in range(0, len(records), n):
        chunk = records[k:k + n]
        keys = {key for r in chunk for key in r}
        line = {"step": chunk[-1]["step"]}
        for key in keys - {"step"}:
            vals = [r[key] for r in chunk if isinstance(r.get(key), (int, float))]
            if vals:
                line[key] = sum(vals) / len(vals) if key != layout.ADAPTER_UPDATE else sum(vals)
        out.append(line)
    return out


@pytest.mark.parametrize("every", [1, 5, 10])
def test_checks_count_steps_not_logged_lines(every):
    """A run logging every 10th step is read at step 20, as one logging every step: a line stands for its steps."""
    lines = _every(every, _steps(60, **{**STEADY, "frac_reward_zero_std": 0.8}))
    watch = Watch(GRPO)
    said = [x for r in lines for x in watch.add(r)]
    assert [d["kind"] for d in said] == ["flat_groups"] and said[0]["step"] == WINDOW
    assert _kinds(lines[:WINDOW // every]) == ["flat_groups"] and _kinds(lines[:WINDOW // every - 1]) == []
    # figures kept per line, not averaged over steps, still read: the adapter's movement is a sum
    frozen = _every(every, [{**r, layout.ADAPTER_UPDATE: 1e-7} for r in _steps(40, **STEADY)])
    assert "frozen" in _kinds(frozen, Facts("dpo", {}, 1e-9)) if every < 10 else True
    assert _kinds(_every(every, _steps(60, **HEALTHY))) == []


def test_a_reward_that_scores_every_completion_the_same_is_named_not_blamed_on_sampling():
    """Every completion of every batch scored the same: the reward's fault, with its name; raising
    num_generations or the temperature is not the advice."""
    same = _steps(30, **{**STEADY, "reward": 1.0, "reward_std": 0.0, "frac_reward_zero_std": 1.0,
                         "rewards__always_one__mean": 1.0, "rewards__always_one__std": 0.0,
                         "rewards__format__std": 0.3})
    (f,) = diagnose(same, Facts("grpo", {"always_one": 1.0, "format": 0.0}, 1e-5, 8, 1.0, 64))
    assert f.kind == "constant" and "always_one never varied" in f.message and "format" not in f.numbers["constant"]
    assert "num_generations" not in f.message.split("cannot help")[1] and "qlora-app score" in f.message


def test_a_learning_run_contradicts_the_checks_that_say_it_cannot_learn():
    """The tools demo's case: format at its maximum on every step and a flat total reward, while the reference
    rose 0.25 -> 0.42 (or held-out accuracy rose): nothing is said; the same curves without the rise are."""
    def tools_like(reference):
        return _steps(40, **{**STEADY, "reward": lambda i: 2.0 + 0.01 * (i % 3), "rewards__format__mean": 1.0,
                             "rewards__reference__mean": reference, "frac_reward_zero_std": 0.7})
    assert _kinds(tools_like(lambda i: 0.25 + 0.17 * i / 39)) == []
    assert set(_kinds(tools_like(lambda i: 0.3 + 0.02 * (i % 2)))) == {"saturated", "flat_groups"}
    held = [{"step": 20 * k, layout.EVAL_ACCURACY: a} for k, a in ((1, 0.469), (2, 0.625))]
    rising = sorted(tools_like(lambda i: 0.3 + 0.02 * (i % 2)) + held, key=lambda r: r["step"])
    assert _kinds(rising) == []
    lucky = [{"step": 8 * k, layout.EVAL_ACCURACY: a} for k, a in enumerate((0.30, 0.30, 0.34, 0.30, 0.30), 1)]
    noisy = sorted(tools_like(lambda i: 0.3 + 0.02 * (i % 2)) + lucky, key=lambda r: r["step"])
    assert "saturated" in _kinds(noisy)  # one lucky evaluation is not learning
    # a check a learning run does not contradict still speaks: cut answers
    assert _kinds(_steps(30, **{**HEALTHY, "completions__clipped_ratio": 0.5})) == ["truncated"]


def test_a_failing_judge_is_said_as_soon_as_it_has_judged_enough():
    """Judgements are counted per line (judge/calls, judge/failures); a judge failing half or more is said at once,
    before any window; one failure in eight is not."""
    def judged(fails):
        return [{**r, "judge/calls": 8, "judge/failures": fails} for r in _steps(30, **STEADY)]
    watch = Watch(GRPO)
    said = [x for r in judged(8) for x in watch.add(r)]
    assert [d["kind"] for d in said] == ["judge_failing"] and said[0]["step"] == 2
    assert "failed 16 of its 16 judgements by step 2" in said[0]["message"] and "reward.judge" in said[0]["message"]
    assert "judge_failing" not in _kinds(judged(1))
    # a run's last counts may come on a line of their own (no loss): still counted
    tail = _steps(1, **STEADY) + [{"step": 1, "judge/calls": 20, "judge/failures": 20}]
    assert _kinds(tail) == ["judge_failing"]


# ------------------------------------------------------------------------------------------------ real runs


def _arith_rows(tmp_path: Path, reference) -> Path:
    """The built-in arith problems with the reference the test needs."""
    from app.data.loading import resolve_dataset

    rows = resolve_dataset("arith", None, True)["train"].select(range(400))
    p = tmp_path / "arith.jsonl"
    p.write_text("".join(json.dumps({"question": r["question"], "answer": reference(r)}) + "\n" for r in rows))
    return p


def _demo_run(tmp_path, name: str, sets: list[str]) -> Path:
    from app.config.build import build_config
    from app.config.presets import load_preset
    from app.train.running.session import Session

    cfg = build_config({**load_preset("demo-grpo"), "output_dir": str(tmp_path), "run_name": name},
                       sets=["logging_steps=1", "save_steps=1000", "training.eval_every=0", "training.proof_rows=8",
                             "per_device_train_batch_size=16", "num_generations=4", *sets])
    return Session(cfg, progress=False).run()


@pytest.mark.slow
def test_identical_rewards_truncation_and_an_unreachable_reference_are_said(tmp_path):
    """References the model can never write, completions cut at 6 tokens, the reference alone paying: every group
    flat, every completion clipped, the reference at 0."""
    data = _arith_rows(tmp_path, lambda r: "zzz")
    d = _demo_run(tmp_path, "hard", [f"data.dataset={data}", "max_steps=22", "max_completion_length=6",
                                     "reward.weights.length=0", "reward.weights.format=0",
                                     "reward.weights.boilerplate=0"])
    st = store.read_status(d)
    found = {x["kind"]: x for x in st[layout.DIAGNOSIS]}
    # every completion scored the same: the reward's fault (constant), not the sampling's (flat_groups)
    assert set(found) == {"constant", "truncated", "unreachable"}, found
    assert "reference never varied" in found["constant"]["message"]
    assert found["truncated"]["message"].startswith("100% of completions hit max_completion_length (6 tokens)")
    assert "reference stayed at 0.00" in found["unreachable"]["message"]
    log = (d / layout.LOG).read_text()
    assert all(x["message"][:60] in log for x in found.values())  # train.log (and the terminal) said each once
    assert log.count(found["truncated"]["message"][:60]) == 1

    from app.run.summary import run_summary
    from app.ui.run_view import status_markdown

    s = run_summary(d)
    assert set(s["notes"].split(", ")) == {"constant", "truncated", "unreachable"} and len(s["diagnosis"]) == 3
    page = status_markdown(s)  # the UI's run view, beside the curves
    assert page.count("class='diagnosis'") == 3 and "what the run's curves say" in page
    assert "`" not in page.split("class='diagnosis'", 1)[1]  # code in HTML is <code>, not literal backticks
    from app.ui.run_view import runs_rows

    (row,) = [r for r in runs_rows(tmp_path) if r[0].endswith("hard")]
    assert "unreachable" in row[9]  # the Runs tab's notes column


@pytest.mark.slow
def test_a_gamed_component_is_said(tmp_path):
    """The regex component pays for a '+' (the arith base picks + or - about evenly) while the reference can never be
    met: GRPO learns the '+', the reward rises, the task does not."""
    data = _arith_rows(tmp_path, lambda r: "zzz")
    d = _demo_run(tmp_path, "gamed", [f"data.dataset={data}", "max_steps=40", "learning_rate=1e-3",
                                      "reward.regex=\\+", "reward.weights.length=0", "reward.weights.format=0",
                                      "reward.weights.boilerplate=0"])
    found = {x["kind"]: x for x in store.read_status(d)[layout.DIAGNOSIS]}
    assert "gamed" in found, found
    assert "regex rose from" in found["gamed"]["message"] and "reference stayed at 0.00" in found["gamed"]["message"]
    assert found["gamed"]["numbers"]["regex"] >= 0.9


@pytest.mark.slow
def test_a_frozen_learning_rate_is_said_everywhere_a_run_is_read(tmp_path):
    """The demo's recipe at learning rate 1e-9, from the CLI: the terminal, `runs list`, `runs show` and
    `qlora-app doctor RUN` say it; the same recipe at its own rate says nothing."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT), "COLUMNS": "250"}

    def cli(*args):
        return _cli(*args, timeout=600, env=env, cwd=tmp_path)

    common = ["--preset", "demo-grpo", "--max-steps", "22", "--output-dir", str(tmp_path), "--no-progress",
              "--set", "logging_steps=1", "--set", "training.eval_every=0", "--set", "training.proof_rows=8",
              "--set", "per_device_train_batch_size=16", "--set", "num_generations=4"]
    r = cli("train", *common, "--set", "run_name=frozen", "--set", "learning_rate=1e-9")
    assert r.returncode == 0, r.stderr[-2000:]
    said = r.stdout + r.stderr
    assert "the adapter's weights moved" in said and "(training.learning_rate 1e-09)" in said
    d = tmp_path / "frozen"
    assert [x["kind"] for x in store.read_status(d)[layout.DIAGNOSIS]] == ["frozen"]
    assert "raise training.learning_rate" in r.stdout  # the summary at the end of the run

    listed = cli("runs", "list", str(tmp_path))
    assert "notes" in listed.stdout and "frozen" in listed.stdout
    doctor = cli("doctor", str(d))
    assert doctor.returncode == 0 and "frozen:" in doctor.stdout and "adapter/update (sum)" in doctor.stdout

    ok = _demo_run(tmp_path, "healthy", ["max_steps=22"])  # the same recipe, its own learning rate: silent
    assert not store.read_status(ok).get(layout.DIAGNOSIS)
    calm = cli("doctor", str(ok))
    assert "no sign of a flat reward" in calm.stdout, calm.stdout


def test_answers_that_grow_while_the_task_stays_flat_are_named_as_paid_length():
    """length_drift: the completions' mean length up by half or more while every task component stays flat; silent
    when the task rises with it, when the length holds, for a method that samples no reward, and withdrawn by a
    proof that shows a lift (the watch's rule)."""
    growing = {**STEADY, "completions__mean_length": lambda i: 40 + 2 * i}  # 40 -> 98 tokens over 30 steps
    (f,) = diagnose(_steps(30, **growing), GRPO)
    assert f.kind == "length_drift" and f.numbers["mean_length_first"] < 60 < f.numbers["mean_length_last"]
    assert "the reward pays length" in f.message and "reward.weights.length" in f.message
    assert "grpo.max_completion_length (now 256)" in f.message and "reward.weights.reference" in f.message
    assert _kinds(_steps(30, **{**growing, "rewards__reference__mean": lambda i: 0.2 + 0.02 * i})) == []
    assert _kinds(_steps(30, **{**STEADY, "completions__mean_length": lambda i: 40 + 0.3 * i})) == []  # +22%
    assert _kinds(_steps(30, **growing), Facts("dpo", {}, 1e-5)) == []
    watch = Watch(GRPO)
    for line in _steps(30, **growing):
        watch.add(line)
    assert [d["kind"] for d in watch.found] == ["length_drift"]
    assert watch.proved(0.2, 0.4) and watch.found[0].get("withdrawn")
