"""Curves: a PNG in the run directory and a one-line sparkline for the terminal."""

from __future__ import annotations

from pathlib import Path

from app import rundir

_BARS = "▁▂▃▄▅▆▇█"


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
    """loss, reward, each reward component's mean, then the held-out evaluation's accuracy and reward."""
    keys = [k for k in ("loss", "reward") if any(r.get(k) is not None for r in records)]
    held = [k for k in (rundir.EVAL_ACCURACY, rundir.EVAL_REWARD) if any(r.get(k) is not None for r in records)]
    return keys + rundir.component_keys(records) + held


def save_curves(run_dir: Path, out: Path | None = None) -> Path | None:
    records = rundir.read_metrics(run_dir)
    keys = curve_keys(records)
    if not keys:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(keys)
    cols = min(3, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        xs, ys = series(records, key)
        ax.plot(xs, ys, marker="." if len(xs) < 40 else None)
        comp = rundir.component_of(key)
        titles = {rundir.EVAL_ACCURACY: "held-out accuracy (greedy)", rundir.EVAL_REWARD: "held-out reward"}
        ax.set_title(f"{comp} (reward)" if comp else titles.get(key, key))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(Path(run_dir).name, fontsize=9)
    fig.tight_layout()
    out = Path(out or Path(run_dir) / rundir.CURVES)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
