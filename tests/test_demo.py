"""`qlora-app demo` with a reduced budget runs the full path (SFT warm-up -> GRPO -> compare) in 4-bit on CPU."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app import rundir

pytestmark = pytest.mark.slow


def test_quick_demo_runs_the_whole_path_and_writes_compare_json(tmp_path):
    r = subprocess.run([sys.executable, "-m", "app.cli", "demo", "--quick", "--output-dir", str(tmp_path),
                        "--seed", "7"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "held-out accuracy" in r.stdout and "Traceback" not in r.stderr
    result = json.loads((tmp_path / rundir.COMPARE_JSON).read_text())
    assert set(result) >= {"rows", "summary", "config"}
    assert len(result["rows"]) == 12
    row = result["rows"][0]
    for side in ("base", "adapter"):
        assert set(row[side]) >= {"text", "reward", "components", "correct"}
        assert set(result["summary"][side]) >= {"accuracy", "mean_reward"}
    demo = result["config"]["demo"]
    stages = demo["stages"]
    assert list(stages) == ["base", "grpo"]  # ordered: base first, grpo last
    assert stages["grpo"]["accuracy"] == result["summary"]["adapter"]["accuracy"]
    assert stages["base"]["accuracy"] == result["summary"]["base"]["accuracy"]
    assert demo["grpo_lift"] == pytest.approx(stages["grpo"]["accuracy"] - stages["base"]["accuracy"])
    grpo_rewards = [m["reward"] for m in rundir.read_metrics(Path(demo["grpo_run"])) if "reward" in m]
    # one generation batch serves both steps (auto generation batch): TRL logs a reward where it sampled
    assert 1 <= len(grpo_rewards) <= 2 and demo["grpo_reward_quarters"]["first"] == pytest.approx(grpo_rewards[0])
    assert "GRPO's own lift" in r.stdout
    assert "held-out accuracy by phase" in r.stdout
    grpo = tmp_path / "demo-grpo"
    assert Path(demo["grpo_run"]) == grpo
    assert rundir.read_status(grpo)["status"] == rundir.FINISHED
    assert (grpo / rundir.CURVES).is_file() and (grpo / rundir.ADAPTER / "adapter_config.json").is_file()
    # GRPO from the shipped base, in 4-bit, with the shaped reward's components logged; no SFT phase.
    import yaml

    cfg = yaml.safe_load((grpo / rundir.CONFIG).read_text())
    assert cfg["method"] == "grpo" and cfg["lora"]["init_from"] is None and cfg["model"]["load_in_4bit"]
    assert cfg["training"]["seed"] == 7 and demo["seed"] == 7  # --seed reaches training
    assert any("rewards/reference/mean" in m for m in rundir.read_metrics(grpo))
    assert not (tmp_path / "demo-sft").exists()
    # A second demo keeps the first comparison instead of overwriting it.
    first = (tmp_path / rundir.COMPARE_JSON).read_text()
    r2 = subprocess.run([sys.executable, "-m", "app.cli", "demo", "--quick", "--output-dir", str(tmp_path)],
                        capture_output=True, text=True, timeout=900)
    assert r2.returncode == 0, r2.stderr[-3000:]
    kept = [p for p in tmp_path.glob("compare.*.json")]
    assert len(kept) == 1 and kept[0].read_text() == first
