"""Which settings matter here, and by how much: the analysis of parameter
studies (study D).

Every comparison is against the **baseline** the experiment defines (each
knob's first level in the file, or the OFAT design's baseline), passed in as
``baseline``; without it, the first level seen in the data. p-values are
adjusted for the many tests of a table by ``correction``: ``"holm"``
(Holm's step-down, family-wise error rate) or ``"bh"`` (Benjamini-Hochberg,
false discovery rate), named in every result.

- :func:`knob_effects`: per network (block) and combination of the other
  varied factors (a protocol is never pooled with another), each knob's
  effect on the median of a metric: median at its other level minus median
  at the baseline, with the other knobs at their baseline where the design
  has such trials; a percentile-bootstrap 95 % interval and a two-sided
  Mann-Whitney U p; ranked by the effect relative to the baseline median.
  Meant for one-factor-at-a-time and full designs: in a fractional design
  the trials that differ in one knob only are too few (see below).
- :func:`factorial_effects`: for two-level (fractional) factorial designs,
  per network and combination of the other factors, main effects and
  two-factor interactions by least squares on the coded columns (baseline
  -1, the other level +1), effect = 2 x coefficient (the mean at + minus
  the mean at -), t-based 95 % intervals and p from the replicates'
  residual variance; aliased effects are fitted once, under the first name
  of their alias set; ranked by size within each cell.
- :func:`tuned_against_default`: per network and protocol, every knob at its
  baseline against the tuned setting, and whether the tuned setting beats
  its own protocol's default and another protocol at its defaults. The
  setting is chosen on half of the repetitions and judged on the other half:
  a setting chosen and judged on the same trials is the lowest of many noisy
  cells, biased low (with ten null knobs, "tuned beats default" far more
  often than 5 %). In a fractional design the setting is the main-effects
  model's best (each knob at its better level), its mean the model's fitted
  on the judging half, with a 95 % interval; in other designs it is the
  best observed cell, judged by the same cell's judging trials.
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


CORRECTIONS = {"holm": "Holm", "bh": "Benjamini-Hochberg"}


def is_knob(factor: str) -> bool:
    """Whether a factor is a setting a parameter study ranks: a server or
    client option, sysctl or offload, or the congestion control."""
    return factor.startswith(("server.", "client.")) or factor == "cc"


def adjust(ps: list[float], correction: str = "holm") -> list[float]:
    """p-values adjusted by ``correction`` ("holm" or "bh")."""
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    return holm(ps) if correction == "holm" else benjamini_hochberg(ps)


def _base(df: pd.DataFrame, col: str, baseline: dict[str, Any] | None) -> Any:
    """A factor's baseline level: the experiment's, else the first seen."""
    seen = list(dict.fromkeys(df[col].dropna()))
    if baseline and col in baseline and baseline[col] in seen:
        return baseline[col]
    return seen[0] if seen else None


def _cells(df: pd.DataFrame, network: str, others: list[str]) -> list[tuple[str, str, pd.DataFrame]]:
    """(network, the other factors' values, trials) for every cell compared on its own."""
    out = []
    nets = list(dict.fromkeys(df[network].astype(str))) if network in df.columns else ["all"]
    for net in nets:
        sub = df[df[network].astype(str) == net] if network in df.columns else df
        groups = [((), sub)] if not others else list(sub.groupby(others, dropna=False))
        for key, cell in groups:
            within = " ".join(f"{k}={v}" for k, v in zip(others, key if isinstance(key, tuple) else (key,)))
            out.append((net, within or "all", cell))
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
    p_adj: float = float("nan")
    correction: str = "holm"

    @property
    def relative(self) -> float:
        return self.effect / self.median_baseline if self.median_baseline else float("nan")

    @property
    def significant(self) -> bool:
        return self.p_adj < 0.05


def knob_effects(df: pd.DataFrame, knobs: list[str], metric: str = "plt_ms", network: str = "link",
                 others: list[str] | None = None, baseline: dict[str, Any] | None = None,
                 correction: str = "holm") -> list[Effect]:
    """Each knob's effect per network and cell, adjusted over the whole table, largest first."""
    others = [o for o in (others or []) if o in df.columns and o not in knobs and o != network]
    rows: list[Effect] = []
    for net, within, cell in _cells(df, network, others):
        for knob in knobs:
            levels = list(dict.fromkeys(cell[knob].dropna()))
            if len(levels) < 2:
                continue
            base = _base(cell, knob, baseline)
            # The other knobs at their baseline: one factor at a time, as far as the data allow.
            held = cell
            for k2 in knobs:
                if k2 != knob and held[k2].nunique() > 1:
                    at_base = held[held[k2] == _base(held, k2, baseline)]
                    if at_base[knob].nunique() > 1:
                        held = at_base
            xa = held[held[knob] == base][metric].dropna().tolist()
            for lv in [v for v in levels if v != base]:
                xb = held[held[knob] == lv][metric].dropna().tolist()
                if not xa or not xb:
                    continue
                d, lo, hi = median_diff_ci(xa, xb)
                rows.append(Effect(net, within, knob, base, lv, len(xa), len(xb), float(np.median(xa)), d, lo, hi,
                                   mann_whitney_p(xa, xb), correction=correction))
    adj = adjust([r.p for r in rows], correction)
    rows = [Effect(**{**r.__dict__, "p_adj": a}) for r, a in zip(rows, adj)]
    return sorted(rows, key=lambda r: -abs(r.relative) if not math.isnan(r.relative) else 0)


@dataclass(frozen=True)
class FactorialEffect:
    network: str
    within: str
    term: str
    aliases: str
    #: The levels coded -1 (the baseline) and +1, for a main effect ("" for an interaction).
    minus: str
    plus: str
    effect: float
    ci_low: float
    ci_high: float
    p: float
    #: Its place by size within its network and cell (1: the largest).
    rank: int = 0
    p_adj: float = float("nan")
    correction: str = "holm"

    @property
    def significant(self) -> bool:
        return self.p_adj < 0.05


@dataclass(frozen=True)
class _Fit:
    """A least-squares fit of a metric on coded two-level columns."""

    coef: np.ndarray
    cov: np.ndarray
    dof: int
    kept: list[tuple[str, np.ndarray, list[str]]]


def _coded(cell: pd.DataFrame, factors: list[str], baseline: dict[str, Any] | None
           ) -> dict[str, tuple[np.ndarray, Any, Any]]:
    """Each two-level factor's column coded -1 at its baseline, +1 at its other level."""
    out = {}
    for f in factors:
        levels = list(dict.fromkeys(cell[f]))
        if len(levels) != 2:
            continue
        base = _base(cell, f, baseline)
        other = levels[1] if levels[0] == base else levels[0]
        out[f] = (np.where(cell[f] == base, -1.0, 1.0), base, other)
    return out


def _fit(y: np.ndarray, terms: list[tuple[str, np.ndarray]]) -> _Fit:
    # Aliased columns (identical or opposite) are one effect: fit the first, name the rest.
    kept: list[tuple[str, np.ndarray, list[str]]] = []
    for name, col in terms:
        for k in kept:
            if np.array_equal(k[1], col) or np.array_equal(k[1], -col):
                k[2].append(name)
                break
        else:
            kept.append((name, col, []))
    x = np.column_stack([np.ones(len(y))] + [c for _, c, _ in kept])
    coef, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    dof = len(y) - int(rank)
    resid = y - x @ coef
    sigma2 = float(resid @ resid) / dof if dof > 0 else float("nan")
    cov = sigma2 * np.linalg.pinv(x.T @ x)
    return _Fit(coef, cov, dof, kept)


def factorial_effects(df: pd.DataFrame, factors: list[str], metric: str = "plt_ms", network: str = "link",
                      interactions: bool = True, others: list[str] | None = None,
                      baseline: dict[str, Any] | None = None, correction: str = "holm") -> list[FactorialEffect]:
    """Main effects (and two-factor interactions) of two-level factors, per
    network and cell of the other factors, each cell's ranked by size."""
    others = [o for o in (others or []) if o in df.columns and o not in factors and o != network]
    out: list[FactorialEffect] = []
    for net, within, cell in _cells(df, network, others):
        cell = cell.dropna(subset=[metric])
        coded = _coded(cell, factors, baseline)
        if cell.empty or not coded:
            continue
        names = list(coded)
        terms = [(n, coded[n][0]) for n in names]
        if interactions:
            terms += [(f"{a}:{b}", coded[a][0] * coded[b][0]) for a, b in itertools.combinations(names, 2)]
        fit = _fit(cell[metric].to_numpy(dtype=float), terms)
        tcrit = float(sps.t.ppf(0.975, fit.dof)) if fit.dof > 0 else float("nan")
        mine = []
        for j, (name, _, alias) in enumerate(fit.kept, start=1):
            eff = 2 * float(fit.coef[j])
            var = float(fit.cov[j, j])
            se = 2 * math.sqrt(var) if not math.isnan(var) and var >= 0 else float("nan")
            p = float(2 * sps.t.sf(abs(eff / se), fit.dof)) if se and not math.isnan(se) and se > 0 else float("nan")
            minus, plus = (str(coded[name][1]), str(coded[name][2])) if name in coded else ("", "")
            mine.append(FactorialEffect(net, within, name, " = ".join(alias), minus, plus, eff, eff - tcrit * se,
                                        eff + tcrit * se, p, correction=correction))
        mine.sort(key=lambda e: -abs(e.effect))
        out += [FactorialEffect(**{**e.__dict__, "rank": i}) for i, e in enumerate(mine, start=1)]
    adj = adjust([r.p for r in out], correction)
    return [FactorialEffect(**{**r.__dict__, "p_adj": a}) for r, a in zip(out, adj)]


@dataclass(frozen=True)
class Beat:
    """The tuned setting against a default (another protocol's, or its own
    protocol's), judged on trials that did not choose it."""

    default_median: float
    n: int
    #: Tuned minus that default (medians when observed; the model's mean
    #: against the default's mean when predicted), and its 95 % interval.
    diff: float
    diff_low: float
    diff_high: float
    #: Mann-Whitney p (observed) or Welch-style t p (predicted).
    p: float
    beats: bool


#: How a tuned setting is chosen and judged apart: chosen on the trials of
#: some repetitions, judged on the others' (a setting chosen in the same data
#: it is judged on looks better than it is: the lowest of many noisy cells).
SPLIT = "repetition"


@dataclass(frozen=True)
class Tuned:
    network: str
    protocol: str
    default_median: float
    n_default: int
    #: The tuned setting's median (observed best cell) or the model's mean,
    #: and its 95 % interval (the model's only), from the judging trials.
    tuned: float
    tuned_low: float
    tuned_high: float
    tuned_setting: str
    n_tuned: int
    #: "observed best cell" or "main-effects model".
    basis: str
    #: The tuned setting's observed median if it was run (NaN otherwise).
    observed_median: float
    beats: dict[str, Beat]
    #: The tuned setting against its own protocol's default.
    improves: Beat | None = None
    #: How the setting was chosen and judged: "chosen on repetitions ..., judged on ..."
    #: (out of sample), or "in sample" when asked for (``split=None``).
    judged: str = "in sample"


def tuned_against_default(df: pd.DataFrame, knobs: list[str], metric: str = "plt_ms", network: str = "link",
                          protocol: str = "protocol", baseline: dict[str, Any] | None = None,
                          fractional: bool = False, split: str | None = SPLIT) -> list[Tuned]:
    """Per network and protocol: every knob at its baseline against the tuned
    setting; and the tuned protocol against each other protocol at its defaults.

    The setting is chosen on one half of the trials and judged on the other
    (``split = "repetition"``: chosen on the odd repetitions, judged on the
    even ones), so the verdict carries no selection bias; ``split=None``
    chooses and judges on the same trials (biased towards the tuned side,
    kept to show how much). With fewer than two repetitions nothing can be
    judged out of sample and no verdict is given.

    An observed best cell beats a default with a lower median and a
    Mann-Whitney p < 0.05. The model's tuned mean beats it when the 95 %
    interval of (model mean - the default's mean) lies below zero, the
    interval combining the model's standard error with the default trials'
    (degrees of freedom: the smaller of the two)."""
    out: list[Tuned] = []
    knobs = [k for k in knobs if k in df.columns and df[k].notna().any()]  # a knob no valid trial set: none
    if not knobs:
        return out
    base = {k: _base(df, k, baseline) for k in knobs}
    for net, _, sub in _cells(df, network, []):
        if split is None:
            choose, judge, judged = sub, sub, "in sample"
        else:
            reps = sorted(sub["rep"].dropna().unique()) if "rep" in sub.columns else []
            if len(reps) < 2:
                continue
            odd = sub["rep"].isin(reps[0::2])
            choose, judge = sub[odd], sub[~odd]
            judged = (f"chosen on repetitions {', '.join(str(int(r)) for r in reps[0::2])}, judged on "
                      f"{', '.join(str(int(r)) for r in reps[1::2])}")
        defaults: dict[str, list[float]] = {}
        tuned: dict[str, _Best] = {}
        for proto, g in judge.groupby(protocol):
            g = g.dropna(subset=[metric])
            at_base = g
            for k, v in base.items():
                at_base = at_base[at_base[k] == v]
            defaults[str(proto)] = at_base[metric].tolist()
        for proto, g in choose.groupby(protocol):
            g = g.dropna(subset=[metric])
            pick = _model_best(g, knobs, metric, baseline) if fractional else _observed_best(g, knobs, metric)
            if pick is None:
                continue
            h = judge[judge[protocol] == proto].dropna(subset=[metric])
            best = (_model_at(h, knobs, metric, baseline, pick.setting) if fractional
                    else _observed_at(h, knobs, metric, pick.setting))
            if best is not None:
                tuned[str(proto)] = best
        for proto, b in tuned.items():
            beats = {other: _against(b, d) for other, d in defaults.items() if other != proto and d}
            mine = defaults.get(proto) or []
            improves: Beat | None = None
            if any(base.get(k) != v for k, v in b.setting):
                if fractional:  # the model's contrast of the two settings, on the judging half
                    h = judge[judge[protocol] == proto].dropna(subset=[metric])
                    improves = _model_contrast(h, metric, baseline, b.setting, base, mine)
                elif mine:
                    improves = _against(b, mine)
            out.append(Tuned(net, proto, float(np.median(mine)) if mine else float("nan"), len(mine), b.value,
                             b.low, b.high, b.label, len(b.xs), b.basis, b.observed, beats, improves, judged))
    return out


@dataclass(frozen=True)
class _Best:
    value: float
    low: float
    high: float
    label: str
    #: The trials behind an observed value (the observed best cell's, or the model's setting's if run).
    xs: list[float]
    basis: str
    observed: float
    se: float = float("nan")
    dof: int = 0
    #: Each knob's level in the setting.
    setting: tuple[tuple[str, Any], ...] = ()


def _against(b: _Best, default: list[float]) -> Beat:
    med = float(np.median(default))
    if b.basis == "observed best cell":
        d, lo, hi = median_diff_ci(default, b.xs)
        p = mann_whitney_p(b.xs, default)
        return Beat(med, len(default), d, lo, hi, p, b.value < med and p < 0.05)
    mean = float(np.mean(default))
    var = float(np.var(default, ddof=1)) / len(default) if len(default) > 1 else float("nan")
    se = math.sqrt(b.se ** 2 + var) if not math.isnan(var) else float("nan")
    diff = b.value - mean
    if math.isnan(se) or se <= 0 or b.dof < 1:
        return Beat(med, len(default), diff, float("nan"), float("nan"), float("nan"), False)
    # Welch-Satterthwaite: the degrees of freedom of the two variances together.
    dof = se ** 4 / (b.se ** 4 / b.dof + var ** 2 / (len(default) - 1))
    return _verdict(med, len(default), diff, se, dof)


def _verdict(med: float, n: int, diff: float, se: float, dof: float) -> Beat:
    """A difference with its standard error: beats when its 95 % interval is below zero."""
    if math.isnan(se) or se <= 0 or dof < 1:
        return Beat(med, n, diff, float("nan"), float("nan"), float("nan"), False)
    t = float(sps.t.ppf(0.975, dof))
    p = float(2 * sps.t.sf(abs(diff / se), dof))
    return Beat(med, n, diff, diff - t * se, diff + t * se, p, diff + t * se < 0)


def _label(knobs: list[str], values: Any) -> str:
    return " ".join(f"{k}={v}" for k, v in zip(knobs, values if isinstance(values, tuple) else (values,)))


def _observed_best(g: pd.DataFrame, knobs: list[str], metric: str) -> _Best | None:
    """The observed cell with the lowest median (two trials at least)."""
    best: _Best | None = None
    for key, cell in g.groupby(knobs, dropna=False):
        xs = cell[metric].tolist()
        if len(xs) >= 2 and (best is None or float(np.median(xs)) < best.value):
            med = float(np.median(xs))
            key = key if isinstance(key, tuple) else (key,)
            best = _Best(med, float("nan"), float("nan"), _label(knobs, key), xs, "observed best cell", med,
                         setting=tuple(zip(knobs, key)))
    return best


def _observed_at(g: pd.DataFrame, knobs: list[str], metric: str, setting: tuple[tuple[str, Any], ...]
                 ) -> _Best | None:
    """The cell of ``setting`` as observed in ``g`` (two trials at least)."""
    at = g
    for k, v in setting:
        at = at[at[k] == v]
    xs = at[metric].tolist()
    if len(xs) < 2:
        return None
    med = float(np.median(xs))
    return _Best(med, float("nan"), float("nan"), _label([k for k, _ in setting], tuple(v for _, v in setting)),
                 xs, "observed best cell", med, setting=setting)


def _fit_main(g: pd.DataFrame, knobs: list[str], metric: str, baseline: dict[str, Any] | None
              ) -> tuple[dict[str, tuple[np.ndarray, Any, Any]], _Fit] | None:
    coded = _coded(g, knobs, baseline)
    if not coded:
        return None
    names = list(coded)
    fit = _fit(g[metric].to_numpy(dtype=float), [(n, coded[n][0]) for n in names])
    if len(fit.kept) != len(names) or fit.dof < 1:  # main effects aliased with each other, or no error estimate
        return None
    return coded, fit


def _model_best(g: pd.DataFrame, knobs: list[str], metric: str, baseline: dict[str, Any] | None) -> _Best | None:
    """The main-effects model's best setting (each knob at its better level)."""
    got = _fit_main(g, knobs, metric, baseline)
    if got is None:
        return None
    coded, fit = got
    names = list(coded)
    signs = [-1.0 if fit.coef[j] > 0 else 1.0 for j in range(1, len(names) + 1)]
    setting = tuple((n, coded[n][1] if s < 0 else coded[n][2]) for n, s in zip(names, signs))
    return _model_at(g, knobs, metric, baseline, setting)


def _model_at(g: pd.DataFrame, knobs: list[str], metric: str, baseline: dict[str, Any] | None,
              setting: tuple[tuple[str, Any], ...]) -> _Best | None:
    """The main-effects model's mean at ``setting``, fitted on ``g``, its 95 % interval, and the
    setting's observed median if it was run."""
    got = _fit_main(g, [k for k, _ in setting], metric, baseline)
    if got is None:
        return None
    coded, fit = got
    want = dict(setting)
    c = np.array([1.0, *[-1.0 if want[n] == coded[n][1] else 1.0 for n in coded]])
    at = g
    for n, v in setting:
        at = at[at[n] == v]
    xs = at[metric].tolist()
    mean = float(c @ fit.coef)
    se = math.sqrt(max(0.0, float(c @ fit.cov @ c)))
    t = float(sps.t.ppf(0.975, fit.dof))
    return _Best(mean, mean - t * se, mean + t * se, _label([k for k, _ in setting], tuple(v for _, v in setting)),
                 xs, "main-effects model", float(np.median(xs)) if xs else float("nan"), se, fit.dof, setting)


def _model_contrast(g: pd.DataFrame, metric: str, baseline: dict[str, Any] | None,
                    setting: tuple[tuple[str, Any], ...], base: dict[str, Any], default: list[float]) -> Beat | None:
    """The main-effects model's difference between ``setting`` and the all-baseline setting,
    fitted on ``g``, with its standard error and the model's degrees of freedom."""
    got = _fit_main(g, [k for k, _ in setting], metric, baseline)
    if got is None:
        return None
    coded, fit = got
    want = dict(setting)
    c = np.array([0.0, *[(-1.0 if want[n] == coded[n][1] else 1.0) - (-1.0 if base.get(n) == coded[n][1] else 1.0)
                         for n in coded]])
    diff = float(c @ fit.coef)
    se = math.sqrt(max(0.0, float(c @ fit.cov @ c)))
    med = float(np.median(default)) if default else float("nan")
    return _verdict(med, len(default), diff, se, fit.dof)


def to_frame(rows: list[Any]) -> pd.DataFrame:
    return pd.DataFrame([r.__dict__ for r in rows])
