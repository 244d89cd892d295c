"""The HTML report of a results database: one self-contained page (figures
inlined as SVG) and the same figures as SVG files.

Per experiment:
- trial counts by status, and the reasons of invalid and failed trials;
- for each varied factor: mean and median with 95 % confidence intervals,
  and CDFs, of each page metric (valid trials only);
- CUBIC against BBR by page; FCP and LCP by page structure; protocol
  overhead (bytes on the wire over the page's own bytes) by protocol and page;
- for each pair of levels of each varied factor, within each combination of
  the other varied factors: the median difference with a bootstrap 95 %
  confidence interval and a Mann-Whitney U p-value;
- the environment the trials ran in.

The page is assembled here, section by section in order; its parts are
figures.py (the figures and the panels of comparable trials), tables.py (the
tables and the statistics), sections.py (overhead, limits, populations,
access, connections), pictures.py (filmstrips and waterfalls) and headline.py
(the answer first).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..path import ELEMENTS, element_class
from ..workloads import workloads
from . import headline
from .figures import FLOORED, PANEL_FACTORS, Figures, Panel, _bars, _cdf, _panel_fig, comparable
from .pictures import VIEW_CELLS, ViewChoice, _filmstrip_section, _waterfall_section
from .read import Results
from .sections import (
    ACCESS,
    CONNECTION_BY,
    CONNECTIONS,
    LIMITS,
    _access_section,
    _connections_section,
    _limits_section,
    _overhead_parts,
    _population_section,
)
from .stats import bootstrap_median_ci
from .tables import METRICS, _knobs_section, _tail_table, cell_label, level_order, pairwise, table_html

#: Metrics drawn per factor: the paint metrics beside the studies' object-based ones.
FACTOR_METRICS = ("plt_ms", "last_object_ms", "fcp_ms", "first_object_ms", "lcp_ms", "largest_object_ms",
                  "speed_index_ms", "visually_complete_ms", "total_ms", "throughput_mbps", "upload_ms", "upload_mbps",
                  "jain_throughput", "server_connections")
#: Metrics compared pairwise in the statistics table.
COMPARED = ("plt_ms", "fcp_ms", "lcp_ms", "cls", "tbt_ms", "speed_index_ms", "visually_complete_ms", "total_ms",
            "throughput_mbps",
            "upload_ms")
#: Metrics whose tail is tabled per combination (mean, median and 95th percentile, as study C reports PLT).
TAILED = ("plt_ms", "fcp_ms", "total_ms", "upload_ms")


def mix_label(v: Any) -> Any:
    """A population's mix as a label: groups in order with their sizes ("h1=7 h2=3"); other values unchanged."""
    if isinstance(v, dict):
        return " ".join(f"{k}={x['n'] if isinstance(x, dict) else x}" for k, x in v.items())
    return v


def _structure(page: str) -> str:
    return page.split("-")[0] if "-" in page else page


CSS = """body{font-family:sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}figure{display:inline-block;margin:0.5em}
figcaption{font-size:12px;color:#555}img.fig{max-width:560px}.note{color:#555;font-size:13px}h2{margin-top:2em}
table.film td{padding:2px;text-align:center;vertical-align:top}table.film td.blank{background:#fff}
table.film img{display:block;border:1px solid #ddd}"""


def _check_views(r: Results, db: Path, names: list[str], experiment: str | None, views: ViewChoice) -> None:
    """Refuse, in one line, a side-by-side factor no experiment varies, both options at once, and a
    trial named that no valid trial matches."""
    if views.side_by_side is not None:
        varied = {v for n in names for v in json.loads(r.db.execute("SELECT spec FROM experiments WHERE name = ?",
                                                                     (n,)).fetchone()[0] or "{}").get("varied", [])}
        if views.side_by_side not in varied:
            raise InputError(f"--side-by-side {views.side_by_side}: not a factor the experiment varies (it varies "
                             f"{', '.join(sorted(varied)) or 'nothing'})")
    if views.trials and views.side_by_side is not None:
        raise InputError("--side-by-side orders each combination's trials; with --trial the trials named are shown "
                         "in the order given: one or the other")
    for t in views.trials:
        if len(t) < 4 and not t.isdigit():
            raise InputError(f"--trial {t}: a trial's id, or its key or at least its first 4 characters")
        hit = r.db.execute("SELECT count(*) FROM trials t JOIN experiments e ON e.id = t.experiment_id WHERE "
                           "t.status = 'valid' AND (substr(t.key, 1, ?) = ? OR CAST(t.id AS TEXT) = ?)"
                           + (" AND e.name = ?" if experiment else ""),
                           (len(t), t, t, *([experiment] if experiment else []))).fetchone()[0]
        if not hit:
            raise InputError(f"--trial {t}: no valid trial in {db} has that key (or key prefix) or id"
                             + (f" in experiment {experiment!r}" if experiment else ""))


def write_report(db: Path, out: Path, experiment: str | None = None,
                 views: ViewChoice = ViewChoice()) -> Path:  # noqa: B008 - a frozen dataclass (pictures.py)
    """Write ``out/index.html`` and ``out/figures/*.svg``; return the HTML path."""
    r = Results(db)
    names = [experiment] if experiment else r.experiments()
    if not names:
        raise InputError(f"{db}: no experiments in it yet")
    if experiment is not None and experiment not in r.experiments():
        raise InputError(f"{db}: no experiment named {experiment!r} (found: {', '.join(r.experiments())})")
    _check_views(r, db, names, experiment, views)
    try:
        out.mkdir(parents=True, exist_ok=True)
        figs = Figures(out)
    except OSError as e:
        raise InputError(f"-o {out}: cannot create the report's folder: {e.strerror}") from None
    parts = [f"<h1>satbench report</h1><p class='note'>Database {html.escape(str(db))}. "
             "Figures and statistics use valid trials only. Means carry Student-t 95 % intervals; "
             "medians percentile-bootstrap 95 % intervals (2000 resamples). Pairwise tests compare levels "
             "within each combination of the other varied factors.</p>"]
    for name in names:
        parts.append(_experiment_section(r, name, figs, views))
    r.close()
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>satbench report</title>"
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>")
    path = out / "index.html"
    path.write_text(page)
    return path


def _experiment_section(r: Results, name: str, figs: Figures,
                        views: ViewChoice = ViewChoice()) -> str:  # noqa: B008 - a frozen dataclass (pictures.py)
    figs.prefix = f"{name}-"
    df = r.trials(name)
    if "clients" in df.columns:  # a population's mix, as one label ("h1=7 h2=3")
        df["clients"] = df["clients"].map(mix_label)
    for factor in ELEMENTS:  # a path element's value as its own label ("both: satellite cc=bbr")
        if factor in df.columns:
            df[factor] = df[factor].map(element_class(factor).label)
    for col in df.columns:  # any other table-valued factor: one stable text per value
        if df[col].map(lambda v: isinstance(v, (dict, list))).any():
            df[col] = df[col].map(lambda v: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)
    spec = json.loads(r.db.execute("SELECT spec FROM experiments WHERE name = ?", (name,)).fetchone()[0] or "{}")
    varied = [v for v in spec.get("varied", []) if v in df.columns] if not df.empty else []
    out = [f"<h2>Experiment {html.escape(name)}</h2>",
           f"<p>{html.escape(spec.get('description', ''))}</p>"]
    if df.empty:
        return "".join(out) + "<p>No trials stored yet.</p>"
    counts = df["status"].value_counts().to_dict()
    out.append(f"<p>{len(df)} trials stored of {spec.get('trials', '?')} planned: "
               + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("valid", "invalid", "failed"))
               + f". Varied: {html.escape(', '.join(varied) or 'nothing')}.</p>")
    bad = df[df["status"] != "valid"]
    if not bad.empty:
        rows = [[*key, n] for key, n in bad.groupby(["status", "reason"]).size().items()
                if isinstance(key, tuple)]
        out.append("<h3>Invalid and failed trials</h3>" + table_html(rows, ["status", "reason", "trials"]))
    valid = df[df["status"] == "valid"]
    metrics = [m for m in METRICS if m in valid.columns and valid[m].notna().any()]
    if valid.empty or not metrics:
        return "".join(out) + "<p>No valid trials with metrics.</p>"

    # The answer first, then the pictures, then everything else.
    out.append(headline.section(valid, varied, table_html))
    out.append(_filmstrip_section(r, valid, varied, views))
    out.append(_waterfall_section(r, name, valid, varied, figs, views))
    # Per-factor means, medians and CDFs, each over comparable trials only.
    out.append("<h3>By factor</h3>")
    for f in varied:
        panels, how = comparable(valid, f, varied)
        if not panels:
            out.append(f"<p class='note'>{html.escape(f)}: no two of its levels ran under the same conditions; "
                       "nothing to compare.</p>")
            continue
        out.append(f"<h4>{html.escape(f)}</h4><p class='note'>{html.escape(how)}</p>")
        for fm in [x for x in FACTOR_METRICS if x in metrics]:
            out.append(figs.add(_panel_fig(panels, lambda ax, d, f=f, fm=fm: _bars(ax, d, f, fm)),
                                f"{fm}-by-{f}", f"{METRICS[fm]} by {f}: mean and median, 95 % CI"))
        if "plt_ms" in metrics:
            out.append(figs.add(_panel_fig(panels, lambda ax, d, f=f: _cdf(ax, d, f, "plt_ms")), f"plt-cdf-{f}",
                                f"CDF of the page load time by {f}"))
    # The studies' views.
    if "cc" in varied and "plt_ms" in metrics:
        x = "page" if "page" in varied else ("protocol" if "protocol" in varied else "cc")
        panels, how = comparable(valid, "cc", varied)
        if panels:
            out.append(f"<h3>CUBIC against BBR</h3><p class='note'>{html.escape(how)}</p>")
            out.append(figs.add(_panel_fig(panels, lambda ax, d: _bars(ax, d, x, "plt_ms", hue="cc")),
                                f"cc-by-{x}", f"Page load time by {x}, CUBIC vs BBR"))
    if "page" in varied and {"fcp_ms", "lcp_ms"} <= set(metrics):
        v = valid.assign(structure=valid["page"].astype(str).map(_structure),
                         size=valid["page"].astype(str).map(lambda p: p.split("-")[-1]))
        # Structure against structure at the same page size (and the same other conditions).
        sv = [x for x in varied if x != "page"] + ["structure", "size"]
        panels, how = comparable(v, "structure", sv)
        if panels and v["structure"].nunique() > 1:
            out.append(f"<h3>FCP and LCP by page structure</h3><p class='note'>{html.escape(how)} The paint "
                       "metrics of the browsers beside the studies' object-based ones.</p>")
            hue = "protocol" if "protocol" in varied else None
            for sm in [x for x in ("fcp_ms", "first_object_ms", "lcp_ms", "largest_object_ms") if x in metrics]:
                out.append(figs.add(_panel_fig(panels, lambda ax, d, sm=sm: _bars(ax, d, "structure", sm, hue=hue)),
                                    f"{sm}-by-structure", f"{METRICS[sm]} by page structure"))
    if "overhead_pct" in metrics and "protocol" in valid.columns:
        x = "page" if "page" in varied else "protocol"
        hue = "protocol" if x == "page" and "protocol" in varied else None
        panels, how = comparable(valid, x, varied) if x in varied else ([Panel("all", valid, len(valid), len(valid))],
                                                                       "all valid trials.")
        if panels:
            out.append("<h3>Protocol overhead</h3><p class='note'>Bytes on the wire (IP packets through the "
                       "emulated link, both directions) beyond the page's own bytes, in % of the page's bytes. "
                       f"{html.escape(how)}</p>")
            out.append(figs.add(_panel_fig(panels, lambda ax, d: _bars(ax, d, x, "overhead_pct", hue=hue)),
                                "overhead", f"Protocol overhead by {x}" + (" and protocol" if hue else "")))
            out.append(_overhead_parts(panels, x, hue, figs))
    out.append(_population_section(r, name, df, valid, varied, figs))
    out.append(_connections_section(valid, varied, figs))
    for w in workloads():
        out.append(w.report(r, name, valid, varied, figs))
    out.append(_limits_section(valid, varied, figs))
    out.append(_access_section(valid, varied))
    out.append(_knobs_section(valid, varied, spec, metrics))
    # Summary table per cell.
    if varied:
        rows = []
        for cell, g in valid.groupby(varied, dropna=False):
            cell = cell if isinstance(cell, tuple) else (cell,)
            row = [cell_label(varied, cell), len(g)]
            for m in metrics[:6]:
                xs = g[m].dropna().tolist()
                if xs:
                    md, lo, hi = bootstrap_median_ci(xs)
                    row.append(f"{md:.1f} [{lo:.1f}, {hi:.1f}]")
                else:
                    row.append("-")
            rows.append(row)
        out.append("<h3>Medians per combination [95 % CI]</h3>"
                   + table_html(rows, ["combination", "n", *[METRICS[m] for m in metrics[:6]]]))
        out.append(_tail_table(valid, varied, [m for m in TAILED if m in metrics]))
    # Pairwise tests, folded away: the answer above says what they decide.
    out.append("<details><summary>Pairwise tests of every factor and metric</summary>")
    for f in varied:
        others = [o for o in varied if o != f]
        for cm in [x for x in COMPARED if x in metrics]:
            rows = pairwise(valid, f, cm, others)
            if rows:
                out.append(f"<h3>{html.escape(f)}: pairwise, {html.escape(METRICS[cm])}</h3>" + table_html(
                    rows, ["within", "levels (a vs b)", "n a", "n b", "median a", "median b",
                           "median b - a", "95 % CI low", "95 % CI high", "Mann-Whitney p"]))
    out.append("</details>")
    # Environment.
    env_cols = [c for c in ("satbench_commit", "kernel", "browser") if c in df.columns]
    envs = df[env_cols].drop_duplicates().astype(str).values.tolist()
    out.append("<h3>Environment</h3>" + table_html(envs, env_cols))
    return "".join(out)


# With the names it re-exports from the modules it is made of: the workloads, the command and the tests
# import them from here.
__all__ = ["ACCESS", "COMPARED", "CONNECTIONS", "CONNECTION_BY", "CSS", "FACTOR_METRICS", "FLOORED", "LIMITS",
           "METRICS", "PANEL_FACTORS", "TAILED", "VIEW_CELLS", "Figures", "Panel", "ViewChoice", "cell_label",
           "comparable", "level_order", "mix_label", "pairwise", "table_html", "write_report"]
