"""Statistics for reports: confidence intervals, bootstrap differences of
medians, Mann-Whitney U, Jain's fairness index. Small, explicit, seeded."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from scipy import stats

from ..model import jain


def mean_ci(xs: Sequence[float], level: float = 0.95) -> tuple[float, float, float]:
    """Mean and its Student-t confidence interval (the interval is the mean itself for one value)."""
    a = np.asarray(xs, dtype=float)
    m = float(a.mean())
    if len(a) < 2:
        return m, m, m
    half = float(stats.t.ppf((1 + level) / 2, len(a) - 1) * a.std(ddof=1) / math.sqrt(len(a)))
    return m, m - half, m + half


def bootstrap_median_ci(xs: Sequence[float], level: float = 0.95, n: int = 2000, seed: int = 1
                        ) -> tuple[float, float, float]:
    """Median and its percentile-bootstrap confidence interval."""
    a = np.asarray(xs, dtype=float)
    med = float(np.median(a))
    if len(a) < 2:
        return med, med, med
    rng = np.random.default_rng(seed)
    boots = np.median(rng.choice(a, size=(n, len(a)), replace=True), axis=1)
    lo, hi = np.quantile(boots, [(1 - level) / 2, (1 + level) / 2])
    return med, float(lo), float(hi)


def median_diff_ci(a: Sequence[float], b: Sequence[float], level: float = 0.95, n: int = 2000, seed: int = 1
                   ) -> tuple[float, float, float]:
    """median(b) - median(a) and its percentile-bootstrap confidence interval (resampling each group)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d = float(np.median(y) - np.median(x))
    if len(x) < 2 or len(y) < 2:
        return d, float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    bx = np.median(rng.choice(x, size=(n, len(x)), replace=True), axis=1)
    by = np.median(rng.choice(y, size=(n, len(y)), replace=True), axis=1)
    lo, hi = np.quantile(by - bx, [(1 - level) / 2, (1 + level) / 2])
    return d, float(lo), float(hi)


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value (exact for small samples without ties)."""
    if len(a) < 1 or len(b) < 1:
        return float("nan")
    if np.ptp(np.concatenate([np.asarray(a, float), np.asarray(b, float)])) == 0:
        return 1.0
    return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)

__all__ = ["bootstrap_median_ci", "jain", "mann_whitney_p", "mean_ci", "median_diff_ci"]
