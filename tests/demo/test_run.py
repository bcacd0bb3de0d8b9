"""`qlora-app demo` with a reduced budget runs the full path (GRPO from the 4-bit base -> compare) on CPU."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import cli

from app.run import layout, store

pytestmark = pytest.mark.slow


def test_quick_demo_runs_the_whole_path_and_writes_compare_json(quick_demo):
    r, tmp_path = quick_demo
    assert r.returncode == 0, r.stderr[-3000:]
    assert "held-out accuracy" in r.stdout and "Traceback" not in r.stderr
    result = json.loads((tmp_path / layout.COMPARE_JSON).read_text())
    assert set(result) >= {"rows", "summary", "config"}
    assert len(result["rows"]) == 100
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
    grpo_rewards = [m["reward"] for m in store.read_metrics(Path(demo["grpo_run"])) if "reward" in m]
    # 60 steps, a generation batch serving two of them: TRL logs a reward where it sampled, about 30 points
    assert len(grpo_rewards) >= 20
    q = len(grpo_rewards) // 4
    assert demo["grpo_reward_quarters"]["first"] == pytest.approx(sum(grpo_rewards[:q]) / q)
    # --quick is a real short run: it shows GRPO's lift (measured over seeds in docs/performance.md), not +0.0
    assert demo["grpo_lift"] >= 0.10
    assert "GRPO's own lift" in r.stdout
    assert "held-out accuracy by phase" in r.stdout
    # one story: the sampled reward is said to be noisy, and every held-out figure says how many rows it is of
    said = " ".join(r.stdout.split())  # as read, whatever the width rich wrapped it to
    assert "(sampled, noisy)" in said
    rows = store.read_status(Path(demo["grpo_run"]))[layout.EVAL_ROWS]
    assert f"{rows} rows each" in said and "base vs adapter on 100 held-out problems" in said
    grpo = tmp_path / "demo-grpo"
    assert Path(demo["grpo_run"]) == grpo
    assert store.read_status(grpo)["status"] == layout.FINISHED
    assert (grpo / layout.CURVES).is_file() and (grpo / layout.ADAPTER / "adapter_config.json").is_file()
    # GRPO from the shipped base, in 4-bit, with the shaped reward's components logged; no SFT phase.
    import yaml

    cfg = yaml.safe_load((grpo / layout.CONFIG).read_text())
    assert cfg["method"] == "grpo" and cfg["lora"]["init_from"] is None and cfg["model"]["load_in_4bit"]
    assert cfg["training"]["seed"] == 7 and demo["seed"] == 7  # --seed reaches training
    assert any("rewards/reference/mean" in m for m in store.read_metrics(grpo))
    # a healthy run: the diagnosis of a flat reward reads its 60 logged steps and says nothing (3 more seeds, full
    # and --quick, in docs/performance.md)
    assert len([m for m in store.read_metrics(grpo) if "loss" in m]) == 60
    assert not store.read_status(grpo).get(layout.DIAGNOSIS)
    assert not (tmp_path / "demo-sft").exists()
    assert all(not (store.read_status(d) or {}).get(layout.DIAGNOSIS) for d in tmp_path.iterdir() if d.is_dir())


def test_a_second_demo_keeps_the_first_comparison(quick_demo, tmp_path, monkeypatch):
    """A second demo into the same folder moves the first compare.json aside instead of overwriting it (the second
    demo on a budget of seconds: what is checked is the file, not the lift)."""
    from app.demo import run as demo

    r, first_out = quick_demo
    assert r.returncode == 0, r.stderr[-3000:]
    first = (first_out / layout.COMPARE_JSON).read_text()
    (tmp_path / layout.COMPARE_JSON).write_text(first)  # the shared demo's folder is read, never written
    monkeypatch.setattr(demo, "QUICK", {"grpo_steps": 2, "eval": 4})
    again = demo.run_demo(tmp_path, quick=True, progress=False, seed=3, sets=["training.eval_every=0"])
    kept = list(tmp_path.glob("compare.*.json"))
    assert len(kept) == 1 and kept[0].read_text() == first
    now = json.loads((tmp_path / layout.COMPARE_JSON).read_text())
    assert now["config"]["demo"]["seed"] == 3 and len(now["rows"]) == 4 == again.summary.n


def test_ctrl_c_stops_the_whole_demo_with_exit_130(tmp_path):
    """Ctrl-C during training: the run is kept as interrupted (resumable), no comparison runs, no lift is claimed,
    and the exit code says it was stopped (it used to go on to compare and exit 0)."""
    import os
    import signal
    import time

    code = ("import sys, app.demo.run as r; r.QUICK.update(grpo_steps=400); from app.cli.main import main; "
            f"sys.argv = ['qlora-app', 'demo', '--quick', '--output-dir', {str(tmp_path)!r}]; main()")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    grpo = tmp_path / "demo-grpo"
    deadline = time.time() + 300
    while not any(m.get("step", 0) >= 2 for m in store.read_metrics(grpo)):
        assert p.poll() is None and time.time() < deadline, p.stderr.read()[-3000:] if p.poll() is not None else ""
        time.sleep(0.2)
    os.kill(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 130, (out[-2000:], err[-2000:])
    assert "Traceback" not in err and "GRPO's own lift" not in out and "interrupted" in out
    st = store.read_status(grpo)
    assert st["status"] == layout.INTERRUPTED and 2 <= st["step"] < 400
    assert not (tmp_path / layout.COMPARE_JSON).exists()


@pytest.mark.e2e  # a demo of its own
def test_quick_tools_demo_teaches_the_calculator(tmp_path):
    """`demo --tools --quick`: GRPO with the calculator from the shipped tool-calling base; the proof answers with the
    tool (base and adapter), its rows carry the calls, and the lift is real (3 seeds, full and quick, in
    docs/performance.md)."""
    r = cli("demo", "--tools", "--quick", "--output-dir", str(tmp_path), "--seed", "5", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    said = " ".join(r.stdout.split())
    assert "tool calls succeeded" in said and "GRPO's own lift" in said
    result = json.loads((tmp_path / layout.DEMO_TOOLS_JSON).read_text())
    demo = result["config"]["demo"]
    assert demo["tools"] and demo["stages"]["grpo"]["accuracy"] - demo["stages"]["base"]["accuracy"] >= 0.15
    assert demo["stages"]["grpo"]["tool_success"] is not None and result["config"]["tools"] == ["calculator"]
    row = result["rows"][0]
    assert row["adapter"]["turns"][0]["tool_calls"][0]["function"]["name"] == "calculator"
    run = Path(demo["grpo_run"])
    assert run.name == "demo-tools" and store.read_status(run)[layout.TOOL_COUNTS]["calculator"]["calls"] > 0
    assert not (tmp_path / layout.COMPARE_JSON).exists()  # the GRPO demo's result is its own file


@pytest.mark.parametrize("args,words", [
    (["--method", "orpo"], "--method orpo has no demo; pass grpo, dpo, kto or distill (or --images for sft)"),
    (["--method", "kto", "--tools"], "--tools is a GRPO demo"),
    (["--images", "--method", "kto"], "--images is an SFT demo"),
])
def test_a_demo_that_does_not_exist_is_one_line(args, words, tmp_path):
    from app.demo.choose import run_chosen_demo
    from app.errors import UserError

    method = args[args.index("--method") + 1]
    with pytest.raises(UserError, match=re.escape(words)):
        run_chosen_demo(tmp_path, quick=True, console=None, seed=1, method=method, tools="--tools" in args,
                        images="--images" in args)
    assert not any(tmp_path.iterdir())  # nothing made
