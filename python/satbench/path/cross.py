"""Other users' traffic on the trial's link: competing flows between a host
of their own behind the terminal (``xclient``) and one behind the gateway
(``xserver``), started before the trial's load and running through it.

    cross = "bulk"                  one bulk TCP download (iperf3), CUBIC
    cross = "video"                 a video-like download: a 2 s segment at 5 Mbit/s every 2 s
    cross = "web"                   web-like downloads: 500 KB pages arriving as a Poisson process, 1 per s
    cross = { kind = "bulk", direction = "up", cc = "bbr", flows = 4 }
    cross = { kind = "video", bitrate_mbps = 8, segment_s = 4 }
    cross = { kind = "video", bitrate_mbps = [1, 2.5, 5, 8] }   a bitrate ladder
    cross = { kind = "web", rate_per_s = 3, size_kb = 300, lead_s = 5 }

``direction`` is ``down`` (the server sends, the default) or ``up``;
``lead_s`` (default 3) is how long the flows run before the trial's load
starts (a bulk flow fills the path first). A video flow with a ladder of
bitrates (a list, lowest first) adapts as a player does: its first segment
at the lowest rung, each next one at the highest rung at most 0.8 times the
throughput its last segment got; the rungs it chose are in
``env.path.cross.rungs`` (each segment fetched whole). The bulk flow is iperf3 with its
congestion control set on its socket; the video and web flows are curl
against satbench-server (cleartext HTTP/1.1; uploads to its sink), each
fetch a new connection. The flows use the trial's address family: IPv4
with ``ip = "v4"``, IPv6 with ``"v6"`` and with ``"dual"`` (what a
dual-stack host's address selection picks when both ends have global
IPv6 addresses).

What they carried while the trial's load ran is measured at their
receiver's interface, past the bottleneck (bytes into ``xclient`` going
down, into ``xserver`` going up; IP and Ethernet headers included):
``cross_bytes`` and ``cross_mbps``; with the load's own bytes received,
``load_share`` (an approximation: the load's are payload bytes). The link's own counters then
hold both the trial's and the cross traffic, so the trial's wire bytes and
overhead are not taken from them (``LinkCounters`` metrics left out): the
element says it shares the link.
"""

from __future__ import annotations

import random
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import TestbedError
from ..testbed.host import address_family, bracketed
from . import PathElement

if TYPE_CHECKING:
    from ..endpoints.satbench_server import SatbenchServer
    from ..testbed.host import Host
    from ..testbed.testbed import Testbed, TestbedSpec

KINDS = ("bulk", "video", "web")
DEFAULTS: dict[str, dict[str, Any]] = {
    "bulk": {"direction": "down", "cc": "cubic", "flows": 1, "lead_s": 3.0},
    "video": {"direction": "down", "bitrate_mbps": 5.0, "segment_s": 2.0, "lead_s": 3.0},
    "web": {"direction": "down", "rate_per_s": 1.0, "size_kb": 500, "lead_s": 3.0},
}
#: Each key's check: (kind of value, low, high).
RANGES: dict[str, tuple[type, float, float]] = {
    "flows": (int, 1, 64), "bitrate_mbps": (float, 0.01, 10_000), "segment_s": (float, 0.1, 60),
    "rate_per_s": (float, 0.01, 100), "size_kb": (int, 1, 1_000_000), "lead_s": (float, 0, 600),
}
IPERF_PORT = 5202
#: A ladder's longest, and the share of the last segment's throughput the next rung may use.
MAX_RUNGS = 10
LADDER_SAFETY = 0.8


def options(value: Any) -> dict[str, Any]:
    """The value as a full table (its kind's defaults filled)."""
    v = {"kind": value} if isinstance(value, str) else dict(value)
    return {"kind": v["kind"], **DEFAULTS[v["kind"]], **{k: x for k, x in v.items() if k != "kind"}}


class CrossTraffic(PathElement):
    factor = "cross"
    default = "none"
    meaning = ("other users' traffic sharing the link, from hosts of their own, started before the load and "
               "running through it: bulk (iperf3 TCP), video (segments at a bitrate, or adapting over a ladder "
               "of them) or web (Poisson page downloads), or a table {kind, direction, cc, flows, bitrate_mbps, "
               "segment_s, rate_per_s, size_kb, lead_s}")
    max_terminals = 1
    noun = "cross traffic"
    ipv6 = True
    #: Its flows cross the satellite link too: the link's counters are not the trial's alone.
    shares_link = True
    #: The HTTP origin of the video and web flows, while they run.
    _server: "SatbenchServer | None" = None

    @classmethod
    def check(cls, value: Any) -> str | None:
        if value == cls.default:
            return None
        if isinstance(value, str):
            return None if value in KINDS else f"must be none, {', '.join(KINDS)} or a table, got {value!r}"
        if not isinstance(value, dict):
            return f"must be none, {', '.join(KINDS)} or a table, got {value!r}"
        kind = value.get("kind")
        if kind not in KINDS:
            return f"kind must be one of {', '.join(KINDS)}, got {kind!r}"
        known = set(DEFAULTS[kind]) | {"kind"}
        if extra := sorted(set(value) - known):
            return f"unknown key {extra[0]!r} for {kind} (known: {', '.join(sorted(known))})"
        if value.get("direction", "down") not in ("down", "up"):
            return f"direction must be down or up, got {value['direction']!r}"
        if "cc" in value and value["cc"] not in ("cubic", "bbr", "reno"):
            return f"cc must be cubic, bbr or reno, got {value['cc']!r}"
        for k, (typ, lo, hi) in RANGES.items():
            if k in value:
                x = value[k]
                if k == "bitrate_mbps" and isinstance(x, list):
                    if not 1 <= len(x) <= MAX_RUNGS or not all(
                            isinstance(r, (int, float)) and not isinstance(r, bool) and lo <= r <= hi for r in x):
                        return (f"bitrate_mbps: a ladder is 1 to {MAX_RUNGS} numbers from {lo:g} to {hi:g}, "
                                f"got {x!r}")
                    if any(b <= a for a, b in zip(x, x[1:])):
                        return f"bitrate_mbps: a ladder's rungs must rise, got {x!r}"
                    continue
                ok = (isinstance(x, int) if typ is int else isinstance(x, (int, float))) and not isinstance(x, bool)
                if not ok or not lo <= x <= hi:
                    return f"{k} must be a {'whole ' if typ is int else ''}number from {lo:g} to {hi:g}, got {x!r}"
        return None

    @classmethod
    def label(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        o = {k: v for k, v in value.items() if k != "kind"}
        return f"{value['kind']}" + (" " + ",".join(f"{k}={v}" for k, v in sorted(o.items())) if o else "")

    @classmethod
    def extra_s(cls, value: Any) -> float:
        return float(options(value)["lead_s"]) + 1.0  # its lead, and stopping its flows

    def configure(self, spec: "TestbedSpec") -> None:
        spec.cross = True

    @contextmanager
    def start(self, tb: "Testbed", artefacts: Path) -> Iterator[None]:
        o = options(self.value)
        self._o, self._tb = o, tb
        self._procs: list[subprocess.Popen[Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._errors: list[str] = []
        self._fetches = 0
        client, server = tb.cross_client, tb.cross_server
        assert client is not None and server is not None, "the testbed has no cross-traffic hosts"
        with tempfile.TemporaryDirectory(prefix="satbench-cross-") as tmp:
            try:
                if o["kind"] == "bulk":
                    self._bulk(client, server, o)
                else:
                    self._http(client, server, o, Path(tmp))
                time.sleep(float(o["lead_s"]))
                self._mark = self._counter()  # satbench shell's window: from here to the end
                yield
            finally:
                try:
                    self._end = getattr(self, "_end", None) or self._counter()
                except (OSError, ValueError, subprocess.SubprocessError):
                    self._end = None
                self._stop.set()
                if self._server is not None:
                    self._server.stop()
                with self._lock:
                    procs = list(self._procs)
                for p in procs:
                    p.terminate()
                for p in procs:
                    try:
                        p.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
                for t in getattr(self, "_threads", []):
                    t.join(timeout=10)

    def load_starting(self, tb: "Testbed") -> None:
        # What the flows carried is counted over the trial's load only.
        self._mark = self._counter()

    def load_done(self, tb: "Testbed") -> None:
        self._end = self._counter()

    # -- the flows ------------------------------------------------------------------

    def _bulk(self, client: "Host", server: "Host", o: dict[str, Any]) -> None:
        srv = server.popen(["iperf3", "-s", "-p", str(IPERF_PORT)], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        self._procs.append(srv)
        deadline = time.monotonic() + 5
        while server.run(["ss", "-ltnH", f"sport = :{IPERF_PORT}"], capture_output=True, text=True).stdout == "":
            if time.monotonic() > deadline:
                raise TestbedError("cross traffic: iperf3 did not listen on the cross server")
            time.sleep(0.05)
        argv = ["iperf3", "-c", _address(server), "-p", str(IPERF_PORT), "-t", "86400", "-C", str(o["cc"]),
                "-P", str(o["flows"])] + (["-R"] if o["direction"] == "down" else [])
        self._procs.append(client.popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def _http(self, client: "Host", server: "Host", o: dict[str, Any], tmp: Path) -> None:
        from ..endpoints.satbench_server import SatbenchServer  # noqa: PLC0415 - only HTTP cross traffic serves

        rates = _ladder(o)
        sizes = ([int(r * 1e6 / 8 * o["segment_s"]) for r in rates] if o["kind"] == "video"
                 else [int(o["size_kb"]) * 1000])
        root = tmp / "www"
        root.mkdir()
        for i, size in enumerate(sizes):
            (root / f"object-{i}.bin").write_bytes(random.Random(size).randbytes(size))
        srv = SatbenchServer(root, tmp / "logs", host=server, tls=False, telemetry=False, cc="cubic")
        self._server = srv
        origin = f"http://{bracketed(_address(server))}"
        self.rungs: list[float] = []

        def argv(i: int) -> list[str]:
            """curl for object i, printing what it moved and how long it took."""
            timing = ["-w", "%{size_download} %{size_upload} %{time_total}"]
            if o["direction"] == "down":
                return ["curl", "-s", "-o", "/dev/null", *timing, f"{origin}/object-{i}.bin"]
            return ["curl", "-s", "-o", "/dev/null", *timing, "--data-binary", f"@{root / f'object-{i}.bin'}",
                    f"{origin}/upload"]

        def fetch(i: int = 0) -> float | None:
            """One fetch, its curl tracked (the element ends it with the trial), its failure recorded;
            the throughput it got (Mbit/s), or None."""
            try:
                with self._lock:
                    if self._stop.is_set():
                        return None
                    p = client.popen(argv(i), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                    self._procs.append(p)
                out, _ = p.communicate()
                rc = p.returncode
                with self._lock:
                    self._fetches += 1
                    self._procs.remove(p)
                if rc != 0:
                    if not self._stop.is_set():
                        self._errors.append(f"curl exited {rc}")
                    return None
                down, up, took = (float(x) for x in out.split())
                return (down + up) * 8 / took / 1e6 if took > 0 else None
            except Exception as e:  # noqa: BLE001 - a fetch that fails must say so, not end the flow silently
                self._errors.append(f"fetch: {type(e).__name__}: {e}")
                return None

        def video() -> None:
            rung = 0
            while not self._stop.is_set():
                t0 = time.monotonic()
                got = fetch(rung)
                if got is not None:
                    self.rungs.append(rates[rung])  # (segments fetched whole only)
                    rung = next_rung(rates, got)
                self._stop.wait(max(0.0, float(o["segment_s"]) - (time.monotonic() - t0)))

        def web() -> None:
            # Arrivals seeded by the trial's page and link: the same schedule for a trial's repetitions.
            rng = random.Random(f"{self.trial.page}/{self.trial.link}")
            while not self._stop.wait(rng.expovariate(float(o["rate_per_s"]))):
                threading.Thread(target=fetch, daemon=True).start()

        t = threading.Thread(target=video if o["kind"] == "video" else web, daemon=True)
        t.start()
        self._threads = [t]

    # -- what they carried ------------------------------------------------------------

    def family(self) -> str | None:
        """The flows' address family (``ipv4`` or ``ipv6``): of the address they went to (None before
        they started)."""
        tb = getattr(self, "_tb", None)
        if tb is None or tb.cross_server is None:
            return None
        return address_family(_address(tb.cross_server))

    def _counter(self) -> tuple[float, int]:
        """(now, the bytes the flows' receiver has taken in so far: past the bottleneck, either way)."""
        host = self._tb.cross_client if self._o["direction"] == "down" else self._tb.cross_server
        assert host is not None
        p = host.run(["cat", "/sys/class/net/eth0/statistics/rx_bytes"], capture_output=True, text=True)
        return time.monotonic(), int(p.stdout.strip() or 0)

    def metrics(self) -> dict[str, float | None]:
        mark, end = getattr(self, "_mark", None), getattr(self, "_end", None)
        if mark is None or end is None or end[0] <= mark[0]:
            return {}
        nbytes = end[1] - mark[1]
        return {"cross_bytes": float(nbytes), "cross_mbps": nbytes * 8 / (end[0] - mark[0]) / 1e6}

    def summary(self) -> dict[str, Any]:
        out = {**options(self.value), "fetches": self._fetches if hasattr(self, "_fetches") else None,
               "family": self.family()}
        if isinstance(out.get("bitrate_mbps"), list):  # a ladder: the rung of each segment, in order
            out["rungs"] = list(getattr(self, "rungs", []))
        return out

    def fault(self) -> str | None:
        if getattr(self, "_errors", None):
            return f"cross traffic: {self._errors[0]}"
        if getattr(self, "_o", {}).get("kind") == "bulk":  # iperf3 runs for the whole trial
            dead = [p for p in self._procs if p.poll() is not None]
            if dead and not self._stop.is_set():
                return f"cross traffic: iperf3 exited ({dead[0].returncode})"
        return None

    def describe(self) -> list[str]:
        m = self.metrics()
        return [f"cross traffic {self.label(self.value)}: {m['cross_mbps']:.2f} Mbit/s while the load ran"] if m else []


def _address(server: "Host") -> str:
    """Where the flows go: the cross server's IPv6 address where the testbed gave it one (the trial's
    ``ip`` is v6 or dual), else its IPv4 one."""
    return server.addr6 or server.addr


def next_rung(rates: list[float], got_mbps: float) -> int:
    """The rung of a ladder (rates lowest first) a player picks after a segment that got ``got_mbps``:
    the highest at most LADDER_SAFETY times it, the lowest if none is."""
    return max([0, *(k for k, r in enumerate(rates) if r <= LADDER_SAFETY * got_mbps)])


def _ladder(o: dict[str, Any]) -> list[float]:
    """A video flow's bitrates (Mbit/s), lowest first: its ladder, or its one bitrate."""
    r = o.get("bitrate_mbps", DEFAULTS["video"]["bitrate_mbps"])
    return [float(x) for x in r] if isinstance(r, list) else [float(r)]
