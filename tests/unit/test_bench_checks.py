"""The benchmarks' own checks: a figure only from what was measured in full."""

from __future__ import annotations

from pathlib import Path

import pytest

from satbench import TestbedError
from satbench.bench.capture import format_report, paired
from satbench.bench.loader import _all_loaded


def _run(clients: list[dict[str, object]]) -> dict[str, object]:
    return {"valid_n": sum(bool(c["valid"]) for c in clients), "clients": clients}


def test_page_loads_need_every_client_and_its_bytes() -> None:
    _all_loaded(_run([{"valid": True, "bytes": 10}] * 3), 3, "h2")
    with pytest.raises(TestbedError, match="2 loaded in full"):
        _all_loaded(_run([{"valid": True, "bytes": 10}] * 2 + [{"valid": False, "invalid_reason": "timeout"}]),
                    3, "h2")
    with pytest.raises(TestbedError, match="no figure"):
        _all_loaded(_run([{"valid": True, "bytes": 10}, {"valid": True, "bytes": 0}]), 2, "h2")


def test_realtime_clients_load_no_page() -> None:
    """A chat room's clients have no page bytes (their relays are checked apart): valid is enough."""
    _all_loaded(_run([{"valid": True, "realtime": {"down": []}}] * 4), 4, "ws in one room", page=False)
    with pytest.raises(TestbedError):
        _all_loaded(_run([{"valid": True}] * 3 + [{"valid": False}]), 4, "ws in one room", page=False)


def test_the_capture_benchmark_gives_the_figures_docs_print() -> None:
    """docs/results.md's table of what capture costs Chromium and Firefox comes from
    ``satbench bench capture`` on the committed findings database."""
    repo = Path(__file__).resolve().parents[2]
    r = paired(repo / "docs" / "data" / "findings.sqlite", "visual-capture-on", "visual-capture-off")
    assert {link: ms["plt_ms"]["pairs"] for link, ms in r.items()} == {"geo": 20, "lan": 20}
    text = format_report({"client": "chromium", "runs": [], "links": r, "target_pct": 2.0})
    doc = (repo / "docs" / "results.md").read_text()
    for fig in ("-0.04 % [-0.11, +0.03]", "+0.91 % [-0.92, +4.71]", "+17.0 % [+6.7, +55.6]"):
        assert fig in doc
    assert "PLT -0.04 % [-0.11, +0.03] (4,702 against 4,705 ms)" in text, text
    assert "PLT +0.91 % [-0.92, +4.71] (487 against 475 ms)" in text, text
    assert "FCP +17.03 % [+6.72, +55.56] (126 against 96 ms)" in text, text
    # Firefox's rows, from its own pair of experiments.
    r = paired(repo / "docs" / "data" / "findings.sqlite", "visual-capture-firefox-on", "visual-capture-firefox-off")
    assert {link: ms["plt_ms"]["pairs"] for link, ms in r.items()} == {"geo": 20, "lan": 20}
    text = format_report({"client": "firefox", "runs": [], "links": r, "target_pct": 2.0})
    for fig in ("+0.42 % [+0.01, +0.94] (4,795 against 4,768 ms)", "+1.27 % [-0.09, +6.12] (568 against 550 ms)"):
        assert fig in doc
    assert "PLT +0.42 % [+0.01, +0.94] (4,795 against 4,768 ms)" in text, text
    assert "PLT +1.27 % [-0.09, +6.12] (568 against 550 ms)" in text, text


def test_the_returning_benchmark_gives_the_figures_docs_print() -> None:
    """docs/results.md's table of what a returning visitor saves comes from ``satbench bench returning``
    on the committed findings database: each repeat paired with its own first view."""
    from satbench.bench import returning

    repo = Path(__file__).resolve().parents[2]
    r = returning.paired(repo / "docs" / "data" / "findings.sqlite")
    assert set(r) == {"geo", "leo"} and sum(c["trials"] for cells in r.values() for c in cells.values()) == 220
    # Chromium with the server's Fast Open on: no SYN data taken from it.
    assert r["geo"]["chromium h2 tfo=on"]["said"]["server_tfo_connections"] == [0, 10]
    geo = r["geo"]
    tfo = geo["loader h2 resumption=on tfo=on"]
    assert (tfo["ttfb_ms"]["pairs"], round(tfo["ttfb_ms"]["saved"]), [round(x) for x in tfo["ttfb_ms"]["ci"]]) == (
        10, 533, [532, 533])
    assert tfo["said"]["server_tfo_connections"] == [10, 10] and tfo["said"]["client_fast_open_connections"] == [10, 10]
    zero = geo["chromium h3 (quiche) zero_rtt=on"]
    assert round(zero["ttfb_ms"]["saved"]) == 537 and round(zero["ttfb_ms"]["saved_rtt"], 2) == 1.01
    assert "server_tfo_connections" not in zero["said"]  # nothing said of Fast Open over QUIC
    assert r["leo"]["loader h3 (quiche) zero_rtt=on"]["ttfb_ms"]["saved_rtt"] is None  # LEO's RTT varies
    doc = (repo / "docs" / "results.md").read_text()
    text = returning.format_report({"experiment": "returning-visitors", "links": r,
                                    "runs": [{"planned": 220, "ran": 0, "valid": 220, "not_valid": 0}]})
    for fig in ("533 [532, 533] ms (1.01 RTT)", "537 [536, 539] ms (1.01 RTT)", "50 [38, 51] ms", "47 [35, 66] ms"):
        assert fig in doc
    assert "TTFB 1,597 -> 1,064 ms, saved 533 [532, 533], 1.01 RTT" in text, text
    assert "TTFB 87 -> 39 ms, saved 47 [35, 66]; PLT 268 -> 209 ms, saved 70 [45, 96]" in text, text
