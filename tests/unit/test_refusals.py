"""What the factors of this session refuse, each in one line naming the factor: cross traffic's
table, repeat views where nothing would return, IPv6 beside an element that does not carry it; and
the pure parts behind two of them: a video ladder's choice of rung, and the address families a
third-party server's access log shows."""

from __future__ import annotations

import pytest

from satbench.endpoints.satbench_server import family_of
from satbench.endpoints.thirdparty import families_of
from satbench.experiment.trialspec import TrialSpec, view_problem
from satbench.path.cross import CrossTraffic, next_rung
from satbench.testbed.host import bracketed


@pytest.mark.parametrize("value, words", [
    ("torrent", "must be none, bulk, video, web or a table"),
    ({"kind": "bulk", "bitrate_mbps": 5}, "unknown key 'bitrate_mbps' for bulk"),
    ({"kind": "video", "bitrate_mbps": 0}, "bitrate_mbps must be a number from 0.01"),
    ({"kind": "web", "direction": "sideways"}, "direction must be down or up"),
    ({"kind": "bulk", "flows": 2.5}, "flows must be a whole number"),
    ({"kind": "bulk", "cc": "vegas"}, "cc must be cubic, bbr or reno"),
    ({"kind": "video", "bitrate_mbps": [4, 2]}, "a ladder's rungs must rise"),
    ({"kind": "video", "bitrate_mbps": []}, "a ladder is 1 to 10 numbers"),
    ({"kind": "video", "bitrate_mbps": [1, "hd"]}, "a ladder is 1 to 10 numbers"),
])
def test_cross_traffic_values_are_checked(value: object, words: str) -> None:
    problem = CrossTraffic.check(value)
    assert problem is not None and words in problem, problem


def test_cross_traffic_accepts_its_kinds_and_tables() -> None:
    for ok in ("none", "bulk", "video", "web", {"kind": "bulk", "cc": "bbr", "flows": 4, "direction": "up"},
               {"kind": "web", "rate_per_s": 3, "size_kb": 300, "lead_s": 5},
               {"kind": "video", "bitrate_mbps": [1, 2.5, 5, 8]}):
        assert CrossTraffic.check(ok) is None, ok
    assert CrossTraffic.extra_s({"kind": "video", "lead_s": 5}) == 6.0


@pytest.mark.parametrize("factors, field, words", [
    ({"client": "firefox"}, "view", "Firefox and curl load first views only"),
    ({"client": "loader", "protocol": "h3", "quic_stack": "quinn"}, "view", "quic_stack = \"quiche\""),
    ({"client": "loader", "cache": "cold"}, "cache", "keeps no HTTP cache"),
    ({"client": "chromium", "page": "bulk:1M"}, "view", "not a bulk file or an upload"),
    ({"client": "chromium", "server": "nginx"}, "view", "satbench servers"),
])
def test_repeat_views_are_refused_where_nothing_returns(factors: dict, field: str, words: str) -> None:
    t = TrialSpec.of({"link": "geo", "protocol": "h2", "page": "uniform-100k", "view": "repeat", **factors})
    problem = view_problem(t)
    assert problem is not None and problem[0] == field and words in problem[1], problem


def test_a_first_views_cache_is_cold_already() -> None:
    t = TrialSpec.of({"link": "geo", "protocol": "h2", "page": "uniform-100k", "client": "chromium", "cache": "cold"})
    assert view_problem(t) == ("cache", 'a first view\'s cache is empty: cache = "cold" is a repeat view\'s')
    ok = TrialSpec.of({"link": "geo", "protocol": "h3", "page": "uniform-100k", "client": "loader",
                       "quic_stack": "quiche", "view": "repeat"})
    assert view_problem(ok) is None


class _V4Only:
    """A path element of a plug-in that does not say it carries IPv6."""

    ipv6 = False


def test_ipv6_is_refused_only_with_an_element_that_does_not_carry_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from dataclasses import replace

    from satbench import path
    from satbench.experiment.spec import ip_problem

    # Every element satbench ships carries IPv6, and so does a testbed of several terminals.
    assert all(path.element_class(f).ipv6 for f in path.BUILTIN)
    t = TrialSpec.of({"link": "geo", "protocol": "h2", "page": "uniform-100k", "ip": "v6", "pep": "both",
                      "proxy": "none", "clients": {"h2": 2}, "terminals": 2})
    assert ip_problem(t) is None
    monkeypatch.setitem(path.ELEMENTS, "v4only", f"{__name__}:_V4Only")
    problem = ip_problem(replace(t, path={**t.path, "v4only": "on"}))
    assert problem == ("ip", "ip = v6 is not supported with the v4only element yet: it carries IPv4 only"), problem


def test_a_video_ladder_picks_the_highest_rung_the_last_segment_affords() -> None:
    ladder = [1.0, 2.5, 5.0, 8.0]
    assert next_rung(ladder, 0.5) == 0  # nothing affordable: the lowest
    assert next_rung(ladder, 3.2) == 1  # 0.8 x 3.2 = 2.56
    assert next_rung(ladder, 6.2) == 1  # 4.96: not quite 5
    assert next_rung(ladder, 6.25) == 2 and next_rung(ladder, 100) == 3


def test_third_party_access_logs_count_connections_per_family() -> None:
    nginx = [{"conn": "1", "remote": "2001:db8:5b:1::10"}, {"conn": "1", "remote": "2001:db8:5b:1::10"},
             {"conn": "2", "remote": "198.18.1.10"}, {"conn": "3", "remote": "::ffff:198.18.1.10"}]
    assert families_of(nginx) == {"ipv4": 2, "ipv6": 1}
    caddy = [{"request": {"remote_ip": "2001:db8:5b:1::10", "remote_port": "40000"}},
             {"request": {"remote_ip": "2001:db8:5b:1::10", "remote_port": "40000"}},
             {"request": {"remote_ip": "2001:db8:5b:1::10", "remote_port": "40002"}}]
    assert families_of(caddy) == {"ipv4": 0, "ipv6": 2}
    assert families_of([{"msg": "no peer"}]) is None
    # satbench-server's peers, as it logs them: the same families.
    assert [family_of(p) for p in ("198.18.1.10:4000", "[2001:db8:5b:1::10]:4000", "[::ffff:198.18.1.10]:4000")
            ] == ["ipv4", "ipv6", "ipv4"]
    assert (bracketed("2001:db8:5b:3::10"), bracketed("198.18.3.10")) == ("[2001:db8:5b:3::10]", "198.18.3.10")
