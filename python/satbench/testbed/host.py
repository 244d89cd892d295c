"""A host of the testbed: a network namespace with one address."""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..errors import TestbedError
from .proc import run_checked

NETNS_RUN = Path("/run/netns")
_CLONE_NEWNET = 0x40000000


@dataclass
class Host:
    """A host of the testbed: a network namespace with one address."""

    role: str
    ns: str
    addr: str
    names: list[str] = field(default_factory=list)

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
        p = subprocess.run(["ip", "-n", self.ns, "-4", "route", "show", "198.18.0.0/15"], capture_output=True,
                           text=True)
        words = p.stdout.split()
        if "via" not in words:
            raise TestbedError(f"no testbed route on {self.role}: {p.stdout.strip()!r}")
        metrics = {k: words[words.index(k) + 1] for k in ("congctl", "initcwnd") if k in words}
        if congctl is not None:
            metrics["congctl"] = congctl
        if initcwnd is not None:
            metrics["initcwnd"] = str(initcwnd)
        argv = ["ip", "-n", self.ns, "route", "change", "198.18.0.0/15", "via", words[words.index("via") + 1]]
        for k, v in metrics.items():
            argv += [k, v]
        run_checked(argv, what=f"setting route metrics on {self.role}")

    def read_sysctl(self, key: str) -> str:
        """A sysctl as this host's namespace sees it."""
        p = self.run(["cat", "/proc/sys/" + key.replace(".", "/")], capture_output=True, text=True)
        return str(p.stdout).strip()
