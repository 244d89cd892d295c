"""Curl-style timing over fresh connections, with DNS across a 100 ms RTT link:
each phase costs the round trips its protocol needs."""

from __future__ import annotations

import json
import sys

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.endpoints import pages
from satbench.endpoints.options import ServerOptions
from satbench.endpoints.satbench_server import SatbenchServer as Server

RTT = 0.100


@pytest.fixture(scope="module")
def bed(tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("www")
    pages.generate(root, ["blank"])
    pages.bulk_file(root, 1_000_000)
    link = load_profile("wire", ["delay_ms=50", "rate_mbps=100", "queue_ms=200"])
    with Testbed(TestbedSpec(link=link, dns=True, seed=1)) as tb:
        with Server(root, tmp_path_factory.mktemp("logs"), ServerOptions(), cc="cubic", host=tb.server):
            yield tb


@pytest.mark.parametrize("protocol", ["h1", "h2", "h3"])
def test_phases_cost_their_round_trips(bed, protocol: str) -> None:
    p = bed.client.run([sys.executable, "-m", "satbench", "timing", "https://server.test/bulk/1000000.bin",
                        "--protocol", protocol, "--count", "3", "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert len(d["rows"]) == 3
    for r in d["rows"]:
        assert r["status"] == 200 and r["bytes"] == 1_000_000
        assert r["http_version"] == {"h1": "1.1", "h2": "2", "h3": "3"}[protocol]
        assert 0.9 * RTT <= r["dns_s"] < 3 * RTT  # the lookup crossed the link
        if protocol == "h3":
            assert r["connect_s"] is None
            assert r["tls_s"] - r["dns_s"] >= 0.9 * RTT  # one round trip: QUIC and TLS together
        else:
            assert r["connect_s"] - r["dns_s"] >= 0.9 * RTT  # TCP handshake
            assert r["tls_s"] - r["connect_s"] >= 0.9 * RTT  # TLS 1.3
        assert r["tls_s"] <= r["first_byte_s"] <= r["total_s"]
        assert r["first_byte_s"] - r["tls_s"] >= 0.9 * RTT  # the request
        # 1 MB cannot arrive faster than the link's 100 Mbit/s allow.
        assert r["total_s"] - r["first_byte_s"] >= 1_000_000 * 8 / 100e6 * 0.9
