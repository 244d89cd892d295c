"""The vocabulary of satbench, defined once: the enums every layer speaks and
the typed records that cross its boundaries.

Names are parsed into these types once, where they enter (an experiment
file, a command-line flag, a binary's JSON output), and every layer after
that passes the types, never the raw strings:

    Protocol            h1, h2, h3, h1c (cleartext HTTP/1.1; and the ALPN each stands for)
    CongestionControl   cubic, bbr, reno (plus the implementation, in its own field)
    TrialStatus         valid, invalid, failed
    ClientKind          chromium, firefox, loader, curl
    ServerKind          satbench, nginx, caddy

    ObjectTiming        one response of a page load
    ClientResult        one client's load
    ClientOutcome       what a client run reports to the runner
    DirectionCounters   one direction of an emulated link, as the emulator counted
    LinkCounters        both directions, with the emulator's seed and duration
    ServerSummary       what the server's own telemetry says happened

    HOST_NAME_RE        what a host name is (a testbed's server names, a recording's hosts)
    TESTBED_NETWORKS    every address a testbed gives (nothing else is reachable from inside it)
"""

from __future__ import annotations

import enum
import statistics
from dataclasses import dataclass, field
from typing import Any

#: Every address a testbed gives: its hosts (IPv4, and the IPv6 twins of testbed.v6_of) and the inner
#: ends of VPN tunnels (path/tunnel.py). Nothing else is reachable from inside it.
TESTBED_NETWORKS = ("198.18.0.0/15", "2001:db8:5b::/48", "10.200.0.0/16", "fd00:5b:200::/48")

#: Other names of a gateway proxy's kind (path/proxy.py; the issue's "gateway" is nginx): here, so that
#: what installs the optional parts (prereq) reads them without importing the proxy.
PROXY_ALIASES = {"gateway": "nginx"}

#: A host name: labels of letters, digits and hyphens, at most 253 characters (no IP literal).
HOST_NAME_RE = r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9-]{1,63}"


class Protocol(enum.StrEnum):
    """An HTTP version, as experiments and commands name it: HTTP/1.1 over
    TLS (h1), HTTP/2, HTTP/3, and cleartext HTTP/1.1 (h1c: http://, port 80;
    study C's baseline)."""

    H1 = "h1"
    H2 = "h2"
    H3 = "h3"
    H1C = "h1c"

    @property
    def version(self) -> "Protocol":
        """The HTTP version a client speaks (cleartext HTTP/1.1 is HTTP/1.1): what clients are told."""
        return Protocol.H1 if self is Protocol.H1C else self

    @property
    def tls(self) -> bool:
        return self is not Protocol.H1C

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"

    @property
    def alpn(self) -> str:
        """The ALPN token (and what browsers report per response)."""
        return {"h1": "http/1.1", "h2": "h2", "h3": "h3"}[self.version.value]

    @property
    def http_version(self) -> str:
        """The version as curl reports it."""
        return {"h1": "1.1", "h2": "2", "h3": "3"}[self.version.value]

    @property
    def quic(self) -> bool:
        return self is Protocol.H3


class CongestionControl(enum.StrEnum):
    """A congestion control algorithm by its family name. The implementation
    (Linux's BBRv1, quiche's BBRv2 ``bbr2_gcongestion``) is recorded apart."""

    CUBIC = "cubic"
    BBR = "bbr"
    RENO = "reno"

    @classmethod
    def canonical(cls, name: str) -> "CongestionControl | None":
        """The family of an implementation's own name (``bbr2_gcongestion`` is bbr)."""
        n = name.strip().lower()
        for prefix, cc in (("bbr", cls.BBR), ("cubic", cls.CUBIC), ("reno", cls.RENO), ("newreno", cls.RENO)):
            if n.startswith(prefix):
                return cc
        return None


class TrialStatus(enum.StrEnum):
    VALID = "valid"  # a measurement of the path
    INVALID = "invalid"  # the client ran, but the load does not count (wrong protocol, error, timeout)
    FAILED = "failed"  # the harness could not complete the trial


class ClientKind(enum.StrEnum):
    CHROMIUM = "chromium"
    FIREFOX = "firefox"
    LOADER = "loader"
    CURL = "curl"

    @property
    def browser(self) -> bool:
        return self in (ClientKind.CHROMIUM, ClientKind.FIREFOX)

    @property
    def fetches_objects(self) -> bool:
        """Whether the client loads a page's objects (curl fetches the one URL)."""
        return self is not ClientKind.CURL

    @property
    def in_populations(self) -> bool:
        """Whether a population's group may be of this kind (curl times one transfer alone)."""
        return self is not ClientKind.CURL

    @property
    def overhead_s(self) -> float:
        """The harness's time per trial besides the load, as the plan estimates it:
        `satbench bench harness` for Chromium (launch and close, 0.85 s), Firefox
        (2.6 s) and the loader (0.23-0.27 s), stored trials' `overhead_s` for curl (0.20 s)."""
        return {"chromium": 0.85, "firefox": 2.6, "loader": 0.25, "curl": 0.2}[self.value]

    # The per-kind facts the planner needs live here, not on the client classes:
    # planning must not import a browser driver (the registry loads classes on use).


class ServerKind(enum.StrEnum):
    SATBENCH = "satbench"
    NGINX = "nginx"
    CADDY = "caddy"


#: The QUIC stacks of the satbench server and the loader, the default first: chosen on the evidence
#: of study A's validation (docs/manual.md, "QUIC stacks"): with quinn, HTTP/3 over GEO is as study A found it;
#: quiche's BBR start-up makes it the slowest version there.
QUIC_STACKS = ("quinn", "quiche")
DEFAULT_QUIC_STACK = QUIC_STACKS[0]


def choices(e: type[enum.StrEnum]) -> tuple[str, ...]:
    """The values of an enum, in definition order (for messages and CLI choices)."""
    return tuple(m.value for m in e)


# -- records -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ObjectTiming:
    """One response of a load, in ms from the client's start."""

    client: int
    url: str
    protocol: str | None  # as the client observed it (ALPN form: http/1.1, h2, h3)
    status: int | None
    bytes: int | None
    start_ms: float | None
    ttfb_ms: float | None
    end_ms: float | None
    #: The connection that carried it, as the client names it (Chromium's connection id, the loader's
    #: connection number); None where the client does not say.
    connection: str | None = None
    #: The connection set-up (TCP or QUIC, and TLS) this response waited for, where it opened one
    #: (Resource Timing's connectEnd - connectStart); None over a connection already open, or unknown.
    connect_ms: float | None = None


@dataclass(frozen=True, kw_only=True)
class ClientResult:
    """One client's load."""

    client: int
    valid: bool
    reason: str | None
    plt_ms: float | None
    fcp_ms: float | None
    lcp_ms: float | None
    ttfb_ms: float | None
    bytes: int | None
    throughput_mbps: float | None
    #: In a mixed population: the client's group (its protocol), kind, host,
    #: when it really started (unix ms, the shared clock of every namespace),
    #: its connections, and its throughput over its fair share.
    group: str | None = None
    kind: str | None = None
    host: str | None = None
    start_unix_ms: float | None = None
    connections: int | None = None
    normalised_throughput: float | None = None


@dataclass(kw_only=True)
class ClientOutcome:
    """What a client reports to the runner: a judgement (valid, or invalid with
    its reason), page metrics, per-object timings, per-client results and the
    client's raw output (kept as an artefact)."""

    status: TrialStatus
    reason: str | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)
    objects: list[ObjectTiming] = field(default_factory=list)
    clients: list[ClientResult] = field(default_factory=list)
    raw: Any = None
    #: Seconds the load itself took (the trial's time minus this is the harness's overhead).
    load_s: float | None = None
    #: When the load really started (unix ms), where the client knows it.
    start_unix_ms: float | None = None
    #: What the client says it was (its QUIC stack, the windows it advertised,
    #: the transport parameters the server sent): stored in the trial's env.
    env: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status is TrialStatus.FAILED:
            raise ValueError("a client outcome is valid or invalid; a failed trial is the harness's")

    def median(self, key: str) -> float | None:
        xs = [getattr(c, key) for c in self.clients if getattr(c, key) is not None]
        return statistics.median(xs) if xs else None


@dataclass(frozen=True, kw_only=True)
class Tally:
    packets: int
    bytes: int


#: The emulator's byte parts of the packets offered to a direction, in the
#: order they are drawn (``satlink::overhead``): they add up to the bytes offered.
#: The TCP/IP header floor of protocol overhead (../shared/STUDIES.md's P2): 40 bytes per 1460 of
#: payload. No load's bytes on the wire can be fewer: a trial below it is the harness's error.
HEADER_FLOOR_PCT = 100 * 40 / 1460
OVERHEAD_PARTS = ("ip_header", "transport_header", "tcp_retransmitted", "tls_handshake", "quic_handshake",
                  "tls_record_overhead", "tcp_payload", "tls_application", "quic_application", "udp_payload", "other")
#: Packet counts beside the parts: TCP segments without payload.
OVERHEAD_PACKETS = ("pure_acks", "syn_fin_rst")
#: How the report groups the parts.
OVERHEAD_GROUPS: dict[str, tuple[str, ...]] = {
    "IP and TCP/UDP headers": ("ip_header", "transport_header"),
    "TCP retransmitted": ("tcp_retransmitted",),
    "TLS and QUIC handshakes": ("tls_handshake", "quic_handshake"),
    "TLS record framing": ("tls_record_overhead",),
    "payload (QUIC packets whole)": ("tcp_payload", "tls_application", "quic_application", "udp_payload"),
    "unparsed": ("other",),
}


@dataclass(frozen=True, kw_only=True)
class DirectionCounters:
    """One direction of an emulated link as the emulator counted it."""

    offered: Tally
    delivered: Tally
    dropped: dict[str, Tally]  # by cause: queue, aqm, loss, outage
    raw: dict[str, Any]

    @property
    def dropped_packets(self) -> int:
        return sum(t.packets for t in self.dropped.values())

    @classmethod
    def parse(cls, d: dict[str, Any]) -> "DirectionCounters":
        def tally(x: dict[str, Any]) -> Tally:
            return Tally(packets=int(x["packets"]), bytes=int(x["bytes"]))

        return cls(offered=tally(d["offered"]), delivered=tally(d["delivered"]),
                   dropped={k: tally(v) for k, v in d["dropped"].items()}, raw=d)


@dataclass(frozen=True, kw_only=True)
class LinkCounters:
    """The emulator's report of one link: both directions, its seed, its
    duration and the TUN devices' kernel counters."""

    seed: int
    duration_s: float
    forward: DirectionCounters
    ret: DirectionCounters
    raw: dict[str, Any]

    @classmethod
    def parse(cls, d: dict[str, Any]) -> "LinkCounters":
        return cls(seed=int(d["seed"]), duration_s=float(d["duration_s"]),
                   forward=DirectionCounters.parse(d["forward"]), ret=DirectionCounters.parse(d["return"]), raw=d)

    @property
    def wire_bytes(self) -> int:
        return self.forward.delivered.bytes + self.ret.delivered.bytes

    @property
    def drops_outside_model(self) -> int:
        """Packets the kernel could not queue to the emulator (its TUN queue was full)."""
        return sum(int((d or {}).get("tx_dropped", 0)) for d in self.raw.get("devices", {}).values())

    def metrics(self, page_bytes: int) -> dict[str, float | None]:
        """The trial metrics of the link: bytes on the wire each way, drops, overhead."""
        f, r = self.forward, self.ret
        out: dict[str, float | None] = {
            "wire_bytes_forward": f.delivered.bytes, "wire_bytes_return": r.delivered.bytes,
            "wire_bytes": self.wire_bytes, "wire_packets": f.delivered.packets + r.delivered.packets,
            "link_drops": f.dropped_packets + r.dropped_packets, "page_bytes": page_bytes,
            "overhead_pct": (self.wire_bytes - page_bytes) / page_bytes * 100 if page_bytes else None}
        out.update(self.access_metrics())
        out.update(self.overhead_metrics())
        out.update(self.ecn_metrics())
        return out

    def ecn_metrics(self) -> dict[str, float | None]:
        """ECN at the emulator's queues, in packets: those offered ECN-capable
        (``ecn_fwd_capable``, ``ecn_ret_capable``) and those its AQM marked
        Congestion Experienced (``ecn_fwd_marked``, ``ecn_ret_marked``). Empty
        for an emulator that does not count them."""
        out: dict[str, float | None] = {}
        for name, short in (("forward", "fwd"), ("return", "ret")):
            e = self.raw.get(name, {}).get("ecn")
            if isinstance(e, dict):
                out[f"ecn_{short}_capable"] = int(e["capable"]["packets"])
                out[f"ecn_{short}_marked"] = int(e["marked"]["packets"])
        return out

    def overhead_metrics(self) -> dict[str, float | None]:
        """The bytes offered to each direction split into parts by the
        emulator's classifier (``oh_fwd_ip_header``, ...; the byte parts of a
        direction add up to its offered bytes) and its TCP control packets
        (``oh_fwd_pure_acks``, ``oh_fwd_syn_fin_rst``). Empty for an emulator
        that does not classify."""
        out: dict[str, float | None] = {}
        for name, short, d in (("forward", "fwd", self.forward), ("return", "ret", self.ret)):
            o = self.raw.get(name, {}).get("overhead")
            if not isinstance(o, dict):
                continue
            parts = {k: int(o.get(k, 0)) for k in OVERHEAD_PARTS}
            if sum(parts.values()) != d.offered.bytes:
                raise ValueError(f"the emulator's {name} overhead parts add up to {sum(parts.values())} bytes, "
                                 f"not the {d.offered.bytes} it was offered")
            out.update({f"oh_{short}_{k}": v for k, v in parts.items()})
            out.update({f"oh_{short}_{k}": int(o.get(k, 0)) for k in OVERHEAD_PACKETS})
        return out

    def access_metrics(self) -> dict[str, float | None]:
        """What the satellite access did (DVB-S2 forward, DVB-RCS2 return), summed over terminals."""
        out: dict[str, float | None] = {}
        for name, short in (("forward", "fwd"), ("return", "ret")):
            a = self.raw.get(name, {}).get("access")
            if not a:
                continue
            enc = a.get("encapsulation", {})
            terms = a.get("terminals", [])
            out.update({f"access_frames_{short}": a.get("frames"), f"access_frames_lost_{short}": a.get("frames_lost"),
                        f"access_packets_lost_{short}": a.get("packets_lost"),
                        f"encap_overhead_bytes_{short}": (enc.get("overhead_bytes", 0)
                                                          + enc.get("frame_header_bytes", 0)) if enc else None,
                        f"encap_padding_bytes_{short}": enc.get("padding_bytes")})
            if a.get("kind") in ("acm", "ccm"):
                out["modcod_changes"] = sum(int(t.get("modcod_changes", 0)) for t in terms)
            if a.get("kind") == "dama":
                granted = [sum((t.get("granted_bytes") or {}).values()) for t in terms]
                out.update({"dama_requests": sum(int(t.get("requests", 0)) for t in terms),
                            "dama_granted_bytes": sum(granted),
                            "dama_used_bytes": sum(int(t.get("used_bytes", 0)) for t in terms)})
        return out


@dataclass(kw_only=True)
class ServerSummary:
    """What the origin's own telemetry says happened: connections, the
    protocols and congestion control its sockets really used, and TCP_INFO
    extremes. Third-party servers report only their kind."""

    kind: ServerKind
    connections: int | None = None
    requests: int | None = None
    protocols: list[str] | None = None
    #: Families of the congestion controls really used (an unknown name as it is).
    cc: list[str] | None = None
    cc_impl: list[str] | None = None
    bytes_served: int | None = None
    tcp_total_retrans: int | None = None
    tcp_max_cwnd: int | None = None
    #: TCP connections that negotiated ECN (TCP_INFO's TCPI_OPT_ECN), of those sampled.
    tcp_ecn_connections: int | None = None
    #: Connections whose TLS session was resumed (TCP: rustls's handshake kind; QUIC: quiche's
    #: is_resumed), and requests answered from 0-RTT early data (quiche); None where no connection
    #: said (quinn says neither).
    resumed_connections: int | None = None
    early_data_requests: int | None = None
    #: TCP connections whose SYN carried data the server took (TCP Fast Open; TCP_INFO's
    #: TCPI_OPT_SYN_DATA), of those sampled.
    tfo_connections: int | None = None
    tcp_min_rtt_ms: float | None = None
    qlogs: int | None = None
    #: The QUIC stacks that served (quiche, quinn).
    quic_stacks: list[str] | None = None
    #: Whether the requests came over TLS (QUIC included): the distinct values seen.
    tls: list[bool] | None = None
    #: What limited the server's sending, in ms summed over its connections: the server's
    #: one classifier for TCP and QUIC (application, cwnd, receive_window, send_buffer,
    #: pacing; crates/server/src/limits.rs).
    limited_ms: dict[str, float] | None = None
    #: The same, per connection.
    connections_limited: list[dict[str, Any]] | None = None
    #: The congestion control the testbed's routes give TCP sockets that choose none.
    tcp_cc_route: str | None = None
    #: Connections by transport (tcp, quic), as the server logged them at close.
    transports: dict[str, int] | None = None
    #: Connections by the address family the client came from (ipv4, ipv6), from each
    #: connection's peer address (an IPv4 client of a dual-stack socket is ::ffff:a.b.c.d).
    families: dict[str, int] | None = None
    #: Per origin named in requests (``:authority`` or ``Host``, without the
    #: port): the connections by transport that carried requests for it, and
    #: the requests. A connection serving two names counts under both.
    origins: dict[str, dict[str, int]] | None = None
    #: Connections that carried requests for more than one origin (coalesced).
    coalesced_connections: int | None = None
    #: Connections that carried no request (a browser's spare connections,
    #: opened before it knew the origin speaks HTTP/2, closed unused).
    unused_connections: int | None = None
    #: TCP_NODELAY as read back from the server's TCP connections (each value seen).
    nodelay: list[bool] | None = None
    #: A replayed origin's requests by how they found their recorded answer: exact, fuzzy (the
    #: closest query), miss (never recorded: 404; a browser's own /favicon.ico aside). None: no
    #: origin replayed a recording.
    replay: dict[str, int] | None = None
    #: The real-time endpoints' log lines (their requests and messages): read
    #: by satbench.realtime, not stored with the summary (the messages are).
    realtime_log: list[dict[str, Any]] | None = field(default=None, repr=False)

    @classmethod
    def combined(cls, parts: "list[ServerSummary]") -> "ServerSummary":
        """One summary of several origin servers of a trial (a sharded page's):
        counts add up, sets unite, extremes stay extremes."""
        if len(parts) == 1:
            return parts[0]
        out = cls(kind=parts[0].kind)

        def vals(name: str) -> list[Any]:
            return [v for p in parts if (v := getattr(p, name)) is not None]

        for name in ("connections", "requests", "bytes_served", "tcp_total_retrans", "qlogs",
                     "coalesced_connections", "unused_connections", "tcp_ecn_connections",
                     "resumed_connections", "early_data_requests", "tfo_connections"):
            if xs := vals(name):
                setattr(out, name, sum(xs))
        for name in ("protocols", "cc", "cc_impl", "quic_stacks", "nodelay", "tls"):
            if xs := vals(name):
                setattr(out, name, sorted({x for v in xs for x in v}))
        if xs := vals("tcp_max_cwnd"):
            out.tcp_max_cwnd = max(xs)
        if xs := vals("tcp_min_rtt_ms"):
            out.tcp_min_rtt_ms = min(xs)
        if xs := vals("connections_limited"):
            out.connections_limited = [c for v in xs for c in v]
        for name in ("limited_ms", "transports", "replay", "families"):
            if xs := vals(name):
                total: dict[str, Any] = {}
                for v in xs:
                    for k, n in v.items():
                        total[k] = total.get(k, 0) + n
                setattr(out, name, total)
        if xs := vals("origins"):
            origins: dict[str, dict[str, int]] = {}
            for v in xs:
                for name, counts in v.items():
                    mine = origins.setdefault(name, {})
                    for k, n in counts.items():
                        mine[k] = mine.get(k, 0) + n
            out.origins = dict(sorted(origins.items()))
        out.tcp_cc_route = parts[0].tcp_cc_route
        out.realtime_log = [e for p in parts for e in (p.realtime_log or [])] or None
        return out

    def connection_metrics(self) -> dict[str, float | None]:
        """The load's connections as the origins counted them: in all, by
        transport, the origins requested, how many carried several, and how
        many none; the address family of each connection where the server's log says (a third-party
        server's says that alone)."""
        families: dict[str, float | None] = {}
        if self.families is not None:  # the address family each connection came over (the ``ip`` factor)
            families = {"conns_ipv4": self.families.get("ipv4", 0), "conns_ipv6": self.families.get("ipv6", 0)}
        if self.connections is None:
            return families
        t = self.transports or {}
        out: dict[str, float | None] = {
            "server_connections": self.connections,
            "server_connections_tcp": t.get("tcp", 0) if self.transports is not None else None,
            "server_connections_quic": t.get("quic", 0) if self.transports is not None else None,
            "origins_requested": len(self.origins) if self.origins is not None else None,
            "coalesced_connections": self.coalesced_connections,
            "unused_connections": self.unused_connections, **families}
        # What returning clients got back, where a server said.
        if self.resumed_connections is not None:
            out["server_resumed_connections"] = self.resumed_connections
        if self.early_data_requests is not None:
            out["server_early_data_requests"] = self.early_data_requests
        if self.tfo_connections is not None:
            out["server_tfo_connections"] = self.tfo_connections
        return out

    def limited_shares(self) -> dict[str, float | None]:
        """Each limitation's share of the time, in percent (the trial's metrics limited_*_pct)."""
        lm = self.limited_ms or {}
        total = sum(lm.values())
        return {f"limited_{k}_pct": (100 * v / total if total else None) for k, v in sorted(lm.items())}

    def to_json(self) -> dict[str, Any]:
        """The stored form (the keys of satbench 0.1's summary; absent values left out)."""
        out: dict[str, Any] = {"kind": self.kind.value}
        for k in ("connections", "requests", "protocols", "cc", "cc_impl", "bytes_served", "tcp_total_retrans",
                  "tcp_max_cwnd", "tcp_min_rtt_ms", "qlogs", "quic_stacks", "limited_ms", "connections_limited",
                  "transports", "families", "origins", "coalesced_connections", "unused_connections", "nodelay",
                  "tls", "replay",
                  "tcp_ecn_connections", "resumed_connections", "early_data_requests", "tfo_connections"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        out["tcp_cc_route"] = self.tcp_cc_route
        return out


def jain(xs: "list[float] | tuple[float, ...]") -> float | None:
    """Jain's fairness index (sum x)^2 / (n sum x^2): 1 when all are equal, 1/n when one takes all."""
    v = [float(x) for x in xs if x is not None]
    if not v or sum(x * x for x in v) == 0:
        return None
    return sum(v) ** 2 / (len(v) * sum(x * x for x in v))
