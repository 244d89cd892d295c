"""A host of the testbed: a network namespace with one address."""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import TestbedError

NETNS_RUN = Path("/run/netns")
_CLONE_NEWNET = 0x40000000


def bracketed(addr: str) -> str:
    """An address as a URL or a configuration writes it before ``:PORT``: an IPv6 one in brackets."""
    return f"[{addr}]" if ":" in addr else addr


def address_family(addr: str) -> str:
    """``ipv4`` or ``ipv6`` of an address (an IPv4 client of a dual-stack socket, ``::ffff:a.b.c.d``,
    is IPv4)."""
    if ":" not in addr:
        return "ipv4"
    return "ipv4" if addr.lower().startswith("::ffff:") and "." in addr else "ipv6"


@dataclass
class Host:
    """A host of the testbed: a network namespace with one address."""

    role: str
    ns: str
    addr: str
    names: list[str] = field(default_factory=list)
    #: Its IPv6 address, when the testbed gives its hosts one (``ip`` = v6 or dual).
    addr6: str | None = None

    @property
    def name(self) -> str:
        return self.names[0] if self.names else self.addr

    def cmd(self, argv: Sequence[str]) -> list[str]:
        """argv that runs ``argv`` inside this host (with its hosts file)."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def run(self, argv: Sequence[str], **kw: Any) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(self.cmd(argv), **kw)

    def popen(self, argv: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        return subprocess.Popen(self.cmd(argv), **kw)

    def socket(self, family: int = socket.AF_INET, kind: int = socket.SOCK_STREAM) -> socket.socket:
        """A socket of this host's network namespace, for the orchestrator's
        own use (talking to a browser's agent on the host's loopback). The
        namespace is entered by a short-lived thread only: a socket keeps the
        namespace it was made in."""
        box: dict[str, Any] = {}

        def make() -> None:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(NETNS_RUN / self.ns, os.O_RDONLY)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    box["error"] = OSError(ctypes.get_errno(), f"setns({self.ns})")
                    return
                box["sock"] = socket.socket(family, kind)
            finally:
                os.close(fd)

        t = threading.Thread(target=make, name=f"netns-{self.ns}")
        t.start()
        t.join()
        if "error" in box:
            raise TestbedError(str(box["error"]))
        s: socket.socket = box["sock"]
        return s

    def set_route_metrics(self, *, congctl: str | None = None, initcwnd: int | None = None) -> None:
        """Set TCP metrics on this host's route to the rest of the testbed
        (198.18.0.0/15), keeping the metrics it already has."""
        metrics = {k: str(v) for k, v in (("congctl", congctl), ("initcwnd", initcwnd)) if v is not None}
        if not self.change_routes(metrics, lambda f: f[0] == "198.18.0.0/15" and "via" in f):
            raise TestbedError(f"no testbed route on {self.role}")
        # With IPv6 (ip = v6 or dual), its route to the testbed's IPv6 (a client's is its default route)
        # carries the trial's traffic just as well.
        if self.addr6 and not self.change_routes(metrics, lambda f: f[0] in ("default", "2001:db8:5b::/48")
                                                 and "via" in f, family=6):
            raise TestbedError(f"no IPv6 testbed route on {self.role}")

    def change_routes(self, metrics: dict[str, str], select: Callable[[list[str]], bool],
                      family: int = 4) -> list[str]:
        """Set route metrics (``congctl``, ``initcwnd``, ``initrwnd``...) on
        the main table's unicast routes that ``select`` picks (given the
        route's words as ``ip -o route`` shows them), keeping everything else
        they have; returns the routes as set."""
        shown = self.run(["ip", "-o", f"-{family}", "route", "show", "table", "main"], capture_output=True,
                         text=True, check=True)
        out = []
        for line in shown.stdout.splitlines():
            f = line.split()
            if not f or "dev" not in f or f[0] in ("local", "broadcast", "unreachable", "blackhole", "prohibit"):
                continue
            if not select(f):
                continue
            kept: list[str] = []
            it = iter(f)
            for w in it:
                if w in metrics:
                    next(it, None)
                elif w != "linkdown":
                    kept.append(w)
            route = [*kept, *(x for kv in metrics.items() for x in kv)]
            p = self.run(["ip", f"-{family}", "route", "change", *route], capture_output=True, text=True)
            if p.returncode != 0:
                raise TestbedError(f"route metrics on {self.role}: ip route change {' '.join(route)}: "
                                   f"{p.stderr.strip()}")
            out.append(" ".join(route))
        return out

    def read_sysctl(self, key: str) -> str:
        """A sysctl as this host's namespace sees it."""
        p = self.run(["cat", "/proc/sys/" + key.replace(".", "/")], capture_output=True, text=True)
        return str(p.stdout).strip()
