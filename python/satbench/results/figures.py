"""The report's figures, drawn with matplotlib as SVG: each written to a file and inlined in the page
(:class:`Figures`); the panels of comparable trials a factor's levels are drawn over (one environment
each, the balanced subset of it); grouped bars of means and medians with their 95 % intervals (over the
trials' lower bounds), and CDFs."""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: figures go to SVG
# Text as SVG text, not glyph outlines: a fraction of the bytes, and searchable.
matplotlib.rcParams["svg.fonttype"] = "none"
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .stats import bootstrap_median_ci, mean_ci  # noqa: E402
from .tables import METRICS, level_order  # noqa: E402

#: Metrics drawn over their trials' lower bounds (bound.py).
FLOORED = ("plt_ms", "last_object_ms")


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


class Figures:
    def __init__(self, out: Path):
        self.dir = out / "figures"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.n = 0
        self.prefix = ""

    def add(self, fig: Any, name: str, caption: str) -> str:
        svg = _svg(fig)
        self.n += 1
        fn = f"{self.n:02d}-{self.prefix}{name}.svg"
        (self.dir / fn).write_text(svg)
        b64 = base64.b64encode(svg.encode()).decode()
        return (f'<figure><img class="fig" alt="{html.escape(caption)}" src="data:image/svg+xml;base64,{b64}">'
                f'<figcaption>{html.escape(caption)} <a href="figures/{fn}">{fn}</a></figcaption></figure>')


#: Factors that set the environment a comparison happens in: figures draw
#: one panel per value of these, never pooling trials across them.
PANEL_FACTORS = ("link", "access")


@dataclass(frozen=True)
class Panel:
    """Trials comparable for one factor: one environment (a panel), and the
    balanced subset of it: the combinations of the other varied factors in
    which every level of the factor appears."""

    title: str
    trials: Any
    used: int
    total: int


def comparable(df: Any, factor: str, varied: list[str]) -> tuple[list[Panel], str]:
    """Panels in which ``factor``'s levels can be compared like with like, and
    a sentence that says how they were chosen."""
    panel_by = [p for p in PANEL_FACTORS if p in varied and p != factor]
    strata = [v for v in varied if v != factor and v not in panel_by]
    groups = list(df.groupby(panel_by, dropna=False)) if panel_by else [((), df)]
    panels = []
    for key, sub in groups:
        key = key if isinstance(key, tuple) else (key,)
        levels = set(sub[factor].dropna().astype(str))
        if len(levels) < 2:
            continue  # the factor does not vary here: nothing to compare
        if strata:
            keep = sub.groupby(strata, dropna=False)[factor].transform(
                lambda x, want=levels: set(x.dropna().astype(str)) == want)
            chosen = sub[keep.astype(bool)]
        else:
            chosen = sub
        if chosen.empty:
            continue
        title = " ".join(f"{k}={v}" for k, v in zip(panel_by, key)) or "all"
        panels.append(Panel(title, chosen, len(chosen), len(sub)))
    how = ""
    if panel_by:
        how += f"One panel per {' and '.join(panel_by)}; "
    if strata:
        how += (f"within each, only the combinations of {', '.join(strata)} in which every level of {factor} "
                "appears (a balanced subset: levels are compared over the same conditions)")
    else:
        how += "all valid trials"
    return panels, how + "."


def _panel_fig(panels: list[Panel], draw: Any, width: float = 4.8) -> Any:
    fig, axes = plt.subplots(1, len(panels), figsize=(max(4.5, width * len(panels)), 3.4), squeeze=False,
                             sharey=True)
    for ax, p in zip(axes[0], panels):
        draw(ax, p.trials)
        ax.set_title(f"{p.title} ({p.used} of {p.total} trials)", fontsize=8)
    return fig


def _bars(ax: Any, df: Any, factor: str, metric: str, hue: str | None = None) -> None:
    """Grouped bars of the mean with its 95 % CI, and the median with its bootstrap CI as a marker."""
    levels = level_order(df[factor])
    hues = level_order(df[hue]) if hue else [None]
    width = 0.8 / len(hues)
    for j, h in enumerate(hues):
        xs, means, lo, hi, meds, mlo, mhi = [], [], [], [], [], [], []
        cells = []
        for i, lv in enumerate(levels):
            cell = df[(df[factor] == lv) & ((df[hue] == h) if hue else True)]
            sel = cell[metric].dropna()
            if sel.empty:
                continue
            cells.append(cell)
            m, a, b = mean_ci(sel.tolist())
            md, ma, mb = bootstrap_median_ci(sel.tolist())
            xs.append(i + (j - (len(hues) - 1) / 2) * width)
            means.append(m)
            lo.append(m - a)
            hi.append(b - m)
            meds.append(md)
            mlo.append(md - ma)
            mhi.append(mb - md)
        label = f"{hue}={h}" if hue else "mean (95 % CI)"
        ax.bar(xs, means, width * 0.9, yerr=[lo, hi], capsize=3, label=label, alpha=0.75)
        if metric in FLOORED:
            _floors(ax, cells, xs, width, legend=j == 0)
        ax.errorbar(xs, meds, yerr=[mlo, mhi], fmt="D", color="black", markersize=4, capsize=2,
                    label="median (95 % CI)" if j == 0 else None)
    ax.set_xticks(range(len(levels)))
    ax.set_xticklabels([str(v) for v in levels], rotation=20 if len(levels) > 4 else 0)
    ax.set_xlabel(factor)
    ax.set_ylabel(METRICS.get(metric, metric))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7)


def _floors(ax: Any, cells: list[Any], xs: list[float], width: float, legend: bool) -> None:
    """Each bar's lower bounds as a floor across it: the physical bound
    (solid) and the window bound (dotted), medians over the bar's trials."""
    for name, style, label in (("lower_bound_ms", "-", "physical lower bound"),
                               ("window_bound_ms", ":", "window bound")):
        first = legend
        for x, cell in zip(xs, cells):
            if name in cell.columns and cell[name].notna().any():
                ax.hlines(float(cell[name].median()), x - width * 0.45, x + width * 0.45, colors="black",
                          linestyles=style, linewidth=1.4, label=label if first else None)
                first = False


def _cdf(ax: Any, df: Any, factor: str, metric: str) -> None:
    for lv in level_order(df[factor]):
        xs = np.sort(df[df[factor] == lv][metric].dropna().to_numpy())
        if len(xs):
            ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=f"{factor}={lv}")
    ax.set_xlabel(METRICS.get(metric, metric))
    ax.set_ylabel("CDF")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


__all__ = ["FLOORED", "PANEL_FACTORS", "Figures", "Panel", "comparable"]
