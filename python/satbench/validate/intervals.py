"""The judge's intervals, chosen by their measured coverage (``satbench
validate --calibrate``), not by habit.

A percentile bootstrap resampling 3 trials a side excludes a planted null in
about a quarter of cases instead of 5 %: with 3 values, a resample's mean
takes few distinct values and the bootstrap distribution is far too narrow.
These intervals are Student-t intervals with Welch-Satterthwaite degrees of
freedom, which carry the small-sample penalty the bootstrap lacks:

- a relative difference of means (``a`` against ``b``, in %) is the mean over
  cells of log(mean a / mean b), its variance by the delta method
  (s²/(n·mean²) for each side of each cell), the interval turned back into
  % at the end; for paired sides (two metrics of the same trials), the
  log-ratio of each trial instead;
- a value (the mean over cells of each cell's mean) has the variance
  Σ s²/n over the cells, divided by the cells squared.

A cell needs two trials a side; cells with fewer are left out, and a check
with none left has no interval (None).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

import numpy as np
from scipy import stats

LEVEL = 0.95
_level: ContextVar[float] = ContextVar("level", default=LEVEL)


def level() -> float:
    """The intervals' confidence level now: 0.95, or a sequential look's (:func:`at_level`)."""
    return _level.get()


@contextlib.contextmanager
def at_level(x: float) -> Iterator[None]:
    """Every interval made inside at level ``x`` (a sequential design's look spends less than 5 %)."""
    token = _level.set(x)
    try:
        yield
    finally:
        _level.reset(token)


def _t_interval(est: float, parts: Sequence[tuple[float, int]], k: int) -> tuple[float, float, float]:
    """est ± t·sqrt(Σv/k²), with Welch-Satterthwaite degrees of freedom from the parts (variance of a
    mean, its degrees of freedom), and the two-sided p of no difference (0)."""
    var = sum(v for v, _ in parts) / k**2
    if var <= 0:
        return est, est, 0.0 if est != 0 else 1.0
    df = sum(v for v, _ in parts) ** 2 / sum(v * v / d for v, d in parts if d > 0)
    se = math.sqrt(var)
    half = float(stats.t.ppf((1 + level()) / 2, df)) * se
    return est - half, est + half, float(2 * stats.t.sf(abs(est) / se, df))


def relative(a: Sequence[np.ndarray], b: Sequence[np.ndarray], paired: bool = False
             ) -> tuple[float, float, float, int, float] | None:
    """How much higher a's mean is than b's, in %, averaged over the cells (a[i] against b[i]) on the
    log scale, with its 95 % interval, the cells used and the two-sided p of no difference; None where
    no cell has two trials a side (or, paired, two pairs)."""
    logs, parts = [], []
    for x, y in zip(a, b):
        x, y = np.asarray(x, float), np.asarray(y, float)
        if paired:
            ok = (x > 0) & (y > 0)
            r = np.log(x[ok] / y[ok])
            if len(r) < 2:
                continue
            logs.append(float(r.mean()))
            parts.append((float(r.var(ddof=1)) / len(r), len(r) - 1))
        else:
            if len(x) < 2 or len(y) < 2 or x.mean() <= 0 or y.mean() <= 0:
                continue
            logs.append(math.log(x.mean() / y.mean()))
            parts += [(float(x.var(ddof=1)) / (len(x) * x.mean() ** 2), len(x) - 1),
                      (float(y.var(ddof=1)) / (len(y) * y.mean() ** 2), len(y) - 1)]
    if not logs:
        return None
    est = float(np.mean(logs))
    lo, hi, p = _t_interval(est, parts, len(logs))

    def pct(z: float) -> float:
        return (math.exp(z) - 1) * 100

    return pct(est), pct(lo), pct(hi), len(logs), p


def mean(groups: Sequence[np.ndarray]) -> tuple[float, float, float] | None:
    """The mean over cells of each cell's mean, with its 95 % interval; None where no cell has two
    trials."""
    means, parts = [], []
    for g in groups:
        g = np.asarray(g, float)
        if len(g) < 2:
            continue
        means.append(float(g.mean()))
        parts.append((float(g.var(ddof=1)) / len(g), len(g) - 1))
    if not means:
        return None
    est = float(np.mean(means))
    lo, hi, _ = _t_interval(est, parts, len(means))
    return est, lo, hi


def share(a: Sequence[np.ndarray], b: Sequence[np.ndarray], c: Sequence[np.ndarray]
          ) -> tuple[float, float, float, int] | None:
    """How much of the change from c to b a gives back, over the cells (a[i], b[i], c[i]) together:
    F = Σ(mean a - mean b) / Σ(mean c - mean b), a ratio of sums (a cell whose own change is near
    nothing cannot swing it, as it would a mean of ratios). Its 95 % interval by the delta method:
    var F = (Σv_a + F²·Σv_c + (1 - F)²·Σv_b) / (Σ(c - b))², each v the variance of a mean, with
    Welch-Satterthwaite degrees of freedom. Also the cells used; None where no cell has two trials a
    side or the change from c to b is nothing."""
    num = den = 0.0
    groups = []
    for x, y, z in zip(a, b, c):
        x, y, z = (np.asarray(g, float) for g in (x, y, z))
        if min(len(x), len(y), len(z)) < 2:
            continue
        num += x.mean() - y.mean()
        den += z.mean() - y.mean()
        groups.append((x, y, z))
    if not groups or den == 0:
        return None
    f = num / den
    parts = [(w * w * float(g.var(ddof=1)) / len(g) / den**2, len(g) - 1)
             for x, y, z in groups for g, w in ((x, 1.0), (z, f), (y, 1 - f))]
    lo, hi, _ = _t_interval(f, parts, 1)
    return float(f), lo, hi, len(groups)


__all__ = ["LEVEL", "at_level", "level", "mean", "relative", "share"]
