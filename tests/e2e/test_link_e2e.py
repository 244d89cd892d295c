"""The emulated path end to end: real traffic through real namespaces."""

from __future__ import annotations

import json
import math
import statistics
import struct
import time
from pathlib import Path

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.testbed import measure

from ..helpers import run_cli


def serialisation_ms(wire_bytes: int, mbps: float) -> float:
    return wire_bytes * 8 / (mbps * 1e6) * 1e3


@pytest.mark.serial
def test_rtt_through_geo_matches_configuration() -> None:
    with Testbed(TestbedSpec(link=load_profile("geo"), seed=1)) as tb:
        r = measure.probe(tb.client, tb.server, count=40, interval_ms=25, size=64)
    # 64-byte UDP payload = 92 bytes of IP, serialised once each way at 10 Mbit/s.
    configured = 530 + 2 * serialisation_ms(92, 10)
    assert r.received == 40
    assert abs(r.median - configured) < 2.0, (r.median, configured)
    # The virtual machine's scheduling can delay a rare probe by a few ms.
    assert sum(abs(x - configured) < 2.0 for x in r.rtts) >= 0.9 * len(r.rtts), r.rtts
    # The emulator itself published how late it released packets.
    lat = tb.link_stats["forward"]["release_lateness"]
    assert lat["count"] == 40 and lat["p50_ms"] < 1.0


@pytest.mark.serial
def test_tcp_goodput_at_10_mbits_is_within_5_percent_of_ideal() -> None:
    # CUBIC on the testbed's routes (kernel-enforced, see the congestion control
    # test) and on iperf3's sockets; in reverse mode iperf3 reports the remote
    # sender's algorithm only when its server sends it.
    with Testbed(TestbedSpec(link=load_profile("lan"), seed=1, tcp_cc="cubic")) as tb:
        b = measure.bulk(tb.client, tb.server, seconds=6, cc="cubic")
    assert b.raw["end"].get("sender_tcp_congestion") in (None, "cubic")
    ideal = measure.ideal_goodput_bps(10e6, b.mss or 1448)
    g = b.goodput_bps(skip_s=2)
    assert abs(g - ideal) / ideal < 0.05, (g, ideal, b.interval_bps)
    fwd = tb.link_stats["forward"]
    # Offloaded chunks were segmented: the link counted wire-sized packets.
    assert fwd["offload_chunks"] > 0
    assert fwd["delivered"]["bytes"] / fwd["delivered"]["packets"] <= 1500
    # Nothing was lost outside the model: the kernel never found the emulator's queue full.
    devices = tb.link_stats["devices"]
    assert set(devices) == {"term:sat0", "gw:sat0"}
    assert all(d["tx_dropped"] == 0 for d in devices.values()), devices


def test_measured_loss_matches_configured_loss_and_counters() -> None:
    p, n = 0.05, 2000
    link = load_profile("wire", ["forward.loss=0.05", "delay_ms=1"])
    with Testbed(TestbedSpec(link=link, seed=42)) as tb:
        r = measure.probe(tb.client, tb.server, count=n, interval_ms=1, wait_ms=500)
    lost = r.sent - r.received
    sd = math.sqrt(n * p * (1 - p))
    assert abs(lost - n * p) < 5 * sd, (lost, n * p)
    fwd, ret = tb.link_stats["forward"], tb.link_stats["return"]
    # Every lost probe is accounted for by the emulator, as channel loss, forward only.
    assert fwd["dropped"]["loss"]["packets"] == lost
    assert ret["dropped"]["loss"]["packets"] == 0
    assert tb.link_stats["seed"] == 42


def test_bit_error_rate_loses_big_packets_more_often() -> None:
    ber = 2e-5
    link = load_profile("wire", [f"forward.ber={ber}", "delay_ms=1"])
    n = 1500
    with Testbed(TestbedSpec(link=link, seed=3)) as tb:
        small = measure.probe(tb.client, tb.server, count=n, interval_ms=1, size=64, wait_ms=500)
        big = measure.probe(tb.client, tb.server, count=n, interval_ms=1, size=1200, wait_ms=500)
    for r, wire in ((small, 92), (big, 1228)):
        p = 1 - (1 - ber) ** (8 * wire)
        lost = r.sent - r.received
        assert abs(lost - n * p) < 5 * math.sqrt(n * p * (1 - p)) + 1, (wire, lost, n * p)
    assert big.sent - big.received > 3 * (small.sent - small.received)


@pytest.mark.serial
def test_mahimahi_trace_sets_the_delivered_rate(tmp_path: Path) -> None:
    # One 1504-byte opportunity per millisecond: 12.03 Mbit/s, 1448 payload bytes per ms.
    (tmp_path / "1ms.trace").write_text("".join(f"{i}\n" for i in range(1, 101)))
    prof = tmp_path / "traced.toml"
    prof.write_text('name = "traced"\n[forward]\ntrace = "1ms.trace"\ndelay_ms = 5\nqueue_packets = 60\n'
                    '[return]\ndelay_ms = 5\n')
    with Testbed(TestbedSpec(link=load_profile(str(prof)), seed=1)) as tb:
        b = measure.bulk(tb.client, tb.server, seconds=6)
    expect = 1448 * 8 * 1000
    assert abs(b.goodput_bps(2) - expect) / expect < 0.05, b.interval_bps


def test_shell_runs_command_with_server_name_and_passes_exit_code() -> None:
    script = ('test "$SATBENCH_SERVER" = server.test && test "$SATBENCH_SERVER_ADDR" = 198.18.3.10 '
              '&& getent hosts server.test | grep -q 198.18.3.10 && ping -c 3 -i 0.2 -q server.test >/dev/null '
              '&& exit 7')
    p = run_cli("shell", "--link", "lan", "--json", "--", "sh", "-c", script)
    assert p.returncode == 7, p.stderr
    report = json.loads(p.stderr.strip().splitlines()[-1])
    assert report["exit_code"] == 7 and report["link"] == "lan"
    # The command's three echo requests crossed the return link and their replies the forward link.
    for way in ("forward", "return"):
        c = report["link_counters"][way]
        assert c["delivered"]["packets"] >= 3 and c["offered"]["packets"] == c["delivered"]["packets"], (way, c)


def test_shell_json_out_and_counters(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    p = run_cli("shell", "--link", "lan", "--seed", "9", "--json-out", str(out), "--", "ping", "-c", "3", "-i", "0.2",
                "-q", "server.test")
    assert p.returncode == 0, p.stderr
    assert "forward (gateway -> terminal)" in p.stderr
    d = json.loads(out.read_text())
    assert d["seed"] == 9
    for k in ("forward", "return"):
        c = d["link_counters"][k]
        assert c["delivered"]["packets"] >= 3 and c["dropped"]["loss"]["packets"] == 0
        assert c["offered"]["packets"] == c["delivered"]["packets"] + c["in_flight"]["packets"]


def test_no_route_out_of_the_testbed() -> None:
    with Testbed(TestbedSpec(link=load_profile("lan"), seed=1)) as tb:
        for h in tb.hosts:
            routes = h.run(["ip", "-4", "route", "show", "table", "all"], capture_output=True, text=True).stdout
            assert "default" not in routes, (h.role, routes)
            addrs = h.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
            for line in addrs.splitlines():
                a = line.split()[3]
                assert a.startswith(("127.", "198.18.")), (h.role, a)
        # An address outside the testbed is unreachable at once.
        p = tb.client.run(["ping", "-c", "1", "-W", "1", "192.0.2.1"], capture_output=True, text=True)
        assert p.returncode != 0


@pytest.mark.parametrize("cc", ["cubic", "reno", "bbr"])
def test_default_congestion_control_reaches_every_connection(cc: str) -> None:
    """Whatever the host lets namespaces default to, the testbed's routes carry
    the algorithm asked for; the host's own setting is untouched."""
    before = Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text()
    with Testbed(TestbedSpec(link=load_profile("lan"), tcp_cc=cc, seed=1)) as tb:
        assert tb.tcp_cc() == tb.effective_tcp_cc == cc
        srv = measure.iperf3_server(tb.server)
        try:
            # No -C: the sockets get the testbed's algorithm.
            p = tb.client.run(["iperf3", "-c", tb.server.addr, "-p", str(measure.IPERF_PORT), "-t", "1", "-J"],
                              capture_output=True, text=True)
            d = json.loads(p.stdout)
        finally:
            srv.kill()
            srv.wait()
    assert d["end"]["sender_tcp_congestion"] == cc, d["end"].get("sender_tcp_congestion")
    assert Path("/proc/sys/net/ipv4/tcp_congestion_control").read_text() == before


@pytest.mark.serial
def test_access_link_behind_the_terminal() -> None:
    spec = TestbedSpec(link=load_profile("geo"), access=load_profile("wifi", ["loss=0", "jitter_ms=0"]), seed=2)
    with Testbed(spec) as tb:
        r = measure.probe(tb.client, tb.server, count=10, interval_ms=50)
    expect = 530 + 2 * 2 + 2 * serialisation_ms(92, 10) + 2 * serialisation_ms(92, 50)
    assert r.received == 10 and abs(r.median - expect) < 2.0, (r.median, expect)
    assert tb.access_stats and tb.access_stats["forward"]["delivered"]["packets"] >= 10


#: The LEO profile's one-way delay (both directions) from each reconfiguration on, by second of the UTC minute.
LEO_DELAY_MS = {12: (28, 52, 12), 27: (12, 65, 25), 42: (25, 58, 18), 57: (18, 68, 28)}


@pytest.mark.serial
def test_leo_profile_steps_its_delay_at_the_scheduled_second() -> None:
    # Probe every 20 ms across the next reconfiguration (seconds 12, 27, 42 and 57 of each UTC minute,
    # with a 300 ms spike): before it the RTT is twice the old delay, during the spike twice the spike's,
    # after it twice the new delay, each switching within a probe interval of the schedule's instant.
    with Testbed(TestbedSpec(link=load_profile("leo"), seed=1)) as tb:
        now = time.time()
        minute = now - now % 60
        step = min(minute + s + k * 60 for k in (0, 1) for s in LEO_DELAY_MS if minute + s + k * 60 - now > 2.5)
        time.sleep(step - 1.5 - time.time())
        r = measure.probe(tb.client, tb.server, count=150, interval_ms=20, wait_ms=1000)
    before, spike, after = (2 * d for d in LEO_DELAY_MS[round(step - minute) % 60])

    def sent(lo: float, hi: float) -> list[float]:  # RTTs of probes sent from lo to hi s after the step
        return [x for i, x in enumerate(r.rtt_ms) if x is not None and lo <= r.sent_at_s(i) - step < hi]

    # The return delay of a probe, then the forward delay of its echo: a probe sent up to one one-way
    # delay before an instant meets the new forward delay.
    # No probe beats its delay (physics), and the median is at it: a step at the wrong second moves all
    # of them by 10 ms or more. A probe may come late when the host's scheduler holds a process: on
    # this slow day's 2-core machine, in CI 10 of 48 probes after a step came 2-14 ms late (one of 60
    # at +3 ms on earlier days), a local run had two of the spike's 5 at +10 and +17 ms; the cause is
    # not established. How late is a figure for the link benchmark, not a test: here only nine in ten
    # within 20 ms, which a step at the wrong second (or no step) fails.
    for rtts, want, least in ((sent(-1.4, -0.2), before, 50), (sent(0.05, 0.2), spike, 3),  # the spike loses 10 %
                              (sent(0.45, 1.4), after, 40)):                                 # each way
        assert len(rtts) >= least and min(rtts) > want - 0.5, (want, rtts)
        assert statistics.median(rtts) < want + 1.5, (want, rtts)
        assert sum(x < want + 20 for x in rtts) >= 0.9 * len(rtts), (want, rtts)
    # Nothing else in the window (the spike's 10 % loss aside) was out of place.
    assert r.received >= 140


def test_pcap_of_each_side(tmp_path: Path) -> None:
    with Testbed(TestbedSpec(link=load_profile("lan"), seed=1, pcap_dir=tmp_path)) as tb:
        measure.probe(tb.client, tb.server, count=5, interval_ms=10)
    for side in ("terminal", "gateway"):
        data = (tmp_path / "link" / f"{side}.pcap").read_bytes()
        magic, _, _, _, _, snap, linktype = struct.unpack("<IHHiIII", data[:24])
        assert magic == 0xA1B23C4D and linktype == 101
        n, off = 0, 24
        while off < len(data):
            incl = struct.unpack("<I", data[off + 8:off + 12])[0]
            assert data[off + 16] >> 4 == 4  # an IPv4 packet
            off += 16 + incl
            n += 1
        assert n >= 10  # 5 probes and 5 replies seen on each side


def test_many_clients_and_servers() -> None:
    with Testbed(TestbedSpec(link=load_profile("lan"), clients=3, servers=2, seed=1)) as tb:
        for c in tb.clients:
            for s in tb.servers:
                r = measure.probe(c, s, count=3, interval_ms=5)
                assert r.received == 3, (c.role, s.role)
        names = tb.clients[2].run(["getent", "hosts", "s2.test"], capture_output=True, text=True).stdout
        assert names.startswith("198.18.3.11")


def test_dns_lookups_cross_the_link() -> None:
    with Testbed(TestbedSpec(link=load_profile("geo"), dns=True, seed=1)) as tb:
        t = time.monotonic()
        p = tb.client.run(["getent", "hosts", "server.test"], capture_output=True, text=True, timeout=30)
        took = time.monotonic() - t
        assert p.stdout.split()[0] == "198.18.3.10", p.stdout + p.stderr
        assert 0.5 <= took < 2.5, took  # one round trip of the GEO link (530 ms), maybe two
        q = tb.client.run(["getent", "hosts", "s1.test"], capture_output=True, text=True, timeout=30)
        assert q.stdout.split()[0] == "198.18.3.10"
        # An unknown name is refused at once by the server, never forwarded.
        n = tb.client.run(["getent", "hosts", "nosuch.test"], capture_output=True, text=True, timeout=30)
        assert n.returncode != 0
    with Testbed(TestbedSpec(link=load_profile("geo"), seed=1)) as tb:
        t = time.monotonic()
        p = tb.client.run(["getent", "hosts", "server.test"], capture_output=True, text=True, timeout=30)
        assert p.stdout.split()[0] == "198.18.3.10" and time.monotonic() - t < 0.3  # hosts file: no lookup


@pytest.mark.serial
def test_a_measured_series_steps_its_rtt_at_its_second(tmp_path: Path) -> None:
    # A ping series of 4 s: 40 ms for 2 s, then 100 ms; as a profile (satbench series) repeating from
    # the start of each UTC minute, its step comes at seconds 2, 6, ... 58. Probes across the next one
    # see 40 ms before it and 100 ms after it.
    src = tmp_path / "ping.txt"
    src.write_text("".join(f"{t / 100:.2f} {40 if t < 200 else 100}\n" for t in range(400)))
    p = run_cli("series", str(src), "--out", str(tmp_path / "prof"), "--name", "stepped", "--align-minute",
                "--forward-mbps", "50", "--return-mbps", "50")
    assert p.returncode == 0, p.stderr
    with Testbed(TestbedSpec(link=load_profile(str(tmp_path / "prof" / "stepped.toml")), seed=1)) as tb:
        now = time.time()
        minute = now - now % 60
        step = min(minute + s for s in range(2, 120, 4) if minute + s - now > 2.5)
        time.sleep(step - 1.2 - time.time())
        r = measure.probe(tb.client, tb.server, count=120, interval_ms=20, wait_ms=1000)

    def sent(lo: float, hi: float) -> list[float]:
        return [x for i, x in enumerate(r.rtt_ms) if x is not None and lo <= r.sent_at_s(i) - step < hi]

    for rtts, want in ((sent(-1.0, -0.1), 40), (sent(0.1, 1.0), 100)):
        assert len(rtts) >= 30 and min(rtts) > want - 0.5, (want, rtts)
        assert statistics.median(rtts) < want + 1.5, (want, rtts)
