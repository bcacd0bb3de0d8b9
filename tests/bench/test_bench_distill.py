"""bench/bench_distill.py: its table from kept rows (the seeds' figures, the target count, the three methods, what
GRPO needed to get as far) and its count of sampled tokens."""

import sys

from repo_paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import bench_distill as B  # noqa: E402

from app.demo.distill import sampled_tokens  # noqa: E402


def _on(seed, lift, seconds):
    return {"seed": seed, "base": 0.2, "student": 0.2 + lift, "teacher": 1.0, "lift": lift, "closed": lift / 0.8,
            "n": 200, "seconds": seconds, "train_s": seconds - 5, "tokens": 1000, "steps": 60, "last_eval": 0.6}


def test_the_table_counts_the_seeds_that_meet_the_target_and_what_grpo_needed():
    rows = {"on_policy": [_on(1, 0.4, 40), _on(2, 0.15, 40), _on(3, 0.3, 200)],
            "off_policy": [_on(1, 0.5, 20)],
            "grpo": [{"seed": 1, "lift": 0.3, "train_s": 90, "tokens": 7000, "steps": 200, "reached_step": 100,
                      "reached_s": 40, "reached_tokens": 3000},
                     {"seed": 2, "lift": 0.3, "train_s": 90, "tokens": 7000, "steps": 200, "reached_step": None,
                      "reached_s": None, "reached_tokens": None}]}
    t = B.table(rows, quick=False)
    assert "on 1 of 3 seeds" in t  # +15 misses the lift, 200 s the time
    assert "| 1 | 20.0% | 60.0% | 100.0% | +40.0 | 50% | 40 | 35 | 1000 |" in t
    assert "| GRPO (the GRPO demo, whole run) | +30.0 ± 0.0 | 90 ± 0 | 7000 ± 0 | 200 ± 0 |" in t
    assert "on 1 of 2 seeds, after 40 ± 0 s of training and 3000 ± 0 sampled tokens" in t


def test_sampled_tokens_count_every_step_a_logged_line_stands_for():
    recs = [{"step": 1, "completions/mean_length": 10.0}, {"step": 3, "completions/mean_length": 12.0},
            {"step": 3, "eval/accuracy": 0.5}]
    assert sampled_tokens(recs, per_step=16) == 10 * 16 + 12 * 16 * 2
