"""UDP blocked or policed at the gateway, as some satellite and enterprise networks do, with a
Chromium that comes to HTTP/3 as a returning browser does (Alt-Svc from its first view): with UDP
open its repeat view speaks HTTP/3; with UDP blocked it falls back to TCP, every request's protocol
stored, the trial valid and labelled as fallen back (never counted as HTTP/3), and the gateway counts
what it dropped; with UDP policed the handshake passes and the browser keeps QUIC."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from ..helpers import run_cli


def test_a_browser_falls_back_to_tcp_when_udp_is_blocked_and_says_so(tmp_path: Path) -> None:
    exp = tmp_path / "udp.toml"
    exp.write_text('[experiment]\nname = "udp"\nseed = 1\ntimeout_s = 90\n'
                   '[factors]\nlink = "wire"\n"link.delay_ms" = 20\nclient = "chromium"\nprotocol = "h3"\n'
                   'page = "shop"\nh3_discovery = "alt-svc"\nview = "repeat"\ncache = "cold"\n'
                   'udp = ["open", "blocked", "policed:4000"]\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    con = sqlite3.connect(db)
    got = {}
    for tid, factors, status, reason in con.execute("SELECT id, factors, status, reason FROM trials"):
        udp = json.loads(factors)["udp"]
        assert status == "valid", (udp, reason)
        m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
        protos = {pr for (pr,) in con.execute("SELECT DISTINCT protocol FROM objects WHERE trial_id = ?", (tid,))}
        got[udp] = (m, protos)
    con.close()
    m, protos = got["open"]
    assert m["h3_share"] > 0.5 and m["fell_back"] == 0 and "udp_dropped_packets" not in m, (m, protos)
    m, protos = got["blocked"]
    assert m["h3_share"] == 0 and m["fell_back"] == 1 and protos == {"h2"}, (m, protos)
    assert m["udp_dropped_packets"] > 0, m  # QUIC was tried, and the gateway dropped it
    m, _ = got["policed:4000"]
    # Policed, not blocked: the QUIC handshake passes, so the browser keeps QUIC and its losses.
    assert m["udp_dropped_packets"] > 0 and m["h3_share"] > 0.5 and m["fell_back"] == 0, m
    print({k: (v[0]["plt_ms"], v[0]["h3_share"], v[0].get("udp_dropped_packets")) for k, v in got.items()})
