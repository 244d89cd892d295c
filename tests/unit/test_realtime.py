"""The real-time trial's judgement without a testbed: latencies from the two
ends' stamps, losses, duplicates and reordering, the mechanism as the
server's log shows it, and the one-way physical bound."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest

from satbench import load_profile, realtime
from satbench.link.spec import LinkSpec, resolve
from satbench.realtime import RealtimeSpec, client_results, one_way_ms
from satbench.workloads.realtime import trial_medians

T0 = 1_795_000_000_000.0  # unix ms


def spec(f: dict[str, Any]) -> RealtimeSpec:
    """A scenario as a trial's factors give it (the loader's clients report)."""
    return RealtimeSpec(mechanism=f["realtime"], scenario=f.get("scenario", "server"), messages=f.get("messages", 100),
                        message_bytes=f.get("message_bytes", 100), interval_ms=f.get("interval_ms", 1000),
                        arrivals=f.get("arrivals", "constant"), clients=f.get("clients", 1))


def judge(f: dict[str, Any], results: Any, log: list[dict[str, Any]], links: dict[str, LinkSpec]) -> realtime.Verdict:
    return realtime.judge(spec(f), f.get("protocol", "h2"), results, log, links)


def query(f: dict[str, Any], session: str, seed: int) -> str:
    return realtime.query(spec(f), session, seed)


def loader_url(f: dict[str, Any], session: str, seed: int) -> str:
    return realtime.loader_url(spec(f), session, seed)


@pytest.fixture(scope="module")
def geo() -> dict[str, LinkSpec]:
    return {"link": resolve(load_profile("geo"))}  # 265 ms each way


def page(down: list[tuple[int, float, float]], up: list[tuple[int, float]], **kw: Any) -> list[dict[str, Any]]:
    """A browser's result (the one client of a trial)."""
    return [{"session": "s1", "start_ms": T0, "open_ms": T0 + 530, "errors": [],
             "down": [{"seq": s, "t_ms": t, "recv_ms": r} for s, t, r in down],
             "up": [{"seq": s, "t_ms": t} for s, t in up], **kw}]


def ws_log(ups: list[tuple[int, float, float]], how: str = "extended-connect", proto: str = "h2") -> list[dict[str, Any]]:
    return [{"type": "request", "session": "s1", "realtime": "ws", "websocket": how, "proto": proto},
            *({"type": "message", "session": "s1", "dir": "up", "seq": s, "t_send_ms": t, "t_recv_unix_ns": int(r * 1e6)}
              for s, t, r in ups)]


def test_latencies_come_from_the_two_ends_stamps(geo: dict[str, LinkSpec]) -> None:
    f = {"realtime": "ws", "scenario": "chat", "messages": 2, "protocol": "h2"}
    p = page([(0, T0 + 1000, T0 + 1266), (1, T0 + 2000, T0 + 2300)], [(0, T0 + 1000), (1, T0 + 2000)])
    v = judge(f, p, ws_log([(0, T0 + 1000, T0 + 1270), (1, T0 + 2000, T0 + 2265)]), geo)
    assert v.invalid is None and v.failed is None
    got = sorted((m.dir, m.seq, m.latency_ms) for m in v.messages)
    assert [(d, s) for d, s, _ in got] == [("down", 0), ("down", 1), ("up", 0), ("up", 1)]
    assert [lat for *_, lat in got] == pytest.approx([266, 300, 270, 265], abs=1e-3)  # the server's ns stamps
    assert v.metrics["rt_latency_down_max_ms"] == 300
    assert v.metrics["rt_latency_up_median_ms"] == pytest.approx(267.5, abs=1e-3)
    assert v.metrics["rt_latency_median_rtt"] == pytest.approx(268 / 530, abs=1e-5)
    assert v.metrics["rt_setup_ms"] == 530 and v.metrics["rt_first_update_ms"] == 1266 - 530
    assert v.metrics["rt_lost"] == 0 and v.metrics["rt_path_rtt_ms"] == 530
    assert one_way_ms(geo) == (265, 265)


def test_lost_duplicated_and_reordered_messages_make_the_trial_invalid(geo: dict[str, LinkSpec]) -> None:
    f = {"realtime": "ws", "scenario": "server", "messages": 3, "protocol": "h2"}
    lost = judge(f, page([(0, T0, T0 + 270), (2, T0 + 20, T0 + 290)], []), ws_log([]), geo)
    assert lost.invalid == "1 of 3 messages never arrived" and lost.metrics["rt_lost"] == 1
    twice = judge(f, page([(0, T0, T0 + 270), (1, T0 + 9, T0 + 280), (1, T0 + 9, T0 + 281), (2, T0 + 20, T0 + 290)],
                          []), ws_log([]), geo)
    assert "1 messages from the server arrived twice" in str(twice.invalid)
    order = judge(f, page([(1, T0 + 9, T0 + 280), (0, T0, T0 + 281), (2, T0 + 20, T0 + 290)], []), ws_log([]), geo)
    assert order.invalid == "messages from the server arrived out of order"


def test_the_mechanism_must_be_what_the_trial_asked(geo: dict[str, LinkSpec]) -> None:
    one = page([(0, T0, T0 + 270)], [])
    f = {"realtime": "ws", "scenario": "server", "messages": 1}
    assert judge({**f, "protocol": "h1"}, one, ws_log([], "upgrade", "http/1.1"), geo).invalid is None
    bad = judge({**f, "protocol": "h2"}, one, ws_log([], "upgrade", "http/1.1"), geo).invalid
    assert bad == "the WebSocket should have opened by extended-connect over h2; the server saw: upgrade"
    polls = [{"type": "request", "session": "s1", "realtime": "poll", "proto": "h2"}]
    assert "long polling made 1 polls (at least 2)" in str(judge({**f, "realtime": "poll", "protocol": "h2"}, one, polls, geo).invalid)
    sse = [{"type": "request", "session": "s1", "realtime": "sse", "proto": "h2"}] * 2
    assert "SSE made 2 event-stream requests" in str(judge({**f, "realtime": "sse", "protocol": "h2"}, one, sse, geo).invalid)
    # Client updates over long polling: the opening poll, then the messages as POSTs, one each.
    up = {"realtime": "poll", "scenario": "client", "messages": 1, "protocol": "h2"}
    log = [{"type": "request", "session": "s1", "realtime": k, "proto": "h2"} for k in ("poll", "send")]
    log.append({"type": "message", "session": "s1", "dir": "up", "seq": 0, "t_send_ms": T0,
                "t_recv_unix_ns": int((T0 + 270) * 1e6)})
    assert judge(up, page([], [(0, T0)]), log, geo).invalid is None
    assert judge(up, page([], [(0, T0)]), log[:1] + log[2:], geo).invalid == "the client's messages came as 0 POSTs, not 1"
    # Another session's requests are not this trial's.
    other = [{**r, "session": "s2"} for r in ws_log([])]
    assert "the server saw: none" in str(judge({**f, "protocol": "h2"}, one, other, geo).invalid)


def test_a_message_faster_than_light_fails_the_trial(geo: dict[str, LinkSpec]) -> None:
    f = {"realtime": "sse", "scenario": "server", "messages": 1, "protocol": "h2"}
    log = [{"type": "request", "session": "s1", "realtime": "sse", "proto": "h2"}]
    v = judge(f, page([(0, T0, T0 + 200)], []), log, geo)
    assert v.failed == ("harness error: message down 0 took 200.00 ms, below the propagation delay of its path "
                        "265.0 ms by more than its clock's slack (1 ms)")
    assert judge(f, page([(0, T0, T0 + 264.5)], []), log, geo).failed is None  # within the clock's slack
    assert judge(f, None, log, geo).invalid == "the realtime page left no result"


def test_the_bounds_slack_is_two_steps_of_the_clients_clock(geo: dict[str, LinkSpec]) -> None:
    """Firefox stamps whole milliseconds, twice coarsened (timeOrigin and now()): a message from the server
    stamped 1.5 ms under the propagation delay is its clock's doing (study C's full set had one at 1.26 ms);
    with Chromium's 0.1 ms steps, or 2.5 ms under with Firefox's, it is not. A clock's step is read from
    ten stamps or more; fewer leave the tightest bound."""
    n = 10
    f = {"realtime": "sse", "scenario": "server", "messages": n, "protocol": "h2"}
    log = [{"type": "request", "session": "s1", "realtime": "sse", "proto": "h2"}]

    def server(first_sent: float, start: float = T0) -> list[dict[str, Any]]:
        rows = [(0, T0 + first_sent, T0 + 264.0)] + [(k, T0 + 500.5 * k, T0 + 500.0 * k + 300.0) for k in range(1, n)]
        return [{**page(rows, [])[0], "start_ms": start}]

    whole = server(0.317)  # 263.683 ms: 1.317 under
    assert realtime.clock_step_ms(whole) == 1.0
    assert judge(f, whole, log, geo).failed is None
    assert "took 262.50 ms" in str(judge(f, server(1.5), log, geo).failed)
    tenths = server(0.317, start=T0 + 0.1)
    assert realtime.clock_step_ms(tenths) == 0.1
    assert "slack (1 ms)" in str(judge(f, tenths, log, geo).failed)
    assert realtime.clock_step_ms([{"down": [{"recv_ms": T0 + k + 0.001} for k in range(n)], "up": []}]) == 0.001
    few = [{"start_ms": T0, "open_ms": T0 + 530, "down": [{"recv_ms": T0 + 800}], "up": [{"t_ms": T0 + 900}]}]
    assert realtime.clock_step_ms(few) == 0.001  # four whole-millisecond stamps: too few to tell


def test_the_page_query_carries_the_scenario() -> None:
    q = query({"realtime": "sse", "scenario": "chat", "messages": 5, "message_bytes": 200, "interval_ms": 0,
               "arrivals": "poisson"}, session="abc", seed=2**40 + 7)
    assert q == "?mech=sse&scenario=chat&n=5&size=200&interval_ms=0.0&arrivals=poisson&seed=7&session=abc"


def test_the_loader_query_names_the_room_after_the_trial() -> None:
    f = {"realtime": "ws", "scenario": "room", "messages": 3, "clients": 5}
    assert loader_url(f, session="k1", seed=3) == ("https://server.test/rt/?mech=ws&scenario=room&n=3&size=100"
                                                    "&interval_ms=1000.0&arrivals=constant&seed=3&session=k1"
                                                    "&room=k1&members=5")
    raw = {"mode": "realtime", "clients": [{"realtime": {"session": "k1-0"}}, {"realtime": {"session": "k1-1"}}]}
    assert client_results(raw) == [{"session": "k1-0"}, {"session": "k1-1"}]
    assert client_results({"page_result": {"session": "k1"}}) == [{"session": "k1"}]
    assert client_results(None) is None


def room_log(members: int, n: int, mech: str = "ws", arrival: list[tuple[int, int, float]] | None = None
             ) -> list[dict[str, Any]]:
    """The server's log of a room: each member's opening request, and its messages up as the server had them."""
    log: list[dict[str, Any]] = [{"type": "request", "session": f"r-{k}", "realtime": mech, "proto": "h2",
                                  "websocket": "extended-connect" if mech == "ws" else None} for k in range(members)]
    if mech != "ws":
        log += [{"type": "request", "session": f"r-{k}", "realtime": "send", "proto": "h2"}
                for k in range(members) for _ in range(n)]
    for k, seq, recv in arrival if arrival is not None else [(k, s, T0 + 100 * s + 270) for k in range(members)
                                                             for s in range(n)]:
        log.append({"type": "message", "session": f"r-{k}", "dir": "up", "seq": seq, "t_recv_unix_ns": int(recv * 1e6)})
    return log


def room(members: int, n: int, relay_ms: float = 535.0, skip: tuple[int, int, int] | None = None
         ) -> list[dict[str, Any]]:
    """What each of a room's members recorded: its messages sent at T0 + 100 seq, every other member's had
    relay_ms later (but ``skip``: receiver, sender, seq never came)."""
    out = []
    for k in range(members):
        down = [{"seq": s, "t_ms": T0 + 100 * s, "recv_ms": T0 + 100 * s + relay_ms, "from": f"r-{j}"}
                for j in range(members) if j != k for s in range(n) if (k, j, s) != skip]
        out.append({"session": f"r-{k}", "scenario": "room", "start_ms": T0 - 600, "open_ms": T0 - 50,
                    "errors": [], "down": down, "up": [{"seq": s, "t_ms": T0 + 100 * s} for s in range(n)]})
    return out


def test_a_room_relays_every_message_to_every_other_member(geo: dict[str, LinkSpec]) -> None:
    f = {"realtime": "ws", "scenario": "room", "messages": 2, "protocol": "h2", "clients": 3}
    v = judge(f, room(3, 2), room_log(3, 2), geo)
    assert v.invalid is None and v.failed is None, v.invalid
    relays = sorted((m.sender, m.receiver, m.seq, m.latency_ms) for m in v.messages if m.dir == "relay")
    # Each member's two messages reach the two others: 12 relays, 535 ms each (up and down the satellite).
    assert len(relays) == 12 and {(s, r) for s, r, *_ in relays} == {(s, r) for s in range(3) for r in range(3)
                                                                     if s != r}
    assert {lat for *_, lat in relays} == {535.0}
    assert sum(m.dir == "up" for m in v.messages) == 6
    assert v.metrics["rt_latency_relay_median_ms"] == 535 and v.metrics["rt_clients"] == 3
    assert v.metrics["rt_setup_ms"] == 550 and v.metrics["rt_latency_up_max_ms"] == pytest.approx(270, abs=1e-3)
    # A relay can beat neither leg's propagation delay: up and down, 530 ms here.
    assert "below the propagation delay of its path 530.0 ms" in str(judge(f, room(3, 2, 520), room_log(3, 2),
                                                                           geo).failed)
    lost = judge(f, room(3, 2, skip=(1, 2, 0)), room_log(3, 2), geo)
    assert lost.invalid == "1 of 18 messages never arrived" and lost.metrics["rt_lost"] == 1
    # A member's messages overtaking each other: on a WebSocket that is an error; as POSTs, counted.
    swapped = [(0, 1, T0 + 270), (0, 0, T0 + 280), (1, 0, T0 + 270), (1, 1, T0 + 370), (2, 0, T0 + 270),
               (2, 1, T0 + 370)]
    assert "client 0: messages from the client arrived out of order" in str(
        judge(f, room(3, 2), room_log(3, 2, arrival=swapped), geo).invalid)
    posts = judge({**f, "realtime": "sse"}, room(3, 2), room_log(3, 2, "sse", arrival=swapped), geo)
    assert posts.invalid is None and posts.metrics["rt_reordered_up"] == 1


def test_a_room_counts_copies_strangers_and_missing_members(geo: dict[str, LinkSpec]) -> None:
    f = {"realtime": "sse", "scenario": "room", "messages": 2, "protocol": "h2", "clients": 3}
    members = room(3, 2)
    twice = [dict(m) for m in members]
    twice[0] = {**twice[0], "down": [*twice[0]["down"], dict(twice[0]["down"][0])]}
    v = judge(f, twice, room_log(3, 2, "sse"), geo)
    assert v.metrics["rt_duplicated"] == 1 and "client 0: 1 messages relayed from client 1 arrived twice" in str(
        v.invalid)
    own = [dict(m) for m in members]
    own[2] = {**own[2], "down": [*own[2]["down"], {"seq": 0, "t_ms": T0, "recv_ms": T0 + 600, "from": "r-2"}]}
    assert "client 2: 1 relayed messages from no other member" in str(judge(f, own, room_log(3, 2, "sse"), geo).invalid)
    # A member that left no record: its relays would never be expected, so the trial cannot be judged.
    assert judge(f, members[:2], room_log(3, 2, "sse"), geo).invalid == "2 of 3 clients reported"


def test_webtransport_is_one_session_over_http3(geo: dict[str, LinkSpec]) -> None:
    f = {"realtime": "wt", "scenario": "server", "messages": 1, "protocol": "h3"}
    one = page([(0, T0, T0 + 270)], [])
    session = [{"type": "request", "session": "s1", "realtime": "wt", "webtransport": "extended-connect",
                "proto": "h3", "status": 200}]
    v = judge(f, one, session, geo)
    assert v.invalid is None and v.env is not None and v.env["webtransport"] == ["extended-connect"]
    assert "WebTransport should have opened one session" in str(judge(f, one, session * 2, geo).invalid)
    assert "over h2, not h3" in str(judge(f, one, [{**session[0], "proto": "h2"}], geo).invalid)


def test_a_cells_trials_are_summarised_by_their_own_medians() -> None:
    # The report's "trial medians" and scripts/realtime-cells.py: each trial one figure, so that two
    # trials far apart show as a range, where pooled messages would hide them.
    t = pd.DataFrame({"rt_latency_down_median_ms": [606.0, 1210.0, None],
                      "rt_latency_down_median_rtt": [1.0, 2.0, None]})
    per = trial_medians(t, "down")
    assert per is not None and (per.median_ms, per.low_ms, per.high_ms, per.trials) == (908.0, 606.0, 1210.0, 2)
    assert per.median_rtt == 1.5 and str(per) == "908 [606-1210] (1.50) n=2"
    assert trial_medians(t, "up") is None  # no trial has the direction
    no_rtt = trial_medians(t.drop(columns="rt_latency_down_median_rtt"), "down")
    assert no_rtt is not None and no_rtt.median_rtt is None and str(no_rtt) == "908 [606-1210] n=2"
