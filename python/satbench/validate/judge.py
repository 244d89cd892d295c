"""Each claim's checks evaluated on the stored trials of its study's sets:
the measured figure with a 95 % interval, the trials it used (each once),
and a verdict. Relative differences and values have Student-t intervals
with Welch-Satterthwaite degrees of freedom (:mod:`.intervals`, chosen by
their calibrated coverage: ``satbench validate --calibrate``); where both
sides of a check are the same trials, as study B's HTTP/1.1 and HTTP/2
clients are, each trial's own ratio; trends and spreads keep a percentile
bootstrap (2,000 seeded resamples); a factorial design's main effects have
the t-intervals of their model. The verdicts:

- ``reproduced``: the direction the study gives, and its size (where it
  gives one) inside an interval narrow enough to judge it (no wider than the
  published size);
- ``direction reproduced, size differs``: the direction, with the published
  size outside such an interval;
- ``direction reproduced, size undecided``: the direction, with an interval
  too wide to judge the size;
- ``differs``: the interval excludes the study's direction (or, for "no
  difference", the margin), or a claimed difference measured as none (the
  whole interval within ±5 %, whether or not it holds 0);
- ``inconclusive``: the interval holds no difference and is wider than
  ±5 %: more trials;
- ``not measured``: no trials of the cells the check compares;
- ``holds`` / ``fails``: the physical checks (a failure is the testbed's
  error).
"""

from __future__ import annotations

import fnmatch
import json
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..experiment.factors import FACTORS
from ..model import HEADER_FLOOR_PCT
from ..results.analysis import FactorialEffect, factorial_effects, is_knob
from . import intervals
from .claims import Check, Claim

BOOTSTRAP = 2000
#: A directional claim whose whole interval lies within ±this many % found no difference: it differs.
NO_EFFECT_PCT = 5.0
#: A size is judged only when the interval is at most this many times as wide as the published size.
SIZE_WIDTH = 1.0
VERDICTS = ("reproduced", "direction reproduced, size differs", "direction reproduced, size undecided", "differs",
            "inconclusive", "not measured", "holds", "fails")


@dataclass(frozen=True)
class Result:
    claim: Claim
    check: Check
    verdict: str
    measured: str
    value: float | None = None
    low: float | None = None
    high: float | None = None
    #: Trials the check used, and the cells they formed.
    n: int = 0
    cells: int = 0
    #: Why a pooled check is inconclusive when its trials' own cells are not: which lie on which side;
    #: or the cells whose own interval reverses a pooled direction.
    split: str = ""
    #: A directional check's two-sided p of no difference (before any correction), and after Holm's.
    p: float | None = None
    p_holm: float | None = None
    #: The keys of the trials whose cells the check reads (:func:`keys_of`), and the sequential look
    #: that decided it (1: the first; 0: not a sequential run).
    keys: frozenset[str] = frozenset()
    look: int = 0

    @property
    def failed(self) -> bool:
        """A physical check failed: the testbed's error."""
        return self.verdict == "fails"


def _norm(v: Any) -> Any:
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True)
    return v


def _match(col: pd.Series, want: Any) -> pd.Series:
    """Where ``col`` is ``want`` (a value, a list of values, a pattern with ``*``, or ``!value``: anything but)."""
    if isinstance(want, str) and want.startswith("!"):
        return ~_match(col, want[1:])
    values = want if isinstance(want, list) else [want]
    out = pd.Series(False, index=col.index)
    for w in values:
        if isinstance(w, str) and "*" in w:
            out |= col.map(lambda x, w=w: isinstance(x, str) and fnmatch.fnmatchcase(x, w))
        elif isinstance(w, bool) or isinstance(w, str):
            out |= col.map(lambda x, w=w: x == w)
        elif isinstance(w, (int, float)):
            out |= col.map(lambda x, w=w: isinstance(x, (int, float)) and not isinstance(x, bool)
                           and math.isclose(float(x), float(w), rel_tol=1e-9, abs_tol=1e-12))
        else:
            out |= col.map(lambda x, w=w: _norm(x) == _norm(w))
    return out


def select(df: pd.DataFrame, where: dict[str, Any]) -> pd.DataFrame:
    """The trials whose factors match every filter (``metric`` is not a filter)."""
    sel = df
    for k, v in where.items():
        if k == "metric":
            continue
        if k not in sel.columns:
            return sel.iloc[0:0]
        sel = sel[_match(sel[k], v)]
    return sel


def _series(df: pd.DataFrame, pair: tuple[str, ...], metric: str) -> dict[tuple[Any, ...], pd.Series]:
    """The metric's values per cell of the ``pair`` factors, indexed by their trials' rows; ``a - b``
    names a difference of two metrics (a phase of cumulative timings: connect_ms - dns_ms)."""
    if " - " in metric:
        first, second = (m.strip() for m in metric.split(" - ", 1))
        if first not in df.columns or second not in df.columns:
            return {}
        df = df.assign(**{metric: df[first] - df[second]})
    keys = [p for p in pair if p in df.columns]
    d = df.dropna(subset=[metric]) if metric in df.columns else df.iloc[0:0]
    if d.empty:
        return {}
    if not keys:
        return {(): d[metric].astype(float)}
    return {tuple(_norm(x) for x in (k if isinstance(k, tuple) else (k,))): g[metric].astype(float)
            for k, g in d.groupby(keys, dropna=False)}


def _cells(df: pd.DataFrame, pair: tuple[str, ...], metric: str) -> dict[tuple[Any, ...], np.ndarray]:
    """The metric's values per cell of the ``pair`` factors (see :func:`_series`)."""
    return {k: s.to_numpy(dtype=float) for k, s in _series(df, pair, metric).items()}


def _trials(*cells: dict[tuple[Any, ...], pd.Series]) -> int:
    """How many trials the cells hold: a trial in both sides of a check (two metrics of one trial,
    such as study B's HTTP/1.1 and HTTP/2 clients) counts once."""
    return len(set().union(*(s.index for c in cells for s in c.values())))


def _bootstrap(groups: list[np.ndarray], stat: Callable[[list[np.ndarray]], float], seed: int = 1
               ) -> tuple[float, float, float]:
    """The statistic and its percentile interval (95 %, or a sequential look's level), resampling each
    group on its own."""
    rng = np.random.default_rng(seed)
    value = stat(groups)
    boots = [stat([g[rng.integers(0, len(g), len(g))] for g in groups]) for _ in range(BOOTSTRAP)]
    tail = (1 - intervals.level()) / 2
    lo, hi = np.nanquantile(boots, [tail, 1 - tail])
    return value, float(lo), float(hi)


def _paired(a: pd.DataFrame, b: pd.DataFrame, ma: str, mb: str) -> bool:
    """Whether a check's two sides are the same trials (two metrics of each, as study B's client groups)."""
    return not a.empty and a.index.equals(b.index) and ma != mb


def _pairs(a: dict[tuple[Any, ...], pd.Series], b: dict[tuple[Any, ...], pd.Series]
           ) -> tuple[dict[tuple[Any, ...], pd.Series], dict[tuple[Any, ...], pd.Series]]:
    """Both sides cut to the trials that have both metrics, cell by cell, in the same order."""
    a = {k: a[k].loc[both] for k in a if k in b and len(both := a[k].index.intersection(b[k].index))}
    return a, {k: b[k].loc[a[k].index] for k in a}


def _relative(a: dict[tuple[Any, ...], pd.Series], b: dict[tuple[Any, ...], pd.Series], paired: bool = False
              ) -> tuple[float, float, float, int, int, float] | None:
    """The mean over cells of each cell's relative difference of means, in %. ``paired``: both
    sides are the same trials (two metrics of each), resampled as pairs, those that have both
    metrics; otherwise each side on its own."""
    if paired:
        a, b = _pairs(a, b)
    keys = [k for k in a if k in b]
    got = intervals.relative([a[k].to_numpy(dtype=float) for k in keys], [b[k].to_numpy(dtype=float) for k in keys],
                             paired) if keys else None
    if got is None:
        return None
    v, lo, hi, n, p = got
    return v, lo, hi, _trials({k: a[k] for k in keys}, {k: b[k] for k in keys}), n, p


def _reversed(a: dict[tuple[Any, ...], pd.Series], b: dict[tuple[Any, ...], pd.Series], paired: bool,
              want: int) -> list[str]:
    """The cells of a pooled check whose own interval lies wholly against the direction ``want``."""
    if paired:
        a, b = _pairs(a, b)
    out = []
    for k in [k for k in a if k in b]:
        got = intervals.relative([a[k].to_numpy(dtype=float)], [b[k].to_numpy(dtype=float)], paired)
        if got is not None and (got[1] > 0 if want < 0 else got[2] < 0):
            out.append(f"{'/'.join(map(str, k)) or 'all'} {got[0]:+.1f} % [{got[1]:+.1f}, {got[2]:+.1f}]")
    return out


def _sides(df: pd.DataFrame, claim: Claim, check: Check) -> tuple[pd.DataFrame, pd.DataFrame, str, str]:
    a = select(df, {**claim.where, **check.a})
    b = select(df, {**claim.where, **check.b})
    ma = str(check.a.get("metric") or check.metric or claim.metric)
    mb = str(check.b.get("metric") or check.metric or claim.metric)
    return a, b, ma, mb


def keys_of(df: pd.DataFrame, claim: Claim, check: Check) -> frozenset[str]:
    """The keys of the trials (cells) a check reads: what a sequential run repeats while the check is
    undecided."""
    if "key" not in df.columns:
        return frozenset()
    if check.kind == "largest_effect":
        sides = [{k: v for k, v in check.a.items() if k not in check.knobs}]
    else:
        sides = [side for side in (check.a, check.b, check.c) if side] or [{}]
    return frozenset(str(k) for side in sides for k in select(df, {**claim.where, **side})["key"])


def _fmt(v: float, lo: float, hi: float, unit: str) -> str:
    return f"{v:+.1f} {unit} [{lo:+.1f}, {hi:+.1f}]" if unit == "%" else f"{v:.3g} [{lo:.3g}, {hi:.3g}] {unit}"


def evaluate(df: pd.DataFrame, claim: Claim, check: Check) -> Result:
    """One check of a claim on the valid trials ``df`` of its study (every study's, for physical checks)."""
    def none(why: str = "no trials of these cells") -> Result:
        return Result(claim, check, "not measured", why)

    if check.kind == "bound":
        return _bound(df, claim, check)
    if check.kind == "floor":
        return _floor(df, claim, check)
    if check.kind in ("relative", "similar"):
        a, b, ma, mb = _sides(df, claim, check)
        paired = _paired(a, b, ma, mb)  # the same trials on both sides: resampled as pairs
        got = _relative(_series(a, check.pair, ma), _series(b, check.pair, mb), paired)
        if got is None:
            return none()
        v, lo, hi, n, cells, p = got
        text = _fmt(v, lo, hi, "%")
        if check.kind == "similar":
            m = check.margin
            verdict = ("reproduced" if -m <= lo and hi <= m else "differs" if hi < -m or lo > m else "inconclusive")
            return Result(claim, check, verdict, text + f" (no difference: within ±{m:g} %)", v, lo, hi, n, cells)
        want = -1 if (check.published is not None and check.published < 0) or check.direction == "lower" else 1
        verdict = _directional(v, lo, hi, want, check.published, check.precision)
        # A pooled direction holds only if no cell of its own decisively reverses it.
        against = (_reversed(_series(a, check.pair, ma), _series(b, check.pair, mb), paired, want)
                   if cells > 1 and verdict.startswith(("reproduced", "direction reproduced")) else [])
        if against:
            verdict = "inconclusive"
        split = ("cells reversed: " + "; ".join(against[:4]) + (f" and {len(against) - 4} more" if len(against) > 4
                                                              else "")) if against else ""
        return Result(claim, check, verdict, text, v, lo, hi, n, cells, split, p)
    if check.kind == "value":
        a = select(df, {**claim.where, **check.a})
        metric = str(check.a.get("metric") or check.metric or claim.metric)
        by_cell = _cells(a, check.pair, metric)
        if not by_cell:
            return none()
        groups = list(by_cell.values())
        got_mean = intervals.mean(groups)
        if got_mean is None:
            return none("no cell with two trials")
        v, lo, hi = got_mean
        p = float(check.published if check.published is not None else math.nan)
        if check.relation == "at least":
            verdict = "reproduced" if lo >= p else "differs" if hi < p else "inconclusive"
        elif check.relation == "between":
            top = float(check.upper if check.upper is not None else math.nan)
            verdict = ("reproduced" if p <= lo and hi <= top else "differs" if hi < p or lo > top
                       else "inconclusive")
        elif check.relation == "at most":
            verdict = "reproduced" if hi <= p else "differs" if lo > p else "inconclusive"
        else:  # the published figure as rounded: an interval of its own
            verdict = "reproduced" if lo <= p + check.precision and p - check.precision <= hi else "differs"
        split = _split(a, metric, p, check.pair) if verdict == "inconclusive" else ""
        return Result(claim, check, verdict, _fmt(v, lo, hi, _unit(metric)), v, lo, hi,
                      sum(len(g) for g in groups), len(groups), split)
    if check.kind == "trend":
        a = select(df, {**claim.where, **check.a})
        metric = str(check.a.get("metric") or check.metric or claim.metric)
        if check.x is None or check.x not in a.columns or metric not in a.columns:
            return none()
        d = a.dropna(subset=[metric])
        if check.order:  # levels ranked as the check orders them; others left out
            rank = {_norm(v): i for i, v in enumerate(check.order)}
            d = d.loc[d[check.x].map(lambda v: _norm(v) in rank).astype(bool)]
            d = d.assign(**{check.x: d[check.x].map(lambda v: rank[_norm(v)])})
        if d[check.x].nunique() < 2:
            return none("fewer than two levels of " + check.x)
        x, y = d[check.x].astype(float).to_numpy(), d[metric].astype(float).to_numpy()
        idx = np.arange(len(x))

        def rho(gs: list[np.ndarray]) -> float:
            i = gs[0].astype(int)
            with warnings.catch_warnings():  # a resample of one level has no correlation: NaN, left out
                warnings.simplefilter("ignore")
                return float(pd.Series(x[i]).corr(pd.Series(y[i]), method="spearman"))

        v, lo, hi = _bootstrap([idx], rho)
        want = -1 if check.direction == "falls" else 1
        verdict = "reproduced" if (hi < 0 if want < 0 else lo > 0) else "differs" if (lo > 0 if want < 0 else hi < 0) \
            else "inconclusive"
        return Result(claim, check, verdict, f"Spearman's ρ {v:+.2f} [{lo:+.2f}, {hi:+.2f}] with {check.x}", v, lo,
                      hi, len(x), int(d[check.x].nunique()))
    if check.kind == "share":
        return _share(df, claim, check)
    if check.kind == "spread":
        a, b, ma, mb = _sides(df, claim, check)
        sa, sb = _series(a, check.pair, ma), _series(b, check.pair, mb)
        paired = _paired(a, b, ma, mb)  # the same trials on both sides: resampled as pairs, as in _relative
        if paired:
            sa, sb = _pairs(sa, sb)
        keys = [k for k in sa if k in sb and len(sa[k]) > 1 and len(sb[k]) > 1]
        if not keys:
            return none()
        n = len(keys)

        def cv(g: np.ndarray) -> float:
            return float(g.std(ddof=1) / g.mean())

        def ratio(cva: float, cvb: float) -> float:
            return cva / cvb if cvb > 0 else math.nan

        if paired:
            pairs = [np.column_stack([sa[k].to_numpy(dtype=float), sb[k].to_numpy(dtype=float)]) for k in keys]

            def cv_pairs(gs: list[np.ndarray]) -> float:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return float(np.nanmean([ratio(cv(g[:, 0]), cv(g[:, 1])) for g in gs]))

            v, lo, hi = _bootstrap(pairs, cv_pairs)
        else:
            groups = [sa[k].to_numpy(dtype=float) for k in keys] + [sb[k].to_numpy(dtype=float) for k in keys]

            def cv_ratio(gs: list[np.ndarray]) -> float:
                with warnings.catch_warnings():  # a resample with no spread on one side: NaN, left out
                    warnings.simplefilter("ignore")
                    return float(np.nanmean([ratio(cv(gs[i]), cv(gs[n + i])) for i in range(n)]))

            v, lo, hi = _bootstrap(groups, cv_ratio)
        want = 1 if check.direction != "lower" else -1
        verdict = ("reproduced" if (lo > 1 if want > 0 else hi < 1) else
                   "differs" if (hi < 1 if want > 0 else lo > 1) else "inconclusive")
        return Result(claim, check, verdict, f"coefficient of variation × {v:.2f} [{lo:.2f}, {hi:.2f}]", v, lo, hi,
                      _trials({k: sa[k] for k in keys}, {k: sb[k] for k in keys}), n)
    if check.kind == "largest_effect":
        return _largest(df, claim, check)
    raise ValueError(check.kind)


#: How sure the "cells apart" note must be that a check's cells differ (one-way ANOVA's p below this).
SPLIT_P = 0.01


def _split(df: pd.DataFrame, metric: str, published: float, pair: tuple[str, ...]) -> str:
    """Why a value check's pooled trials straddle the published figure, when they do because they mix
    cells of the factors that vary among them (besides the check's own ``pair``, whose cells it
    already keeps apart): "" unless the cells of two trials or more differ from each other (one-way ANOVA, p below
    :data:`SPLIT_P`: chance alone says so once in a hundred checks) and some cell's every trial lies
    below the figure and another's every trial above it; then the two sides, with their cells."""
    if math.isnan(published) or metric not in df.columns:
        return ""
    d = df.dropna(subset=[metric])
    keys = [f for f in FACTORS if f in d.columns and f not in pair]
    d = d.assign(**{f: d[f].map(_norm) for f in keys})  # a factor's level may be a table (clients)
    keys = [f for f in keys if d[f].nunique(dropna=False) > 1]
    if not keys:
        return ""
    cells = []
    for k, g in d.groupby(keys, dropna=False):
        if len(g) >= 2:
            name = " ".join(f"{f}={x}" for f, x in zip(keys, k if isinstance(k, tuple) else (k,)))
            cells.append((name, g[metric].to_numpy(dtype=float)))
    if len(cells) < 2 or not _anova_p([v for _, v in cells]) < SPLIT_P:  # NaN too
        return ""
    below = [(n, v) for n, v in cells if v.max() < published]
    above = [(n, v) for n, v in cells if v.min() > published]
    if not below or not above:
        return ""

    def side(group: list[tuple[str, np.ndarray]], where: str) -> str:
        vals = np.concatenate([v for _, v in group])
        told = "; ".join(n for n, _ in group) if len(group) <= 3 else f"{len(group)} cells"
        return f"{len(vals)} trials {where} {published:g} ({vals.min():.3g}-{vals.max():.3g}: {told})"
    return "cells apart: " + side(below, "below") + ", " + side(above, "above")


def _anova_p(groups: list[np.ndarray]) -> float:
    """One-way ANOVA's p-value that the groups share a mean; 0 when they differ and none varies within."""
    from scipy import stats  # noqa: PLC0415 - loaded only when a check is inconclusive

    within = sum(float(((g - g.mean()) ** 2).sum()) for g in groups)
    if within == 0.0:
        return 0.0 if len({float(g.mean()) for g in groups}) > 1 else 1.0
    return float(stats.f_oneway(*groups).pvalue)


def _unit(metric: str) -> str:
    return "ms" if metric.endswith("_ms") else "RTT" if metric.endswith("_rtt") else ""


def _directional(v: float, lo: float, hi: float, want: int, published: float | None, precision: float = 0.0
                 ) -> str:
    # An interval tight around nothing is evidence of no difference, whether or not it holds 0 (a
    # claimed difference measured as none differs).
    if -NO_EFFECT_PCT < lo and hi < NO_EFFECT_PCT:
        return "differs"
    if lo <= 0 <= hi:
        return "inconclusive"
    if (v > 0) != (want > 0):
        return "differs"
    if published is None:
        return "reproduced"
    if not (lo <= published + precision and published - precision <= hi):
        return "direction reproduced, size differs"
    # The size inside the interval is reproduced only by an interval narrow enough to tell it from no
    # effect and from twice itself: at most as wide as the published size (SIZE_WIDTH). A wider one
    # would hold it because it holds much else.
    if hi - lo > SIZE_WIDTH * abs(published):
        return "direction reproduced, size undecided"
    return "reproduced"


def _largest(df: pd.DataFrame, claim: Claim, check: Check) -> Result:
    """The knob whose change from the baseline moves the metric most: one factor at a time, or,
    where the trials vary several knobs at once (a two-level factorial design, as study D's full
    set), by the design's main effects (:func:`_largest_factorial`)."""
    if (factorial := _largest_factorial(df, claim, check)) is not None:
        return factorial
    base = select(df, {**claim.where, **check.a})  # every knob at its baseline level
    metric = check.metric or claim.metric
    effects: dict[str, tuple[float, float, float]] = {}
    n = len(base)
    for k in check.knobs:
        others = {o: v for o, v in check.a.items() if o != k}
        moved = select(df, {**claim.where, **others})
        if k not in moved.columns or k not in check.a:
            continue
        moved = moved[~_match(moved[k], check.a[k])]
        got = _relative(_series(moved, (), metric), _series(base, (), metric))
        if got is not None:
            v, lo, hi, used, _, _ = got
            effects[k] = (abs(v), min(abs(lo), abs(hi)) if lo * hi > 0 else 0.0, max(abs(lo), abs(hi)))
            n += used - len(base)
    if check.knob not in effects or len(effects) < 2:
        return Result(claim, check, "not measured", "the knobs' one-at-a-time changes are not all in the data")
    ranked = sorted(effects.items(), key=lambda kv: -kv[1][0])
    (top, (size, low, high)), rest = ranked[0], ranked[1:]
    text = ", ".join(f"{k} {e[0]:.1f} % [{e[1]:.1f}, {e[2]:.1f}]" for k, e in ranked)
    # As for a factorial design: the first knob's interval apart from every other one's (reproduced),
    # or, another knob first, from the check's knob's (differs).
    if top == check.knob:
        verdict = "reproduced" if all(low > e[2] for _, e in rest) else "inconclusive"
    else:
        verdict = "differs" if low > effects[check.knob][2] else "inconclusive"
    return Result(claim, check, verdict, f"|effect| on the mean [95 % interval]: {text}", size, low, high, n,
                  len(effects))


def _largest_factorial(df: pd.DataFrame, claim: Claim, check: Check) -> Result | None:
    """The largest main effect of a two-level factorial design (None if no set's trials vary
    several knobs at once: the one-at-a-time comparison applies). The design is one set's trials
    (one ``experiment``) whose knobs all have two levels; its main effects come from a
    main-effects model with 95 % t-intervals, signed, in the metric's unit. The check's knob
    first, its interval apart from every other one's, is reproduced; another knob first, apart
    from the check's, differs; anything else is inconclusive."""
    fixed = {k: v for k, v in check.a.items() if k not in check.knobs}
    metric = check.metric or claim.metric
    sel = select(df, {**claim.where, **fixed})
    if metric not in sel.columns or check.knob is None:
        return None
    baseline = {k: v for k, v in check.a.items() if k in check.knobs}
    sets = [g for _, g in sel.groupby("experiment")] if "experiment" in sel.columns else [sel]
    for cell in sets:
        cell = cell.dropna(subset=[metric])
        knobs = [c for c in cell.columns if is_knob(c) and cell[c].notna().all() and cell[c].nunique() == 2]
        offs = [(~_match(cell[k], baseline[k])).astype(int) for k in knobs if k in baseline]
        if check.knob not in knobs or len(offs) < 2 or int(pd.concat(offs, axis=1).sum(axis=1).max()) < 2:
            continue  # not this set's design, or its knobs change one at a time
        effects = factorial_effects(cell, knobs, metric, network="none",  # no column "none": one cell
                                    interactions=False, baseline={k: baseline[k] for k in baseline if k in knobs})
        mine = next((e for e in effects if e.term == check.knob), None)
        if mine is None or len(effects) < 2:
            return Result(claim, check, "not measured", f"{check.knob}'s main effect is not estimable here")
        top, rest = effects[0], effects[1:]

        def apart(a: FactorialEffect, b: FactorialEffect) -> bool:
            return a.ci_low * a.ci_high > 0 and min(abs(a.ci_low), abs(a.ci_high)) > max(abs(b.ci_low),
                                                                                         abs(b.ci_high))

        if top.term == check.knob:
            verdict = "reproduced" if all(apart(top, e) for e in rest) else "inconclusive"
        else:
            verdict = "differs" if apart(top, mine) else "inconclusive"
        unit = _unit(metric)
        text = ", ".join(f"{e.term} {e.minus} to {e.plus}: {e.effect:+.0f} {unit} [{e.ci_low:+.0f}, "
                         f"{e.ci_high:+.0f}]" for e in effects[:3])
        return Result(claim, check, verdict, f"main effects ({len(effects)} knobs, largest first): {text}",
                      top.effect, top.ci_low, top.ci_high, len(cell), len(effects))
    return None


def _share(df: pd.DataFrame, claim: Claim, check: Check) -> Result:
    """How much of the change from ``c`` to ``b`` the side ``a`` gives back, per cell of ``pair``,
    against the published share (``at least`` or ``at most``)."""
    metric = check.metric or claim.metric
    sides = [_cells(select(df, {**claim.where, **side}), check.pair, metric) for side in (check.a, check.b, check.c)]
    keys = [k for k in sides[0] if all(k in s for s in sides[1:])]
    got = intervals.share(*([s[k] for k in keys] for s in sides)) if keys else None
    if got is None:
        return Result(claim, check, "not measured", "no cell with two trials on each of the three sides")
    v, lo, hi, cells = got
    p = float(check.published if check.published is not None else math.nan)
    if check.relation == "at most":
        verdict = "reproduced" if hi <= p else "differs" if lo > p else "inconclusive"
    else:
        verdict = "reproduced" if lo >= p else "differs" if hi < p else "inconclusive"
    n = sum(len(s[k]) for s in sides for k in keys)
    return Result(claim, check, verdict, f"share {v:.2f} [{lo:.2f}, {hi:.2f}]", v, lo, hi, n, cells)


def _bound(df: pd.DataFrame, claim: Claim, check: Check) -> Result:
    """Loads below their bound: stored ones (a trial the runner did not fail) and those the runner
    failed for it (as a harness error), each trial once."""
    if df.empty or "lower_bound_ms" not in df.columns:
        return Result(claim, check, "not measured", "no trial measured a load")
    bad = pd.Series(False, index=df.index)
    if "reason" in df.columns:
        bad |= df["reason"].fillna("").str.contains("below the physical lower bound")
    for name in ("plt_ms", "last_object_ms"):
        if name in df.columns:
            bad |= (df[name] < df["lower_bound_ms"] - 2.0).fillna(False)
    measured = int(df["lower_bound_ms"].notna().sum())
    n = int(bad.sum())
    return Result(claim, check, "fails" if n else "holds", f"{n} of {measured} loads below their lower bound",
                  float(n), None, None, measured, 1)


def _floor(df: pd.DataFrame, claim: Claim, check: Check) -> Result:
    if "overhead_pct" not in df.columns:
        return Result(claim, check, "not measured", "no trial counted its bytes on the wire")
    d = df.dropna(subset=["overhead_pct"])
    if "status" in d.columns:
        # A load that did not complete delivered part of its page: only valid loads, and those the
        # runner failed for being below the floor, are judged (studies stored before the runner left
        # such loads' overhead out still hold it).
        keep = d["status"] == "valid"
        if "reason" in d.columns:
            keep |= d["reason"].fillna("").str.contains("header floor")
        d = d[keep]
    if d.empty:
        return Result(claim, check, "not measured", "no trial counted its bytes on the wire")
    low = float(d["overhead_pct"].min())
    bad = int((d["overhead_pct"] < HEADER_FLOOR_PCT).sum())
    if "reason" in d.columns:  # the runner fails such a trial as its own error: counted once
        bad = int(((d["overhead_pct"] < HEADER_FLOOR_PCT)
                   | d["reason"].fillna("").str.contains("header floor")).sum())
    return Result(claim, check, "fails" if bad else "holds",
                  f"lowest overhead {low:.2f} % (floor {HEADER_FLOOR_PCT:.2f} %); {bad} of {len(d)} below",
                  low, None, None, len(d), 1)
