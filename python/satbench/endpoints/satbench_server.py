"""The test server (``satbench-server``) as a library object.

Runs on a testbed host, or in the current namespace for ``satbench serve``.
Its logs go to ``log_dir``: ``access.jsonl`` (one line per request and per
connection: protocol, congestion control in effect, bytes, timestamps),
``tcp_info.jsonl`` (TCP_INFO every 10 ms and at close) and ``qlog/`` (one
qlog per QUIC connection).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import prereq
from ..errors import InputError, PrerequisiteError
from ..model import CongestionControl, ServerKind, ServerSummary
from ..testbed.host import Host, address_family
from ..testbed.proc import describe_exit, read_ready_line, stop_process
from . import ca as ca_mod
from .base import Problem, Server, ServeRequest
from .options import ServerOptions, server_argv

if TYPE_CHECKING:
    from ..experiment.trialspec import TrialSpec


def server_binary() -> Path:
    env = os.environ.get("SATBENCH_SERVER_BIN")
    return Path(env) if env else prereq.REPO / "target" / "release" / "satbench-server"


class SatbenchServer(Server):
    """A running ``satbench-server``; stop it with :meth:`stop` or a ``with`` block.

    ``host`` None runs it in this namespace (``satbench serve``), bound to
    ``bind``."""

    kind = ServerKind.SATBENCH

    def __init__(self, root: Path, log_dir: Path, options: ServerOptions | None = None, *, host: Host | None = None,
                 cc: CongestionControl | str | None = None, bind: str | None = None, http_port: int = 80,
                 https_port: int = 443, tls: bool = True, idle_timeout_s: int = 30, telemetry: bool = True,
                 extra: list[str] | None = None, cert: tuple[Path, Path] | None = None,
                 replay: Path | None = None):
        self.root, self.log_dir, self.opts, self.host = Path(root), Path(log_dir), options or ServerOptions(), host
        self.cc = None if cc is None else CongestionControl(cc)
        for name, port, lo in (("--http-port", http_port, 0), ("--https-port", https_port, 1)):
            if not lo <= port <= 65535:
                raise InputError(f"{name}: not a port: {port}" + (" (0: no cleartext port)" if lo == 0 else ""))
        if not self.root.is_dir():
            raise InputError(f"serve: {root}: not a directory")
        o = self.opts
        b = server_binary()
        if not b.exists():
            raise PrerequisiteError([f"no server binary at {b}: run 'cargo build --release' (scripts/setup does)"])
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if o.tfo and host is not None:
            # Server-side Fast Open is enabled per namespace (bit 2), inside the testbed only.
            subprocess.run(host.cmd(["sysctl", "-q", "-w", "net.ipv4.tcp_fastopen=3"]), check=True)
        if o.tcp_initcwnd is not None:
            if host is None:
                raise InputError("--tcp-initcwnd needs a testbed server host (satbench changes no host route)")
            host.set_route_metrics(initcwnd=o.tcp_initcwnd)
        if bind is None:  # every address of the host: both families where it has an IPv6 one (ip = v6, dual)
            bind = "::" if host is not None and host.addr6 else "0.0.0.0"
        argv = [str(b), "--root", str(self.root.resolve()), "--bind", bind, "--http-port", str(http_port),
                "--https-port", str(https_port), "--access-log", str(self.log_dir / "access.jsonl"),
                "--idle-timeout-s", str(o.idle_timeout_s or idle_timeout_s)]
        if tls:
            c = ca_mod.ensure()
            chain, key = cert or (c.server_cert, c.server_key)
            argv += ["--cert", str(chain), "--key", str(key)]
        if self.cc:
            argv += ["--cc", self.cc.value]
        if replay is not None:
            argv += ["--replay", str(Path(replay).resolve())]
        elif o.replay_think or o.replay_deterministic:
            raise InputError(f"--replay-{'think' if o.replay_think else 'deterministic'}: the origin replays no "
                             "recording")
        if telemetry:
            argv += ["--tcp-info", str(self.log_dir / "tcp_info.jsonl")]
            if o.h3:
                argv += ["--qlog-dir", str(self.log_dir / "qlog")]
        argv += server_argv(o)
        if telemetry and o.h3:
            argv += ["--quic-info", str(self.log_dir / "quic_info.jsonl")]
        argv += extra or []
        env = dict(os.environ)
        env.pop("SSLKEYLOGFILE", None)
        if o.keylog:
            env["SSLKEYLOGFILE"] = str(self.log_dir / "keys.log")
        self.argv = argv
        full = host.cmd(argv) if host else argv
        self.proc = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.ready: dict[str, Any] = read_ready_line(self.proc, "satbench-server", 15.0)

    @classmethod
    def check(cls, trial: "TrialSpec") -> Problem | None:
        if trial.quic_stack == "quinn" and trial.server_options.get("pacing") is False:
            return "server.pacing", "quinn always paces (quinn-proto has no switch for its pacer)"
        from ..workloads import workload_of  # noqa: PLC0415 - the workloads import the endpoints

        if trial.server_options.get("replay_think") and not workload_of(trial).replays:
            return "server.replay_think", "the page is no recorded site: there is no think time to replay"
        if trial.server_options.get("replay_deterministic") and not workload_of(trial).replays:
            return "server.replay_deterministic", "the page is no recorded site: there is no recording to replay"
        return None

    @classmethod
    def start(cls, req: ServeRequest) -> "SatbenchServer":
        tls = req.https_port != 0
        return cls(req.root, req.log_dir, req.options, host=req.host, cc=req.cc, telemetry=req.telemetry,
                   cert=req.cert, replay=req.replay, https_port=req.https_port or 443, http_port=req.http_port,
                   tls=tls, extra=None if tls else ["--no-h3"])

    @property
    def pid(self) -> int:
        return self.proc.pid

    def fault(self) -> str | None:
        rc = self.proc.poll()
        return None if rc is None else f"satbench-server died ({describe_exit(rc)})"

    def stop(self) -> None:
        self.returncode = stop_process(self.proc)

    def begin_stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()

    def access_log(self) -> list[dict[str, Any]]:
        return _jsonl(self.log_dir / "access.jsonl")

    def tcp_info(self) -> list[dict[str, Any]]:
        return _jsonl(self.log_dir / "tcp_info.jsonl")

    def qlogs(self) -> list[Path]:
        return sorted((self.log_dir / "qlog").glob("*.sqlog"))

    def summary(self) -> ServerSummary:
        return summarise(self.log_dir)


def _jsonl(p: Path) -> list[dict[str, Any]]:
    """The whole lines of a JSON-lines log (a killed writer may leave a partial last line)."""
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _origin(authority: str) -> str:
    """An authority's host, lower case, without the port ('S2.test:443' -> 's2.test')."""
    host = authority.strip().lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _origins(out: ServerSummary, conns: list[dict[str, Any]], reqs: list[dict[str, Any]]) -> None:
    """Connections by transport and by the origins their requests named; a
    connection naming several origins is a coalesced one; one naming none was
    never used (requests without an authority are not counted by origin)."""
    transport = {str(c.get("conn")): str(c.get("transport") or "tcp") for c in conns}
    out.transports = {}
    for t in transport.values():
        out.transports[t] = out.transports.get(t, 0) + 1
    named: dict[str, set[str]] = {}
    origins: dict[str, dict[str, int]] = {}
    for r in reqs:
        conn = str(r.get("conn"))
        names = named.setdefault(conn, set())
        if not r.get("authority"):
            continue
        name = _origin(str(r["authority"]))
        o = origins.setdefault(name, {"tcp": 0, "quic": 0, "requests": 0})
        o["requests"] += 1
        if name not in names:
            names.add(name)
            o[transport.get(conn, "quic" if r.get("proto") == "h3" else "tcp")] += 1
    out.origins = dict(sorted(origins.items()))
    out.coalesced_connections = sum(1 for names in named.values() if len(names) > 1)
    out.unused_connections = sum(1 for conn in transport if conn not in named)


def family_of(peer: str) -> str:
    """The address family of a peer as the server logs it: ``1.2.3.4:5``, ``[2001:db8::1]:5``, or an
    IPv4 client of a dual-stack socket, ``[::ffff:1.2.3.4]:5`` (IPv4)."""
    return address_family(peer[1:].split("]", 1)[0] if peer.startswith("[") else peer.rsplit(":", 1)[0])


def summarise(log_dir: Path) -> ServerSummary:
    """Connections, protocols and congestion controls the server really
    used, and TCP_INFO extremes, from its logs."""
    out = ServerSummary(kind=ServerKind.SATBENCH)
    entries = _jsonl(log_dir / "access.jsonl")
    if not (log_dir / "access.jsonl").exists():
        return out
    conns = [e for e in entries if e.get("type") == "connection"]
    reqs = [e for e in entries if e.get("type") == "request"]
    out.realtime_log = [e for e in entries if e.get("type") == "message" or e.get("realtime")] or None
    seen = {bool(c["nodelay"]) for c in conns if c.get("nodelay") is not None}
    out.nodelay = sorted(seen) or None
    out.connections = len(conns)
    out.requests = len(reqs)
    out.protocols = sorted({str(r.get("proto")) for r in reqs})
    out.tls = sorted({bool(r["tls"]) for r in reqs if r.get("tls") is not None}) or None
    names = {str(r["cc"]) for r in reqs if r.get("cc")}
    # The family of each algorithm used (quiche's bbr2_gcongestion is bbr); a
    # name of no known family is kept as it is, and fails the check against
    # what the trial asked for.
    out.cc = sorted({str(CongestionControl.canonical(n) or n) for n in names})
    out.cc_impl = sorted({str(r.get("cc_impl") or r["cc"]) for r in reqs if r.get("cc")})
    out.bytes_served = sum(int(r.get("body_bytes") or 0) for r in reqs)
    out.quic_stacks = sorted({str(c["quic_stack"]) for c in conns if c.get("quic_stack")}) or None
    peers = [str(c["peer"]) for c in conns if c.get("peer")]
    if peers:
        fam = [family_of(p) for p in peers]
        out.families = {f: fam.count(f) for f in ("ipv4", "ipv6")}
    if any(r.get("replay") for r in reqs):
        # A browser asks for /favicon.ico of its own accord: not a request of the page's.
        page = [r for r in reqs if not (r.get("replay") == "miss" and str(r.get("path")) == "/favicon.ico")]
        out.replay = {how: sum(r.get("replay") == how for r in page) for how in ("exact", "fuzzy", "miss")}
    _origins(out, conns, reqs)
    # What a returning client got back: TLS sessions resumed, requests answered from 0-RTT data.
    said = [c for c in conns if c.get("tls_handshake") or c.get("resumed") is not None]
    if said:
        out.resumed_connections = sum(c.get("tls_handshake") == "Resumed" or c.get("resumed") is True for c in said)
    early = [r for r in reqs if r.get("early_data") is not None]
    if early:
        out.early_data_requests = sum(r["early_data"] is True for r in early)
    ti = log_dir / "tcp_info.jsonl"
    last: dict[str, dict[str, Any]] = {}
    if ti.exists():
        max_cwnd = 0
        for e in _jsonl(ti):
            last[str(e.get("conn"))] = e
            max_cwnd = max(max_cwnd, int(e.get("cwnd") or 0))
        out.tcp_total_retrans = sum(int(e.get("total_retrans") or 0) for e in last.values())
        # TCPI_OPT_ECN: the connection negotiated ECN (both ends asked for it, RFC 3168).
        out.tcp_ecn_connections = sum(int(e.get("options") or 0) & 0x08 != 0 for e in last.values())
        # TCPI_OPT_SYN_DATA: the SYN's data was taken (TCP Fast Open).
        out.tfo_connections = sum(bool(e.get("syn_data")) for e in last.values())
        out.tcp_max_cwnd = max_cwnd
        out.tcp_min_rtt_ms = min((e["min_rtt_us"] / 1000 for e in last.values() if e.get("min_rtt_us")), default=None)
    # What limited each connection's sending: the server's one classifier for TCP and QUIC
    # (crates/server/src/limits.rs), time per class in its connection record; beside it the
    # connection's ALPN and, for TCP, its retransmissions (its last TCP_INFO), so that a
    # population's groups (HTTP/1.1 clients against HTTP/2 ones) can be told apart.
    per_conn: list[dict[str, Any]] = []
    totals: dict[str, float] = {}
    for c in conns:
        if isinstance(c.get("limited_ms"), dict):
            classes = {k: float(v) for k, v in c["limited_ms"].items()}
            for k, v in classes.items():
                totals[k] = totals.get(k, 0.0) + v
            tcp = last.get(str(c.get("conn")))
            per_conn.append({"conn": c.get("conn"), "transport": str(c.get("transport") or "quic"),
                             "alpn": c.get("alpn") or None,
                             "retrans": int(tcp.get("total_retrans") or 0) if tcp else None, **classes})
    if per_conn:
        out.connections_limited = per_conn
        out.limited_ms = totals
    qdir = log_dir / "qlog"
    if qdir.is_dir():
        out.qlogs = len(list(qdir.iterdir()))
    return out
