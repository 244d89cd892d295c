"""Chromium's responses matched to their Resource Timing entries: a URL
fetched more than once has an entry per fetch, each response gets its own
(in the order they were requested and started), and the document gets the
navigation's timing."""

from __future__ import annotations

from satbench.endpoints.chromium import resource_timing_of

PAGE = "https://server.test/p/"


def test_each_fetch_of_a_url_has_its_own_timing() -> None:
    http = {"r3": {"url": "https://server.test/api", "requested": 12.5},
            "r1": {"url": PAGE, "requested": 10.0},
            "r2": {"url": "https://server.test/api", "requested": 10.2},
            "r4": {"url": "https://server.test/lost", "requested": None}}
    entries = [{"name": "https://server.test/api", "startTime": 2500.0, "responseEnd": 3100.0},
               {"name": "https://server.test/api", "startTime": 200.0, "responseEnd": 900.0}]
    nav = {"startTime": 0.0, "responseStart": 150.0, "responseEnd": 180.0, "nextHopProtocol": "h2"}
    t = resource_timing_of(http, entries, PAGE, nav)
    assert t["r2"]["startTime"] == 200.0 and t["r3"]["startTime"] == 2500.0  # the earlier request, the earlier entry
    assert t["r1"]["responseStart"] == 150.0 and t["r1"]["nextHopProtocol"] == "h2"
    assert "r4" not in t  # no entry for it: no timing rather than another fetch's
    # A page with a resource entry of its own keeps it (no navigation timing added).
    t = resource_timing_of({"a": {"url": PAGE, "requested": 1.0}}, [{"name": PAGE, "startTime": 5.0}], PAGE, nav)
    assert t["a"]["startTime"] == 5.0
