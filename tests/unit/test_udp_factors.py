"""UDP blocked or policed, and HTTP/3 by Alt-Svc: the values each factor takes, the combinations
refused in one line naming the factor, the gateway's rule, and the flags that let Chromium take the
test CA over QUIC from Alt-Svc while forcing nothing."""

from __future__ import annotations

import tomllib

import pytest

from satbench.endpoints.browser import BrowseOptions
from satbench.endpoints.chromium import _flags
from satbench.errors import ProfileError
from satbench.experiment import spec
from satbench.testbed.testbed import udp_rules


def parsed(factors: str) -> spec.Experiment:
    text = f'[experiment]\nname = "u"\n[factors]\nlink = "geo"\npage = "shop"\n{factors}\n'
    return spec.parse(tomllib.loads(text), text, "/tmp/u.toml")


@pytest.mark.parametrize("factors, words", [
    ('udp = "dropped"', "udp: must be open, blocked or policed:KBITS"),
    ('udp = "policed:0"', "udp: must be open, blocked or policed:KBITS"),
    ('udp = "policed:fast"', "udp: must be open, blocked or policed:KBITS"),
    ('h3_discovery = "dns"', "h3_discovery: must be one of forced, alt-svc"),
    ('client = "loader"\nprotocol = "h3"\nh3_discovery = "alt-svc"', "h3_discovery: HTTP/3 from Alt-Svc: one Chromium"),
    ('client = "chromium"\nprotocol = "h2"\nh3_discovery = "alt-svc"', "h3_discovery: HTTP/3 from Alt-Svc: one Chromium"),
    ('client = "chromium"\nprotocol = "h3"\nshards = 2\nh3_discovery = "alt-svc"', "a generated page of one origin"),
])
def test_refused_in_one_line_naming_the_factor(factors: str, words: str) -> None:
    with pytest.raises(ProfileError) as e:
        parsed(factors)
    assert words in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_accepted_values() -> None:
    exp = parsed('client = "chromium"\nprotocol = "h3"\nh3_discovery = "alt-svc"\n'
                 'udp = ["open", "blocked", "policed:512"]')
    assert sorted(t.spec.udp for t in exp.trials) == ["blocked", "open", "policed:512"]
    assert {t.spec.h3_discovery for t in exp.trials} == {"alt-svc"}


def test_the_gateway_rule_drops_udp_but_dns_and_counts_it() -> None:
    blocked, policed = udp_rules("blocked"), udp_rules("policed:512")
    for rules in (blocked, policed):
        assert "meta l4proto udp udp sport != 53 udp dport != 53" in rules and 'counter name "dropped" drop' in rules
    assert "limit" not in blocked
    assert "limit rate over 64000 bytes/second" in policed  # 512 kbit/s


def test_alt_svc_forces_nothing_but_names_each_host_on_an_unused_port() -> None:
    flags = _flags(BrowseOptions(protocol="h3", negotiate=True), "https://server.test/p/")
    force = [f for f in flags if f.startswith("--origin-to-force-quic-on=")]
    assert force == ["--origin-to-force-quic-on=server.test:1"], flags
    assert "--enable-quic" in flags
    forced = _flags(BrowseOptions(protocol="h3"), "https://server.test/p/")
    assert "--origin-to-force-quic-on=server.test:443" in forced
