"""A VPN that defeats the PEPs: every client host tunnels its traffic to the
servers through WireGuard (``satbench-tunnel``, user space over TUN: this
kernel has no wireguard link type) to a VPN endpoint on the server LAN
(``vpn``, 198.18.3.2), which forwards it to the servers with its own address
(masquerade), as a company or consumer VPN does. On the satellite link there
is then only UDP (port 51820 + the client's number): a PEP sees no TCP to
split, and its counters say so.

Placed by ``tunnel = "wireguard"`` (``"vpn"`` is the same; or ``{ kind = "wireguard", mtu = 1420,
keepalive = 25 }``). MTU and MSS: the tunnel devices have MTU 1420
(WireGuard's usual: 1500 minus 60 bytes of outer IPv4, UDP and WireGuard
headers, and 20 to spare), the clients' routes to the servers go through
them (so the clients' TCP announces an MSS of 1380), and the endpoint clamps
the MSS of SYNs it forwards to the route's MTU; nothing relies on
fragmentation or on ICMP getting through. The handshake is made before the
load (a ping through the tunnel), as a VPN is up before one browses.

Per trial: both ends' counters (``env.path.tunnel``: packets and bytes in and
out of the tunnel, datagrams and bytes on the wire, rejected datagrams,
handshakes) and metrics ``tunnel_bytes_in`` (inner bytes the client sent
and received), ``tunnel_wire_bytes`` (the datagrams' bytes both ways) and
``tunnel_handshakes``.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import prereq
from ..errors import TestbedError
from ..testbed.proc import read_ready_line, stop_process
from ..testbed.shell import human_bytes
from ..testbed.testbed import v6_of
from . import PathElement

if TYPE_CHECKING:
    from ..testbed.host import Host
    from ..testbed.testbed import Testbed, TestbedSpec

BASE_PORT = 51820
#: How long a tunnel may take to carry its first echo and reply (handshake retries included: the
#: tunnel's handshake over GEO and a lossy terrestrial part takes one or two round trips).
UP_WITHIN_S = 30
DEVICE = "sbwg0"
#: The tunnels' IPv6 addresses (a ULA prefix; tunnel i's ends are INNER6:i::2 and ::1) and the
#: servers' IPv6 LAN the clients reach through them.
INNER6 = "fd00:5b:200"
SERVER_LAN6 = v6_of("198.18.3.0") + "/64"
DEFAULTS: dict[str, Any] = {"kind": "wireguard", "mtu": 1420, "keepalive": None}
KINDS = ("wireguard",)
#: Other names of the one kind (the issue's "vpn").
ALIASES = {"vpn": "wireguard"}


def tunnel_binary() -> Path:
    return prereq.REPO / "target" / "release" / "satbench-tunnel"


class Tunnel(PathElement):
    factor = "tunnel"
    max_terminals = 1
    ipv6 = True
    noun = "a VPN"
    default = "none"
    meaning = "a VPN from each client host to an endpoint on the server LAN (wireguard), or none"

    @classmethod
    def check(cls, value: Any) -> str | None:
        if value == cls.default:
            return None
        v = {"kind": value} if isinstance(value, str) else value
        if not isinstance(v, dict):
            return f"must be wireguard, none or a table {{ kind = \"wireguard\", mtu = 1420 }}, got {value!r}"
        unknown = set(v) - set(DEFAULTS)
        if unknown:
            return f"unknown key {sorted(unknown)[0]!r} (known: {', '.join(DEFAULTS)})"
        if ALIASES.get(v.get("kind", "wireguard"), v.get("kind")) not in KINDS:
            return f"kind must be one of {', '.join(KINDS)}, got {v.get('kind')!r}"
        mtu = v.get("mtu", 1420)
        if isinstance(mtu, bool) or not isinstance(mtu, int) or not 1280 <= mtu <= 1440:
            return f"mtu must be a whole number from 1280 to 1440 (1500 minus 60 bytes of headers), got {mtu!r}"
        ka = v.get("keepalive")
        if ka is not None and (isinstance(ka, bool) or not isinstance(ka, int) or not 1 <= ka <= 3600):
            return f"keepalive must be seconds from 1 to 3600, got {ka!r}"
        return None

    @classmethod
    def label(cls, value: Any) -> Any:
        if isinstance(value, str):
            return value
        return " ".join(f"{k}={v}" for k, v in sorted(value.items()))

    def _options(self) -> dict[str, Any]:
        given = {"kind": self.value} if isinstance(self.value, str) else dict(self.value)
        return {**DEFAULTS, **given}

    def configure(self, spec: "TestbedSpec") -> None:
        spec.vpn = True

    @contextmanager
    def start(self, tb: "Testbed", artefacts: Path) -> Iterator[None]:
        binary = tunnel_binary()
        if not binary.exists():
            raise TestbedError(f"no {binary}: run scripts/setup")
        if tb.vpn is None:
            raise TestbedError("the tunnel needs the testbed's VPN host (TestbedSpec.vpn)")
        opts = self._options()
        self.running: dict[str, dict[str, Any]] = {}
        vpn = tb.vpn
        _nat(vpn, ipv6=vpn.addr6 is not None)
        with ExitStack() as stack:
            for i, client in enumerate(tb.clients, start=1):
                stack.enter_context(self._pair(i, client, vpn, binary, opts))
            yield
            # Before the ends stop, what is still crossing the satellite lands, so both ends count the same
            # packets (the emulator's longest one-way delay, queueing aside, on either direction; at most 2 s).
            time.sleep(min(2.0, max(tb.link.forward.max_delay_ms, tb.link.ret.max_delay_ms) / 1000 + 0.05))

    @contextmanager
    def _pair(self, i: int, client: "Host", vpn: "Host", binary: Path, opts: dict[str, Any]) -> Iterator[None]:
        mtu = int(opts["mtu"])
        inner_client, inner_vpn = f"10.200.{i}.2", f"10.200.{i}.1"
        # With IPv6 (ip = v6 or dual), the tunnel's ends have IPv6 addresses too (a ULA per tunnel) and
        # the servers' IPv6 LAN goes through it; the datagrams stay IPv4 on the satellite.
        six = client.addr6 is not None and vpn.addr6 is not None
        inner6_client, inner6_vpn = f"{INNER6}:{i}::2", f"{INNER6}:{i}::1"
        port = BASE_PORT + i
        keys = [json.loads(subprocess.run([str(binary), "keypair"], check=True, capture_output=True,
                                          text=True).stdout) for _ in range(2)]
        dev = f"wg{i}"
        _run(vpn, ["ip", "tuntap", "add", "dev", dev, "mode", "tun"], ["ip", "link", "set", dev, "mtu", str(mtu), "up"],
             ["ip", "addr", "add", inner_vpn, "peer", inner_client, "dev", dev],
             *([["ip", "-6", "addr", "add", inner6_vpn, "peer", inner6_client, "dev", dev, "nodad"]] if six else []))
        via = _gateway_towards(client, vpn.addr)
        _run(client, ["ip", "tuntap", "add", "dev", DEVICE, "mode", "tun"],
             ["ip", "link", "set", DEVICE, "mtu", str(mtu), "up"],
             ["ip", "addr", "add", inner_client, "peer", inner_vpn, "dev", DEVICE],
             *([["ip", "-6", "addr", "add", inner6_client, "peer", inner6_vpn, "dev", DEVICE, "nodad"]] if six else []))
        keepalive = ["--keepalive", str(opts["keepalive"])] if opts.get("keepalive") else []
        name = client.role
        self.running[name] = {"port": port, "mtu": mtu, "procs": {}}
        with ExitStack() as stack:
            for side, host, argv in (
                ("vpn", vpn, [str(binary), "run", "--tun", dev, "--listen", f"{vpn.addr}:{port}",
                              "--private-key", keys[0]["private"], "--peer-public-key", keys[1]["public"],
                              *keepalive]),
                ("client", client, [str(binary), "run", "--tun", DEVICE, "--listen", f"0.0.0.0:{port}",
                                    "--private-key", keys[1]["private"], "--peer-public-key", keys[0]["public"],
                                    "--peer", f"{vpn.addr}:{port}", *keepalive])):
                proc = host.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                try:
                    read_ready_line(proc, f"satbench-tunnel ({side} of {name})", 10.0)
                except TestbedError:
                    stop_process(proc)
                    raise
                self.running[name]["procs"][side] = proc
                stack.callback(self._stop, name, side, proc)
            # The servers' LAN through the tunnel; the endpoint itself, outside it.
            _run(client, ["ip", "route", "add", f"{vpn.addr}/32", "via", via],
                 ["ip", "route", "add", "198.18.3.0/24", "dev", DEVICE, "src", inner_client],
                 *([["ip", "-6", "route", "add", SERVER_LAN6, "dev", DEVICE, "src", inner6_client]] if six else []))
            # Up before the load: the handshake and one round trip through the tunnel. One echo a
            # second until the first reply (ping -c 1 -w): a lossy path behind the gateway can
            # lose the handshake or the first echo, and a lost packet is no dead tunnel.
            p = client.run(["ping", "-c", "1", "-w", str(UP_WITHIN_S), inner_vpn], capture_output=True,
                           text=True)
            if p.returncode != 0:
                stack.close()  # both ends stopped: their counters say how far the tunnel got
                raise TestbedError(f"the tunnel from {name} did not come up: no echo through it within "
                                   f"{UP_WITHIN_S} s ({_ends(self.running[name])})")
            yield

    def _stop(self, name: str, side: str, proc: subprocess.Popen[Any]) -> None:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        summary = next((x["summary"] for x in reversed(lines) if x.get("summary")), None)
        self.running[name][side] = {"summary": summary, "exit": proc.returncode, "stderr": err.strip()[-300:] or None}

    def summary(self) -> dict[str, Any]:
        """Per client host: the tunnel's port and MTU, and both ends' counters and exits."""
        return {name: {"port": r["port"], "mtu": r["mtu"], "client": r.get("client"), "vpn": r.get("vpn")}
                for name, r in getattr(self, "running", {}).items()}

    def metrics(self) -> dict[str, float | None]:
        got = [(r.get("client") or {}).get("summary") for r in getattr(self, "running", {}).values()]
        ends: list[dict[str, Any]] = [s for s in got if s is not None]
        if not ends or len(ends) != len(got):
            return {"tunnel_bytes_in": None, "tunnel_wire_bytes": None, "tunnel_handshakes": None}
        return {"tunnel_bytes_in": float(sum(s["tun_in_bytes"] + s["tun_out_bytes"] for s in ends)),
                "tunnel_wire_bytes": float(sum(s["net_in_bytes"] + s["net_out_bytes"] for s in ends)),
                "tunnel_handshakes": float(sum(s["handshakes"] for s in ends))}

    def describe(self) -> list[str]:
        out = []
        for name, d in self.summary().items():
            c = (d.get("client") or {}).get("summary") or {}
            out.append(f"tunnel from {name}: {c.get('tun_in_packets', 0)} packets in, {c.get('tun_out_packets', 0)} "
                       f"out; {human_bytes(int(c.get('net_out_bytes', 0)))} sent and "
                       f"{human_bytes(int(c.get('net_in_bytes', 0)))} received on the wire; "
                       f"{c.get('handshakes', 0)} handshake(s)")
        return out

    def fault(self) -> str | None:
        for name, r in getattr(self, "running", {}).items():
            for side, proc in r["procs"].items():
                rc = proc.poll()
                if rc is not None and r.get(side) is None:
                    return f"satbench-tunnel ({side} of {name}) died (exit {rc})"
        return None


def _run(host: "Host", *argvs: list[str]) -> None:
    for argv in argvs:
        p = host.run(argv, capture_output=True, text=True)
        if p.returncode != 0:
            raise TestbedError(f"tunnel set-up in {host.role}: {' '.join(argv)}: {p.stderr.strip()}")


def _gateway_towards(host: "Host", addr: str) -> str:
    """The next hop ``host`` uses towards ``addr`` today."""
    out = host.run(["ip", "route", "get", addr], capture_output=True, text=True).stdout
    m = re.search(r"\bvia (\S+)", out)
    if not m:
        raise TestbedError(f"no route from {host.role} to {addr}: {out.strip()}")
    return m.group(1)


def _nat(vpn: "Host", ipv6: bool = False) -> None:
    """The endpoint forwards what leaves the tunnels with its own address and
    clamps the MSS of forwarded SYNs to the route's MTU (for IPv6 too, with ``ipv6``)."""
    rules = ("table ip satbench_vpn {\n"
             " chain vpn_nat { type nat hook postrouting priority 100; oifname \"eth0\" ip saddr 10.200.0.0/16"
             " masquerade; }\n"
             " chain vpn_mss { type filter hook forward priority 0;"
             " tcp flags syn tcp option maxseg size set rt mtu; }\n"
             "}\n")
    if ipv6:
        rules += ("table ip6 satbench_vpn6 {\n"
                  f" chain vpn_nat {{ type nat hook postrouting priority 100; oifname \"eth0\" ip6 saddr {INNER6}::/48"
                  " masquerade; }\n"
                  " chain vpn_mss { type filter hook forward priority 0;"
                  " tcp flags syn tcp option maxseg size set rt mtu; }\n"
                  "}\n")
    p = vpn.run(["nft", "-f", "-"], input=rules, capture_output=True, text=True)
    if p.returncode != 0:
        raise TestbedError(f"tunnel NAT in {vpn.role}: {p.stderr.strip()}")


def _ends(running: dict[str, Any]) -> str:
    """What each end of a tunnel did, from its summary: handshakes, datagrams, packets."""
    out = []
    for side in ("client", "vpn"):
        c = (running.get(side) or {}).get("summary") or {}
        if not c:
            out.append(f"{side}: no summary")
            continue
        out.append(f"{side}: {c.get('handshakes', 0)} handshakes, datagrams {c.get('net_out_datagrams', 0)} out "
                   f"{c.get('net_in_datagrams', 0)} in ({c.get('net_in_rejected', 0)} rejected), packets "
                   f"{c.get('tun_in_packets', 0)} in {c.get('tun_out_packets', 0)} out")
    return "; ".join(out)
