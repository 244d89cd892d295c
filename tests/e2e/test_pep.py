"""Split-TCP PEPs on the path (satbench-pep at the terminal and the gateway),
over real namespaces and the GEO link: the client's TCP sees the LAN's round
trip and the server's the terrestrial one while a UDP probe still sees the
satellite's; a 2 MB download finishes sooner with a PEP whose satellite leg
starts with a large window; QUIC passes untouched; a study records what each
PEP did; and nothing is left behind, even after SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.endpoints.options import ServerOptions
from satbench.endpoints.satbench_server import SatbenchServer
from satbench.path.pep import Pep

from ..helpers import SATBENCH, run_cli, satbench_leftovers, trial

UDP_ECHO = ("import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.bind(('0.0.0.0', 7))\n"
            "while True:\n    d, a = s.recvfrom(2048)\n    s.sendto(d, a)\n")
UDP_PROBE = ("import socket, time, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.settimeout(5)\n"
             "rtts = []\nfor i in range(3):\n    t = time.monotonic()\n    s.sendto(b'x', (sys.argv[1], 7))\n"
             "    s.recvfrom(16)\n    rtts.append((time.monotonic() - t) * 1e3)\nprint(min(rtts))\n")
SATELLITE_LEG = "cc=cubic,sndbuf=16M,rcvbuf=16M,initcwnd=100"


def download(generated_pages: Any, tmp_path: Path, pep: Pep | None) -> dict[str, Any]:
    out, _ = generated_pages
    with Testbed(TestbedSpec(link=load_profile("geo"), seed=1)) as tb:
        with SatbenchServer(out, tmp_path / "server", ServerOptions(), cc="cubic", host=tb.server) as srv:
            echo = tb.server.popen([sys.executable, "-c", UDP_ECHO])
            try:
                with pep.start(tb, tmp_path) if pep else nullcontext():
                    curl = tb.client.run(["curl", "-sS", "-o", "/dev/null", "-w",
                                          "%{time_connect} %{time_total} %{size_download}",
                                          "http://server.test/single-2m/img1.jpg"],
                                         capture_output=True, text=True, timeout=60)
                    assert curl.returncode == 0, curl.stderr
                    probe = tb.client.run([sys.executable, "-c", UDP_PROBE, tb.server.addr], capture_output=True,
                                          text=True, timeout=30)
                    assert probe.returncode == 0, probe.stderr
            finally:
                echo.kill()
                echo.wait()
        connect_s, total_s, size = curl.stdout.split()
        server_rtt_ms = min(s["srtt_us"] for s in srv.tcp_info() if s.get("srtt_us")) / 1e3
    return {"connect_ms": float(connect_s) * 1e3, "total_ms": float(total_s) * 1e3, "bytes": int(size),
            "udp_rtt_ms": float(probe.stdout), "server_rtt_ms": server_rtt_ms, "link": tb.link_stats}


def test_a_pep_at_both_ends_splits_the_round_trip_and_speeds_up_a_download(generated_pages: Any,
                                                                           tmp_path: Path) -> None:
    plain = download(generated_pages, tmp_path / "plain", None)
    value = {"at": "both", "satellite": SATELLITE_LEG}
    pep = Pep(value, {}, trial(pep=value))
    (tmp_path / "pep").mkdir()
    split = download(generated_pages, tmp_path / "pep", pep)
    print(f"without PEP: {plain}\nwith PEP: { {k: v for k, v in split.items() if k != 'link'} }")
    assert plain["bytes"] == split["bytes"] >= 2_000_000
    # Without a PEP the client's handshake and the server's RTT are the satellite's (530 ms)...
    assert plain["connect_ms"] >= 500 and plain["server_rtt_ms"] >= 500
    # ...with one, the terminal answers the client and the gateway the server: LAN round trips.
    assert split["connect_ms"] < 20, split
    assert split["server_rtt_ms"] < 20, split
    # UDP is not intercepted: it still crosses the satellite.
    assert plain["udp_rtt_ms"] >= 500 and split["udp_rtt_ms"] >= 500
    # The satellite leg starts with 100 segments where the server's TCP starts with 10.
    assert split["total_ms"] < plain["total_ms"] - 300, (split["total_ms"], plain["total_ms"])
    s = pep.summary()
    assert s["terminal"]["summary"]["accepted"] == s["gateway"]["summary"]["accepted"] == 1
    assert s["gateway"]["summary"]["bytes_down"] >= 2_000_000
    assert s["terminal"]["ready"]["legs"]["out"]["faces"] == "satellite"
    assert s["terminal"]["ready"]["legs"]["out"]["effective"]["cc"] == "cubic"
    assert all("initcwnd 100" in r for r in s["gateway"]["routes_with_initial_window"])
    conns = [json.loads(x) for x in (tmp_path / "pep" / "pep-gateway.jsonl").read_text().splitlines()]
    [conn] = [c for c in conns if c["event"] == "conn"]
    assert conn["in"]["faces"] == "satellite" and conn["in"]["init_cwnd"] == 100
    assert conn["in"]["tcp_info"]["srtt_us"] >= 500_000  # the satellite leg's round trip
    assert conn["out"]["tcp_info"]["srtt_us"] < 20_000  # the terrestrial leg's
    m = pep.metrics()
    assert m["pep_terminal_conns"] == 1 and m["pep_gateway_bytes_down"] >= 2_000_000


def test_a_study_records_the_peps_and_quic_passes_untouched(tmp_path: Path) -> None:
    exp = tmp_path / "pep.toml"
    exp.write_text('[experiment]\nname = "pep"\nseed = 1\ntimeout_s = 60\n[factors]\nlink = "wire"\n'
                   '"link.delay_ms" = 50\nprotocol = ["h1", "h3"]\npage = "uniform-100k"\nclient = "loader"\n'
                   'pep = { at = "both", satellite = "cc=bbr,initcwnd=40", terrestrial = "cc=cubic,nodelay" }\n')
    db = tmp_path / "pep.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, status, reason, factors, env FROM trials").fetchall()
        assert [r[1] for r in rows] == ["valid", "valid"], rows
        for tid, _, _, factors, env in rows:
            m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
            peps = json.loads(env)["path"]["pep"]
            assert set(peps) == {"terminal", "gateway"}
            legs = peps["gateway"]["ready"]["legs"]
            assert (legs["in"]["effective"]["cc"], legs["out"]["effective"]["cc"]) == ("bbr", "cubic")
            assert legs["out"]["effective"]["nodelay"] is True
            if '"h1"' in factors:
                assert m["pep_terminal_conns"] >= 1 and m["pep_gateway_conns"] >= 1
                assert m["pep_gateway_bytes_down"] >= 100_000
            else:  # QUIC is UDP: no connection reaches a PEP, and the link carries QUIC only
                assert m["pep_terminal_conns"] == m["pep_gateway_conns"] == 0
                assert m["oh_fwd_quic_application"] >= 100_000 and m["oh_fwd_tcp_payload"] == 0
                assert m["oh_fwd_tls_application"] == 0
    finally:
        con.close()
    assert satbench_leftovers() == []


def test_a_bad_pep_is_refused_with_its_line(tmp_path: Path) -> None:
    exp = tmp_path / "bad.toml"
    exp.write_text('[experiment]\nname = "bad"\n[factors]\nlink = "geo"\npage = "uniform-100k"\n'
                   'client = "loader"\npep = { at = "both", satellite = "cc=vegas" }\n')
    p = run_cli("run", str(exp), "--db", str(tmp_path / "db.sqlite"))
    assert p.returncode == 2, p.stderr
    assert p.stderr.count("\n") == 1 and "bad.toml" in p.stderr and "bad.toml:7: factors.pep" in p.stderr and "pep" in p.stderr
    assert "cc=vegas" in p.stderr
    assert not (tmp_path / "db.sqlite").exists()


def pep_processes() -> list[str]:
    out = subprocess.run(["pgrep", "-f", "release/satbench-pep --port"], capture_output=True, text=True).stdout
    return out.split()


@pytest.mark.serial
def test_sigkill_of_the_owner_leaves_no_pep_rule_or_route() -> None:
    before = pep_processes()
    p = subprocess.Popen([*SATBENCH, "shell", "--link", "wire", "--pep", "both", "-q", "--", "sleep", "60"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    while len(pep_processes()) < len(before) + 2:
        assert time.monotonic() < deadline and p.poll() is None, p.stderr.read() if p.stderr else ""
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)  # the owner only: its testbed, PEPs and command are orphaned
    p.wait()
    # The next satbench command removes what a dead owner left: namespaces (with their rules and
    # routes) and every process in them.
    assert run_cli("cleanup").returncode == 0
    assert satbench_leftovers() == []
    assert pep_processes() == before
