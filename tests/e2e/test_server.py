"""The test server over the emulated path: every protocol serves every page
byte-exact to a real client; the congestion control in effect is verified
from TCP_INFO and qlog; bad input neither crashes nor wedges it."""

from __future__ import annotations

import hashlib
import json
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.endpoints import ca
from satbench.endpoints.loader import loader_binary
from satbench.endpoints.options import ServerOptions
from satbench.endpoints.satbench_server import SatbenchServer as Server

from ..helpers import curl_all, page_urls

H3CLIENT = Path(__file__).with_name("h3client.py")


@pytest.fixture(scope="module")
def served(generated_pages, tmp_path_factory):  # type: ignore[no-untyped-def]
    out, manifests = generated_pages
    logs = tmp_path_factory.mktemp("server-logs")
    link = load_profile("wire", ["delay_ms=1"])
    with Testbed(TestbedSpec(link=link, seed=1)) as tb:
        with Server(out, logs, ServerOptions(), cc="reno", host=tb.server) as srv:
            yield tb, srv, out, manifests


@pytest.mark.parametrize("proto", ["http/1.1", "https/1.1", "h2"])
def test_every_page_byte_exact_over_tcp(served, proto: str, tmp_path: Path) -> None:
    tb, srv, out, manifests = served
    rows = page_urls(out, manifests)
    assert len(rows) > 1000  # 16 pages, 1081 objects
    versions = curl_all(tb.client, rows, proto, tmp_path, str(ca.ensure().cert))
    assert set(versions) == {"2" if proto == "h2" else "1.1"}


def test_every_page_byte_exact_over_h3(served, tmp_path: Path) -> None:
    tb, srv, out, manifests = served
    rows = page_urls(out, manifests)
    p = tb.client.run([sys.executable, str(H3CLIENT), "server.test", "443", str(ca.ensure().cert), "server.test",
                       str(tmp_path), *[path for path, _ in rows]], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    assert d["alpn"] == "h3"
    for (path, sha), r in zip(rows, d["responses"], strict=True):
        assert (r["status"], r["sha256"]) == (200, sha), path
    h3 = [e for e in srv.access_log() if e.get("proto") == "h3" and e["type"] == "request"]
    assert len(h3) >= len(rows)


def test_access_log_records_protocol_and_congestion_control(served) -> None:
    tb, srv, out, manifests = served
    cert = str(ca.ensure().cert)
    path = "/uniform-100k/img3.jpg"
    for argv in (["curl", "-sS", "-o", "/dev/null", f"http://server.test{path}"],
                 ["curl", "-sS", "-o", "/dev/null", "--cacert", cert, "--http2", f"https://server.test{path}"],
                 [str(loader_binary()), f"https://server.test{path}", "--protocol", "h3", "--single", "--cacert", cert]):
        assert tb.client.run(argv, capture_output=True, timeout=30).returncode == 0, argv
    reqs = [e for e in srv.access_log() if e["type"] == "request" and e["path"] == path]
    assert {e["proto"] for e in reqs} >= {"http/1.1", "h2", "h3"}
    assert all(e["cc"] == "reno" for e in reqs)
    for e in reqs[:50]:
        assert e["t_request_unix_ns"] <= e["t_response_unix_ns"] <= e["t_done_unix_ns"]
        assert e["body_bytes"] == e["content_length"]


@pytest.mark.parametrize("cc", ["cubic", "bbr", "reno"])
def test_congestion_control_in_effect(generated_pages, tmp_path: Path, cc: str) -> None:
    out, _ = generated_pages
    with Testbed(TestbedSpec(link=load_profile("lan"), seed=1)) as tb:
        with Server(out, tmp_path, ServerOptions(quic_stack="quiche"), cc=cc, host=tb.server) as srv:
            r = tb.client.run(["curl", "-sS", "-o", "/dev/null", "--cacert", str(ca.ensure().cert), "--http2",
                               "https://server.test/single-1m/img1.jpg"], capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
            q = tb.client.run([sys.executable, str(H3CLIENT), "server.test", "443", str(ca.ensure().cert),
                               "server.test", str(tmp_path / "h3"), "/single-1m/img1.jpg"], capture_output=True,
                              text=True, timeout=60)
            assert q.returncode == 0, q.stderr[-1000:]
    # TCP: the kernel says so, in every TCP_INFO sample of the connection.
    samples = srv.tcp_info()
    assert samples and {s["cc"] for s in samples} == {cc}
    assert any(s.get("at_close") for s in samples)
    assert max(s["bytes_acked"] for s in samples) >= 1_000_000
    # QUIC: quiche's own algorithm, seen at work in its qlog.
    states = set()
    for f in srv.qlogs():
        for line in f.read_text().splitlines():
            if '"quic:congestion_state_updated"' in line:
                states.add(json.loads(line.lstrip("\x1e"))["data"]["new"])
    if cc == "bbr":
        assert "bbr_startup" in states, states
    else:
        assert states and not any(s.startswith("bbr") for s in states), states
    quic = [e for e in srv.access_log() if e["type"] == "connection" and e["transport"] == "quic"]
    assert quic and quic[0]["cc"] == cc
    assert quic[0]["cc_impl"] == "quiche " + {"bbr": "bbr2_gcongestion"}.get(cc, cc)


def _raw(addr: str, port: int, data: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection((addr, port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        try:
            while True:
                b = s.recv(65536)
                if not b:
                    break
                chunks.append(b)
        except socket.timeout:
            pass
        return b"".join(chunks)


def test_bad_requests_neither_crash_nor_wedge(generated_pages, tmp_path: Path) -> None:
    out, _ = generated_pages
    with Testbed(TestbedSpec(link=load_profile("wire"), seed=1)) as tb:
        with Server(out, tmp_path, ServerOptions(), idle_timeout_s=2, host=tb.server) as srv:
            script = tmp_path / "bad.py"
            script.write_text(f"""
import socket, sys, time, json
sys.path.insert(0, {str(Path(__file__).parent.parent / 'python')!r})
def raw(port, data, t=5.0):
    # A server that refuses a request may close (or reset) while we still send
    # or before we read its answer: that is "<reset>".
    s = socket.create_connection(('198.18.3.10', port), timeout=t); out = b''
    try:
        s.sendall(data)
        while True:
            b = s.recv(65536)
            if not b: break
            out += b
    except socket.timeout: out += b'<timeout>'
    except (BrokenPipeError, ConnectionResetError): out = out or b'<reset>'
    s.close(); return out
r = {{}}
r['garbage'] = raw(80, b'GARBAGE\\r\\n\\r\\n')[:12].decode()
r['huge_header'] = raw(80, b'GET / HTTP/1.1\\r\\nHost: x\\r\\nX: ' + b'a' * 200000 + b'\\r\\n\\r\\n')[:12].decode()
r['tls_garbage'] = len(raw(443, b'this is not TLS\\r\\n' * 10))
t = time.monotonic(); r['idle'] = raw(80, b'', t=10.0)[:20].decode(); r['idle_s'] = time.monotonic() - t
r['traversal'] = raw(80, b'GET /../../etc/passwd HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n').split(b'\\r\\n')[0].decode()
r['encoded'] = raw(80, b'GET /%2e%2e/%2e%2e/etc/passwd HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n').split(b'\\r\\n')[0].decode()
r['post'] = raw(80, b'POST /blank/index.html HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n').split(b'\\r\\n')[0].decode()
s = socket.create_connection(('198.18.3.10', 80)); s.sendall(b'GET /single-2m/img1.jpg HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n'); s.recv(1000); s.close()
print(json.dumps(r))
""")
            p = tb.client.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr
            r = json.loads(p.stdout)
            assert r["garbage"].startswith("HTTP/1.1 400")
            assert r["huge_header"].startswith("HTTP/1.1 431") or r["huge_header"] == "<reset>", r
            assert r["tls_garbage"] < 100  # closed, perhaps after a TLS alert
            assert r["idle"] == "" and 1.5 <= r["idle_s"] <= 8, r  # idle connection closed by the server
            assert r["traversal"] == "HTTP/1.1 403 Forbidden"
            assert r["encoded"] == "HTTP/1.1 403 Forbidden"
            assert r["post"] == "HTTP/1.1 405 Method Not Allowed"
            # Still serving, on every protocol.
            ok = tb.client.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--cacert",
                                str(ca.ensure().cert), "--http2", "https://server.test/blank/index.html"],
                               capture_output=True, text=True, timeout=30)
            assert ok.stdout == "200"
            assert srv.proc.poll() is None
    aborted = [e for e in srv.access_log() if e.get("path") == "/single-2m/img1.jpg"]
    assert aborted and aborted[0]["body_bytes"] < 2_000_000


def test_head_alt_svc_and_errors(served) -> None:
    tb, srv, out, manifests = served
    p = tb.client.run(["curl", "-sS", "-I", "--cacert", str(ca.ensure().cert), "--http2",
                       "https://server.test/single-100k/img1.jpg"], capture_output=True, text=True, timeout=30)
    head = p.stdout.lower()
    assert "content-length: 100000" in head and "content-type: image/jpeg" in head
    assert 'alt-svc: h3=":443"' in head
    nf = tb.client.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://server.test/nope"],
                       capture_output=True, text=True, timeout=30)
    assert nf.stdout == "404"


def test_satbench_serve_runs_on_its_own(generated_pages, tmp_path: Path) -> None:
    """`satbench serve` binds to loopback unless told otherwise (it must not
    serve the directory to every network the machine is on)."""
    out, _ = generated_pages
    with Testbed(TestbedSpec(link=load_profile("wire"), seed=1)) as tb:
        for bind, reachable in ((None, False), (tb.server.addr, True)):
            argv = [sys.executable, "-m", "satbench", "serve", str(out), "--cc", "cubic", "--log-dir", str(tmp_path)]
            proc = tb.server.popen(argv + (["--bind", bind] if bind else []), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
            try:
                ready = json.loads(proc.stdout.readline())
                assert ready["ready"] and ready["tcp_cc"] == "cubic" and ready["quic_cc"] == "cubic"
                local = tb.server.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
                                       "http://127.0.0.1/blank/"], capture_output=True, text=True, timeout=30)
                assert local.stdout == ("000" if bind else "200")
                r = tb.client.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
                                   "http://server.test/blank/"], capture_output=True, text=True, timeout=30)
                assert r.stdout == ("200" if reachable else "000")
            finally:
                proc.terminate()
                assert proc.wait(timeout=15) == 0
    assert any(json.loads(l)["type"] == "request" for l in (tmp_path / "access.jsonl").read_text().splitlines())


def test_shell_serve_starts_the_server_on_the_server_host(generated_pages, tmp_path: Path) -> None:
    from ..helpers import run_cli

    out, _ = generated_pages
    p = run_cli("shell", "--link", "lan", "--serve", str(out), "--cc", "bbr", "--quic-stack", "quiche",
                "--server-logs", str(tmp_path), "--json", "--", "curl", "-sS", "-o", "/dev/null", "--cacert", str(ca.ensure().cert), "--http2",
                "https://server.test/uniform-100k/img1.jpg")
    assert p.returncode == 0, p.stderr
    report = json.loads(p.stderr.strip().splitlines()[-1])
    assert report["server"]["tcp_cc"] == "bbr" and report["server"]["quic_cc"] == "bbr"
    assert report["server"]["quic_cc_impl"] == "quiche bbr2_gcongestion"
    reqs = [json.loads(l) for l in (tmp_path / "access.jsonl").read_text().splitlines()]
    assert any(r["type"] == "request" and r["proto"] == "h2" and r["cc"] == "bbr" for r in reqs)


@pytest.mark.parametrize("initcwnd", [4, 32])
def test_tcp_initial_window_from_the_route(generated_pages, tmp_path: Path, initcwnd: int) -> None:
    out, _ = generated_pages
    with Testbed(TestbedSpec(link=load_profile("geo"), seed=1)) as tb:
        with Server(out, tmp_path, ServerOptions(tcp_initcwnd=initcwnd), cc="cubic", host=tb.server) as srv:
            r = tb.client.run(["curl", "-sS", "-o", "/dev/null", "http://server.test/single-100k/img1.jpg"],
                              capture_output=True, text=True, timeout=60)
            assert r.returncode == 0, r.stderr
    first = srv.tcp_info()[0]
    assert first["cwnd"] == initcwnd, first


def test_loader_fetches_over_h3_byte_exact(served, tmp_path: Path) -> None:
    tb, srv, out, manifests = served
    o = tmp_path / "body"
    p = tb.client.run([str(loader_binary()), "https://server.test/triangular-1m/img5.jpg", "--protocol", "h3",
                       "--single", "--repeat", "3", "--cacert", str(ca.ensure().cert), "-o", str(o)],
                      capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    [c] = json.loads(p.stdout)["clients"]
    assert c["valid"], c["invalid_reason"]
    assert [(r["protocol"], r["status"]) for r in c["objects"]] == [("h3", 200)] * 3
    assert len(c["connections"]) == 1  # the three requests share one connection
    assert c["bytes"] == 3 * 270_000
    assert hashlib.sha256(o.read_bytes()).hexdigest() == next(
        x.sha256 for x in manifests["triangular-1m"].objects if x.path == "img5.jpg")


@pytest.mark.serial
def test_server_benchmark_runs_every_protocol() -> None:
    from ..helpers import run_cli

    p = run_cli("bench", "server", "--quick", "--json", timeout=300)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)["protocols"]
    assert set(r) == {"http/1.1", "https/1.1", "h2", "h3 quiche", "h3 quinn"}
    for proto, x in r.items():
        assert x["error"] is None and x["bytes"] == 10 * 2_000_000, (proto, x)
        assert x["mbps"] > 50, (proto, x)  # a generous bound; the targets are the benchmark's to report


def _server_packet_gaps(pcap: Path) -> list[float]:
    import struct

    data, off, ts = pcap.read_bytes(), 24, []
    while off < len(data):
        s, ns, incl, _ = struct.unpack("<IIII", data[off:off + 16])
        ip = data[off + 16:off + 16 + incl]
        if ip[9] == 17 and ip[12:16] == bytes([198, 18, 3, 10]) and incl > 1000:  # server's full UDP packets
            ts.append(s + ns / 1e9)
        off += 16 + incl
    return [b - a for a, b in zip(ts, ts[1:])]


def _first_flight_gaps(gaps: list[float], one_way_s: float, n: int = 10) -> list[float]:
    """The gaps between the server's first ``n`` full-size packets after the
    handshake: the response's first flight, which follows the first wait of
    at least one round trip for the client's request."""
    start = next(i for i, g in enumerate(gaps) if g >= 2 * one_way_s)
    return gaps[start + 1:start + 1 + n]


@pytest.mark.serial
def test_quic_pacing_really_happens(generated_pages, tmp_path: Path) -> None:
    """With BBR the server holds packets until quiche's send time; on the wire
    (the emulator's capture at the gateway) the response's first flight is
    spread out at the initial pacing rate (milliseconds apart), while without
    pacing it leaves as fast as the server sends (a fraction of a millisecond
    apart). Later packets are ACK-clocked either way, so only the first
    flight tells the two apart reliably."""
    out, _ = generated_pages
    flight: dict[bool, float] = {}
    for pacing in (True, False):
        d = tmp_path / str(pacing)
        with Testbed(TestbedSpec(link=load_profile("wire", ["delay_ms=20"]), seed=1, pcap_dir=d)) as tb:
            opts = ServerOptions(pacing=pacing, quic_stack="quiche")
            with Server(out, d / "logs", opts, cc="bbr", host=tb.server) as srv:
                p = tb.client.run([str(loader_binary()), "https://server.test/single-500k/img1.jpg", "--protocol", "h3",
                                   "--single", "--cacert", str(ca.ensure().cert)],
                                  capture_output=True, text=True, timeout=60)
                assert p.returncode == 0, p.stderr
        conn = next(e for e in srv.access_log() if e["type"] == "connection" and e["transport"] == "quic")
        if pacing:
            assert conn["paced_packets"] > 0.5 * conn["packets_sent"], conn
        else:
            assert conn["paced_packets"] == 0
        first = _first_flight_gaps(_server_packet_gaps(d / "link" / "gateway.pcap"), 0.020)
        assert len(first) == 10, first
        flight[pacing] = statistics.median(first)
    # Measured here: about 4 ms paced against 0.25 ms unpaced.
    assert flight[True] >= 1e-3 and flight[True] > 4 * flight[False], flight


@pytest.mark.parametrize("zero_rtt", [True, False])
def test_quic_resumption_and_0rtt(generated_pages, tmp_path: Path, zero_rtt: bool) -> None:
    import os

    out, _ = generated_pages
    ticket = tmp_path / "ticket"
    with Testbed(TestbedSpec(link=load_profile("wire", ["delay_ms=10"]), seed=1)) as tb:
        opts = ServerOptions(zero_rtt=zero_rtt, quic_stack="quiche")
        with Server(out, tmp_path / "logs", opts, host=tb.server) as srv:
            for i in range(2):
                p = tb.client.run([sys.executable, str(H3CLIENT), "server.test", "443", str(ca.ensure().cert),
                                   "server.test", str(tmp_path / f"o{i}"), "/blank/index.html"], capture_output=True,
                                  text=True, timeout=60, env={**os.environ, "H3CLIENT_TICKET": str(ticket)})
                assert p.returncode == 0, p.stderr[-1000:]
                assert json.loads(p.stdout)["responses"][0]["status"] == 200
    conns = [e for e in srv.access_log() if e["type"] == "connection"]
    assert [c["resumed"] for c in conns] == [False, True]
    assert conns[0]["early_requests"] == 0
    assert conns[1]["early_requests"] == (1 if zero_rtt else 0)


@pytest.mark.parametrize("resumption", [True, False])
def test_tls_resumption_over_tcp(served, generated_pages, tmp_path: Path, resumption: bool) -> None:
    out, _ = generated_pages
    with Testbed(TestbedSpec(link=load_profile("wire"), seed=1)) as tb:
        with Server(out, tmp_path / "logs", ServerOptions(resumption=resumption), host=tb.server) as srv:
            # One curl, two URLs, no keep-alive: the second connection offers the first's session.
            p = tb.client.run(["curl", "-sS", "--no-keepalive", "-H", "Connection: close", "--http1.1", "--cacert",
                               str(ca.ensure().cert), "-o", "/dev/null", "https://server.test/blank/index.html",
                               "-o", "/dev/null", "https://server.test/blank/index.html"],
                              capture_output=True, text=True, timeout=30)
            assert p.returncode == 0, p.stderr
    kinds = [e["tls_handshake"] for e in srv.access_log() if e["type"] == "connection"]
    assert kinds == (["Full", "Resumed"] if resumption else ["Full", "Full"]), kinds


@pytest.mark.parametrize("tfo", [True, False])
def test_tcp_fast_open(generated_pages, tmp_path: Path, tfo: bool) -> None:
    out, _ = generated_pages
    with Testbed(TestbedSpec(link=load_profile("wire", ["delay_ms=5"]), seed=1)) as tb:
        with Server(out, tmp_path / "logs", ServerOptions(tfo=tfo), host=tb.server) as srv:
            for _ in range(2):  # the first connection fetches a cookie, the second uses it
                p = tb.client.run(["curl", "-sS", "--tcp-fastopen", "-o", "/dev/null",
                                   "http://server.test/blank/index.html"], capture_output=True, text=True, timeout=30)
                assert p.returncode == 0, p.stderr
                time.sleep(0.05)
    first_sample = {}
    for s in srv.tcp_info():
        first_sample.setdefault(s["conn"], s)
    assert [first_sample[c]["syn_data"] for c in sorted(first_sample)] == ([False, True] if tfo else [False, False])


def test_route_metrics_add_up(generated_pages, tmp_path: Path) -> None:
    """An initial window set for the server keeps the congestion control set for the testbed."""
    out, _ = generated_pages
    with Testbed(TestbedSpec(link=load_profile("lan"), tcp_cc="reno", seed=1)) as tb:
        with Server(out, tmp_path, ServerOptions(tcp_initcwnd=20), host=tb.server):
            route = tb.server.run(["ip", "-4", "route", "show", "198.18.0.0/15"], capture_output=True, text=True).stdout
    assert "initcwnd 20" in route and "congctl reno" in route, route


def test_limits_classified_without_samples_kept(generated_pages, tmp_path: Path) -> None:
    """'Limited by' is the trial's measurement, not an artefact: with the
    samples not kept (no --tcp-info, no --quic-info) every TCP and QUIC
    connection record still carries its classifier's tally, and the tally
    covers the connection's busy time."""
    out, _ = generated_pages
    with Testbed(TestbedSpec(link=load_profile("wire", ["delay_ms=20", "rate_mbps=20"]), seed=1)) as tb:
        with Server(out, tmp_path, ServerOptions(), cc="cubic", host=tb.server, telemetry=False) as srv:
            for proto in ("h2", "h3"):
                p = tb.client.run([str(loader_binary()), "https://server.test/single-1m/img1.jpg", "--protocol",
                                   proto, "--single", "--cacert", str(ca.ensure().cert)],
                                  capture_output=True, text=True, timeout=60)
                assert p.returncode == 0, p.stderr
    assert not (tmp_path / "tcp_info.jsonl").exists() and not (tmp_path / "quic_info.jsonl").exists()
    conns = {e["transport"]: e for e in srv.access_log() if e["type"] == "connection"}
    assert set(conns) == {"tcp", "quic"}
    for transport, c in conns.items():
        tally = c["limited_ms"]
        # 1 MB at 20 Mbit/s takes at least 400 ms, all of it classified, and a
        # good part of it held by the window or the pacer (measured: 300-400 ms).
        assert sum(tally.values()) >= 400, (transport, tally)
        assert sum(v for k, v in tally.items() if k != "application") >= 100, (transport, tally)
