"""The lower bounds of a trial on the path it ran.

The physical bound: no page load can be faster, whatever the sender does.
A measurement below it is an error of the harness, not a fast network, and
the trial fails saying so.

    lower_bound_ms  = RTT x handshake + max(RTT x request rounds, RTT + bytes / rate)

The window bound adds what a sender that obeys any standard start-up must
also pay: the round trips its window needs to grow to the page's size. A
load below it is possible (a sender may start with a huge window, or
misjudge the path's rate) but is a finding about the sender, and the trial
says so (``beats_window_bound`` = 1); it is not an error.

    window_bound_ms = RTT x handshake + max(RTT x max(request rounds, windows), RTT + bytes / rate)

- **RTT**: the path's base round trip (propagation only: the link's and
  the access link's minimum delays each way).
- **Handshake**: TCP then TLS 1.3 over TCP (2 round trips), QUIC with TLS
  1.3 (1). Fresh clients resume nothing.
- **Request rounds**: one for the HTML (or the one URL); for a page with
  objects, one more for them (HTTP/2, HTTP/3) or, over HTTP/1.1 with K
  connections, one per object each connection must fetch in turn
  (ceil(n / K)).
- **Windows** (window bound only): the round trips needed to deliver every byte (the HTML and
  the objects) if each connection's window started at the initial window
  (10 segments, or the trial's) plus 16 KB for the handshake (acknowledged
  bytes grow a window in slow start; no certificate chain here is larger)
  and grew threefold per round trip: faster than slow start, which
  doubles, and BBR start-up's 2.885.
- **Bytes over the rate**: every byte crosses the bottleneck at its constant
  rate after the request's round trip (a scheduled, traced or adaptive rate
  gives no such term: its peak is not known here).
- **Connections**: HTTP/1.1 clients use as many as the trial allows; a
  browser is assumed to use at least 6 (its own default), whatever the
  factor says, so that a browser opening more cannot fail the check.
- **Shards**: a page sharded over K hosts (K >= 2) names its shards only in
  its HTML, and at least one shard has an address of its own (no
  connection can be reused for it): its objects wait for one more
  handshake after the HTML. Each shard allows its own connections (K times
  as many over HTTP/1.1), and each connection has its own first window.

Headers, framing and retransmissions only add to a real load. The bounds
hold per client: clients sharing a link only slow each other.
"""

from __future__ import annotations

import math
from typing import Any

from .link.spec import LinkSpec

#: Window growth per round trip assumed by the bound: above slow start's 2 and
#: BBR start-up's 2.885, so that the bound stays below any real load.
GROWTH = 3.0
#: Payload bytes per packet (above what either transport carries here).
MSS = {"tcp": 1448, "quic": 1350}
#: Bytes the handshake adds to the first window (acknowledged certificates, tickets).
HANDSHAKE_BYTES = 16_384
#: HTTP/1.1 connections a browser is assumed to open at least.
BROWSER_CONNECTIONS = 6


def windows(total: int, first: int) -> int:
    """Round trips to deliver ``total`` bytes from a first window of ``first`` growing by GROWTH."""
    rounds, sent = 1, float(first)
    while sent < total:
        rounds += 1
        sent += first * GROWTH ** (rounds - 1)
    return rounds


def lower_bound_ms(factors: dict[str, Any], links: dict[str, LinkSpec], html_bytes: int, object_bytes: list[int],
                   browser: bool = False) -> dict[str, float]:
    """The bound and its parts, in ms: ``links`` holds the trial's "link" and
    perhaps its "access" link, ``html_bytes`` the one URL's size when the
    page has no objects (or the client fetches none)."""
    link = links["link"]
    rtt = link.base_rtt_ms + (links["access"].base_rtt_ms if "access" in links else 0.0)
    proto = str(factors.get("protocol", "h2"))
    quic = proto == "h3"
    handshake = 1 if quic else 2
    n = len(object_bytes)
    shards = int(factors.get("shards", 1)) if n else 1
    connections = max(1, int(factors.get("connections", 6)))
    if browser:
        connections = max(connections, BROWSER_CONNECTIONS)
    connections *= shards
    if n == 0:
        requests = 1
    elif proto == "h1":
        requests = 1 + math.ceil(n / connections)
    else:
        requests = 2
    if shards > 1:  # the shards' own handshakes, once the HTML named them
        requests += handshake
    total = html_bytes + sum(object_bytes)
    # An upload's bytes cross the return link, sent by the client (whose
    # initial window is the kernel's or the QUIC stack's default, 10).
    upload = str(factors.get("page", "")).startswith("upload:")
    way = link.config.get("return" if upload else "forward", {})
    constant = way.get("rate", {}).get("kind") == "constant" and "access" not in way
    rate_bps = (link.ret if upload else link.forward).mean_bps if constant else None
    serial_ms = total * 8 / rate_bps * 1e3 if rate_bps else 0.0
    initcwnd = None if upload else factors.get("server.quic_initcwnd" if quic else "server.tcp_initcwnd")
    initcwnd = initcwnd or 10
    conns = connections if proto == "h1" and n else shards
    first = (int(initcwnd) * MSS["quic" if quic else "tcp"] + HANDSHAKE_BYTES) * min(conns, max(n, 1))
    w = windows(total, first)
    return {"lower_bound_ms": rtt * handshake + max(rtt * requests, rtt + serial_ms),
            "window_bound_ms": rtt * handshake + max(rtt * max(requests, w), rtt + serial_ms),
            "lower_bound_rtt_ms": rtt, "lower_bound_rounds": float(handshake + requests),
            "window_bound_rounds": float(handshake + max(requests, w)), "lower_bound_serial_ms": serial_ms}
