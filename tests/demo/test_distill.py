"""`qlora-app demo --method distill` and distillation runs through the real engine on CPU: the on-policy demo lifts
the student toward a larger teacher and its proof shows base, student and teacher on the same rows; a run
teaches as a teacher (its adapter on); the off-policy variant trains on the teacher's written answers."""

import json
from pathlib import Path

import pytest
from conftest import _demo, cli, cli_here

from app.run import layout, store

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def distill_demo(tmp_path_factory):
    """`qlora-app demo --method distill --quick --seed 13` (a seed the preset was not tuned on), once a session."""
    return _demo(tmp_path_factory, "distill-demo", "--method", "distill", "--quick", "--seed", "13")


@pytest.mark.e2e  # a demo of its own
def test_the_distillation_demo_lifts_the_student_toward_its_teacher(distill_demo):
    r, out = distill_demo
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads((out / layout.DEMO_DISTILL_JSON).read_text())
    s, demo = result["summary"], result["config"]["demo"]
    assert len(result["rows"]) == 100 and all(set(row) >= {"base", "adapter", "teacher"} for row in result["rows"])
    # the teacher knows the task and the student learns most of its lead (docs/performance.md has 5 seeds)
    assert s["teacher"]["accuracy"] >= s["base"]["accuracy"] + 0.3
    assert demo["lift"] >= 0.12 and s["closed"] == pytest.approx(
        demo["lift"] / (s["teacher"]["accuracy"] - s["base"]["accuracy"]))
    assert list(demo["stages"]) == ["base", "distill", "teacher"] and demo["sampled_tokens"] > 0
    run = Path(demo["run"])
    st = store.read_status(run)
    assert st["status"] == layout.FINISHED and st["method"] == "distill"
    assert st[layout.TEACHER]["teacher"].endswith("arith-teacher") and st[layout.TEACHER]["4bit"]
    # the divergence from the teacher falls: the student's greedy answers to the same held-out rows, scored by the
    # teacher token by token at every held-out point (the training loss is on fresh samples each step: noisy)
    recs = store.read_metrics(run)
    div = [m[layout.EVAL_DIVERGENCE] for m in recs if m.get(layout.EVAL_DIVERGENCE) is not None]
    acc = [m[layout.EVAL_ACCURACY] for m in recs if m.get(layout.EVAL_DIVERGENCE) is not None]
    assert len(div) >= 5 and div[-1] < 0.85 * div[0] and acc[-1] > acc[0]
    assert len([m for m in recs if "loss" in m]) == 40  # --quick: 40 steps, each logged
    said = " ".join(r.stdout.split())
    assert "held-out KL" in said and "of the teacher's lead closed" in said and "teacher (4-bit)" in said
    assert "teacher" in said.split("metric")[-1]  # the summary table's teacher column


def test_a_run_teaches_with_its_adapter_on(quick_demo, tmp_path):
    """The GRPO demo's run as the teacher of a fresh adapter on the same base: its adapter is loaded (its answers
    are not the base's), and the plan says the two share a base."""
    r, demo_out = quick_demo
    assert r.returncode == 0
    teacher = demo_out / "demo-grpo"
    p = cli("train", "--method", "distill", "--teacher", teacher, "--model", "arith-base", "--dataset", "arith",
            "--local-only", "--max-steps", "2", "--output-dir", tmp_path, "--no-progress",
            "--set", "distill.max_completion_length=40", "--set", "per_device_train_batch_size=8",
            "--set", "training.proof_rows=24", "--set", "training.eval_every=0",
            # the teacher asked with another system prompt than the student: its own prompt before the same answer
            "--set", "distill.teacher_system_prompt=Answer with the number.", cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    run = next(d for d in tmp_path.iterdir() if (d / layout.CONFIG).is_file())
    st = store.read_status(run)
    assert st[layout.TEACHER]["adapter"].endswith("adapter") and st[layout.TEACHER]["shares_base"]
    assert st[layout.TEACHER]["system_prompt"] == "Answer with the number."
    assert "the teacher is asked with its system prompt 'Answer with the number.'" in (run / layout.LOG).read_text()
    proof = json.loads((run / layout.COMPARE_JSON).read_text())
    assert proof["config"]["teacher"] == f"run {teacher} (asked with its system prompt 'Answer with the number.')"
    differs = [row for row in proof["rows"] if row["teacher"]["text"] != row["base"]["text"]]
    assert differs, "the teacher answered as the base: its adapter was not on"
    assert "shares the student's base" in (run / layout.LOG).read_text()


def test_off_policy_distillation_trains_on_the_teachers_answers(tmp_path):
    p = cli("train", "--preset", "demo-distill", "--set", "distill.mode=off_policy", "--max-steps", "3",
            "--output-dir", tmp_path, "--no-progress", "--set", "per_device_train_batch_size=8",
            "--set", "training.proof_rows=16", "--set", "training.eval_every=0", cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    run = next(d for d in tmp_path.iterdir() if (d / layout.CONFIG).is_file())
    log = (run / layout.LOG).read_text()
    assert "the teacher answers 24 training prompts once (off-policy distillation)" in log
    # the plan says what runs (it said on-policy words before)
    assert "off-policy: the teacher answers each training prompt once, greedily" in log
    assert "the teacher scores every token" not in log
    proof = json.loads((run / layout.COMPARE_JSON).read_text())
    assert proof["summary"]["teacher"]["accuracy"] is not None and len(proof["rows"]) == 16
    assert "completions/mean_length" not in json.dumps(store.read_metrics(run))  # SFT: nothing sampled in training


@pytest.mark.e2e  # a demo of its own
def test_the_gguf_teacher_demo_lifts_the_student_from_outside_the_training_process(tmp_path_factory):
    """`qlora-app demo --method distill --gguf-teacher --quick --seed 17` (a seed no setting was tried on): the
    teacher as a Q4_K_M GGUF in llama.cpp's child process, its top-20 the signal; the proof's third column is the
    GGUF's (docs/performance.md has 5 seeds of the full demo)."""
    r, out = _demo(tmp_path_factory, "distill-gguf-demo", "--method", "distill", "--gguf-teacher", "--quick",
                   "--seed", "17")
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads((out / layout.DEMO_DISTILL_JSON).read_text())
    s, demo = result["summary"], result["config"]["demo"]
    assert result["config"]["teacher"].endswith("arith-teacher-q4_k_m.gguf")
    assert s["teacher"]["accuracy"] >= s["base"]["accuracy"] + 0.3 and demo["lift"] >= 0.2
    st = store.read_status(Path(demo["run"]))
    assert st[layout.TEACHER]["where"]["kind"] == "gguf" and st[layout.TEACHER]["where"]["tokens_per_s"] > 0
    said = " ".join(r.stdout.split())
    assert "teacher (Q4_K_M GGUF, llama.cpp)" in said and "of the teacher's lead closed" in said


def test_gguf_teacher_is_the_distillation_demos_alone():
    r = cli_here("demo", "--gguf-teacher", "--quick")
    assert r.returncode == 2 and "--gguf-teacher is the distillation demo's" in " ".join(r.stdout.split() +
                                                                                         r.stderr.split())
