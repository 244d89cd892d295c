"""What a tunnel that did not come up says of its two ends (from their summaries)."""

from __future__ import annotations

from satbench.path.tunnel import _ends


def test_a_tunnel_that_did_not_come_up_says_how_far_each_end_got() -> None:
    running = {"client": {"summary": {"handshakes": 1, "net_out_datagrams": 3, "net_in_datagrams": 1,
                                      "net_in_rejected": 0, "tun_in_packets": 2, "tun_out_packets": 0}},
               "vpn": {"summary": None}}
    assert _ends(running) == ("client: 1 handshakes, datagrams 3 out 1 in (0 rejected), packets 2 in 0 out; "
                              "vpn: no summary")
