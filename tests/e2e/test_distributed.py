"""Studies on a Dask cluster, over real testbeds: a local cluster of two
workers (``--parallel 2``) stores every trial of a small loader study once,
with the worker that ran it, and within noise of a sequential run of the same
file; killing a worker (SIGKILL) in the middle of a trial loses no finished
trial and stores the trial it ran once, from a second attempt on the other
worker; a worker reporting another commit is refused with one line."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import ssl
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from satbench.experiment import cluster_tls
from satbench.experiment.cluster_tls import ClusterTLS
from satbench.testbed.cleanup import RUN_ROOT, cleanup

from ..helpers import SATBENCH, ListenerWatch, run_cli, satbench_leftovers


def write(tmp: Path, name: str, body: str, reps: int) -> Path:
    p = tmp / f"{name}.toml"
    p.write_text(f'[experiment]\nname = "{name}"\nseed = 1\ntimeout_s = 60\nrepetitions = {reps}\n{body}')
    return p


def rows(db: Path) -> list[dict[str, Any]]:
    con = sqlite3.connect(db)
    try:
        out = []
        for tid, key, status, reason, factors, env, art, started in con.execute(
                "SELECT id, key, status, reason, factors, env, artefacts, started FROM trials ORDER BY id"):
            m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
            out.append({"id": tid, "key": key, "status": status, "reason": reason, "factors": json.loads(factors),
                        "env": json.loads(env), "artefacts": art, "started": started, "plt_ms": m.get("plt_ms")})
        return out
    finally:
        con.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        assert proc.poll() is None, path.read_text(errors="replace")[-2000:]
        time.sleep(0.1)
    raise AssertionError(f"no {text!r} in {path} after {timeout} s: {path.read_text(errors='replace')[-2000:]}")


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@contextmanager
def scheduler(tmp: Path, tls: ClusterTLS | None = None) -> Iterator[str]:
    """A Dask scheduler on loopback: plain TCP (allowed there), or with ``tls`` mutual TLS."""
    address = f"{'tls' if tls else 'tcp'}://127.0.0.1:{free_port()}"
    log = tmp / "scheduler.log"
    with open(log, "wb") as out:
        p = subprocess.Popen([*SATBENCH, "scheduler", "--listen", address], stdout=out, stderr=out,
                             start_new_session=True, env=with_tls(tls))
    try:
        wait_for(log, f"satbench scheduler at {address}", p)
        yield address
    finally:
        stop([p])


def with_tls(tls: ClusterTLS | None) -> dict[str, str]:
    return {**os.environ, **(tls.env() if tls else {})}


def start_worker(tmp: Path, address: str, name: str, *extra: str, argv: list[str] | None = None,
                 tls: ClusterTLS | None = None) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp / f"{name}.log"
    with open(log, "wb") as out:
        p = subprocess.Popen(argv or [*SATBENCH, "worker", "--scheduler", address, "--name", name,
                                      "--dir", str(tmp / "workerdir"), *extra],
                             stdout=out, stderr=out, start_new_session=True, env=with_tls(tls))
    try:
        wait_for(log, f"satbench worker {name} at ", p)
    except BaseException:
        stop([p])  # a worker that never came up must not outlive its test (and fail the next one's count)
        raise
    return p, log


def owned_testbeds(pid: int) -> list[str]:
    """The live testbeds a process owns (a worker mid-trial owns one)."""
    out = []
    if RUN_ROOT.is_dir():
        for d in RUN_ROOT.iterdir():
            try:
                if json.loads((d / "owner.json").read_text())["pid"] == pid:
                    out.append(d.name)
            except (OSError, ValueError, KeyError):
                continue
    return out


SMALL = '[factors]\nlink = "lan"\nprotocol = ["h1", "h2"]\npage = "uniform-100k"\nclient = "loader"\n'


@pytest.mark.serial
def test_two_local_workers_store_each_trial_once_within_noise_of_a_sequential_run(tmp_path: Path) -> None:
    exp = write(tmp_path, "par", SMALL, reps=4)
    t0 = time.monotonic()
    with ListenerWatch() as watch:
        p = run_cli("run", str(exp), "--db", str(tmp_path / "par.sqlite"), "--parallel", "2", timeout=240)
    parallel_s = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    assert "worker local-1 joined (tls://127.0.0.1:" in p.stderr and "worker local-2 joined (tls://127.0.0.1:" in p.stderr
    # Scheduler, workers and their HTTP servers: every one on loopback, and seen by the watch.
    assert watch.outside == [], watch.outside
    assert len([s for s in watch.new if s[0] == "tcp"]) >= 3, watch.new
    par = rows(tmp_path / "par.sqlite")
    assert len(par) == 8 and len({r["key"] for r in par}) == 8
    assert all(r["status"] == "valid" for r in par), [r["reason"] for r in par]
    workers = {r["env"]["worker"]["name"] for r in par}
    assert workers == {"local-1", "local-2"}
    for r in par:
        w = r["env"]["worker"]
        assert w["attempt"] == 1 and len(w["cores"]) == len(os.sched_getaffinity(0)) // 2
        assert Path(r["artefacts"], "client.json").exists()  # fetched and unpacked beside the database
        assert Path(r["artefacts"]).parent == tmp_path / "artefacts" / "par"
    # The same file, one trial after another: the same trials, and PLTs within noise.
    t0 = time.monotonic()
    with ListenerWatch() as watch:
        p = run_cli("run", str(exp), "--db", str(tmp_path / "seq.sqlite"), timeout=240)
    sequential_s = time.monotonic() - t0
    assert p.returncode == 0, p.stdout + p.stderr
    assert watch.new == set(), watch.new  # one trial after another: no listener in the host namespace at all
    seq = rows(tmp_path / "seq.sqlite")
    assert {r["key"] for r in seq} == {r["key"] for r in par}
    for proto in ("h1", "h2"):
        a = statistics.median(r["plt_ms"] for r in par if r["factors"]["protocol"] == proto)
        b = statistics.median(r["plt_ms"] for r in seq if r["factors"]["protocol"] == proto)
        assert abs(a - b) <= max(15.0, 0.2 * b), (proto, a, b)
    print(f"parallel 2: {parallel_s:.1f} s, sequential: {sequential_s:.1f} s")
    # Resumed: nothing missing, nothing submitted.
    p = run_cli("run", str(exp), "--db", str(tmp_path / "par.sqlite"), "--parallel", "2", timeout=120)
    assert p.returncode == 0 and "0 to run" in p.stderr, p.stderr
    assert satbench_leftovers() == []


SLOW = '[factors]\nlink = "wire"\n"link.delay_ms" = 100\nprotocol = ["h1", "h2", "h3"]\npage = "uniform-100k"\n' \
       'client = "loader"\n'


def refused_without_our_certificate(address: str, tls: ClusterTLS, other: ClusterTLS) -> list[str]:
    """How a worker at tls://HOST:PORT answered three clients: without a certificate, with another
    CA's, and with the cluster's (which it must accept: the check can fail)."""
    host, port = address.removeprefix("tls://").rsplit(":", 1)
    out = []
    for cert in (None, other, tls):
        ctx = ssl.create_default_context(cafile=str(tls.ca))
        ctx.check_hostname = False
        if cert is not None:
            ctx.load_cert_chain(cert.cert("client"), cert.key("client"))
        with socket.create_connection((host, int(port)), timeout=3) as raw:
            try:
                with ctx.wrap_socket(raw) as s:
                    s.settimeout(3)
                    # TLS 1.3: the server's verdict on our certificate comes after Finished; once it
                    # accepts, Dask's comm sends its handshake.
                    out.append("closed" if s.recv(1) == b"" else "accepted")
            except TimeoutError:
                out.append("silent")
            except (ssl.SSLError, ConnectionResetError) as e:
                out.append(f"refused: {type(e).__name__}")
    return out


@pytest.mark.serial
def test_a_worker_killed_mid_trial_loses_only_that_trial_run_again_elsewhere(tmp_path: Path) -> None:
    """Also: with a TLS scheduler and two workers, nothing listens beyond loopback, and a worker
    refuses a peer without the cluster's certificate."""
    exp = write(tmp_path, "kill", SLOW, reps=2)
    db = tmp_path / "kill.sqlite"
    tls = cluster_tls.make(tmp_path / "tls")
    other = cluster_tls.make(tmp_path / "other")
    procs: list[subprocess.Popen[bytes]] = []
    with ListenerWatch() as watch, scheduler(tmp_path, tls) as address:
        try:
            a, _ = start_worker(tmp_path, address, "wa", tls=tls)
            b, b_log = start_worker(tmp_path, address, "wb", tls=tls)
            procs += [a, b]
            m = re.search(r"satbench worker wb at (tls://127\.0\.0\.1:\d+)", b_log.read_text())
            assert m, b_log.read_text()
            answers = refused_without_our_certificate(m.group(1), tls, other)
            assert answers[:2] == ["refused: SSLError"] * 2 and answers[2] == "accepted", answers
            with open(tmp_path / "run.log", "wb") as out:
                run = subprocess.Popen([*SATBENCH, "run", str(exp), "--db", str(db), "--scheduler", address],
                                       stdout=out, stderr=out, start_new_session=True, env=with_tls(tls))
            procs.append(run)
            # Once a trial is stored and worker a is in the middle of one (it owns a testbed): SIGKILL it.
            deadline = time.monotonic() + 90
            while not (db.exists() and count(db) >= 1 and owned_testbeds(a.pid)):
                assert time.monotonic() < deadline and run.poll() is None, (tmp_path / "run.log").read_text()
                time.sleep(0.02)
            before = rows(db)
            os.kill(a.pid, signal.SIGKILL)
            a.wait()
            assert run.wait(timeout=120) == 0, (tmp_path / "run.log").read_text()
        finally:
            stop(procs)
    assert watch.outside == [], watch.outside
    assert len([s for s in watch.new if s[0] == "tcp"]) >= 3, watch.new  # scheduler, workers, their HTTP
    log = (tmp_path / "run.log").read_text()
    after = rows(db)
    assert [(r["id"], r["key"], r["started"]) for r in after[:len(before)]] == [
        (r["id"], r["key"], r["started"]) for r in before]  # nothing finished was lost or replaced
    assert len(after) == 6 and len({r["key"] for r in after}) == 6, log
    assert all(r["status"] == "valid" for r in after), [r["reason"] for r in after]
    again = [r for r in after if r["env"]["worker"]["attempt"] == 2]
    assert len(again) == 1 and again[0]["env"]["worker"]["name"] == "wb", log
    assert "worker wa lost" in log and again[0]["key"] in log
    # What the killed worker's testbed left was removed by the other's next trial (or is now).
    cleanup()
    assert satbench_leftovers() == []


def count(db: Path) -> int:
    try:
        con = sqlite3.connect(db)
        try:
            return int(con.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def test_a_worker_with_another_commit_is_refused_with_one_line(tmp_path: Path) -> None:
    exp = write(tmp_path, "refuse", SMALL, reps=1)
    db = tmp_path / "refuse.sqlite"
    procs: list[subprocess.Popen[bytes]] = []
    bad = ("from pathlib import Path; from satbench.experiment.worker import serve_worker; "
           f"serve_worker({{!r}}, name='bad', directory=Path({str(tmp_path / 'workerdir')!r}), "
           "reports={{'commit': 'deadbeef' * 5}}, on_ready=lambda line: print(line, flush=True))")
    with scheduler(tmp_path) as address:
        try:
            good, _ = start_worker(tmp_path, address, "good")
            procs.append(good)
            b, bad_log = start_worker(tmp_path, address, "bad", argv=[sys.executable, "-c", bad.format(address)])
            procs.append(b)
            p = run_cli("run", str(exp), "--db", str(db), "--scheduler", address, timeout=120)
        finally:
            stop(procs)
    assert p.returncode == 0, p.stdout + p.stderr
    refused = [line for line in p.stderr.splitlines() if "refused" in line]
    assert len(refused) == 1, p.stderr
    assert refused[0].startswith("  worker bad refused (tcp://127.0.0.1:")
    assert "commit deadbeefdeadbeefde differs from the coordinator's" in refused[0]
    stored = rows(db)
    assert len(stored) == 2 and {r["env"]["worker"]["name"] for r in stored} == {"good"}
    assert "refused by the coordinator: commit deadbeef" in bad_log.read_text()
    assert satbench_leftovers() == []


@pytest.mark.serial
def test_ctrl_c_at_the_coordinator_cancels_the_queue_keeps_what_finished_and_stops_its_workers(
        tmp_path: Path) -> None:
    exp = write(tmp_path, "intr", SLOW, reps=2)
    db = tmp_path / "intr.sqlite"
    proc = subprocess.Popen([*SATBENCH, "run", str(exp), "--db", str(db), "--parallel", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 90
    while count(db) < 1:
        assert time.monotonic() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    # Its local workers: children of the coordinator, each in a session of its own.
    workers = subprocess.run(["pgrep", "-P", str(proc.pid), "-f", "satbench worker --scheduler tls://127.0.0.1"],
                             capture_output=True, text=True).stdout.split()
    assert len(workers) == 2, workers
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the coordinator's process group
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "resume" in err
    stored = rows(db)
    assert 1 <= len(stored) < 6 and all(r["status"] == "valid" for r in stored)
    assert [w for w in workers if Path(f"/proc/{w}").exists()] == [], "a local worker outlived its coordinator"
    assert satbench_leftovers() == []
    # Resumed: only the missing trials run.
    p = run_cli("run", str(exp), "--db", str(db), "--parallel", "2", timeout=180)
    assert p.returncode == 0 and f"{6 - len(stored)} to run" in p.stderr, p.stderr
    assert len({r["key"] for r in rows(db)}) == 6 == len(rows(db))
