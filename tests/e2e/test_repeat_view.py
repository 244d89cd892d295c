"""First and repeat views over GEO in Chromium: the repeat view loads the page
again in the same browser after its connections were closed, so what a
returning visitor keeps acts. Over HTTP/3 with quiche (which answers 0-RTT
requests at once) the repeat view's first byte comes at least one round trip
sooner and the server says the session was resumed and the request came as
early data; over HTTP/2 the server says the TLS session was resumed; with
the server's files cacheable, a warm repeat view fetches almost nothing and
a cold one all again; the repeat view's frames are its own. Options that act only on a returning client may be
varied once every trial is a repeat view, and are refused otherwise."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from ..helpers import PARALLEL, run_cli

RTT_MS = 530


def _trials(db: Path) -> list[dict]:
    con = sqlite3.connect(db)
    out = []
    for tid, factors, status, reason in con.execute("SELECT id, factors, status, reason FROM trials ORDER BY id"):
        m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
        out.append({"f": json.loads(factors), "status": status, "reason": reason, "m": m})
    con.close()
    return out


@pytest.mark.serial
def test_a_repeat_view_resumes_sends_early_and_uses_its_cache(tmp_path: Path) -> None:
    exp = tmp_path / "repeat.toml"
    exp.write_text(
        '[experiment]\nname = "repeat"\nseed = 1\ntimeout_s = 90\nartefacts = ["frames"]\n'
        '[factors]\nlink = "geo"\nclient = "chromium"\n'
        'page = "uniform-100k"\nview = "repeat"\ncc = "bbr"\n'
        '[[trial]]\nprotocol = "h3"\nquic_stack = "quiche"\n'
        '[[trial]]\nprotocol = "h3"\nquic_stack = "quinn"\n'
        '[[trial]]\nprotocol = "h2"\n"server.cache_max_age" = 3600\n'
        '[[trial]]\nprotocol = "h2"\n"server.cache_max_age" = 3600\ncache = "cold"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ts = _trials(db)
    assert len(ts) == 4 and all(t["status"] == "valid" for t in ts), [t["reason"] for t in ts]
    by = {(t["f"]["protocol"], t["f"].get("quic_stack", "quinn"), t["f"].get("cache", "warm")): t["m"] for t in ts}
    quiche = by[("h3", "quiche", "warm")]
    # 0-RTT: the request goes in the first flight and quiche answers it then.
    assert quiche["server_resumed_connections"] >= 1 and quiche["server_early_data_requests"] >= 1, quiche
    assert quiche["ttfb_ms"] <= quiche["first_ttfb_ms"] - 0.9 * RTT_MS, quiche
    # quinn takes the 0-RTT request but answers once the handshake is done: no round trip saved.
    quinn = by[("h3", "quinn", "warm")]
    assert quinn["ttfb_ms"] > quinn["first_ttfb_ms"] - 0.5 * RTT_MS, quinn
    # TLS 1.3 over TCP: the session resumed (Chromium sends no early data over TCP, nor a Fast Open SYN),
    # so the first byte comes no sooner.
    warm, cold = by[("h2", "quinn", "warm")], by[("h2", "quinn", "cold")]
    assert cold["server_resumed_connections"] >= 1, cold
    assert cold["ttfb_ms"] > cold["first_ttfb_ms"] - 0.5 * RTT_MS, cold
    # The files were cacheable for an hour: the warm repeat view takes them all from its cache and
    # opens no connection; the cold one fetches them all again.
    # (Chromium reports the document's cache hit; its images, from its memory cache, it does not.)
    assert warm["responses_cached"] >= 1 and warm["bytes_received"] < 0.1 * warm["first_bytes_received"], warm
    assert warm["plt_ms"] < RTT_MS and warm["lower_bound_ms"] == 0, warm
    assert cold["responses_cached"] == 0 and cold["bytes_received"] > 0.9 * cold["first_bytes_received"], cold
    for m in by.values():
        assert m["first_plt_ms"] > 0 and m["plt_ms"] > 0
    # The frames are the repeat view's: from the warm cache the screen is complete within a round
    # trip (a first view's would take several); fetched again, it is not.
    assert warm["visually_complete_ms"] < RTT_MS and warm["speed_index_ms"] <= warm["visually_complete_ms"], warm
    assert warm["visual_frames"] >= 2, warm  # the blank page before the repeat, then the page
    assert cold["visually_complete_ms"] > RTT_MS and quiche["first_visual_change_ms"] > 0, (cold, quiche)


def test_options_for_a_returning_client_need_repeat_views(tmp_path: Path) -> None:
    exp = tmp_path / "bad.toml"
    exp.write_text('[experiment]\nname = "bad"\n[factors]\nlink = "geo"\nclient = "chromium"\nprotocol = "h2"\n'
                   'page = "uniform-100k"\n"server.resumption" = [true, false]\n')
    p = run_cli("plan", str(exp))
    assert p.returncode == 2 and "view = \"repeat\"" in p.stderr, p.stderr
    exp.write_text(exp.read_text() + 'view = "repeat"\n')
    assert run_cli("plan", str(exp)).returncode == 0
    exp.write_text('[experiment]\nname = "bad"\n[factors]\nlink = "geo"\nclient = "firefox"\nprotocol = "h2"\n'
                   'page = "uniform-100k"\nview = "repeat"\n')
    p = run_cli("plan", str(exp))
    assert p.returncode == 2 and "bad.toml:8: view:" in p.stderr and "Chromium" in p.stderr, p.stderr


def test_the_loaders_repeat_view_resumes_and_saves_a_round_trip_with_fast_open_or_0rtt(tmp_path: Path) -> None:
    # The loader's repeat view over HTTP/2 (study B's light clients, returning): TLS resumed either
    # way; with TCP Fast Open on both ends its first flight rides in the SYN (the cookie came with
    # the first view), so its first byte comes at least one round trip sooner. Over HTTP/3 (quiche
    # both ends) its requests go as 0-RTT data.
    exp = tmp_path / "loader.toml"
    exp.write_text('[experiment]\nname = "loader"\nseed = 1\ntimeout_s = 90\n[factors]\nlink = "geo"\n'
                   'client = "loader"\nprotocol = "h2"\npage = "uniform-100k"\nview = "repeat"\n'
                   '"server.tfo" = [false, true]\n'
                   '[[trial]]\nprotocol = "h3"\nquic_stack = "quiche"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), *PARALLEL, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ts = _trials(db)
    assert len(ts) == 3 and all(t["status"] == "valid" for t in ts), [t["reason"] for t in ts]
    # HTTP/3 over quiche: the loader kept its session ticket and sent its requests as 0-RTT data.
    (h3,) = [t["m"] for t in ts if t["f"]["protocol"] == "h3"]
    assert h3["server_resumed_connections"] >= 1 and h3["server_early_data_requests"] >= 1, h3
    # ...and its own connection records say so too.
    assert h3["client_resumed_connections"] >= 1 and h3["client_early_data_connections"] >= 1, h3
    assert h3["ttfb_ms"] <= h3["first_ttfb_ms"] - 0.9 * RTT_MS, h3
    by = {bool(t["f"].get("server.tfo")): t["m"] for t in ts if t["f"]["protocol"] == "h2"}
    for tfo, m in by.items():
        assert m["server_resumed_connections"] >= 1, (tfo, m)
        # The loader's side of it: every connection of the repeat resumed its TLS session, and its
        # SYNs carried data exactly when Fast Open was on.
        assert m["client_resumed_connections"] == m["connections_opened"] >= 1, (tfo, m)
        assert m["client_fast_open_connections"] == (m["connections_opened"] if tfo else 0), (tfo, m)
        assert m["first_plt_ms"] > 0 and m["first_ttfb_ms"] > 0
    assert by[True]["server_tfo_connections"] >= 1, by[True]
    assert by[True]["ttfb_ms"] <= by[True]["first_ttfb_ms"] - 0.9 * RTT_MS, by[True]
    assert by[False]["ttfb_ms"] > by[False]["first_ttfb_ms"] - 0.5 * RTT_MS, by[False]
    assert by[True]["lower_bound_ms"] <= by[True]["plt_ms"]
