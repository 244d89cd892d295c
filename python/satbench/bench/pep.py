"""``satbench bench pep``: the split-TCP PEP's relay throughput, its CPU per
Gbit/s and the latency it adds to a connection's set-up, on a zero-delay
testbed (the `wire` link, no rate limit) with the PEP at the gateway.

- Throughput: one iperf3 download, server to client, through the PEP, and
  the same without it (the emulator alone). The PEP's CPU is its own process's
  (utime + stime from /proc), divided by the gigabits it relayed.
- Set-up: 200 connections, each connect, one byte each way and close, timed
  in the client's namespace against a one-byte echo on the server; the median
  with the PEP against without.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from ..experiment.trialspec import TrialSpec
from ..path.pep import Pep
from ..testbed import measure
from ..testbed.testbed import Testbed, TestbedSpec
from .link import wire

#: Targets (issue 10): like the emulator's.
THROUGHPUT_MIN_GBPS = 2.0
CPU_MAX_CORE_PER_GBPS = 0.5
CONNECTIONS = 200
ECHO_PORT = 7007

_ECHO = f"""
import socket
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {ECHO_PORT}))
s.listen(512)
print("ready", flush=True)
while True:
    c, _ = s.accept()
    b = c.recv(1)
    if b:
        c.sendall(b)
    c.close()
"""

_CONNECTS = """
import socket, sys, time, json
out = []
for _ in range(int(sys.argv[2])):
    t = time.perf_counter()
    s = socket.create_connection((sys.argv[1], {port}), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"x")
    assert s.recv(1) == b"x"
    out.append((time.perf_counter() - t) * 1e6)
    s.close()
print(json.dumps(out))
""".replace("{port}", str(ECHO_PORT))


def _cpu_s(pid: int) -> float:
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def _setup_us(tb: Testbed, n: int) -> float:
    echo = tb.server.popen([sys.executable, "-c", _ECHO], stdout=subprocess.PIPE, text=True)
    try:
        assert echo.stdout is not None
        echo.stdout.readline()
        p = tb.client.run([sys.executable, "-c", _CONNECTS, tb.server.addr, str(n)], capture_output=True, text=True,
                          timeout=120)
        if p.returncode != 0:
            raise RuntimeError(p.stderr.strip()[-300:])
        return float(statistics.median(json.loads(p.stdout)))
    finally:
        echo.kill()
        echo.wait()


def _one(pep: bool, seconds: float, connections: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="satbench-bench-pep-") as tmp, \
            Testbed(TestbedSpec(link=wire([]), seed=1, tcp_cc="cubic")) as tb:
        if not pep:
            b = measure.bulk(tb.client, tb.server, seconds=seconds)
            return {"gbps": b.goodput_bps(skip_s=1) / 1e9, "setup_us": _setup_us(tb, connections)}
        trial = TrialSpec.of({"link": "lan", "protocol": "h2", "page": "blank", "pep": "gateway"})
        element = Pep("gateway", {}, trial)
        with element.start(tb, Path(tmp)):
            pid = element.running["gateway"]["proc"].pid
            cpu0 = _cpu_s(pid)
            b = measure.bulk(tb.client, tb.server, seconds=seconds)
            cpu = _cpu_s(pid) - cpu0
            setup = _setup_us(tb, connections)
        relayed_gbit = b.bytes_received * 8 / 1e9
        return {"gbps": b.goodput_bps(skip_s=1) / 1e9, "pep_cpu_s": cpu, "seconds": b.seconds,
                "pep_core_per_gbps": cpu / relayed_gbit if relayed_gbit else None, "setup_us": setup,
                "accepted": (element.summary()["gateway"]["summary"] or {}).get("accepted")}


def run(quick: bool = False) -> dict[str, Any]:
    seconds, n = (3.0, 50) if quick else (6.0, CONNECTIONS)
    plain = _one(False, seconds, n)
    pep = _one(True, seconds, n)
    meets = (pep["gbps"] >= THROUGHPUT_MIN_GBPS and pep["pep_core_per_gbps"] is not None
             and pep["pep_core_per_gbps"] <= CPU_MAX_CORE_PER_GBPS)
    return {"plain": plain, "pep": pep, "setup_added_us": pep["setup_us"] - plain["setup_us"], "connections": n,
            "targets": {"gbps_min": THROUGHPUT_MIN_GBPS, "core_per_gbps_max": CPU_MAX_CORE_PER_GBPS},
            "meets": meets, "machine": {"cores": os.cpu_count(), "kernel": platform.release()}}


def format_report(r: dict[str, Any]) -> str:
    p, q = r["pep"], r["plain"]
    return "\n".join([
        f"satbench bench pep  ({r['machine']['cores']} cores, kernel {r['machine']['kernel']}): zero-delay wire link, "
        "PEP at the gateway, one iperf3 download",
        f"  through the PEP   {p['gbps']:6.2f} Gbit/s   PEP {p['pep_cpu_s'] / p['seconds']:.2f} core "
        f"({p['pep_core_per_gbps']:.3f} core per Gbit/s)",
        f"  without a PEP     {q['gbps']:6.2f} Gbit/s",
        f"  set-up, {r['connections']} connections (connect, 1 byte each way): median {p['setup_us']:.0f} us through "
        f"the PEP, {q['setup_us']:.0f} us without: +{r['setup_added_us']:.0f} us",
        f"  [meets target: >= {r['targets']['gbps_min']:g} Gbit/s at <= {r['targets']['core_per_gbps_max']:g} core "
        f"per Gbit/s: {r['meets']}]"])
