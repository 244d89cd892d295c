"""Real-time web trials (``realtime = poll | sse | ws``) in real browsers
over an emulated GEO link against satbench-server's /rt/ endpoints: every
message arrives exactly once, in order, never sooner than the path's
one-way propagation delay; each mechanism is what it says in the server's
own log; Nagle's algorithm on the server delays small messages sent back to
back by a round trip, and the stored trial says which was in effect."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from satbench.results.report import write_report

from ..helpers import PARALLEL, run_cli, satbench_leftovers

GEO_ONE_WAY_MS = 265.0  # the geo profile: 530 ms base RTT, symmetric


def _run(tmp_path: Path, name: str, factors: str, timeout: int = 600,
         parallel: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    exp = tmp_path / f"{name}.toml"
    exp.write_text(f'[experiment]\nname = "{name}"\nseed = 1\ntimeout_s = 120\norder = "sequential"\n'
                   f'artefacts = ["server"]\n[factors]\nlink = "geo"\npage = "realtime"\n{factors}')
    db = tmp_path / f"{name}.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), *parallel, timeout=timeout)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(db)
    try:
        out = []
        for tid, f, status, reason, env, art in con.execute(
                "SELECT id, factors, status, reason, env, artefacts FROM trials ORDER BY id"):
            out.append({"factors": json.loads(f), "status": status, "reason": reason, "env": json.loads(env),
                        "art": Path(art), "db": db, "id": tid,
                        "m": dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,))),
                        "messages": con.execute("SELECT dir, seq, sent_unix_ms, recv_unix_ms, latency_ms FROM "
                                                "messages WHERE trial_id = ? ORDER BY dir, seq", (tid,)).fetchall()})
        return out
    finally:
        con.close()


def _log(art: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (art / "server" / "access.jsonl").read_text().splitlines() if x.strip()]


def test_every_mechanism_delivers_each_message_once_in_order_and_no_sooner_than_physics(tmp_path: Path) -> None:
    trials = _run(tmp_path, "rt", 'client = "chromium"\nprotocol = ["h1", "h2"]\nrealtime = ["poll", "sse", "ws"]\n'
                                  'scenario = "chat"\nmessages = 6\ninterval_ms = 300\n')
    assert len(trials) == 6
    for t in trials:
        f, m, msgs = t["factors"], t["m"], t["messages"]
        assert t["status"] == "valid", (f["protocol"], f["realtime"], t["reason"])
        # Six each way, each received once (a second copy or a gap would have made the trial invalid).
        assert [(d, s) for d, s, *_ in msgs] == [("down", k) for k in range(6)] + [("up", k) for k in range(6)]
        assert m["rt_lost"] == 0 and m["rt_messages"] == 12
        # Physics: no message beats the one-way propagation delay (265 ms each way on this link).
        for d, s, sent, recv, lat in msgs:
            assert lat == recv - sent and lat >= GEO_ONE_WAY_MS - 1.0, (f["realtime"], d, s, lat)
        down = [recv for d, _s, _sent, recv, _lat in msgs if d == "down"]
        assert down == sorted(down)  # in order
        assert m["rt_latency_median_rtt"] >= 0.5 - 0.01
        log = _log(t["art"])
        session = t["env"]["realtime"]["session"]
        reqs = [e for e in log if e.get("type") == "request" and e.get("session") == session]
        kinds = [e["realtime"] for e in reqs]
        # Each mechanism is what it says, in the server's own log.
        if f["realtime"] == "poll":
            assert kinds.count("poll") >= 2 and kinds.count("send") == 6
            # Long polling pays for its polls: a message due while no poll is held waits for the next.
            assert m["rt_latency_down_median_ms"] > m["rt_latency_up_median_ms"] + 0.2 * 530
        elif f["realtime"] == "sse":
            [sse] = [e for e in reqs if e["realtime"] == "sse"]
            assert kinds.count("send") == 6 and sse["status"] == 200
            downs = [e for e in log if e.get("type") == "message" and e["dir"] == "down"]
            assert {e["conn"] for e in downs} == {sse["conn"]}  # every message on the one long response
        else:
            [ws] = [e for e in reqs if e["realtime"] == "ws"]
            if f["protocol"] == "h2":  # RFC 8441: a stream of the page's own HTTP/2 connection, one round trip
                assert ws["method"] == "CONNECT" and ws["websocket"] == "extended-connect" and ws["proto"] == "h2"
                assert m["rt_setup_ms"] < 2 * 530
            else:  # RFC 6455: a connection of its own (TCP, TLS), then the Upgrade
                assert ws["method"] == "GET" and ws["websocket"] == "upgrade" and ws["status"] == 101
                assert m["rt_setup_ms"] > 3 * 530 - 5
                # The upgraded connection stays open (and sampled) until its WebSocket is done.
                [c] = [e for e in log if e.get("type") == "connection" and e["conn"] == ws["conn"]]
                last = max(e["t_write_unix_ns"] for e in log if e.get("type") == "message" and e["dir"] == "down")
                assert c["t_close_unix_ns"] > last
            assert "send" not in kinds
    assert satbench_leftovers() == []


@pytest.mark.serial
def test_nagle_delays_small_server_messages_sent_back_to_back(tmp_path: Path) -> None:
    trials = _run(tmp_path, "nagle", 'client = "chromium"\nprotocol = "h1"\nrealtime = "sse"\nscenario = "server"\n'
                                     'messages = 20\ninterval_ms = 0\nnodelay = [true, false]\n')
    by = {t["factors"]["nodelay"]: t for t in trials}
    for nodelay, t in by.items():
        assert t["status"] == "valid", t["reason"]
        assert t["m"]["server_nodelay"] == float(nodelay)  # read back from the server's sockets
        conns = [e for e in _log(t["art"]) if e.get("type") == "connection"]
        assert {e["nodelay"] for e in conns} == {nodelay}
    on, off = by[True]["m"], by[False]["m"]
    # With TCP_NODELAY every message goes at once: one one-way delay each (medians: one stall of a busy
    # machine moves one message, not the median of twenty).
    assert 265 <= on["rt_latency_median_ms"] < 265 + 100
    # With Nagle, the burst waits behind the stream's first small segment for its ACK: a round trip more.
    assert off["rt_latency_median_ms"] > on["rt_latency_median_ms"] + 0.8 * 530, (on, off)
    # The report keeps Nagle on and off apart (the factor, not the server's read-back metric, names them).
    html = write_report(trials[0]["db"], tmp_path / "report").read_text()
    section = html[html.index("<h3>Real-time web</h3>"):]
    for nodelay in ("True", "False"):
        assert f"nodelay={nodelay}" in section[:section.index("</table>")], nodelay


def test_a_quiet_event_stream_outlives_the_idle_timeout(tmp_path: Path) -> None:
    """Client updates over SSE and HTTP/1.1 for twice the server's idle timeout (set to 6 s here; 30 s
    by default): the event stream carries nothing while the POSTs go on other connections, yet it is
    not closed as idle (it would come back as a second event-stream request)."""
    [t] = _run(tmp_path, "quiet", 'client = "loader"\nprotocol = "h1"\nrealtime = "sse"\nscenario = "client"\n'
                                  'messages = 4\ninterval_ms = 3000\n"server.idle_timeout_s" = 6\n')
    assert t["status"] == "valid", t["reason"]
    log = _log(t["art"])
    [sse] = [e for e in log if e.get("type") == "request" and e.get("realtime") == "sse"]
    [c] = [e for e in log if e.get("type") == "connection" and e["conn"] == sse["conn"]]
    assert (c["t_close_unix_ns"] - c["t_open_unix_ns"]) / 1e9 > 9 and c["error"] != "idle timeout", c
    assert len([e for e in log if e.get("type") == "message" and e["dir"] == "up"]) == 4


def test_posts_outlive_the_servers_idle_timeout_on_kept_alive_connections(tmp_path: Path) -> None:
    """A room over SSE and HTTP/1.1 whose members post every 2 s to a server that closes a connection
    idle for 1 s: each kept-alive POST connection is closed between messages (its FIN a one-way delay
    later), and the loader sends the next on a new one, as browsers do, instead of failing the member
    ("channel closed"). Study C's full room, 100 messages at a 30 s idle timeout, lost members so."""
    [t] = _run(tmp_path, "idle", 'client = "loader"\nclients = 3\nprotocol = "h1"\nrealtime = "sse"\n'
                                 'scenario = "room"\nmessages = 5\ninterval_ms = 2000\n'
                                 '"server.idle_timeout_s" = 1\n')
    assert t["status"] == "valid", t["reason"]
    assert t["m"]["rt_lost"] == 0 and t["m"]["rt_duplicated"] == 0
    log = _log(t["art"])
    assert len([e for e in log if e.get("type") == "message" and e["dir"] == "up"]) == 15
    # The server did close idle POST connections: the loader came back on new ones.
    closed = [e for e in log if e.get("type") == "connection" and e.get("error") in
              ("idle timeout", "read header from client timeout")]
    assert len(closed) >= 3, [e.get("error") for e in log if e.get("type") == "connection"]


def test_the_loader_runs_many_users_in_a_chat_room(tmp_path: Path) -> None:
    """Five light clients of one loader in one room, per mechanism and protocol: every member's messages
    reach every other member once and in order, never sooner than up and down the satellite, through the
    server's relay (its log shows one relay per receiver)."""
    trials = _run(tmp_path, "room", 'client = "loader"\nclients = 5\nprotocol = ["h1", "h2"]\n'
                                    'realtime = ["poll", "sse", "ws"]\nscenario = "room"\nmessages = 4\n'
                                    'interval_ms = 400\narrivals = "poisson"\n', parallel=PARALLEL)
    assert len(trials) == 6
    for t in trials:
        f, m = t["factors"], t["m"]
        assert t["status"] == "valid", (f["protocol"], f["realtime"], t["reason"])
        assert m["rt_clients"] == 5 and m["rt_lost"] == 0 and m["rt_duplicated"] == 0
        con = sqlite3.connect(t["db"])
        try:
            rows = con.execute("SELECT dir, sender, receiver, seq, latency_ms, latency_rtt FROM messages "
                               "WHERE trial_id = ?", (t["id"],)).fetchall()
        finally:
            con.close()
        relays = [r for r in rows if r[0] == "relay"]
        # 4 messages of each of 5 members, each to the 4 others; every one went up and down the satellite.
        assert len(relays) == 80 and len([r for r in rows if r[0] == "up"]) == 20
        assert {(s, r) for _, s, r, *_ in relays} == {(s, r) for s in range(5) for r in range(5) if s != r}
        assert min(lat for *_, lat, _ in relays) >= 2 * GEO_ONE_WAY_MS - 1.0
        assert all(rtt == pytest.approx(lat / 530) for *_, lat, rtt in relays)
        assert m["rt_latency_relay_median_rtt"] >= 1.0 - 0.01
        log = _log(t["art"])
        relayed = [e for e in log if e.get("type") == "message" and e["dir"] == "relay"]
        assert len(relayed) == 80 and all(e["from"] != e["session"] for e in relayed)
        sessions = {e["session"] for e in log if e.get("type") == "request" and e.get("realtime") == f["realtime"]}
        assert len(sessions) == 5, sessions
        if f["realtime"] == "ws":
            ws = [e for e in log if e.get("type") == "request" and e.get("realtime") == "ws"]
            assert {e["websocket"] for e in ws} == {"extended-connect" if f["protocol"] == "h2" else "upgrade"}
    html = write_report(trials[0]["db"], tmp_path / "report").read_text()
    assert html.count("client to client (room)") == 6 and html.count("client to server") == 6
    assert satbench_leftovers() == []


def test_webtransport_over_http3_in_both_browsers(tmp_path: Path) -> None:
    """realtime = "wt": a WebTransport session (extended CONNECT over HTTP/3, satbench-server's quinn
    stack) and one bidirectional stream carrying the chat both ways, in Chromium and Firefox."""
    trials = _run(tmp_path, "wt", 'client = ["chromium", "firefox"]\nprotocol = "h3"\nquic_stack = "quinn"\n'
                                  'realtime = "wt"\nscenario = "chat"\nmessages = 10\ninterval_ms = 300\n')
    assert len(trials) == 2
    for t in trials:
        m, msgs = t["m"], t["messages"]
        assert t["status"] == "valid", (t["factors"]["client"], t["reason"])
        assert [(d, s) for d, s, *_ in msgs] == [("down", k) for k in range(10)] + [("up", k) for k in range(10)]
        assert min(lat for *_, lat in msgs) >= GEO_ONE_WAY_MS - 1.0
        assert t["env"]["realtime"]["webtransport"] == ["extended-connect"]
        log = _log(t["art"])
        [wt] = [e for e in log if e.get("type") == "request" and e.get("realtime") == "wt"]
        assert (wt["method"], wt["proto"], wt["status"]) == ("CONNECT", "h3", 200)
        # Every message on the session's connection, over QUIC; none as a POST.
        msg_conns = {e["conn"] for e in log if e.get("type") == "message"}
        assert msg_conns == {wt["conn"]}
        [conn] = [e for e in log if e.get("type") == "connection" and e["conn"] == wt["conn"]]
        assert conn["transport"] == "quic" and conn["quic_stack"] == "quinn"
        assert not [e for e in log if e.get("realtime") == "send"]
        # A session costs a QUIC handshake and the CONNECT's round trip at least.
        assert m["rt_setup_ms"] >= 2 * 530 - 5
    assert satbench_leftovers() == []


def test_firefox_runs_the_scenario_too(tmp_path: Path) -> None:
    [t] = _run(tmp_path, "ff", 'client = "firefox"\nprotocol = "h2"\nrealtime = "ws"\nscenario = "server"\n'
                               'messages = 5\ninterval_ms = 200\n')
    assert t["status"] == "valid", t["reason"]
    assert t["env"]["realtime"]["websocket"] == ["extended-connect"]
    assert [(d, s) for d, s, *_ in t["messages"]] == [("down", k) for k in range(5)]
    assert min(lat for *_, lat in t["messages"]) >= GEO_ONE_WAY_MS - 1.0
    # The page's clock is not coarsened to whole milliseconds (Firefox's default).
    assert t["env"]["realtime"]["clock_step_ms"] < 1.0


def test_real_time_factors_that_cannot_run_are_refused(tmp_path: Path) -> None:
    exp = tmp_path / "bad.toml"
    for rest, key, why in (('page = "flags"\nclient = "chromium"\nprotocol = "h2"\nrealtime = "ws"', "realtime",
                            'page = "realtime"'),
                           ('page = "realtime"\nclient = "curl"\nprotocol = "h2"\nrealtime = "ws"', "realtime",
                            "in a browser"),
                           ('page = "realtime"\nclient = "chromium"\nprotocol = "h2"\nrealtime = "ws"\n'
                            'scenario = "room"', "scenario", "the loader's clients"),
                           ('page = "realtime"\nclient = "loader"\nprotocol = "h2"\nrealtime = "ws"\n'
                            'scenario = "room"', "scenario", "clients >= 2"),
                           ('page = "realtime"\nclient = "chromium"\nprotocol = "h3"\nrealtime = "sse"', "realtime",
                            "h1 or h2"),
                           ('page = "realtime"\nclient = "chromium"\nprotocol = "h2"\nrealtime = "wt"', "realtime",
                            "quic_stack = \"quinn\""),
                           ('page = "realtime"\nclient = "loader"\nprotocol = "h3"\nrealtime = "wt"', "realtime",
                            "WebTransport runs in a browser"),
                           ('page = "realtime"\nclient = "chromium"\nprotocol = "h2"', "page", "set realtime"),
                           ('page = "realtime"\nclient = "chromium"\nprotocol = "h2"\nrealtime = "comet"', "realtime",
                            "must be one of none, poll, sse, ws"),
                           ('page = "realtime"\nclient = "chromium"\nprotocol = "h2"\nrealtime = "ws"\nnodelay = 1',
                            "nodelay", "true or false")):
        exp.write_text('[experiment]\nname = "bad"\n[factors]\nlink = "geo"\n' + rest + "\n")
        lines = exp.read_text().splitlines()
        line = 1 + next(i for i, x in enumerate(lines) if x.startswith(f"{key} ="))
        p = run_cli("plan", str(exp))
        assert p.returncode == 2, p.stdout + p.stderr
        [msg] = p.stderr.strip().splitlines()
        assert re.search(rf"{re.escape(str(exp))}:{line}: (factors\.)?{key}: ", msg) and why in msg, msg
