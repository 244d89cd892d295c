"""``satbench bench capture``: what capturing a load's frames costs it. The
same trials with frames on and off (``experiments/findings/visual-capture-
{on,off}.toml`` for Chromium's DevTools screencast, ``visual-capture-firefox-
{on,off}.toml`` for Firefox's WebDriver BiDi screenshots) run into one
database (resumed: what is stored is not run again) and are paired by trial
key and repetition; per link, the median of the paired relative differences
of PLT, FCP and LCP with its 95 % bootstrap interval. The target (issue 26):
under 2 % in the median PLT."""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
from pathlib import Path
from typing import Any

from .. import prereq
from ..experiment import spec
from ..experiment.runner import run as run_experiment
from ..results.stats import bootstrap_median_ci

TARGET_PCT = 2.0
METRICS = ("plt_ms", "fcp_ms", "lcp_ms")
FILES = {"chromium": ("visual-capture-on.toml", "visual-capture-off.toml"),
         "firefox": ("visual-capture-firefox-on.toml", "visual-capture-firefox-off.toml")}


def _values(con: sqlite3.Connection, experiment: str) -> dict[tuple[str, int], dict[str, Any]]:
    """Each valid trial's link and metrics, by (key, repetition)."""
    rows = con.execute(
        "SELECT t.key, t.rep, json_extract(t.factors, '$.link'), m.name, m.value FROM trials t "
        "JOIN experiments e ON e.id = t.experiment_id JOIN metrics m ON m.trial_id = t.id "
        "WHERE e.name = ? AND t.status = 'valid' AND m.name IN (" + ",".join("?" * len(METRICS)) + ")",
        (experiment, *METRICS))
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for key, rep, link, name, value in rows:
        out.setdefault((key, rep), {"link": link})[name] = value
    return out


def paired(db: Path, on: str, off: str) -> dict[str, Any]:
    """Per link and metric: pairs, the medians with and without capture, and
    the median of the paired relative differences (on - off) / off in % with
    its bootstrap interval."""
    con = sqlite3.connect(db)
    try:
        a, b = _values(con, on), _values(con, off)
    finally:
        con.close()
    links: dict[str, dict[str, Any]] = {}
    for k in sorted(a.keys() & b.keys()):
        link = a[k]["link"]
        for m in METRICS:
            x, y = a[k].get(m), b[k].get(m)
            if x is None or y is None or y <= 0:
                continue
            cell = links.setdefault(link, {}).setdefault(m, {"on": [], "off": [], "diff_pct": []})
            cell["on"].append(x)
            cell["off"].append(y)
            cell["diff_pct"].append((x - y) / y * 100)
    out: dict[str, Any] = {}
    for link, ms in links.items():
        out[link] = {}
        for m, c in ms.items():
            med, lo, hi = bootstrap_median_ci(c["diff_pct"])
            out[link][m] = {"pairs": len(c["diff_pct"]), "median_on": statistics.median(c["on"]),
                            "median_off": statistics.median(c["off"]), "diff_pct": med, "ci_pct": [lo, hi]}
    return out


def run(quick: bool = False, client: str = "chromium", db: Path | None = None) -> dict[str, Any]:
    files = [prereq.REPO / "experiments" / "findings" / f for f in FILES[client]]
    exps = [spec.load(f) for f in files]
    with tempfile.TemporaryDirectory(prefix="satbench-bench-") as tmp:
        path = Path(db) if db is not None else Path(tmp) / "capture.sqlite"
        runs: list[dict[str, Any]] = []
        names: list[str] = []
        for e in exps:
            if quick:  # a smoke run: two repetitions of each cell, under a name of its own
                e = e.first_repetitions(2, e.name + "-quick")
            s = run_experiment(e, path)
            names.append(e.name)
            runs.append({"experiment": e.name, "planned": s.planned, "ran": s.ran, "valid": s.valid,
                         "not_valid": s.invalid + s.failed})
        result = paired(path, names[0], names[1])
    return {"client": client, "db": str(db) if db is not None else None, "runs": runs, "links": result,
            "target_pct": TARGET_PCT,
            "commands": [f"satbench run {f.relative_to(prereq.REPO)} --db DB" for f in files]}


def format_report(r: dict[str, Any]) -> str:
    lines = [f"satbench bench capture ({r['client']}): frames on against off, paired by trial key and repetition; "
             "median of the paired differences [95 % bootstrap interval]"]
    for x in r["runs"]:
        lines.append(f"  {x['experiment']}: {x['planned']} trials, {x['ran']} run now, {x['not_valid']} not valid")
    for link, ms in sorted(r["links"].items()):
        parts = []
        for m in METRICS:
            c = ms.get(m)
            if c is None:
                continue
            parts.append(f"{m.removesuffix('_ms').upper()} {c['diff_pct']:+.2f} % [{c['ci_pct'][0]:+.2f}, "
                         f"{c['ci_pct'][1]:+.2f}] ({c['median_on']:,.0f} against {c['median_off']:,.0f} ms)")
        plt = ms.get("plt_ms")
        mark = "" if plt is None else (f"  [{'meets' if abs(plt['diff_pct']) < r['target_pct'] else 'MISSES'} "
                                       f"target: PLT within {r['target_pct']:g} %]")
        n = max((c["pairs"] for c in ms.values()), default=0)
        lines.append(f"  {link} ({n} pairs): " + "; ".join(parts) + mark)
    return "\n".join(lines)
