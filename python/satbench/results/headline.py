"""The answer first: a report's headline for one experiment. Every
combination it ran, with its median PLT, FCP, LCP, TBT and CLS (where the
browser measured them), their 95 % intervals
and trial counts, the fastest marked; then, for each factor, what the data
decides: in each combination of the other factors, the fastest level and by
how much it beat each other level, or that the trials do not decide.

HTTP/3 is labelled with its QUIC stack ("h3 (quinn)"): two stacks are never
pooled under one label. A difference is *decided* when an exact two-sided
Mann-Whitney test gives p < 0.05 and the bootstrap interval of the
difference excludes 0; with 3 trials against 3 no test can reach 5 %, and
the sentence says so rather than claim a direction.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from .stats import bootstrap_median_ci, mann_whitney_p

#: The metrics of the headline table.
HEADLINE = {"plt_ms": "PLT", "fcp_ms": "FCP", "lcp_ms": "LCP", "tbt_ms": "TBT", "cls": "CLS"}
#: The fewest trials on each side for which an exact test can reach p < 0.05 (4 against 4).
MIN_DECIDABLE = 4
ALPHA = 0.05


def labelled(valid: pd.DataFrame, varied: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """The trials with HTTP/3 named by its stack (``protocol`` = "h3 (quinn)"), and the factors that tell
    combinations apart (``quic_stack`` folded into ``protocol``)."""
    df = valid.copy()
    keys = [v for v in varied if v != "quic_stack"]
    if "protocol" in df.columns and "quic_stack" in df.columns:
        h3 = df["protocol"].astype(str).isin(["h3", "mix"])
        df.loc[h3, "protocol"] = df.loc[h3, "protocol"].astype(str) + " (" + df.loc[h3, "quic_stack"].astype(str) + ")"
        if "quic_stack" in varied and "protocol" not in keys:
            keys.append("protocol")
    return df, keys


def faster_pct(a: list[float], b: list[float], n: int = 2000, seed: int = 1) -> tuple[float, float, float]:
    """How much faster ``a`` is than ``b``, in % of b's median, and its percentile-bootstrap 95 %
    interval (resampling each side)."""
    x, y = np.asarray(a, float), np.asarray(b, float)
    pct = float((np.median(y) - np.median(x)) / np.median(y) * 100)
    rng = np.random.default_rng(seed)
    bx = np.median(rng.choice(x, size=(n, len(x))), axis=1)
    by = np.median(rng.choice(y, size=(n, len(y))), axis=1)
    lo, hi = np.quantile((by - bx) / by * 100, [0.025, 0.975])
    return pct, float(lo), float(hi)


def _name(keys: list[str], cell: tuple[Any, ...]) -> str:
    return ", ".join(f"{k} {v}" for k, v in zip(keys, cell)) or "all trials"


def table(df: pd.DataFrame, keys: list[str]) -> tuple[list[str], list[list[Any]]]:
    """The headline table's head and rows: one row per combination, the fastest marked."""
    metrics = [m for m in HEADLINE if m in df.columns and df[m].notna().any()]
    groups = list(df.groupby(keys, dropna=False)) if keys else [((), df)]
    rows, medians = [], []
    for cell, g in groups:
        cell = cell if isinstance(cell, tuple) else (cell,)
        row: list[Any] = [*cell, len(g)]
        for m in metrics:
            xs = g[m].dropna().tolist()
            if xs:
                med, lo, hi = bootstrap_median_ci(xs)
                d = 0 if m.endswith("_ms") else 3  # CLS is a score, not a time
                row.append(f"{med:.{d}f} [{lo:.{d}f}, {hi:.{d}f}]" if len(xs) > 1 else f"{med:.{d}f}")
            else:
                row.append("-")
        rows.append(row)
        plt = g["plt_ms"].dropna() if "plt_ms" in g.columns else pd.Series(dtype=float)
        medians.append(float(plt.median()) if len(plt) else float("inf"))
    if len(rows) > 1 and min(medians) < float("inf"):
        best = medians.index(min(medians))
        rows[best][0] = f"★ {rows[best][0]}"
    return [*keys, "trials", *(f"{HEADLINE[m]}{' (ms)' if m.endswith('_ms') else ''} [95 %]" for m in metrics)], rows


def sentences(df: pd.DataFrame, keys: list[str], metric: str = "plt_ms") -> list[str]:
    """What the data decides about each factor, one sentence per combination of the others."""
    if metric not in df.columns:
        return []
    out = []
    for f in keys:
        if df[f].nunique(dropna=False) < 2:
            continue
        others = [k for k in keys if k != f]
        cells = list(df.groupby(others, dropna=False)) if others else [((), df)]
        for cell, g in cells:
            cell = cell if isinstance(cell, tuple) else (cell,)
            by = {str(lv): s[metric].dropna().tolist() for lv, s in g.groupby(f, dropna=False)}
            by = {lv: xs for lv, xs in by.items() if xs}
            if len(by) < 2:
                continue
            where = f" with {_name(others, cell)}" if others else ""
            best = min(by, key=lambda lv: float(np.median(by[lv])))
            small = [lv for lv, xs in by.items() if len(xs) < MIN_DECIDABLE]
            if small:
                out.append(f"{f}{where}: {best} had the lowest median, but {min(len(xs) for xs in by.values())} "
                           f"trials of a level cannot decide (an exact test needs {MIN_DECIDABLE} against "
                           f"{MIN_DECIDABLE}): run more repetitions.")
                continue
            won, open_ = [], []
            for lv, xs in by.items():
                if lv == best:
                    continue
                pct, lo, hi = faster_pct(by[best], xs)
                p = mann_whitney_p(by[best], xs)
                d = 1 if hi - lo < 2 else 0  # (a narrow interval gets its decimal)
                text = f"{lv} by {pct:.{d}f} % [{lo:.{d}f}, {hi:.{d}f}] ({len(by[best])} and {len(xs)} trials)"
                if p < ALPHA and lo > 0:
                    won.append(text)
                else:
                    open_.append(f"{text}, p = {p:.2f}")
            if won:
                out.append(f"{f}{where}: {best} loaded fastest, faster than " + "; ".join(won) + "."
                           + (f" Not decided against {'; '.join(open_)}." if open_ else ""))
            else:
                out.append(f"{f}{where}: the trials do not decide; {best} had the lowest median, against "
                           + "; ".join(open_) + ".")
    return out


def section(valid: pd.DataFrame, varied: list[str], table_html: Callable[[list[list[Any]], list[str]], str]) -> str:
    """The headline as HTML (``table_html`` renders a table)."""
    df, keys = labelled(valid, varied)
    head, rows = table(df, keys)
    said = sentences(df, keys)
    return ("<h3>The answer</h3><p class='note'>Every combination the experiment ran, valid trials only: "
            "medians with percentile-bootstrap 95 % intervals; ★ marks the fastest page load. Below, what "
            "the page load times decide, factor by factor (exact Mann-Whitney p &lt; 0.05 and an interval "
            "that excludes no difference).</p>" + table_html(rows, head)
            + ("<ul class='answer'>" + "".join(f"<li>{html.escape(s)}</li>" for s in said) + "</ul>"
               if said else "<p class='note'>One combination: nothing to compare.</p>"))


__all__ = ["faster_pct", "labelled", "section", "sentences", "table"]
