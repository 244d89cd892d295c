"""Measurements over a testbed: RTT and loss with the UDP probe, TCP bulk
transfers with iperf3, and the emulator's CPU time."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from dataclasses import dataclass
from typing import Any

from .. import prereq
from ..errors import TestbedError
from .host import Host
from .testbed import Testbed

PROBE_PORT = 9000
IPERF_PORT = 5201


@dataclass
class ProbeResult:
    sent: int
    received: int
    rtt_ms: list[float | None]
    #: Probe i left interval_ms x i after this wall-clock instant.
    start_unix_ns: int = 0
    interval_ms: float = 0.0

    def sent_at_s(self, i: int) -> float:
        """The unix time probe ``i`` was sent at."""
        return self.start_unix_ns / 1e9 + i * self.interval_ms / 1e3

    @property
    def rtts(self) -> list[float]:
        return [r for r in self.rtt_ms if r is not None]

    @property
    def loss(self) -> float:
        return 1 - self.received / self.sent if self.sent else 0.0

    def quantile(self, q: float) -> float:
        xs = sorted(self.rtts)
        if not xs:
            return float("nan")
        return xs[min(len(xs) - 1, max(0, round(q * (len(xs) - 1))))]

    @property
    def median(self) -> float:
        return statistics.median(self.rtts) if self.rtts else float("nan")


def _wait_port(host: Host, argv_ok: list[str], timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if host.run(argv_ok, capture_output=True).returncode == 0:
            return
        time.sleep(0.02)


def probe(client: Host, server: Host, *, count: int = 100, interval_ms: float = 10.0, size: int = 64,
          wait_ms: float = 3000.0) -> ProbeResult:
    """Send ``count`` UDP probes from ``client`` to an echo server on ``server``."""
    pb = str(prereq.probe_binary())
    duration = count * interval_ms / 1e3 + wait_ms / 1e3 + 10
    echo = server.popen([pb, "echo", "--port", str(PROBE_PORT), "--duration-s", f"{duration:.1f}"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = echo.stdout.readline() if echo.stdout else ""
        if "listening" not in line:
            raise TestbedError(f"probe echo server did not start: {echo.stderr.read() if echo.stderr else ''}")
        p = client.run([pb, "ping", f"{server.addr}:{PROBE_PORT}", "--count", str(count), "--interval-ms",
                        str(interval_ms), "--size", str(size), "--wait-ms", str(wait_ms)],
                       capture_output=True, text=True, timeout=duration + 30)
        if p.returncode != 0:
            raise TestbedError(f"probe failed: {p.stderr.strip()}")
        d = json.loads(p.stdout)
        return ProbeResult(sent=d["sent"], received=d["received"], rtt_ms=d["rtt_ms"],
                           start_unix_ns=int(d.get("start_unix_ns", 0)), interval_ms=float(interval_ms))
    finally:
        echo.kill()
        echo.wait()


@dataclass
class BulkResult:
    """A TCP bulk transfer from server to client (the forward direction)."""

    seconds: float
    bytes_received: int
    interval_bps: list[float]
    retransmits: int
    mss: int | None
    raw: dict[str, Any]

    def goodput_bps(self, skip_s: float = 0.0) -> float:
        """Mean goodput over the intervals after ``skip_s`` seconds (slow start)."""
        xs = self.interval_bps[int(skip_s):]
        return sum(xs) / len(xs) if xs else 0.0


def iperf3_server(server: Host) -> subprocess.Popen[str]:
    """A one-off iperf3 server on ``server``, returned once it says it listens (a client
    started earlier is refused, and iperf3 3.12 with -J still exits 0)."""
    srv = server.popen(["iperf3", "-s", "-1", "-p", str(IPERF_PORT), "--forceflush"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    assert srv.stdout is not None
    said = ""
    while "listening" not in said:  # its banner: a rule, then "Server listening on PORT"
        line = srv.stdout.readline()
        if not line:
            srv.kill()
            srv.wait()
            raise TestbedError(f"iperf3 server did not start: {said.strip()[-300:]}")
        said += line
    return srv


def bulk(client: Host, server: Host, *, seconds: float = 10.0, cc: str | None = None) -> BulkResult:
    """iperf3 download (server sends) for ``seconds``; one-second intervals."""
    # The client starts once the server says it listens (iperf3 3.12 with -J exits 0 on a refused
    # connection and reports the error inside its JSON: a client started early measured nothing).
    srv = iperf3_server(server)
    try:
        argv = ["iperf3", "-c", server.addr, "-p", str(IPERF_PORT), "-R", "-J", "-t", f"{seconds:g}", "-i", "1"]
        if cc:
            argv += ["-C", cc]
        p = client.run(argv, capture_output=True, text=True, timeout=seconds + 60)
        try:
            d = json.loads(p.stdout)
        except ValueError:
            raise TestbedError(f"iperf3 failed ({p.returncode}): {(p.stdout + p.stderr).strip()[-300:]}") from None
        if p.returncode != 0 or d.get("error"):
            raise TestbedError(f"iperf3 failed: {d.get('error') or (p.stdout + p.stderr).strip()[-300:]}")
    finally:
        srv.kill()
        srv.wait()
    intervals = [iv["sum"]["bits_per_second"] for iv in d["intervals"]]
    end = d["end"]
    recv = end.get("sum_received", {})
    got_s = float(recv.get("seconds", 0.0))
    if not intervals or not recv.get("bytes") or got_s < 0.9 * seconds:
        raise TestbedError(f"iperf3 carried {int(recv.get('bytes', 0))} bytes in {got_s:.2f} s of the {seconds:g} s "
                           "asked: nothing to judge a rate by")
    mss = d.get("start", {}).get("tcp_mss_default")
    return BulkResult(seconds=recv.get("seconds", seconds), bytes_received=int(recv.get("bytes", 0)),
                      interval_bps=intervals, retransmits=int(end.get("sum_sent", {}).get("retransmits", 0)),
                      mss=mss, raw=d)


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ideal_goodput_bps(rate_bps: float, mss: int = 1448, mtu: int = 1500) -> float:
    """TCP payload rate of a saturated link: each MTU-sized packet carries one MSS."""
    return rate_bps * mss / mtu


def emulator_pid(tb: Testbed) -> int:
    return tb.emulators["link"].pid
