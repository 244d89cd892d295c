"""The browser watchdog on a stand-in process tree (a shell as the driver, a
copy of sleep named like the browser as its child): it fires soon after the
main process exits while the load still runs, never while it lives or once
the browser is being closed, and at the limit in any case."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from satbench.endpoints.chromium import Watchdog

NAMES = ("chromium",)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Callable[[], int]]]:
    """A driver (sh) whose child is a process named ``chromium``: (driver, the child's pid)."""
    fake = tmp_path / "chromium"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake)
    driver = subprocess.Popen(["sh", "-c", f"{fake} 60 & wait; exec sleep 60"])
    look = Watchdog(None, NAMES, 60)
    look.driver = [driver.pid]
    deadline = time.monotonic() + 5
    while not look._mains() and time.monotonic() < deadline:
        time.sleep(0.02)
    (pid,) = look._mains()
    try:
        yield driver, lambda: pid
    finally:
        for p in (pid, driver.pid):
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        driver.wait()


def _watchdog(driver: subprocess.Popen[bytes], limit_s: float) -> Watchdog:
    # A host with no namespace of that name: firing kills nothing of this machine's.
    w = Watchdog(SimpleNamespace(ns="sb-no-such-netns"), NAMES, limit_s)  # type: ignore[arg-type]
    w.driver = [driver.pid]
    w.DRIVER_GRACE_S = w.EXIT_DRIVER_GRACE_S = 0.1
    w.EXIT_GRACE_S = 1.0  # 2 s in use
    return w


def _wait_fired(w: Watchdog, within_s: float) -> None:
    t0 = time.monotonic()
    while not w.fired and time.monotonic() - t0 < within_s:
        time.sleep(0.05)


def test_fires_soon_after_the_main_process_exits_mid_load(
        tree: tuple[subprocess.Popen[bytes], Callable[[], int]]) -> None:
    driver, main = tree
    w = _watchdog(driver, 60)
    with w:
        time.sleep(0.5)
        t0 = time.monotonic()
        os.kill(main(), signal.SIGKILL)
        _wait_fired(w, 10)
        took = time.monotonic() - t0
    assert w.fired and w.exited == main()
    assert w.EXIT_GRACE_S <= took < w.EXIT_GRACE_S + 5, took
    assert f"pid {main()}" in w.reason() and "exited during the load" in w.reason()


def test_quiet_while_the_browser_lives_and_once_it_is_being_closed(
        tree: tuple[subprocess.Popen[bytes], Callable[[], int]]) -> None:
    driver, main = tree
    w = _watchdog(driver, 60)
    with w:
        time.sleep(1.0)
        assert not w.fired
        # A normal end: the close, then the load's own work after it (frames decoded, results),
        # longer than the grace.
        w.closing()
        os.kill(main(), signal.SIGKILL)
        time.sleep(w.EXIT_GRACE_S + 1.0)
    assert not w.fired


def test_fires_at_the_limit_when_the_browser_hangs(
        tree: tuple[subprocess.Popen[bytes], Callable[[], int]]) -> None:
    driver, _ = tree
    w = _watchdog(driver, 1.0)
    t0 = time.monotonic()
    with w:
        _wait_fired(w, 10)
    assert w.fired and w.exited is None
    assert 1.0 <= time.monotonic() - t0 < 5
    assert "no answer within 1 s" in w.reason()
