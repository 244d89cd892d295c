"""How often the judge's intervals are wrong (``satbench validate
--calibrate``): planted nulls and planted effects drawn from stored trials'
own spread, judged by the judge's interval (:mod:`.intervals`) and, beside
it, the percentile bootstrap it replaced.

For each cell of a results database with at least :data:`MIN_CELL` valid
trials, its page load times (each divided by the cell's mean) are the
population: a side of n trials is n draws from it, with replacement. Under a
null both sides come from the same cell; under an effect the second side is
scaled by 1 + the effect. Per n and method:

- *false positives*: the 95 % interval excludes no difference under a null
  (goal: 5 % ± simulation error);
- *coverage*: the interval holds the planted effect (goal: 93-97 %);
- *power*: the interval excludes no difference under the effect.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import intervals

#: The fewest valid trials a stored cell needs to serve as a population.
MIN_CELL = 8
NS = (3, 5, 10, 30)


@dataclass(frozen=True)
class Row:
    n: int
    method: str
    false_positive_pct: float
    coverage_pct: float
    power_pct: float
    sims: int


def populations(db: Path, metric: str = "plt_ms") -> list[np.ndarray]:
    """Each stored cell's values of ``metric`` (valid trials; experiment and factors alike), divided
    by the cell's mean."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT t.experiment_id, t.factors, m.value FROM trials t JOIN metrics m ON "
                           "m.trial_id = t.id WHERE t.status = 'valid' AND m.name = ? AND m.value > 0",
                           (metric,)).fetchall()
    finally:
        con.close()
    cells: dict[tuple[int, str], list[float]] = {}
    for exp, factors, v in rows:
        cells.setdefault((exp, factors), []).append(float(v))
    return [np.asarray(v) / np.mean(v) for v in cells.values() if len(v) >= MIN_CELL]


def _bootstrap(a: np.ndarray, b: np.ndarray, rng: np.random.Generator, resamples: int = 400
               ) -> tuple[float, float]:
    """The percentile bootstrap the judge used before (each side resampled on its own)."""
    ia = rng.integers(0, len(a), (resamples, len(a)))
    ib = rng.integers(0, len(b), (resamples, len(b)))
    boots = (a[ia].mean(axis=1) / b[ib].mean(axis=1) - 1) * 100
    lo, hi = np.quantile(boots, [0.025, 0.975])
    return float(lo), float(hi)


def calibrate(pops: list[np.ndarray], ns: tuple[int, ...] = NS, sims: int = 2000, effect_pct: float = 10.0,
              seed: int = 1) -> list[Row]:
    """The table (see the module): ``sims`` nulls and ``sims`` effects per n, for each method."""
    rng = np.random.default_rng(seed)
    out = []
    true = (1 / (1 + effect_pct / 100) - 1) * 100  # a against b scaled up: a is lower by this much
    for n in ns:
        tallies = {"t (judge)": [0, 0, 0], "percentile bootstrap": [0, 0, 0]}
        for _ in range(sims):
            pop = pops[rng.integers(len(pops))]
            a, b = rng.choice(pop, n), rng.choice(pop, n)
            b_eff = rng.choice(pop, n) * (1 + effect_pct / 100)
            for method, tally in tallies.items():
                if method == "t (judge)":
                    null = intervals.relative([a], [b])
                    eff = intervals.relative([a], [b_eff])
                    if null is None or eff is None:
                        continue
                    (lo0, hi0), (lo1, hi1) = null[1:3], eff[1:3]
                else:
                    (lo0, hi0), (lo1, hi1) = _bootstrap(a, b, rng), _bootstrap(a, b_eff, rng)
                tally[0] += not (lo0 <= 0 <= hi0)
                tally[1] += lo1 <= true <= hi1
                tally[2] += hi1 < 0
        for method, (fp, cov, power) in tallies.items():
            out.append(Row(n, method, 100 * fp / sims, 100 * cov / sims, 100 * power / sims, sims))
    return out


@dataclass(frozen=True)
class SequentialRow:
    looks: tuple[int, ...]
    alpha: float
    false_positive_pct: float
    power_pct: float
    #: Trials a side on average under the null and under the effect (a decided check stops).
    mean_n_null: float
    mean_n_effect: float
    sims: int


def sequential(pops: list[np.ndarray], looks: tuple[int, ...] = (3, 5, 10), sims: int = 2000,
               effect_pct: float = 10.0, seed: int = 2) -> SequentialRow:
    """The sequential design of :mod:`.sequential` on planted data: each side drawn to the cap, judged
    at each look's prefix at Pocock's level, stopped at the first look whose interval excludes no
    difference. A false positive is any such look under a null; power, the first decided look
    finding the planted direction."""
    from .sequential import POCOCK  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    alpha = POCOCK.get(len(looks), 0.05 / len(looks))
    cap = looks[-1]
    fp = power = 0
    used_null = used_eff = 0.0

    def first_decided(a: np.ndarray, b: np.ndarray) -> tuple[int, float]:
        for n in looks:
            got = intervals.relative([a[:n]], [b[:n]])
            if got is not None and not (got[1] <= 0 <= got[2]):
                return n, got[0]
        return cap, 0.0

    with intervals.at_level(1 - alpha):
        for _ in range(sims):
            pop = pops[rng.integers(len(pops))]
            a, b = rng.choice(pop, cap), rng.choice(pop, cap)
            n, v = first_decided(a, b)
            fp += v != 0.0
            used_null += n
            b_eff = rng.choice(pop, cap) * (1 + effect_pct / 100)
            n, v = first_decided(a, b_eff)
            power += v < 0
            used_eff += n
    return SequentialRow(looks, alpha, 100 * fp / sims, 100 * power / sims, used_null / sims, used_eff / sims, sims)


def format_table(rows: list[Row], cells: int, effect_pct: float) -> str:
    lines = [f"calibration: {rows[0].sims if rows else 0} planted nulls and {effect_pct:g} % effects per n, drawn "
             f"from {cells} stored cells' spread (95 % intervals; goal: false positives 5 %, coverage 93-97 %)",
             f"  {'n':>3}  {'method':<22} {'false positive':>14} {'coverage':>9} {'power':>7}"]
    for r in rows:
        lines.append(f"  {r.n:>3}  {r.method:<22} {r.false_positive_pct:>13.1f}% {r.coverage_pct:>8.1f}% "
                     f"{r.power_pct:>6.1f}%")
    se = 100 * (0.05 * 0.95 / max(1, rows[0].sims)) ** 0.5 if rows else 0.0
    lines.append(f"  (simulation error of a 5 % rate: ± {2 * se:.1f} points at 95 %)")
    return "\n".join(lines) + "\n"


def format_sequential(rows: list[SequentialRow], effect_pct: float) -> str:
    lines = [f"sequential (satbench validate --sequential): looks at Pocock's level; {effect_pct:g} % effects",
             f"  {'looks':<12} {'level':>7} {'false positive':>14} {'power':>7} {'mean n (null)':>14} "
             f"{'mean n (effect)':>16}"]
    for r in rows:
        lines.append(f"  {'/'.join(map(str, r.looks)):<12} {1 - r.alpha:>7.4f} {r.false_positive_pct:>13.1f}% "
                     f"{r.power_pct:>6.1f}% {r.mean_n_null:>14.1f} {r.mean_n_effect:>16.1f}")
    return "\n".join(lines) + "\n"


__all__ = ["MIN_CELL", "NS", "Row", "SequentialRow", "calibrate", "format_sequential", "format_table",
           "populations", "sequential"]
