"""The synthetic loader (``satbench-load``, Rust): many light clients, each
loading a page with a browser's connection policy, or one URL with a
curl-style breakdown, or a bulk download with progress.

It runs in the calling namespace (inside ``satbench shell``, behind the
link). Page metrics follow the studies' definitions: PLT is the last object
done, FCP the first object after the HTML done, LCP the largest object done;
all in seconds from the client's start.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .. import prereq
from ..errors import InputError, PrerequisiteError, TestbedError
from ..model import (
    DEFAULT_QUIC_STACK,
    QUIC_STACKS,
    ClientKind,
    ClientOutcome,
    ClientResult,
    ObjectTiming,
    Protocol,
    TrialStatus,
    choices,
    jain,
)
from . import ca as ca_mod
from .base import Client, LoadRequest

MODES = ("page", "single", "bulk", "realtime")


def loader_binary() -> Path:
    return prereq.REPO / "target" / "release" / "satbench-load"


@dataclass(kw_only=True)
class LoadOptions:
    protocol: str
    clients: int = 1
    connections: int = 6
    mode: str = "page"
    repeat: int = 1
    timeout_s: float = 120.0
    connect_to: str | None = None
    #: Start at this unix time (ns), waiting for it (a population's barrier).
    start_at_ns: int | None = None
    quic_stack: str = DEFAULT_QUIC_STACK
    #: Fixed QUIC windows to advertise (connection and stream); None: the stack's own.
    quic_window: int | None = None
    #: POST this many bytes to the URL (mode "single"; the server's upload sink).
    upload: int | None = None
    #: Mode "realtime": the mechanism (poll, sse, ws); the URL's query is the scenario.
    realtime: str | None = None
    #: Load the page twice per client, the second as a returning client (its TLS sessions kept);
    #: open TCP connections with TCP Fast Open.
    repeat_view: bool = False
    tfo: bool = False
    #: A browser's request schedule to replay (a file; schedule.rs) instead of discovering the page.
    schedule: str | None = None

    def validate(self) -> None:
        if self.protocol not in choices(Protocol):
            raise InputError(f"--protocol: must be one of {', '.join(choices(Protocol))}, got {self.protocol!r}")
        if self.clients < 1:
            raise InputError(f"--clients: must be at least 1, got {self.clients}")
        if self.connections < 1:
            raise InputError(f"--connections: must be at least 1, got {self.connections}")
        if self.mode not in MODES:
            raise InputError(f"mode: must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.repeat < 1 or (self.repeat > 1 and self.mode == "page"):
            raise InputError(f"repeat: must be 1 for a page load and at least 1 otherwise, got {self.repeat}")
        if self.timeout_s <= 0:
            raise InputError(f"--timeout: must be positive, got {self.timeout_s}")
        if self.quic_stack not in QUIC_STACKS:
            raise InputError(f"--quic-stack: must be quiche or quinn, got {self.quic_stack!r}")
        if self.quic_window is not None and not 1024 <= self.quic_window <= 1 << 40:
            raise InputError(f"--quic-window: must be 1024 bytes to 1 TiB, got {self.quic_window}")
        if self.upload is not None and (self.upload < 1 or self.mode != "single"):
            raise InputError(f"--upload: must be at least 1 byte, in single mode, got {self.upload} ({self.mode})")
        if (self.mode == "realtime") != (self.realtime in ("poll", "sse", "ws")):
            raise InputError(f"--realtime: poll, sse or ws, in realtime mode, got {self.realtime!r} ({self.mode})")
        if self.schedule is not None and self.mode != "page":
            raise InputError(f"--schedule: replays a page load, not {self.mode} mode")
        if self.mode == "realtime" and self.protocol == "h3":
            raise InputError("--realtime: runs over h1 or h2 (over HTTP/3 the server has WebTransport only, which "
                             "the loader does not speak)")

    def argv(self, url: str) -> list[str]:
        argv = [str(loader_binary()), url, "--protocol", self.protocol, "--clients", str(self.clients),
                "--connections", str(self.connections), "--timeout", str(self.timeout_s)]
        if url.startswith("https://"):
            argv += ["--cacert", str(ca_mod.ensure().cert)]
        if self.mode == "realtime":
            argv += ["--realtime", str(self.realtime)]
        elif self.mode != "page":
            argv += [f"--{self.mode}", "--repeat", str(self.repeat)]
        if self.connect_to:
            argv += ["--connect-to", self.connect_to]
        if self.start_at_ns is not None:
            argv += ["--start-at", str(self.start_at_ns)]
        if self.upload is not None:
            argv += ["--upload", str(self.upload)]
        if self.repeat_view:
            argv += ["--repeat-view"]
        if self.tfo:
            argv += ["--tfo"]
        if self.schedule is not None:
            argv += ["--schedule", str(Path(self.schedule).resolve())]
        if self.protocol == "h3":
            argv += ["--quic-stack", self.quic_stack]
            if self.quic_window is not None:
                argv += ["--quic-max-data", str(self.quic_window), "--quic-max-stream-data", str(self.quic_window)]
        return argv


@dataclass
class LoadRun:
    """What one run of the loader reported: one entry per client."""

    url: str
    protocol: str
    clients: list[dict[str, Any]] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return all(c["valid"] for c in self.clients)

    def to_json(self) -> dict[str, Any]:
        return self.raw


def load(url: str, opts: LoadOptions, *, stderr: Any = None, run: Callable[..., Any] = subprocess.run) -> LoadRun:
    """Run the loader (here, or with ``run``, e.g. ``Host.run``, elsewhere); raise
    on a crash, report invalid loads in the result."""
    opts.validate()
    if opts.protocol != "h1" and not url.startswith("https://"):
        raise InputError("HTTP/2 and HTTP/3 need an https:// URL")
    b = loader_binary()
    if not b.is_file():
        raise PrerequisiteError([f"no loader binary at {b}: run 'cargo build --release' (scripts/setup does)"])
    p = run(opts.argv(url), stdout=subprocess.PIPE, stderr=stderr if stderr is not None else subprocess.PIPE,
                       text=True, timeout=opts.timeout_s + 30)
    if p.returncode != 0:
        raise TestbedError(f"satbench-load failed ({p.returncode}): {(p.stderr or '').strip()}")
    d = json.loads(p.stdout)
    return LoadRun(url=url, protocol=opts.protocol, clients=d["clients"], cpu_s=d["cpu_ms"] / 1e3,
                   wall_s=d["wall_ms"] / 1e3, raw=d)


def format_run(r: LoadRun) -> str:
    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.0f} ms"

    if r.raw.get("mode") == "realtime":
        return format_realtime(r)

    lines = [f"{r.url} over {r.raw.get('protocol')}: {sum(c['valid'] for c in r.clients)} of {len(r.clients)} "
             f"clients valid; {r.cpu_s:.2f} CPU-s in {r.wall_s:.2f} s "
             f"({100 * r.cpu_s / max(r.wall_s, 1e-9):.1f} % of a core)"]
    for c in r.clients:
        state = "valid" if c["valid"] else f"INVALID: {c['invalid_reason']}"
        mbps = "-" if c["throughput_mbps"] is None else f"{c['throughput_mbps']:.2f} Mbit/s"
        lines.append(f"  client {c['client']}: {state}; PLT {ms(c['plt_ms'])}, TTFB {ms(c['ttfb_ms'])}, "
                     f"FCP {ms(c['fcp_ms'])}, LCP {ms(c['lcp_ms'])}; {c['objects_n']} objects, {c['bytes']} bytes "
                     f"on {len(c['connections'])} connections, {mbps}")
    if len(r.clients) == 1 and r.raw.get("mode") != "page":
        t = r.clients[0]["timeline"]
        lines.append("  " + ", ".join(f"{k[:-3]} {ms(v)}" for k, v in t.items() if v is not None))
    if r.raw.get("mode") == "upload":
        m = outcome(r.raw, True).metrics
        rate = "-" if m["upload_mbps"] is None else f"{m['upload_mbps']:.2f} Mbit/s"
        lines.append(f"  uploaded {m['bytes_sent']} bytes: {ms(m['upload_ms'])} until the server's answer, {rate}")
    return "\n".join(lines)


def realtime_outcome(d: dict[str, Any]) -> ClientOutcome:
    """The loader's report of a real-time run: its clients' validity; what
    they sent and had is judged by :mod:`satbench.realtime` from ``raw``."""
    cs = d["clients"]
    clients = [ClientResult(client=c["client"], valid=c["valid"], reason=c["invalid_reason"], plt_ms=None,
                            fcp_ms=None, lcp_ms=None, ttfb_ms=None, bytes=0, throughput_mbps=None) for c in cs]
    bad = [c for c in cs if not c["valid"]]
    out = ClientOutcome(status=TrialStatus.INVALID if bad else TrialStatus.VALID,
                        reason=f"client {bad[0]['client']}: {bad[0]['invalid_reason']}" if bad else None,
                        objects=[], clients=clients, raw=d, load_s=d["wall_ms"] / 1e3,
                        start_unix_ms=d["start_unix_ns"] / 1e6 if d.get("start_unix_ns") else None)
    protocols = sorted({str(conn.get("protocol")) for c in cs for conn in c["connections"]})
    out.env = {"realtime": d["mechanism"], "protocols": protocols}
    want = "h2" if d["protocol"] == "h2" else "http/1.1"
    if out.status is TrialStatus.VALID and protocols != [want]:
        out.status, out.reason = TrialStatus.INVALID, f"the loader's connections spoke {protocols}, not {want}"
    out.metrics = {"connections_opened": sum(len(c["connections"]) for c in cs),
                   "loader_cpu_s": d["cpu_ms"] / 1e3, "loader_wall_s": d["wall_ms"] / 1e3}
    return out


def format_realtime(r: LoadRun) -> str:
    """A real-time run: per client, its messages each way and their latency (stamps on the one clock)."""
    lines = [f"{r.url} over {r.raw.get('protocol')} by {r.raw.get('mechanism')}: "
             f"{sum(c['valid'] for c in r.clients)} of {len(r.clients)} clients valid; {r.cpu_s:.2f} CPU-s in "
             f"{r.wall_s:.2f} s"]
    for c in r.clients:
        rt = c["realtime"]
        lat = sorted(m["recv_ms"] - m["t_ms"] for m in rt["down"])
        setup = None if rt.get("open_ms") is None else rt["open_ms"] - rt["start_ms"]
        state = "valid" if c["valid"] else f"INVALID: {c['invalid_reason']}"
        down = (f"latency median {statistics.median(lat):.1f} ms, max {lat[-1]:.1f} ms" if lat else "")
        lines.append(f"  client {c['client']} ({rt['session']}): {state}; set-up "
                     f"{'-' if setup is None else f'{setup:.0f} ms'}; {len(rt['up'])} sent, {len(rt['down'])} "
                     f"had{'; ' + down if down else ''}; {len(c['connections'])} connections")
    return "\n".join(lines)


def outcome(d: dict[str, Any], single: bool) -> ClientOutcome:
    """The loader's report (its JSON output) as the runner's outcome."""
    if d.get("mode") == "realtime":
        return realtime_outcome(d)
    cs = d["clients"]
    clients = [ClientResult(client=c["client"], valid=c["valid"], reason=c["invalid_reason"], plt_ms=c["plt_ms"],
                            fcp_ms=c["fcp_ms"], lcp_ms=c["lcp_ms"], ttfb_ms=c["ttfb_ms"],
                            bytes=c["bytes"], throughput_mbps=c["throughput_mbps"]) for c in cs]
    objects = [ObjectTiming(client=c["client"], url=o["url"], protocol=o["protocol"], status=o["status"],
                            bytes=o["bytes"], start_ms=o["start_ms"], ttfb_ms=o["ttfb_ms"], end_ms=o["done_ms"],
                            connection=None if o.get("conn") is None else str(o["conn"]))
               for c in cs for o in c["objects"]]
    bad = [c for c in cs if not c["valid"]]
    out = ClientOutcome(status=TrialStatus.INVALID if bad else TrialStatus.VALID,
                        reason=f"client {bad[0]['client']}: {bad[0]['invalid_reason']}" if bad else None,
                        objects=objects, clients=clients, raw=d, load_s=d["wall_ms"] / 1e3,
                        start_unix_ms=d["start_unix_ns"] / 1e6 if d.get("start_unix_ns") else None)
    out.metrics = {k: out.median(k) for k in ("plt_ms", "fcp_ms", "lcp_ms", "ttfb_ms")}
    if d.get("quic_stack"):
        peer = next((p for c in cs for conn in c["connections"] if (p := conn.get("peer_params"))), None)
        out.env = {"quic_stack": d["quic_stack"], "quic_max_data": d.get("quic_max_data"),
                   "quic_max_stream_data": d.get("quic_max_stream_data"), "quic_fc_fixed": d.get("quic_fc_fixed"),
                   "server_transport_params": peer}
    out.metrics.update({"throughput_mbps": out.median("throughput_mbps"),
                        "bytes_received": sum(c["bytes"] for c in cs),
                        "connections_opened": sum(len(c["connections"]) for c in cs), "responses": len(objects),
                        "loader_cpu_s": d["cpu_ms"] / 1e3, "loader_wall_s": d["wall_ms"] / 1e3})
    if len(cs) > 1:
        out.metrics["jain_throughput"] = jain([c.throughput_mbps for c in clients if c.throughput_mbps is not None])
        out.metrics["plt_max_ms"] = max((c.plt_ms for c in clients if c.plt_ms is not None), default=None)
    firsts = [c["first_view"] for c in cs if c.get("first_view")]
    if firsts:
        # A repeat view: the first loads' medians beside the repeat's (a failed first load fails it).
        def med(k: str) -> float | None:
            xs = [f[k] for f in firsts if f.get(k) is not None]
            return statistics.median(xs) if xs else None

        out.metrics.update({f"first_{k}": med(k) for k in ("plt_ms", "fcp_ms", "lcp_ms", "ttfb_ms")})
        out.metrics["first_bytes_received"] = sum(f["bytes"] for f in firsts)
        out.metrics["first_connections_opened"] = sum(len(f["connections"]) for f in firsts)
        # What the returning clients carried over, as they saw it on the repeat's connections (TCP:
        # rustls's handshake kind and TCP_INFO's SYN data; HTTP/3 over quiche: resumed and 0-RTT).
        for key, name in (("resumed", "client_resumed_connections"), ("fast_open", "client_fast_open_connections"),
                          ("early_data", "client_early_data_connections")):
            said = [conn[key] for c in cs for conn in c["connections"] if conn.get(key) is not None]
            if said:
                out.metrics[name] = sum(map(bool, said))
        if bad_first := [f for f in firsts if not f["valid"]]:
            out.status = TrialStatus.INVALID
            out.reason = f"client {bad_first[0]['client']}'s first view: {bad_first[0]['invalid_reason']}"
    if single:
        out.metrics.update(cs[0]["timeline"])
    if d.get("upload_bytes"):
        # An upload: from the request's start until the server's answer, which
        # it sends once it holds every byte; the rate is the bytes over that time.
        times = [o["ttfb_ms"] - o["start_ms"] for c in cs for o in c["objects"] if o["status"] == 200]
        sent = sum(int(o.get("sent", 0)) for c in cs for o in c["objects"])
        up = statistics.median(times) if times else None
        out.metrics.update({"bytes_sent": sent, "upload_ms": up,
                            "upload_mbps": d["upload_bytes"] * 8 / up / 1e3 if up else None})
    return out


class Loader(Client):
    """``satbench-load``: C light clients in one process, each with a
    browser's connection policy; or one URL with a curl-style breakdown."""

    kind = ClientKind.LOADER
    uploads = True

    def load(self, req: LoadRequest) -> ClientOutcome:
        # In a population, the process starts once every client is ready, and waits for the instant.
        start_at = req.release() if req.release is not None else req.start_at
        opts = LoadOptions(protocol=req.protocol.version.value, clients=req.clients, connections=req.connections,
                           mode="realtime" if req.realtime else "single" if req.single else "page",
                           realtime=req.realtime, timeout_s=req.timeout_s,
                           start_at_ns=None if start_at is None else int(start_at * 1e9),
                           quic_stack=req.quic_stack, quic_window=req.quic_window, upload=req.upload,
                           repeat_view=req.repeat_view, tfo=req.tfo, schedule=req.schedule)
        limit = (2 if req.repeat_view else 1) * req.timeout_s + 60  # a repeat view is two loads
        try:
            p = req.host.run(opts.argv(req.url), capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            raise TestbedError(f"the loader did not finish within {limit:.0f} s") from None
        if p.returncode != 0:
            raise TestbedError(f"satbench-load failed ({p.returncode}): {p.stderr.strip()[-500:]}")
        return outcome(json.loads(p.stdout), req.single)
