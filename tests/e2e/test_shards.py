"""Sharded pages (``shards = K``): the page's objects spread over s1.test ...
sK.test, each its own server host and address. Every shard's origin logs
the connections and requests it served; the trial records the connections
per origin, by transport, and whether any carried several origins
(coalescing); impossible combinations are refused."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

from satbench.endpoints import pages

from ..helpers import run_cli, satbench_leftovers


def _trials(db: Path) -> list[tuple[dict[str, Any], str, str | None, dict[str, Any], dict[str, Any], str]]:
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, factors, status, reason, server_summary, artefacts FROM trials").fetchall()
        return [(json.loads(f), s, r, json.loads(ss or "{}"),
                 dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall()), art)
                for tid, f, s, r, ss, art in rows]
    finally:
        con.close()


def _access(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_sharded_page_opens_connections_to_every_shard(tmp_path: Path) -> None:
    exp = tmp_path / "s.toml"
    exp.write_text('[experiment]\nname = "s"\nseed = 1\ntimeout_s = 120\norder = "sequential"\n'
                   'artefacts = ["server"]\n[factors]\nlink = "geo"\nprotocol = ["h1", "h2", "h3"]\n'
                   'page = "flags"\nclient = "loader"\nshards = 4\n')
    db = tmp_path / "s.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = _trials(db)
    assert len(rows) == 3
    for f, status, reason, summary, m, art in rows:
        assert status == "valid", reason
        transport = "quic" if f["protocol"] == "h3" else "tcp"
        origins = summary["origins"]
        # The HTML's host and every shard: each served its own requests over connections of the trial's transport.
        assert sorted(origins) == ["s1.test", "s2.test", "s3.test", "s4.test", "server.test"], origins
        assert all(o[transport] >= 1 and o["requests"] >= 1 for o in origins.values()), origins
        assert sum(o["requests"] for o in origins.values()) == 201  # the HTML and 200 flags
        # The loader keeps one pool per origin: nothing coalesced, and the counts add up.
        assert m["coalesced_connections"] == 0 and m["origins_requested"] == 5
        assert m["server_connections"] == m[f"server_connections_{transport}"] == sum(
            o[transport] for o in origins.values())
        if f["protocol"] == "h1":  # at most 6 connections per origin
            assert all(o["tcp"] <= 6 for o in origins.values()) and m["server_connections"] > 5
        else:  # one multiplexed connection per origin
            assert m["server_connections"] == 5
        # Each shard is its own server, at its own address, whose log holds only its own names.
        for j in (2, 3, 4):
            reqs = [r for r in _access(Path(art) / "server" / f"s{j}" / "access.jsonl") if r.get("type") == "request"]
            assert reqs and {r["authority"].split(":")[0] for r in reqs} == {f"s{j}.test"}
        # The page's metrics know the sharded index and its objects.
        assert m["last_object_ms"] is not None and m["last_object_ms"] >= m["ttfb_ms"]
    assert satbench_leftovers() == []


def test_chromium_opens_one_used_connection_per_shard(tmp_path: Path) -> None:
    """What Chromium does with a page over four shards, recorded: every
    object over the trial's protocol (HTTP/3 forced on every shard), each
    origin's requests on one connection, and, over HTTP/2, spare TCP
    connections opened before it knew the origins speak HTTP/2 and closed
    unused. Chromium could pool s1.test onto server.test's connection (same
    address, one certificate for both) but did not: the trial records 0
    coalesced connections, and the test says so."""
    exp = tmp_path / "c.toml"
    exp.write_text('[experiment]\nname = "c"\nseed = 1\ntimeout_s = 120\norder = "sequential"\n'
                   'artefacts = ["server"]\n[factors]\nlink = "geo"\nprotocol = ["h2", "h3"]\n'
                   'page = "flags"\nclient = "chromium"\nshards = 4\n')
    db = tmp_path / "c.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = _trials(db)
    assert len(rows) == 2
    for f, status, reason, summary, m, _art in rows:
        assert status == "valid", reason
        origins = summary["origins"]
        transport = "quic" if f["protocol"] == "h3" else "tcp"
        assert sorted(origins) == ["s1.test", "s2.test", "s3.test", "s4.test", "server.test"], origins
        assert all(o[transport] == 1 for o in origins.values()), origins
        assert m["coalesced_connections"] == 0, summary
        # Every connection either carried requests (one per origin) or none.
        assert m["server_connections"] == 5 + m["unused_connections"], summary
        if f["protocol"] == "h3":
            assert m["unused_connections"] == 0 and m["server_connections_quic"] == 5


def test_sharding_that_cannot_be_done_is_refused(tmp_path: Path) -> None:
    exp = tmp_path / "bad.toml"
    for rest, why in (('page = "blank"\nclient = "loader"\nshards = 4', "no objects"),
                      ('page = "flags"\nclient = "curl"\nshards = 4', "loads its objects"),
                      ('page = "flags"\nclient = "loader"\nshards = 0', "whole number from 1 to 32"),
                      ('page = "flags"\nclient = "loader"\nserver = "caddy"\nshards = 2', "satbench servers")):
        exp.write_text('[experiment]\nname = "bad"\n[factors]\nlink = "geo"\nprotocol = "h2"\n' + rest + "\n")
        line = 1 + exp.read_text().splitlines().index("shards" + rest.split("shards", 1)[1])
        p = run_cli("plan", str(exp))
        assert p.returncode == 2, p.stdout + p.stderr
        [msg] = p.stderr.strip().splitlines()
        assert re.search(rf"{re.escape(str(exp))}:{line}: (factors\.)?shards: ", msg) and why in msg, msg


def test_the_shell_serves_a_sharded_page_from_every_shard(tmp_path: Path) -> None:
    """``satbench shell --serve DIR --shards 3``: three satbench servers, the
    sharded index written beside each page's, and a load from the shell
    reaching every shard (each server's log holds its own name only)."""
    from satbench.endpoints import ca
    from satbench.endpoints.loader import loader_binary

    www = tmp_path / "www"
    pages.prepare(www, ["flags"])
    logs, out = tmp_path / "logs", tmp_path / "shell.json"
    p = run_cli("shell", "--link", "wire", "--serve", str(www), "--shards", "3", "--server-logs", str(logs),
                "--json-out", str(out), "-q", "--", str(loader_binary()),
                "https://server.test/flags/index-shards3.html", "--protocol", "h2", "--cacert", str(ca.ensure().cert),
                timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    [client] = json.loads(p.stdout)["clients"]
    assert client["valid"] and client["objects_n"] == 201, client.get("invalid_reason")
    assert (www / "flags" / "index-shards3.html").exists()
    report = json.loads(out.read_text())
    assert [s["host"] for s in report["shards"]] == ["s2.test", "s3.test"]
    for d, names in ((logs, {"server.test", "s1.test"}), (logs / "s2", {"s2.test"}), (logs / "s3", {"s3.test"})):
        reqs = [r for r in _access(d / "access.jsonl") if r.get("type") == "request"]
        assert {r["authority"].split(":")[0] for r in reqs} == names
    p = run_cli("shell", "--link", "wire", "--shards", "2", "--", "true")
    assert p.returncode == 2 and p.stderr.strip() == "satbench: --shards needs --serve (the shards are satbench servers)"
    assert satbench_leftovers() == []
