"""The benchmarks' own checks: a figure only from what was measured in full."""

from __future__ import annotations

import pytest

from satbench import TestbedError
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
