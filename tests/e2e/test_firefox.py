"""Firefox ESR over WebDriver BiDi, over a link of about 100 ms RTT: the
protocol asked for is the protocol of every response; one HTTP/1.1
connection per server loads the objects one after another (study A's
setting, which Chromium cannot do); HTTP/3 from a server without it is an
invalid load."""

from __future__ import annotations

from pathlib import Path

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.endpoints.options import ServerOptions
from satbench.endpoints.satbench_server import SatbenchServer as Server

from ..helpers import client_json, run_cli


def firefox(tb, url: str, protocol: str, connections: int = 6) -> dict:  # type: ignore[no-untyped-def]
    return client_json(tb, "browse", url, protocol, "--browser", "firefox", "--connections", str(connections))


@pytest.mark.parametrize("protocol, wire", [("h1", "http/1.1"), ("h2", "h2"), ("h3", "h3")])
def test_firefox_uses_the_protocol_asked_for(wire_100ms, protocol: str, wire: str) -> None:
    tb, srv, manifests = wire_100ms
    r = firefox(tb, "https://server.test/uniform-500k/", protocol)
    assert r["valid"], r["invalid_reason"]
    assert r["browser"].startswith("firefox")
    images = [x for x in r["resources"] if x["url"].endswith(".jpg")]
    assert len(images) == 8 and {x["protocol"] for x in r["resources"]} == {wire}
    assert r["ttfb_ms"] <= r["fcp_ms"] <= r["plt_ms"] and r["lcp_ms"] is not None
    assert r["ttfb_ms"] >= 100
    assert r["connections"] == 1 if protocol != "h1" else 2 <= r["connections"] <= 6
    served = {e["proto"] for e in srv.access_log() if e["type"] == "request" and e["path"].startswith("/uniform-500k/")}
    assert wire in served


def test_one_http1_connection_loads_objects_one_after_another(wire_100ms) -> None:
    tb, _, _ = wire_100ms
    r = firefox(tb, "https://server.test/uniform-500k/", "h1", connections=1)
    assert r["valid"], r["invalid_reason"]
    assert r["connections"] == 1
    images = sorted((x for x in r["resources"] if x["url"].endswith(".jpg")), key=lambda x: x["response_start_ms"])
    assert len(images) == 8
    for prev, nxt in zip(images, images[1:]):
        # The next response starts only after the previous one ended, a round trip later.
        assert nxt["response_start_ms"] >= prev["end_ms"] + 90, (prev, nxt)


def test_firefox_h3_from_a_server_without_it_is_invalid(generated_pages, tmp_path: Path) -> None:
    out, _ = generated_pages
    with Testbed(TestbedSpec(link=load_profile("wire", ["delay_ms=50"]), seed=1)) as tb:
        with Server(out, tmp_path, ServerOptions(h3=False), host=tb.server):
            r = firefox(tb, "https://server.test/uniform-100k/", "h3")
    assert r["valid"] is False and r["invalid_reason"]


def test_chromium_refuses_a_connection_limit() -> None:
    p = run_cli("browse", "https://server.test/", "--protocol", "h1", "--connections", "1")
    assert p.returncode == 2 and "--connections" in p.stderr and "firefox" in p.stderr


def test_an_experiment_trial_in_firefox_with_one_connection(tmp_path: Path) -> None:
    import sqlite3

    exp = tmp_path / "ff.toml"
    exp.write_text('[experiment]\nname = "ff"\nseed = 1\ntimeout_s = 60\n[factors]\nlink = "wire"\n'
                   '"link.delay_ms" = 25\nprotocol = "h1"\npage = "uniform-100k"\nclient = "firefox"\nconnections = 1\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(db)
    [(tid, status, reason, env)] = con.execute("SELECT id, status, reason, env FROM trials").fetchall()
    assert status == "valid", reason
    assert "Firefox" in env
    m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
    assert m["connections_opened"] == 1 and m["plt_ms"] > 8 * 50
    assert {r[0] for r in con.execute("SELECT protocol FROM objects WHERE trial_id = ?", (tid,))} == {"http/1.1"}
    con.close()
