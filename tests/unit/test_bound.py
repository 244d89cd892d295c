"""The physical lower bound (bound.py): exact values on study A's GEO link,
worked by hand, and the directions in which it must move. No root needed."""

from __future__ import annotations

import pytest

from satbench import load_profile
from satbench.bound import lower_bound_ms
from satbench.link.spec import LinkSpec, resolve


@pytest.fixture(scope="module")
def geo() -> dict[str, LinkSpec]:
    return {"link": resolve(load_profile("geo"))}  # 10 Mbit/s, 530 ms base RTT


def test_two_megabytes_over_geo(geo: dict[str, LinkSpec]) -> None:
    # TCP+TLS: 2 handshake RTTs; first window 10 x 1448 + 16384 = 30864 bytes, so
    # 4 rounds deliver 30864 x (1+3+9+27) = 1.23 MB and 5 rounds 3.7 MB: 5 rounds.
    # Serialisation, 1.6 s + 1 RTT = 2130 ms, is below 5 x 530 ms.
    b = lower_bound_ms({"protocol": "h2"}, geo, 2_000_000, [])
    assert b["window_bound_ms"] == pytest.approx(2 * 530 + 5 * 530)
    assert b["lower_bound_serial_ms"] == pytest.approx(1600)
    # Physics alone: the handshake, then the request's round trip and 1.6 s on the wire.
    assert b["lower_bound_ms"] == pytest.approx(2 * 530 + 530 + 1600)
    # QUIC: one handshake RTT; first window 10 x 1350 + 16384 = 29884, again 5 rounds.
    q = lower_bound_ms({"protocol": "h3"}, geo, 2_000_000, [])
    assert q["window_bound_ms"] == pytest.approx(530 + 5 * 530)
    assert q["lower_bound_ms"] == pytest.approx(530 + 530 + 1600)


def test_http1_pays_a_round_trip_per_object_per_connection(geo: dict[str, LinkSpec]) -> None:
    objs = [62_500] * 8
    # One connection: the HTML then 8 objects in turn (9 requests), beyond the 4 window rounds.
    one = lower_bound_ms({"protocol": "h1", "connections": 1}, geo, 677, objs)
    assert one["lower_bound_ms"] == one["window_bound_ms"] == pytest.approx((2 + 9) * 530)
    # Six: ceil(8 / 6) = 2 rounds of objects after the HTML; windows (6 x 30864 first) need 2.
    six = lower_bound_ms({"protocol": "h1", "connections": 6}, geo, 677, objs)
    assert six["lower_bound_ms"] == six["window_bound_ms"] == pytest.approx((2 + 3) * 530)
    # A browser is assumed to open six whatever the factor says: never a tighter bound.
    assert lower_bound_ms({"protocol": "h1", "connections": 1}, geo, 677, objs, browser=True) == six
    # HTTP/2: the HTML, then every object in one more round; 500 KB takes 4 window rounds.
    h2 = lower_bound_ms({"protocol": "h2"}, geo, 677, objs)
    assert h2["window_bound_ms"] == pytest.approx((2 + 4) * 530)
    assert h2["lower_bound_ms"] == pytest.approx((2 + 2) * 530)


def test_the_bound_moves_the_right_way(geo: dict[str, LinkSpec]) -> None:
    slow = {"link": resolve(load_profile("geo", ["forward.rate_mbps=1"]))}
    far = {"link": resolve(load_profile("geo", ["forward.delay_ms=400", "return.delay_ms=400"]))}
    base = lower_bound_ms({"protocol": "h2"}, geo, 1000, [100_000] * 10)["window_bound_ms"]
    # 1 MB at 1 Mbit/s: serialisation (8 s) dominates.
    assert lower_bound_ms({"protocol": "h2"}, slow, 1000, [100_000] * 10)["lower_bound_ms"] > 8000 > base
    assert lower_bound_ms({"protocol": "h2"}, far, 1000, [100_000] * 10)["window_bound_ms"] > base
    # A larger initial window can only lower it; more bytes can only raise it.
    assert lower_bound_ms({"protocol": "h2", "server.tcp_initcwnd": 100}, geo, 1000, [100_000] * 10)[
        "window_bound_ms"] < base
    assert lower_bound_ms({"protocol": "h2"}, geo, 1000, [400_000] * 10)["window_bound_ms"] > base
    # The physical bound never exceeds the window bound.
    for proto in ("h1", "h2", "h3"):
        b = lower_bound_ms({"protocol": proto}, geo, 1000, [100_000] * 10)
        assert b["lower_bound_ms"] <= b["window_bound_ms"]


def test_a_sharded_page_pays_the_shards_handshakes_and_gets_their_connections(geo: dict[str, LinkSpec]) -> None:
    flags = [360] * 200  # small objects: the rounds decide, not the bytes
    # Not sharded, 6 connections: the HTML, then ceil(200 / 6) = 34 rounds of objects.
    one = lower_bound_ms({"protocol": "h1", "connections": 6}, geo, 9_000, flags)
    assert one["lower_bound_rounds"] == 2 + 1 + 34
    # Over 4 shards: 24 connections, ceil(200 / 24) = 9 rounds, after the shards' own 2-round handshake.
    four = lower_bound_ms({"protocol": "h1", "connections": 6, "shards": 4}, geo, 9_000, flags)
    assert four["lower_bound_rounds"] == 2 + 1 + 2 + 9
    assert four["lower_bound_ms"] == pytest.approx(14 * 530)
    # HTTP/2 and HTTP/3: one more handshake (2 and 1 round trips), the objects' round unchanged.
    assert lower_bound_ms({"protocol": "h2", "shards": 4}, geo, 9_000, flags)["lower_bound_rounds"] == 2 + 2 + 2
    assert lower_bound_ms({"protocol": "h3", "shards": 4}, geo, 9_000, flags)["lower_bound_rounds"] == 1 + 2 + 1
    # A page without objects shards nothing.
    assert lower_bound_ms({"protocol": "h2", "shards": 4}, geo, 9_000, [])["lower_bound_rounds"] == 3
