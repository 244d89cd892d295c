"""Facts the Rust binaries own, read on the Python side: each test holds the
Python copy equal to what the owner says (``--describe``), so a change on
one side fails here instead of drifting. No root needed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from satbench import realtime
from satbench.endpoints import options
from satbench.endpoints.satbench_server import server_binary
from satbench.experiment import factors
from satbench.results.report import LIMITS


def test_the_report_shows_exactly_the_servers_classes_of_what_limited_a_sender() -> None:
    out = subprocess.run([str(server_binary()), "--describe"], capture_output=True, text=True, timeout=30, check=True)
    described = json.loads(out.stdout)
    assert tuple(described["limited_by"]) == LIMITS


def _flags() -> dict[str, dict[str, object]]:
    out = subprocess.run([str(server_binary()), "--describe"], capture_output=True, text=True, timeout=30, check=True)
    return {f["flag"]: f for f in json.loads(out.stdout)["flags"]}


def _binary_accepts(flag: str, value: int) -> bool:
    r = subprocess.run([str(server_binary()), "--check-args", "--root", "/", flag, str(value)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode in (0, 2), r.stderr
    assert (r.returncode == 0) == (r.stderr == ""), r.stderr
    return r.returncode == 0


def test_every_server_option_passed_to_the_binary_is_its_flag_of_the_same_kind_and_range() -> None:
    flags = _flags()
    passed = [f for f in options.fields() if f.metadata["binary"]]
    assert passed
    for f in passed:
        d = flags.get(options.flag_of(f))
        assert d is not None, f"{options.flag_of(f)} is not a flag of satbench-server"
        if options.is_bool(f):
            assert d["kind"] == "switch", d
        elif f.metadata["choices"]:
            assert d["kind"] == "choice" and set(d["choices"]) == set(f.metadata["choices"]), d  # type: ignore[call-overload]
        else:
            assert d["kind"] == "int", d
            assert (d["lo"], d["hi"]) == (f.metadata["lo"], f.metadata["hi"]), (f.name, d)


def test_every_server_option_range_holds_at_its_edges_on_both_sides() -> None:
    ints = [f for f in options.fields() if f.metadata["binary"] and not options.is_bool(f)
            and not f.metadata["choices"]]
    assert {f.name for f in ints} >= {"sndbuf", "rcvbuf", "quic_initcwnd", "quic_max_data", "quic_max_stream_data"}
    for f in ints:
        lo, hi = f.metadata["lo"], f.metadata["hi"]
        for v in (lo - 1, lo, hi, hi + 1):
            inside = lo <= v <= hi
            assert (options.check_value(f.name, v) is None) == inside, (f.name, v)
            assert _binary_accepts(options.flag_of(f), v) == inside, (f.name, v)


def test_the_real_time_factors_are_what_the_server_accepts() -> None:
    out = subprocess.run([str(server_binary()), "--describe"], capture_output=True, text=True, timeout=30, check=True)
    rt = json.loads(out.stdout)["realtime"]
    assert (rt["min_size"], rt["max_size"]) == (realtime.MIN_MESSAGE_BYTES, realtime.MAX_MESSAGE_BYTES)
    assert (rt["max_messages"], rt["max_interval_ms"]) == (realtime.MAX_MESSAGES, realtime.MAX_INTERVAL_MS)
    check = factors.FACTORS["message_bytes"].check
    assert check(rt["min_size"]) is None and check(rt["max_size"]) is None
    assert check(rt["min_size"] - 1) is not None and check(rt["max_size"] + 1) is not None
    assert factors.FACTORS["messages"].check(rt["max_messages"] + 1) is not None


def test_the_manual_names_the_schema_version_the_code_writes() -> None:
    from satbench import prereq
    from satbench.results import schema
    assert f"`user_version`, now {schema.VERSION})" in (prereq.REPO / "docs" / "manual.md").read_text()


def test_the_real_time_workloads_table_is_the_one_schema_4_made() -> None:
    """The messages table belongs to the real-time workload now; a database migrated to schema 4
    made it from the schema's frozen copy. If the workload's table changes, the schema needs a
    migration: this fails first. Its declared columns are the table's, in order."""
    import sqlite3

    from satbench.results.schema import MESSAGES_V4
    from satbench.workloads import tables

    (messages,) = [t for t in tables() if t.name == "messages"]
    assert " ".join(messages.ddl.split()) == " ".join(MESSAGES_V4.split())
    for t in tables():
        db = sqlite3.connect(":memory:")
        db.executescript("CREATE TABLE trials (id INTEGER PRIMARY KEY);" + t.ddl)
        assert tuple(r[1] for r in db.execute(f"PRAGMA table_info({t.name})")) == ("trial_id", *t.columns)


GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"


def test_the_emulators_report_is_what_python_reads() -> None:
    """tests/fixtures/golden/link-stats.json is written by satbench-link's own test (a fixed GEO
    configuration, 40 packets each way at once, a 30 KB forward queue): every field Python reads
    is there, with the numbers the model gives."""

    from satbench.model import LinkCounters

    c = LinkCounters.parse(json.loads((GOLDEN / "link-stats.json").read_text()))
    assert c.seed == 7 and c.duration_s == 2.0
    assert (c.forward.offered.packets, c.forward.delivered.packets, c.forward.dropped["queue"].packets) == (40, 21, 19)
    assert c.ret.delivered.bytes == 60_000 and c.ret.dropped_packets == 0
    m = c.metrics(page_bytes=80_000)
    assert m["wire_bytes"] == 31_500 + 60_000 and m["link_drops"] == 19
    assert m["overhead_pct"] == (91_500 - 80_000) / 80_000 * 100
    assert set(c.forward.dropped) == {"queue", "aqm", "loss", "outage"}
    # ECN at the queues (none of these packets is ECN-capable).
    assert c.ecn_metrics() == {"ecn_fwd_capable": 0, "ecn_fwd_marked": 0, "ecn_ret_capable": 0, "ecn_ret_marked": 0}
    # The classifier's parts, as the report reads them (their sum is checked against the bytes offered).
    oh = c.overhead_metrics()
    assert (oh["oh_fwd_ip_header"], oh["oh_fwd_transport_header"], oh["oh_ret_ip_header"]) == (800, 320, 800), oh


def test_the_emulators_check_answer_is_what_python_reads() -> None:
    """tests/fixtures/golden/link-check.json is satbench-link --check's answer for the same
    configuration, written by its test: Python makes the same link of it, with the same hash as
    its own resolution of the profile it came from."""

    from satbench.link import profile
    from satbench.link.spec import LinkSpec, resolve

    answer = json.loads((GOLDEN / "link-check.json").read_text())
    spec = LinkSpec.from_check(answer, name="golden", label="golden", description="")
    assert spec.base_rtt_ms == 530 and spec.forward.mean_mbps == 10 and spec.ret.mean_mbps == 2
    same = resolve(profile.load("geo", ["forward.queue_bytes=30000", "return.rate_mbps=2"]))
    assert spec.hash == same.hash


def test_the_servers_access_log_is_what_python_reads(tmp_path: Path) -> None:
    """tests/fixtures/golden/server-access.jsonl is satbench-server's own access log of one
    HTTP/1.1 request (written by its test ``golden_access_log_records``, times fixed): the
    orchestrator's summary of it counts the connection, the request, the protocol, the congestion
    control and the bytes, so a record or field renamed on the server's side fails here."""
    import shutil

    from satbench.endpoints.satbench_server import summarise

    shutil.copy(GOLDEN / "server-access.jsonl", tmp_path / "access.jsonl")
    s = summarise(tmp_path)
    assert (s.connections, s.requests, s.protocols, s.cc, s.cc_impl) == (1, 1, ["http/1.1"], ["cubic"],
                                                                       ["linux cubic"])
    assert (s.bytes_served, s.tls, s.nodelay, s.transports) == (14, [False], [True], {"tcp": 1})
    assert s.origins == {"server.test": {"tcp": 1, "quic": 0, "requests": 1}} and s.unused_connections == 0
    assert s.limited_ms == {"fixed": 0.0}  # the classifier's classes, summed over connections
    # Each connection's classes beside its ALPN and its retransmissions (its last TCP_INFO sample,
    # field names as crates/server/src/tcpinfo.rs writes them): what tells a population's groups apart.
    assert s.connections_limited == [{"conn": "t1", "transport": "tcp", "alpn": None, "retrans": None, "fixed": 0.0}]
    (tmp_path / "tcp_info.jsonl").write_text('{"conn": "t1", "total_retrans": 3}\n{"conn": "t1", "total_retrans": 7}\n')
    assert summarise(tmp_path).connections_limited == [{"conn": "t1", "transport": "tcp", "alpn": None, "retrans": 7,
                                                        "fixed": 0.0}]


def test_both_quic_stacks_connection_records_are_what_python_reads(tmp_path: Path) -> None:
    """tests/fixtures/golden/server-quic-connections.jsonl is the one record type both HTTP/3
    stacks write at a connection's close (``h3stack::ConnectionRecord``, written by its test
    ``golden_quic_connection_records``): quiche's, with everything it can tell; quinn's, with
    nulls for what quinn does not expose; and an evicted one. A field renamed there fails here."""
    import shutil

    from satbench.endpoints.satbench_server import summarise

    shutil.copy(GOLDEN / "server-quic-connections.jsonl", tmp_path / "access.jsonl")
    s = summarise(tmp_path)
    assert (s.connections, s.transports, s.quic_stacks) == (3, {"quic": 3}, ["quiche", "quinn"])
    # Only quiche says whether a session was resumed: one of one connection that said.
    assert s.resumed_connections == 1
    # The evicted connection was never sampled: two connections carry the classifier's tally.
    assert s.connections_limited is not None and len(s.connections_limited) == 2
    assert s.limited_ms is not None and (s.limited_ms["cwnd"], s.limited_ms["pacing"]) == (120.0, 30.0)
    assert s.unused_connections == 3  # no request named an origin
