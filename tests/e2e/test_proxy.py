"""An HTTP proxy at the gateway (``proxy = "nginx"``): clients speak HTTP/2
(or HTTP/1.1) to it over the satellite while the origin sees only HTTP/1.1
requests from it (its access log proves it); QUIC passes untouched; the
proxy's log counts every request; impossible combinations are refused. The
studies run over the LAN profile: what they assert is who spoke what to whom,
which the link's delay does not change (the gateway is the same namespace)."""

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

from ..helpers import SATBENCH, run_cli, satbench_leftovers


def test_clients_speak_h2_to_the_proxy_and_the_origin_sees_http11(tmp_path: Path) -> None:
    exp = tmp_path / "p.toml"
    exp.write_text('[experiment]\nname = "p"\nseed = 1\ntimeout_s = 90\norder = "sequential"\n'
                   'artefacts = ["server"]\n[factors]\nlink = "lan"\nprotocol = ["h2", "h3"]\n'
                   'page = "uniform-500k"\nclient = "loader"\nproxy = "nginx"\n')
    db = tmp_path / "p.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, factors, status, reason, artefacts, env FROM trials").fetchall()
        m = {tid: dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
             for tid, *_ in rows}
        protos = {tid: {r[0] for r in con.execute("SELECT protocol FROM objects WHERE trial_id = ?", (tid,))}
                  for tid, *_ in rows}
    finally:
        con.close()
    assert len(rows) == 2
    for tid, factors, status, reason, art, env in rows:
        f, x = json.loads(factors), m[tid]
        assert status == "valid", reason
        origin = [json.loads(line) for line in (Path(art) / "server" / "access.jsonl").read_text().splitlines()]
        origin_reqs = [r for r in origin if r.get("type") == "request"]
        if f["protocol"] == "h2":
            # The client's objects all came over HTTP/2 (from the proxy), the origin's requests all over HTTP/1.1.
            assert protos[tid] == {"h2"}
            assert x["proxy_requests"] == x["responses"] == x["proxy_h2_requests"] == len(origin_reqs)
            assert {r["proto"] for r in origin_reqs} == {"http/1.1"}, origin_reqs[:2]
            summary = json.loads(env)["path"]["proxy"]
            assert summary["by_protocol"] == {"HTTP/2.0": x["responses"]} and summary["upstream_statuses"] == ["200"]
            assert summary["upstreams"] == ["198.18.3.10:443"]
            # The proxy sends over the satellite with the trial's congestion control.
            assert all("congctl cubic" in r for r in summary["routes"]), summary["routes"]
        else:
            # QUIC is not redirected: HTTP/3 reaches the origin itself.
            assert protos[tid] == {"h3"} and x["proxy_requests"] == 0
            assert {r["proto"] for r in origin_reqs} == {"h3"}
    assert satbench_leftovers() == []


def test_chromium_gets_h2_from_the_proxy(tmp_path: Path) -> None:
    exp = tmp_path / "b.toml"
    exp.write_text('[experiment]\nname = "b"\nseed = 1\ntimeout_s = 90\nartefacts = ["server"]\n[factors]\n'
                   'link = "lan"\nprotocol = "h2"\npage = "uniform-500k"\nclient = "chromium"\nproxy = "nginx"\n')
    db = tmp_path / "b.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(db)
    try:
        [(tid, status, reason, art)] = con.execute("SELECT id, status, reason, artefacts FROM trials").fetchall()
        protos = [r[0] for r in con.execute("SELECT protocol FROM objects WHERE trial_id = ?", (tid,))]
    finally:
        con.close()
    assert status == "valid", reason
    # The browser's resources came over HTTP/2 (from the proxy); the origin saw HTTP/1.1 only.
    assert protos and set(protos) == {"h2"}, protos
    origin = [json.loads(line) for line in (Path(art) / "server" / "access.jsonl").read_text().splitlines()]
    assert {r["proto"] for r in origin if r.get("type") == "request"} == {"http/1.1"}
    # ... from the proxy's address (the gateway's, on the server LAN), never the client's.
    peers = {c["peer"].split(":")[0] for c in origin if c.get("type") == "connection"}
    assert peers == {"198.18.3.1"}, peers


def test_a_warm_cache_answers_every_request(tmp_path: Path) -> None:
    exp = tmp_path / "c.toml"
    exp.write_text('[experiment]\nname = "c"\nseed = 1\ntimeout_s = 90\norder = "sequential"\n'
                   'artefacts = ["server"]\n[factors]\nlink = "lan"\nprotocol = "h2"\npage = "uniform-500k"\n'
                   'client = "loader"\nproxy = [{ kind = "nginx", cache = "cold" }, { kind = "gateway", cache = "warm" }]\n')
    db = tmp_path / "c.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, factors, status, reason, env FROM trials").fetchall()
        m = {tid: dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
             for tid, *_ in rows}
    finally:
        con.close()
    got = {}
    for tid, _factors, status, reason, env in rows:
        assert status == "valid", reason
        s = json.loads(env)["path"]["proxy"]
        got[s["cache"]] = (m[tid], s)
    (cold, cs), (warm, ws) = got["cold"], got["warm"]
    assert cold["proxy_cache_hits"] == 0 and cs["warmed"] == 0
    # Warm: the page was fetched through the proxy before the trial; every request of the load is a hit.
    assert ws["warmed"] == warm["responses"] == warm["proxy_requests"] == warm["proxy_cache_hits"]
    assert cold["proxy_requests"] == cold["responses"]


def test_nghttpx_fetches_over_h2_or_h1_from_every_shards_origin(tmp_path: Path) -> None:
    """nghttpx at the gateway: the clients' HTTP/2 ends there; each origin
    (the HTML's host and two shards, each its own server) sees the requests
    for its names only, from the gateway's address, over the upstream
    protocol the trial set: HTTP/2 on one connection per origin, or HTTP/1.1."""
    exp = tmp_path / "n.toml"
    exp.write_text('[experiment]\nname = "n"\nseed = 1\ntimeout_s = 90\norder = "sequential"\n'
                   'artefacts = ["server"]\n[factors]\nlink = "lan"\nprotocol = "h2"\npage = "flags"\n'
                   'client = "loader"\nshards = 2\n'
                   'proxy = [{ kind = "nghttpx", upstream = "h2" }, { kind = "nghttpx", upstream = "h1" }]\n')
    db = tmp_path / "n.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, factors, status, reason, artefacts, env FROM trials").fetchall()
        m = {tid: dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
             for tid, *_ in rows}
    finally:
        con.close()
    assert len(rows) == 2
    for tid, factors, status, reason, art, env in rows:
        assert status == "valid", reason
        upstream = json.loads(factors)["proxy"]["upstream"]
        x, summary = m[tid], json.loads(env)["path"]["proxy"]
        assert summary["kind"] == "nghttpx" and summary["upstream"] == upstream
        assert x["proxy_requests"] == x["proxy_h2_requests"] == x["responses"] == 201
        served = 0
        for logs, names in ((Path(art) / "server", {"server.test", "s1.test"}),
                            (Path(art) / "server" / "s2", {"s2.test"})):
            lines = [json.loads(line) for line in (logs / "access.jsonl").read_text().splitlines()]
            reqs = [r for r in lines if r.get("type") == "request"]
            conns = [c for c in lines if c.get("type") == "connection"]
            assert {r["authority"].split(":")[0] for r in reqs} == names
            assert {c["peer"].split(":")[0] for c in conns} == {"198.18.3.1"}  # the gateway, not the client
            assert {r["proto"] for r in reqs} == {"h2" if upstream == "h2" else "http/1.1"}
            if upstream == "h2":  # one multiplexed connection per origin name
                assert len({r["conn"] for r in reqs}) == len(names), reqs[:3]
            served += len(reqs)
        assert served == 201
    assert satbench_leftovers() == []


def test_impossible_proxy_combinations_are_refused(tmp_path: Path) -> None:
    exp = tmp_path / "bad.toml"
    for rest, why in (('proxy = "squid"', "kind must be nginx"),
                      ('proxy = { kind = "nginx", upstream = "h2" }', "upstream must be h1"),
                      ('proxy = { kind = "nghttpx", upstream = "h3" }', "upstream must be h1 or h2"),
                      ('proxy = { kind = "nghttpx", cache = "warm" }', "nghttpx has no cache"),
                      ('pep = "gateway"\nproxy = "nginx"', "PEP at the gateway"),
                      ('tunnel = "wireguard"\nproxy = "nginx"', "VPN tunnel")):
        exp.write_text('[experiment]\nname = "bad"\n[factors]\nlink = "geo"\nprotocol = "h2"\npage = "blank"\n'
                       'client = "loader"\n' + rest + "\n")
        line = 1 + exp.read_text().splitlines().index(next(x for x in exp.read_text().splitlines()
                                                           if x.startswith("proxy")))
        p = run_cli("plan", str(exp))
        assert p.returncode == 2, p.stdout + p.stderr
        [msg] = p.stderr.strip().splitlines()
        assert re.search(rf"{re.escape(str(exp))}:{line}: (factors\.)?proxy: ", msg) and why in msg, msg
    # satbench shell refuses the same, in one line, before building anything.
    www = tmp_path / "www"
    www.mkdir()
    for args, msg in ((["--proxy", "nginx"], "--proxy needs --serve"),
                      (["--serve", str(www), "--proxy-cache", "cold"], "--proxy-upstream and --proxy-cache need --proxy"),
                      (["--serve", str(www), "--proxy", "nginx", "--proxy-upstream", "h2"], "--proxy: upstream must be h1"),
                      (["--serve", str(www), "--proxy", "nginx", "--pep", "gateway"], "--proxy: a PEP at the gateway")):
        p = run_cli("shell", "--link", "wire", *args, "--", "true")
        assert p.returncode == 2 and p.stderr.startswith(f"satbench: {msg}"), (args, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def _proxies() -> list[str]:
    return subprocess.run(["pgrep", "-f", "proxy-nginx.conf"], capture_output=True, text=True).stdout.split()


@pytest.mark.serial
def test_sigkill_of_the_owner_leaves_no_proxy(tmp_path: Path) -> None:
    before = _proxies()
    (tmp_path / "www").mkdir()
    p = subprocess.Popen([*SATBENCH, "shell", "--link", "wire", "--serve", str(tmp_path / "www"), "--proxy", "nginx",
                          "-q", "--", "sleep", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    deadline = time.monotonic() + 30
    while len(_proxies()) < len(before) + 1:  # nginx's master (its worker's title does not name the file)
        assert time.monotonic() < deadline and p.poll() is None, p.stderr.read() if p.stderr else ""
        time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert run_cli("cleanup").returncode == 0
    assert satbench_leftovers() == []
    assert _proxies() == before
