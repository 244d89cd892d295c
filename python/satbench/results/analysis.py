"""Which settings matter here, and by how much: the analysis of parameter
studies (study D).

- :func:`knob_effects`: per network (block), each knob's effect on the
  median of a metric: median at its other level minus median at its
  baseline level, a percentile-bootstrap 95 % interval, a two-sided
  Mann-Whitney U p-value, and that p corrected for the many tests of the
  table with **Holm's** step-down method (family-wise error rate 5 %), then
  the knobs ranked by the size of their effect relative to the baseline.
  Trials are compared within each combination of the other varied factors
  that are not knobs (a protocol is never pooled with another).
- :func:`factorial_effects`: for two-level (fractional) factorial designs,
  main effects and two-factor interactions by least squares on the coded
  columns (-1, +1), effect = 2 x coefficient (the difference between the
  mean at + and at -), with t-based 95 % intervals and p-values from the
  replicates' residual variance, Holm-corrected. Aliased effects are fitted
  once, under the first name of their alias set.
- :func:`tuned_against_default`: per network, each protocol with every knob
  at its baseline against the best observed combination of knobs, and
  whether the tuned protocol beats another protocol's default.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from .stats import mann_whitney_p, median_diff_ci


def holm(ps: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (NaN stays NaN)."""
    idx = [i for i, p in enumerate(ps) if not math.isnan(p)]
    order = sorted(idx, key=lambda i: ps[i])
    m = len(order)
    out = [float("nan")] * len(ps)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * ps[i]))
        out[i] = running
    return out


def benjamini_hochberg(ps: list[float]) -> list[float]:
    """Benjamini-Hochberg adjusted p-values (false discovery rate)."""
    idx = [i for i, p in enumerate(ps) if not math.isnan(p)]
    order = sorted(idx, key=lambda i: ps[i], reverse=True)
    m = len(order)
    out = [float("nan")] * len(ps)
    running = 1.0
    for rank, i in enumerate(order):
        running = min(running, ps[i] * m / (m - rank))
        out[i] = running
    return out


@dataclass(frozen=True)
class Effect:
    network: str
    within: str
    knob: str
    baseline: Any
    level: Any
    n_baseline: int
    n_level: int
    median_baseline: float
    effect: float
    ci_low: float
    ci_high: float
    p: float
    p_holm: float = float("nan")

    @property
    def relative(self) -> float:
        return self.effect / self.median_baseline if self.median_baseline else float("nan")

    @property
    def significant(self) -> bool:
        return self.p_holm < 0.05


def knob_effects(df: pd.DataFrame, knobs: list[str], metric: str = "plt_ms", network: str = "link",
                 others: list[str] | None = None) -> list[Effect]:
    """Each knob's effect per network, Holm-corrected over the whole table, largest first."""
    others = [o for o in (others or []) if o in df.columns and o not in knobs and o != network]
    rows: list[Effect] = []
    nets = list(dict.fromkeys(df[network].astype(str))) if network in df.columns else ["all"]
    for net in nets:
        sub = df[df[network].astype(str) == net] if network in df.columns else df
        cells = [((), sub)] if not others else list(sub.groupby(others, dropna=False))
        for key, cell in cells:
            within = " ".join(f"{k}={v}" for k, v in zip(others, key if isinstance(key, tuple) else (key,)))
            for knob in knobs:
                levels = list(dict.fromkeys(cell[knob].dropna()))
                if len(levels) < 2:
                    continue
                base = levels[0]
                # The other knobs at their baseline: one factor at a time, as far as the data allow.
                held = cell
                for k2 in knobs:
                    if k2 != knob and held[k2].nunique() > 1:
                        at_base = held[held[k2] == list(dict.fromkeys(held[k2].dropna()))[0]]
                        if at_base[knob].nunique() > 1:
                            held = at_base
                xa = held[held[knob] == base][metric].dropna().tolist()
                for lv in levels[1:]:
                    xb = held[held[knob] == lv][metric].dropna().tolist()
                    if not xa or not xb:
                        continue
                    d, lo, hi = median_diff_ci(xa, xb)
                    rows.append(Effect(net, within or "all", knob, base, lv, len(xa), len(xb),
                                       float(np.median(xa)), d, lo, hi, mann_whitney_p(xa, xb)))
    adj = holm([r.p for r in rows])
    rows = [Effect(**{**r.__dict__, "p_holm": a}) for r, a in zip(rows, adj)]
    return sorted(rows, key=lambda r: -abs(r.relative) if not math.isnan(r.relative) else 0)


@dataclass(frozen=True)
class FactorialEffect:
    network: str
    term: str
    aliases: str
    effect: float
    ci_low: float
    ci_high: float
    p: float
    p_holm: float = float("nan")


def factorial_effects(df: pd.DataFrame, factors: list[str], metric: str = "plt_ms", network: str = "link",
                      interactions: bool = True) -> list[FactorialEffect]:
    """Main effects and two-factor interactions of two-level factors, per network."""
    out: list[FactorialEffect] = []
    nets = list(dict.fromkeys(df[network].astype(str))) if network in df.columns else ["all"]
    for net in nets:
        sub = df[df[network].astype(str) == net] if network in df.columns else df
        sub = sub.dropna(subset=[metric])
        if sub.empty:
            continue
        coded = {}
        for f in factors:
            levels = list(dict.fromkeys(sub[f]))
            if len(levels) != 2:
                continue
            coded[f] = np.where(sub[f] == levels[0], -1.0, 1.0)
        names = list(coded)
        terms: list[tuple[str, np.ndarray]] = [(n, coded[n]) for n in names]
        if interactions:
            terms += [(f"{a}:{b}", coded[a] * coded[b]) for a, b in itertools.combinations(names, 2)]
        # Aliased columns (identical or opposite) are one effect: fit the first, name the rest.
        kept: list[tuple[str, np.ndarray, list[str]]] = []
        for name, col in terms:
            for k in kept:
                if np.array_equal(k[1], col) or np.array_equal(k[1], -col):
                    k[2].append(name)
                    break
            else:
                kept.append((name, col, []))
        x = np.column_stack([np.ones(len(sub))] + [c for _, c, _ in kept])
        y = sub[metric].to_numpy(dtype=float)
        coef, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
        dof = len(y) - rank
        resid = y - x @ coef
        sigma2 = float(resid @ resid) / dof if dof > 0 else float("nan")
        try:
            cov = sigma2 * np.linalg.pinv(x.T @ x)
        except np.linalg.LinAlgError:
            cov = np.full((x.shape[1], x.shape[1]), np.nan)
        tcrit = float(sps.t.ppf(0.975, dof)) if dof > 0 else float("nan")
        for j, (name, _, alias) in enumerate(kept, start=1):
            eff = 2 * float(coef[j])
            se = 2 * math.sqrt(cov[j, j]) if not math.isnan(cov[j, j]) and cov[j, j] >= 0 else float("nan")
            p = float(2 * sps.t.sf(abs(eff / se), dof)) if se and not math.isnan(se) and se > 0 else float("nan")
            out.append(FactorialEffect(net, name, " = ".join(alias), eff, eff - tcrit * se, eff + tcrit * se, p))
    adj = holm([r.p for r in out])
    return [FactorialEffect(**{**r.__dict__, "p_holm": a}) for r, a in zip(out, adj)]


@dataclass(frozen=True)
class Tuned:
    network: str
    protocol: str
    default_median: float
    tuned_median: float
    tuned_setting: str
    n_tuned: int
    beats: dict[str, tuple[float, float]]  # other protocol -> (its default median, p of tuned vs it)


def tuned_against_default(df: pd.DataFrame, knobs: list[str], metric: str = "plt_ms", network: str = "link",
                          protocol: str = "protocol") -> list[Tuned]:
    """Per network and protocol: knobs at baseline against the best observed
    combination (lowest median); and the tuned protocol against each other
    protocol at its defaults (Mann-Whitney p)."""
    out: list[Tuned] = []
    knobs = [k for k in knobs if k in df.columns and df[k].notna().any()]  # a knob no valid trial set: none
    if not knobs:
        return out
    nets = list(dict.fromkeys(df[network].astype(str))) if network in df.columns else ["all"]
    base = {k: list(dict.fromkeys(df[k].dropna()))[0] for k in knobs}
    for net in nets:
        sub = df[df[network].astype(str) == net] if network in df.columns else df
        defaults: dict[str, list[float]] = {}
        tuned: dict[str, tuple[float, str, list[float]]] = {}
        for proto, g in sub.groupby(protocol):
            at_base = g
            for k, v in base.items():
                at_base = at_base[at_base[k] == v]
            defaults[str(proto)] = at_base[metric].dropna().tolist()
            best: tuple[float, str, list[float]] | None = None
            for key, cell in g.groupby(knobs, dropna=False):
                xs = cell[metric].dropna().tolist()
                if len(xs) < 2:
                    continue
                label = " ".join(f"{k}={v}" for k, v in zip(knobs, key if isinstance(key, tuple) else (key,)))
                if best is None or float(np.median(xs)) < best[0]:
                    best = (float(np.median(xs)), label, xs)
            if best is not None:
                tuned[str(proto)] = best
        for proto, (med, label, xs) in tuned.items():
            beats = {other: (float(np.median(d)), mann_whitney_p(xs, d)) for other, d in defaults.items()
                     if other != proto and d}
            out.append(Tuned(net, proto, float(np.median(defaults[proto])) if defaults.get(proto) else float("nan"),
                             med, label, len(xs), beats))
    return out


def to_frame(rows: list[Any]) -> pd.DataFrame:
    return pd.DataFrame([r.__dict__ for r in rows])
