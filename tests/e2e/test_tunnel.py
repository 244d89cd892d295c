"""The VPN that defeats the PEPs (``tunnel = "wireguard"``): through it the
satellite link carries only UDP, the PEPs split nothing (a handshake costs
the satellite round trip again), every inner byte is counted at both ends;
the tunnel's MTU is enforced where packets enter it (no black hole); bad
values are refused with file, line and field; nothing is left behind."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.path.tunnel import Tunnel

from ..helpers import PARALLEL, SATBENCH, run_cli, satbench_leftovers, trial

#: What the emulator's classifier counts of TCP: if all are zero, no TCP segment crossed the link.
TCP_PARTS = ("tcp_retransmitted", "tls_handshake", "tls_record_overhead", "tcp_payload", "tls_application",
             "pure_acks", "syn_fin_rst")


def test_through_the_tunnel_the_peps_split_nothing(tmp_path: Path) -> None:
    exp = tmp_path / "t.toml"
    exp.write_text('[experiment]\nname = "t"\nseed = 1\ntimeout_s = 90\norder = "sequential"\n[factors]\n'
                   'link = "geo"\nprotocol = "h2"\npage = "bulk:1M"\nclient = "loader"\npep = ["none", "both"]\n'
                   'tunnel = "none"\n[[scenario]]\nname = "bulk"\n'
                   # Through the tunnel with both PEPs: what the tunnel alone would show, and more.
                   '[[scenario]]\nname = "bulk-tunnel"\npep = "both"\ntunnel = "wireguard"\n'
                   # A browser's page load through the tunnel and both PEPs, beside the bulk transfers.
                   '[[scenario]]\nname = "page"\nclient = "chromium"\npage = "flags"\npep = "both"\n'
                   'tunnel = "wireguard"\n')
    db = tmp_path / "t.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, factors, status, reason, env FROM trials").fetchall()
        m = {tid: dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
             for tid, *_ in rows}
    finally:
        con.close()
    by = {}
    for tid, factors, status, reason, env in rows:
        f = json.loads(factors)
        assert status == "valid", reason
        by[(f["pep"], f["tunnel"], f["client"])] = (m[tid], json.loads(env))
    assert len(by) == 4
    plain, split = by[("none", "none", "loader")][0], by[("both", "none", "loader")][0]
    both = by[("both", "wireguard", "loader")][0]
    page = by[("both", "wireguard", "chromium")][0]
    # Without the tunnel the PEPs answer the handshake locally; through it, nothing reaches them.
    # The terminal's PEP answers the handshake: a few ms, far below the 530 ms round trip (the
    # bound leaves room for a test running beside this one).
    assert split["connect_ms"] < 50 and split["pep_terminal_conns"] == 1
    assert both["pep_terminal_conns"] == 0 and both["pep_gateway_conns"] == 0
    assert both["connect_ms"] > 500 and plain["connect_ms"] > 500
    assert page["pep_terminal_conns"] == 0 and page["pep_gateway_conns"] == 0 and page["plt_ms"] > 530
    for x in (both, page):
        # Only UDP on the satellite link, both ways: not one TCP segment (no payload, no handshake, no
        # bare ACK, no SYN, FIN or RST); the TLS records ride inside the tunnel's datagrams.
        tcp = [f"oh_{d}_{k}" for d in ("fwd", "ret") for k in TCP_PARTS]
        assert {k: x[k] for k in tcp} == dict.fromkeys(tcp, 0)
        assert x["oh_ret_udp_payload"] > 0
    for x in (both,):
        assert x["oh_fwd_udp_payload"] > 1_000_000
        assert x["tunnel_handshakes"] == 1 and x["tunnel_bytes_in"] > 1_000_000
        # The tunnel's own cost: 32 bytes of WireGuard per packet (plus the handshake), under 10 %.
        assert 1.0 < x["tunnel_wire_bytes"] / x["tunnel_bytes_in"] < 1.1
    ends = by[("both", "wireguard", "loader")][1]["path"]["tunnel"]["c1"]
    c, v = ends["client"]["summary"], ends["vpn"]["summary"]
    # What one end took in, the other put out: the ends stop only after what was still crossing the
    # satellite (265 ms) has landed, so only what the link's queue dropped may be missing.
    for sent, got in ((c["tun_in_packets"], v["tun_out_packets"]), (v["tun_in_packets"], c["tun_out_packets"])):
        assert sent >= got >= 0.9 * sent, (c, v)
    assert c["net_in_rejected"] == 0 and v["net_in_rejected"] == 0
    assert satbench_leftovers() == []


def test_a_tunnel_comes_up_over_a_lossy_path(tmp_path: Path) -> None:
    """A lost handshake or first echo is no dead tunnel: over a terrestrial part losing 15 % each
    way, every trial's tunnel comes up and the trial is valid (a tunnel that had one echo to come
    back failed whenever the handshake, the echo or its reply was lost)."""
    lossy = tmp_path / "lossy.toml"
    lossy.write_text('name = "lossy"\ndescription = "15 % loss each way"\n'
                     '[forward]\nrate_mbps = 100\ndelay_ms = 5\nqueue_ms = 20\nloss = 0.15\n'
                     '[return]\nrate_mbps = 100\ndelay_ms = 5\nqueue_ms = 20\nloss = 0.15\n')
    exp = tmp_path / "lossy-tunnel.toml"
    exp.write_text('[experiment]\nname = "lossy-tunnel"\nseed = 1\ntimeout_s = 90\nrepetitions = 4\n[factors]\n'
                   f'link = "lan"\nterrestrial = "{lossy}"\ntunnel = "wireguard"\nprotocol = "h2"\n'
                   'page = "blank"\nclient = "loader"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), *PARALLEL, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT status, reason FROM trials").fetchall()
    finally:
        con.close()
    assert rows == [("valid", None)] * 4, rows
    assert satbench_leftovers() == []


def test_the_mtu_is_enforced_where_packets_enter_the_tunnel(tmp_path: Path) -> None:
    tunnel = Tunnel("wireguard", {}, trial(link="lan", tunnel="wireguard"))
    spec = TestbedSpec(link=load_profile("lan"), seed=1)
    tunnel.configure(spec)
    with Testbed(spec) as tb, tunnel.start(tb, tmp_path):
        fits = tb.client.run(["ping", "-c", "1", "-W", "5", "-M", "do", "-s", "1392", "server.test"],
                             capture_output=True, text=True)
        too_big = tb.client.run(["ping", "-c", "1", "-W", "5", "-M", "do", "-s", "1393", "server.test"],
                                capture_output=True, text=True)
        route = tb.client.run(["ip", "route", "get", "198.18.3.10"], capture_output=True, text=True).stdout
    assert fits.returncode == 0, fits.stdout + fits.stderr
    # Refused at once by the sender's own route (MTU 1420), not lost on the way.
    assert too_big.returncode != 0 and "mtu=1420" in (too_big.stdout + too_big.stderr), too_big
    assert "dev sbwg0" in route and "src 10.200.1.2" in route, route
    s = tunnel.summary()["c1"]
    assert s["client"]["exit"] == 0 and s["vpn"]["exit"] == 0 and s["mtu"] == 1420
    assert satbench_leftovers() == []


def test_bad_tunnel_values_are_refused(tmp_path: Path) -> None:
    exp = tmp_path / "bad.toml"
    for rest, why in (('protocol = "h2"\ntunnel = "openvpn"', "kind must be one of wireguard"),
                      ('protocol = "h2"\ntunnel = { kind = "wireguard", mtu = 1500 }',
                       "mtu must be a whole number from 1280"),
                      ('clients = { h2 = 2 }\nterminals = 2\ntunnel = "wireguard"', "several terminals")):
        exp.write_text('[experiment]\nname = "bad"\n[factors]\nlink = "geo"\npage = "blank"\nclient = "loader"\n'
                       + rest + "\n")
        line = 1 + (exp.read_text().splitlines().index(next(x for x in exp.read_text().splitlines()
                                                            if x.startswith("tunnel"))))
        p = run_cli("plan", str(exp))
        assert p.returncode == 2, p.stdout + p.stderr
        [msg] = p.stderr.strip().splitlines()
        assert re.search(rf"{re.escape(str(exp))}:{line}: (factors\.)?tunnel: ", msg) and why in msg, msg


def _processes(pattern: str) -> list[str]:
    p = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return p.stdout.split()


@pytest.mark.serial
def test_sigkill_of_the_owner_leaves_no_tunnel_rule_or_route() -> None:
    before = _processes("satbench-tunnel run")
    p = subprocess.Popen([*SATBENCH, "shell", "--link", "wire", "--tunnel", "wireguard", "--pep", "both", "-q", "--",
                          "sleep", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    deadline = time.monotonic() + 30
    while len(_processes("satbench-tunnel run")) < len(before) + 2:
        assert time.monotonic() < deadline and p.poll() is None, p.stderr.read() if p.stderr else ""
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)  # the owner only: its testbed, tunnel ends and command are orphaned
    p.wait()
    # The next satbench command removes the namespaces (their tunnels, NAT and routes) and every process in them.
    assert run_cli("cleanup").returncode == 0
    assert satbench_leftovers() == []
    assert _processes("satbench-tunnel run") == before
