"""What a tunnel that did not come up says of its two ends (from their summaries)."""

from __future__ import annotations

from satbench.path.tunnel import _ends


def test_a_tunnel_that_did_not_come_up_says_how_far_each_end_got() -> None:
    running = {"client": {"summary": {"handshakes": 1, "net_out_datagrams": 3, "net_in_datagrams": 1,
                                      "net_in_rejected": 0, "tun_in_packets": 2, "tun_out_packets": 0}},
               "vpn": {"summary": None}}
    assert _ends(running) == ("client: 1 handshakes, datagrams 3 out 1 in (0 rejected), packets 2 in 0 out; "
                              "vpn: no summary")


def test_the_tunnels_inner_addresses_are_the_testbeds_own() -> None:
    """A client's closed-world table lets through only the testbed's networks: the tunnels' inner
    addresses must be among them, or no echo crosses a tunnel."""
    import ipaddress

    from satbench.model import TESTBED_NETWORKS
    from satbench.path import tunnel

    nets = [ipaddress.ip_network(n) for n in TESTBED_NETWORKS]
    for addr in (f"{tunnel.INNER6}:1::2", f"{tunnel.INNER6}:255::1", "10.200.1.2", "10.200.255.1"):
        assert any(ipaddress.ip_address(addr) in n for n in nets), addr
