"""Sharding's parts without a testbed: the sharded index the page generator
writes, the metrics' view of it, and the origins' connection counts from
server logs (one server's, and several servers' combined)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from satbench.endpoints import pages
from satbench.endpoints.satbench_server import summarise
from satbench.metrics import object_metrics
from satbench.model import ObjectTiming, ServerKind, ServerSummary


def test_the_sharded_index_spreads_every_object_over_the_shards_in_turn(tmp_path: Path) -> None:
    pages.prepare(tmp_path, ["shop", "flags"])
    for page in ("shop", "flags"):
        index = (tmp_path / page / "index.html").read_text()
        out = pages.shard(tmp_path, page, 3)
        assert out.name == "index-shards3.html"
        sharded = out.read_text()
        refs = re.findall(r'<(?:img|script|link)\b[^>]*?\s(?:src|href)="([^"]+)"', index)
        moved = re.findall(r'<(?:img|script|link)\b[^>]*?\s(?:src|href)="([^"]+)"', sharded)
        assert len(refs) == len(moved) > 0
        for i, (ref, new) in enumerate(zip(refs, moved)):
            assert new == f"https://s{i % 3 + 1}.test/{page}/{ref}"
        # Nothing else changed.
        assert re.sub(r'https://s\d\.test/' + page + '/', "", sharded) == index
    assert pages.url_of("flags", shards=3) == "https://server.test/flags/index-shards3.html"
    assert pages.url_of("flags") == "https://server.test/flags/"
    assert pages.shard_hosts(3) == ("s1.test", "s2.test", "s3.test") and pages.shard_hosts(1) == ()


def test_metrics_find_a_sharded_pages_html_and_objects_on_any_host() -> None:
    url = "https://server.test/p/index-shards2.html"
    objs = [ObjectTiming(client=0, url=url, protocol="h2", status=200, bytes=100, start_ms=0, ttfb_ms=50, end_ms=60),
            ObjectTiming(client=0, url="https://s1.test/p/a.jpg", protocol="h2", status=200, bytes=10,
                         start_ms=60, ttfb_ms=90, end_ms=100),
            ObjectTiming(client=0, url="https://s2.test/p/b.jpg", protocol="h2", status=200, bytes=30,
                         start_ms=60, ttfb_ms=100, end_ms=140),
            ObjectTiming(client=0, url="https://s2.test/favicon.ico", protocol="h2", status=404, bytes=0,
                         start_ms=60, ttfb_ms=100, end_ms=400)]
    m = object_metrics(objs, url, {"a.jpg": 10, "b.jpg": 30})
    assert m == {"first_object_ms": 100, "largest_object_ms": 140, "last_object_ms": 140}


def _log(d: Path, lines: list[dict[str, object]]) -> Path:
    d.mkdir(parents=True)
    (d / "access.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return d


def test_connections_per_origin_and_coalescing_from_the_servers_logs(tmp_path: Path) -> None:
    def req(conn: str, authority: str, proto: str = "h2") -> dict[str, object]:
        return {"type": "request", "conn": conn, "proto": proto, "authority": authority, "cc": "cubic"}

    one = summarise(_log(tmp_path / "s1", [
        req("a", "server.test"), req("a", "S1.test:443"), req("a", "s1.test"), req("b", "s1.test"),
        {"type": "connection", "conn": "a", "transport": "tcp"}, {"type": "connection", "conn": "b", "transport": "tcp"},
        {"type": "connection", "conn": "c", "transport": "tcp"}]))  # c: opened, never used
    assert one.transports == {"tcp": 3} and one.coalesced_connections == 1 and one.unused_connections == 1
    assert one.origins == {"s1.test": {"tcp": 2, "quic": 0, "requests": 3},
                           "server.test": {"tcp": 1, "quic": 0, "requests": 1}}
    two = summarise(_log(tmp_path / "s2", [req("q", "s2.test", "h3"), {"type": "connection", "conn": "q",
                                                                        "transport": "quic"}]))
    both = ServerSummary.combined([one, two])
    assert both.connections == 4 and both.transports == {"tcp": 3, "quic": 1} and both.coalesced_connections == 1
    assert both.origins is not None and both.origins["s2.test"] == {"tcp": 0, "quic": 1, "requests": 1}
    assert both.requests == 5 and both.protocols == ["h2", "h3"] and both.cc == ["cubic"]
    assert both.connection_metrics() == {"server_connections": 4, "server_connections_tcp": 3,
                                         "server_connections_quic": 1, "origins_requested": 3,
                                         "coalesced_connections": 1, "unused_connections": 1}
    assert ServerSummary.combined([one]) is one
    assert ServerSummary(kind=ServerKind.CADDY).connection_metrics() == {}
