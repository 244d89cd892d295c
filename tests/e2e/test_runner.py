"""Experiments end to end, over real namespaces: a two-trial experiment in
Chromium into SQLite, its export and its report (rendered in Chromium); an
invalid trial stored with its reason; resume after SIGKILL runs only what is
missing; Ctrl-C stops cleanly and keeps finished trials."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from ..helpers import SATBENCH, run_cli, satbench_leftovers


def write(tmp_path: Path, name: str, body: str) -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(f'[experiment]\nname = "{name}"\nseed = 1\ntimeout_s = 60\n{body}')
    return p


def rows(db: Path, q: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(q).fetchall()
    finally:
        con.close()


def test_two_trials_in_chromium_into_sqlite_export_and_report(tmp_path: Path) -> None:
    exp = write(tmp_path, "two", '[factors]\nlink = "wire"\n"link.delay_ms" = 25\nprotocol = ["h2", "h3"]\n'
                                 'page = "uniform-100k"\nclient = "chromium"\ncc = "bbr"\n')
    db = tmp_path / "r" / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "2 valid" in p.stdout and "ETA" in p.stderr
    trials = rows(db, "SELECT id, status, reason, factors, env, artefacts, link_counters, server_summary FROM trials")
    assert len(trials) == 2
    assert rows(db, "PRAGMA journal_mode") == [("wal",)]
    for tid, status, reason, factors, env, art, link, server in trials:
        assert status == "valid", reason
        f, env, link, server = json.loads(factors), json.loads(env), json.loads(link), json.loads(server)
        assert f["link.delay_ms"] == 25 and f["cc"] == "bbr"
        assert env["kernel"] and env["browser"].startswith("Chromium") and env["quiche"] and env["emulator_seed"]
        assert link["forward"]["delivered"]["bytes"] > 100_000
        assert server["cc"] == ["bbr"] and server["protocols"] == [f["protocol"]]
        assert Path(art, "server", "access.jsonl").exists() and Path(art, "client.json").exists()
        m = dict(rows(db, f"SELECT name, value FROM metrics WHERE trial_id = {tid}"))
        assert m["ttfb_ms"] <= m["fcp_ms"] <= m["plt_ms"] and m["ttfb_ms"] >= 50
        assert m["cls"] >= 0 and 0 <= m["tbt_ms"] < m["plt_ms"]  # Chromium's layout shifts and long tasks
        assert m["overhead_pct"] > 0 and m["wire_bytes"] > m["page_bytes"] > 100_000
        objs = rows(db, f"SELECT protocol, url FROM objects WHERE trial_id = {tid}")
        assert len([u for _, u in objs if u.endswith(".jpg")]) == 8 and {o[0] for o in objs} == {f["protocol"]}
    # The pandas API and the exports.
    from satbench import open_results

    df = open_results(db).trials("two")
    assert sorted(df["protocol"]) == ["h2", "h3"] and df["plt_ms"].notna().all()
    for fmt in ("csv", "parquet"):
        p = run_cli("export", "--db", str(db), "--format", fmt, "-o", str(tmp_path / fmt))
        assert p.returncode == 0, p.stderr
        assert (tmp_path / fmt / f"trials.{fmt}").stat().st_size > 0
    import pandas as pd

    assert pd.read_parquet(tmp_path / "parquet" / "objects.parquet")["url"].str.endswith(".jpg").sum() == 16
    # The report renders in headless Chromium: every figure is an image that decoded.
    out = tmp_path / "report"
    p = run_cli("report", "--db", str(db), "-o", str(out), timeout=300)
    assert p.returncode == 0, p.stderr
    svgs = list((out / "figures").glob("*.svg"))
    assert len(svgs) >= 5
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        page = b.new_page()
        page.goto((out / "index.html").as_uri())
        imgs = page.evaluate("Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight])")
        text = page.inner_text("body")  # what a reader sees
        folded = page.evaluate("document.body.textContent")  # with what is folded away
        b.close()
    assert len(imgs) == len(svgs)
    assert all(c and w > 100 and h > 100 for c, w, h in imgs), imgs
    assert "Experiment two" in text and "The answer" in text and text.index("The answer") < text.index("By factor")
    assert "h2 vs h3" not in text and "h2 vs h3" in folded and "Mann-Whitney p" in folded  # the pairwise tables


def test_invalid_trial_is_stored_with_its_reason_and_loader_fairness(tmp_path: Path) -> None:
    exp = write(tmp_path, "inv", '[factors]\nlink = "wire"\n"link.delay_ms" = 25\npage = "uniform-100k"\n'
                                 'client = "loader"\n\n[[trial]]\nprotocol = "h3"\n"server.h3" = false\n\n'
                                 '[[trial]]\nprotocol = "h2"\nclients = 3\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    got = {json.loads(f)["protocol"]: (s, r, tid) for tid, s, r, f in rows(db, "SELECT id, status, reason, factors FROM trials")}
    status, reason, _ = got["h3"]
    assert status == "invalid" and ("HTTP/3" in reason or "QUIC" in reason)
    status, reason, tid = got["h2"]
    assert status == "valid", reason
    m = dict(rows(db, f"SELECT name, value FROM metrics WHERE trial_id = {tid}"))
    xs = [x for (x,) in rows(db, f"SELECT throughput_mbps FROM clients WHERE trial_id = {tid}")]
    assert len(xs) == 3 and all(x > 0 for x in xs)
    # Jain's index of the three stored throughputs, by its formula; three loaders of one page on
    # an unlimited link, started together, get nearly the same: it is close to 1.
    assert m["jain_throughput"] == pytest.approx(sum(xs) ** 2 / (3 * sum(x * x for x in xs)))
    assert m["jain_throughput"] > 0.9, xs
    # The report counts the invalid trial with its reason.
    p = run_cli("report", "--db", str(db), "-o", str(tmp_path / "rep"))
    assert p.returncode == 0, p.stderr
    assert "Invalid and failed trials" in (tmp_path / "rep" / "index.html").read_text()


SLOW = '[factors]\nlink = "wire"\n"link.delay_ms" = 100\nprotocol = ["h1", "h2", "h3"]\n' \
       'page = ["uniform-100k", "single-100k"]\nclient = "loader"\n'


def _start(exp: Path, db: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([*SATBENCH, "run", str(exp), "--db", str(db)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for_trials(db: Path, n: int, proc: subprocess.Popen[str], timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if db.exists():
            try:
                k = rows(db, "SELECT COUNT(*) FROM trials")[0][0]
            except sqlite3.OperationalError:
                k = 0
            if k >= n:
                return int(k)
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} trials after {timeout} s")


@pytest.mark.serial
def test_resume_after_sigkill_loses_nothing_and_runs_only_the_missing(tmp_path: Path) -> None:
    exp = write(tmp_path, "kill", SLOW)
    db = tmp_path / "db.sqlite"
    proc = _start(exp, db)
    _wait_for_trials(db, 2, proc)
    os.kill(proc.pid, signal.SIGKILL)  # the runner only: its testbed is orphaned mid-trial
    proc.wait()
    before = rows(db, "SELECT id, key, status, started, duration_s FROM trials ORDER BY id")
    assert 2 <= len(before) < 6
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"{len(before)} already stored" in p.stderr
    after = rows(db, "SELECT id, key, status, started, duration_s FROM trials ORDER BY id")
    assert after[:len(before)] == before  # finished trials untouched
    assert len(after) == 6 and len({r[1] for r in after}) == 6
    assert all(r[2] == "valid" for r in after)
    assert f"{6 - len(before)} trials run" in p.stdout
    # Nothing of the killed run's testbed is left.
    assert satbench_leftovers() == []


def test_ctrl_c_stops_cleanly_and_keeps_finished_trials(tmp_path: Path) -> None:
    exp = write(tmp_path, "intr", SLOW)
    db = tmp_path / "db.sqlite"
    proc = _start(exp, db)
    _wait_for_trials(db, 1, proc)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "resume" in err
    stored = rows(db, "SELECT status FROM trials")
    assert 1 <= len(stored) < 6 and all(s == "valid" for (s,) in stored)
    assert satbench_leftovers() == []


def test_object_metrics_next_to_the_paint_metrics_in_chromium(tmp_path: Path) -> None:
    """On a triangular page (a 20 KB first object, a 110 KB fifth), the
    studies' FCP (first object loaded) comes before their LCP (largest object
    loaded), and both are the resource timings of those objects."""
    exp = write(tmp_path, "tri", '[factors]\nlink = "wire"\n"link.delay_ms" = 50\n"link.rate_mbps" = 10\n'
                                 'protocol = "h2"\npage = "triangular-500k"\nclient = "chromium"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    ((tid,),) = rows(db, "SELECT id FROM trials")
    m = dict(rows(db, f"SELECT name, value FROM metrics WHERE trial_id = {tid}"))
    ends = {u.rsplit("/", 1)[1]: e for u, e in rows(db, f"SELECT url, end_ms FROM objects WHERE trial_id = {tid}")}
    images = {k: v for k, v in ends.items() if k.endswith(".jpg")}
    assert len(images) == 8
    assert m["first_object_ms"] == min(images.values())
    assert m["largest_object_ms"] == images["img5.jpg"]  # 110 KB, the largest
    assert m["first_object_ms"] < m["largest_object_ms"] <= m["last_object_ms"] == max(images.values())
    # The paint metrics are the browser's own, kept beside them.
    assert m["fcp_ms"] > 0 and m["lcp_ms"] > 0
