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
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: figures go to SVG
# Text as SVG text, not glyph outlines: a fraction of the bytes, and searchable.
matplotlib.rcParams["svg.fonttype"] = "none"
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ..errors import InputError  # noqa: E402
from ..metrics import nearest_rank  # noqa: E402
from ..model import OVERHEAD_GROUPS, OVERHEAD_PARTS  # noqa: E402
from ..path import ELEMENTS, element_class  # noqa: E402
from ..workloads import workloads  # noqa: E402
from . import headline  # noqa: E402
from .analysis import factorial_effects, is_knob, knob_effects, tuned_against_default  # noqa: E402
from .read import Results  # noqa: E402
from .stats import bootstrap_median_ci, mann_whitney_p, mean_ci, median_diff_ci  # noqa: E402
from .views import MILESTONES, Strip, filmstrip, waterfall  # noqa: E402

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
#: Metrics drawn over their trials' lower bounds (bound.py).
FLOORED = ("plt_ms", "last_object_ms")
#: The satellite access's counters summarised per combination (model.LinkCounters.access_metrics).
ACCESS = {"access_frames_lost_fwd": "forward frames lost", "modcod_changes": "MODCOD changes",
          "encap_overhead_bytes_fwd": "forward encapsulation bytes", "access_frames_lost_ret": "return frames lost",
          "dama_requests": "capacity requests", "dama_granted_bytes": "return bytes granted",
          "dama_used_bytes": "return bytes used", "encap_overhead_bytes_ret": "return encapsulation bytes",
          "jain_terminals": "Jain's index over terminals"}
#: What limited a sender (limited_*_pct), in the order shown.
#: The server's classes (``satbench-server --describe``, its one owner; a unit test holds the two equal).
LIMITS = ("application", "cwnd", "receive_window", "send_buffer", "pacing")


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


def level_order(series: Any) -> list[Any]:
    vals = list(dict.fromkeys(series.dropna().tolist()))
    try:
        return sorted(vals)
    except TypeError:
        return vals


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


def _overhead_parts(panels: list[Panel], x: str, hue: str | None, figs: Any) -> str:
    """Where the bytes went: each direction's bytes offered to the link,
    split by the emulator's classifier into groups of parts, as the mean per
    trial in % of the page's bytes (means, so that the parts add up)."""
    cols = [f"oh_{d}_{p}" for d in ("fwd", "ret") for p in OVERHEAD_PARTS]
    if not all(c in panels[0].trials.columns for c in cols):
        return ""
    out = ["<h3>Where the bytes went</h3><p class='note'>Every packet offered to the emulated link, split by the "
           "emulator into IP and TCP/UDP headers, TCP bytes sent again, TLS and QUIC handshakes, TLS record "
           "framing (record headers and AEAD tags) and payload (for QUIC, whole packets after the handshake: "
           "its framing is encrypted). TLS 1.3 encrypts its handshake after the ServerHello, so its "
           "handshake bytes here are the ClientHello, ServerHello and ChangeCipherSpec; the certificate chain "
           "counts with the records. The parts of a direction add up to its bytes. Bars: the mean per trial, "
           "in % of the page's bytes; table: the same in bytes, with the TCP segments that carried no payload "
           "(pure ACKs).</p>"]
    rows: list[list[Any]] = []
    for i, p in enumerate(panels, 1):
        d = p.trials.dropna(subset=cols + ["page_bytes"])
        keys = [x] + ([hue] if hue else [])
        cells = [(k if isinstance(k, tuple) else (k,), g) for k, g in d.groupby(keys, dropna=False)] if len(d) else []
        if not cells:
            continue
        fig, axes = plt.subplots(1, 2, figsize=(max(6.0, 1.1 * len(cells) * 2), 3.4), squeeze=False, sharey=True)
        for ax, (dname, short) in zip(axes[0], (("forward", "fwd"), ("return", "ret"))):
            bottom = np.zeros(len(cells))
            for group, parts in OVERHEAD_GROUPS.items():
                hs = np.array([float((g[[f"oh_{short}_{q}" for q in parts]].sum(axis=1) / g["page_bytes"]).mean()) * 100
                               for _, g in cells])
                ax.bar(range(len(cells)), hs, 0.7, bottom=bottom, label=group)
                bottom += hs
            ax.set_xticks(range(len(cells)))
            ax.set_xticklabels([" ".join(str(v) for v in k) for k, _ in cells], rotation=30, fontsize=7, ha="right")
            ax.set_title(f"{p.title}: {dname}", fontsize=8)
            ax.set_ylabel("% of page bytes")
        axes[0][1].legend(fontsize=6)
        out.append(figs.add(fig, f"overhead-parts-{i}", f"Where the bytes went ({p.title})"))
        for k, g in cells:
            row: list[Any] = [p.title, " ".join(str(v) for v in k), len(g)]
            for short in ("fwd", "ret"):
                row += [float(g[[f"oh_{short}_{q}" for q in parts]].sum(axis=1).mean()) for parts in
                        OVERHEAD_GROUPS.values()]
                row.append(float(g[f"oh_{short}_pure_acks"].mean()))
            rows.append(row)
    if not rows:
        return ""
    head = ["panel", " ".join([x] + ([hue] if hue else [])), "trials"] + [
        f"{d} {g}" for d in ("fwd", "ret") for g in [*OVERHEAD_GROUPS, "pure ACKs (packets)"]]
    out.append(table_html(rows, head))
    return "".join(out)


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


def _limits_section(valid: Any, varied: list[str], figs: "Figures") -> str:
    """What limited each sender, beside the PLT and its bounds, per combination of the varied factors."""
    cols = [f"limited_{k}_pct" for k in LIMITS if f"limited_{k}_pct" in valid.columns]
    if not cols or not valid[cols].notna().any().any():
        return ""
    rows, labels, shares = [], [], []
    groups = list(valid.groupby(varied, dropna=False)) if varied else [((), valid)]
    for cell, g in groups:
        cell = cell if isinstance(cell, tuple) else (cell,)
        name = cell_label(varied, cell) or "all"
        med = {c: float(g[c].median()) if g[c].notna().any() else math.nan for c in cols}
        plt_ms = float(g["plt_ms"].median()) if "plt_ms" in g and g["plt_ms"].notna().any() else math.nan
        lb = float(g["lower_bound_ms"].median()) if "lower_bound_ms" in g else math.nan
        wb = float(g["window_bound_ms"].median()) if "window_bound_ms" in g else math.nan
        beats = int(g["beats_window_bound"].sum()) if "beats_window_bound" in g else 0
        rows.append([name, len(g), plt_ms, lb, wb, plt_ms / lb if lb else math.nan, beats, *med.values()])
        labels.append(name)
        shares.append([0.0 if math.isnan(v) else v for v in med.values()])
    head = ["combination", "n", "PLT (ms)", "physical bound (ms)", "window bound (ms)", "PLT / bound",
            "below window bound", *[c[8:-4].replace("_", " ") + " %" for c in cols]]
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(labels) + 1.2))
    left = np.zeros(len(labels))
    for j, c in enumerate(cols):
        vals = np.array([s[j] for s in shares])
        ax.barh(range(len(labels)), vals, left=left, label=c[8:-4].replace("_", " "))
        left += vals
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlabel("share of the connection's time (%, median over trials)")
    ax.set_xlim(0, 100)
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.25))
    return ("<h3>What limited the transfer</h3><p class='note'>From the server: every connection, TCP or "
            "QUIC, sampled every 10 ms and each interval judged by one rule (TCP from TCP_INFO, QUIC from the "
            "stack's own state): nothing pending (application), a full congestion window (cwnd), the peer's "
            "receive window or flow-control credit, a full send buffer, else the pacer holding data "
            "(crates/server/src/limits.rs). Medians per combination, beside the PLT and the trial's lower "
            "bounds: physical (the chain of round trips each connection must wait for, and the bytes after "
            "each request at the link's peak rate) and window (also the round trips a window growing "
            "threefold per round trip needs). 'below window bound': trials whose sender grew its window "
            "faster than any standard start-up.</p>"
            + table_html(rows, head) + figs.add(fig, "limited-by", "What limited each sender, per combination"))


def mix_label(v: Any) -> Any:
    """A population's mix as a label: groups in order with their sizes ("h1=7 h2=3"); other values unchanged."""
    if isinstance(v, dict):
        return " ".join(f"{k}={x['n'] if isinstance(x, dict) else x}" for k, x in v.items())
    return v


def _loss_factor(varied: list[str]) -> str | None:
    return next((v for v in varied if v.startswith("link.") and "loss" in v), None)


def _population_section(r: Results, name: str, df: Any, valid: Any, varied: list[str], figs: "Figures") -> str:
    """Mixed populations (study B): PLT per protocol group per network, Jain's index against loss for each
    network, per-client CDFs, and every trial's start skew and idle CPU."""
    if "clients_n" not in df.columns or not df["clients_n"].notna().any():
        return ""
    out = ["<h3>Populations</h3><p class='note'>Every client of a trial released by one barrier. Jain's index "
           "J = (&Sigma; x<sub>i</sub>)&sup2; / (n &Sigma; x<sub>i</sub>&sup2;) over x<sub>i</sub> = client i's "
           "throughput (its bytes over its load time) divided by the fair share C / n (the link's forward rate "
           "over the number of clients): 1 when all are equal, 1/n when one takes all.</p>"]
    loss = _loss_factor(varied)
    nets = level_order(valid["link"].astype(str)) if "link" in valid.columns else ["all"]
    groups = sorted({c[7:] for c in valid.columns if c.startswith("plt_ms_h")})
    if groups and "clients" in valid.columns:
        at = valid
        if loss:
            chosen = min(valid[loss].dropna())
            at = valid[valid[loss] == chosen]
            out.append(f"<p class='note'>PLT per group at {html.escape(loss)} = {chosen:g} (the lowest).</p>")
        fig, axes = plt.subplots(1, len(nets), figsize=(max(4.5, 4.5 * len(nets)), 3.4), squeeze=False,
                                 sharey=True)
        for ax, net in zip(axes[0], nets):
            sub = at[at["link"].astype(str) == net] if "link" in at.columns else at
            mixes = level_order(sub["clients"].astype(str))
            width = 0.8 / max(1, len(groups))
            for j, g in enumerate(groups):
                med = [sub[sub["clients"].astype(str) == m][f"plt_ms_{g}"].median() for m in mixes]
                ax.bar([i + (j - (len(groups) - 1) / 2) * width for i in range(len(mixes))], med, width * 0.9,
                       label=g)
            ax.set_xticks(range(len(mixes)))
            ax.set_xticklabels(mixes, rotation=30, fontsize=7)
            ax.set_title(net, fontsize=8)
            ax.set_ylabel("median PLT per group (ms)")
            ax.grid(axis="y", alpha=0.3)
            ax.legend(fontsize=7)
        out.append(figs.add(fig, "plt-by-group", "PLT by protocol group for each mix, per network"))
    if loss and "jain_throughput" in valid.columns:
        mixes = level_order(valid["clients"].astype(str)) if "clients" in valid.columns else ["all"]
        fig, axes = plt.subplots(1, len(mixes), figsize=(max(4.5, 3.6 * len(mixes)), 3.2), squeeze=False,
                                 sharey=True)
        for ax, mix in zip(axes[0], mixes):
            sub = valid[valid["clients"].astype(str) == mix] if "clients" in valid.columns else valid
            for net in nets:
                g = sub[sub["link"].astype(str) == net] if "link" in sub.columns else sub
                xs = level_order(g[loss])
                ax.plot([100 * x for x in xs], [g[g[loss] == x]["jain_throughput"].median() for x in xs], marker="o",
                        label=net)
            ax.set_title(mix, fontsize=8)
            ax.set_xlabel("loss (%)")
            ax.set_ylabel("median Jain's index")
            ax.set_ylim(0, 1.05)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
        out.append(figs.add(fig, "jain-vs-loss", "Jain's index against loss, one line per network"))
    cl = r.clients(name)
    if not cl.empty and "grp" in cl.columns:
        cl = cl.merge(valid[["trial_id", *(["link"] if "link" in valid.columns else [])]], on="trial_id")
        fig, axes = plt.subplots(1, len(nets), figsize=(max(4.5, 4.2 * len(nets)), 3.2), squeeze=False,
                                 sharey=True)
        for ax, net in zip(axes[0], nets):
            sub = cl[cl["link"].astype(str) == net] if "link" in cl.columns else cl
            for g in level_order(sub["grp"]):
                plts = np.sort(sub[sub["grp"] == g]["plt_ms"].dropna().to_numpy())
                if len(plts):
                    ax.step(plts, np.arange(1, len(plts) + 1) / len(plts), where="post", label=str(g))
            ax.set_title(net, fontsize=8)
            ax.set_xlabel("client PLT (ms)")
            ax.set_ylabel("CDF over clients")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        out.append(figs.add(fig, "client-plt-cdf", "Per-client PLT CDF by protocol group, per network"))
    rows = [[int(t.trial_id), str(t.key)[:8], *[str(getattr(t, v, "")) for v in varied], t.status,
             t.start_skew_ms if "start_skew_ms" in df.columns else math.nan,
             t.cpu_idle_median_pct if "cpu_idle_median_pct" in df.columns else math.nan]
            for t in df.itertuples() if t.clients_n == t.clients_n]
    out.append("<h4>Start skew and idle CPU of every trial</h4><p class='note'>Skew: last client's start minus "
               "the first's (targets: 5 ms for loaders, 50 ms for browsers). Idle CPU: the machine's median idle "
               "share while the clients loaded (under 5 %: CPU-starved, invalid).</p>"
               + table_html(rows, ["trial", "key", *varied, "status", "start skew (ms)", "idle CPU (%)"]))
    return "".join(out)


def _access_section(valid: Any, varied: list[str]) -> str:
    """The satellite access's counters (DVB-S2 forward, DVB-RCS2 return), medians per combination."""
    cols = [c for c in ACCESS if c in valid.columns and valid[c].notna().any()]
    if not cols:
        return ""
    rows = []
    groups = list(valid.groupby(varied, dropna=False)) if varied else [((), valid)]
    for cell, g in groups:
        cell = cell if isinstance(cell, tuple) else (cell,)
        row: list[Any] = [cell_label(varied, cell) or "all", len(g)]
        if "plt_ms" in g:
            row.append(float(g["plt_ms"].median()) if g["plt_ms"].notna().any() else math.nan)
        row += [float(g[c].median()) if g[c].notna().any() else math.nan for c in cols]
        rows.append(row)
    head = ["combination", "n", *(["PLT (ms)"] if "plt_ms" in valid else []), *[ACCESS[c] for c in cols]]
    return ("<h3>Satellite access</h3><p class='note'>The emulator's access counters, medians per combination: "
            "DVB-S2 frames lost to fades and MODCOD changes (forward), DVB-RCS2 capacity requests and the bytes "
            "granted and used (return), GSE/RLE encapsulation bytes. 'satbench trace' draws a trial's C/N, MODCOD "
            "and granted rate over time.</p>" + table_html(rows, head))


#: The connections a load opened, as the origins counted them (model.ServerSummary.connection_metrics).
CONNECTIONS = {"server_connections": "connections", "server_connections_tcp": "TCP",
               "server_connections_quic": "QUIC", "origins_requested": "origins requested",
               "coalesced_connections": "coalesced connections", "unused_connections": "unused connections"}
#: The path's parts that change who holds a connection (a PEP, a tunnel, a proxy) and the page's sharding.
CONNECTION_BY = ("protocol", "shards", "pep", "tunnel", "proxy", "page", "client")


def _connections_section(valid: Any, varied: list[str], figs: "Figures") -> str:
    """Connections per page load, as the origin servers counted them: by
    protocol and sharding (and PEP, tunnel, proxy where they vary), in all,
    over TCP and QUIC, the origins the page named, and those carrying more
    than one origin's requests (coalesced)."""
    cols = [c for c in CONNECTIONS if c in valid.columns and valid[c].notna().any()]
    if "server_connections" not in cols:
        return ""
    by = [c for c in CONNECTION_BY if c in varied]
    rows = []
    for cell, g in (list(valid.groupby(by, dropna=False)) if by else [((), valid)]):
        cell = cell if isinstance(cell, tuple) else (cell,)
        rows.append([" ".join(f"{k}={v}" for k, v in zip(by, cell)) or "all", len(g),
                     *[float(g[c].mean()) if g[c].notna().any() else math.nan for c in cols]])
    out = ("<h3>Connections per page</h3><p class='note'>What the origin servers accepted per page load (their "
           "own logs; with a proxy or PEP in the path, its connections to them), means per combination. A "
           "coalesced connection carried requests for more than one of the page's origin names (HTTP/2 "
           "connection reuse); an unused one carried no request (a browser opens spare connections to an "
           "origin before it knows the origin speaks HTTP/2, and closes them before TLS).</p>"
           + table_html(rows, ["combination", "n", *[CONNECTIONS[c] for c in cols]]))
    x = next((c for c in ("shards", "page", "pep", "proxy", "tunnel") if c in varied), None)
    if x is None:
        return out
    hue = "protocol" if "protocol" in varied else None
    panels, how = comparable(valid, x, varied)
    if panels:
        out += f"<p class='note'>{html.escape(how)}</p>" + figs.add(
            _panel_fig(panels, lambda ax, d: _bars(ax, d, x, "server_connections", hue=hue)),
            f"connections-by-{x}", f"Connections per page by {x}" + (" and protocol" if hue else ""))
    return out


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


def _structure(page: str) -> str:
    return page.split("-")[0] if "-" in page else page


CSS = """body{font-family:sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #ccc;padding:3px 7px;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}figure{display:inline-block;margin:0.5em}
figcaption{font-size:12px;color:#555}img.fig{max-width:560px}.note{color:#555;font-size:13px}h2{margin-top:2em}
table.film td{padding:2px;text-align:center;vertical-align:top}table.film td.blank{background:#fff}
table.film img{display:block;border:1px solid #ddd}"""


@dataclass(frozen=True)
class ViewChoice:
    """Which trials the filmstrips and waterfalls show: by default each combination's median one; the
    trials chosen (by key, a key's prefix, or id), in the order given; ``side_by_side`` a varied factor
    whose levels sit in adjacent rows (the other factors' combinations then in turn)."""

    trials: tuple[str, ...] = ()
    side_by_side: str | None = None


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


def write_report(db: Path, out: Path, experiment: str | None = None, views: ViewChoice = ViewChoice()) -> Path:
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


def _experiment_section(r: Results, name: str, figs: Figures, views: ViewChoice = ViewChoice()) -> str:
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


#: At most this many combinations get a waterfall and a filmstrip row.
VIEW_CELLS = 8


def _representatives(valid: Any, varied: list[str], metric: str,
                     views: ViewChoice = ViewChoice()) -> list[tuple[str, Any]]:
    """The trials to show, as (label, row): the chosen ones (``views.trials``, each matching key prefix
    or id, in the order given); else per combination of the varied factors (at most VIEW_CELLS), its
    trial with the median of ``metric`` (the lower middle one of an even count), the levels of
    ``views.side_by_side`` in adjacent rows."""
    have = valid[valid[metric].notna()] if metric in valid.columns else valid.iloc[0:0]
    if have.empty:
        return []
    if views.trials:
        out = []
        for want in views.trials:
            hit = have[have["key"].astype(str).str.startswith(want) | (have["trial_id"].astype(str) == want)]
            for _, row in hit.iterrows():
                label = " ".join(f"{k}={row[k]}" for k in varied) or "all"
                out.append((f"{label}, trial {row['key']}", row))
        return out
    if views.side_by_side in varied:  # grouped with it last: its levels change fastest
        varied = [*[v for v in varied if v != views.side_by_side], views.side_by_side]
    groups = have.groupby(varied, dropna=False) if varied else [((), have)]
    out = []
    for cell, g in groups:
        cell = cell if isinstance(cell, tuple) else (cell,)
        g = g.sort_values(metric)
        row = g.iloc[(len(g) - 1) // 2]
        out.append((cell_label(varied, cell) or "all", row))
    return out[:VIEW_CELLS]


def _filmstrip_section(r: Results, valid: Any, varied: list[str], views: ViewChoice = ViewChoice()) -> str:
    """The frames of each combination's median-Speed-Index trial (or of the chosen trials), side by side
    on one time axis (and their videos, where the trials made them)."""
    strips: list[Strip] = []
    videos: list[str] = []
    for label, row in _representatives(valid, varied, "speed_index_ms", views):
        art = Path(str(row.get("artefacts") or ""))
        if not art.is_absolute():  # stored as given: relative to where the study ran (its database's folder)
            art = r.path.parent / art if (r.path.parent / art).is_dir() else art
        if not (art / "frames").is_dir():
            continue
        progress: list[tuple[float, int]] = []
        try:
            raw = json.loads((art / "client.json").read_text())
            progress = [(float(t), int(p)) for t, p in ((raw.get("visual") or {}).get("progress") or [])]
        except (OSError, ValueError, TypeError, AttributeError):
            pass
        strips.append(Strip(f"{label} (SI {row['speed_index_ms']:.0f} ms)", art / "frames", progress))
        if (art / "video.mp4").is_file():
            videos.append(f"<li>{html.escape(label)}: <a href='{html.escape((art / 'video.mp4').resolve().as_uri())}'>"
                          "video.mp4</a></li>")
    film = filmstrip(strips) if strips else ""
    if not film:
        return ""
    which = ("the trials chosen (<code>--trial</code>)" if views.trials else
             "per combination, its trial with the median Speed Index"
             + (f", the levels of {html.escape(views.side_by_side)} side by side"
                if views.side_by_side in varied else ""))
    return ("<h3>Filmstrips</h3><p class='note'>What the browser showed, " + which + "; each picture is the last "
            "frame painted by that time, with its visual progress (the frames are the trial's artefacts, "
            "<code>frames/</code>).</p>" + film
            + (f"<p class='note'>Their videos (the load's time is the video's):</p><ul>{''.join(videos)}</ul>"
               if videos else ""))


def _waterfall_section(r: Results, name: str, valid: Any, varied: list[str], figs: Figures,
                       views: ViewChoice = ViewChoice()) -> str:
    """Each combination's median-PLT trial (or each chosen trial) as a waterfall of its first client's
    objects."""
    reps = _representatives(valid, varied, "plt_ms", views)
    if not reps:
        return ""
    objects = r.objects_of([int(row["trial_id"]) for _, row in reps], client=0)
    if objects.empty:
        return ""
    out: list[str] = []
    for label, row in reps:
        mine = objects[objects["trial_id"] == row["trial_id"]]
        if mine.empty:
            continue
        marks = {k: (float(row[k]) if k in row and row[k] == row[k] else None) for k, _, _ in MILESTONES}
        fig = waterfall(mine.to_dict("records"), marks, f"{label}: trial {row['key']}")
        out.append(figs.add(fig, f"waterfall-{len(out) + 1}",
                            f"Waterfall, {label}" if views.trials else
                            f"Waterfall, {label} (its median-PLT trial, {row['key']})"))
    if not out:
        return ""
    return ("<h3>Waterfalls</h3><p class='note'>" + ("The trials chosen" if views.trials else
                                                     "Per combination, its trial with the median page load time")
            + ": each "
            "object from its request (pale) through its first byte to its end (solid), coloured by the connection "
            "that carried it, with the page's milestones.</p>" + "".join(out))


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
