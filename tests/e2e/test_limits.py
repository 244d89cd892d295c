"""What limited a sender, judged by the server's one classifier for TCP and
QUIC, on real transfers over the GEO profile: Linux BBR's start-up held by
its pacer, CUBIC with a large window by its window, CUBIC with a 64 KB send
buffer by the buffer; both QUIC stacks' start-ups as their telemetry shows
them. The same transfers, recorded, are the classifier's unit-test fixtures
(crates/server/tests/fixtures/limits/)."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.test_quic_stacks import trials
from tests.helpers import PARALLEL, run_cli

#: Runs alone, after the parallel part of the e2e layer (tests/conftest.py: serial).
pytestmark = pytest.mark.serial

EXPERIMENT = """[experiment]
name = "limits"
seed = 1
timeout_s = 120
artefacts = ["server"]

[factors]
link = "geo"
page = "bulk:3M"
client = "loader"
cc = ["bbr", "cubic"]

[[scenario]]
name = "tcp"
protocol = "h2"

[[scenario]]
name = "quic"
protocol = "h3"
quic_stack = ["quiche", "quinn"]

[[scenario]]
name = "sndbuf"
protocol = "h2"
cc = "cubic"
"server.sndbuf" = 65536
page = "bulk:1M"  # 64 KB a round trip: 3 MB would take 48 of GEO's round trips, this 16
"""


def _series(art: Path, key: str, quic: bool) -> list[tuple[float, float, str]]:
    """(seconds since the first sample, interval ms, class) of every sample the server logged."""
    rows = [json.loads(line) for line in (art / "limits" / key / "server" /
                                          ("quic_info.jsonl" if quic else "tcp_info.jsonl")).open()]
    t0 = rows[0]["t_unix_ns"]
    return [((r["t_unix_ns"] - t0) / 1e9, float(r["interval_ms"]), str(r["limited_by"])) for r in rows]


def _shares(series: list[tuple[float, float, str]], span_s: float | None = None) -> dict[str, float]:
    """Each class's share (%) from the first interval with data to send, over ``span_s``."""
    start = next(t for t, _, c in series if c != "application")
    c: Counter[str] = Counter()
    for t, ms, cls in series:
        if t >= start and (span_s is None or t - start <= span_s):
            c[cls] += ms
    total = sum(c.values())
    return {k: 100 * v / total for k, v in c.items()}


def test_each_sender_gets_the_class_its_telemetry_shows(tmp_path: Path) -> None:
    exp = tmp_path / "limits.toml"
    exp.write_text(EXPERIMENT)
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), *PARALLEL, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ts = trials(db)
    assert len(ts) == 7 and all(t["status"] == "valid" for t in ts), [t["reason"] for t in ts]
    keys = dict(sqlite3.connect(db).execute("SELECT id, key FROM trials").fetchall())
    art = db.parent / "artefacts"
    by: dict[tuple[str, str, str, object], dict[str, object]] = {}
    for tid, t in zip(sorted(keys), ts):
        f = t["f"]
        stack = f.get("quic_stack", "quiche") if f["protocol"] == "h3" else "tcp"
        series = _series(art, keys[tid], f["protocol"] == "h3")
        by[(stack, f["cc"], f["protocol"], f.get("server.sndbuf"))] = {
            "startup": _shares(series, 2.5), "all": _shares(series), "m": t["m"], "server": t["server"]}
    # Every connection's time is accounted for, TCP and QUIC alike, in the same five classes.
    for k, v in by.items():
        m = v["m"]
        assert isinstance(m, dict)
        pcts = {c: m[f"limited_{c}_pct"] for c in ("application", "cwnd", "receive_window", "send_buffer",
                                                     "pacing")}
        assert abs(sum(pcts.values()) - 100) < 0.5, (k, pcts)
    tcp_bbr = by[("tcp", "bbr", "h2", None)]["startup"]
    assert isinstance(tcp_bbr, dict) and tcp_bbr.get("pacing", 0) > 50, tcp_bbr
    for key in (("tcp", "cubic", "h2", None), ("quiche", "cubic", "h3", None)):
        whole = by[key]["all"]
        assert isinstance(whole, dict) and whole.get("cwnd", 0) > 50 and whole.get("pacing", 0) < 5, (key, whole)
    small = by[("tcp", "cubic", "h2", 65536)]["all"]
    assert isinstance(small, dict) and small.get("send_buffer", 0) > 50, small
    quinn_bbr = by[("quinn", "bbr", "h3", None)]["startup"]
    assert isinstance(quinn_bbr, dict) and quinn_bbr.get("pacing", 0) > 40, quinn_bbr
    quiche_bbr = by[("quiche", "bbr", "h3", None)]["startup"]
    assert isinstance(quiche_bbr, dict) and quiche_bbr.get("cwnd", 0) + quiche_bbr.get("pacing", 0) > 80, quiche_bbr
