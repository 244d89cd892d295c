"""The emulated path, built out of network namespaces.

    client hosts --(LAN)-- [access point --(access link)--] terminal ==(satellite link)== gateway
        [--(terrestrial link)-- edge] --(LAN)-- server hosts

With several terminals (``terminals = N``), each has its own client LAN and
clients (dealt to terminals in turn), and one emulator joins them all to
the gateway, routing forward packets by their destination.

Every host is a network namespace named ``sb<id>-<role>``. The satellite link
(and the optional access link) is a pair of TUN devices joined by a
``satbench-link`` emulator process. Addresses come from 198.18.0.0/15, the
range reserved for network benchmarking, and exist only inside the testbed:
no namespace has an interface or a route to the host or beyond.

    198.18.1.0/24  client LAN   (.1 terminal or access point, .10+ clients)
    198.18.2.1/2   satellite link (terminal / gateway; terminal k >= 2 is 198.18.2.(k+1))
    198.18.3.0/24  server LAN   (.1 gateway, .2 the VPN endpoint if any, .10+ servers)
    198.18.4.1/2   access link  (access point / terminal)
    198.18.5.1/2   terrestrial link (gateway / edge router; the server LAN's .1 is then the edge)
    198.18.(100+k).0/24  client LAN of terminal k >= 2

Names under ``.test`` come from a hosts file that ``ip netns exec`` mounts.
Before anything is made, an owner record (pid and start time) is written to
``/run/satbench/<id>/owner.json``; :func:`~satbench.testbed.cleanup.cleanup`
removes whatever testbeds whose owner is gone left behind.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import prereq
from ..errors import InputError, TestbedError
from ..link.emulator import Emulator
from ..link.profile import LinkProfile
from ..link.spec import LinkSpec, resolve
from ..model import HOST_NAME_RE, TESTBED_NETWORKS, CongestionControl, LinkCounters, choices
from .cleanup import NETNS_ETC, RUN_ROOT, destroy, kill_netns_processes
from .host import Host
from .proc import describe_exit, proc_start_time, run_checked


def check_namespace_default_cc(cc: str) -> None:
    if cc not in choices(CongestionControl):
        raise InputError(f"--default-cc: must be one of {', '.join(choices(CongestionControl))}, got {cc!r}")


def _allowed_as_default(cc: str) -> bool:
    """A namespace other than the host's may only default (sysctl) to an
    algorithm the host allows; satbench never changes that host setting."""
    try:
        return cc in Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text().split()
    except OSError:
        return False


def udp_problem(value: object) -> str | None:
    """What is wrong with a ``udp`` value (open, blocked or policed:KBITS), or None: the one check,
    for the testbed and the experiment's factor alike."""
    if value in ("open", "blocked") or (isinstance(value, str) and re.fullmatch(r"policed:[1-9][0-9]{0,6}", value)):
        return None
    return f"must be open, blocked or policed:KBITS (e.g. policed:512), got {value!r}"


def udp_rules(udp: str) -> str:
    """The gateway's nftables table for ``udp`` (blocked, or policed:KBITS): UDP it forwards, DNS aside,
    dropped (beyond the rate) and counted."""
    rate = "" if udp == "blocked" else f"limit rate over {int(udp.split(':')[1]) * 1000 // 8} bytes/second "
    return ("table inet satbench_udp {\n  counter dropped { }\n  chain forward {\n"
            "    type filter hook forward priority 0; policy accept;\n"
            f"    meta l4proto udp udp sport != 53 udp dport != 53 {rate}counter name \"dropped\" drop\n  }}\n}}\n")


def _closed_world_nft() -> str:
    """In each host on a client LAN, when IPv6 is on: every packet for an address outside the testbed
    refused as it leaves (a TCP reset, an ICMP error otherwise), and counted. Those hosts keep an IPv6
    default route (Chromium looks for one before it asks for IPv6 addresses), so the refusal is this
    table's; IPv4 has no route beyond the testbed at all."""
    v4 = ", ".join(n for n in TESTBED_NETWORKS if ":" not in n)
    v6 = ", ".join([*(n for n in TESTBED_NETWORKS if ":" in n), "fe80::/10", "ff00::/8"])
    return ("table inet satbench_closed {\n  counter blocked { }\n  chain output {\n"
            "    type filter hook output priority 0; policy accept;\n    oif \"lo\" accept\n"
            f"    ip daddr {{ {v4} }} accept\n    ip6 daddr {{ {v6} }} accept\n"
            "    meta l4proto tcp counter name \"blocked\" reject with tcp reset\n"
            "    counter name \"blocked\" reject with icmpx type admin-prohibited\n  }\n}\n")


#: The address families a testbed gives the trial's traffic (TestbedSpec.ip).
IP_FAMILIES = ("v4", "v6", "dual")


def v6_of(addr4: str) -> str:
    """A testbed host's IPv6 address beside its IPv4 one: 198.18.C.D -> 2001:db8:5b:C::D (the
    documentation prefix: global scope, so that address selection (RFC 6724) ranks it above IPv4,
    as an ISP's IPv6 is; a ULA would rank below)."""
    a, b, c, d = addr4.split(".")
    if (a, b) != ("198", "18"):
        raise TestbedError(f"no IPv6 twin for {addr4}: the testbed's addresses are 198.18.0.0/16")
    return f"2001:db8:5b:{c}::{d}"


#: The most terminals a testbed builds.
MAX_TERMINALS = 50


@dataclass(frozen=True)
class TerminalPlan:
    """Terminal k's addresses (k from 1)."""

    k: int

    @property
    def sat_addr(self) -> str:
        return "198.18.2.1" if self.k == 1 else f"198.18.2.{self.k + 1}"

    @property
    def lan(self) -> str:
        """The first three octets of its client LAN."""
        return "198.18.1" if self.k == 1 else f"198.18.{100 + self.k}"

    @property
    def subnets(self) -> list[str]:
        """What the emulator routes to it: its client LAN and its own address."""
        return [f"{self.lan}.0/24", f"{self.sat_addr}/32"]

    @property
    def subnets6(self) -> list[str]:
        """The same, IPv6 (with ``ip`` = v6 or dual): the twins of its LAN and its address."""
        return [str(ipaddress.IPv6Network(f"{v6_of(self.lan + '.0')}/64")), f"{v6_of(self.sat_addr)}/128"]


def terminal_subnets(n: int, ipv6: bool = False) -> list[list[str]]:
    """The subnets of a testbed's ``n`` terminals, in order (for the link's configuration); with
    ``ipv6``, each terminal's IPv6 subnets after its IPv4 ones."""
    return [TerminalPlan(k).subnets + (TerminalPlan(k).subnets6 if ipv6 else []) for k in range(1, n + 1)]


def as_spec(link: LinkSpec | LinkProfile, terminals: int = 1, ipv6: bool = False) -> LinkSpec:
    """A profile resolved by the emulator (for ``terminals`` terminals, routing IPv6 too with
    ``ipv6``), or a link already resolved."""
    if isinstance(link, LinkSpec):
        return link
    return resolve(link, terminal_subnets(terminals, ipv6) if terminals > 1 else None)


@dataclass(kw_only=True)
class TestbedSpec:
    """What to build. Keyword-only, validated in :class:`Testbed`."""

    __test__ = False

    #: The satellite link (a profile is resolved when the testbed is made).
    link: LinkSpec | LinkProfile
    clients: int = 1
    servers: int = 1
    #: An access link between the clients and the terminal (WiFi, say).
    access: LinkSpec | LinkProfile | None = None
    seed: int | None = None
    tcp_cc: str | None = None
    pcap_dir: Path | None = None
    #: Resolve names through an authoritative DNS server (dnsmasq) on the first
    #: server host, so that lookups cross the emulated link; else hosts files.
    dns: bool = False
    #: Satellite terminals sharing the link (clients dealt to them in turn). A
    #: link resolved for several terminals sets this itself.
    terminals: int = 1
    #: A terrestrial link between the gateway and the servers (through an edge
    #: router), so that delay or loss can sit on the terrestrial part only.
    terrestrial: LinkSpec | LinkProfile | None = None
    #: A host for a VPN endpoint on the server LAN (``vpn``, 198.18.3.2, a router).
    vpn: bool = False
    #: Names of their own for the server hosts, in order (a replayed site's recorded host names): the
    #: j-th list names server host j, instead of server.test and sj.test.
    server_names: list[list[str]] = field(default_factory=list)
    #: Hosts for other users' traffic sharing the link (the cross-traffic element): ``xclient`` on the
    #: clients' LAN (198.18.1.250), ``xserver`` on the servers' (198.18.3.250).
    cross: bool = False
    #: The address family of the trial's traffic: ``v4``; ``v6`` (every host also gets an IPv6
    #: address, 2001:db8:5b:C::D beside 198.18.C.D, and names resolve to it alone); ``dual`` (names
    #: resolve to both). The testbed's own plumbing (its DNS server's address aside) stays on IPv4.
    ip: str = "v4"
    #: A broken family (``v6`` or ``v4``): the gateway drops every packet of it it would forward,
    #: after the satellite link (with ``ip = "dual"``, what a client's fallback costs shows).
    ip_drop: str | None = None
    #: UDP at the gateway (after the satellite link): ``open``, ``blocked`` (every UDP packet but DNS
    #: dropped, both ways) or ``policed:KBITS`` (beyond that rate, dropped); the drops are counted
    #: (:meth:`Testbed.udp_dropped`).
    udp: str = "open"


class Testbed:
    """A fresh emulated path. Use as a context manager; everything it made is
    removed on exit, and by :func:`cleanup` if its owner dies first."""

    __test__ = False

    def __init__(self, spec: TestbedSpec):
        if not 1 <= spec.clients <= 200:
            raise TestbedError(f"clients must be between 1 and 200, got {spec.clients}")
        if not 1 <= spec.servers <= 200:
            raise TestbedError(f"servers must be between 1 and 200, got {spec.servers}")
        if len(spec.server_names) > spec.servers:
            raise TestbedError(f"names for {len(spec.server_names)} server hosts, but {spec.servers} servers")
        for name in (n for names in spec.server_names for n in names):
            if not re.fullmatch(HOST_NAME_RE, name):
                raise TestbedError(f"a server host's name is no host name: {name!r}")
        if spec.tcp_cc is not None:
            check_namespace_default_cc(spec.tcp_cc)
        if spec.ip not in IP_FAMILIES:
            raise TestbedError(f"ip must be one of {', '.join(IP_FAMILIES)}, got {spec.ip!r}")
        if spec.ip_drop not in (None, "v4", "v6"):
            raise TestbedError(f"ip_drop must be v4 or v6, got {spec.ip_drop!r}")
        if spec.ip_drop is not None and spec.ip != "dual":
            raise TestbedError("ip_drop needs ip = dual (the other family must remain)")
        if (problem := udp_problem(spec.udp)) is not None:
            raise TestbedError(f"udp {problem}")
        if not 1 <= spec.terminals <= MAX_TERMINALS:
            raise TestbedError(f"terminals must be between 1 and {MAX_TERMINALS}, got {spec.terminals}")
        self.spec = spec
        six = spec.ip != "v4"
        self.link = as_spec(spec.link, spec.terminals, six)
        given = self.link.config.get("terminals") or [{}]
        n = max(spec.terminals, self.link.terminals if given[0].get("subnets") else 1)
        if spec.terminals > 1 and self.link.terminals != spec.terminals:
            raise TestbedError(f"the link {self.link.label} is resolved for {self.link.terminals} terminal(s), "
                               f"the testbed has {spec.terminals}")
        if n > 1 and [t.get("subnets") for t in self.link.config["terminals"]] != terminal_subnets(n, six):
            raise TestbedError(f"the link {self.link.label}'s terminals are not this testbed's subnets")
        if n > 1 and spec.access is not None:
            raise TestbedError("an access link behind several terminals is not supported; use one terminal")
        self.access = as_spec(spec.access) if spec.access is not None else None
        self.terrestrial = as_spec(spec.terrestrial) if spec.terrestrial is not None else None
        if n > 1 and self.terrestrial is not None:
            raise TestbedError("a terrestrial link with several terminals is not supported; use one terminal")
        self.id = secrets.token_hex(3)
        self.seed = spec.seed if spec.seed is not None else secrets.randbits(63)
        self.run_dir = RUN_ROOT / self.id
        p = f"sb{self.id}-"
        self.plans = [TerminalPlan(k) for k in range(1, n + 1)]
        self.terminals = [Host("terminal" if t.k == 1 else f"terminal{t.k}", p + ("term" if t.k == 1 else f"term{t.k}"),
                               t.sat_addr, ["terminal.test" if t.k == 1 else f"terminal{t.k}.test"])
                          for t in self.plans]
        self.terminal = self.terminals[0]
        self.gateway = Host("gateway", p + "gw", "198.18.2.2", ["gateway.test"])
        self.access_point = Host("ap", p + "ap", "198.18.4.1", ["ap.test"]) if spec.access else None
        self.edge = Host("edge", p + "edge", "198.18.5.2", ["edge.test"]) if spec.terrestrial else None
        self.vpn = Host("vpn", p + "vpn", "198.18.3.2", ["vpn.test"]) if spec.vpn else None
        if n > 1 and self.vpn is not None:
            raise TestbedError("a VPN endpoint with several terminals is not supported; use one terminal")
        self.cross_client = Host("xclient", p + "xc", "198.18.1.250", ["xclient.test"]) if spec.cross else None
        self.cross_server = Host("xserver", p + "xs", "198.18.3.250", ["xserver.test"]) if spec.cross else None
        if n > 1 and spec.cross:
            raise TestbedError("cross traffic with several terminals is not supported; use one terminal")
        #: Each client's terminal (index into :attr:`terminals`): dealt in turn.
        self.client_terminal = [(i - 1) % n for i in range(1, spec.clients + 1)]
        self.clients = []
        for i in range(1, spec.clients + 1):
            k = self.client_terminal[i - 1]
            j = (i - 1) // n + 1  # the client's place on its terminal's LAN
            self.clients.append(Host(f"c{i}", p + f"c{i}", f"{self.plans[k].lan}.{9 + j}",
                                     [f"c{i}.test"] + (["client.test"] if i == 1 else [])))
        self.servers = [Host(f"s{j}", p + f"s{j}", f"198.18.3.{9 + j}",
                             spec.server_names[j - 1] if j <= len(spec.server_names) else
                             (["server.test"] if j == 1 else []) + [f"s{j}.test"]) for j in range(1, spec.servers + 1)]
        if spec.ip != "v4":
            for h in self.hosts:
                h.addr6 = v6_of(h.addr)
        self.emulators: dict[str, Emulator] = {}
        self.link_stats: dict[str, Any] | None = None
        self.effective_tcp_cc: str | None = None
        self.access_stats: dict[str, Any] | None = None
        self.terrestrial_stats: dict[str, Any] | None = None
        self._built = False
        self._closed = False

    @property
    def hosts(self) -> list[Host]:
        extra = [self.access_point] if self.access_point else []
        edge = [self.edge] if self.edge else []
        vpn = [self.vpn] if self.vpn else []
        return [*self._client_lan, *extra, *self.terminals, self.gateway, *edge, *vpn, *self._server_lan[len(vpn):]]

    @property
    def _client_lan(self) -> list[Host]:
        """The hosts on the clients' LAN: the clients, and the cross-traffic client if any."""
        return [*self.clients, *([self.cross_client] if self.cross_client else [])]

    @property
    def _server_lan(self) -> list[Host]:
        """The hosts on the server LAN: the VPN endpoint if any, the servers, the cross-traffic server."""
        return [*([self.vpn] if self.vpn else []), *self.servers, *([self.cross_server] if self.cross_server else [])]

    @property
    def namespaces(self) -> list[str]:
        return [h.ns for h in self.hosts]

    @property
    def server(self) -> Host:
        return self.servers[0]

    @property
    def client(self) -> Host:
        return self.clients[0]

    def __enter__(self) -> "Testbed":
        try:
            self.build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- building -----------------------------------------------------------

    def _write_owner(self) -> None:
        """Record who owns this testbed. The first time, the run folder appears
        only once its owner file is complete (a concurrent cleanup never sees it
        half made)."""
        owner = {"pid": os.getpid(), "start": proc_start_time(os.getpid()), "created_unix": time.time(),
                 "namespaces": self.namespaces, "emulator_pids": [e.pid for e in self.emulators.values()],
                 "link": self.link.name, "seed": self.seed}
        if not self.run_dir.exists():
            RUN_ROOT.mkdir(parents=True, exist_ok=True)
            staging = RUN_ROOT / f".{self.id}.new"
            staging.mkdir()
            (staging / "owner.json").write_text(json.dumps(owner))
            staging.rename(self.run_dir)
            return
        tmp = self.run_dir / "owner.json.tmp"
        tmp.write_text(json.dumps(owner))
        tmp.replace(self.run_dir / "owner.json")

    def _hosts_file(self, only: Host | None = None) -> str:
        """Every host's names, or with ``only``, just that host's own: with ``ip = v6`` at its IPv6
        address alone, with ``dual`` at both."""
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost", "# satbench testbed " + self.id]
        for h in [only] if only else self.hosts:
            # (A replayed site's server host may have hundreds of names: a few to a line.)
            for names in (h.names[k:k + 8] for k in range(0, len(h.names), 8)):
                if self.spec.ip != "v6" or h.addr6 is None:
                    lines.append(f"{h.addr}\t{' '.join(names)}")
                if h.addr6 is not None:
                    lines.append(f"{h.addr6}\t{' '.join(names)}")
        return "\n".join(lines) + "\n"

    def build(self) -> None:
        prereq.require_testbed()
        self._write_owner()
        self._built = True
        batch = "".join(f"netns add {ns}\n" for ns in self.namespaces)
        run_checked(["ip", "-batch", "-"], input=batch, what="creating namespaces")
        hosts = self._hosts_file()
        dns_clients = {c.ns for c in self.clients} if self.spec.dns else set()
        for h in self.hosts:
            d = NETNS_ETC / h.ns
            d.mkdir(parents=True, exist_ok=True)
            if h.ns in dns_clients:
                # Names of other hosts come from the DNS server across the link.
                (d / "hosts").write_text(self._hosts_file(only=h))
                ns_addr = self.server.addr6 if self.spec.ip == "v6" and self.server.addr6 else self.server.addr
                (d / "resolv.conf").write_text(f"# satbench: the testbed's DNS server\nnameserver {ns_addr}\n"
                                               "options timeout:5 attempts:2\n")
            else:
                (d / "hosts").write_text(hosts)
                (d / "resolv.conf").write_text("# satbench: no DNS server; names come from /etc/hosts\n")
        routers = {t.ns for t in self.terminals} | {self.gateway.ns} | (
            {self.access_point.ns} if self.access_point else set()) | ({self.edge.ns} if self.edge else set()) | (
            {self.vpn.ns} if self.vpn else set())
        for ns in self.namespaces:
            self._sysctls(ns, router=ns in routers)
        self._configure()
        if self.spec.ip != "v4":
            for ns in sorted(routers):
                run_checked(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv6.conf.all.forwarding=1"],
                            what=f"IPv6 forwarding in {ns}")
        if self.spec.ip != "v4":
            for h in self._client_lan:
                run_checked(["ip", "netns", "exec", h.ns, "nft", "-f", "-"], input=_closed_world_nft(),
                            what=f"closing {h.ns} to addresses outside the testbed")
        if self.spec.ip_drop is not None:
            family = {"v6": "ipv6", "v4": "ipv4"}[self.spec.ip_drop]
            rules = ("table inet satbench_drop {\n  chain forward {\n    type filter hook forward priority 0;\n"
                     f"    meta nfproto {family} counter drop\n  }}\n}}\n")
            run_checked(["ip", "netns", "exec", self.gateway.ns, "nft", "-f", "-"], input=rules,
                        what=f"dropping {family} at the gateway")
        if self.spec.udp != "open":
            run_checked(["ip", "netns", "exec", self.gateway.ns, "nft", "-f", "-"], input=udp_rules(self.spec.udp),
                        what=f"UDP {self.spec.udp} at the gateway")
        if self.spec.dns:
            self._start_dns(hosts)
        near_side = (self.access_point.ns, "acc0") if self.access_point else None
        self.effective_tcp_cc = self.tcp_cc()
        self.emulators["link"] = Emulator("link", self.link, self.seed, [(t.ns, "sat0") for t in self.terminals],
                                          (self.gateway.ns, "sat0"), self.run_dir, self.spec.pcap_dir)
        if self.access and near_side:
            self.emulators["access"] = Emulator("access", self.access, self.seed ^ 0x5A5A, near_side,
                                                (self.terminal.ns, "acc0"), self.run_dir, self.spec.pcap_dir)
        if self.terrestrial and self.edge:  # forward (towards the clients) runs from the edge to the gateway
            self.emulators["terrestrial"] = Emulator("terrestrial", self.terrestrial, self.seed ^ 0x7E7E,
                                                     (self.gateway.ns, "ter0"), (self.edge.ns, "ter0"),
                                                     self.run_dir, self.spec.pcap_dir)
        self._write_owner()

    def _start_dns(self, hosts: str) -> None:
        """dnsmasq on the first server host, authoritative for the testbed's
        names from its hosts file, forwarding nothing."""
        dnsmasq = shutil.which("dnsmasq")
        if dnsmasq is None:
            raise TestbedError("no dnsmasq: install Debian's dnsmasq-base (scripts/setup does)")
        f = self.run_dir / "dns-hosts"
        f.write_text(hosts)
        log = self.run_dir / "dnsmasq.log"
        self.dns_proc = self.server.popen(
            [dnsmasq, "--keep-in-foreground", "--no-resolv", "--no-hosts", f"--addn-hosts={f}",
             f"--listen-address={self.server.addr}",
             *([f"--listen-address={self.server.addr6}"] if self.server.addr6 else []),
             "--bind-interfaces", "--port=53", "--local=/test/",
             "--domain-needed", "--cache-size=0", "--log-queries", f"--log-facility={log}", "--user=root",
             "--pid-file="], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        end = time.monotonic() + 5
        while time.monotonic() < end:
            out = self.server.run(["ss", "-lunH", "sport = :53"], capture_output=True, text=True).stdout
            if out.strip():
                return
            if self.dns_proc.poll() is not None:
                break
            time.sleep(0.02)
        raise TestbedError(f"dnsmasq did not start on {self.server.role}")

    def _sysctls(self, ns: str, *, router: bool) -> None:
        if self.spec.ip == "v4":
            s = ["net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"]
        else:
            # IPv6 on, and nothing the kernel would send of its own accord (duplicate address detection,
            # router solicitations) crossing the link; forwarding is turned on once the devices are
            # configured (_forward_ipv6), so that no TUN device joins the routers' multicast groups.
            s = [f"net.ipv6.conf.{c}.{k}" for c in ("all", "default")
                 for k in ("disable_ipv6=0", "accept_dad=0", "dad_transmits=0", "accept_ra=0",
                           "router_solicitations=0")]
        s += ["net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.default.rp_filter=0",
              f"net.ipv4.ip_forward={1 if router else 0}"]
        if self.spec.tcp_cc and _allowed_as_default(self.spec.tcp_cc):
            s.append(f"net.ipv4.tcp_congestion_control={self.spec.tcp_cc}")
        run_checked(["ip", "netns", "exec", ns, "sysctl", "-q", "-w", *s], what=f"sysctl in {ns}")

    def _configure(self) -> None:
        # The congestion control is also set on every testbed route (congctl):
        # it then applies to every TCP connection of the testbed, whatever
        # algorithms the host allows namespaces to default to.
        cc = f" congctl {self.spec.tcp_cc}" if self.spec.tcp_cc else ""

        def batch(ns: str, lines: list[str], congctl: bool = True) -> None:
            lines = [line + cc if congctl and line.startswith("route add") else line for line in lines]
            run_checked(["ip", "-n", ns, "-batch", "-"], input="\n".join(lines) + "\n", what=f"configuring {ns}")

        v6 = self.spec.ip != "v4"

        def tun(dev: str, local: str, peer: str) -> list[str]:
            lines = [f"tuntap add dev {dev} mode tun vnet_hdr"]
            if v6:  # no multicast group, no link-local address: not one packet of the kernel's own on the link
                lines += [f"link set {dev} multicast off", f"link set {dev} addrgenmode none"]
            lines += [f"link set {dev} up", f"addr add {local} peer {peer} dev {dev}"]
            if v6:
                lines += [f"addr add {v6_of(local)} peer {v6_of(peer)} dev {dev} nodad"]
            return lines

        def route6(prefix4: str, via: str) -> list[str]:
            """The IPv6 twin of an IPv4 route (198.18.C.0/24 -> 2001:db8:5b:C::/64)."""
            if not v6:
                return []
            net = prefix4.split("/")[0].rsplit(".", 1)[0] + ".0"
            return [f"route add {v6_of(net)}/64 {via}"]

        def lan(hosts: list[Host], gw_addr: str) -> list[str]:
            lines = ["link set lo up", "link add lan0 type bridge", "link set lan0 up",
                     f"addr add {gw_addr}/24 dev lan0"]
            lines += [f"addr add {v6_of(gw_addr)}/64 dev lan0 nodad"] if v6 else []
            for h in hosts:
                lines += [f"link add {h.role} type veth peer name eth0 netns {h.ns}",
                          f"link set {h.role} master lan0", f"link set {h.role} up"]
            return lines

        # Client side.
        if len(self.terminals) > 1:
            # (With IPv6: the testbed's IPv6 prefix, 2001:db8:5b::/48, where IPv4 has 198.18.0.0/15.)
            for k, (t, plan) in enumerate(zip(self.terminals, self.plans)):
                mine = [c for c, tk in zip(self.clients, self.client_terminal) if tk == k]
                batch(t.ns, lan(mine, f"{plan.lan}.1") + tun("sat0", plan.sat_addr, "198.18.2.2")
                      + ["route add 198.18.3.0/24 dev sat0", "route add 198.18.0.0/15 dev sat0"]
                      + (["route add 2001:db8:5b::/48 dev sat0"] if v6 else []))
            gw = lan(self.servers, "198.18.3.1") + ["tuntap add dev sat0 mode tun vnet_hdr"]
            if v6:  # as tun() does: not one packet of the kernel's own on the link
                gw += ["link set sat0 multicast off", "link set sat0 addrgenmode none"]
            gw += ["link set sat0 up", "addr add 198.18.2.2/24 dev sat0"]
            gw += [f"addr add {v6_of('198.18.2.2')}/64 dev sat0 nodad"] if v6 else []
            gw += [f"route add {p.lan}.0/24 dev sat0" for p in self.plans]
            gw += [r for p in self.plans for r in route6(f"{p.lan}.0/24", "dev sat0")]
            batch(self.gateway.ns, gw)
            for c, k in zip(self.clients, self.client_terminal):
                via6 = v6_of(self.plans[k].lan + ".1")
                six = [f"addr add {c.addr6}/64 dev eth0 nodad", f"route add ::/0 via {via6}"] if c.addr6 else []
                batch(c.ns, ["link set lo up", f"addr add {c.addr}/24 dev eth0", "link set eth0 up",
                             f"route add 198.18.0.0/15 via {self.plans[k].lan}.1", *six])
            for h in self.servers:
                via6 = v6_of("198.18.3.1")
                six = ([f"addr add {h.addr6}/64 dev eth0 nodad", f"route add 2001:db8:5b::/48 via {via6}"]
                       if h.addr6 else [])
                batch(h.ns, ["link set lo up", f"addr add {h.addr}/24 dev eth0", "link set eth0 up",
                             "route add 198.18.0.0/15 via 198.18.3.1", *six])
            return
        client_lan = lan(self._client_lan, "198.18.1.1")
        term = [] if self.access_point else client_lan
        if not self.access_point:
            term += tun("sat0", "198.18.2.1", "198.18.2.2") + ["route add 198.18.3.0/24 dev sat0"]
            term += route6("198.18.3.0/24", "dev sat0")
        else:
            term += ["link set lo up"] + tun("sat0", "198.18.2.1", "198.18.2.2")
            term += ["route add 198.18.3.0/24 dev sat0"] + route6("198.18.3.0/24", "dev sat0")
            term += tun("acc0", "198.18.4.2", "198.18.4.1") + ["route add 198.18.1.0/24 dev acc0"]
            term += route6("198.18.1.0/24", "dev acc0")
            ap = client_lan + tun("acc0", "198.18.4.1", "198.18.4.2")
            ap += ["route add 198.18.2.0/24 dev acc0", "route add 198.18.3.0/24 dev acc0"]
            ap += route6("198.18.2.0/24", "dev acc0") + route6("198.18.3.0/24", "dev acc0")
            batch(self.access_point.ns, ap)
        batch(self.terminal.ns, term)
        if self.edge:  # the server LAN hangs off the edge router, behind the terrestrial link
            gw = ["link set lo up"] + tun("sat0", "198.18.2.2", "198.18.2.1") + tun("ter0", "198.18.5.1", "198.18.5.2")
            gw += ["route add 198.18.3.0/24 dev ter0"] + route6("198.18.3.0/24", "dev ter0")
            edge = lan(self._server_lan, "198.18.3.1") + tun("ter0", "198.18.5.2", "198.18.5.1")
            edge += [f"route add 198.18.{k}.0/24 dev ter0" for k in (1, 2, 4)]
            edge += [r for k in (1, 2, 4) for r in route6(f"198.18.{k}.0/24", "dev ter0")]
            batch(self.edge.ns, edge)
        else:
            gw = lan(self._server_lan, "198.18.3.1") + tun("sat0", "198.18.2.2", "198.18.2.1")
        gw += ["route add 198.18.1.0/24 dev sat0", "route add 198.18.4.0/24 dev sat0"]
        gw += route6("198.18.1.0/24", "dev sat0") + route6("198.18.4.0/24", "dev sat0")
        batch(self.gateway.ns, gw)
        cross = {h.ns for h in (self.cross_client, self.cross_server) if h is not None}
        for h, via in [(c, "198.18.1.1") for c in self._client_lan] + [(s, "198.18.3.1") for s in self._server_lan]:
            # Other users' flows choose their own congestion control: no route of theirs imposes the trial's.
            # (A client keeps an IPv6 default route, closed by _closed_world_nft; a server needs none.)
            dest = "::/0" if h in self._client_lan else "2001:db8:5b::/48"
            six = [f"addr add {h.addr6}/64 dev eth0 nodad", f"route add {dest} via {v6_of(via)}"] if h.addr6 else []
            batch(h.ns, ["link set lo up", f"addr add {h.addr}/24 dev eth0", "link set eth0 up",
                         f"route add 198.18.0.0/15 via {via}", *six], congctl=h.ns not in cross)

    # -- running ------------------------------------------------------------

    def faults(self) -> list[str]:
        """What of the testbed's own machinery died while it stood (an
        emulator, the DNS server): a trial that saw one measured nothing."""
        out = [f"the {name} emulator died ({describe_exit(e.proc.poll())})"
               for name, e in self.emulators.items() if e.proc.poll() is not None]
        dns = getattr(self, "dns_proc", None)
        if dns is not None and dns.poll() is not None:
            out.append(f"the DNS server died ({describe_exit(dns.poll())})")
        return out

    def udp_dropped(self) -> int | None:
        """The UDP packets the gateway dropped (``udp`` blocked or policed), or None if UDP is open."""
        if self.spec.udp == "open":
            return None
        p = self.gateway.run(["nft", "-j", "list", "counter", "inet", "satbench_udp", "dropped"], capture_output=True,
                             text=True)
        try:
            return int(next(x["counter"]["packets"] for x in json.loads(p.stdout)["nftables"] if "counter" in x))
        except (ValueError, KeyError, StopIteration):
            return None

    def tcp_cc(self) -> str:
        """The TCP congestion control testbed connections get unless a socket
        chooses its own: the spec's (on every route), else the namespaces'
        default (inherited from the host namespace's)."""
        if self.spec.tcp_cc:
            return self.spec.tcp_cc
        return self.server.read_sysctl("net.ipv4.tcp_congestion_control")

    def env(self) -> dict[str, str]:
        """Variables that tell a command where it is."""
        return {"SATBENCH_SERVER": self.server.name, "SATBENCH_SERVER_ADDR": self.server.addr,
                "SATBENCH_CLIENT_ADDR": self.client.addr, "SATBENCH_TESTBED": self.id,
                "SATBENCH_LINK": self.link.name, "SATBENCH_SEED": str(self.seed)}

    # -- teardown -----------------------------------------------------------

    def close(self) -> None:
        """Stop everything and remove every namespace, file and process. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if not self._built:
            return
        # A stop signal (the runner's Ctrl-C, SIGTERM, SIGHUP) raises in Python wherever it lands: held
        # until every namespace is gone, or a run interrupted mid-teardown leaves the testbed behind.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            self._teardown()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def _teardown(self) -> None:
        for ns in self.namespaces:
            kill_netns_processes(ns)
        devices = {"link": [(self.terminal.ns, "sat0"), (self.gateway.ns, "sat0")]}
        if self.access_point:
            devices["access"] = [(self.access_point.ns, "acc0"), (self.terminal.ns, "acc0")]
        if self.edge:
            devices["terrestrial"] = [(self.gateway.ns, "ter0"), (self.edge.ns, "ter0")]
        for name, e in self.emulators.items():
            # Drops outside the model: packets the kernel could not queue to the
            # emulator (its TUN queue was full) or could not accept. Read while the
            # emulator still holds the device: once it has stopped, whatever the
            # kernel still sends (a FIN retransmitted after the processes were
            # killed) is dropped for want of a reader, which is no fault of the link.
            dev_stats = {f"{ns.rsplit('-', 1)[1]}:{dev}": _device_stats(ns, dev)
                         for ns, dev in devices.get(name, [])}
            stats = e.stop()
            if stats is not None:
                stats["devices"] = dev_stats
            if name == "link":
                self.link_stats = stats
            elif name == "terrestrial":
                self.terrestrial_stats = stats
            else:
                self.access_stats = stats
        destroy(self.id, self.namespaces)



    @property
    def link_counters(self) -> LinkCounters | None:
        """The satellite link's counters, once the testbed is closed."""
        return None if self.link_stats is None else LinkCounters.parse(self.link_stats)


#: The signals that stop a run; held while a testbed is torn down.
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _device_stats(ns: str, dev: str) -> dict[str, int] | None:
    """Kernel counters of a TUN device: tx is towards the emulator, rx from it."""
    p = subprocess.run(["ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev], capture_output=True, text=True)
    try:
        st = json.loads(p.stdout)[0]["stats64"]
    except (ValueError, IndexError, KeyError):
        return None
    return {"tx_packets": st["tx"]["packets"], "tx_dropped": st["tx"]["dropped"],
            "rx_packets": st["rx"]["packets"], "rx_dropped": st["rx"]["dropped"]}
