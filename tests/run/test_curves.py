"""Curves people can read (app/run/curves.py): one figure for curves.png and the UI."""

import random

import pytest

from app.config.reward_components import NAMES
from app.run import curves, layout, newrun, store


def component_key(name: str) -> str:  # how TRL names a reward function's logged mean
    return f"{layout.COMPONENT_PREFIX}{name}{layout.COMPONENT_SUFFIX}"

def _grpo_records(n: int, every: int = 1, eval_at=(), seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(1, n + 1, every):
        r = {"step": i, "loss": rng.uniform(-0.02, 0.02), "reward": 0.7 + 0.3 * (i / n) + rng.uniform(-0.15, 0.15),
             layout.PEAK_RESERVED: 0.5 + 0.001 * i, layout.PEAK_DEVICE: "cpu (peak RSS)"}
        for name in ("format", "length", "reference"):
            r[component_key(name)] = rng.uniform(0, 1)
        if i in eval_at:
            r[layout.EVAL_ACCURACY] = {20: 0.4, 40: 0.625, 60: 0.625, 80: 0.5}.get(i, 0.3)
            r[layout.EVAL_REWARD] = 1.0
        out.append(r)
    return out


def _by_title(fig, start: str):
    (ax,) = [a for a in fig.axes if a.get_title().startswith(start)]
    return ax


def test_every_panel_shares_one_step_axis_up_to_max_steps():
    fig = curves.figure(_grpo_records(80, eval_at=(20, 40, 60, 80)), "run", max_steps=200)
    shown = [a for a in fig.axes if a.get_title()]
    assert len(shown) == 5  # loss, reward, components, held-out, memory
    assert {a.get_xlim() for a in shown} == {shown[0].get_xlim()}
    assert shown[0].get_xlim()[0] == 0 and shown[0].get_xlim()[1] >= 200  # where the run is, of its whole length
    assert all(a.get_xlabel() == "step" for a in shown)


def test_a_single_logged_point_is_visible():
    """Stopped at step 17 with logging every 10: one point per series, drawn as a marker."""
    fig = curves.figure([{"step": 10, "loss": 0.01, "reward": 0.62, component_key("format"): 0.5}], "run", 200)
    for title in ("loss", "reward (total", "reward components"):
        lines = [ln for ln in _by_title(fig, title).get_lines() if len(ln.get_xdata())]
        assert lines and all(ln.get_marker() == "o" and ln.get_alpha() in (None, 1.0) for ln in lines), title


def test_flat_noise_looks_flat():
    recs = [{"step": i, "reward": 0.62308 + 0.0001 * (i % 2)} for i in range(1, 30)]
    lo, hi = _by_title(curves.figure(recs), "reward (total").get_ylim()
    assert hi - lo >= 0.2  # not 0.62308-0.62318 filling the whole chart
    assert lo < 0.62308 and hi > 0.62318
    wide = [{"step": i, "reward": float(i)} for i in range(1, 30)]  # a real trend keeps its own range
    lo, hi = _by_title(curves.figure(wide), "reward (total").get_ylim()
    assert lo == pytest.approx(1 - 28 * 0.08) and hi == pytest.approx(29 + 28 * 0.08)


def test_reward_is_smoothed_with_the_raw_values_faint_behind():
    fig = curves.figure(_grpo_records(60))
    raw, smooth = _by_title(fig, "reward (total").get_lines()
    assert raw.get_alpha() < 0.5 and smooth.get_linewidth() > raw.get_linewidth()
    ys, sm = list(raw.get_ydata()), list(smooth.get_ydata())

    def wiggle(v):
        return sum(abs(b - a) for a, b in zip(v, v[1:]))
    assert wiggle(sm) < 0.5 * wiggle(ys)  # the zigzag is gone, the trend stays
    labels = [t.get_text() for t in _by_title(fig, "reward (total").get_legend().get_texts()]
    assert labels == ["per logged step", "smoothed (EMA over ~12 points)"]


def test_component_legend_names_the_components_in_registry_colours():
    fig = curves.figure(_grpo_records(30))
    ax = _by_title(fig, "reward components")
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["length", "format", "reference"]  # the registry's order
    colours = {ln.get_label(): ln.get_color() for ln in ax.get_lines() if not ln.get_label().startswith("_")}
    assert colours == {n: curves._COLOURS[n] for n in ("format", "length", "reference")}
    assert set(curves._COLOURS) == set(NAMES)


def test_custom_reward_functions_get_a_line_and_a_name_too():
    recs = [{"step": i, "reward": 1.0, component_key("my_judge"): 0.1 * i} for i in range(1, 6)]
    ax = _by_title(curves.figure(recs), "reward components")
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["my_judge"]


def test_heldout_accuracy_has_its_own_percent_axis_and_marks_the_best_step():
    fig = curves.figure(_grpo_records(80, eval_at=(20, 40, 60, 80)), "run", 80)
    ax = _by_title(fig, "held-out accuracy")
    assert ax.get_ylim() == pytest.approx((-0.02, 1.02))
    assert ax.yaxis.get_major_formatter()(0.5, 0) == "50%"
    points = [ln for ln in ax.get_lines() if ln.get_marker() == "o"][0]
    assert list(points.get_xdata()) == [20, 40, 60, 80]
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "best: 62% at step 40" in texts  # the earliest of equal bests, as the run records it


def test_each_heldout_point_shows_its_interval():
    from app.eval.uncertainty import share_interval

    recs = _grpo_records(80, eval_at=(20, 40, 60, 80))
    plain = curves.panels(recs)[0]
    assert [p for p in plain if p.key == "heldout"][0].series[0].band is None  # a run from before: no bars
    low, high = layout.interval_keys(layout.EVAL_ACCURACY)
    for r in recs:
        if layout.EVAL_ACCURACY in r:
            r[low], r[high] = share_interval(round(r[layout.EVAL_ACCURACY] * 32), 32)
    (held,) = [p for p in curves.panels(recs)[0] if p.key == "heldout"]
    lows, highs = held.series[0].band
    assert len(lows) == 4 and all(lo < y < hi for lo, y, hi in zip(lows, held.series[0].ys, highs))
    ax = _by_title(curves.figure(recs, "run", 80), "held-out accuracy")
    (bars,) = ax.collections  # one bar per point, from its low to its high
    segments = bars.get_segments()
    assert [(s[0][0], s[0][1], s[1][1]) for s in segments] == [(x, lo, hi) for x, lo, hi in zip((20, 40, 60, 80),
                                                                                                lows, highs)]
    assert "accuracy (greedy), 95% interval of each point" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_where_early_stopping_ended_the_run_is_marked(tmp_path):
    recs = _grpo_records(40, eval_at=(20, 40))
    (held,) = [p for p in curves.panels(recs, 80, stopped_at=40)[0] if p.key == "heldout"]
    assert held.stopped_at == 40
    ax = _by_title(curves.figure(recs, "run", 80, stopped_at=40), "held-out accuracy")
    assert "stopped early at step 40" in [t.get_text() for t in ax.get_legend().get_texts()]
    assert ax.get_xlim()[1] > 80  # the axis still runs to the run's planned end
    assert curves.stopped_at({layout.EARLY_STOP: {"stopped_at": 40}}) == 40 and curves.stopped_at({}) is None
    plain = _by_title(curves.figure(recs, "run", 80), "held-out accuracy")
    assert not any("stopped early" in t.get_text() for t in plain.get_legend().get_texts())


def test_heldout_reward_when_the_data_has_no_references():
    recs = [{"step": i, "reward": 1.0, **({layout.EVAL_REWARD: 0.1 * i} if i % 5 == 0 else {})} for i in range(1, 21)]
    ax = _by_title(curves.figure(recs), "held-out mean reward")
    assert "best: 2 at step 20" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_peak_memory_panel_names_what_was_measured():
    ax = _by_title(curves.figure(_grpo_records(10)), "peak memory")
    assert "peak RSS" in ax.get_title() and ax.get_ylim()[0] == 0
    gpu = [{"step": 1, "loss": 1.0, layout.PEAK_RESERVED: 5.7, layout.PEAK_DEVICE: "cuda"}]
    assert "GPU reserved" in _by_title(curves.figure(gpu), "peak memory").get_title()


def test_sft_loss_panel_and_nothing_to_draw():
    recs = [{"step": i, "loss": 2.0 / i} for i in range(1, 11)]
    fig = curves.figure(recs)
    assert [a.get_title() for a in fig.axes if a.get_title()] == ["training loss"]
    assert curves.figure([]) is None and curves.figure([{"step": 1, "learning_rate": 1e-4}]) is None


def test_ema_is_bias_corrected_and_follows_a_constant():
    assert curves.ema([2.0, 2.0, 2.0], 5) == pytest.approx([2.0, 2.0, 2.0])
    assert curves.ema([0.0, 1.0], 1) == [0.0, 1.0]  # span 1: no smoothing
    assert curves.smoothing_span(200) == 40 and curves.smoothing_span(2) == 1 and curves.smoothing_span(9999) == 50


def test_save_curves_uses_the_runs_max_steps(tmp_path):
    d = newrun.new_run_dir(tmp_path, "r")
    store.write_status(d, layout.RUNNING, max_steps=50, step=10)
    for r in _grpo_records(10):
        store.append_metrics(d, r)
    out = curves.save_curves(d)
    assert out == d / layout.CURVES and out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dpo_runs_show_the_pairs_won_and_the_margin_training_and_held_out():
    recs = []
    for i in range(1, 21):
        r = {"step": i, "loss": 0.69 - 0.01 * i, layout.DPO_ACCURACY: 0.5 + 0.02 * i, layout.DPO_MARGIN: 0.01 * i}
        if i % 10 == 0:
            r.update({layout.EVAL_PREF_ACCURACY: 0.6 + 0.01 * i, layout.EVAL_PREF_MARGIN: 0.005 * i,
                      layout.EVAL_PREF_LIKELIER: 0.1})
        recs.append(r)
    fig = curves.figure(recs, "dpo", 20)
    titles = [a.get_title() for a in fig.axes if a.get_title()]
    title = "preference accuracy (implicit reward of chosen > rejected)"
    assert titles == ["training loss", title, "reward margin (chosen - rejected)"]
    won = _by_title(fig, title)
    assert won.get_ylim() == pytest.approx((-0.02, 1.02)) and won.yaxis.get_major_formatter()(0.5, 0) == "50%"
    # one definition under one title: the held-out line is the same measure as the training one (not likelihood)
    (held,) = [ln for ln in won.get_lines() if ln.get_label() == "held-out pairs"]
    assert list(held.get_xdata()) == [10, 20] and list(held.get_ydata()) == pytest.approx([0.7, 0.8])
    (likelier,) = [ln for ln in won.get_lines() if ln.get_label() == "held-out, chosen more likely (adapter)"]
    assert list(likelier.get_ydata()) == pytest.approx([0.1, 0.1])
    legend = [t.get_text() for t in won.get_legend().get_texts()]
    assert "training batches" in legend and "held-out pairs" in legend
    assert set(curves.curve_keys(recs)) >= {layout.EVAL_PREF_ACCURACY, layout.DPO_ACCURACY}
