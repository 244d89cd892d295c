#!/usr/bin/env python3
"""A population's groups side by side, one row per cell (the factors that vary
between the experiment's trials), from its valid trials:

- each group's page load time: the median over trials of the group's PLT
  (its clients' median), with the range;
- each group's connections (median over trials);
- what limited the group's connections, from the server's classifier
  (crates/server/src/limits.rs): the share of their time application-limited
  and window-limited (cwnd), summed over trials;
- the group's TCP retransmissions: the median over trials of the sum over its
  connections (each connection's last TCP_INFO).

A group's connections are the server's connections whose ALPN is the group's
protocol (h1: http/1.1, or none in cleartext; h2; h3). Trials stored before the
server's summary kept each connection's ALPN (2026-12-05) have no group
columns: the script says so.

Usage: .venv/bin/python scripts/population-cells.py DB EXPERIMENT
(docs/validation.md, "B: HTTP/2 on the LAN, and Jain without loss")."""

import json
import statistics
import sys
from typing import Any

from satbench import open_results

ALPN = {"h1": ("http/1.1", None), "h2": ("h2",), "h3": ("h3",)}
IGNORED = {"rep", "seed"}


def group_of(conn: dict[str, Any]) -> str | None:
    """The group a connection served; None for a record without an ALPN (stored before the
    summary kept it), or a QUIC one without (cleartext is TCP's only)."""
    if "alpn" not in conn or (conn["alpn"] is None and conn.get("transport") != "tcp"):
        return None
    return next((g for g, names in ALPN.items() if conn["alpn"] in names), None)


def main(db: str, experiment: str) -> None:
    with open_results(db) as r:
        rows = r.db.execute(
            "SELECT t.id, t.factors, t.server_summary FROM trials t JOIN experiments e ON e.id = t.experiment_id "
            "WHERE e.name = ? AND t.status = 'valid' ORDER BY t.id", (experiment,)).fetchall()
        clients = r.clients(experiment)
    if not rows:
        sys.exit(f"population-cells: no valid trial of {experiment} in {db}")
    trials = [(tid, json.loads(f), json.loads(s or "{}")) for tid, f, s in rows]
    keys = sorted({k for _, f, _ in trials for k in f} - IGNORED)
    varying = [k for k in keys if len({json.dumps(f.get(k), sort_keys=True) for _, f, _ in trials}) > 1]
    groups = sorted({str(g) for g in clients["grp"].dropna()})
    cells: dict[tuple[str, ...], list[tuple[int, dict[str, Any]]]] = {}
    for tid, f, s in trials:
        cells.setdefault(tuple(json.dumps(f.get(k)) for k in varying), []).append((tid, s))
    per = " / ".join(groups)
    print(f"| {' | '.join(varying) or 'all'} | PLT {per}: median (range), ms | connections {per} | "
          + " | ".join(f"{g} connections' time: application / cwnd" for g in groups)
          + f" | retransmissions {per} | trials |")
    print("|" + "---|" * (max(len(varying), 1) + 4 + len(groups)))
    unlabelled = False
    for cell, ts in sorted(cells.items()):
        ids = {tid for tid, _ in ts}
        c = clients[clients["trial_id"].isin(ids) & clients["valid"].astype(bool)]
        plt, conns, shares, retrans = [], [], [], []
        for g in groups:
            per_trial = c[c["grp"] == g].groupby("trial_id")["plt_ms"].median()
            plt.append(f"{per_trial.median():.0f} ({per_trial.min():.0f}-{per_trial.max():.0f})"
                       if len(per_trial) else "-")
            n = c[c["grp"] == g].groupby("trial_id")["connections"].sum()
            conns.append(f"{n.median():.0f}" if len(n) else "-")
            mine = [[x for x in s.get("connections_limited") or [] if group_of(x) == g] for _, s in ts]
            if not all("alpn" in x for _, s in ts for x in s.get("connections_limited") or []):
                unlabelled = True
                shares.append("-")
                retrans.append("-")
                continue
            app = sum(float(x.get("application") or 0) for xs in mine for x in xs)
            cwnd = sum(float(x.get("cwnd") or 0) for xs in mine for x in xs)
            total = sum(float(v) for xs in mine for x in xs for k, v in x.items()
                        if k not in ("conn", "transport", "alpn", "retrans") and v is not None)
            shares.append(f"{100 * app / total:.0f} / {100 * cwnd / total:.0f} %" if total else "-")
            sums = [sum(int(x.get("retrans") or 0) for x in xs) for xs in mine]
            retrans.append(f"{statistics.median(sums):.0f}")
        where = " | ".join(str(json.loads(v)) for v in cell) or "all"
        print(f"| {where} | {' / '.join(plt)} | {' / '.join(conns)} | {' | '.join(shares)} | {' / '.join(retrans)} "
              f"| {len(ts)} |")
    if unlabelled:
        print("\nSome trials' server summaries have no ALPN per connection (stored before 2026-12-05): "
              "their cells have no group columns; run the experiment again for them.")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: population-cells.py DB EXPERIMENT")
    main(sys.argv[1], sys.argv[2])
