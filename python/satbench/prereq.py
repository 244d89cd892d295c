"""Prerequisite checks: each missing piece gives one line."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .errors import PrerequisiteError

REPO = Path(__file__).resolve().parents[2]


def link_binary() -> Path:
    """The emulator binary: $SATBENCH_LINK_BIN, or the workspace's release build."""
    env = os.environ.get("SATBENCH_LINK_BIN")
    return Path(env) if env else REPO / "target" / "release" / "satbench-link"


def probe_binary() -> Path:
    """The UDP probe binary: $SATBENCH_PROBE_BIN, or the workspace's release build."""
    env = os.environ.get("SATBENCH_PROBE_BIN")
    return Path(env) if env else REPO / "target" / "release" / "satbench-probe"


def missing_for_testbed() -> list[str]:
    missing = []
    if os.geteuid() != 0:
        missing.append("not root: the testbed creates network namespaces; run as root")
    tun = Path("/dev/net/tun")
    if not tun.exists():
        missing.append("no /dev/net/tun: the kernel's TUN driver is needed (modprobe tun)")
    elif os.geteuid() == 0 and not os.access(tun, os.R_OK | os.W_OK):
        missing.append("/dev/net/tun is not readable and writable")
    if shutil.which("ip") is None:
        missing.append("no 'ip' command: install iproute2")
    b = link_binary()
    if not (b.is_file() and os.access(b, os.X_OK)):
        missing.append(f"no emulator binary at {b}: run 'cargo build --release' (scripts/setup does)")
    return missing


def require_testbed() -> None:
    missing = missing_for_testbed()
    if missing:
        raise PrerequisiteError(missing)
