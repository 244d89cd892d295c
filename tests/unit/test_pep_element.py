"""The PEP path element's checks of its factor values, and how a leg's
settings are split between the PEP (socket options) and the routes
(initial windows)."""

from __future__ import annotations

import pytest

from satbench.path.pep import Pep, _split_leg

from ..helpers import trial


@pytest.mark.parametrize("value", ["terminal", "gateway", "both", {"at": "both"},
                                   {"at": "terminal", "satellite": "cc=bbr,sndbuf=16M,rcvbuf=4m,initcwnd=100",
                                    "terrestrial": "cc=cubic,nodelay,fastopen=off,maxseg=1400", "max_conns": 10}])
def test_good_values(value: object) -> None:
    assert Pep.check(value) is None


@pytest.mark.parametrize("value, words", [
    ("middle", "must be none, terminal, gateway or both"),
    (3, "must be none, terminal, gateway, both or a table"),
    ({"at": "sky"}, "at must be terminal, gateway or both"),
    ({"at": "both", "cache": 1}, "unknown key 'cache'"),
    ({"at": "both", "satellite": "cc=vegas"}, "satellite: 'cc=vegas' is not a leg setting"),
    ({"at": "both", "terrestrial": "sndbuf=lots"}, "terrestrial: 'sndbuf=lots'"),
    ({"at": "both", "satellite": 5}, "satellite must be a string"),
    ({"at": "both", "satellite": "initcwnd=0"}, "initcwnd must be 1..1000"),
    ({"at": "both", "max_conns": 0}, "max_conns must be a whole number"),
    ({"at": "both", "max_conns": True}, "max_conns must be a whole number"),
])
def test_bad_values_say_what_is_wrong(value: object, words: str) -> None:
    problem = Pep.check(value)
    assert problem is not None and words in problem, problem


def test_initial_window_is_taken_out_of_the_socket_settings() -> None:
    assert _split_leg("cc=bbr, initcwnd=50 ,nodelay") == ("cc=bbr,nodelay", 50)
    assert _split_leg("cc=bbr") == ("cc=bbr", None)
    assert _split_leg("") == ("", None)


def test_places() -> None:
    assert Pep("both", {}, trial(pep="both")).places() == ["terminal", "gateway"]
    assert Pep({"at": "gateway"}, {}, trial(pep={"at": "gateway"})).places() == ["gateway"]


def test_labels() -> None:
    assert Pep.label("none") == "none"
    assert Pep.label({"at": "both"}) == "both"
    assert Pep.label({"at": "both", "satellite": "cc=bbr", "terrestrial": "cc=cubic"}) == (
        "both: satellite cc=bbr; terrestrial cc=cubic")


def test_every_leg_relays_without_nagle_unless_told() -> None:
    from satbench.path.pep import _with_nodelay
    assert _with_nodelay("") == "nodelay"
    assert _with_nodelay("cc=bbr") == "cc=bbr,nodelay"
    assert _with_nodelay("cc=bbr,nodelay=off") == "cc=bbr,nodelay=off"


def test_the_gateway_proxy_takes_a_terminal_pep_given_either_way() -> None:
    """A PEP written as a table (as satbench shell passes it) is placed by its ``at``."""
    from satbench.path.proxy import Proxy

    for pep in ("terminal", {"at": "terminal", "satellite": "cc=bbr"}):
        assert Proxy.check("nginx") is None and Proxy.conflict("nginx", trial(pep=pep, proxy="nginx")) is None, pep
    for pep in ("gateway", "both", {"at": "gateway"}, {"at": "both", "max_conns": 10}):
        assert "PEP at the gateway" in (Proxy.conflict("nginx", trial(pep=pep, proxy="nginx")) or ""), pep
