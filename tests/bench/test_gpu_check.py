"""bench/gpu_check.py, the one command a lent GPU runs, in its quick mode on this CPU: it builds the shapes, runs the
table's configs through `qlora-app train`, and reports estimate vs measured and the generation split (its mixture
of experts: test_gpu_check_moe.py, a module of its own so the two share the suite's workers)."""

import json
import subprocess
import sys

import pytest
from repo_paths import ROOT


@pytest.mark.slow
def test_quick_mode_runs_on_a_cpu_and_reports_every_part(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--out", str(tmp_path), "--quick",
                        "--skip", "demo,suite,trl,moe"], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["mode"] == "quick" and set(result["table"]) == {"tiny:sft", "tiny:grpo", "tiny:grpo:tiny"}
    for row in result["table"].values():
        assert row["status"] == "finished" and row["estimate_torch_peak_gb"] > 0 and row["measured_gib"] > 0
        assert row["device"] == "cpu (peak RSS)" and row["steady_s_per_step"] > 0
    assert result["table"]["tiny:grpo"]["sampler"] == "merged"
    judged = result["table"]["tiny:grpo:tiny"]  # GRPO with a local judge model: its weights in the estimate
    assert judged["method"] == "grpo + judge tiny"
    assert judged["estimate_torch_peak_gb"] > result["table"]["tiny:grpo"]["estimate_torch_peak_gb"]
    g = result["generation"]
    assert g["sequences"] == 4 and g["refresh_ms"] > 0 and g["prefill_ms"] > 0 and g["decode_ms_per_step"] > 0
    md = (tmp_path / "gpu_check.md").read_text()
    assert "MoE run" not in md
    assert "| tiny | grpo |" in md and "(CPU: RSS, not comparable)" in md and "decode" in md and md in r.stdout
