"""``satbench bench link``: the emulator's own speed and error, as figures.

Measured on a fresh testbed each:
  - maximum TCP throughput through a zero-delay, unlimited link, and the
    emulator's CPU time per Gbit/s;
  - RTT error at 250 ms one-way delay (measured minus configured), idle and
    during a bulk transfer, with the same probe's RTT over one LAN hop that
    does not cross the emulator as a reference;
  - TCP goodput as a fraction of the ideal at 10 and 100 Mbit/s after slow start;
  - the emulator's CPU per packet with the satellite access on (DVB-S2 ACM
    with GSE forward, DVB-RCS2 DAMA with RLE return) against the same rates
    without it, under the same bulk transfer.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import threading
import time
from typing import Any

from .. import prereq
from ..link import profile
from ..link.profile import LinkProfile
from ..testbed import measure
from ..testbed.host import Host
from ..testbed.testbed import Testbed, TestbedSpec

TARGETS = {
    "throughput_gbps_min": 2.0,
    "cores_per_gbps_max": 0.5,
    "rtt_error_median_ms_max": 0.1,
    "rtt_error_p99_ms_max": 1.0,
    "goodput_fraction_min": 0.99,
    "access_cpu_overhead_max": 0.10,
}

#: The access cost comparison: about 400 Mbit/s each way, plain, then with ACM + DAMA.
_PLAIN = """name = "bench-plain"
[forward]
rate_mbps = 400
delay_ms = 5
queue_ms = 50
[return]
rate_mbps = 400
delay_ms = 5
queue_ms = 50
"""
_ACCESS = """name = "bench-access"
[forward]
delay_ms = 5
queue_ms = 50
[forward.access]
kind = "acm"
symbol_rate_baud = 90e6
[return]
rate_mbps = 400
delay_ms = 5
queue_ms = 50
[return.access]
kind = "dama"
[[terminals]]
forward = { clear_sky_cn_db = 20 }
return = { cra_mbps = 400 }
"""


def wire(overrides: list[str]) -> LinkProfile:
    """The unlimited, zero-delay link, with overrides."""
    return profile.load("wire", overrides)


def throughput(seconds: float) -> dict[str, Any]:
    with Testbed(TestbedSpec(link=wire([]), seed=1)) as tb:
        pid = measure.emulator_pid(tb)
        cpu0, t0 = measure.cpu_seconds(pid), time.monotonic()
        b = measure.bulk(tb.client, tb.server, seconds=seconds)
        cpu1, t1 = measure.cpu_seconds(pid), time.monotonic()
    gbps = b.bytes_received * 8 / b.seconds / 1e9
    cores = (cpu1 - cpu0) / (t1 - t0)
    return {"gbps": gbps, "emulator_cores": cores, "cores_per_gbps": cores / gbps if gbps else None,
            "retransmits": b.retransmits, "seconds": b.seconds}


def probe_errors(r: measure.ProbeResult, configured_ms: float) -> dict[str, Any]:
    errs = sorted(x - configured_ms for x in r.rtts)
    if not errs:
        return {"probes": r.sent, "received": 0}
    def q(p: float) -> float:
        return errs[min(len(errs) - 1, round(p * (len(errs) - 1)))]

    return {"probes": r.sent, "received": r.received, "median_ms": q(0.5), "p99_ms": q(0.99),
            "max_ms": errs[-1], "min_ms": errs[0]}


def _reference(tb: Testbed, count: int) -> dict[str, Any]:
    """The probe's RTT between a client and the terminal's LAN side: the same
    endpoints' stack and wake-up cost, without the emulator."""
    term_lan = Host("terminal-lan", tb.terminal.ns, "198.18.1.1")
    r = measure.probe(tb.client, term_lan, count=count, interval_ms=10)
    return {"median_ms": r.median, "p99_ms": r.quantile(0.99)}


def rtt_error(count: int, bulk_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {"one_way_ms": 250.0}
    with Testbed(TestbedSpec(link=wire(["delay_ms=250"]), seed=1)) as tb:
        out["reference_no_emulator"] = _reference(tb, count)
        out["idle"] = probe_errors(measure.probe(tb.client, tb.server, count=count, interval_ms=10), 500.0)
        res: dict[str, Any] = {}
        t = threading.Thread(target=lambda: res.update(b=measure.bulk(tb.client, tb.server, seconds=bulk_s)))
        t.start()
        time.sleep(2.0)  # past slow start's first round trips
        n = min(count, int((bulk_s - 3) * 100))
        out["bulk"] = probe_errors(measure.probe(tb.client, tb.server, count=n, interval_ms=10), 500.0)
        t.join()
        if "b" in res:
            out["bulk"]["bulk_mbps"] = res["b"].bytes_received * 8 / res["b"].seconds / 1e6
    return out


def goodput(rate_mbps: float, seconds: float, skip_s: float) -> dict[str, Any]:
    # A queue deeper than TCP's largest window: no loss, so the figure is the
    # rate the emulator delivers, not CUBIC's reaction to tail drops.
    link = wire([f"rate_mbps={rate_mbps}", "delay_ms=10", "queue_ms=4000"])
    # CUBIC, whatever the host's default: BBR's ProbeRTT would halve the rate
    # for 200 ms every 10 s and the figure would measure BBR, not the link.
    # Set on the testbed's routes (kernel-enforced) and on iperf3's sockets.
    with Testbed(TestbedSpec(link=link, seed=1, tcp_cc="cubic")) as tb:
        b = measure.bulk(tb.client, tb.server, seconds=seconds, cc="cubic")
        cc = tb.tcp_cc()
    reported = b.raw["end"].get("sender_tcp_congestion")  # None when iperf3's server did not send it
    mss = b.mss or 1448
    ideal = measure.ideal_goodput_bps(rate_mbps * 1e6, mss)
    g = b.goodput_bps(skip_s)
    drops = tb.link_stats["forward"]["dropped"] if tb.link_stats else {}
    return {"rate_mbps": rate_mbps, "rtt_ms": 20.0, "cc": cc, "cc_reported_by_iperf3": reported,
            "goodput_mbps": g / 1e6, "ideal_mbps": ideal / 1e6,
            "fraction": g / ideal, "mss": mss, "skipped_s": skip_s, "retransmits": b.retransmits,
            "link_drops": sum(v["packets"] for v in drops.values())}


def access_cost(seconds: float) -> dict[str, Any]:
    """Emulator CPU per packet through the same bulk transfer, without and with the satellite access."""
    out: dict[str, Any] = {}
    for name, text in (("plain", _PLAIN), ("access", _ACCESS)):
        with Testbed(TestbedSpec(link=profile.parse_profile(text, file=f"<bench {name}>"), seed=1)) as tb:
            pid = measure.emulator_pid(tb)
            cpu0 = measure.cpu_seconds(pid)
            b = measure.bulk(tb.client, tb.server, seconds=seconds)
            cpu = measure.cpu_seconds(pid) - cpu0
        stats = tb.link_stats or {}
        packets = sum(int(stats.get(d, {}).get("delivered", {}).get("packets", 0)) for d in ("forward", "return"))
        out[name] = {"mbps": b.bytes_received * 8 / b.seconds / 1e6, "packets": packets, "emulator_cpu_s": cpu,
                     "us_per_packet": cpu / packets * 1e6 if packets else None}
    p, a = out["plain"]["us_per_packet"], out["access"]["us_per_packet"]
    out["overhead"] = a / p - 1 if p and a else None
    # The model alone, in simulated time (no IO): what the access types cost per packet.
    r = subprocess.run([str(prereq.link_binary()), "--bench-model", "--packets", "200000"], capture_output=True,
                       text=True, timeout=300)
    out["model"] = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 and r.stdout.strip() else None
    return out


def run(quick: bool = False) -> dict[str, Any]:
    secs = 4.0 if quick else 10.0
    count = 150 if quick else 500
    res: dict[str, Any] = {
        "machine": {"cores": os.cpu_count(), "kernel": platform.release()},
        "targets": TARGETS,
        "throughput": throughput(secs),
        "rtt_error": rtt_error(count, 8.0 if quick else 12.0),
        "goodput": [goodput(r, 8.0 if quick else 15.0, 3.0) for r in (10.0, 100.0)],
        "access": access_cost(5.0 if quick else 10.0),
    }
    t, e = res["throughput"], res["rtt_error"]
    res["meets"] = {
        "throughput": t["gbps"] >= TARGETS["throughput_gbps_min"],
        "cpu": (t["cores_per_gbps"] or 9) <= TARGETS["cores_per_gbps_max"],
        "rtt_idle": e["idle"].get("median_ms", 9) <= TARGETS["rtt_error_median_ms_max"]
        and e["idle"].get("p99_ms", 9) <= TARGETS["rtt_error_p99_ms_max"],
        "goodput": all(g["fraction"] >= TARGETS["goodput_fraction_min"] for g in res["goodput"]),
        "access": (res["access"]["overhead"] if res["access"]["overhead"] is not None else 9)
        <= TARGETS["access_cpu_overhead_max"],
    }
    return res


def format_report(r: dict[str, Any]) -> str:
    t, e = r["throughput"], r["rtt_error"]
    def ok(b: bool) -> str:
        return "meets target" if b else "MISSES target"

    lines = [
        f"satbench bench link  ({r['machine']['cores']} cores, kernel {r['machine']['kernel']})",
        f"  zero-delay unlimited link: {t['gbps']:.2f} Gbit/s, emulator {t['emulator_cores']:.2f} cores"
        f" = {t['cores_per_gbps']:.3f} cores per Gbit/s  [{ok(r['meets']['throughput'] and r['meets']['cpu'])}:"
        f" >= 2 Gbit/s at <= 0.5 core/Gbit/s]",
        "  RTT error at 250 ms one way (measured - configured):",
    ]
    for k in ("idle", "bulk"):
        x = e[k]
        extra = f", during {x['bulk_mbps']:.0f} Mbit/s bulk" if "bulk_mbps" in x else ""
        lines.append(f"    {k:5s} median {x['median_ms']:+.3f} ms, p99 {x['p99_ms']:+.3f} ms, max {x['max_ms']:+.3f} ms"
                     f" ({x['received']}/{x['probes']} probes{extra})")
    ref = e["reference_no_emulator"]
    lines.append(f"    reference: same probe over one LAN hop without the emulator: median {ref['median_ms']:.3f} ms,"
                 f" p99 {ref['p99_ms']:.3f} ms")
    lines.append(f"    [{ok(r['meets']['rtt_idle'])}: idle median <= 0.1 ms, p99 <= 1 ms]")
    for g in r["goodput"]:
        lines.append(f"  goodput at {g['rate_mbps']:g} Mbit/s ({g['cc']}, 20 ms RTT, after {g['skipped_s']:g} s):"
                     f" {g['goodput_mbps']:.3f} of ideal {g['ideal_mbps']:.3f} Mbit/s = {100 * g['fraction']:.2f} %")
    lines.append(f"    [{ok(r['meets']['goodput'])}: >= 99 %]")
    a = r["access"]
    lines.append("  satellite access (ACM + GSE forward, DAMA + RLE return) against the same link without it:")
    for k in ("plain", "access"):
        x = a[k]
        lines.append(f"    {k:6s} {x['mbps']:.0f} Mbit/s, {x['packets']} packets, "
                     f"{x['us_per_packet']:.2f} us of emulator CPU per packet")
    over = a["overhead"]
    lines.append(f"    access adds {100 * over:+.1f} % per packet  [{ok(r['meets']['access'])}: <= +10 %]"
                 if over is not None else "    access overhead: not measured")
    m = a.get("model")
    if m:
        lines.append(f"    the model alone (no IO): {m['plain_ns_per_packet']:.0f} ns per packet plain, "
                     f"{m['access_ns_per_packet']:.0f} ns with the access ({m['access_overhead_pct']:+.0f} %), "
                     f"against {m['io_ns_per_packet']:.0f} ns of IO per packet")
    return "\n".join(lines)
