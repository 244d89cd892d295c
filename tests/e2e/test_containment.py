"""Containment: no host of a testbed can reach anything outside it. Every
namespace lacks a default route and a route to any address beyond
198.18.0.0/15, and packets to the outside (the internet, the host's own
addresses) go nowhere."""

from __future__ import annotations

import subprocess

from satbench import Testbed, TestbedSpec, load_profile


def _host_addresses() -> list[str]:
    p = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True)
    addrs = [line.split()[3].split("/")[0] for line in p.stdout.splitlines()]
    return [a for a in addrs if not a.startswith("127.")]


def test_no_host_reaches_outside_the_testbed() -> None:
    outside = ["1.1.1.1", "8.8.8.8", "10.0.0.1", "192.168.1.1", *_host_addresses()]
    with Testbed(TestbedSpec(link=load_profile("wire"), access=load_profile("wifi"), clients=2, servers=2,
                             seed=1)) as tb:
        assert len(tb.hosts) == 7  # two clients, access point, terminal, gateway, two servers
        for h in tb.hosts:
            routes = h.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
            assert "default" not in routes, (h.role, routes)
            for addr in outside:
                r = h.run(["ip", "route", "get", addr], capture_output=True, text=True)
                assert r.returncode != 0 and "unreachable" in r.stderr.lower(), (h.role, addr, r.stdout)
        # And a packet sent anyway goes nowhere: the clients and servers cannot ping the host.
        for h in (tb.client, tb.server):
            for addr in outside[:1] + _host_addresses()[:1]:
                r = h.run(["ping", "-c", "1", "-W", "1", addr], capture_output=True, text=True)
                assert r.returncode != 0, (h.role, addr)
        # Inside, everything is reachable.
        r = tb.client.run(["ping", "-c", "1", "-W", "2", "server.test"], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr
