#!/usr/bin/env python3
"""Where long polling's relays wait, from a real-time room trial's artefacts
(experiments/findings/realtime-room-poll.toml keeps them: the server's log,
the capture at the link's server end and the TLS keys). Per trial folder:

- how long a relay waited in the server for its receiver's poll (the
  sender's message received, to the relay written into a poll answer);
- for every poll answer (the server logs an answer's relays in one loop,
  at one moment), from that write to the departure of the segment that
  completes the answer (tshark, decrypted: the HTTP/2 DATA frame or the
  HTTP/1.1 response), and how many took over 300 ms;
- whether, at the write, a small segment (under one MSS) the server had
  sent on that connection was still unacknowledged: Linux's Nagle holds a
  partial segment only then (Minshall's variant, tcp_nagle_check); and for
  the held answers, when that segment left and when its ACK came back,
  relative to the write;
- over HTTP/2, whose one connection carries both, how long after the last
  POST arrived a segment of answers to POSTs left.

Usage: .venv/bin/python scripts/poll-answer-hold.py ARTEFACTS/KEY [...]
(docs/validation.md, "C: long polling over HTTP/2 with Nagle")."""

import bisect
import collections
import json
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MSS = 1448
HELD_S = 0.3
#: An answer's relays are written within this of each other (one loop in the server).
ONE_ANSWER_S = 0.005
#: An HTTP/2 DATA frame longer than this is a poll answer (one relay is over 100 bytes); a POST's answer is 3.
POLL_DATA_MIN = 50


@dataclass
class Small:
    t: float  # when it left
    end: int  # its last sequence number + 1 (relative)
    size: int


def tshark(art: Path, fields: list[str], where: str) -> list[list[str]]:
    cmd = ["tshark", "-r", str(art / "pcap" / "link" / "gateway.pcap"), "-o", f"tls.keylog_file:{art / 'tls-keys.log'}",
           "-T", "fields", "-E", "separator=|", *[x for f in fields for x in ("-e", f)], "-Y", where]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return [line.split("|") for line in out.splitlines()]


def med_ms(v: list[float]) -> str:
    return f"{statistics.median(v) * 1000:.1f} ms" if v else "-"


def trial(art: Path) -> None:
    log = [json.loads(line) for line in (art / "server" / "access.jsonl").open()]
    conn_of = {d["peer"]: d["conn"] for d in log if d.get("type") == "connection"}
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
    answers_logged = 0
    for v in writes.values():
        v.sort()
        answers_logged += 1 + sum(b - a > ONE_ANSWER_S for a, b in zip(v, v[1:]))

    posts: dict[str, list[float]] = collections.defaultdict(list)  # per connection, when its POSTs' messages came
    for d in log:
        if d.get("type") == "message" and d["dir"] == "up":
            posts[d["conn"]].append(d["t_recv_unix_ns"] / 1e9)
    for v in posts.values():
        v.sort()
    post_wait = []  # a segment of HTTP/2 answers to POSTs (DATA of a few bytes): how long after the last POST it left
    small: dict[str, list[Small]] = collections.defaultdict(list)
    acks: dict[str, list[tuple[float, int]]] = collections.defaultdict(list)
    ends: list[tuple[float, str]] = []  # segments that complete a poll answer (HTTP/2 DATA, HTTP/1.1 response)
    for t, src, sp, dst, dp, ln, seq, ack, types, lengths, code in tshark(
            art, ["frame.time_epoch", "ip.src", "tcp.srcport", "ip.dst", "tcp.dstport", "tcp.len", "tcp.seq",
                  "tcp.ack", "http2.type", "http2.length", "http.response.code"], "tcp"):
        to, frm = f"{dst}:{dp}", f"{src}:{sp}"
        if to in conn_of:
            data = [int(n) for n, ty in zip(lengths.split(","), types.split(",")) if ty == "0"] if types else []
            if (data and max(data) > POLL_DATA_MIN) or (code and not types):
                ends.append((float(t), to))
            if 0 < int(ln) < MSS:
                small[to].append(Small(float(t), int(seq) + int(ln), int(ln)))
                p = posts[conn_of[to]]
                if data and max(data) <= POLL_DATA_MIN and (j := bisect.bisect_right(p, float(t))):
                    post_wait.append(float(t) - p[j - 1])
        elif frm in conn_of:
            acks[frm].append((float(t), int(ack)))

    def blocking(peer: str, t: float) -> Small | None:
        """The last small segment sent before t, if it was unacknowledged at t."""
        sent = [s for s in small[peer] if s.t < t]
        acked = max((a for ts, a in acks[peer] if ts <= t), default=0)
        return sent[-1] if sent and sent[-1].end > acked else None

    def acked_at(peer: str, s: Small) -> float | None:
        return next((ts for ts, a in acks[peer] if a >= s.end and ts > s.t), None)

    held: list[tuple[float, Small | None, float, float, str]] = []  # hold, blocking segment, write, done, peer
    free: list[Small | None] = []
    for t, peer in ends:
        w = writes[conn_of[peer]]
        i = bisect.bisect_right(w, t)
        if i == 0 or t - w[i - 1] > 5:
            continue  # an answer without relays (the room's start, its end)
        write = first = w[i - 1]
        while i - 2 >= 0 and first - w[i - 2] <= ONE_ANSWER_S:
            i -= 1
            first = w[i - 1]
        b = blocking(peer, first)
        if t - write > HELD_S:
            held.append((t - write, b, first, t, peer))
        else:
            free.append(b)

    nd = "off" if nodelay == {True} else "on" if nodelay == {False} else "mixed"
    print(f"{art.name}: {'/'.join(sorted(protos))}, Nagle {nd}")
    print(f"  relay waiting for its receiver's poll: median {med_ms(waited)} ({len(waited)} relays)")
    print(f"  poll answers found in the capture: {len(held) + len(free)} of {answers_logged} in the server's log")
    print(f"  completed over {HELD_S * 1000:.0f} ms after their write: {len(held)}"
          + (f", median {med_ms([h[0] for h in held])}" if held else ""))
    print(f"  segments of answers to POSTs (HTTP/2): {len(post_wait)}, leaving a median "
          f"{med_ms(post_wait)} after it, {sum(x > 0.1 for x in post_wait)} over 100 ms")
    blocked = [(b, w, done, peer) for _, b, w, done, peer in held if b]
    print(f"  a small segment unacknowledged at the write: {len(blocked)} of the {len(held)} held, "
          f"{sum(b is not None for b in free)} of the {len(free)} not held")
    if blocked:
        sizes = sorted(b.size for b, *_ in blocked)
        left = [b.t - w for b, w, _, _ in blocked]
        back = [(a, w, done) for b, w, done, peer in blocked if (a := acked_at(peer, b)) is not None]
        print(f"  the blocking segment: {sizes[0]}-{sizes[-1]} bytes (median {statistics.median(sizes):.0f}), left "
              f"{med_ms([-x for x in left])} before the write (median); its ACK came back "
              f"{med_ms([a - w for a, w, _ in back])} after the write, and the answer "
              f"completed {med_ms([done - a for a, _, done in back])} after that ACK (medians; {len(back)} of "
              f"{len(blocked)} ACKs found)")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: poll-answer-hold.py ARTEFACTS/KEY [...]")
    for a in sys.argv[1:]:
        trial(Path(a))
