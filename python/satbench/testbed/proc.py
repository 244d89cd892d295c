"""The process toolkit of the testbed: run a command or fail with its last
line, wait for a binary's ready line, stop a process, tell a live process
from a reused pid."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import TestbedError


def run_checked(argv: Sequence[str], *, input: str | None = None, what: str = "") -> subprocess.CompletedProcess[str]:
    """Run ``argv``; raise TestbedError with its last line of output if it fails."""
    p = subprocess.run(list(argv), input=input, capture_output=True, text=True)
    if p.returncode != 0:
        detail = (p.stderr or p.stdout).strip().splitlines()
        raise TestbedError(f"{what or argv[0]} failed: {' '.join(argv)}: {detail[-1] if detail else p.returncode}")
    return p


def read_ready_line(proc: subprocess.Popen[Any], what: str, timeout: float) -> dict[str, Any]:
    """The JSON line a satbench binary prints once it is ready; kill it and
    raise with its stderr if none comes within ``timeout``."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("{"):
        proc.kill()
        err = proc.stderr.read().strip() if proc.stderr else ""
        raise TestbedError(f"{what} did not start: {err or f'no ready line within {timeout:g} s'}")
    ready_line: dict[str, Any] = json.loads(line)
    return ready_line


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10) -> int:
    """SIGTERM, then SIGKILL after ``timeout``; close its pipes; return its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for f in (proc.stdout, proc.stderr):
        if f:
            f.close()
    return int(proc.returncode)


def describe_exit(code: int | None) -> str:
    """How a process ended, in words: 'exit code 3' or 'signal 9 (SIGKILL)'."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "?"
        return f"signal {-code} ({name})"
    return f"exit code {code}"


def wait_until(t_unix: float | None) -> None:
    """Sleep until the wall clock reads ``t_unix`` (all namespaces share it):
    a coarse sleep, then a short spin for the last two milliseconds."""
    if t_unix is None:
        return
    left = t_unix - time.time()
    if left > 0.002:
        time.sleep(left - 0.002)
    while time.time() < t_unix:
        pass


def proc_start_time(pid: int) -> int | None:
    """Start time of a process in clock ticks since boot (guards against pid reuse)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def alive(pid: int, start: int | None) -> bool:
    st = proc_start_time(pid)
    return st is not None and (start is None or st == start)
