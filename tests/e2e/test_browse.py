"""Real-browser loads over an emulated link of about 100 ms RTT: the protocol
asked for is the protocol every response used, the metrics are ordered
sensibly, the test pages' largest image is Chromium's LCP element, every
object of a page of 640 has its timing in both browsers, and HTTP/3
from a server without it is an invalid load, not a fallback number."""

from __future__ import annotations

from pathlib import Path

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.endpoints.options import ServerOptions
from satbench.endpoints.satbench_server import SatbenchServer as Server

from ..helpers import client_json


def browse(tb, url: str, protocol: str, *extra: str) -> dict:  # type: ignore[no-untyped-def]
    return client_json(tb, "browse", url, protocol, *extra)


@pytest.fixture(scope="module")
def bed(wire_100ms):  # type: ignore[no-untyped-def]
    return wire_100ms


@pytest.mark.parametrize("protocol, wire", [("h1", "http/1.1"), ("h2", "h2"), ("h3", "h3")])
def test_chromium_uses_the_protocol_asked_for(bed, protocol: str, wire: str) -> None:
    tb, srv, manifests = bed
    r = browse(tb, "https://server.test/uniform-500k/index.html", protocol)
    assert r["valid"], r["invalid_reason"]
    images = [x for x in r["resources"] if x["url"].endswith(".jpg")]
    assert len(images) == 8
    assert {x["protocol"] for x in r["resources"]} == {wire}
    assert all(x["next_hop_protocol"] == wire for x in images)
    assert r["ttfb_ms"] <= r["fcp_ms"] <= r["plt_ms"]
    assert r["lcp_ms"] <= r["plt_ms"] + 1000 and r["fcp_ms"] <= r["lcp_ms"]
    assert r["ttfb_ms"] >= 100  # at least one round trip of the emulated link
    assert r["bytes_received"] >= 500_000
    assert r["connections"] == 1 if protocol != "h1" else 2 <= r["connections"] <= 6
    # The server saw the same protocol.
    served = {e["proto"] for e in srv.access_log() if e["type"] == "request" and e["path"].startswith("/uniform-500k/")}
    assert wire in served


def test_largest_image_is_the_lcp_element(bed) -> None:
    tb, srv, manifests = bed
    r = browse(tb, "https://server.test/triangular-1m/index.html", "h2")
    assert r["valid"], r["invalid_reason"]
    assert r["lcp_element"] == "img"
    assert r["lcp_url"].endswith("/" + manifests["triangular-1m"].lcp_candidate)


@pytest.mark.parametrize("browser", ["chromium", "firefox"])
def test_every_object_of_a_page_of_640_has_its_timing(bed, browser: str) -> None:
    # Resource Timing keeps 250 entries unless the page asks for more: the rest of a large page's
    # objects would have no times (Chromium) or not be listed at all (Firefox, which lists only those).
    tb, _, manifests = bed
    r = browse(tb, "https://server.test/images640/index.html", "h2", "--browser", browser)
    assert r["valid"], r["invalid_reason"]
    images = [x for x in r["resources"] if x["url"].endswith(".jpg")]
    assert len(images) == len(manifests["images640"].objects) == 640
    assert all(x["end_ms"] is not None and x["end_ms"] >= x["start_ms"] for x in images)


def test_h3_from_a_server_without_it_is_invalid(generated_pages, tmp_path: Path) -> None:
    out, _ = generated_pages
    with Testbed(TestbedSpec(link=load_profile("wire", ["delay_ms=50"]), seed=1)) as tb:
        with Server(out, tmp_path, ServerOptions(h3=False), host=tb.server):
            r = browse(tb, "https://server.test/uniform-100k/index.html", "h3")
    assert r["valid"] is False and r["invalid_reason"]
    assert r["plt_ms"] is None or any(x["protocol"] != "h3" for x in r["resources"])
