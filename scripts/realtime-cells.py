#!/usr/bin/env python3
"""The real-time cells of an experiment as a Markdown table: per mechanism,
scenario, HTTP version and direction, one column per client (Chromium,
Firefox, the loader's room) and Nagle setting. Each cell: the median of the
valid trials' median one-way latencies in ms, [the range of those
medians], (the median in RTTs), and the number of trials
(satbench.workloads.realtime.trial_medians, whose ms part is the report's
real-time "trial medians" column), laid out one column per client and
Nagle setting. QUIC has no Nagle:
WebTransport's trials are in the "Nagle off" columns.

Usage: .venv/bin/python scripts/realtime-cells.py DB EXPERIMENT
(docs/validation.md, "C5 at full size"; docs/results.md, "Real-time web")."""

import sys

from satbench import open_results
from satbench.workloads.realtime import trial_medians

NAMES = {"poll": "long polling", "sse": "SSE", "ws": "WebSocket", "wt": "WebTransport"}
#: The directions a scenario's updates run in: the server's, the client's, both in a chat, member to member in a room.
DIRS = {"server": ("down",), "client": ("up",), "chat": ("down", "up"), "room": ("relay",)}


def cell(g: object, direction: str) -> str:
    per = trial_medians(g, direction)
    return "-" if per is None else str(per)


def main(db: str, experiment: str) -> None:
    with open_results(db) as r:
        df = r.trials(experiment)
    d = df[(df["status"] == "valid") & df["realtime"].notna()]
    clients = [c for c in ("chromium", "firefox", "loader") if c in set(d["client"])]
    cols = [(c, nd) for c in clients for nd in (True, False)]
    head = " | ".join(f"{c}, Nagle {'off' if nd else 'on'}" for c, nd in cols)
    print(f"| mechanism | scenario | HTTP | direction | {head} |")
    print("|" + "---|" * (4 + len(cols)))
    for mech in NAMES:
        for sc, dirs in DIRS.items():
            for proto in ("h1", "h2", "h3"):
                g = d[(d["realtime"] == mech) & (d["scenario"] == sc) & (d["protocol"] == proto)]
                if g.empty:
                    continue
                for dr in dirs:
                    cells = [cell(g[(g["client"] == c) & (g["nodelay"] == nd)], dr) for c, nd in cols]
                    print(f"| {NAMES[mech]} | {sc} | {proto} | {dr} | " + " | ".join(cells) + " |")
    print(f"\n{len(d)} valid trials; {d['rt_path_rtt_ms'].median():.0f} ms path RTT (median)"
          if "rt_path_rtt_ms" in d and not d.empty else "")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: realtime-cells.py DB EXPERIMENT")
    main(sys.argv[1], sys.argv[2])
