"""bench/bench_outside_teacher.py: its table from kept rows (the seeds' figures beside the in-memory teacher's, the
target counts for lift, time and the training process's peak, the off-policy row, the student-only SFT)."""

import sys

from repo_paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import bench_outside_teacher as B  # noqa: E402


def _row(seed, lift, seconds, peak, speed=3000.0):
    return {"seed": seed, "base": 0.2, "student": 0.2 + lift, "teacher": 1.0, "lift": lift, "seconds": seconds,
            "train_s": seconds - 15, "peak_gb": peak, "tokens_per_s": speed, "probe_tokens_per_s": 1000.0}


def test_the_table_counts_the_targets_and_sets_the_gguf_teacher_beside_the_one_in_memory():
    rows = {"gguf": [_row(1, 0.4, 50, 0.8), _row(2, 0.15, 50, 0.8), _row(3, 0.3, 200, 1.3)],
            "memory": [_row(1, 0.42, 45, 0.85, None), _row(2, 0.4, 45, 0.85, None)],
            "gguf_off": [_row(1, 0.5, 60, 0.8, None)],
            "sft": {"peak_gb": 0.9, "seconds": 40.0}}
    t = B.table(rows)
    # +15 misses the lift and 200 s the time; 1.3 GB is 0.4 above the student-only 0.9
    assert "(+20 points within 3 minutes) on 1 of 3 seeds" in t
    assert "within 0.3 GB of the student-only SFT on 2 of 3" in t
    assert "| 1 | 20.0% | 60.0% | 62.0% | 100.0% | +40.0 | +42.0 | 50 | 0.80 | 0.85 | 3,000 |" in t
    assert "| 3 | 20.0% | 50.0% | - | 100.0% | +30.0 | - | 200 | 1.30 | - | 3,000 |" in t
    assert ("| the same GGUF, off-policy (its answers written once, top-20 each) | +50.0 ± 0.0 | 60 ± 0 | "
            "0.80 ± 0.00 | - |") in t
    assert "The plan's probe (8 prompts, before the student loads) measured 1000 ± 0 tokens/s" in t
    assert "| none: SFT of the student alone (same data, batch, steps) | - | 40 | 0.90 | - |" in t
