"""How sure a proof's lift is: a paired bootstrap interval for the adapter-minus-base difference of the held-out
accuracy and of the mean reward, and McNemar's exact test for the accuracy (only the rows the two sides disagree on
carry information: under no difference each is a fair coin). A lift whose interval holds 0 is "no difference shown
on N rows", never a gain, with about how many rows would show the observed difference.

The methods follow the field's: Efron & Tibshirani's percentile bootstrap over the rows, resampled in pairs (each row
keeps its base and adapter answer together), as scipy.stats.bootstrap(paired=True) does; McNemar (1947), exact
binomial form (scipy.stats.binomtest on the discordant pairs), the test for two classifiers on one test set that
Dietterich (1998) recommends. A single held-out point's accuracy (the curve during training) gets Wilson's score
interval (``share_interval``). The rows to show a difference are the normal approximation of the paired difference's
interval: n = z^2 * var / diff^2, with var the per-row variance of the difference.

Standard library at import; scipy inside the functions."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

LEVEL = 0.95  # the interval's confidence
RESAMPLES = 2000  # bootstrap resamples: the interval's ends move by well under a point on 100 rows beyond this
SEED = 0  # the same rows give the same interval: compare.json, the card and the UI agree
Z = 1.959964  # the normal quantile of LEVEL, two-sided


@dataclass(frozen=True)
class Lift:
    """The adapter-minus-base difference of one figure over ``n`` rows, its LEVEL interval (``low``, ``high``),
    McNemar's exact p-value for the accuracy (None for the reward), and the rows about that would show ``diff``."""

    diff: float
    low: float
    high: float
    n: int
    p: float | None = None
    rows_to_show: int | None = None

    @property
    def shown(self) -> bool:
        """Whether the interval leaves 0 out: a difference the rows show, either way."""
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict:
        return {**asdict(self), "shown": self.shown, "level": LEVEL}


def _interval(diffs: list[float], seed: int) -> tuple[float, float]:
    """The percentile bootstrap interval of the mean of the per-row differences (the pairs resampled together)."""
    if not diffs or max(diffs) - min(diffs) < 1e-12:  # no spread: every resample has the same mean
        mean = sum(diffs) / len(diffs) if diffs else 0.0
        return mean, mean
    import numpy as np
    from scipy.stats import bootstrap

    res = bootstrap((np.asarray(diffs, dtype=float),), np.mean, n_resamples=RESAMPLES, confidence_level=LEVEL,
                    method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _rows_to_show(diffs: list[float]) -> int | None:
    """About how many rows like these would put the interval clear of 0 at the observed difference (None: no
    difference to show, or every row differs alike)."""
    n = len(diffs)
    mean = sum(diffs) / n if n else 0.0
    if n < 2 or abs(mean) < 1e-12:
        return None
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1)
    return max(n, math.ceil(Z * Z * var / (mean * mean))) if var > 0 else n


def share_interval(k: int, n: int) -> tuple[float, float] | None:
    """The LEVEL interval of a share of ``k`` right out of ``n`` rows (a held-out point's accuracy): Wilson's score
    interval (Wilson 1927; scipy.stats.binomtest's proportion_ci), which stays inside 0-100% and keeps its width at
    0 or n right, where the normal approximation collapses to a point. None without rows."""
    if n <= 0:
        return None
    from scipy.stats import binomtest

    ci = binomtest(int(k), int(n)).proportion_ci(confidence_level=LEVEL, method="wilson")
    return float(ci.low), float(ci.high)


def accuracy_lift(pairs: list[tuple[bool, bool]], seed: int = SEED) -> Lift | None:
    """(base right?, adapter right?) per row with a reference: the accuracy's difference, its interval and
    McNemar's exact p-value. None without rows."""
    if not pairs:
        return None
    from scipy.stats import binomtest

    diffs = [float(a) - float(b) for b, a in pairs]
    gained = sum(1 for b, a in pairs if a and not b)
    lost = sum(1 for b, a in pairs if b and not a)
    p = binomtest(min(gained, lost), gained + lost, 0.5).pvalue if gained + lost else 1.0
    low, high = _interval(diffs, seed)
    return Lift(sum(diffs) / len(diffs), low, high, len(diffs), float(p), _rows_to_show(diffs))


def reward_lift(pairs: list[tuple[float, float]], seed: int = SEED) -> Lift | None:
    """(base reward, adapter reward) per row: the mean reward's difference and its interval. None without rows."""
    if not pairs:
        return None
    diffs = [a - b for b, a in pairs]
    low, high = _interval(diffs, seed)
    return Lift(sum(diffs) / len(diffs), low, high, len(diffs), None, _rows_to_show(diffs))
