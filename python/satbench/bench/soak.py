"""``satbench bench soak [--trials N]``: N loader trials (default 1,000) in
one run, with the orchestrator's memory and open files, and the testbed
machinery left on the host (namespaces, TUN devices, processes, files under
/run/satbench and /etc/netns), sampled after the first trial, in the middle
and at the end. Everything but memory must be flat; memory may settle."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .. import prereq
from ..experiment import runner, spec
from ..testbed.cleanup import NETNS_ETC, NS_RE, RUN_ROOT, list_netns
from ..testbed.proc import alive

#: Memory may grow this much over a soak (caches, pandas-free runner: little).
RSS_GROWTH_MAX_MB = 30.0


def _others() -> set[str]:
    """Testbeds of other live processes (another run, a shell): not ours to count."""
    out = set()
    if RUN_ROOT.is_dir():
        for d in RUN_ROOT.iterdir():
            try:
                owner = json.loads((d / "owner.json").read_text())
            except (OSError, ValueError):
                continue
            if int(owner["pid"]) != os.getpid() and alive(int(owner["pid"]), owner.get("start")):
                out.add(d.name)
    return out


def _testbed_of(pid: str) -> str | None:
    """The testbed a satbench process belongs to: its namespace, or its emulator's run folder."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return None
    m = re.search(r"/satbench/([0-9a-f]{6})/", cmd)
    if m:
        return m.group(1)
    ns = subprocess.run(["ip", "netns", "identify", pid], capture_output=True, text=True).stdout.strip()
    m = NS_RE.match(ns)
    return m.group(1) if m else None


def sample() -> dict[str, int | float]:
    """What the orchestrator holds, and what testbeds left on the host
    (testbeds that other live processes own are not counted)."""
    others = _others()
    status = Path("/proc/self/status").read_text()
    rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
    # This installation's binaries only (a build of them elsewhere is no leftover).
    binaries = f"^{prereq.REPO}/target/release/satbench-(link|server|load|pep)( |$)"
    pids = subprocess.run(["pgrep", "-f", binaries], capture_output=True, text=True).stdout.split()
    tuns = subprocess.run(["ip", "-o", "link", "show", "type", "tun"], capture_output=True, text=True).stdout

    def mine(name: str) -> bool:
        m = NS_RE.match(name)
        return m is not None and m.group(1) not in others

    return {"rss_mb": rss_kb / 1024, "open_fds": len(os.listdir("/proc/self/fd")),
            "threads": len(os.listdir("/proc/self/task")),
            "namespaces": sum(1 for ns in list_netns() if mine(ns)),
            "host_tun_devices": len(tuns.splitlines()),
            "processes": sum(1 for pid in pids if _testbed_of(pid) not in others),
            "run_files": sum(1 for d in RUN_ROOT.iterdir() if d.name not in others for _ in d.rglob("*"))
            if RUN_ROOT.exists() else 0,
            "netns_etc": sum(1 for d in NETNS_ETC.iterdir() if mine(d.name)) if NETNS_ETC.exists() else 0}


def soak(trials: int = 1000) -> dict[str, Any]:
    reps = -(-trials // 3)
    exp = spec.build("soak", {"link": "wire", "link.delay_ms": 5, "protocol": ["h1", "h2", "h3"], "page": "blank",
                              "client": "loader"}, repetitions=reps, seed=1, timeout_s=30)
    exp.trials = exp.run_order().trials[:trials]
    marks = {1: "start", max(1, trials // 2): "middle", trials: "end"}
    samples: dict[str, dict[str, int | float]] = {}

    def progress(e: runner.Event) -> None:
        if isinstance(e, runner.TrialDone) and e.done in marks:
            samples[marks[e.done]] = sample()

    with tempfile.TemporaryDirectory(prefix="satbench-soak-") as tmp:
        s = runner.run(exp, Path(tmp) / "soak.sqlite", progress=progress)
    start, end = samples.get("start", {}), samples.get("end", {})
    flat = {k: end.get(k) == start.get(k) for k in start if k not in ("rss_mb",)}
    rss_growth = float(end.get("rss_mb", 0)) - float(start.get("rss_mb", 0))
    return {"trials": trials, "ran": s.ran, "valid": s.valid, "failed": s.failed, "invalid": s.invalid,
            "seconds": s.seconds, "samples": samples, "flat": flat, "rss_growth_mb": rss_growth,
            "meets": all(flat.values()) and rss_growth <= RSS_GROWTH_MAX_MB and s.failed == 0,
            "machine": {"cores": os.cpu_count(), "kernel": platform.release()}}


def run(quick: bool = False, trials: int | None = None) -> dict[str, Any]:
    return soak(trials or (100 if quick else 1000))


def format_report(r: dict[str, Any]) -> str:
    lines = [f"satbench bench soak  ({r['machine']['cores']} cores): {r['trials']} loader trials in one run, "
             f"{r['seconds']:.0f} s; {r['valid']} valid, {r['invalid']} invalid, {r['failed']} failed",
             f"  {'':18s} {'start':>10s} {'middle':>10s} {'end':>10s}"]
    keys = list(r["samples"].get("start", {}))
    for k in keys:
        vals = [r["samples"].get(m, {}).get(k) for m in ("start", "middle", "end")]
        lines.append(f"  {k:18s} " + " ".join(f"{v:10.1f}" if isinstance(v, float) else f"{v!s:>10s}"
                                            for v in vals))
    mark = "meets target" if r["meets"] else "MISSES target"
    lines.append(f"  memory grew {r['rss_growth_mb']:+.1f} MB; everything else flat: {all(r['flat'].values())}  "
                 f"[{mark}: flat, memory growth <= {RSS_GROWTH_MAX_MB:g} MB, no failed trial]")
    return "\n".join(lines)
