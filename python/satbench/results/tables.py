"""The report's tables: the metrics' names, a factor's levels in order and a combination's name (which
the figures and the other sections share), a table as HTML; and the statistics tables: pairwise tests of
each factor's levels, means, medians and 95th percentiles per combination, and which settings matter
(study D)."""

from __future__ import annotations

import html
import itertools
import math
import statistics
from typing import Any

from ..metrics import nearest_rank
from .analysis import factorial_effects, is_knob, knob_effects, tuned_against_default
from .stats import mann_whitney_p, mean_ci, median_diff_ci

METRICS = {
    "plt_ms": "Page load time (ms)",
    "fcp_ms": "First contentful paint (ms)",
    "lcp_ms": "Largest contentful paint (ms)",
    "cls": "Cumulative Layout Shift",
    "tbt_ms": "Total Blocking Time (ms, FCP to the load's end)",
    "speed_index_ms": "Speed Index (ms)",
    "visually_complete_ms": "Visually complete (ms)",
    "first_object_ms": "First object loaded (ms, the studies' FCP)",
    "largest_object_ms": "Largest object loaded (ms, the studies' LCP)",
    "last_object_ms": "Last object loaded (ms, the studies' PLT)",
    "ttfb_ms": "Time to first byte (ms)",
    "dns_ms": "DNS (ms)",
    "connect_ms": "TCP connect (ms)",
    "tls_ms": "TLS / QUIC handshake (ms)",
    "total_ms": "Transfer total (ms)",
    "throughput_mbps": "Throughput (Mbit/s)",
    "upload_ms": "Upload until the server's answer (ms)",
    "upload_mbps": "Upload rate (Mbit/s)",
    "jain_throughput": "Jain's fairness index",
    "overhead_pct": "Protocol overhead (% of page bytes)",
    "server_connections": "Connections the origin accepted",
}


def level_order(series: Any) -> list[Any]:
    vals = list(dict.fromkeys(series.dropna().tolist()))
    try:
        return sorted(vals)
    except TypeError:
        return vals


def _tail_table(valid: Any, varied: list[str], metrics: list[str]) -> str:
    """Per combination of the varied factors: each metric's mean [95 % CI], median and 95th percentile."""
    if not metrics:
        return ""
    rows = []
    for cell, g in valid.groupby(varied, dropna=False):
        cell = cell if isinstance(cell, tuple) else (cell,)
        row: list[Any] = [cell_label(varied, cell), len(g)]
        for m in metrics:
            xs = [float(x) for x in g[m].dropna()]
            if not xs:
                row += ["-", "-", "-"]
                continue
            mean, lo, hi = mean_ci(xs)
            row += [f"{mean:.1f} [{lo:.1f}, {hi:.1f}]" if len(xs) > 1 else f"{mean:.1f}",
                    f"{statistics.median(xs):.1f}", f"{nearest_rank(xs, 0.95):.1f}"]
        rows.append(row)
    head = ["combination", "n"]
    for m in metrics:
        name = METRICS.get(m, m)
        head += [f"{name}: mean [95 % CI]", "median", "95th percentile"]
    return ("<h3>Means, medians and 95th percentiles per combination</h3><p class='note'>The 95th "
            "percentile by nearest rank (a value some trial had); with fewer than 20 trials it is the "
            "largest.</p>" + table_html(rows, head))


def cell_label(varied: list[str], cell: Any) -> str:
    """A combination's name ("protocol=h2 cc=bbr"): a QUIC stack only where HTTP/3 is spoken."""
    values = dict(zip(varied, cell if isinstance(cell, tuple) else (cell,)))
    speaks_h3 = str(values.get("protocol", "h3")) in ("h3", "mix")
    return " ".join(f"{k}={v}" for k, v in values.items() if k != "quic_stack" or speaks_h3)


def table_html(rows: list[list[Any]], head: list[str]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            if math.isnan(v):
                return "-"
            return f"{v:.3g}" if abs(v) < 0.01 or abs(v) >= 1e5 else f"{v:.2f}"
        return html.escape(str(v))

    h = "".join(f"<th>{html.escape(x)}</th>" for x in head)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def pairwise(df: Any, factor: str, metric: str, others: list[str]) -> list[list[Any]]:
    """For each pair of levels of ``factor``, within each combination of ``others``:
    n, medians, the median difference (second - first) with a bootstrap 95 % CI, and a Mann-Whitney U p."""
    rows: list[list[Any]] = []
    cells = [()] if not others else list(dict.fromkeys(map(tuple, df[others].astype(str).to_numpy().tolist())))
    for cell in cells:
        sub = df
        for k, v in zip(others, cell):
            sub = sub[sub[k].astype(str) == v]
        for a, b in itertools.combinations(level_order(sub[factor]), 2):
            xa = sub[sub[factor] == a][metric].dropna().tolist()
            xb = sub[sub[factor] == b][metric].dropna().tolist()
            if not xa or not xb:
                continue
            d, lo, hi = median_diff_ci(xa, xb)
            rows.append([" ".join(f"{k}={v}" for k, v in zip(others, cell)) or "all", f"{a} vs {b}",
                         len(xa), len(xb), statistics.median(xa), statistics.median(xb), d, lo, hi,
                         mann_whitney_p(xa, xb)])
    return rows


def _knobs_section(valid: Any, varied: list[str], spec: dict[str, Any], metrics: list[str]) -> str:
    """Which settings matter (study D): effects of knobs per network, ranked, Holm-corrected."""
    knobs = [v for v in varied if is_knob(v)]
    if not knobs:
        return ""
    network = "link" if "link" in varied else "none"
    others = [v for v in varied if v not in knobs and v != "link"]
    baseline = spec.get("baseline") or None
    design = spec.get("design") or {}
    fractional = design.get("kind") == "fractional"
    cells = html.escape(", ".join(others) or "nothing else")
    out = ["<h3>Which settings matter</h3>"]
    shown = [x for x in ("plt_ms", "fcp_ms") if x in metrics]
    if not fractional:
        out.append("<p class='note'>Per network, each setting's effect on the median: median at the level minus "
                   "median at the baseline (the experiment's: its first level in the file, or the design's "
                   "baseline), with the other settings at their baseline where the design has such trials, "
                   f"within each combination of {cells}; a percentile-bootstrap 95 % interval, a two-sided "
                   "Mann-Whitney U p, and p adjusted for all tests of the table by Holm's method (significant: "
                   "adjusted p &lt; 0.05). Ranked by the effect relative to the baseline median.</p>")
        for m in shown:
            rows = [[e.network, e.within, e.knob, f"{e.baseline} → {e.level}", f"{e.n_baseline}/{e.n_level}",
                     e.median_baseline, e.effect, f"[{e.ci_low:.0f}, {e.ci_high:.0f}]", 100 * e.relative, e.p,
                     e.p_adj, "yes" if e.significant else ""]
                    for e in knob_effects(valid, knobs, m, network, others, baseline)]
            if rows:
                out.append(f"<h4>{html.escape(METRICS[m])}</h4>" + table_html(rows, [
                    "network", "within", "setting", "levels", "n", "median at baseline", "effect", "95 % CI",
                    "effect %", "p", "p (Holm)", "significant"]))
    else:
        facs = [f for f in design.get("factors", []) if f in valid.columns]
        out.append(
            "<p class='note'>A fractional factorial design: "
            f"2^({design.get('k')}-{design.get('p')}), resolution {design.get('resolution')}, generators "
            f"{html.escape(' '.join(design.get('generators') or []) or 'none')}. Two trials of it differ in "
            "several settings at once, so a setting's effect is estimated from all trials together: per network "
            f"and combination of {cells}, main effects and two-factor interactions by least squares on the "
            "coded columns (baseline -1, the other level +1; effect = mean at + minus mean at -), t intervals "
            "from the replicates, p adjusted for all tests of the table by Holm's method. An effect is estimated "
            "together with its aliases (signs as the generators give them). Ranked by size within each "
            "network and combination.</p>")
        for m in shown:
            rows = [[e.network, e.within, e.rank, e.term, f"{e.minus} → {e.plus}" if e.minus else "-",
                     e.aliases or "-", e.effect, f"[{e.ci_low:.0f}, {e.ci_high:.0f}]", e.p, e.p_adj,
                     "yes" if e.significant else ""]
                    for e in factorial_effects(valid, facs, m, network, others=others, baseline=baseline)]
            if rows:
                out.append(f"<h4>Main effects and two-factor interactions: {html.escape(METRICS[m])}</h4>"
                           + table_html(rows, ["network", "within", "rank", "effect of", "levels", "aliased with",
                                           "effect (ms)", "95 % CI", "p", "p (Holm)", "significant"]))
    if "protocol" in varied and "plt_ms" in metrics:
        rows = []
        found = tuned_against_default(valid, [k for k in knobs if k in valid.columns], "plt_ms", network,
                                      baseline=baseline, fractional=fractional)
        for t in found:
            interval = "" if math.isnan(t.tuned_low) else f"[{t.tuned_low:.0f}, {t.tuned_high:.0f}]"
            against = ([(f"{t.protocol} (its own)", t.improves)] if t.improves else []) + list(t.beats.items())
            for other, b in against:
                rows.append([t.network, t.protocol, t.default_median, t.n_default, t.tuned, interval, t.basis,
                             t.observed_median, t.tuned_setting, t.judged, other, b.default_median, b.diff,
                             f"[{b.diff_low:.0f}, {b.diff_high:.0f}]", b.p, "yes" if b.beats else "no"])
        reps = int(valid["rep"].nunique()) if "rep" in valid.columns else 0
        if not rows:
            why = ("a tuned setting is chosen on half of the repetitions and judged on the other half, and this "
                   f"study has {reps}: run at least 4 (two to choose, two to judge: a best observed cell needs "
                   "two trials, and a saturated fractional design has no error estimate from one)" if reps < 4 else
                   "no protocol has trials with every setting at its baseline in both halves, so no default is "
                   "measured (a fractional design without the all-baseline run: leave the generators to the "
                   "table, which signs them to include it, or negate one, e.g. C=-AB)")
            out.append(f"<h4>Tuned against default</h4><p class='note'>No verdict: {why}.</p>")
        else:
            out.append("<h4>Tuned against default</h4><p class='note'>Per network: a protocol with every setting "
                       "at its baseline, and tuned. The tuned setting is <b>chosen on the odd repetitions and "
                       "judged on the even ones</b> (the column 'judged' says which): a setting chosen and judged "
                       "on the same trials is the lowest of many noisy cells, and with many settings that do "
                       "nothing it would 'beat' the default far more often than the 5 % a test allows. In a "
                       "fractional design the setting is the main-effects model's best (each setting at its "
                       "better level on the choosing half) and its PLT the model's mean fitted on the judging "
                       "half, with a 95 % interval (its observed median too, if the setting was run); it beats a "
                       "default when the 95 % interval of the difference (model mean minus the default's mean) is "
                       "below zero; a setting the design did not run is worth running to confirm. Otherwise the "
                       "tuned setting is the best observed cell of the choosing half (lowest median, two trials "
                       "at least), and it beats a default when its judging trials have a lower median and a "
                       "Mann-Whitney p &lt; 0.05.</p>"
                       + table_html(rows, ["network", "protocol", "default median", "n", "tuned", "95 % CI", "basis",
                                       "observed", "tuned setting", "judged", "against", "its default median",
                                       "difference", "95 % CI", "p", "tuned beats it"]))
    return "".join(out)


__all__ = ["METRICS", "cell_label", "level_order", "pairwise", "table_html"]
