"""Teardown on every exit path, and cleanup of what a killed run left."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ..helpers import SATBENCH, netns_now, run_cli, satbench_leftovers


def start_shell(*cmd: str, link: str = "lan") -> tuple[subprocess.Popen[str], str]:
    """Start ``satbench shell`` in the background; wait until its testbed is up."""
    before = set(netns_now())
    p = subprocess.Popen([*SATBENCH, "shell", "--link", link, "-q", "--", *cmd], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 20
    while time.monotonic() < end:
        new = [ns for ns in set(netns_now()) - before if ns.startswith("sb")]
        tid = new[0][2:8] if new else None
        if tid and Path(f"/run/satbench/{tid}/owner.json").exists():
            owner = json.loads(Path(f"/run/satbench/{tid}/owner.json").read_text())
            if owner.get("emulator_pids"):
                return p, tid
        if p.poll() is not None:
            raise AssertionError(f"shell exited early: {p.stderr.read() if p.stderr else ''}")
        time.sleep(0.05)
    p.kill()
    raise AssertionError("testbed did not come up")


def of(tid: str) -> list[str]:
    return [x for x in satbench_leftovers() if tid in x]


def test_normal_exit_leaves_nothing() -> None:
    assert run_cli("shell", "--link", "geo", "-q", "--", "true").returncode == 0
    assert satbench_leftovers() == []


@pytest.mark.serial
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130),
                                       (signal.SIGHUP, 128 + signal.SIGHUP)])
def test_signals_tear_down(sig: int, code: int) -> None:
    p, tid = start_shell("sleep", "60")
    p.send_signal(sig)
    p.wait(timeout=20)
    assert p.returncode == code, (p.returncode, p.stderr.read() if p.stderr else "")
    assert of(tid) == []


@pytest.mark.serial
def test_sigkill_then_cleanup_spares_a_live_run() -> None:
    live, live_id = start_shell("sleep", "120")
    dead, dead_id = start_shell("sleep", "120")
    dead_emulator = json.loads(Path(f"/run/satbench/{dead_id}/owner.json").read_text())["emulator_pids"][0]
    dead.kill()
    dead.wait()
    try:
        # The killed run's namespaces are still there; its emulator died with it.
        assert any(ns.startswith(f"sb{dead_id}-") for ns in netns_now())
        end = time.monotonic() + 5
        while Path(f"/proc/{dead_emulator}").exists() and time.monotonic() < end:
            time.sleep(0.05)
        assert not Path(f"/proc/{dead_emulator}").exists(), "emulator outlived its orchestrator"
        c = run_cli("cleanup")
        assert c.returncode == 0, c.stderr
        assert dead_id in c.stdout
        assert of(dead_id) == []
        # The live run is untouched and still works.
        assert any(ns.startswith(f"sb{live_id}-") for ns in netns_now())
        assert Path(f"/run/satbench/{live_id}/owner.json").exists()
        ping = subprocess.run(["ip", "netns", "exec", f"sb{live_id}-c1", "ping", "-c", "1", "-W", "2", "server.test"],
                              capture_output=True, text=True)
        assert ping.returncode == 0, ping.stdout + ping.stderr
    finally:
        live.send_signal(signal.SIGTERM)
        live.wait(timeout=20)
    assert of(live_id) == []


@pytest.mark.serial
def test_next_run_removes_what_a_dead_run_left() -> None:
    dead, dead_id = start_shell("sleep", "120")
    dead.kill()
    dead.wait()
    assert run_cli("shell", "--link", "lan", "-q", "--", "true").returncode == 0
    assert of(dead_id) == []
    assert satbench_leftovers() == []
