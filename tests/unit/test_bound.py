"""The physical lower bound (bound.py): exact values on study A's GEO link,
worked by hand; the directions in which it must move; and a property test
against a brute-force simulation of the same chain of round trips and
bytes: the bound never exceeds what the fastest client and server could do.
No root needed."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from satbench import load_profile
from satbench.bound import Bottleneck, ClientLimits, PageShape, Resource, lower_bound, population_bound
from satbench.link.spec import LinkSpec, resolve
from satbench.model import Protocol

RTT = 530.0  # GEO's base round trip
RATE = 10e6  # GEO's forward rate
GEO = Bottleneck(RTT, RATE)
H1, H2, H3 = Protocol.H1, Protocol.H2, Protocol.H3
HTML = 677  # study A's index.html


def ms(nbytes: int, bps: float = RATE) -> float:
    return nbytes * 8 / bps * 1e3


def uniform(total: int) -> PageShape:
    return PageShape(HTML, tuple(Resource(total // 8) for _ in range(8)))


@pytest.fixture(scope="module")
def geo() -> dict[str, LinkSpec]:
    return {"link": resolve(load_profile("geo"))}  # 10 Mbit/s, 530 ms base RTT


def test_the_emulator_gives_the_peak(geo: dict[str, LinkSpec]) -> None:
    assert Bottleneck.of(geo) == GEO
    assert Bottleneck.of(geo, upload=True).peak_bps == geo["link"].ret.peak_bps


def test_one_connection_pays_every_object_in_turn() -> None:
    # Firefox with one connection (study A): the handshake (2), the HTML (1),
    # then each of 8 objects one after another, each a round trip plus its
    # 250 KB at 10 Mbit/s (200 ms): 11 round trips and 1.6 s of bytes, 7.43 s.
    b = lower_bound(uniform(2_000_000), GEO, ClientLimits(H1, connections=1))
    assert b.lower_bound_ms == pytest.approx(11 * RTT + ms(2_000_000 + HTML))
    assert b.lower_bound_ms == pytest.approx(7430.5, abs=0.1)
    assert (b.critical, b.rounds, b.connections) == ("connections", 11, 1)


def test_multiplexing_pays_the_bytes_after_the_objects_round_trip() -> None:
    # HTTP/2: the HTML's first byte at 3 round trips, every object asked
    # then; their 2 MB need 1.6 s after one more round trip: 4 RTT + 1.6 s.
    b = lower_bound(uniform(2_000_000), GEO, ClientLimits(H2))
    assert b.lower_bound_ms == pytest.approx(4 * RTT + ms(2_000_000))
    assert b.critical == "bytes"
    # HTTP/3: one handshake round trip fewer.
    assert lower_bound(uniform(2_000_000), GEO, ClientLimits(H3)).lower_bound_ms == pytest.approx(
        3 * RTT + ms(2_000_000))


def test_six_connections_carry_two_objects_each_at_most() -> None:
    # 8 objects of 62.5 KB (50 ms each) on 6 connections: some connection
    # carries two, each a round trip and 50 ms: 3 + 2 round trips + 100 ms.
    b = lower_bound(uniform(500_000), GEO, ClientLimits(H1, connections=6))
    assert b.lower_bound_ms == pytest.approx(5 * RTT + 100)
    # Eight connections: one object each; the bytes decide (4 RTT + 400 ms < 5 RTT).
    assert lower_bound(uniform(500_000), GEO, ClientLimits(H1, connections=8)).lower_bound_ms == pytest.approx(
        4 * RTT + 400)


def test_a_page_in_the_first_window() -> None:
    # The HTML and one 10 KB object: handshake, HTML, object, and 8 ms of bytes.
    page = PageShape(HTML, (Resource(10_000),))
    for proto, rounds in ((H1, 4), (H2, 4), (H3, 3)):
        b = lower_bound(page, GEO, ClientLimits(proto))
        assert b.lower_bound_ms == pytest.approx(rounds * RTT + 8.0), proto
        assert b.window_bound_ms == b.lower_bound_ms  # it fits the first window: no more rounds


def test_dependencies_wait_for_whole_style_sheets_and_scripts() -> None:
    # HTML -> style sheet (50 KB: 40 ms) -> an image named in it (10 KB: 8 ms), over HTTP/2:
    # the sheet is asked at 3 RTT and in at 4 RTT + 40 ms; the image then takes 1 RTT + 8 ms.
    page = PageShape(HTML, (Resource(50_000), Resource(10_000, parent=0, whole_parent=True)))
    b = lower_bound(page, GEO, ClientLimits(H2))
    assert b.lower_bound_ms == pytest.approx(5 * RTT + 48)
    assert b.critical == "chain"
    # Named by the HTML instead, both go in one round: 4 RTT and their 60 KB (48 ms).
    flat = PageShape(HTML, (Resource(50_000), Resource(10_000)))
    assert lower_bound(flat, GEO, ClientLimits(H2)).lower_bound_ms == pytest.approx(4 * RTT + 48)


def test_shards_wait_for_their_own_handshakes() -> None:
    flags = PageShape.from_manifest({"html_bytes": 9_000, "objects": [
        {"path": f"f{i}.png", "bytes": 360, "order": i, "referenced_by": "index.html", "type": "image/png"}
        for i in range(200)]}, shards=4)
    assert {o.shard for o in flags.objects} == {1, 2, 3, 4}
    # HTTP/1.1, 6 connections on each of 4 shards: 50 objects per shard, some connection
    # carries 9 of them after the shard's 2-round handshake, which starts at the HTML's first byte.
    b = lower_bound(flags, GEO, ClientLimits(H1))
    assert b.rounds == 3 + 2 + 9
    # HTTP/2: s1.test rides on the HTML's connection; s2-s4 need their handshake first.
    assert lower_bound(flags, GEO, ClientLimits(H2)).rounds == 3 + 2 + 1
    assert lower_bound(flags, GEO, ClientLimits(H3)).rounds == 2 + 1 + 1
    # Not sharded: 200 / 6 -> 34 objects on some connection after the HTML's first byte.
    one = PageShape(flags.html_bytes, tuple(Resource(o.bytes) for o in flags.objects))
    assert lower_bound(one, GEO, ClientLimits(H1)).rounds == 3 + 34


def test_a_varying_link_is_bounded_at_its_peak() -> None:
    # The LEO profile's forward schedule peaks at 120 Mbit/s (after the reconfiguration at
    # second 42): 100 MB need 6.67 s at least, however the schedule falls.
    path = Bottleneck.of({"link": resolve(load_profile("leo"))})
    assert path.peak_bps == 120e6
    b = lower_bound(PageShape(100_000_000), path, ClientLimits(H2))
    assert b.lower_bound_ms >= 100e6 * 8 / 120e6 * 1e3
    assert b.serial_ms == pytest.approx(100e6 * 8 / 120e6 * 1e3)
    # A trace: its busiest millisecond, less the millisecond's burst.
    trace = Bottleneck(100.0, 3 * 1504 * 8e3, 4 * 1504)
    assert trace.serial_ms(1504 * 30) == pytest.approx((30 - 4) / 3)  # 26 opportunities, 3 a millisecond


def test_an_upload_crosses_the_return_link(geo: dict[str, LinkSpec]) -> None:
    up = Bottleneck.of(geo, upload=True)
    b = lower_bound(PageShape(1_000_000), up, ClientLimits(H2))
    assert b.lower_bound_ms == pytest.approx(3 * RTT + ms(1_000_000, up.peak_bps or 1))


def test_the_bound_moves_the_right_way() -> None:
    page = PageShape(1000, tuple(Resource(100_000) for _ in range(10)))
    base = lower_bound(page, GEO, ClientLimits(H2))
    assert lower_bound(page, Bottleneck(RTT, 1e6), ClientLimits(H2)).lower_bound_ms > 8000 > base.lower_bound_ms
    assert lower_bound(page, Bottleneck(800, RATE), ClientLimits(H2)).lower_bound_ms > base.lower_bound_ms
    # A larger initial window can only lower the window bound; more bytes can only raise it.
    assert lower_bound(page, GEO, ClientLimits(H2, initcwnd=100)).window_bound_ms < base.window_bound_ms
    for proto in (H1, H2, H3):
        for k in (1, 2, 6):
            b = lower_bound(page, GEO, ClientLimits(proto, connections=k))
            assert b.lower_bound_ms <= b.window_bound_ms
            fewer = lower_bound(page, GEO, ClientLimits(proto, connections=k + 1))
            assert fewer.lower_bound_ms <= b.lower_bound_ms
    assert lower_bound(page, GEO, ClientLimits(H1, tls=False)).lower_bound_ms < lower_bound(
        page, GEO, ClientLimits(H1)).lower_bound_ms
    assert lower_bound(page, GEO, ClientLimits(H2, dns_rounds=1)).lower_bound_ms == pytest.approx(
        base.lower_bound_ms + RTT)


# -- against a brute-force simulation ---------------------------------------------------


@dataclass
class _Sim:
    """The fastest load of the same page: every connection of the HTML's origin
    opened at once, requests sent the moment an object is known and a
    connection free, the server answering at once through one FIFO bottleneck
    at the path's constant rate. The client's order of requests is tried in
    every permutation; the best is the brute-force optimum."""

    page: PageShape
    rtt: float
    bps: float | None
    client: ClientLimits
    up: float  # the request's one-way share of the round trip

    def serial(self, n: int) -> float:
        return 0.0 if self.bps is None else n * 8 / self.bps * 1e3

    def run(self, order: tuple[int, ...]) -> float:
        rtt, c = self.rtt, self.client
        h = c.handshake_rounds
        t0 = (c.dns_rounds + h) * rtt
        h1 = c.protocol is Protocol.H1
        free_at = 0.0  # the bottleneck
        done: dict[int, float] = {}
        first: dict[int, float] = {}

        def respond(sent: float, nbytes: int) -> tuple[float, float]:
            nonlocal free_at
            start = max(sent + self.up, free_at)
            free_at = start + self.serial(nbytes)
            down = rtt - self.up
            return start + self.serial(min(nbytes, 1)) + down, free_at + down

        html_first, html_done = respond(t0, self.page.html_bytes)
        first[-1], done[-1] = html_first, html_done
        n = len(self.page.objects)
        known: dict[int, float] = {}
        pending = set(range(n))
        conns: dict[int, list[float]] = {}
        while pending:
            for i in list(pending):
                o = self.page.objects[i]
                p = -1 if o.parent is None else o.parent
                if p in done and i not in known:
                    known[i] = done[p] if o.whole_parent else first[p]
            ready = [i for i in order if i in pending and i in known]
            i = min(ready, key=lambda j: known[j])  # the earliest known; ties by the order tried
            i = next(j for j in order if j in ready and known[j] == known[i])
            o = self.page.objects[i]
            if o.shard == 0:
                opened = t0
            elif o.shard == 1 and not h1:
                opened = html_first + c.dns_rounds * rtt
            else:
                opened = html_first + (c.dns_rounds + h) * rtt
            if h1:
                pool = conns.setdefault(o.shard, ([html_done] if o.shard == 0 else [])
                                        + [opened] * (c.connections - (1 if o.shard == 0 else 0)))
                k = min(range(len(pool)), key=lambda j: pool[j])
                sent = max(known[i], pool[k], opened)
            else:
                sent = max(known[i], opened)
            first[i], done[i] = respond(sent, o.bytes)
            if h1:
                pool[k] = done[i]
            pending.discard(i)
        return max(done.values())

    def best(self) -> float:
        n = len(self.page.objects)
        return min(self.run(p) for p in itertools.permutations(range(n)))


@st.composite
def cases(draw: st.DrawFn) -> tuple[PageShape, Bottleneck, ClientLimits, float]:
    n = draw(st.integers(0, 5))
    objs: list[Resource] = []
    whole_ok: list[int] = []
    shards = draw(st.integers(1, 3))
    for i in range(n):
        parent = draw(st.sampled_from([None, *whole_ok])) if whole_ok else None
        o = Resource(draw(st.integers(1, 400_000)), parent, parent is not None,
                     objs[parent].shard if parent is not None else (i % shards + 1 if shards > 1 else 0))
        objs.append(o)
        if draw(st.booleans()):
            whole_ok.append(i)
    page = PageShape(draw(st.integers(100, 50_000)), tuple(objs))
    rtt = draw(st.floats(1.0, 700.0))
    bps = draw(st.one_of(st.none(), st.floats(1e5, 1e9)))
    client = ClientLimits(draw(st.sampled_from([H1, H2, H3])), connections=draw(st.integers(1, 6)),
                          tls=draw(st.booleans()), dns_rounds=draw(st.integers(0, 1)))
    return page, Bottleneck(rtt, bps), client, draw(st.floats(0.0, 1.0)) * rtt


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_the_bound_never_exceeds_the_fastest_possible_load(case: tuple[PageShape, Bottleneck, ClientLimits, float]
                                                           ) -> None:
    page, path, client, up = case
    b = lower_bound(page, path, client)
    best = _Sim(page, path.rtt_ms, path.peak_bps, client, up).best()
    assert b.lower_bound_ms <= best + 1e-6, (b, best)


def test_the_simulation_meets_the_bound_where_the_chain_is_all() -> None:
    # Where nothing else waits (one object per connection, bytes that never queue),
    # the fastest load is the bound: the bound is tight, not only valid.
    page = PageShape(HTML, (Resource(10_000), Resource(10_000, parent=0, whole_parent=True)))
    for proto in (H1, H2, H3):
        client = ClientLimits(proto)
        sim = _Sim(page, RTT, RATE, client, RTT / 2).best()
        assert lower_bound(page, GEO, client).lower_bound_ms == pytest.approx(sim, abs=1.0), proto
    # A queue of equal objects behind one connection: the same.
    client = ClientLimits(H1, connections=1)
    sim = _Sim(uniform(500_000), RTT, RATE, client, RTT / 2).best()
    assert lower_bound(uniform(500_000), GEO, client).lower_bound_ms == pytest.approx(sim, abs=1.0)


def test_a_returning_client_may_skip_what_it_resumes_and_a_warm_cache_every_byte() -> None:
    # A repeat view: QUIC's request goes with its first flight (0-RTT: 1 round trip saved); over TCP,
    # resuming TLS 1.3 saves none, Fast Open the TCP one. Lookups count as ever.
    page = uniform(2_000_000)
    for proto, fast_open, saved in ((H3, False, 1), (H2, False, 0), (H2, True, 1)):
        first = lower_bound(page, GEO, ClientLimits(proto, dns_rounds=1))
        back = lower_bound(page, GEO, ClientLimits(proto, dns_rounds=1, returning=True, fast_open=fast_open))
        assert first.lower_bound_ms - back.lower_bound_ms == pytest.approx(saved * RTT), (proto, fast_open)
    # With the page in its cache, nothing need cross the link.
    warm = lower_bound(page, GEO, ClientLimits(H2, returning=True, cached=True))
    assert (warm.lower_bound_ms, warm.window_bound_ms, warm.critical) == (0.0, 0.0, "cache")


def test_a_population_shares_one_bottleneck() -> None:
    # Ten clients' 2 MB pages through GEO's 10 Mbit/s: the last byte waits for all 20 MB (16 s) after the
    # quickest client's handshake and request (3 round trips over TLS; HTTP/3 2); one client alone
    # could be done far sooner.
    h2, h3 = ClientLimits(Protocol.H2), ClientLimits(Protocol.H3)
    assert population_bound(20_000_000, GEO, [h2]) == pytest.approx(3 * RTT + ms(20_000_000))
    assert population_bound(20_000_000, GEO, [h2, h3]) == pytest.approx(2 * RTT + ms(20_000_000))
    assert population_bound(20_000_000, GEO, [h2]) > 5 * lower_bound(uniform(2_000_000), GEO, h2).lower_bound_ms / 2
    assert population_bound(1, GEO, []) == 0.0
