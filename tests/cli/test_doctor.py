"""`qlora-app doctor RUN` (app/cli/doctor.py) reads a run's steps as its diagnosis counts them: a run logging every
10th step is read from its 20th step, and a failing judge is said before any window."""

import io
import json

from rich.console import Console

from app.config.schema import AppConfig
from app.run import layout


def _run(tmp_path, lines, method="grpo"):
    d = tmp_path / "run"
    d.mkdir()
    extra = {"distill": {"teacher": "arith-teacher"}} if method == "distill" else {}
    (d / layout.CONFIG).write_text(AppConfig.model_validate({"method": method, "data": {"dataset": "arith"},
                                                             **extra}).to_yaml())
    (d / layout.METRICS).write_text("".join(json.dumps(r) + "\n" for r in lines))
    return d


def _doctor(d):
    from app.cli.doctor import report_run

    out = io.StringIO()
    n = report_run(d, Console(file=out, width=200))
    return n, " ".join(out.getvalue().split())  # a table title may wrap


def test_a_run_logging_every_tenth_step_is_read_by_its_steps(tmp_path):
    lines = [{"step": 10 * i, "loss": 0.1, "grad_norm": 0.3, "reward": 1.0, "reward_std": 0.4,
              "frac_reward_zero_std": 0.8, "rewards/reference/mean": 0.3} for i in range(1, 7)]
    n, said = _doctor(_run(tmp_path, lines))
    assert "60 training steps in 6 logged lines" in said and "the last 20 training steps (steps 50-60)" in said
    assert n == 1 and "flat_groups" in said and "frac_reward_zero_std" in said


def test_a_failing_judge_is_said_before_any_window(tmp_path):
    lines = [{"step": 1, "loss": 0.1, "judge/calls": 32, "judge/failures": 32}]
    n, said = _doctor(_run(tmp_path, lines))
    assert n == 1 and "judge_failing" in said and "too few" not in said
    (tmp_path / "quiet").mkdir()
    n, said = _doctor(_run(tmp_path / "quiet", [{"step": 1, "loss": 0.1}]))
    assert n == 0 and "too few training steps to read (1; the checks need 20)" in said


def test_a_run_without_a_reward_is_not_said_to_have_a_healthy_one(tmp_path):
    """A distillation (or SFT) run samples no reward: doctor says there is none to read, not "no sign of a flat
    reward"; a GRPO run with healthy signals still gets that line."""
    lines = [{"step": i, "loss": 0.3 - i / 100, "grad_norm": 0.3} for i in range(1, 31)]
    n, said = _doctor(_run(tmp_path, lines, "distill"))
    assert n == 0 and "no reward to read: a DISTILL run" in said and "no sign of a flat reward" not in said
    (tmp_path / "grpo").mkdir()
    healthy = [{"step": i, "loss": 0.1, "grad_norm": 0.3, "reward": i / 30, "reward_std": 0.4,
                "frac_reward_zero_std": 0.1} for i in range(1, 31)]
    n, said = _doctor(_run(tmp_path / "grpo", healthy))
    assert "no sign of a flat reward" in said
