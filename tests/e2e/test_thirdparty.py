"""nginx and caddy as alternative endpoints: the same pages byte-exact, the
protocol they really used in their own logs, and the TCP congestion control
set on the server host's route in effect on their connections."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.endpoints import ca
from satbench.endpoints.thirdparty import CaddyServer, NginxServer, caddy_binary

from ..helpers import curl_all, page_urls

needs_caddy = pytest.mark.skipif(not caddy_binary().exists(),
                                 reason="no caddy: bash scripts/setup --only caddy installs it")
H3CLIENT = Path(__file__).with_name("h3client.py")
KINDS = {"nginx": NginxServer, "caddy": CaddyServer}


def _subset(generated_pages):  # type: ignore[no-untyped-def]
    out, manifests = generated_pages
    keep = {k: v for k, v in manifests.items() if k in ("uniform-500k", "triangular-1m", "single-2m", "shop", "blank")}
    return out, page_urls(out, keep)


@pytest.mark.parametrize("kind", ["nginx", pytest.param("caddy", marks=needs_caddy)])
def test_pages_byte_exact_over_tcp(generated_pages, tmp_path: Path, kind: str) -> None:
    out, rows = _subset(generated_pages)
    with Testbed(TestbedSpec(link=load_profile("wire", ["delay_ms=1"]), seed=1)) as tb:
        with KINDS[kind](out, tmp_path / "logs", tb.server) as srv:
            for proto in ("http/1.1", "https/1.1", "h2"):
                d = tmp_path / proto.replace("/", "_")
                d.mkdir()
                versions = curl_all(tb.client, rows, proto, d, str(ca.ensure().cert))
                assert set(versions) == {"2" if proto == "h2" else "1.1"}
    log = srv.access_log()
    if kind == "nginx":
        protos = {e["proto"] for e in log}
        assert protos == {"HTTP/1.1", "HTTP/2.0"}, protos
    else:
        protos = {e["request"]["proto"] for e in log if "request" in e}
        assert protos == {"HTTP/1.1", "HTTP/2.0"}, protos


@needs_caddy
def test_caddy_serves_http3(generated_pages, tmp_path: Path) -> None:
    out, rows = _subset(generated_pages)
    with Testbed(TestbedSpec(link=load_profile("wire", ["delay_ms=1"]), seed=1)) as tb:
        with CaddyServer(out, tmp_path / "logs", tb.server) as srv:
            p = tb.client.run([sys.executable, str(H3CLIENT), "server.test", "443", str(ca.ensure().cert),
                               "server.test", str(tmp_path / "h3"), *[r[0] for r in rows]],
                              capture_output=True, text=True, timeout=300)
            assert p.returncode == 0, p.stderr[-1000:]
    d = json.loads(p.stdout)
    assert d["alpn"] == "h3"
    for (path, sha), r in zip(rows, d["responses"], strict=True):
        assert (r["status"], r["sha256"]) == (200, sha), path
    assert {e["request"]["proto"] for e in srv.access_log() if "request" in e} == {"HTTP/3.0"}


@pytest.mark.parametrize("kind, cc", [("nginx", "cubic"), ("nginx", "reno"),
                                      pytest.param("caddy", "cubic", marks=needs_caddy)])
def test_route_sets_tcp_congestion_control(generated_pages, tmp_path: Path, kind: str, cc: str) -> None:
    out, _ = generated_pages
    seen: set[str] = set()
    with Testbed(TestbedSpec(link=load_profile("lan"), seed=1)) as tb:
        with KINDS[kind](out, tmp_path / "logs", tb.server, cc=cc):
            t = threading.Thread(target=lambda: tb.client.run(
                ["curl", "-sS", "-o", "/dev/null", "http://server.test/single-2m/img1.jpg"], timeout=60))
            t.start()
            for _ in range(40):  # sample the server's sockets during the 1.6 s transfer
                time.sleep(0.05)
                ss = tb.server.run(["ss", "-tinH", "state", "established", "( sport = :80 )"],
                                   capture_output=True, text=True).stdout
                seen |= {w for w in ss.split() if w in ("cubic", "reno", "bbr")}
            t.join()
    assert seen == {cc}, seen
