"""Owner records and cleanup: whatever a testbed made is removed when its
owner exits, and by :func:`cleanup` if the owner died first (SIGKILL, power
loss). A testbed whose owner is alive is never touched."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from .proc import alive

RUN_ROOT = Path(os.environ.get("SATBENCH_RUN_DIR", "/run/satbench"))
NETNS_ETC = Path("/etc/netns")
NETNS_RUN = Path("/run/netns")
NS_RE = re.compile(r"^sb([0-9a-f]{6})-[a-z0-9]+$")


def list_netns() -> list[str]:
    try:
        return sorted(p.name for p in NETNS_RUN.iterdir())
    except OSError:
        return []


def kill_netns_processes(ns: str) -> None:
    if not (NETNS_RUN / ns).exists():
        return
    for _ in range(3):
        p = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        pids = [int(x) for x in p.stdout.split() if x.isdigit()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def destroy(tid: str, namespaces: list[str]) -> None:
    """Remove a testbed's processes, namespaces, their /etc/netns folders and its run folder."""
    owner = RUN_ROOT / tid / "owner.json"
    pids: list[int] = []
    if owner.exists():
        try:
            pids = json.loads(owner.read_text()).get("emulator_pids", [])
        except (OSError, ValueError):
            pass
    for pid in pids:
        try:
            if "satbench-link" in Path(f"/proc/{pid}/cmdline").read_text():
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass
    names = set(namespaces) | {ns for ns in list_netns() if ns.startswith(f"sb{tid}-")}
    for ns in sorted(names):
        kill_netns_processes(ns)
        if (NETNS_RUN / ns).exists():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
    shutil.rmtree(RUN_ROOT / tid, ignore_errors=True)
    # /etc/netns is made for the testbeds; leave no empty folder behind
    # (another testbed's mkdir recreates it if it is starting right now).
    try:
        NETNS_ETC.rmdir()
    except OSError:
        pass


def _owner_alive(tid: str) -> bool:
    try:
        owner = json.loads((RUN_ROOT / tid / "owner.json").read_text())
    except (OSError, ValueError):
        return False
    return alive(int(owner["pid"]), owner.get("start"))


def cleanup() -> list[str]:
    """Remove what testbeds whose owner process is gone left behind; never
    touches a testbed whose owner is alive. Returns the ids removed."""
    ids: set[str] = set()
    if RUN_ROOT.is_dir():
        ids |= {d.name for d in RUN_ROOT.iterdir() if re.fullmatch(r"[0-9a-f]{6}", d.name)}
    for ns in list_netns():
        m = NS_RE.match(ns)
        if m:
            ids.add(m.group(1))
    if NETNS_ETC.is_dir():
        for d in NETNS_ETC.iterdir():
            m = NS_RE.match(d.name)
            if m:
                ids.add(m.group(1))
    removed = []
    for tid in sorted(ids):
        if _owner_alive(tid):
            continue
        namespaces: list[str] = []
        try:
            namespaces = json.loads((RUN_ROOT / tid / "owner.json").read_text()).get("namespaces", [])
        except (OSError, ValueError):
            pass
        destroy(tid, namespaces)
        removed.append(tid)
    return removed
