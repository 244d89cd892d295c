"""``satbench shell``: run a command behind the emulated link."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from .testbed import Testbed, TestbedSpec, cleanup


def _bytes(b: int) -> str:
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
        lines.append(f"  {label}: offered {d['offered']['packets']} pkt ({_bytes(d['offered']['bytes'])}), "
                     f"delivered {d['delivered']['packets']} pkt ({_bytes(d['delivered']['bytes'])})")
        lines.append(f"    dropped: queue {dr['queue']['packets']}, aqm {dr['aqm']['packets']}, "
                     f"loss {dr['loss']['packets']}, outage {dr['outage']['packets']}; "
                     f"queueing delay p50 {q['p50_ms']:.2f} ms, p99 {q['p99_ms']:.2f} ms, max {q['max_ms']:.2f} ms; "
                     f"release lateness p99 {rl['p99_ms'] * 1e3:.0f} us")
    outside = sum((d or {}).get("tx_dropped", 0) for d in stats.get("devices", {}).values())
    if outside:
        lines.append(f"  WARNING: {outside} packets dropped before reaching the emulator (TUN queue full): "
                     "the emulator was a bottleneck")
    return "\n".join(lines)


def run_shell(spec: TestbedSpec, argv: Sequence[str] | None, *, json_stderr: bool = False,
              json_out: Path | None = None, quiet: bool = False,
              serve: tuple[Path, Path | None, Any] | None = None) -> int:
    """Build a testbed, run ``argv`` (or an interactive shell) on client 1,
    tear down, report the link counters, and return the command's exit code."""
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
    tb = Testbed(spec)
    server = None
    try:
        with tb:
            if serve is not None:
                from .serve import Server

                root, logs, opts = serve
                server = Server(root, logs or tb.run_dir / "server", opts, host=tb.server)
            env = {**os.environ, **tb.env()}
            if argv:
                cmd = list(argv)
            else:
                env["PS1"] = f"[satbench {spec.link.name} {tb.client.role}] \\w\\$ "
                cmd = ["bash", "--norc", "-i"]
                if not quiet:
                    print(f"satbench: shell on {tb.client.name} ({tb.client.addr}) behind link '{spec.link.name}'; "
                          f"server {tb.server.name} ({tb.server.addr}); exit to tear down", file=sys.stderr)
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
            if server is not None:
                server.stop()
    except KeyboardInterrupt:
        rc = 130 if not stopping or stopping[0] == signal.SIGINT else 128 + stopping[0]
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    report = {"testbed": tb.id, "link": spec.link.name, "seed": tb.seed, "exit_code": rc,
              "tcp_congestion_control": tb.effective_tcp_cc,
              "server": None if server is None else {**server.ready, "log_dir": str(server.log_dir)},
              "link_counters": tb.link_stats, "access_counters": tb.access_stats}
    if json_out is not None:
        json_out.write_text(json.dumps(report, indent=1) + "\n")
    if json_stderr:
        print(json.dumps(report), file=sys.stderr)
    elif not quiet:
        print(format_counters(tb.link_stats, f"satbench: link '{spec.link.name}'"), file=sys.stderr)
        if spec.access is not None:
            print(format_counters(tb.access_stats, f"satbench: access link '{spec.access.name}'"), file=sys.stderr)
    return rc
