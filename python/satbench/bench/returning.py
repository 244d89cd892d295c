"""``satbench bench returning``: what a returning visitor saves. The
repeat-view trials of ``experiments/findings/returning-visitors.toml`` run
into one database (resumed: what is stored is not run again); each trial
holds its first view (``first_*``) and its repeat, so they are paired within
the trial. Per link and configuration (client, protocol, the server's knobs
for returning clients): the median first view and repeat, the median of the
paired savings (first minus repeat) with its 95 % bootstrap interval, in ms
and in the link's base round trips, and how many trials the server (and the
loader, on its own connections) says resumed the TLS session, sent 0-RTT
data or opened with TCP Fast Open."""

from __future__ import annotations

import json
import sqlite3
import statistics
import tempfile
from pathlib import Path
from typing import Any

from .. import prereq
from ..experiment import spec
from ..experiment.factors import FACTORS
from ..experiment.runner import run as run_experiment
from ..results.stats import bootstrap_median_ci

FILE = "returning-visitors.toml"
#: The paired metrics: the repeat's and its first view's.
PAIRED = ("ttfb_ms", "plt_ms")
#: What the endpoints say was carried over (counted per trial: any connection or request), and how
#: the report names it.
SAID = {"server_resumed_connections": "server: resumed", "server_early_data_requests": "server: 0-RTT requests",
        "server_tfo_connections": "server: Fast Open SYNs", "client_resumed_connections": "client: resumed",
        "client_early_data_connections": "client: 0-RTT", "client_fast_open_connections": "client: Fast Open"}
#: The server's knobs for a returning client, as a configuration's label shows them.
KNOBS = ("server.resumption", "server.tfo", "server.zero_rtt")


def _label(f: dict[str, Any]) -> str:
    knobs = " ".join(f"{k.removeprefix('server.')}={'on' if f[k] else 'off'}" for k in KNOBS if k in f)
    stack = f" ({f.get('quic_stack', FACTORS['quic_stack'].default)})" if f.get("protocol") == "h3" else ""
    return f"{f['client']} {f['protocol']}{stack}" + (f" {knobs}" if knobs else "")


def paired(db: Path, experiment: str = "returning-visitors") -> dict[str, Any]:
    """Per link, per configuration: pairs, medians of first view and repeat, the median saving [95 %
    bootstrap interval] in ms and in base round trips, and the trials whose endpoints said so."""
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT t.id, t.factors, t.links FROM trials t JOIN experiments e ON e.id = t.experiment_id "
                           "WHERE e.name = ? AND t.status = 'valid'", (experiment,)).fetchall()
        specs = {h: s for h, s in con.execute("SELECT hash, spec FROM links")}
        metrics: dict[int, dict[str, float]] = {}
        for tid, name, value in con.execute(
                "SELECT m.trial_id, m.name, m.value FROM metrics m JOIN trials t ON t.id = m.trial_id "
                "JOIN experiments e ON e.id = t.experiment_id WHERE e.name = ?", (experiment,)):
            metrics.setdefault(tid, {})[name] = value
    finally:
        con.close()
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for tid, factors, links in rows:
        f = json.loads(factors)
        m = metrics.get(tid, {})
        rtt = _base_rtt_ms(links, specs)
        c = cells.setdefault((f["link"], _label(f)), {"rtt_ms": rtt, "h3": f.get("protocol") == "h3",
                                                      "pairs": {k: [] for k in PAIRED},
                                                      "said": {k: 0 for k in SAID}, "asked": {k: 0 for k in SAID},
                                                      "trials": 0})
        c["trials"] += 1
        for k in PAIRED:
            first, again = m.get(f"first_{k}"), m.get(k)
            if first is not None and again is not None:
                c["pairs"][k].append((first, again))
        for k in SAID:
            # What a transport cannot do is not said of it: Fast Open over QUIC, 0-RTT over TCP.
            if ("tfo" in k or "fast_open" in k) if c["h3"] else "early_data" in k:
                continue
            if m.get(k) is not None:
                c["asked"][k] += 1
                c["said"][k] += m[k] > 0
    out: dict[str, Any] = {}
    for (link, label), c in sorted(cells.items()):
        row: dict[str, Any] = {"trials": c["trials"], "rtt_ms": c["rtt_ms"],
                               "said": {k: [c["said"][k], c["asked"][k]] for k in SAID if c["asked"][k]}}
        for k, ps in c["pairs"].items():
            if not ps:
                continue
            saved = [a - b for a, b in ps]
            med, lo, hi = bootstrap_median_ci(saved)
            rtt = c["rtt_ms"]
            row[k] = {"pairs": len(ps), "first": statistics.median(a for a, _ in ps),
                      "repeat": statistics.median(b for _, b in ps), "saved": med, "ci": [lo, hi],
                      # In round trips only where the round trip is one number (a constant delay).
                      "saved_rtt": med / rtt[0] if rtt and rtt[0] == rtt[1] and rtt[0] > 0 else None}
        out.setdefault(link, {})[label] = row
    return out


def _base_rtt_ms(links: str | None, specs: dict[str, str]) -> tuple[float, float] | None:
    """The trial's satellite link's round trip, least and most, from its stored resolution (equal on a
    link of constant delay)."""
    try:
        d = json.loads(specs[json.loads(links or "{}")["link"]])["derived"]
        return (float(d["forward"]["min_delay_ms"]) + float(d["return"]["min_delay_ms"]),
                float(d["forward"]["max_delay_ms"]) + float(d["return"]["max_delay_ms"]))
    except (ValueError, TypeError, KeyError):
        return None


def run(quick: bool = False, db: Path | None = None) -> dict[str, Any]:
    path_exp = prereq.REPO / "experiments" / "findings" / FILE
    e = spec.load(path_exp)
    with tempfile.TemporaryDirectory(prefix="satbench-bench-") as tmp:
        path = Path(db) if db is not None else Path(tmp) / "returning.sqlite"
        if quick:  # a smoke run: two repetitions of each cell, under a name of its own
            e = e.first_repetitions(2, e.name + "-quick")
        s = run_experiment(e, path)
        result = paired(path, e.name)
    return {"db": str(db) if db is not None else None, "experiment": e.name,
            "runs": [{"planned": s.planned, "ran": s.ran, "valid": s.valid, "not_valid": s.invalid + s.failed}],
            "links": result, "command": f"satbench run {path_exp.relative_to(prereq.REPO)} --db DB"}


def format_report(r: dict[str, Any]) -> str:
    lines = ["satbench bench returning: each repeat view against its own first view (the page, connections "
             "closed, a pause, the page again); median first -> repeat, and the median of the paired savings "
             "[95 % bootstrap interval], in ms and round trips"]
    for x in r["runs"]:
        lines.append(f"  {r['experiment']}: {x['planned']} trials, {x['ran']} run now, {x['not_valid']} not valid")
    for link, cells in sorted(r["links"].items()):
        rtts = {tuple(c["rtt_ms"]) for c in cells.values() if c["rtt_ms"]}
        rtt = ", ".join(f"{a:.0f} ms" if a == b else f"{a:.0f} to {b:.0f} ms, varying: savings in ms only"
                        for a, b in sorted(rtts)) or "?"
        lines.append(f"  {link} (RTT {rtt}):")
        for label, c in cells.items():
            parts = []
            for k in PAIRED:
                p = c.get(k)
                if p is None:
                    continue
                rt = "" if p["saved_rtt"] is None else f", {p['saved_rtt']:.2f} RTT"
                parts.append(f"{k.removesuffix('_ms').upper()} {p['first']:,.0f} -> {p['repeat']:,.0f} ms, saved "
                             f"{p['saved']:,.0f} [{p['ci'][0]:,.0f}, {p['ci'][1]:,.0f}]{rt}")
            told = "; ".join(f"{SAID[k]} in {n} of {of}" for k, (n, of) in c["said"].items())
            lines.append(f"    {label} ({c['trials']} trials): " + "; ".join(parts) + (f"; {told}" if told else ""))
    return "\n".join(lines)
