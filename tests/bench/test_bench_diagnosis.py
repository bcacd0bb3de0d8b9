"""bench/bench_diagnosis.py: kept runs are read again by the diagnosis as it is now; a finding on a healthy run is
a false alarm, a built failure whose kind is not said is a miss."""

import json
import sys

from repo_paths import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import bench_diagnosis as B  # noqa: E402


def _keep(out, name, lines, meta, said=()):
    from app.config.schema import AppConfig

    d = out / name
    d.mkdir(parents=True)
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (d / "config.yaml").write_text(AppConfig.model_validate({"method": "grpo", "data": {"dataset": "arith"}}).to_yaml())
    (d / "status.json").write_text(json.dumps({"diagnosis": [{"kind": k} for k in said]}))
    (d / "bench.json").write_text(json.dumps(meta))


def test_the_table_counts_false_alarms_and_catches(tmp_path):
    def line(i, **kw):
        return {"step": 10 * i, "loss": 0.1, "grad_norm": 0.3, "adapter/update": 0.01, "reward": 1.0 + 0.01 * i,
                "reward_std": 0.5, "frac_reward_zero_std": 0.1, "rewards/reference/mean": 0.2 + 0.05 * i, **kw}

    _keep(tmp_path, "grpo-full-1", [line(i) for i in range(1, 21)], {"demo": "grpo", "quick": False, "seed": 1})
    _keep(tmp_path, "grpo-full-2", [line(i, frac_reward_zero_std=0.9, **{"rewards/reference/mean": 0.3})
                                    for i in range(1, 21)], {"demo": "grpo", "quick": False, "seed": 2})
    _keep(tmp_path, "built-constant", [line(i, reward_std=0.0, **{"rewards/reference/mean": 0.0,
                                                                  "rewards/reference/std": 0.0})
                                       for i in range(1, 21)], {"expect": "constant"})
    assert B.read_again(tmp_path / "grpo-full-1") == ([], 200, [])
    table = B.table(tmp_path)
    assert "**1 false alarms in 2 runs**" in table and "seed 2: flat_groups" in table
    assert "**1 of 1 caught**" in table and "| constant | constant | constant, unreachable |" in table


def test_a_warning_said_live_counts_only_while_it_stands(tmp_path):
    """What a run said live and withdrew (app/run/watch.py) is not a standing alarm; one that still stands is shown."""
    def line(i):
        return {"step": 10 * i, "loss": 0.1, "grad_norm": 0.3, "adapter/update": 0.01, "reward": 1.0 + 0.01 * i,
                "reward_std": 0.5, "frac_reward_zero_std": 0.1, "rewards/reference/mean": 0.2 + 0.05 * i}

    for seed, said in ((1, [{"kind": "saturated", "withdrawn": {"step": 40, "why": "..."}}]),
                       (2, [{"kind": "saturated"}])):
        d = tmp_path / f"tools-quick-{seed}"
        _keep(tmp_path, d.name, [line(i) for i in range(1, 21)], {"demo": "tools", "quick": True, "seed": seed})
        (d / "status.json").write_text(json.dumps({"diagnosis": said}))
    assert B.read_again(tmp_path / "tools-quick-1")[2] == [] and B.read_again(tmp_path / "tools-quick-2")[2] == [
        "saturated"]
    assert "(standing at the run's end, said live: seed 2: saturated)" in B.table(tmp_path)
