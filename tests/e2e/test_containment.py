"""Containment: the testbed is a closed world. From every namespace (clients,
access point, terminal, gateway, edge, VPN endpoint, servers, other users'
hosts), over IPv4 and IPv6, nothing outside the testbed answers: not the
host's own addresses, not a listener on the host's loopback, not a public
address; DNS answers the testbed's names only. A replayed page whose script
fetches the host, the host's loopback, a public address and a public name
loads its own objects, and the trial says what was blocked. The plain run
opens no listener in the host namespace."""

from __future__ import annotations

import json
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from satbench import Testbed, TestbedSpec, load_profile

from ..helpers import ListenerWatch, run_cli

# Outside the testbed, and documentation addresses: never routed anywhere, should the testbed leak.
PUBLIC4, PUBLIC6 = "203.0.113.7", "2001:db8:ffff::7"


def _host_addresses() -> list[str]:
    p = subprocess.run(["ip", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True)
    return [line.split()[3].split("/")[0] for line in p.stdout.splitlines()]


class _Tally:
    def __init__(self) -> None:
        self.accepted: list[str] = []


@contextmanager
def host_listeners() -> Iterator[tuple[list[tuple[str, int]], _Tally]]:
    """TCP listeners on each of the host's own addresses and on its loopback, counting what connects:
    a connection from inside a testbed would show here."""
    tally = _Tally()
    socks = []
    for addr in ["127.0.0.1", *_host_addresses()]:
        s = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET)
        s.bind((addr, 0))
        s.listen()
        s.settimeout(0.2)
        socks.append(s)
    stop = threading.Event()

    def serve(s: socket.socket) -> None:
        while not stop.is_set():
            try:
                c, peer = s.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            tally.accepted.append(str(peer))
            c.close()

    threads = [threading.Thread(target=serve, args=(s,), daemon=True) for s in socks]
    for t in threads:
        t.start()
    try:
        yield [(s.getsockname()[0], s.getsockname()[1]) for s in socks], tally
    finally:
        stop.set()
        for t in threads:
            t.join()
        for s in socks:
            s.close()


PROBE = """
import json, socket, sys, time
out = []
for host, port in json.loads(sys.argv[1]):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    t = time.monotonic()
    try:
        with socket.socket(fam) as s:
            s.settimeout(3)
            s.connect((host, port))
        r = "connected"
    except OSError as e:
        r = type(e).__name__
    out.append([host, port, r, round(time.monotonic() - t, 3)])
print(json.dumps(out))
"""


def test_no_namespace_reaches_anything_outside_the_testbed_over_ipv4_or_ipv6() -> None:
    with host_listeners() as (listeners, tally):
        targets = [*listeners, (PUBLIC4, 443), (PUBLIC6, 443), ("1.1.1.1", 53)]
        spec = TestbedSpec(link=load_profile("wire"), access=load_profile("wifi"), clients=2, servers=2, seed=1,
                           ip="dual", dns=True, vpn=True, cross=True)
        with Testbed(spec) as tb:
            roles = [h.role for h in tb.hosts]
            assert {"c1", "c2", "ap", "terminal", "gateway", "vpn", "s1", "s2", "xclient", "xserver"} <= set(roles)
            for h in tb.hosts:
                for fam in ("-4", "-6"):
                    routes = h.run(["ip", fam, "route", "show", "table", "all"], capture_output=True, text=True)
                    lines = [r for r in routes.stdout.splitlines() if r.startswith("default")]
                    # Only a client keeps an IPv6 default route (Chromium looks for one before it asks for
                    # IPv6 addresses); the table below closes it.
                    assert lines == [] or (fam == "-6" and h in tb._client_lan), (h.role, lines)
                p = h.run([sys.executable, "-c", PROBE, json.dumps(targets)], capture_output=True, text=True)
                got = json.loads(p.stdout)
                assert all(r != "connected" for _, _, r, _ in got), (h.role, got)
                # Refused at once (no route, or a reset from the closing table), not left to time out.
                assert all(s < 1.0 for *_, s in got), (h.role, got)
            # A client's attempts on IPv6 were refused by the table, and counted.
            c = tb.client.run(["nft", "-j", "list", "counter", "inet", "satbench_closed", "blocked"],
                              capture_output=True, text=True, check=True)
            assert json.loads(c.stdout)["nftables"][1]["counter"]["packets"] >= 1
            # DNS answers the testbed's names, and nothing else.
            ok = tb.client.run(["getent", "ahosts", "server.test"], capture_output=True, text=True)
            assert ok.returncode == 0 and "198.18.3.10" in ok.stdout, ok.stdout + ok.stderr
            for name in ("example.com", "localhost.example", "www.google.com"):
                r = tb.client.run(["getent", "ahosts", name], capture_output=True, text=True)
                assert r.returncode != 0, (name, r.stdout)
            # Inside, everything is reachable, over both families.
            for fam in ("-4", "-6"):
                r = tb.client.run(["ping", fam, "-c", "1", "-W", "2", "server.test"], capture_output=True, text=True)
                assert r.returncode == 0, r.stdout + r.stderr
        assert tally.accepted == []


def _har(entries: list[tuple[str, str, str]]) -> dict:
    return {"log": {"version": "1.2", "creator": {"name": "test", "version": "1"}, "entries": [
        {"request": {"method": "GET", "url": url, "headers": []},
         "response": {"status": 200, "headers": [{"name": "Content-Type", "value": mime}],
                      "content": {"mimeType": mime, "size": len(text), "text": text}}}
        for url, mime, text in entries]}}


@pytest.mark.serial
def test_a_replayed_page_reaching_outside_loads_its_own_objects_and_the_trial_says_what_was_blocked(
        tmp_path: Path) -> None:
    with host_listeners() as (listeners, tally):
        host_addr, host_port = listeners[1] if len(listeners) > 1 else listeners[0]
        loop_port = listeners[0][1]
        outside = [f"https://{host_addr}:{host_port}/x", f"https://127.0.0.1:{loop_port}/x",
                   f"https://{PUBLIC4}/x", "https://tracker.example.com/x"]
        script = ("Promise.allSettled(" + json.dumps(outside) + ".map(u => fetch(u, {mode: 'no-cors'})))"
                  ".then(r => document.title = r.map(x => x.status).join());")
        html = (f'<!DOCTYPE html><html><head><link rel="stylesheet" href="/style.css"></head><body><h1>shop</h1>'
                f"<script>{script}</script></body></html>")
        har = tmp_path / "reach.har"
        har.write_text(json.dumps(_har([("https://www.shop.test/", "text/html", html),
                                        ("https://www.shop.test/style.css", "text/css", "h1 { color: red; }")])))
        exp = tmp_path / "reach.toml"
        exp.write_text('[experiment]\nname = "reach"\nseed = 1\ntimeout_s = 60\n'
                       f'[factors]\nlink = "lan"\nclient = "chromium"\nprotocol = "h2"\npage = "har:{har}"\n')
        db = tmp_path / "db.sqlite"
        with ListenerWatch() as watch:
            p = run_cli("run", str(exp), "--db", str(db), timeout=300)
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert tally.accepted == []
    assert watch.new == set(), watch.new  # a Chromium trial opens no listener in the host namespace
    con = sqlite3.connect(db)
    tid, status, reason = con.execute("SELECT id, status, reason FROM trials").fetchone()
    m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
    objs = {u: st for u, st in con.execute("SELECT url, status FROM objects WHERE trial_id = ?", (tid,))}
    con.close()
    assert status == "invalid" and "4 requests left the testbed and were blocked" in reason, reason
    for u in outside[:3]:
        assert u in reason, reason
    assert m["requests_blocked"] == 4, m
    # The page's own objects, from the testbed's origin (and the favicon the browser asks for itself,
    # which the recording lacks: 404); none of the blocked requests is an object.
    assert objs.items() >= {"https://www.shop.test/": 200, "https://www.shop.test/style.css": 200}.items(), objs
    assert all(u.startswith("https://www.shop.test/") for u in objs), objs
    print(reason)
