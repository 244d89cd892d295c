"""The typed model's parsers, each at its boundary: congestion-control
names to families, the emulator's counters, the server's logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from satbench.endpoints.satbench_server import summarise
from satbench.model import OVERHEAD_PACKETS, OVERHEAD_PARTS, ClientKind, CongestionControl, LinkCounters


@pytest.mark.parametrize("name, family", [
    ("cubic", "cubic"), ("CUBIC ", "cubic"), ("bbr", "bbr"), ("bbr2_gcongestion", "bbr"), ("bbr2", "bbr"),
    ("reno", "reno"), ("newreno", "reno"), ("NewReno", "reno"), ("vegas", None), ("", None)])
def test_congestion_control_families(name: str, family: str | None) -> None:
    got = CongestionControl.canonical(name)
    assert (got.value if got else None) == family


def _direction(offered: int, delivered: int, dropped: int, overhead: bool) -> dict[str, object]:
    d: dict[str, object] = {"offered": {"packets": 10, "bytes": offered}, "delivered": {"packets": 9, "bytes": delivered},
                            "dropped": {"queue": {"packets": 1, "bytes": dropped}}}
    if overhead:
        parts = {k: 0 for k in OVERHEAD_PARTS}
        parts[OVERHEAD_PARTS[0]] = offered - 100
        parts[OVERHEAD_PARTS[-1]] = 100
        d["overhead"] = {**parts, **{k: 1 for k in OVERHEAD_PACKETS}}
    return d


def test_link_counters_parse_and_metrics() -> None:
    raw = {"seed": 7, "duration_s": 2.5, "forward": _direction(15_000, 14_000, 1_000, True),
           "return": _direction(2_000, 2_000, 0, True), "devices": {"sat0": {"tx_dropped": 3}}}
    c = LinkCounters.parse(raw)
    assert (c.seed, c.duration_s, c.wire_bytes, c.drops_outside_model) == (7, 2.5, 16_000, 3)
    m = c.metrics(page_bytes=12_800)
    assert m["wire_bytes_forward"] == 14_000 and m["link_drops"] == 2 and m["overhead_pct"] == pytest.approx(25.0)
    assert m[f"oh_fwd_{OVERHEAD_PARTS[0]}"] == 14_900 and m[f"oh_ret_{OVERHEAD_PARTS[-1]}"] == 100
    # Parts that do not add up to the offered bytes are the emulator's error, not a measurement.
    bad = json.loads(json.dumps(raw))
    bad["forward"]["overhead"][OVERHEAD_PARTS[0]] += 1
    with pytest.raises(ValueError, match="add up to 15001"):
        LinkCounters.parse(bad).metrics(12_800)
    with pytest.raises(KeyError):
        LinkCounters.parse({"seed": 1})


def test_the_server_summary_from_its_logs(tmp_path: Path) -> None:
    lines = [
        {"type": "connection", "conn": "a", "proto": "h2"},
        {"type": "request", "conn": "a", "proto": "h2", "cc": "cubic", "cc_impl": "linux cubic", "body_bytes": 100},
        {"type": "request", "conn": "a", "proto": "h2", "cc": "cubic", "cc_impl": "linux cubic", "body_bytes": 50},
        {"type": "connection", "conn": "b", "proto": "h3", "quic_stack": "quiche"},
        {"type": "request", "conn": "b", "proto": "h3", "cc": "bbr2_gcongestion", "body_bytes": 7},
    ]
    (tmp_path / "access.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n{\"type\": \"requ")
    s = summarise(tmp_path)
    assert (s.connections, s.requests, s.bytes_served) == (2, 3, 157)  # the partial last line is left out
    assert s.protocols == ["h2", "h3"] and s.cc == ["bbr", "cubic"]
    assert summarise(tmp_path / "none").connections is None


def test_client_kinds_carry_what_the_planner_needs() -> None:
    assert [k for k in ClientKind if k.browser] == [ClientKind.CHROMIUM, ClientKind.FIREFOX]
    assert not ClientKind.CURL.fetches_objects and not ClientKind.CURL.in_populations
    assert all(0 < k.overhead_s < 5 for k in ClientKind)
