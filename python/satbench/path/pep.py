"""A split-TCP performance-enhancing proxy (``satbench-pep``) at the
satellite terminal, at the gateway, or at both (a distributed PEP whose middle
leg crosses the satellite link).

Placed by the factor ``pep``: ``"terminal"``, ``"gateway"``, ``"both"``, or a
table with the placement and each leg's TCP settings::

    pep = { at = "both", satellite = "cc=bbr,sndbuf=16M,rcvbuf=16M", terrestrial = "cc=cubic,nodelay" }

The satellite leg of a terminal PEP is its outgoing one (towards the
gateway), of a gateway PEP its incoming one; ``satellite`` and
``terrestrial`` are ``satbench-pep``'s per-leg settings (``cc`` cubic, bbr or
reno; ``sndbuf``, ``rcvbuf``; ``nodelay``; ``fastopen``; ``maxseg``), checked
here for form and by the kernel at start (a setting it refuses fails the
trial, naming it); ``nodelay`` is on unless a leg says ``nodelay=off`` (a
relay must not add Nagle's wait); plus ``initcwnd=N``: the initial congestion and receive
windows in segments, set as route attributes on the routes that leg's
sockets use in the PEP's namespace (the PEP logs each leg's window as the
kernel gave it). ``max_conns`` caps open connections per PEP.

Interception is by TPROXY and policy routing inside the terminal's and the
gateway's namespaces only (the rules ``satbench-pep --print-rules`` gives,
nft form); they go with the namespace. UDP (QUIC) is not intercepted: the
PEP's counters stay at zero for it. With IPv6 (``ip`` = v6 or dual) the PEP
intercepts both families (``--ipv6``: an IPv6 listener beside the IPv4 one,
and the same rules for IPv6), and its log shows each connection's family
in its addresses. Each PEP's ready line (the settings read
back from its sockets) and summary go into the trial's ``env.path.pep``; its
per-connection log (both legs' addresses, times and TCP_INFO at close) into
the trial's artefacts as ``pep-PLACE.jsonl``; its connection and byte counts
into the metrics (``pep_terminal_conns``, ...).
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import prereq
from ..errors import TestbedError
from ..testbed.proc import read_ready_line, stop_process
from ..testbed.shell import human_bytes
from . import PathElement

if TYPE_CHECKING:
    from ..testbed.host import Host
    from ..testbed.testbed import Testbed

#: The PEP's listening port in its namespace (TPROXY's --on-port).
PORT = 5000
PLACES = ("terminal", "gateway", "both")
TABLE_KEYS = {"at", "satellite", "terrestrial", "max_conns"}
_LEG_ITEM = re.compile(r"^(cc=(cubic|bbr|reno)|(sndbuf|rcvbuf)=\d+[KkMmGg]?|(nodelay|fastopen)(=(on|off|0|1|true|false|"
                       r"yes|no))?|maxseg=\d+|initcwnd=\d+)$")
#: The largest initial window (segments) a route takes here.
MAX_INITCWND = 1000


def _split_leg(settings: str) -> tuple[str, int | None]:
    """A leg's settings for satbench-pep, and its initial window (a route
    attribute the testbed sets, not a socket option)."""
    items = [x.strip() for x in settings.split(",") if x.strip()]
    initcwnd = [int(x.split("=", 1)[1]) for x in items if x.startswith("initcwnd=")]
    return ",".join(x for x in items if not x.startswith("initcwnd=")), (initcwnd[-1] if initcwnd else None)


def _with_nodelay(settings: str) -> str:
    """A relay must not add Nagle's wait to what the endpoints already
    coalesced: each write it relays is what arrived, and a small tail would
    wait a whole satellite round trip for the ACK of the segment before it
    (measured: +2 RTT to the first byte of a TLS load). So every leg has
    nodelay unless its settings say otherwise."""
    return settings if "nodelay" in settings else ",".join(x for x in (settings, "nodelay") if x)


def _set_initial_window(host: "Host", segments: int, satellite: bool) -> list[str]:
    """``initcwnd`` and ``initrwnd`` on the routes one leg's sockets use in
    ``host``'s namespace (the satellite leg's: those through the satellite
    device; the terrestrial leg's: the others). Only the PEP's own sockets
    originate TCP there, so forwarded traffic is not affected. Returns the
    routes as the kernel shows them afterwards."""
    n = str(segments)

    def mine(f: list[str]) -> bool:
        return (f[f.index("dev") + 1] == "sat0") == satellite

    routes = host.change_routes({"initcwnd": n, "initrwnd": n}, mine)
    if host.addr6 is not None:  # its IPv6 connections use the IPv6 routes
        routes += host.change_routes({"initcwnd": n, "initrwnd": n}, mine, family=6)
    return routes


def placement(value: Any) -> str:
    """Where a ``pep`` factor's value puts PEPs: none, terminal, gateway or both (a table's ``at``)."""
    return str(value.get("at", "none")) if isinstance(value, dict) else str(value)


def pep_binary() -> Path:
    return prereq.REPO / "target" / "release" / "satbench-pep"


def _check_leg(name: str, v: Any) -> str | None:
    if not isinstance(v, str):
        return f"{name} must be a string of settings (cc=bbr,sndbuf=16M,nodelay), got {v!r}"
    for item in filter(None, v.split(",")):
        if not _LEG_ITEM.match(item.strip()):
            return (f"{name}: {item!r} is not a leg setting (cc=cubic|bbr|reno, sndbuf=N[K|M|G], rcvbuf=N[K|M|G], "
                    "nodelay[=on|off], fastopen[=on|off], maxseg=N)")
    return None


class Pep(PathElement):
    factor = "pep"
    ipv6 = True
    default = "none"
    meaning = ("split-TCP PEP: none, terminal, gateway or both; or a table {at, satellite, terrestrial, max_conns} "
               "with each leg's TCP settings")

    @classmethod
    def check(cls, value: Any) -> str | None:
        if isinstance(value, str):
            return None if value in PLACES or value == "none" else (
                f"must be none, terminal, gateway or both (or a table), got {value!r}")
        if not isinstance(value, dict):
            return f"must be none, terminal, gateway, both or a table, got {value!r}"
        extra = set(value) - TABLE_KEYS
        if extra:
            return f"unknown key {sorted(extra)[0]!r} (known: {', '.join(sorted(TABLE_KEYS))})"
        if value.get("at") not in PLACES:
            return f"at must be terminal, gateway or both, got {value.get('at')!r}"
        for leg in ("satellite", "terrestrial"):
            if leg in value and (problem := _check_leg(leg, value[leg])):
                return problem
            iw = _split_leg(str(value.get(leg, "")))[1]
            if iw is not None and not 1 <= iw <= MAX_INITCWND:
                return f"{leg}: initcwnd must be 1..{MAX_INITCWND} segments, got {iw}"
        n = value.get("max_conns", 1024)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 1_000_000:
            return f"max_conns must be a whole number 1..1000000, got {n!r}"
        return None

    @classmethod
    def label(cls, value: Any) -> Any:
        """``both``, or ``both: satellite cc=bbr,initcwnd=100; terrestrial cc=cubic``."""
        if not isinstance(value, dict):
            return value
        legs = "; ".join(f"{leg} {value[leg]}" for leg in ("satellite", "terrestrial") if value.get(leg))
        cap = f"; max_conns {value['max_conns']}" if "max_conns" in value else ""
        return f"{value.get('at')}" + (f": {legs}{cap}" if legs or cap else "")

    def _options(self) -> dict[str, Any]:
        return {"at": self.value} if isinstance(self.value, str) else dict(self.value)

    def places(self) -> list[str]:
        at = self._options()["at"]
        return ["terminal", "gateway"] if at == "both" else [at]

    @contextmanager
    def start(self, tb: "Testbed", artefacts: Path) -> Iterator[None]:
        opts = self._options()
        hosts: list[tuple[str, Host]] = []
        for place in self.places():
            if place == "terminal":
                terms = list(tb.terminals)
                hosts += [("terminal" if k == 0 else f"terminal{k + 1}", h) for k, h in enumerate(terms)]
            else:
                hosts.append(("gateway", tb.gateway))
        self.running: dict[str, dict[str, Any]] = {}
        with ExitStack() as stack:
            for name, host in hosts:
                stack.enter_context(self._one(name, "gateway" if name == "gateway" else "terminal", host, opts,
                                              artefacts))
            yield

    @contextmanager
    def _one(self, name: str, placement: str, host: "Host", opts: dict[str, Any], artefacts: Path
             ) -> Iterator[None]:
        binary = pep_binary()
        if not binary.exists():
            raise TestbedError(f"no {binary}: run scripts/setup")
        # With br_netfilter loaded, frames the namespace's LAN bridge receives pass the IP hooks in the
        # bridge's context first, where TPROXY's socket assignment is lost: no connection is ever
        # intercepted. The setting is per namespace (this one's only), and absent without br_netfilter.
        for fam in ("iptables", "ip6tables"):  # (IPv6's frames too, with ip = v6 or dual)
            if host.run(["test", "-e", f"/proc/sys/net/bridge/bridge-nf-call-{fam}"]).returncode == 0:
                host.run(["sysctl", "-q", "-w", f"net.bridge.bridge-nf-call-{fam}=0"], check=True, capture_output=True)
        satellite, sat_iw = _split_leg(_with_nodelay(str(opts.get("satellite", ""))))
        terrestrial, ter_iw = _split_leg(_with_nodelay(str(opts.get("terrestrial", ""))))
        routes = []
        for iw, faces_satellite in ((sat_iw, True), (ter_iw, False)):
            if iw is not None:
                routes += _set_initial_window(host, iw, faces_satellite)
        legs = [satellite, terrestrial]
        if any("fastopen" in leg and not re.search(r"fastopen=(off|0|false|no)", leg) for leg in legs):
            host.run(["sysctl", "-q", "-w", "net.ipv4.tcp_fastopen=3"], check=True, capture_output=True)
        six = ["--ipv6"] if host.addr6 is not None else []
        rules = json.loads(subprocess.run([str(binary), "--print-rules", "--port", str(PORT), *six], check=True,
                                          capture_output=True, text=True).stdout)
        for argv in [*rules["routing"], *rules["nft"]]:
            p = host.run(argv, capture_output=True, text=True)
            if p.returncode != 0:
                raise TestbedError(f"PEP rules in {host.role}: {' '.join(argv)}: {p.stderr.strip()}")
        log = artefacts / f"pep-{name}.jsonl"
        argv = [str(binary), "--port", str(PORT), "--placement", placement, "--log", str(log),
                "--max-conns", str(opts.get("max_conns", 1024)), *six]
        if satellite:
            argv += ["--satellite-leg", satellite]
        if terrestrial:
            argv += ["--terrestrial-leg", terrestrial]
        proc = host.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            ready = read_ready_line(proc, f"satbench-pep at the {name}", 10.0)
        except TestbedError:
            stop_process(proc)
            raise
        self.running[name] = {"ready": ready, "log": log, "proc": proc, "routes": routes}
        try:
            yield
        finally:
            assert proc.stdout is not None
            proc.terminate()
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
            summary = next((x for x in reversed(lines) if x.get("summary")), None)
            self.running[name].update(summary=summary, exit=proc.returncode, stderr=err.strip()[-500:])

    def _connections(self, name: str) -> list[dict[str, Any]]:
        log = self.running.get(name, {}).get("log")
        if log is None or not Path(log).exists():
            return []
        out = []
        for line in Path(log).read_text().splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if d.get("event") == "conn":
                out.append(d)
        return out

    def summary(self) -> dict[str, Any]:
        """Per PEP: the placement, its ready line (settings asked for and read
        back), its summary counters and its exit."""
        return {name: {"ready": r["ready"], "summary": r.get("summary"), "exit": r.get("exit"),
                       "stderr": r.get("stderr") or None, "routes_with_initial_window": r.get("routes") or None}
                for name, r in getattr(self, "running", {}).items()}

    def metrics(self) -> dict[str, float | None]:
        """Per PEP: connections relayed, bytes each way, connections refused
        or failed, and the median time its outgoing leg took to connect."""
        out: dict[str, float | None] = {}
        for name, r in getattr(self, "running", {}).items():
            s = r.get("summary") or {}
            conns = self._connections(name)
            connect = [(c["connect_unix_ns"] - c["accept_unix_ns"]) / 1e6 for c in conns
                       if c.get("connect_unix_ns") and c.get("accept_unix_ns")]
            out.update({f"pep_{name}_conns": s.get("accepted"), f"pep_{name}_bytes_down": s.get("bytes_down"),
                        f"pep_{name}_bytes_up": s.get("bytes_up"),
                        f"pep_{name}_failed": (s.get("connect_failed") or 0) + (s.get("refused_cap") or 0)
                        if s else None,
                        f"pep_{name}_connect_ms": statistics.median(connect) if connect else None})
        return out

    def describe(self) -> list[str]:
        out = []
        for name, d in self.summary().items():
            s = d.get("summary") or {}
            out.append(f"PEP at the {name}: {s.get('accepted', 0)} connections relayed, "
                       f"{human_bytes(int(s.get('bytes_down', 0)))} down, {human_bytes(int(s.get('bytes_up', 0)))} "
                       f"up, {s.get('connect_failed', 0)} failed to connect, {s.get('refused_cap', 0)} refused at "
                       "the cap")
        return out

    def fault(self) -> str | None:
        """A PEP that died while the trial ran."""
        for name, r in getattr(self, "running", {}).items():
            rc = r["proc"].poll()
            if rc is not None and r.get("summary") is None:
                return f"satbench-pep at the {name} died (exit {rc})"
        return None
