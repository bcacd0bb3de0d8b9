"""bench/: ratios from interleaved repeats hold on a busy machine, or say they cannot be trusted."""

import json
import random
import sys
from pathlib import Path

import pytest
from repo_paths import ROOT

BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))
import ratio as R  # noqa: E402
import run as bench_run  # noqa: E402
from steptimer import summary  # noqa: E402


class Machine:
    """An injected timer: runs a side of `steps` optimizer steps of `cost` seconds each and records the step
    timestamps steptimer would. `run_load` slows a whole run by a random factor (another job on the machine for
    that run's duration); `stalls` stalls a few single steps (a short burst)."""

    def __init__(self, seed: int, run_load: float = 0.0, stalls: int = 0):
        self.rng, self.run_load, self.stalls, self.now = random.Random(seed), run_load, stalls, 0.0

    def side(self, cost: float, steps: int = 20):
        def run(tag):
            load = 1.0 + self.rng.uniform(0, self.run_load)
            stalled = set(self.rng.sample(range(1, steps), self.stalls))
            rec = {"steps": [], "generate": [], "reward": [], "completions": 0}
            for i in range(steps):
                self.now += cost * load * (1 + self.rng.gauss(0, 0.005)) * (4.0 if i in stalled else 1.0)
                rec["steps"].append(self.now)
            return summary(rec)["s_per_step"]
        return run


TRUE_RATIO = 1.02  # side A costs 1.02 s/step, side B 1.00


def measure(machine: Machine, reps: int = 5) -> R.Ratio:
    return R.ratio("x", R.interleave(machine.side(1.02), machine.side(1.00), reps))


def test_quiet_machine_gives_the_true_ratio_and_trusts_it():
    r = measure(Machine(0))
    assert r.trusted and abs(r.median - TRUE_RATIO) < 0.01
    assert R.as_json([r])["x"] == pytest.approx(TRUE_RATIO, abs=0.01)


def test_short_stalls_inside_a_run_move_the_mean_not_the_median():
    m = Machine(1, stalls=3)
    rec = {"steps": [], "generate": [], "reward": [], "completions": 0}
    t = 0.0
    for i in range(20):
        t += 1.0 * (4.0 if i in (5, 9, 14) else 1.0)
        rec["steps"].append(t)
    s = summary(rec)
    assert s["s_per_step"] == pytest.approx(1.0) and s["mean_s_per_step"] > 1.4
    assert measure(m).trusted and abs(measure(m).median - TRUE_RATIO) < 0.01


def test_noisy_machine_never_prints_a_wrong_number():
    """Load that comes and goes between runs (another job on the machine): one pair alone is often far off (what a
    single run printed before). Over many seeds the ratio is either flagged (null, with the reason) or, where most
    pairs happened to agree, right: never a wrong number."""
    flagged, single_wrong = 0, 0
    for seed in range(30):
        r = measure(Machine(seed, run_load=2.0))
        single_wrong += abs(r.pairs[0] - TRUE_RATIO) > 0.15
        out = R.as_json([r])
        if r.trusted:
            assert abs(out["x"] - TRUE_RATIO) <= 0.05, (seed, r.pairs)
        else:
            flagged += 1
            assert out["x"] is None and "too noisy" in out["untrusted"]["x"]
            assert out["spread"]["x"][0] < out["spread"]["x"][1]
    assert single_wrong >= 15 and flagged >= 15, (single_wrong, flagged)


def test_interleave_alternates_which_side_goes_first():
    order = []
    R.interleave(lambda t: order.append(t) or 1.0, lambda t: order.append(t) or 1.0, 4)
    assert order == ["a0", "b0", "b1", "a1", "a2", "b2", "b3", "a3"]  # each side first as often


def test_too_few_pairs_are_never_trusted():
    for n in (1, 2):
        r = R.ratio("x", [(1.0, 1.0)] * n)
        assert not r.trusted and "too few" in r.why_not()


def test_one_disturbed_pair_in_five_moves_neither_the_median_nor_the_verdict():
    r = R.ratio("x", [(1.02, 1.0), (1.03, 1.0), (1.4, 1.0), (1.01, 1.0), (1.02, 1.0)])
    assert r.trusted and r.median == pytest.approx(1.02) and r.high == pytest.approx(1.4)


def test_inverted_ratio_is_a_speedup_from_times():
    r = R.ratio("speedup", [(0.5, 1.0)] * 3, invert=True)
    assert r.median == pytest.approx(2.0) and r.trusted


def _fake_bench(tmp_path: Path, result: dict) -> Path:
    (tmp_path / "bench_trl.py").write_text(f"import json\nprint(json.dumps({result!r}))\n")
    return tmp_path


def test_strict_exits_nonzero_on_an_untrusted_ratio(tmp_path, capsys):
    noisy = R.as_json([R.ratio("sft_packing_speedup", [(1.4, 1.0), (0.39, 1.0), (1.1, 1.0)]),
                       R.ratio("overhead_vs_trl", [(1.0, 1.0), (1.01, 1.0), (1.0, 1.0)])])
    here = _fake_bench(tmp_path, noisy)
    assert bench_run.main(["--json", "--strict"], here=here) == bench_run.NOISY_EXIT
    out, err = capsys.readouterr()
    printed = json.loads(out.strip().splitlines()[-1])
    assert printed["sft_packing_speedup"] is None and printed["overhead_vs_trl"] == 1.0
    assert "not trusted: sft_packing_speedup" in err
    assert bench_run.main(["--json"], here=here) == 0  # without --strict it reports, and does not fail


def test_strict_passes_when_every_ratio_is_trusted(tmp_path, capsys):
    quiet = R.as_json([R.ratio("overhead_vs_trl", [(1.0, 1.0), (1.01, 1.0), (1.0, 1.0)])])
    assert bench_run.main(["--json", "--strict"], here=_fake_bench(tmp_path, quiet)) == 0
    assert "not trusted" not in capsys.readouterr().err


@pytest.mark.slow
def test_bench_compare_runs_on_a_tiny_budget():
    """bench_compare.py opens its pair the way `qlora-app compare` does: a smoke run on 2 prompts keeps it in step
    with app/ (it once called an old load_pair signature and nothing noticed)."""
    from conftest import cli

    r = cli("--prompts", "2", "--max-new-tokens", "4", "--batch-size", "2", "--repeats", "1",
            script=str(BENCH / "bench_compare.py"), timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "2/2 outputs identical across the two paths" in r.stdout and "| 2 prompts x 4 tokens, batch 2 |" in r.stdout


def _cpu_side(rng: random.Random, cost: float, run_load: float, steps: int = 20):
    """A run on a shared machine: a neighbour slows its wall clock by a random factor for the run; the CPU time its
    work takes moves by a few percent of that (a shared cache, a busier memory bus)."""
    def run(tag):
        load = rng.uniform(0, run_load)
        rec = {"steps": [], "cpu": [], "generate": [], "reward": [], "completions": 0}
        wall = cpu = 0.0
        for _ in range(steps):
            wall += cost * (1 + load) * (1 + rng.gauss(0, 0.005))
            cpu += cost * (1 + 0.03 * load) * (1 + rng.gauss(0, 0.005))
            rec["steps"].append(wall)
            rec["cpu"].append(cpu)
        return summary(rec)
    return run


def test_cpu_time_holds_the_ratio_where_the_wall_clock_cannot():
    trusted_wall = right_cpu = 0
    for seed in range(20):
        rng = random.Random(seed)
        both = R.interleave(_cpu_side(rng, 1.02, 1.0), _cpu_side(rng, 1.00, 1.0), 5)
        wall = R.ratio("x", [(a["s_per_step"], b["s_per_step"]) for a, b in both])
        cpu = R.ratio("x", [(a["cpu_s_per_step"], b["cpu_s_per_step"]) for a, b in both], measure="cpu")
        shown, other = R.steadier(wall, cpu)
        trusted_wall += wall.trusted
        assert (shown, other) == ((wall, cpu) if wall.trusted else (cpu, wall)) and shown.spread <= wall.spread
        right_cpu += shown.trusted and abs(shown.median - TRUE_RATIO) < 0.03
        assert R.as_json([shown])["measure"] == {"x": shown.measure}
        assert ("CPU time" if shown.measure == "cpu" else "wall clock") in shown.text()
    assert right_cpu >= 18 and trusted_wall <= 5, (right_cpu, trusted_wall)
    # a trusted wall clock is what is reported, even beside a steadier CPU time (CPU time counts work, not waiting);
    # a GPU run keeps the wall clock
    steady_cpu = R.Ratio("x", [0.9, 0.9, 0.9], measure="cpu")
    same = R.Ratio("x", [1.02, 1.021, 1.019])
    assert R.steadier(same, steady_cpu)[0] is same
    noisy = R.Ratio("x", [0.8, 1.0, 1.3])
    assert R.steadier(noisy, steady_cpu)[0] is steady_cpu
    assert R.steadier(noisy, steady_cpu, wall_only=True)[0] is noisy
    assert R.steadier(same, None) == (same, None)


def test_packing_flops_put_the_row_wide_attention_beside_the_padding(tmp_path):
    import bench_trl

    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 256, "intermediate_size": 704,
                                                      "num_hidden_layers": 4, "num_attention_heads": 8,
                                                      "num_key_value_heads": 2, "vocab_size": 4000}))
    lengths = [100, 200] * 50
    f = bench_trl.packing_flops(tmp_path, lengths, 2, 1000.0, 0)
    linear = 4 * (2 * 256 * 256 + 2 * 256 * 64 + 3 * 256 * 704) + 256 * 4000
    assert f["packed"]["linear"] == linear and f["packed"]["attention"] == 1000 * 4 * 2 * 256
    # each example's own block only: sum(L^2) / sum(L) pairs per token
    assert f["packed"]["attention_varlen"] == pytest.approx((100 ** 2 + 200 ** 2) / 300 * 4 * 2 * 256)
    assert f["padded"]["linear"] >= linear  # padding computed too (a pair of 100 and 200 pads to 400)
    assert f["predicted_speedup_varlen"] > f["predicted_speedup"]  # a varlen kernel keeps what the padding cost
    assert 0 < f["attention_share_padded"] < f["attention_share_packed"] < 1


def test_early_stopping_replayed_on_a_runs_points(tmp_path):
    import bench_early_stop as E

    rising = [(6, 0.2), (12, 0.3), (18, 0.3), (24, 0.4), (30, 0.5)]
    flat = [(6, 0.5), (12, 0.4), (18, 0.45), (24, 0.5), (30, 0.6)]
    assert E.replay(rising, 2)["early"] is False
    stop = E.replay(flat, 2)
    assert stop["early"] and stop["stopped_at"] == 18 and stop["kept_step"] == 6 and stop["kept"] - stop["last"] < 0
    for name, curve in (("grpo-quick-1", rising), ("grpo-quick-2", flat), ("built-frozen", flat)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "eval/accuracy": a}) + "\n"
                                                              for s, a in curve))
    assert E.main(["--runs", str(tmp_path), "--patience", "2,4", "--no-doc"]) == 0  # the built run is left out
    r = E.measure([tmp_path / "grpo-quick-1", tmp_path / "grpo-quick-2"], 2)
    assert (r["stopped_early"], r["of"]) == (1, 2) and r["steps_saved"] == pytest.approx(1 - 18 / 30)
    assert "| 2 | 1 of 2 |" in E.markdown({2: r}, "grpo-quick")
