"""Faults during a study, each injected: a part of the testbed killed in the
middle of a trial, the disk under the artefacts full, the runner signalled
at random moments. Each fault fails the trial it hit, with a reason naming
it; the next trial runs normally; the database stays consistent and nothing
is left behind."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ..helpers import SATBENCH, run_cli, satbench_leftovers


def _exp(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(f'[experiment]\nname = "{name}"\nseed = 1\ntimeout_s = 10\norder = "sequential"\n{body}')
    return p


def _rows(db: Path) -> list[tuple[str, str, str | None]]:
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT key, status, reason FROM trials ORDER BY id").fetchall()
    finally:
        con.close()


def _pids(pattern: str) -> list[int]:
    p = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(x) for x in p.stdout.split()]


def _descends_from(pid: int, root: int) -> bool:
    """Whether ``pid`` is ``root`` or one of its descendants (the parent chain in /proc)."""
    while pid > 1:
        if pid == root:
            return True
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: the parent's pid
    return False


def _kill_once(pattern: str, after_s: float, stop: threading.Event, killed: list[int], root: int) -> None:
    """Kill the first process matching ``pattern`` once it has lived ``after_s``: one the study
    (``root``) started, never another test's beside it or one that was running before."""
    seen: dict[int, float] = {}
    while not stop.is_set() and not killed:
        now = time.monotonic()
        for pid in _pids(pattern):
            if not _descends_from(pid, root):
                continue
            seen.setdefault(pid, now)
            if now - seen[pid] >= after_s:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
        time.sleep(0.05)


def _run_killing(args: list[str], pattern: str, after_s: float) -> tuple[subprocess.CompletedProcess[str], list[int]]:
    """``satbench ARGS``, killing the first of its processes that match ``pattern`` after ``after_s``."""
    proc = subprocess.Popen([*SATBENCH, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stop, killed = threading.Event(), []
    t = threading.Thread(target=_kill_once, args=(pattern, after_s, stop, killed, proc.pid))
    t.start()
    try:
        out, err = proc.communicate(timeout=300)
    finally:
        stop.set()
        t.join()
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), killed


#: Two trials of about two seconds each: 2 MB at 10 Mbit/s over 100 ms RTT.
SLOW = ('[factors]\nlink = "wire"\n"link.delay_ms" = 50\n"link.rate_mbps" = 10\nprotocol = ["h1", "h2"]\n'
        'page = "uniform-2m"\nclient = "loader"\n')


@pytest.mark.parametrize("part, pattern, words", [
    ("emulator", "satbench-link --config", "link emulator died (signal 9"),
    ("server", "satbench-server --root", "satbench-server died (signal 9"),
])
def test_a_part_killed_mid_trial_fails_that_trial_only(tmp_path: Path, part: str, pattern: str, words: str) -> None:
    exp = _exp(tmp_path, f"kill-{part}", SLOW)
    db = tmp_path / "db.sqlite"
    p, killed = _run_killing(["run", str(exp), "--db", str(db)], pattern, 0.8)
    assert killed, f"no {part} was killed"
    assert p.returncode == 1, p.stdout + p.stderr  # a failed trial: exit 1
    (k1, s1, r1), (k2, s2, r2) = _rows(db)
    assert s1 == "failed" and words in (r1 or ""), r1
    assert s2 == "valid", r2  # the next trial ran normally
    assert satbench_leftovers() == []
    # Resuming runs the failed trial again, and only it.
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stderr
    assert [r[1] for r in _rows(db)] == ["valid", "valid"] and len({r[0] for r in _rows(db)}) == 2


def test_a_killed_browser_fails_its_trial(tmp_path: Path) -> None:
    exp = _exp(tmp_path, "kill-browser", '[factors]\nlink = "wire"\n"link.delay_ms" = 100\n"link.rate_mbps" = 5\n'
                                         'protocol = ["h1", "h2"]\npage = "uniform-1m"\nclient = "chromium"\n')
    db = tmp_path / "db.sqlite"
    # The browser's main process (the one Playwright talks to over its pipe).
    _, killed = _run_killing(["run", str(exp), "--db", str(db)], "chromium.*--remote-debugging-pipe", 0.5)
    assert killed
    (_, s1, r1), (_, s2, r2) = _rows(db)
    assert s1 == "failed" and "browser" in (r1 or ""), r1
    assert s2 == "valid", r2
    # Failed within seconds, not at the trial's timeout plus the watchdog's grace (70 s): whether
    # the driver noticed itself (about 1 s) or the watchdog saw the main process gone (2 s, then
    # 2 s for the driver).
    con = sqlite3.connect(db)
    (took,) = con.execute("SELECT duration_s FROM trials ORDER BY id LIMIT 1").fetchone()
    con.close()
    assert took < 30, took
    assert satbench_leftovers() == []


def test_a_full_disk_under_the_artefacts(tmp_path: Path) -> None:
    """A small tmpfs under the artefact folder, filled: the trial that cannot
    write its evidence fails saying so; once there is room again the next
    trial runs normally. The run happens in a private mount namespace, so the
    host's mounts are not touched."""
    exp = _exp(tmp_path, "disk", '[factors]\nlink = "wire"\nprotocol = ["h1", "h2", "h3"]\npage = "uniform-100k"\n'
                                 'client = "loader"\n')
    db = tmp_path / "db.sqlite"
    art = tmp_path / "artefacts"
    art.mkdir()
    script = f'mount -t tmpfs -o size=1m none {art} && (head -c 1100000 /dev/zero > {art}/filler; exec "$@")'
    proc = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *SATBENCH,
                             "run", str(exp), "--db", str(db)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    # Make room once the first trial is stored (the filler is inside the run's own mount namespace).
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            try:
                if _rows(db):
                    Path(f"/proc/{proc.pid}/root{art}/filler").unlink(missing_ok=True)
                    break
            except sqlite3.OperationalError:
                pass
        time.sleep(0.05)
    out, err = proc.communicate(timeout=300)
    rows = _rows(db)
    assert len(rows) == 3, (out, err)
    assert rows[0][1] == "failed" and "No space left on device" in (rows[0][2] or ""), rows[0]
    assert [r[1] for r in rows[1:]] == ["valid", "valid"], rows
    assert satbench_leftovers() == []


@pytest.mark.serial
def test_chaos_the_runner_signalled_at_random_moments(tmp_path: Path) -> None:
    """SIGTERM, SIGINT and SIGKILL at random moments, again and again, until
    the study is done: every trial ends stored exactly once, none finished is
    ever lost, and nothing is left behind."""
    exp = _exp(tmp_path, "chaos", 'repetitions = 3\n[factors]\nlink = "wire"\n"link.delay_ms" = 20\n'
                                  'protocol = ["h1", "h2"]\npage = ["blank", "uniform-100k"]\nclient = "loader"\n')
    db = tmp_path / "db.sqlite"
    rnd = random.Random(7)
    stored: dict[str, tuple] = {}
    for round_ in range(12):
        proc = subprocess.Popen([*SATBENCH, "run", str(exp), "--db", str(db)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        sig = rnd.choice([signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
        try:
            proc.wait(timeout=rnd.uniform(0.3, 2.5))
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, sig)
            proc.wait(timeout=60)
        if proc.stdout:
            proc.stdout.close()
        if proc.stderr:
            proc.stderr.close()
        if sig != signal.SIGKILL:
            # Done (0 or 1), stopped by the run's handler (128+N), or killed by the
            # signal before the run installed its handler (-N, nothing started yet).
            assert proc.returncode in (0, 1, 128 + sig, -sig), (round_, sig, proc.returncode)
        if not db.exists():
            continue
        con = sqlite3.connect(db)
        rows = con.execute("SELECT key, status, started FROM trials").fetchall()
        con.close()
        keys = [r[0] for r in rows]
        assert len(keys) == len(set(keys)), "a trial stored twice"
        now = {k: (s, t) for k, s, t in rows}
        for k, v in stored.items():
            if v[0] != "failed":
                assert now.get(k) == v, "a finished trial was lost or changed"
        stored = now
    p = run_cli("run", str(exp), "--db", str(db), timeout=600)
    assert p.returncode == 0, p.stderr
    rows = _rows(db)
    assert len(rows) == 4 * 3 and len({r[0] for r in rows}) == 4 * 3
    assert {r[1] for r in rows} == {"valid"}
    assert satbench_leftovers() == []
