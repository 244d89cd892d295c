"""The browser watchdog on a stand-in process tree (a shell as the driver, a
copy of sleep named like the browser as its child): it fires soon after the
main process exits while the load still runs, never while it lives or once
the load has ended, and at the limit in any case."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from satbench.endpoints.chromium import Watchdog

NAMES = ("chromium",)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Any]]:
    """A driver (sh) whose child is a process named ``chromium``; yields (driver, child pid getter)."""
    fake = tmp_path / "chromium"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", fake)
    driver = subprocess.Popen(["sh", "-c", f"{fake} 60 & wait; sleep 60"])
    deadline = time.monotonic() + 5
    w = Watchdog(None, NAMES, 60)
    w.driver = [driver.pid]
    while not w._mains() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert w._mains(), "the stand-in browser did not start"
    try:
        yield driver, lambda: next(iter(w._mains()))
    finally:
        driver.kill()
        driver.wait()
        subprocess.run(["pkill", "-f", str(fake)], check=False)


def _watchdog(driver: subprocess.Popen[bytes], limit_s: float) -> Watchdog:
    # A host with no namespace of that name: firing kills nothing of this machine's.
    w = Watchdog(SimpleNamespace(ns="sb-no-such-netns"), NAMES, limit_s)  # type: ignore[arg-type]
    w.driver = [driver.pid]
    w.DRIVER_GRACE_S = 0.1
    w.EXIT_GRACE_S = 1.0  # 2 s in use
    w.EXIT_DRIVER_GRACE_S = 0.1
    return w


def test_fires_soon_after_the_main_process_exits_mid_load(tree: tuple[subprocess.Popen[bytes], Any]) -> None:
    driver, main = tree
    w = _watchdog(driver, 60)
    with w:
        time.sleep(0.5)
        pid = main()
        subprocess.run(["kill", "-9", str(pid)], check=True)
        t0 = time.monotonic()
        while not w.fired and time.monotonic() - t0 < 10:
            time.sleep(0.05)
    assert w.fired and w.exited == pid
    assert w.EXIT_GRACE_S <= time.monotonic() - t0 < w.EXIT_GRACE_S + 1.5
    assert f"pid {pid}" in w.reason() and "exited during the load" in w.reason()


def test_quiet_while_the_browser_lives_and_after_the_load(tree: tuple[subprocess.Popen[bytes], Any]) -> None:
    driver, main = tree
    w = _watchdog(driver, 60)
    with w:
        time.sleep(1.0)
    assert not w.fired
    subprocess.run(["kill", "-9", str(main())], check=True)  # the close, after the load ended
    time.sleep(w.EXIT_GRACE_S + 0.5)
    assert not w.fired


def test_fires_at_the_limit_when_the_browser_hangs(tree: tuple[subprocess.Popen[bytes], Any]) -> None:
    driver, _ = tree
    w = _watchdog(driver, 1.0)
    t0 = time.monotonic()
    with w:
        while not w.fired and time.monotonic() - t0 < 10:
            time.sleep(0.05)
    assert w.fired and w.exited is None
    assert 1.0 <= time.monotonic() - t0 < 3
    assert "no answer within 1 s" in w.reason()
