"""Curves people can read: one figure, drawn here for both the run's curves.png and the UI's live view, and a
one-line sparkline for the terminal.

What a reader needs from a training curve, and why each choice:
- one step axis for every panel (from 0 to the run's max_steps while it runs: where it is, at a glance);
- every logged point a marker, so a single logged point is visible;
- rewards and losses smoothed (an EMA over about a fifth of the points, drawn bold) with the raw values faint
  behind: GRPO's per-step reward zigzags by design;
- a y-range no narrower than a sensible minimum, so flat noise (0.62308-0.62318) looks flat, not like a cliff;
- legends with the reward components' names, in the registry's colours;
- held-out accuracy on its own 0-100% panel, the best point marked, each point with its 95% interval (32 rows
  are not precise: a bar says how far apart two points must be to differ); peak memory on its own panel.

``panels()`` decides what is drawn (plain data, tested without matplotlib); ``figure()`` draws it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from app.config.reward_components import COMPONENTS
from app.run import layout, store

_BARS = "▁▂▃▄▅▆▇█"
_COLOURS = {c.name: c.colour for c in COMPONENTS}
_MARKERS_UP_TO = 80  # more points than this: the raw curve is a faint line without markers


def sparkline(values: list[float], width: int = 48) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return ""
    if len(vals) > width:  # average into `width` buckets so long runs still fit one line
        n = len(vals)
        buckets = [vals[i * n // width:(i + 1) * n // width] for i in range(width)]
        vals = [sum(b) / len(b) for b in buckets if b]
    lo, hi = min(vals), max(vals)
    span = (hi - lo) or 1.0
    return "".join(_BARS[min(len(_BARS) - 1, int((v - lo) / span * (len(_BARS) - 1)))] for v in vals)


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in records:
        if r.get(key) is not None:
            xs.append(r["step"])
            ys.append(r[key])
    return xs, ys


def curve_keys(records: list[dict]) -> list[str]:
    """loss, reward, each reward component's mean, DPO's pairs won and margin, a tool run's calls and failures,
    then the held-out evaluation's accuracy, reward, preference accuracy and margin, and tool success."""
    present = lambda keys: [k for k in keys if any(r.get(k) is not None for r in records)]  # noqa: E731
    return (present(("loss", "reward")) + layout.component_keys(records)
            + present((layout.DPO_ACCURACY, layout.DPO_MARGIN, layout.TOOL_CALL_FREQUENCY,
                       layout.TOOL_FAILURE_FREQUENCY, layout.EVAL_ACCURACY, layout.EVAL_REWARD,
                       layout.EVAL_PREF_ACCURACY, layout.EVAL_PREF_MARGIN, layout.EVAL_PREF_LIKELIER,
                       layout.EVAL_TOOL_SUCCESS)))


def ema(values: list[float], span: int) -> list[float]:
    """Exponential moving average with bias correction (the first points are not pulled toward 0)."""
    alpha = 2.0 / (span + 1)
    out, acc, weight = [], 0.0, 0.0
    for v in values:
        acc = (1 - alpha) * acc + alpha * v
        weight = (1 - alpha) * weight + alpha
        out.append(acc / weight)
    return out


def smoothing_span(n: int) -> int:
    """About a fifth of the points (TensorBoard's default smoothing on a short run), at most 50."""
    return min(50, max(1, round(n / 5)))


def readable_limits(values: list[float], min_span: float, pad: float = 0.08) -> tuple[float, float] | None:
    """The data's range, widened to at least ``min_span`` around its middle, padded."""
    if not values:
        return None
    lo, hi = min(values), max(values)
    if hi - lo < min_span:
        mid = (lo + hi) / 2
        lo, hi = mid - min_span / 2, mid + min_span / 2
    p = (hi - lo) * pad
    return lo - p, hi + p


def _min_span(values: list[float], floor: float) -> float:
    """A quarter of the values' magnitude (a relative change that matters), never below ``floor``."""
    return max(floor, 0.25 * max(abs(v) for v in values)) if values else floor


@dataclass
class Series:
    name: str
    xs: list[int]
    ys: list[float]
    colour: str | None = None
    smooth: bool = True  # draw an EMA over it, the raw points faint behind
    label: str | None = None  # legend text (None: not in the legend)
    # a held-out share's 95% interval at each point (lows, highs), drawn as a bar through it; None: not recorded
    band: tuple[list[float], list[float]] | None = None


def band(records: list[dict], key: str) -> tuple[list[float], list[float]] | None:
    """The 95% interval of each point of ``key`` (metrics.jsonl's KEY_low / KEY_high, layout.interval_keys), aligned
    with ``series(records, key)``; None when a point has none (a run from before they were recorded)."""
    low, high = layout.interval_keys(key)
    points = [(r.get(low), r.get(high)) for r in records if r.get(key) is not None]
    if not points or any(lo is None or hi is None for lo, hi in points):
        return None
    return [lo for lo, _ in points], [hi for _, hi in points]


@dataclass
class Panel:
    key: str  # loss | reward | components | pairs | margin | tools | heldout | memory
    title: str
    series: list[Series] = field(default_factory=list)
    ylim: tuple[float, float] | None = None
    percent: bool = False
    best: tuple[int, float] | None = None  # held-out: (step, value) of the best point
    stopped_at: int | None = None  # held-out: the step early stopping ended the run at (training.early_stop)


def panels(records: list[dict], max_steps: int | None = None,
           stopped_at: int | None = None) -> tuple[list[Panel], tuple[float, float]]:
    """What the figure shows, and the one step range every panel shares; ``stopped_at``: the step early stopping
    ended the run at, marked on the held-out panel."""
    out: list[Panel] = []
    grpo = any(r.get("reward") is not None for r in records)
    xs, ys = series(records, "loss")
    if xs:
        # on-policy distillation samples answers and has no reward: its loss is the divergence from the teacher
        distill = not grpo and any("completions/mean_length" in r for r in records)
        title = ("loss (GRPO's stays near 0 by design: read the reward)" if grpo else
                 "divergence from the teacher (falling: the student closes on it)" if distill else "training loss")
        shown = [Series("loss", xs, ys, "#444444", label="training (fresh samples)" if distill else None)]
        dx, dy = series(records, layout.EVAL_DIVERGENCE)
        if dx:  # the same held-out answers at every point: the divergence that falls as the student learns
            shown.append(Series(layout.EVAL_DIVERGENCE, dx, dy, "#d62728", smooth=False, label="held-out"))
        every = [y for s in shown for y in s.ys]
        out.append(Panel("loss", title, shown, readable_limits(every, _min_span(every, 0.05))))
    xs, ys = series(records, "reward")
    if xs:
        out.append(Panel("reward", "reward (total, weighted)", [Series("reward", xs, ys, "#333399")],
                         readable_limits(ys, _min_span(ys, 0.2))))
    comps = []
    order = {name: i for i, name in enumerate(_COLOURS)}  # the registry's order (the sliders'), then custom ones
    for key in sorted(layout.component_keys(records), key=lambda k: (order.get(layout.component_of(k), 99), k)):
        name = layout.component_of(key)
        cx, cy = series(records, key)
        comps.append(Series(name, cx, cy, _COLOURS.get(name), label=name))
    if comps:
        every = [y for s in comps for y in s.ys]
        out.append(Panel("components", "reward components (unweighted)", comps,
                         readable_limits(every, _min_span(every, 0.2))))
    out += _preference_panels(records)
    out += _tool_panels(records)
    held = layout.EVAL_ACCURACY if any(r.get(layout.EVAL_ACCURACY) is not None for r in records) else (
        layout.EVAL_REWARD if any(r.get(layout.EVAL_REWARD) is not None for r in records) else None)
    if held:
        hx, hy = series(records, held)
        acc = held == layout.EVAL_ACCURACY
        best = max(zip(hx, hy), key=lambda p: (p[1], -p[0]))  # the earliest of equal bests, as the run records it
        label = "accuracy (greedy)" if acc else "mean reward (greedy)"
        spread = band(records, held)
        title, label = f"held-out {label}", label + (", 95% interval of each point" if spread else "")
        out.append(Panel("heldout", title, [Series(held, hx, hy, "#2ca02c", smooth=False, label=label,
                                                   band=spread)],
                         (-0.02, 1.02) if acc else readable_limits(hy, _min_span(hy, 0.2)), percent=acc,
                         best=best, stopped_at=stopped_at))
    mx, my = series(records, layout.PEAK_RESERVED)
    if mx:
        where = next((r.get(layout.PEAK_DEVICE) for r in reversed(records) if r.get(layout.PEAK_DEVICE)), "") or ""
        unit = "GPU reserved" if where.startswith("cuda") else "process peak RSS"
        out.append(Panel("memory", f"peak memory (GiB, {unit})", [Series("memory", mx, my, "#8c564b", smooth=False)],
                         (0.0, max(my) * 1.15 or 1.0)))
    steps = [x for p in out for s in p.series for x in s.xs]
    right = max([*steps, max_steps or 0, 1])
    return out, (0.0, right * 1.02 + 0.5)


def _tool_panels(records: list[dict]) -> list[Panel]:
    """A tool run: calls per completion (TRL's) with each tool's failed and timed-out calls per step beside it, and
    the held-out answers whose tool calls all succeeded."""
    shown = []
    cx, cy = series(records, layout.TOOL_CALL_FREQUENCY)
    if cx:
        shown.append(Series(layout.TOOL_CALL_FREQUENCY, cx, cy, "#1f77b4", label="calls per completion"))
    fx, fy = series(records, layout.TOOL_FAILURE_FREQUENCY)
    if fx:
        shown.append(Series(layout.TOOL_FAILURE_FREQUENCY, fx, fy, "#d62728", label="share of calls that failed"))
    hx, hy = series(records, layout.EVAL_TOOL_SUCCESS)
    if hx:
        shown.append(Series(layout.EVAL_TOOL_SUCCESS, hx, hy, "#2ca02c", smooth=False,
                            label="held-out: answers whose calls all worked"))
    if not shown:
        return []
    every = [y for s in shown for y in s.ys]
    return [Panel("tools", "tool calls", shown, readable_limits(every + [0.0, 1.0], _min_span(every, 0.2)))]


def _preference_panels(records: list[dict]) -> list[Panel]:
    """DPO: preference accuracy (training batches and held-out pairs, one definition: app.run.layout.PREFERENCE_WORDS)
    on a 0-100% panel beside the held-out share where the adapter finds the chosen answer more likely, and the reward
    margin (training and held-out)."""
    out = []
    for key, title, train_key, held_keys, colour in (
            ("pairs", "preference accuracy (implicit reward of chosen > rejected)", layout.DPO_ACCURACY,
             ((layout.EVAL_PREF_ACCURACY, "held-out pairs", "#2ca02c"),
              (layout.EVAL_PREF_LIKELIER, "held-out, chosen more likely (adapter)", "#7f7f7f")), "#9467bd"),
            ("margin", "reward margin (chosen - rejected)", layout.DPO_MARGIN,
             ((layout.EVAL_PREF_MARGIN, "held-out pairs", "#2ca02c"),), "#17becf")):
        shown = []
        tx, ty = series(records, train_key)
        if tx:
            shown.append(Series(train_key, tx, ty, colour, label="training batches"))
        for held_key, held_label, held_colour in held_keys:
            hx, hy = series(records, held_key)
            if hx:
                spread = band(records, held_key)  # the pairs' share: its interval at each point, where recorded
                shown.append(Series(held_key, hx, hy, held_colour, smooth=False, band=spread,
                                    label=held_label + (" (95% interval)" if spread else "")))
        if shown:
            every = [y for s in shown for y in s.ys]
            limits = (-0.02, 1.02) if key == "pairs" else readable_limits(every, _min_span(every, 0.05))
            out.append(Panel(key, title, shown, limits, percent=key == "pairs"))
    return out


def waiting(text: str = "waiting for the first logged step"):
    """A small figure that only says what the curves are waiting for (a blank box reads as broken)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 1.2), dpi=90)
    fig.text(0.5, 0.5, text, ha="center", va="center", fontsize=12, color="#666")
    return fig


def figure(records: list[dict], title: str = "", max_steps: int | None = None, stopped_at: int | None = None):
    """A matplotlib Figure (object API: no pyplot state, safe from the UI's worker threads), or None."""
    shown, xlim = panels(records, max_steps, stopped_at)
    if not shown:
        return None
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator, PercentFormatter

    cols = min(3, len(shown))
    rows = (len(shown) + cols - 1) // cols
    fig = Figure(figsize=(4.6 * cols, 3.0 * rows), dpi=90, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, panel in zip(axes.flat, shown):
        for s in panel.series:
            _draw(ax, s)
        if panel.stopped_at is not None:  # where early stopping ended the run (the axis still runs to max_steps)
            ax.axvline(panel.stopped_at, color="#888888", linestyle=":", linewidth=1.5,
                       label=f"stopped early at step {panel.stopped_at}")
        if panel.best:
            step, value = panel.best
            shown_value = f"{value:.0%}" if panel.percent else f"{value:.3g}"
            ax.plot([step], [value], marker="*", markersize=13, color="#d4a017", linestyle="none",
                    label=f"best: {shown_value} at step {step}", zorder=5)
        ax.set_title(panel.title, fontsize=10)
        ax.set_xlim(*xlim)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if panel.ylim:
            ax.set_ylim(*panel.ylim)
        if panel.percent:
            ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="best", framealpha=0.8)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def _draw(ax, s: Series) -> None:
    if s.band:  # each point's interval, as a bar through it: two points whose bars overlap are not shown apart
        lows, highs = s.band
        ax.vlines(s.xs, lows, highs, color=s.colour, alpha=0.35, linewidth=3)
    n = len(s.xs)
    marker = "o" if n <= _MARKERS_UP_TO else None
    span = smoothing_span(n)
    if not s.smooth or n < 3 or span < 2:  # nothing to smooth (an EMA over one point is the points): them, in full
        ax.plot(s.xs, s.ys, marker="o", markersize=4, color=s.colour, linewidth=1.5, label=s.label)
        return
    ax.plot(s.xs, s.ys, marker=marker, markersize=2.5, color=s.colour, alpha=0.3, linewidth=0.8,
            label=None if s.label else "per logged step")
    ax.plot(s.xs, ema(s.ys, span), color=s.colour, linewidth=2.0,
            label=s.label if s.label else f"smoothed (EMA over ~{span} points)")


def stopped_at(status: dict) -> int | None:
    """The step early stopping ended a run at, from its status.json (None: it did not)."""
    return (status.get(layout.EARLY_STOP) or {}).get("stopped_at")


def save_curves(run_dir: Path, out: Path | None = None) -> Path | None:
    records = store.read_metrics(run_dir)
    st = store.read_status(run_dir) or {}
    fig = figure(records, Path(run_dir).name, st.get("max_steps"), stopped_at(st))
    if fig is None:
        return None
    out = Path(out or Path(run_dir) / layout.CURVES)
    fig.savefig(out)
    return out
