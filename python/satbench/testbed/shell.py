"""``satbench shell``: run a command behind the emulated link."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .cleanup import cleanup
from .compose import composed
from .testbed import Testbed, TestbedSpec

if TYPE_CHECKING:
    from ..endpoints.base import Server
    from ..path import PathElement


def human_bytes(b: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= scale:
            return f"{b / scale:.2f} {unit}"
    return f"{b} B"


def format_counters(stats: dict[str, Any] | None, title: str) -> str:
    """Human summary of an emulator's counters."""
    if not stats:
        return f"{title}: no counters (emulator did not report)"
    lines = [f"{title}: seed {stats['seed']}, {stats['duration_s']:.1f} s"]
    for key, label in (("forward", "forward (gateway -> terminal)"), ("return", "return (terminal -> gateway)")):
        d = stats[key]
        dr = d["dropped"]
        q = d["queue_delay"]
        rl = d["release_lateness"]
        lines.append(f"  {label}: offered {d['offered']['packets']} pkt ({human_bytes(d['offered']['bytes'])}), "
                     f"delivered {d['delivered']['packets']} pkt ({human_bytes(d['delivered']['bytes'])})")
        lines.append(f"    dropped: queue {dr['queue']['packets']}, aqm {dr['aqm']['packets']}, "
                     f"loss {dr['loss']['packets']}, outage {dr['outage']['packets']}; "
                     f"queueing delay p50 {q['p50_ms']:.2f} ms, p99 {q['p99_ms']:.2f} ms, max {q['max_ms']:.2f} ms; "
                     f"release lateness p99 {rl['p99_ms'] * 1e3:.0f} us")
        lines += _access_lines(d.get("access"))
    if stats["forward"].get("unroutable"):
        lines.append(f"  forward: {stats['forward']['unroutable'].get('packets', 0)} packets for no terminal's "
                     "subnet (dropped)")
    outside = sum((d or {}).get("tx_dropped", 0) for d in stats.get("devices", {}).values())
    if outside:
        lines.append(f"  WARNING: {outside} packets dropped before reaching the emulator (TUN queue full): "
                     "the emulator was a bottleneck")
    return "\n".join(lines)


def _access_lines(a: dict[str, Any] | None) -> list[str]:
    """The satellite access's counters of one direction: frames, encapsulation, and per terminal."""
    if not a:
        return []
    enc = a.get("encapsulation") or {}
    out = [f"    {str(a.get('kind', '')).upper()}: {a.get('frames', 0)} frames, {a.get('frames_lost', 0)} lost "
           f"({a.get('packets_lost', 0)} packets); {str(enc.get('kind', '')).upper()} overhead "
           f"{human_bytes(int(enc.get('overhead_bytes', 0)) + int(enc.get('frame_header_bytes', 0)))}, padding "
           f"{human_bytes(int(enc.get('padding_bytes', 0)))}, {enc.get('fragmented', 0)} packets fragmented"]
    for i, t in enumerate(a.get("terminals", [])):
        parts = [f"{t.get('frames', 0)} frames, {t.get('frames_lost', 0)} lost"]
        if "modcod" in t:
            cn = [v for _, v in t.get("cn_db_series", [])]
            parts.append(f"MODCOD {t['modcod']} ({t.get('modcod_changes', 0)} changes)")
            if cn:
                parts.append(f"C/N {min(cn):.1f}-{max(cn):.1f} dB")
        if "granted_bytes" in t:
            granted = ", ".join(f"{k.upper()} {human_bytes(int(v))}" for k, v in t["granted_bytes"].items() if v)
            parts.append(f"{t.get('requests', 0)} requests, granted {granted or 'nothing'}, "
                         f"used {human_bytes(int(t.get('used_bytes', 0)))}")
        out.append(f"      terminal {i + 1}: " + "; ".join(parts))
    return out


@dataclass
class ShellReport:
    """What a shell run did: the command's exit code and the testbed's record."""

    exit_code: int
    report: dict[str, Any]
    link_counters: dict[str, Any] | None
    access_counters: dict[str, Any] | None


def run_shell(spec: TestbedSpec, argv: Sequence[str] | None, *,
              serve: Callable[[Testbed], Iterable[Server]] | None = None,
              on_ready: Callable[[Testbed], None] | None = None,
              path: Sequence[PathElement] = ()) -> ShellReport:
    """Build a testbed, start the path elements (a PEP, say) and ``serve``'s
    servers on it (the first is the report's; more serve a sharded page),
    run ``argv`` (or an interactive shell) on client 1, tear down; return
    the command's exit code, the link counters and what the path elements
    did."""
    cleanup()
    child: subprocess.Popen[bytes] | None = None
    stopping: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        stopping.append(signum)
        if child is not None and child.poll() is None:
            # With a terminal, Ctrl-C already reached the child (same process group).
            if signum == signal.SIGINT and sys.stdin is not None and sys.stdin.isatty():
                return
            child.send_signal(signum)
        elif signum != signal.SIGINT:
            raise KeyboardInterrupt

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    rc = 1
    server: Server | None = None
    servers: list[Server] = []
    built: list[Testbed] = []

    def testbed(s: TestbedSpec) -> Testbed:
        built.append(Testbed(s))
        return built[0]

    try:
        with composed(spec, path, lambda tb: tb.run_dir, testbed=testbed, serve=serve) as (tb, servers):
            server = servers[0] if servers else None
            env = {**os.environ, **tb.env()}
            if argv:
                cmd = list(argv)
            else:
                env["PS1"] = f"[satbench {tb.link.name} {tb.client.role}] \\w\\$ "
                cmd = ["bash", "--norc", "-i"]
                if on_ready is not None:
                    on_ready(tb)
            if stopping:
                raise KeyboardInterrupt
            child = tb.client.popen(cmd, env=env)
            while True:
                try:
                    code = child.wait()
                    break
                except KeyboardInterrupt:
                    continue
            rc = code if code >= 0 else 128 - code
            for srv in servers:
                srv.stop()
    except KeyboardInterrupt:
        rc = 130 if not stopping or stopping[0] == signal.SIGINT else 128 + stopping[0]
    finally:
        for srv in servers:
            srv.stop()
        for s, h in old.items():
            signal.signal(s, h)
    if not built:  # stopped by a signal before the testbed existed: nothing ran, nothing to report
        raise KeyboardInterrupt
    tb = built[0]
    ready = getattr(server, "ready", {}) if server is not None else None
    report = {"testbed": tb.id, "link": tb.link.name, "link_hash": tb.link.hash, "seed": tb.seed, "exit_code": rc,
              "tcp_congestion_control": tb.effective_tcp_cc,
              "server": None if server is None else {**(ready or {}), "log_dir": str(getattr(server, "log_dir", ""))},
              "shards": [{"host": getattr(getattr(srv, "host", None), "name", None),
                          "log_dir": str(getattr(srv, "log_dir", ""))} for srv in servers[1:]],
              "link_counters": tb.link_stats, "access_counters": tb.access_stats,
              "terrestrial_counters": tb.terrestrial_stats,
              "path": {e.factor: {"summary": e.summary(), "metrics": e.metrics()} for e in path}}
    return ShellReport(exit_code=rc, report=report, link_counters=tb.link_stats, access_counters=tb.access_stats)
