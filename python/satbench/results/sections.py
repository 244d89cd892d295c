"""The report's sections on what the studies measure beside the page metrics: where the bytes went
(the protocol overhead by part), what limited each sender, mixed populations (study B), the satellite
access's counters, and the connections per page."""

from __future__ import annotations

import html
import math
from typing import Any

import matplotlib.pyplot as plt  # the backend and the SVG text as .figures sets them, imported before any figure
import numpy as np

from ..model import OVERHEAD_GROUPS, OVERHEAD_PARTS
from .figures import Figures, Panel, _bars, _panel_fig, comparable
from .read import Results
from .tables import cell_label, level_order, table_html

#: The satellite access's counters summarised per combination (model.LinkCounters.access_metrics).
ACCESS = {"access_frames_lost_fwd": "forward frames lost", "modcod_changes": "MODCOD changes",
          "encap_overhead_bytes_fwd": "forward encapsulation bytes", "access_frames_lost_ret": "return frames lost",
          "dama_requests": "capacity requests", "dama_granted_bytes": "return bytes granted",
          "dama_used_bytes": "return bytes used", "encap_overhead_bytes_ret": "return encapsulation bytes",
          "jain_terminals": "Jain's index over terminals"}
#: What limited a sender (limited_*_pct), in the order shown.
#: The server's classes (``satbench-server --describe``, its one owner; a unit test holds the two equal).
LIMITS = ("application", "cwnd", "receive_window", "send_buffer", "pacing")


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


__all__ = ["ACCESS", "CONNECTIONS", "CONNECTION_BY", "LIMITS"]
