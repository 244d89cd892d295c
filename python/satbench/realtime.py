"""Real-time web trials: long polling, Server-Sent Events and WebSocket
(RFC 6455 over HTTP/1.1, RFC 8441 over HTTP/2) between a browser running
the ``realtime`` page and satbench-server's ``/rt/`` endpoints.

A trial sets ``realtime`` (the mechanism) and ``scenario``:

    server   the server sends ``messages`` updates (``message_bytes`` each,
             ``interval_ms`` apart, or Poisson arrivals of that mean)
    client   the client sends them (over the WebSocket, or as POSTs for
             SSE and long polling, which carry nothing upstream)
    chat     both, each on its own schedule

Every message carries its send stamp: the server's when it was due, the
client's when it sent it. All of a testbed's namespaces share the host's
clock, so a message's one-way latency is exactly its receive stamp minus
its send stamp: the client's for messages down, the server's log for
messages up. Each latency is also given in units of the path's base RTT.

No message may arrive sooner than its direction's one-way propagation
delay (the sum of the path's links' minimum delays): one that does is a
harness error, and the trial fails. A message lost or delivered twice makes
the trial invalid (TCP delivers every byte once), and so does a mechanism
that was not what the trial asked for, as the server's log shows it: long
polling must be repeated polls, SSE one long response, WebSocket an Upgrade
over HTTP/1.1 or an extended CONNECT over HTTP/2. The server's TCP_NODELAY,
read back from each connection, must be the trial's ``nodelay``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .link.spec import LinkSpec
from .metrics import nearest_rank

MECHANISMS = ("poll", "sse", "ws")
SCENARIOS = ("server", "client", "chat")
ARRIVALS = ("constant", "poisson")
#: How far below its one-way propagation delay a message may seem to arrive
#: (the browser's clock is coarsened to 0.1 ms; stamps are rounded to 1 us).
BOUND_SLACK_MS = 1.0


@dataclass(frozen=True)
class Message:
    """One message's journey."""

    dir: str  # "down" (server to client) or "up"
    seq: int
    sent_unix_ms: float
    recv_unix_ms: float | None  # None: never arrived

    @property
    def latency_ms(self) -> float | None:
        return None if self.recv_unix_ms is None else self.recv_unix_ms - self.sent_unix_ms


@dataclass
class Verdict:
    """A trial's real-time metrics, messages, and why it is not a valid measurement (if it is not)."""

    metrics: dict[str, float | None]
    messages: list[Message]
    invalid: str | None = None
    failed: str | None = None
    env: dict[str, Any] | None = None


def one_way_ms(links: Mapping[str, LinkSpec]) -> tuple[float, float]:
    """The path's one-way propagation delays (down, up): its links' minimum delays added."""
    return (sum(s.forward.min_delay_ms for s in links.values()), sum(s.ret.min_delay_ms for s in links.values()))


def query(factors: Mapping[str, Any], session: str, seed: int) -> str:
    """The realtime page's query for a trial's factors."""
    return (f"?mech={factors['realtime']}&scenario={factors.get('scenario', 'server')}"
            f"&n={int(factors.get('messages', 100))}&size={int(factors.get('message_bytes', 100))}"
            f"&interval_ms={float(factors.get('interval_ms', 1000))}&arrivals={factors.get('arrivals', 'constant')}"
            f"&seed={seed % 2**31}&session={session}")


def judge(factors: Mapping[str, Any], page: dict[str, Any] | None, server_log: list[dict[str, Any]],
          links: Mapping[str, LinkSpec]) -> Verdict:
    """The trial's messages and metrics from the client's result and the server's log."""
    mech, scenario = str(factors["realtime"]), str(factors.get("scenario", "server"))
    n = int(factors.get("messages", 100))
    if not page:
        return Verdict({}, [], invalid="the realtime page left no result")
    session = str(page.get("session"))
    reqs = [e for e in server_log if e.get("type") == "request" and e.get("session") == session]
    logged = [e for e in server_log if e.get("type") == "message" and e.get("session") == session]
    messages: list[Message] = []
    problems: list[str] = [str(x) for x in page.get("errors") or []]
    if scenario != "client":
        got: dict[int, list[dict[str, Any]]] = {}
        for m in page.get("down") or []:
            got.setdefault(int(m["seq"]), []).append(m)
        for seq in range(n):
            ms = got.get(seq, [])
            sent = float(ms[0]["t_ms"]) if ms else _due_ms(logged, "down", seq)
            messages.append(Message("down", seq, sent if sent is not None else math.nan,
                                    float(ms[0]["recv_ms"]) if ms else None))
        dup = sum(len(v) - 1 for v in got.values()) + sum(1 for s in got if not 0 <= s < n)
        order = [int(m["seq"]) for m in page.get("down") or []]
        if dup:
            problems.append(f"{dup} messages from the server arrived twice (or were never sent)")
        if order != sorted(order):
            problems.append("messages from the server arrived out of order")
    if scenario != "server":
        recv: dict[int, list[dict[str, Any]]] = {}
        for e in logged:
            if e.get("dir") == "up":
                recv.setdefault(int(e["seq"]), []).append(e)
        for m in page.get("up") or []:
            seq = int(m["seq"])
            r = recv.get(seq, [])
            messages.append(Message("up", seq, float(m["t_ms"]), int(r[0]["t_recv_unix_ns"]) / 1e6 if r else None))
        dup = sum(len(v) - 1 for v in recv.values())
        if dup:
            problems.append(f"{dup} messages from the client arrived twice")
        if len(page.get("up") or []) != n:
            problems.append(f"the client sent {len(page.get('up') or [])} of {n} messages")
    lost = sum(1 for m in messages if m.recv_unix_ms is None)
    if lost:
        problems.append(f"{lost} of {len(messages)} messages never arrived")
    problems += _mechanism(mech, scenario, str(factors.get("protocol")), reqs, n)
    rtt = sum(s.base_rtt_ms for s in links.values())
    metrics = _metrics(page, messages, rtt, lost, scenario, logged)
    verdict = Verdict(metrics, messages, invalid="; ".join(problems) or None,
                      env={"session": session, "requests": len(reqs),
                           "websocket": sorted({str(r["websocket"]) for r in reqs if r.get("websocket")}) or None})
    down_ms, up_ms = one_way_ms(links)
    for m in messages:
        floor = down_ms if m.dir == "down" else up_ms
        lat = m.latency_ms
        if lat is not None and lat < floor - BOUND_SLACK_MS:
            verdict.failed = (f"harness error: message {m.dir} {m.seq} took {lat:.2f} ms, below the one-way "
                              f"propagation delay {floor:.1f} ms")
            break
    return verdict


def wire_per_message(metrics: Mapping[str, float | None]) -> dict[str, float | None]:
    """Bytes on the satellite link (both ways, the page's load included) per message of a real-time trial."""
    n, wire = metrics.get("rt_messages"), metrics.get("wire_bytes")
    return {"rt_wire_bytes_per_message": wire / n} if n and wire is not None else {}


def _due_ms(logged: list[dict[str, Any]], direction: str, seq: int) -> float | None:
    """When the server had message ``seq`` due, from its log (for one the client never got)."""
    for e in logged:
        if e.get("dir") == direction and e.get("seq") == seq and e.get("t_due_unix_ns") is not None:
            return int(e["t_due_unix_ns"]) / 1e6
    return None


def _mechanism(mech: str, scenario: str, protocol: str, reqs: list[dict[str, Any]], n: int) -> list[str]:
    """Why the server's log says the mechanism was not what the trial asked for."""
    kinds = [r.get("realtime") for r in reqs]
    sends = n if scenario != "server" and mech != "ws" else 0
    if kinds.count("send") != sends:
        return [f"the client's messages came as {kinds.count('send')} POSTs, not {sends}"]
    polls = 2 if scenario != "client" else 1  # the opening, and (with updates to fetch) at least one poll
    if mech == "poll" and kinds.count("poll") < polls:
        return [f"long polling made {kinds.count('poll')} polls (at least {polls})"]
    if mech == "sse" and kinds.count("sse") != 1:
        return [f"SSE made {kinds.count('sse')} event-stream requests, not one"]
    if mech == "ws":
        ws = [r for r in reqs if r.get("realtime") == "ws"]
        want = "extended-connect" if protocol == "h2" else "upgrade"
        if len(ws) != 1 or ws[0].get("websocket") != want:
            got = ", ".join(str(r.get("websocket")) for r in ws) or "none"
            return [f"the WebSocket should have opened by {want} over {protocol}; the server saw: {got}"]
    wrong = sorted({str(r.get("proto")) for r in reqs} - {"h2" if protocol == "h2" else "http/1.1"})
    if wrong:
        return [f"real-time requests came over {', '.join(wrong)}, not {protocol}"]
    return []


def _metrics(page: dict[str, Any], messages: list[Message], rtt: float, lost: int, scenario: str,
             logged: list[dict[str, Any]]) -> dict[str, float | None]:
    lat = [x for m in messages if (x := m.latency_ms) is not None and not math.isnan(x)]
    start, opened = page.get("start_ms"), page.get("open_ms")
    first: float | None = None
    if opened is not None:
        if scenario != "client":
            downs = [float(m["recv_ms"]) for m in page.get("down") or []]
            first = min(downs) - float(opened) if downs else None
        else:
            ups = [int(e["t_recv_unix_ns"]) / 1e6 for e in logged if e.get("dir") == "up"]
            first = min(ups) - float(opened) if ups else None
    out: dict[str, float | None] = {
        "rt_messages": float(len(messages)), "rt_lost": float(lost), "rt_path_rtt_ms": rtt or None,
        "rt_setup_ms": float(opened) - float(start) if opened is not None and start is not None else None,
        "rt_first_update_ms": first,
    }
    for name, xs in (("", lat), ("_down", [x for m in messages if m.dir == "down" and (x := m.latency_ms) is not None]),
                     ("_up", [x for m in messages if m.dir == "up" and (x := m.latency_ms) is not None])):
        if not xs:
            continue
        med, p95, mx = statistics.median(xs), nearest_rank(xs, 0.95), max(xs)
        out[f"rt_latency{name}_median_ms"], out[f"rt_latency{name}_p95_ms"] = med, p95
        out[f"rt_latency{name}_max_ms"] = mx
        if rtt > 0:
            out[f"rt_latency{name}_median_rtt"], out[f"rt_latency{name}_p95_rtt"] = med / rtt, p95 / rtt
            out[f"rt_latency{name}_max_rtt"] = mx / rtt
    return out
