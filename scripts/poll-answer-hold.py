#!/usr/bin/env python3
"""Where long polling's relays wait, from a real-time room trial's artefacts
(experiments/findings/realtime-room-poll.toml keeps them: the server's log,
the capture at the link's server end and the TLS keys). Per trial folder:

- how long a relay waited in the server for its receiver's poll (the
  sender's message received, to the relay written into a poll answer);
- for every poll answer carrying relays, from the server's last relay write
  to the departure of the segment that completes the answer (tshark,
  decrypted: HTTP/2's DATA frame, HTTP/1.1's response), and how many took
  over 300 ms;
- whether, at the write, a small segment (under one MSS) the server had
  sent on that connection was still unacknowledged: Linux's Nagle holds a
  partial segment only then (Minshall's variant, tcp_nagle_check), when
  the answer's first relay was written.

Usage: .venv/bin/python scripts/poll-answer-hold.py ARTEFACTS/KEY [...]
(docs/validation.md, "C: long polling over HTTP/2 with Nagle")."""

import bisect
import collections
import json
import statistics
import subprocess
import sys
from pathlib import Path

MSS = 1448
HELD_S = 0.3


def tshark(art: Path, fields: list[str], where: str) -> list[list[str]]:
    cmd = ["tshark", "-r", str(art / "pcap" / "link" / "gateway.pcap"), "-o", f"tls.keylog_file:{art / 'tls-keys.log'}",
           "-T", "fields", "-E", "separator=|", *[x for f in fields for x in ("-e", f)], "-Y", where]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [line.split("|") for line in out.splitlines()]


def trial(art: Path) -> None:
    log = [json.loads(line) for line in (art / "server" / "access.jsonl").open()]
    peer = {d["conn"]: d["peer"] for d in log if d.get("type") == "connection"}
    conn_of_port = {p.rsplit(":", 1)[1]: c for c, p in peer.items()}
    protos = {d["proto"] for d in log if d.get("type") == "request"}
    nodelay = {d.get("nodelay") for d in log if d.get("type") == "connection"}
    up = {(d["session"], d["seq"]): d["t_recv_unix_ns"] / 1e9
          for d in log if d.get("type") == "message" and d["dir"] == "up"}
    writes: dict[str, list[float]] = collections.defaultdict(list)
    waited = []
    for d in log:
        if d.get("type") == "message" and d["dir"] == "relay":
            t = d["t_write_unix_ns"] / 1e9
            writes[d["conn"]].append(t)
            if (d["from"], d["seq"]) in up:
                waited.append(t - up[(d["from"], d["seq"])])
    for v in writes.values():
        v.sort()

    small: dict[str, list[tuple[float, int]]] = collections.defaultdict(list)
    acks: dict[str, list[tuple[float, int]]] = collections.defaultdict(list)
    for t, sp, dp, ln, seq, ack in tshark(art, ["frame.time_epoch", "tcp.srcport", "tcp.dstport", "tcp.len",
                                                "tcp.seq_raw", "tcp.ack_raw"], "tcp"):
        if dp in conn_of_port and 0 < int(ln) < MSS:
            small[dp].append((float(t), int(seq) + int(ln)))
        elif sp in conn_of_port:
            acks[sp].append((float(t), int(ack)))

    def small_unacked(port: str, t: float) -> bool:
        sent = [end for ts, end in small[port] if ts < t]
        acked = max((a for ts, a in acks[port] if ts <= t), default=0)
        return bool(sent) and sent[-1] > acked

    answers = []  # (last write to completion, a small segment unacknowledged at the answer's first write)
    done: dict[str, float] = collections.defaultdict(float)  # per connection, when its last answer completed
    for t, dp, types, lengths in tshark(art, ["frame.time_epoch", "tcp.dstport", "http2.type", "http2.length"],
                                        "(http2.type == 0) || http.response"):
        conn = conn_of_port.get(dp)
        if conn is None:
            continue
        if types:  # HTTP/2: a poll answer is a DATA frame of many relays; the POSTs' answers are 3 bytes
            data = [int(n) for n, ty in zip(lengths.split(","), types.split(",")) if ty == "0"]
            if max(data, default=0) < 300:
                continue
        w = writes[conn]
        i = bisect.bisect_right(w, float(t))
        if i == 0 or float(t) - w[i - 1] > 5:
            continue
        first = w[bisect.bisect_right(w, done[conn])]
        done[conn] = float(t)
        answers.append((float(t) - w[i - 1], small_unacked(dp, first)))

    held = [a for a in answers if a[0] > HELD_S]
    free = [a for a in answers if a[0] <= HELD_S]
    print(f"{art.name}: {'/'.join(sorted(protos))}, Nagle {'off' if nodelay == {True} else 'on'}")
    print(f"  relay waiting for its receiver's poll: median {statistics.median(waited) * 1000:.0f} ms "
          f"({len(waited)} relays)")
    print(f"  poll answers completed over {HELD_S * 1000:.0f} ms after their write: {len(held)} of {len(answers)}"
          + (f", median {statistics.median(h for h, _ in held) * 1000:.0f} ms" if held else ""))
    print(f"  a small segment unacknowledged at the write: {sum(s for _, s in held)} of the {len(held)} held, "
          f"{sum(s for _, s in free)} of the {len(free)} not held")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: poll-answer-hold.py ARTEFACTS/KEY [...]")
    for a in sys.argv[1:]:
        trial(Path(a))
