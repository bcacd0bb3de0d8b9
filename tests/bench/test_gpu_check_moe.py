"""bench/gpu_check.py's mixture-of-experts rows in its quick mode on this CPU: a CPU-sized MoE trained with its
experts quantized as they load at two depths, each run's estimate beside its measured peak, one layer's cost
extrapolated to the shape's published depth beside the plan of the whole model."""

import json
import subprocess
import sys

import pytest
from repo_paths import ROOT


@pytest.mark.slow
def test_the_moe_rows_extrapolate_two_depths_to_the_published_one(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_check.py"), "--out", str(tmp_path), "--quick",
                        "--skip", "demo,suite,trl,generation", "--runs", "none"], capture_output=True, text=True,
                       timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads((tmp_path / "gpu_check.json").read_text())
    assert result["table"] == {} and "generation" not in result
    moe = result["moe"]  # NF4 experts at depths 1 and 2; the plan of the published depth beside them
    assert set(moe["runs"]) == {"moe-tiny@1:sft:experts-nf4", "moe-tiny@2:sft:experts-nf4"}
    for row in moe["runs"].values():
        assert row["status"] == "finished" and row["estimate_torch_peak_gb"] > 0 and row["measured_gib"] > 0
    assert moe["layers"] == 2 and moe["plan_torch_peak_gb"] > 0 and moe["measured_gib_extrapolated"] > 0
    md = (tmp_path / "gpu_check.md").read_text()
    assert "| moe-tiny@2:sft:experts-nf4 |" in md and "at the published 2 layers" in md and md in r.stdout
