"""``satbench compare``: did my change help? Two runs (two databases, or two
experiments of one) side by side, combination by combination: each side's
median and trial count, and the change from the first run to the second in %
of the first's median, with its 95 % interval.

A combination is what the report's headline calls one: the levels of the
factors either run varied, HTTP/3 named with its QUIC stack. The change is
*decided* by the headline's rule (:mod:`.headline`): an exact two-sided
Mann-Whitney test gives p < 0.05 and the bootstrap interval of the
difference of medians excludes 0; with fewer than 4 trials a side no exact
test can, and the row says so. Combinations only one run has are listed
apart, never compared.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import InputError
from .headline import ALPHA, MIN_DECIDABLE, faster_pct, labelled
from .read import Results
from .stats import mann_whitney_p


@dataclass(frozen=True)
class Run:
    """One side: a database and, where it holds several, the experiment."""

    db: Path
    experiment: str | None = None

    @classmethod
    def parse(cls, text: str) -> Run:
        """``DB`` or ``DB:EXPERIMENT``."""
        path, _, name = text.partition(":") if not Path(text).is_file() else (text, "", "")
        return cls(Path(path), name or None)

    @property
    def label(self) -> str:
        return f"{self.db.name}:{self.experiment}" if self.experiment else self.db.name


@dataclass(frozen=True)
class Row:
    combination: str
    n_a: int
    median_a: float
    n_b: int
    median_b: float
    #: The second run's median against the first's, in % of the first's, and its 95 % interval.
    change_pct: float
    low: float
    high: float
    p: float

    @property
    def decided(self) -> bool:
        return min(self.n_a, self.n_b) >= MIN_DECIDABLE and self.p < ALPHA and (self.low > 0 or self.high < 0)


def load(run: Run) -> tuple[pd.DataFrame, list[str], str]:
    """The run's valid trials (HTTP/3 labelled with its stack), the factors it varied, its experiment."""
    with Results(run.db) as r:
        names = r.experiments()
        if run.experiment is None and len(names) != 1:
            raise InputError(f"{run.db}: {len(names)} experiments ({', '.join(names) or 'none'}); name one as "
                             f"{run.db}:EXPERIMENT")
        name = run.experiment or names[0]
        if name not in names:
            raise InputError(f"{run.db}: no experiment {name!r} (it has {', '.join(names) or 'none'})")
        df = r.trials(name)
        varied = [v for v in r.spec(name).get("varied", []) if v in df.columns]
    valid = df[df["status"] == "valid"] if not df.empty else df
    out, keys = labelled(valid, varied)
    return out, keys, name


def _cells(df: pd.DataFrame, keys: list[str], metric: str) -> dict[str, list[float]]:
    if df.empty or metric not in df.columns:
        return {}
    d = df.dropna(subset=[metric])
    if not keys:
        return {"all trials": d[metric].astype(float).tolist()} if len(d) else {}
    d = d.assign(**{k: d[k].map(lambda v: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)
                    for k in keys})
    out = {}
    for cell, g in d.groupby(keys, dropna=False):
        cell = cell if isinstance(cell, tuple) else (cell,)
        out[", ".join(f"{k} {v}" for k, v in zip(keys, cell))] = g[metric].astype(float).tolist()
    return out


def compare(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], metric: str = "plt_ms"
            ) -> tuple[list[Row], list[str], list[str]]:
    """Each combination both runs have, and those only the first or only the second has."""
    ca, cb = _cells(a, keys, metric), _cells(b, keys, metric)
    rows = []
    for name in [n for n in ca if n in cb]:
        xa, xb = ca[name], cb[name]
        faster, lo, hi = faster_pct(xb, xa)  # how much faster b is, in % of a's median
        rows.append(Row(name, len(xa), float(pd.Series(xa).median()), len(xb), float(pd.Series(xb).median()),
                        -faster, -hi, -lo, mann_whitney_p(xa, xb)))
    return rows, [n for n in ca if n not in cb], [n for n in cb if n not in ca]


def keys_of(a_keys: list[str], b_keys: list[str], a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    """The factors either run varied, where both runs have them."""
    return [k for k in dict.fromkeys([*a_keys, *b_keys]) if k in a.columns and k in b.columns]


def format_table(rows: list[Row], only_a: list[str], only_b: list[str], a: str, b: str, metric: str) -> str:
    unit = "ms" if metric.endswith("_ms") else ""
    lines = [f"{metric}: {b} against {a} (median; change in % of {a}'s median, 95 % interval)"]
    width = max([len(r.combination) for r in rows] + [11])
    wa, wb = max(len(a), 18), max(len(b), 18)
    lines.append(f"  {'combination':<{width}}  {a:>{wa}}  {b:>{wb}}  change")
    for r in rows:
        verdict = ("decided" if r.decided else
                   f"not decided: {min(r.n_a, r.n_b)} trials on one side (an exact test needs {MIN_DECIDABLE} a side)"
                   if min(r.n_a, r.n_b) < MIN_DECIDABLE else f"not decided (p = {r.p:.2f})")
        ma, mb = f"{r.median_a:.0f} {unit} ({r.n_a})", f"{r.median_b:.0f} {unit} ({r.n_b})"
        lines.append(f"  {r.combination:<{width}}  {ma:>{wa}}  {mb:>{wb}}  {r.change_pct:+.1f} % "
                     f"[{r.low:+.1f}, {r.high:+.1f}]: {verdict}")
    if only_a:
        lines.append(f"  only in {a}: " + "; ".join(only_a))
    if only_b:
        lines.append(f"  only in {b}: " + "; ".join(only_b))
    if not rows:
        lines.append("  no combination is in both runs")
    return "\n".join(lines) + "\n"


def run(first: Run, second: Run, metric: str = "plt_ms") -> tuple[list[Row], str]:
    """The comparison and its printed table."""
    a, ka, name_a = load(first)
    b, kb, name_b = load(second)
    if metric not in a.columns and metric not in b.columns:
        raise InputError(f"--metric {metric}: neither run stored it")
    rows, only_a, only_b = compare(a, b, keys_of(ka, kb, a, b), metric)
    la = first.label if first.experiment or first.db != second.db else f"{first.db.name}:{name_a}"
    lb = second.label if second.experiment or first.db != second.db else f"{second.db.name}:{name_b}"
    return rows, format_table(rows, only_a, only_b, la, lb, metric)


__all__ = ["Row", "Run", "compare", "format_table", "load", "run"]
