"""Real-time web trials: long polling, Server-Sent Events and WebSocket
(RFC 6455 over HTTP/1.1, RFC 8441 over HTTP/2) between a client, a browser
running the ``realtime`` page or the loader's light clients
(``satbench-load --realtime``), and satbench-server's ``/rt/`` endpoints.

The mechanisms: long polling (``poll``), Server-Sent Events (``sse``),
WebSocket (``ws``) over HTTP/1.1 or HTTP/2, and WebTransport (``wt``) over
HTTP/3 (satbench-server's quinn stack; a browser).

A trial sets ``realtime`` (the mechanism) and ``scenario``:

    server   the server sends ``messages`` updates (``message_bytes`` each,
             ``interval_ms`` apart, or Poisson arrivals of that mean)
    client   the client sends them (over the WebSocket, or as POSTs for
             SSE and long polling, which carry nothing upstream)
    chat     both, each on its own schedule
    room     a chat room of the loader's ``clients`` (two or more): each
             sends ``messages``, and the server relays every one, as it came,
             to every other member over that member's mechanism

Every message carries its send stamp: the server's when it was due, a
client's when it sent it. All of a testbed's namespaces share the host's
clock, so a message's one-way latency is exactly its receive stamp minus its
send stamp: the receiving client's for messages down and relayed, the
server's log for messages up. Each latency is also given in units of the
path's base RTT.

No message may arrive sooner than the propagation delay of the path it
took (down: the links' forward minimum delays; up: the return ones;
relayed: both): one that does is a harness error, and the trial fails. A
message lost or delivered twice makes the trial invalid (TCP delivers every
byte once), and so does one out of order where the mechanism promises order
(a WebSocket, a WebTransport stream, an event stream, a poll's answers; the
client's POSTs are independent requests that may overtake each other:
counted as ``rt_reordered_up`` and, relayed in a room,
``rt_reordered_relay``), and a mechanism that was not what the trial asked
for, as the server's log shows it: long polling must be repeated polls, SSE one long
response, WebSocket an Upgrade over HTTP/1.1 or an extended CONNECT over
HTTP/2, WebTransport one session by extended CONNECT over HTTP/3. The
server's TCP_NODELAY, read back from each connection, must be the trial's
``nodelay`` (over TCP).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .link.spec import LinkSpec
from .metrics import nearest_rank

MECHANISMS = ("poll", "sse", "ws", "wt")
#: What satbench-server accepts of a real-time stream's query (``--describe``'s ``realtime``, its one
#: owner; tests/unit/test_contracts.py holds these equal): message sizes (from the smallest at which
#: every message is exactly its size), messages per stream, the mean interval.
MIN_MESSAGE_BYTES, MAX_MESSAGE_BYTES = 64, 1 << 20
MAX_MESSAGES = 100_000
MAX_INTERVAL_MS = 20_000

SCENARIOS = ("server", "client", "chat", "room")
ARRIVALS = ("constant", "poisson")
#: How far below its propagation delay a message may seem to arrive, at
#: least: the loader's and the server's stamps are rounded to 1 us, and a
#: browser's clock is coarsened (Chromium's stamps come in steps of 0.1 ms,
#: Firefox's in whole milliseconds: study C's full real-time set,
#: 2026-11-28). A page's stamp is two coarsened terms (performance.timeOrigin
#: and performance.now()), each off by less than one step either way, so the
#: slack is the larger of this and two of the client's steps
#: (:func:`clock_step_ms`): a Firefox message from the server was stamped
#: 1.26 ms under its path's propagation delay.
BOUND_SLACK_MS = 1.0
#: The steps a client's clock may come in, coarsest first (ms).
CLOCK_STEPS_MS = (1.0, 0.1, 0.01, 0.001)
#: The fewest stamps from which a clock's step is read (ten stamps of a 0.1 ms clock all fall on whole
#: milliseconds once in 10^10 trials).
MIN_STAMPS = 10
#: The server, as a message's sender or receiver.
SERVER = -1


@dataclass(frozen=True)
class Message:
    """One message's journey: from ``sender`` to ``receiver`` (a client's
    index, or :data:`SERVER`)."""

    dir: str  # "down" (server to client), "up" (client to server) or "relay" (client to client)
    seq: int
    sent_unix_ms: float
    recv_unix_ms: float | None  # None: never arrived
    sender: int = SERVER
    receiver: int = 0

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


@dataclass(frozen=True)
class RealtimeSpec:
    """A trial's real-time scenario (the ``realtime`` factor and its family), typed once
    (:class:`satbench.experiment.trialspec.TrialSpec`)."""

    mechanism: str
    scenario: str
    messages: int
    message_bytes: int
    interval_ms: float
    arrivals: str
    #: The clients that report: one browser, or the loader's clients (a room's members).
    clients: int


def query(rt: RealtimeSpec, session: str, seed: int) -> str:
    """The scenario's query (the realtime page's, and the loader's): a room is named after the session, and
    has the loader's clients as its members."""
    q = (f"?mech={rt.mechanism}&scenario={rt.scenario}&n={rt.messages}&size={rt.message_bytes}"
         f"&interval_ms={float(rt.interval_ms)}&arrivals={rt.arrivals}&seed={seed % 2**31}&session={session}")
    if rt.scenario == "room":
        q += f"&room={session}&members={rt.clients}"
    return q


def loader_url(rt: RealtimeSpec, session: str, seed: int, host: str = "server.test") -> str:
    """The URL the loader runs a scenario with (``satbench-load --realtime``): the endpoints' and the query."""
    return f"https://{host}/rt/{query(rt, session, seed)}"


def client_results(raw: Any) -> list[dict[str, Any] | None] | None:
    """What each client recorded of its run: the browser's page result, or each of the loader's clients'."""
    if not isinstance(raw, dict):
        return None
    if raw.get("mode") == "realtime":
        return [c.get("realtime") for c in raw.get("clients") or []] or None
    return [raw.get("page_result")]


def judge(rt: RealtimeSpec, protocol: str, results: Sequence[dict[str, Any] | None] | None,
          server_log: list[dict[str, Any]], links: Mapping[str, LinkSpec]) -> Verdict:
    """The trial's messages and metrics (its scenario ``rt`` over ``protocol``) from what its clients
    recorded and the server's log."""
    mech, scenario, n = rt.mechanism, rt.scenario, rt.messages
    if not results or any(not r for r in results):
        return Verdict({}, [], invalid="the realtime page left no result" if not results or len(results) == 1
                       else "a client left no result")
    rs: list[dict[str, Any]] = [r for r in results if r]
    want = rt.clients
    if len(rs) != want:
        return Verdict({}, [], invalid=f"{len(rs)} of {want} clients reported")
    sessions = [str(r.get("session")) for r in rs]
    of_session: dict[str, list[dict[str, Any]]] = {}
    for e in server_log:
        of_session.setdefault(str(e.get("session")), []).append(e)
    logged_of = [[e for e in of_session.get(s, []) if e.get("type") == "message"] for s in sessions]
    reqs_of = [[e for e in of_session.get(s, []) if e.get("type") == "request"] for s in sessions]
    index = {s: k for k, s in enumerate(sessions)}
    many = len(rs) > 1
    problems: list[str] = []
    messages: list[Message] = []
    reordered_up = reordered_relay = duplicated = 0
    ordered_up = mech in ("ws", "wt")  # one stream; SSE and long polling send each message as a POST of its own
    for k, r in enumerate(rs):
        who = f"client {k}: " if many else ""
        problems += [f"{who}{x}" for x in r.get("errors") or []]
        logged, reqs = logged_of[k], reqs_of[k]
        if scenario in ("server", "chat"):
            got = _by_key(r.get("down") or [], lambda m: int(m["seq"]))
            for seq in range(n):
                ms = got.get(seq, [])
                sent = float(ms[0]["t_ms"]) if ms else _due_ms(logged, seq)
                messages.append(Message("down", seq, sent if sent is not None else math.nan,
                                        float(ms[0]["recv_ms"]) if ms else None, SERVER, k))
            dup = sum(len(v) - 1 for v in got.values()) + sum(1 for s in got if not 0 <= s < n)
            if dup:
                duplicated += dup
                problems.append(f"{who}{dup} messages from the server arrived twice (or were never sent)")
            if _inversions([int(m["seq"]) for m in r.get("down") or []]):
                problems.append(f"{who}messages from the server arrived out of order")
        if scenario in ("client", "chat", "room"):
            ups = [e for e in logged if e.get("dir") == "up"]
            recv = _by_key(ups, lambda e: int(e["seq"]))
            for m in r.get("up") or []:
                seq = int(m["seq"])
                got_up = recv.get(seq, [])
                messages.append(Message("up", seq, float(m["t_ms"]),
                                        int(got_up[0]["t_recv_unix_ns"]) / 1e6 if got_up else None, k, SERVER))
            dup = sum(len(v) - 1 for v in recv.values())
            if dup:
                duplicated += dup
                problems.append(f"{who}{dup} messages from the client arrived twice")
            if len(r.get("up") or []) != n:
                problems.append(f"{who}the client sent {len(r.get('up') or [])} of {n} messages")
            inv = _inversions([int(e["seq"]) for e in ups])
            if inv and ordered_up:
                problems.append(f"{who}messages from the client arrived out of order on one stream")
            reordered_up += inv
        if scenario == "room":
            relays = r.get("down") or []
            unknown = [m for m in relays if m.get("from") not in index or m.get("from") == sessions[k]]
            if unknown:
                problems.append(f"{who}{len(unknown)} relayed messages from no other member")
            for j, sender in enumerate(rs):
                if j == k:
                    continue
                mine = [m for m in relays if m.get("from") == sessions[j]]
                got = _by_key(mine, lambda m: int(m["seq"]))
                sent_at = {int(m["seq"]): float(m["t_ms"]) for m in sender.get("up") or []}
                for seq in range(n):
                    ms = got.get(seq, [])
                    messages.append(Message("relay", seq, sent_at.get(seq, math.nan),
                                            float(ms[0]["recv_ms"]) if ms else None, j, k))
                dup = sum(len(v) - 1 for v in got.values()) + sum(1 for s in got if s not in sent_at)
                if dup:
                    duplicated += dup
                    problems.append(f"{who}{dup} messages relayed from client {j} arrived twice (or were never sent)")
                # The room relays each sender's messages in the order it had them, over an ordered stream:
                # out of order here only if the sender's own messages overtook each other (POSTs).
                inv = _inversions([int(m["seq"]) for m in mine])
                if inv and ordered_up:
                    problems.append(f"{who}messages relayed from client {j} arrived out of order")
                reordered_relay += inv
        problems += [f"{who}{x}" for x in _mechanism(mech, scenario, protocol, reqs, n)]
    lost = sum(1 for m in messages if m.recv_unix_ms is None)
    if lost:
        problems.insert(0, f"{lost} of {len(messages)} messages never arrived")
    rtt = sum(s.base_rtt_ms for s in links.values())
    metrics = _metrics(rs, messages, rtt, logged_of)
    metrics.update({"rt_lost": float(lost), "rt_duplicated": float(duplicated),
                    "rt_reordered_up": float(reordered_up), "rt_clients": float(len(rs))})
    if scenario == "room":
        metrics["rt_reordered_relay"] = float(reordered_relay)
    every = [r for reqs in reqs_of for r in reqs]
    step = clock_step_ms(rs)
    verdict = Verdict(metrics, messages, invalid="; ".join(problems[:5]) or None,
                      env={"session": sessions[0] if not many else sessions, "clock_step_ms": step,
                           "requests": len(every),
                           "websocket": sorted({str(r["websocket"]) for r in every if r.get("websocket")}) or None,
                           "webtransport": sorted({str(r["webtransport"]) for r in every
                                                   if r.get("webtransport")}) or None})
    down_ms, up_ms = one_way_ms(links)
    floor = {"down": down_ms, "up": up_ms, "relay": up_ms + down_ms}
    slack = max(BOUND_SLACK_MS, 2 * step)
    for m in messages:
        lat = m.latency_ms
        if lat is not None and lat < floor[m.dir] - slack:
            verdict.failed = (f"harness error: message {m.dir} {m.seq} took {lat:.2f} ms, below the propagation "
                              f"delay of its path {floor[m.dir]:.1f} ms by more than its clock's slack ({slack:g} ms)")
            break
    return verdict


def clock_step_ms(results: Sequence[dict[str, Any]]) -> float:
    """The coarsest step of :data:`CLOCK_STEPS_MS` that every stamp the clients made (each message's
    sending and receiving, the start) is a whole multiple of: how coarse the clients' clock is; the
    finest with fewer than :data:`MIN_STAMPS` stamps."""
    mine = {"down": "recv_ms", "up": "t_ms"}  # the client's own stamp of each message it received or sent
    stamps = [float(v) for r in results for v in (r.get("start_ms"), r.get("open_ms")) if v is not None]
    stamps += [float(m[f]) for r in results for d, f in mine.items() for m in r.get(d) or [] if m.get(f) is not None]
    us = [round(v * 1000) for v in stamps]  # whole microseconds: exact in a float for any Unix time in ms
    if len(us) < MIN_STAMPS:  # too few to tell a coarse clock from chance: the finest step, the tightest bound
        return CLOCK_STEPS_MS[-1]
    for step in CLOCK_STEPS_MS:
        if all(u % round(step * 1000) == 0 for u in us):
            return step
    return CLOCK_STEPS_MS[-1]


def wire_per_message(metrics: Mapping[str, float | None]) -> dict[str, float | None]:
    """Bytes on the satellite link (both ways, the page's load included) per message of a real-time trial."""
    n, wire = metrics.get("rt_messages"), metrics.get("wire_bytes")
    return {"rt_wire_bytes_per_message": wire / n} if n and wire is not None else {}


def _by_key(items: list[dict[str, Any]], key: Callable[[dict[str, Any]], int]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for x in items:
        out.setdefault(key(x), []).append(x)
    return out


def _inversions(seqs: list[int]) -> int:
    """How many messages arrived after one with a higher number (0: in order)."""
    top, n = -1, 0
    for s in seqs:
        if s < top:
            n += 1
        top = max(top, s)
    return n


def _due_ms(logged: list[dict[str, Any]], seq: int) -> float | None:
    """When the server had message ``seq`` due, from its log (for one the client never got)."""
    for e in logged:
        if e.get("dir") == "down" and e.get("seq") == seq and e.get("t_due_unix_ns") is not None:
            return int(e["t_due_unix_ns"]) / 1e6
    return None


def _mechanism(mech: str, scenario: str, protocol: str, reqs: list[dict[str, Any]], n: int) -> list[str]:
    """Why the server's log says the mechanism was not what the trial asked for."""
    kinds = [r.get("realtime") for r in reqs]
    sends = n if scenario != "server" and mech not in ("ws", "wt") else 0
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
    if mech == "wt":
        wt = [r for r in reqs if r.get("realtime") == "wt"]
        if len(wt) != 1 or wt[0].get("webtransport") != "extended-connect" or wt[0].get("status") != 200:
            return [f"WebTransport should have opened one session by extended CONNECT over h3; the server saw "
                    f"{len(wt)} session requests"]
    wire = {"h2": "h2", "h3": "h3"}.get(protocol, "http/1.1")
    wrong = sorted({str(r.get("proto")) for r in reqs} - {wire})
    if wrong:
        return [f"real-time requests came over {', '.join(wrong)}, not {protocol}"]
    return []


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def _metrics(rs: list[dict[str, Any]], messages: list[Message], rtt: float,
             logged_of: list[list[dict[str, Any]]]) -> dict[str, float | None]:
    """Per trial: the set-up time and the time to the first update (medians over its clients), and each
    direction's latency: median, 95th percentile (nearest rank) and maximum, in ms and in RTTs."""
    setups, firsts = [], []
    for k, r in enumerate(rs):
        start, opened = r.get("start_ms"), r.get("open_ms")
        if opened is None:
            continue
        if start is not None:
            setups.append(float(opened) - float(start))
        downs = [float(m["recv_ms"]) for m in r.get("down") or []]
        if not downs and r.get("scenario") == "client":  # the first of the client's messages the server had
            downs = [int(e["t_recv_unix_ns"]) / 1e6 for e in logged_of[k] if e.get("dir") == "up"]
        if downs:
            firsts.append(min(downs) - float(opened))
    out: dict[str, float | None] = {
        "rt_messages": float(len(messages)), "rt_path_rtt_ms": rtt or None,
        "rt_setup_ms": _median(setups), "rt_first_update_ms": _median(firsts),
    }
    if len(rs) > 1:
        out["rt_setup_max_ms"] = max(setups, default=None)
    for name, d in (("", None), ("_down", "down"), ("_up", "up"), ("_relay", "relay")):
        xs = [x for m in messages if (d is None or m.dir == d) and (x := m.latency_ms) is not None
              and not math.isnan(x)]
        if not xs:
            continue
        med, p95, mx = statistics.median(xs), nearest_rank(xs, 0.95), max(xs)
        out[f"rt_latency{name}_median_ms"], out[f"rt_latency{name}_p95_ms"] = med, p95
        out[f"rt_latency{name}_max_ms"] = mx
        if rtt > 0:
            out[f"rt_latency{name}_median_rtt"], out[f"rt_latency{name}_p95_rtt"] = med / rtt, p95 / rtt
            out[f"rt_latency{name}_max_rtt"] = mx / rtt
    return out
