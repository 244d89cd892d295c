"""The lower bounds of a trial on the path it ran.

The physical bound: no page load can be faster, whatever the sender does.
A measurement below it is an error of the harness, not a fast network, and
the trial fails saying so.

Every time below is a number of the path's base round trips plus the time
some bytes need at the bottleneck's highest rate, and the bound is the
largest of these sums (:class:`Term`). The chains that give them:

- **Start**: the client looks its name up across the link if the trial's
  DNS is there (one round trip), then opens its connection: TCP then TLS
  1.3 over TCP (2 round trips), cleartext HTTP/1.1 over TCP (1), QUIC with
  TLS 1.3 (1). Fresh clients resume nothing. A returning one (a repeat
  view) sends its request with QUIC's first flight (0-RTT: no round trip
  first); over TCP it still needs the TCP and TLS round trips (resuming TLS
  1.3 without early data saves none; neither browser sends early data over
  TCP), less the TCP one when it opens with Fast Open (the loader, when the
  server has it); and if its HTTP cache is warm and the origins let it keep
  what it fetched, nothing need cross the link at all (the bound is 0). Its
  lookups are counted as a first view's (the testbed's DNS gives no time to
  live). The HTML's request leaves then
  (``T0``); every other connection to the HTML's origin may have been
  opened beside the first, so it is ready at ``T0`` too.
- **Discovery**: an object named by the HTML may be requested once the
  HTML's first byte is in (``T0`` + 1 round trip: a browser's preload
  scanner reads the HTML as it streams); one named by a style sheet or a
  script once that file is in whole (its request, one round trip and its
  bytes: no browser applies half a style sheet or runs half a script). A
  sharded page's other origins are named only in the HTML: their
  connections are opened once its first byte is in, a handshake (and a
  lookup) later (HTTP/2 and HTTP/3 may coalesce ``s1.test`` onto the HTML's
  connection: it shares that address and certificate).
- **Each response**: its last byte arrives one round trip and its bytes'
  time after its request left.
- **Shared bytes**: every byte requested at or after an instant crosses the
  bottleneck after that instant's round trip: for each instant at which
  requests may leave, that instant + 1 round trip + those bytes' time.
- **HTTP/1.1 connections**: each connection carries one response at a time
  and sends its next request once the last response is in, so a connection
  with objects o1..om takes m round trips plus their bytes' time in turn.
  With K connections per origin (the client's real limit: Chromium's 6,
  Firefox's and the loader's setting), some connection carries at least
  ceil(n / K) of the n objects requested at or after an instant, at least
  the smallest ones; no connection can do better than a K-th of the
  whole. The HTML counts as the first response on its origin's first
  connection.

The bytes' time is ``max(0, bytes - burst) / peak``: the direction's
highest rate (a constant rate; a schedule's or a LEO trace's peak; a
Mahimahi trace's busiest millisecond, which may also deliver its one
millisecond's bytes at once as ``burst``; the best MODCOD of an adaptive
carrier; a return carrier's whole rate), as the emulator derives it
(``peak_bps``); an access link in series adds its own round trip and
takes the lower of the two peaks. Headers, framing, handshake messages,
retransmissions and every sender's start-up only add to a real load.

The window bound adds what a sender that obeys any standard start-up must
also pay: the round trips its window needs to grow to the page's size (each
connection's window starting at the initial window, 10 segments or the
trial's, plus 16 KB for the handshake, and growing threefold per round
trip: faster than slow start, which doubles, and BBR start-up's 2.885). A
load below it is possible (a sender may start with a huge window) but is a
finding about the sender, and the trial says so (``beats_window_bound`` =
1); it is not an error.

The bounds hold per client: clients sharing a link only slow each other.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .link.spec import DirectionNumbers, LinkSpec
from .model import Protocol

#: Window growth per round trip assumed by the window bound: above slow start's 2 and
#: BBR start-up's 2.885, so that the bound stays below any real load.
GROWTH = 3.0
#: Payload bytes per packet (above what either transport carries here).
MSS = {"tcp": 1448, "quic": 1350}
#: Bytes the handshake adds to the first window (acknowledged certificates, tickets).
HANDSHAKE_BYTES = 16_384
#: Chromium's HTTP/1.1 connections per host (it has no switch to change them).
CHROMIUM_CONNECTIONS = 6
#: Content types whose file must arrive whole before what it names is known.
WHOLE_PARENT_TYPES = ("text/css", "application/javascript", "text/javascript")


@dataclass(frozen=True, order=True)
class Term:
    """A time on the path: ``rounds`` base round trips plus ``serial_ms`` of
    bytes at the bottleneck's peak. Ordered by value once a round trip is
    given (see :meth:`ms`); added part by part."""

    rounds: float = 0.0
    serial_ms: float = 0.0

    def __add__(self, other: "Term") -> "Term":
        return Term(self.rounds + other.rounds, self.serial_ms + other.serial_ms)

    def ms(self, rtt_ms: float) -> float:
        return self.rounds * rtt_ms + self.serial_ms


@dataclass(frozen=True)
class Resource:
    """One object of a page as the bound sees it."""

    bytes: int
    #: The object that names it (an index into the page's objects), None for the HTML.
    parent: int | None = None
    #: Whether the parent must arrive whole before this object is known (a style sheet, a script).
    whole_parent: bool = False
    #: 0: the HTML's origin; j >= 1: shard j of a sharded page (s1.test shares the HTML's address).
    shard: int = 0


@dataclass(frozen=True)
class PageShape:
    """What a load must fetch: the HTML (or the one URL) and its objects."""

    html_bytes: int
    objects: tuple[Resource, ...] = ()

    @classmethod
    def from_manifest(cls, manifest: dict[str, object], *, shards: int = 1,
                      fetched: Iterable[str] | None = None) -> "PageShape":
        """A generated page from its manifest: each object's parent and type,
        its shard (the HTML's references dealt to s1 ... sK in document
        order, as :func:`satbench.endpoints.pages.shard` writes them; what a
        style sheet or script names stays on its shard). With ``fetched``
        (the objects' paths a client really loaded), only those count."""
        raw = manifest.get("objects")
        objs: list[dict[str, object]] = [o for o in raw if isinstance(o, dict)] if isinstance(raw, list) else []
        keep = None if fetched is None else set(fetched)
        by_path = {str(o["path"]): o for o in objs}
        html_refs = sorted((o for o in objs if o.get("referenced_by") == "index.html"),
                           key=lambda o: int(str(o.get("order", 0))))
        shard_of = {str(o["path"]): (i % shards + 1 if shards > 1 else 0) for i, o in enumerate(html_refs)}

        def shard(path: str) -> int:
            seen: set[str] = set()
            while path not in shard_of and path in by_path and path not in seen:
                seen.add(path)
                path = str(by_path[path].get("referenced_by"))
            return shard_of.get(path, 0)

        chosen = [o for o in objs if keep is None or str(o["path"]) in keep]
        index = {str(o["path"]): i for i, o in enumerate(chosen)}
        res = []
        for o in chosen:
            by = str(o.get("referenced_by", "index.html"))
            parent = index.get(by) if by != "index.html" else None
            whole = by != "index.html" and str(by_path.get(by, {}).get("type", "")) in WHOLE_PARENT_TYPES
            res.append(Resource(int(str(o["bytes"])), parent, whole, shard(str(o["path"]))))
        html = manifest.get("html_bytes", 0)
        return cls(int(html) if isinstance(html, (int, float, str)) else 0, tuple(res))

    @classmethod
    def load(cls, root: Path, page: str, *, shards: int = 1, fetched: Iterable[str] | None = None) -> "PageShape":
        return cls.from_manifest(json.loads((root / page / "manifest.json").read_text()), shards=shards,
                                 fetched=fetched)


@dataclass(frozen=True)
class Bottleneck:
    """The path the bytes cross: its base round trip and the highest rate of
    the direction they cross (None: unlimited), with a trace's burst."""

    rtt_ms: float
    peak_bps: float | None
    burst_bytes: int = 0

    @classmethod
    def of(cls, links: dict[str, LinkSpec], *, upload: bool = False) -> "Bottleneck":
        """The trial's "link" and perhaps its "access" link, in series."""
        ways: list[DirectionNumbers] = [(s.ret if upload else s.forward) for s in links.values()]
        rtt = sum(s.base_rtt_ms for s in links.values())
        peaks = [(w.peak_bps, w.peak_burst_bytes) for w in ways if w.peak_bps is not None]
        if not peaks:
            return cls(rtt, None)
        bps, burst = min(peaks)
        return cls(rtt, bps, burst)

    def serial_ms(self, nbytes: int) -> float:
        """The shortest time ``nbytes`` can take to cross."""
        if self.peak_bps is None or nbytes <= 0:
            return 0.0
        return max(0, nbytes - self.burst_bytes) * 8 / self.peak_bps * 1e3


@dataclass(frozen=True)
class ClientLimits:
    """What the client does that the bound depends on."""

    protocol: Protocol
    #: HTTP/1.1 connections per origin.
    connections: int = CHROMIUM_CONNECTIONS
    #: TLS (False: cleartext HTTP/1.1).
    tls: bool = True
    #: Round trips to resolve a name (1 with DNS across the link).
    dns_rounds: int = 0
    #: The server's initial window (segments), for the window bound.
    initcwnd: int = 10
    #: A returning client (a repeat view): its sessions kept.
    returning: bool = False
    #: Its HTTP cache may hold the page (a warm repeat view of origins that let it cache).
    cached: bool = False
    #: It opens TCP connections with Fast Open (a returning loader whose server has it).
    fast_open: bool = False

    @property
    def handshake_rounds(self) -> int:
        if self.protocol.quic:
            return 0 if self.returning else 1  # 0-RTT
        tcp = 0 if self.fast_open else 1
        return tcp + (1 if self.tls else 0)


@dataclass(frozen=True)
class Bound:
    """A trial's bounds and the terms of its physical one."""

    lower_bound_ms: float
    window_bound_ms: float
    rtt_ms: float
    #: The physical bound's deciding chain: round trips, and the bytes' time at the peak.
    rounds: float
    serial_ms: float
    window_rounds: float
    connections: int
    peak_bps: float | None
    critical: str = ""
    candidates: dict[str, float] = field(default_factory=dict, compare=False)

    def metrics(self) -> dict[str, float | None]:
        """As the trial stores them."""
        return {"lower_bound_ms": self.lower_bound_ms, "window_bound_ms": self.window_bound_ms,
                "lower_bound_rtt_ms": self.rtt_ms, "lower_bound_rounds": self.rounds,
                "lower_bound_serial_ms": self.serial_ms, "window_bound_rounds": self.window_rounds,
                "lower_bound_connections": float(self.connections),
                "lower_bound_peak_mbps": None if self.peak_bps is None else self.peak_bps / 1e6}


def windows(total: int, first: int) -> int:
    """Round trips to deliver ``total`` bytes from a first window of ``first`` growing by GROWTH."""
    rounds, sent = 1, float(first)
    while sent < total:
        rounds += 1
        sent += first * GROWTH ** (rounds - 1)
    return rounds


def _h1_connections(jobs: list[tuple[Term, Term]], k: int, rtt: float) -> Term:
    """A lower bound on when K sequential connections finish jobs of (release, length)."""
    best = Term()
    for r in sorted({rel for rel, _ in jobs}, key=lambda t: t.ms(rtt)):
        ps = sorted((p for rel, p in jobs if rel.ms(rtt) >= r.ms(rtt)), key=lambda t: t.ms(rtt))
        m = math.ceil(len(ps) / k)
        busiest = Term(sum(p.rounds for p in ps[:m]), sum(p.serial_ms for p in ps[:m]))
        share = Term(sum(p.rounds for p in ps) / k, sum(p.serial_ms for p in ps) / k)
        for c in (ps[-1], busiest, share):
            if (r + c).ms(rtt) > best.ms(rtt):
                best = r + c
    return best


def lower_bound(page: PageShape, path: Bottleneck, client: ClientLimits) -> Bound:
    """The physical and window bounds of one client's load of ``page`` (see the module doc)."""
    rtt = path.rtt_ms
    if client.cached:  # everything may come from the cache: no time need pass on the link
        return Bound(lower_bound_ms=0.0, window_bound_ms=0.0, rtt_ms=rtt, rounds=0.0, serial_ms=0.0,
                     window_rounds=0.0, connections=0, peak_bps=path.peak_bps, critical="cache",
                     candidates={"cache": 0.0})
    h = client.handshake_rounds
    one = Term(1.0)
    t0 = Term(float(client.dns_rounds + h))
    html_first = t0 + one
    html_done = html_first + Term(0.0, path.serial_ms(page.html_bytes))
    n = len(page.objects)
    h1 = client.protocol is Protocol.H1
    candidates: dict[str, Term] = {"html": html_done}

    def origin_ready(shard: int) -> Term:
        # A shard's name is known from the HTML's first byte; s1.test may share the HTML's
        # connection over HTTP/2 and HTTP/3 (same address and certificate), once its name resolved.
        if shard == 0:
            return t0
        if shard == 1 and not h1:
            return html_first + Term(float(client.dns_rounds))
        return html_first + Term(float(client.dns_rounds + h))

    release: list[Term] = []
    done: list[Term] = []
    for o in page.objects:  # parents come before their children in a manifest
        if o.parent is None:
            known = html_first
        else:
            known = done[o.parent] if o.whole_parent else release[o.parent] + one
        ready = origin_ready(o.shard)
        r = known if known.ms(rtt) >= ready.ms(rtt) else ready
        release.append(r)
        done.append(r + one + Term(0.0, path.serial_ms(o.bytes)))
    if done:
        candidates["chain"] = max(done, key=lambda t: t.ms(rtt))
    # Shared bytes: everything requested at or after each instant.
    instants = [(t0, page.html_bytes)] + [(r, o.bytes) for r, o in zip(release, page.objects)]
    for r, _ in instants:
        after = sum(b for rel, b in instants if rel.ms(rtt) >= r.ms(rtt))
        t = r + one + Term(0.0, path.serial_ms(after))
        if t.ms(rtt) > candidates.get("bytes", Term()).ms(rtt):
            candidates["bytes"] = t
    k = max(1, client.connections)
    if h1 and n:
        for shard in sorted({o.shard for o in page.objects} | {0}):
            jobs = [(r, one + Term(0.0, path.serial_ms(o.bytes)))
                    for r, o in zip(release, page.objects) if o.shard == shard]
            if shard == 0:
                jobs.append((t0, one + Term(0.0, path.serial_ms(page.html_bytes))))
            if len(jobs) > 1:
                t = _h1_connections(jobs, k, rtt)
                if t.ms(rtt) > candidates.get("connections", Term()).ms(rtt):
                    candidates["connections"] = t
    critical, best = max(candidates.items(), key=lambda kv: kv[1].ms(rtt))
    lb = best.ms(rtt)
    # The window bound: every connection's first window, growing at most threefold per round trip.
    total = page.html_bytes + sum(o.bytes for o in page.objects)
    origins = len({o.shard for o in page.objects} | {0})
    conns = (min(k, max(n, 1)) if h1 else 1) * origins
    first = (client.initcwnd * MSS["quic" if client.protocol.quic else "tcp"] + HANDSHAKE_BYTES) * conns
    w_rounds = float(client.dns_rounds + h + windows(total, first))
    wb = max(lb, w_rounds * rtt)
    return Bound(lower_bound_ms=lb, window_bound_ms=wb, rtt_ms=rtt, rounds=best.rounds, serial_ms=best.serial_ms,
                 window_rounds=max(w_rounds, best.rounds), connections=k if h1 else 1, peak_bps=path.peak_bps,
                 critical=critical, candidates={name: t.ms(rtt) for name, t in candidates.items()})


def population_bound(total_bytes: int, path: Bottleneck, clients: list[ClientLimits]) -> float:
    """The shared link's bound on a population's load, from its first client's start to its last
    client's end: every client's bytes (``total_bytes``, all of them) cross the one bottleneck, after
    the quickest client's look-up and handshake and one round trip for its first request. One client
    alone may finish sooner; the last of them cannot."""
    if not clients or all(c.cached for c in clients):
        return 0.0
    rounds = min(c.dns_rounds + c.handshake_rounds for c in clients) + 1
    return rounds * path.rtt_ms + path.serial_ms(total_bytes)

