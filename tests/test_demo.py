"""`qlora-app demo` with a reduced budget runs the full path (SFT warm-up -> GRPO -> compare) in 4-bit on CPU."""

import json
import subprocess
import sys

import pytest

from app import rundir

pytestmark = pytest.mark.slow


def test_quick_demo_runs_the_whole_path_and_writes_compare_json(tmp_path):
    r = subprocess.run([sys.executable, "-m", "app.cli", "demo", "--quick", "--output-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "held-out accuracy" in r.stdout and "Traceback" not in r.stderr
    result = json.loads((tmp_path / rundir.COMPARE_JSON).read_text())
    assert set(result) >= {"rows", "summary", "config"}
    assert len(result["rows"]) == 12
    row = result["rows"][0]
    for side in ("base", "adapter"):
        assert set(row[side]) >= {"text", "reward", "components", "correct"}
        assert set(result["summary"][side]) >= {"accuracy", "mean_reward"}
    stages = result["config"]["demo"]["stages"]
    assert set(stages) == {"base", "sft_warmup", "grpo"}
    assert stages["grpo"]["accuracy"] == result["summary"]["adapter"]["accuracy"]
    assert "held-out accuracy by phase" in r.stdout
    sft, grpo = tmp_path / "demo-sft", tmp_path / "demo-grpo"
    for d in (sft, grpo):
        assert rundir.read_status(d)["status"] == rundir.FINISHED
        assert (d / rundir.CURVES).is_file() and (d / rundir.ADAPTER / "adapter_config.json").is_file()
    # GRPO really continued the warm-up adapter, in 4-bit, with the shaped reward's components logged.
    import yaml

    cfg = yaml.safe_load((grpo / rundir.CONFIG).read_text())
    assert cfg["method"] == "grpo" and cfg["lora"]["init_from"] == str(sft) and cfg["model"]["load_in_4bit"]
    assert any("rewards/reference/mean" in m for m in rundir.read_metrics(grpo))
    # A second demo keeps the first comparison instead of overwriting it.
    first = (tmp_path / rundir.COMPARE_JSON).read_text()
    r2 = subprocess.run([sys.executable, "-m", "app.cli", "demo", "--quick", "--output-dir", str(tmp_path)],
                        capture_output=True, text=True, timeout=900)
    assert r2.returncode == 0, r2.stderr[-3000:]
    kept = [p for p in tmp_path.glob("compare.*.json")]
    assert len(kept) == 1 and kept[0].read_text() == first
