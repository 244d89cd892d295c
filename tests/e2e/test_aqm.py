"""The bottleneck's queue with real flows: FQ-CoDel keeps a sparse flow's
round trip short beside a bulk TCP download that fills a drop-tail buffer,
and CoDel with ECN marks an ECN-capable TCP flow instead of dropping it
(the kernel's TCP asking for ECN inside the testbed's namespace only)."""

from __future__ import annotations

import statistics
import threading
from pathlib import Path

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.testbed import measure

#: Runs alone, after the parallel part of the e2e layer (tests/conftest.py: serial).
pytestmark = pytest.mark.serial

#: 10 Mbit/s down, 20 ms each way, a 200 ms buffer: a bulk flow alone fills it (bufferbloat).
PROFILE = """name = "aqm-{aqm}"
description = "bottleneck with {aqm}"
[forward]
rate_mbps = 10
delay_ms = 20
queue_ms = 200
{extra}
[return]
rate_mbps = 10
delay_ms = 20
"""


def _link(tmp: Path, aqm: str, extra: str = "") -> Path:
    p = tmp / f"{aqm}.toml"
    p.write_text(PROFILE.format(aqm=aqm, extra=extra))
    return p


def _probe_during_bulk(tb: Testbed, ecn: bool = False) -> list[float]:
    """A UDP probe's round trips while a TCP download (CUBIC) runs (the link's counters are the
    testbed's once it is down)."""
    if ecn:
        tb.client.run(["sysctl", "-q", "-w", "net.ipv4.tcp_ecn=1"], check=True)
    result: dict = {}
    t = threading.Thread(target=lambda: result.setdefault(
        "bulk", measure.bulk(tb.client, tb.server, seconds=7, cc="cubic")))
    t.start()
    try:
        threading.Event().wait(3.0)  # the buffer fills in the download's first seconds
        # Probes from 3 to 6 s, and their last echoes waited for 600 ms (a round trip is 240 ms at most
        # here); a lost one is not waited for longer.
        r = measure.probe(tb.client, tb.server, count=60, interval_ms=50, size=64, wait_ms=600)
    finally:
        t.join()
    assert result["bulk"].goodput_bps(skip_s=2) > 5e6
    return r.rtts


def test_fq_codel_keeps_a_sparse_flows_round_trip_short(tmp_path: Path) -> None:
    rtts = {}
    for aqm, extra in (("droptail", ""), ("fq_codel", 'aqm = "fq_codel"')):
        with Testbed(TestbedSpec(link=load_profile(str(_link(tmp_path, aqm, extra))), seed=1, tcp_cc="cubic")) as tb:
            rtts[aqm] = _probe_during_bulk(tb)
    base = 40.0
    # Drop-tail: the probe waits behind the download's standing queue (up to 200 ms of it).
    assert statistics.median(rtts["droptail"]) > base + 80, rtts["droptail"]
    # FQ-CoDel: the probe's own queue is served first; the bulk flow's queue does not hold it up.
    assert statistics.median(rtts["fq_codel"]) < base + 20, rtts["fq_codel"]


@pytest.mark.parametrize("ecn", [True, False])
def test_codel_marks_ecn_capable_tcp_instead_of_dropping(tmp_path: Path, ecn: bool) -> None:
    extra = 'aqm = "codel"' + ("\necn = true" if ecn else "")
    with Testbed(TestbedSpec(link=load_profile(str(_link(tmp_path, "codel", extra))), seed=1, tcp_cc="cubic")) as tb:
        rtts = _probe_during_bulk(tb, ecn=True)
    assert tb.link_stats is not None
    fwd = tb.link_stats["forward"]
    marked, capable, aqm_drops = fwd["ecn"]["marked"]["packets"], fwd["ecn"]["capable"]["packets"], \
        fwd["dropped"]["aqm"]["packets"]
    # The download negotiated ECN (the client asked, the server's kernel accepts by default): its
    # data packets are ECT(0).
    assert capable > 1000, fwd["ecn"]
    if ecn:
        # CoDel marks the download's packets; it still drops what cannot be marked when CoDel's turn
        # finds it at the head (the probe's echoes, a retransmission's SYN-ACK): a few at most.
        assert marked > 0 and aqm_drops <= marked, (fwd["ecn"], fwd["dropped"])
    else:
        assert marked == 0 and aqm_drops > 0, (fwd["ecn"], fwd["dropped"])
    # Either way CoDel keeps the standing queue near its 5 ms target, far from the 200 ms buffer.
    assert statistics.median(rtts) < 40 + 40, rtts
