"""Both stacks' qlog dialects read into one form (fixtures cut from real
server traces: quiche 0.30's draft-12 events, quinn 0.11's qlog 0.3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from satbench.results import qlog

from ..helpers import FIXTURES

QLOGS = FIXTURES / "qlog"


def test_quiche_parameters_and_metrics() -> None:
    q = qlog.read(QLOGS / "quiche.sqlog")
    assert q is not None and q.dialect == "draft-12" and q.reference_unix_ns is not None
    local, remote = q.parameters("local"), q.parameters("remote")
    assert local is not None and remote is not None
    # The server's own windows (its defaults) and the loader's (256 MiB, 128 MiB).
    assert (local["initial_max_data"], local["initial_max_stream_data_bidi_local"]) == (32 << 20, 8 << 20)
    assert (remote["initial_max_data"], remote["initial_max_stream_data_bidi_local"]) == (256 << 20, 128 << 20)
    states = list(q.metrics())
    # Deltas accumulate: the RTT of the first update is still there when only bytes in flight change.
    assert states[-1][1]["bytes_in_flight"] == 2400 and states[-1][1]["smoothed_rtt"] == pytest.approx(333)
    assert [t for t, _ in states] == sorted(t for t, _ in states)


def test_quinn_metrics_in_ms_and_no_anchor() -> None:
    q = qlog.read(QLOGS / "quinn.sqlog")
    assert q is not None and q.dialect == "0.3" and q.reference_unix_ns is None
    assert "quinn" in q.description and q.parameters("remote") is None  # quinn 0.11 logs none
    t, last = list(q.metrics())[-1]
    assert t == pytest.approx(533.8469)
    # quinn writes seconds; read as ms, the RTT is the GEO link's.
    assert last["smoothed_rtt"] == pytest.approx(533.4251) and last["congestion_window"] == 14850


def test_not_a_qlog(tmp_path: Path) -> None:
    (tmp_path / "x.sqlog").write_text('{"time": 1}\nnot json\n')
    (tmp_path / "empty").write_text("")
    assert qlog.read(tmp_path / "x.sqlog") is None and qlog.read_dir(tmp_path) == []
    assert qlog.read_dir(tmp_path / "missing") == []
