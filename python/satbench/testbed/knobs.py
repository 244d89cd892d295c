"""Host knobs as experiment factors: kernel settings and NIC offloads of the
server and client hosts, applied inside the testbed's namespaces only and
read back before the trial runs.

    "server.sysctl.net.ipv4.tcp_slow_start_after_idle" = [0, 1]
    "client.sysctl.net.core.rmem_max" = 6291456
    "server.offload.gso" = ["on", "off"]        # also tso, gro, lro, sg, uso (UDP GSO: QUIC), ...

A sysctl must be one of the network namespace's own (``net.ipv4.tcp_*`` or
``net.core.*`` that a fresh network namespace has): setting it changes that
namespace only, never the host's. An offload is set with ethtool on the
host's interface (``eth0``, a veth) inside its namespace. A value that does
not read back as set fails the trial: a knob not in effect is no
measurement of it.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import TestbedError
from .host import Host

ROLES = ("server", "client")
# As root, a sysctl is checked against a fresh network namespace at validation;
# otherwise only its existence is (a host-only key then fails the trial when
# it cannot be set inside the namespace, saying so).
#: ethtool's short names and the feature each stands for in `ethtool -k`.
OFFLOADS = {"gso": "generic-segmentation-offload", "tso": "tcp-segmentation-offload",
            "gro": "generic-receive-offload", "lro": "large-receive-offload", "sg": "scatter-gather",
            "tx": "tx-checksumming", "rx": "rx-checksumming", "rxvlan": "rx-vlan-offload",
            "txvlan": "tx-vlan-offload", "ufo": "udp-fragmentation-offload",
            "uso": "tx-udp-segmentation", "gro_list": "rx-gro-list"}
#: The name ethtool -K takes where it has no short one.
ETHTOOL_NAME = {"uso": "tx-udp-segmentation", "gro_list": "rx-gro-list"}
SYSCTL_RE = re.compile(r"^net\.(ipv4\.tcp_[a-z0-9_]+|core\.[a-z0-9_]+)$")


@functools.lru_cache(maxsize=1)
def namespaced_sysctls() -> frozenset[str] | None:
    """The net.* settings a fresh network namespace has (its own), or None
    where that cannot be found out (not root)."""
    if os.geteuid() != 0:
        return None
    p = subprocess.run(["unshare", "--net", "sysctl", "-N", "-a", "--pattern", r"^net\.(ipv4\.tcp_|core\.)"],
                       capture_output=True, text=True, timeout=30)
    return frozenset(p.stdout.split()) if p.returncode == 0 else None


def check(name: str, value: Any) -> str | None:
    """Why ``value`` is no level of knob factor ``name`` (None if it is)."""
    role, _, rest = name.partition(".")
    kind, _, key = rest.partition(".")
    if kind == "sysctl":
        if not SYSCTL_RE.match(key):
            return f"{key!r}: only net.ipv4.tcp_* and net.core.* settings are knobs"
        ns = namespaced_sysctls()
        if ns is not None and key not in ns:
            return f"{key!r}: no such setting in a network namespace (the host's only, or none)"
        if ns is None and not Path("/proc/sys", *key.split(".")).exists():
            return f"{key!r}: no such setting"
        ok = isinstance(value, (int, str)) and not isinstance(value, bool) and str(value).strip() != ""
        return None if ok else f"must be a number or a string, got {value!r}"
    if kind == "offload":
        if key not in OFFLOADS:
            return f"unknown offload {key!r} (known: {', '.join(OFFLOADS)})"
        return None if value in ("on", "off", True, False) else f"must be on or off, got {value!r}"
    return None


def is_knob(name: str) -> bool:
    role, _, rest = name.partition(".")
    return role in ROLES and rest.partition(".")[0] in ("sysctl", "offload") and bool(rest.partition(".")[2])


class HasHosts(Protocol):
    @property
    def servers(self) -> list[Host]: ...

    @property
    def clients(self) -> list[Host]: ...


@dataclass(frozen=True)
class Knob:
    role: str
    kind: str
    key: str
    value: str

    @property
    def name(self) -> str:
        return f"{self.role}.{self.kind}.{self.key}"

    def apply(self, h: Host) -> str:
        """Set it on ``h``; return the value read back."""
        if self.kind == "sysctl":
            p = h.run(["sysctl", "-q", "-w", f"{self.key}={self.value}"], capture_output=True, text=True)
            if p.returncode != 0:
                raise TestbedError(f"{self.name}: cannot set on {h.role}: {p.stderr.strip()}")
            return self.read(h)
        p = h.run(["ethtool", "-K", "eth0", ETHTOOL_NAME.get(self.key, self.key), self.value],
                  capture_output=True, text=True)
        if p.returncode != 0 and "not changed" not in (p.stderr + p.stdout):
            raise TestbedError(f"{self.name}: cannot set on {h.role}: {(p.stderr or p.stdout).strip()}")
        return self.read(h)

    def read(self, h: Host) -> str:
        """Its value on ``h``, read inside the host's namespace."""
        if self.kind == "sysctl":
            got = h.run(["sysctl", "-n", self.key], capture_output=True, text=True).stdout
            return " ".join(got.split())
        out = h.run(["ethtool", "-k", "eth0"], capture_output=True, text=True).stdout
        m = re.search(rf"^{re.escape(OFFLOADS[self.key])}: (on|off)", out, re.M)
        return m.group(1) if m else "?"


def from_factors(factors: dict[str, Any]) -> list[Knob]:
    out = []
    for name, v in factors.items():
        if is_knob(name):
            role, _, rest = name.partition(".")
            kind, _, key = rest.partition(".")
            value = ("on" if v else "off") if isinstance(v, bool) else str(v)
            out.append(Knob(role, kind, key, value))
    return out


def apply(knobs: list[Knob], tb: HasHosts) -> dict[str, dict[str, str]]:
    """Set every knob on every host of its role and read it back; what each
    host reads, by knob. A value that does not read back as set fails the trial."""
    record: dict[str, dict[str, str]] = {}
    for k in knobs:
        hosts = tb.servers if k.role == "server" else tb.clients
        record[k.name] = {}
        for h in hosts:
            got = k.apply(h)
            record[k.name][h.role] = got
            if " ".join(got.split()) != " ".join(k.value.split()):
                raise TestbedError(f"{k.name}: set to {k.value} on {h.role}, reads back {got!r}")
    return record


def reread(knobs: list[Knob], tb: HasHosts) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Read every knob again (after the load): what each host reads, and a
    line for each that no longer reads as set (the trial then measured
    something else)."""
    record: dict[str, dict[str, str]] = {}
    drift = []
    for k in knobs:
        hosts = tb.servers if k.role == "server" else tb.clients
        record[k.name] = {}
        for h in hosts:
            got = k.read(h)
            record[k.name][h.role] = got
            if " ".join(got.split()) != " ".join(k.value.split()):
                drift.append(f"{k.name}: set to {k.value} on {h.role}, reads {got!r} after the load")
    return record, drift
