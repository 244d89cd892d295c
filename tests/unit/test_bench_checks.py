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
