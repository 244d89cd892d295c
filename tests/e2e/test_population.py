"""Mixed client populations through real namespaces: ten loader clients in a
5:5 mix released by one barrier, two browsers of different protocols in one
trial, and a trial whose clients are starved of CPU."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ..helpers import run_cli

#: Runs alone, after the parallel part of the e2e layer (tests/conftest.py: serial).
pytestmark = pytest.mark.serial


def run(tmp_path: Path, factors: str, timeout: float = 600, attempts: int = 3) -> tuple[dict[str, Any], list[dict[str, Any]],
                                                                       list[tuple[int, str, str]]]:
    exp = tmp_path / "pop.toml"
    exp.write_text(f'[experiment]\nname = "pop"\nseed = 1\ntimeout_s = 90\n[factors]\n{factors}')
    for attempt in range(attempts):  # a machine busy with other work can starve the clients: that trial is invalid
        db = tmp_path / f"db{attempt}.sqlite"
        p = run_cli("run", str(exp), "--db", str(db), timeout=timeout)
        assert p.returncode == 0, p.stdout + p.stderr
        con = sqlite3.connect(db)
        con.row_factory = sqlite3.Row
        [t] = [dict(r) for r in con.execute("SELECT * FROM trials")]
        if t["status"] == "valid" or "CPU-starved" not in (t["reason"] or "") or attempt == attempts - 1:
            break
        con.close()
    t["m"] = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (t["id"],)).fetchall())
    clients = [dict(r) for r in con.execute("SELECT * FROM clients WHERE trial_id = ? ORDER BY client", (t["id"],))]
    objects = [(r["client"], r["url"], r["protocol"]) for r in con.execute(
        "SELECT client, url, protocol FROM objects WHERE trial_id = ?", (t["id"],))]
    con.close()
    return t, clients, objects


def test_ten_loader_clients_start_together_and_jain_matches_the_formula(tmp_path: Path) -> None:
    t, clients, objects = run(tmp_path, 'link = "fair-lte"\npage = "uniform-500k"\nclient = "loader"\n'
                                        'cc = "cubic"\nclients = { h1 = 5, h2 = 5 }\n')
    assert t["status"] == "valid", t["reason"]
    m = t["m"]
    assert m["clients_n"] == 10 and m["clients_h1"] == 5 and m["clients_h2"] == 5
    assert 0 <= m["start_skew_ms"] <= 5.0
    assert len(clients) == 10 and all(c["valid"] for c in clients)
    assert {c["host"] for c in clients} == {f"c{i}" for i in range(1, 11)}  # a host each
    starts = [c["start_unix_ms"] for c in clients]
    assert max(starts) - min(starts) == pytest.approx(m["start_skew_ms"])
    # Jain's index from the stored per-client throughputs, normalised by the fair share C / n.
    x = [c["normalised_throughput"] for c in clients]
    for c in clients:
        assert c["normalised_throughput"] == pytest.approx(c["throughput_mbps"] / (100.0 / 10))
    assert m["jain_throughput"] == pytest.approx(sum(x) ** 2 / (len(x) * sum(v * v for v in x)))
    # Each group spoke its own protocol.
    by_client = {c["client"]: c["grp"] for c in clients}
    wire = {"h1": "http/1.1", "h2": "h2"}
    for client, _url, proto in objects:
        assert proto == wire[by_client[client]], (client, proto)
    assert m["cpu_idle_median_pct"] is not None


def test_two_browsers_of_different_protocols_in_one_trial(tmp_path: Path) -> None:
    t, clients, objects = run(tmp_path, 'link = "fair-lan"\npage = "uniform-100k"\ncc = "cubic"\n'
                                        'client = "chromium"\n'
                                        'clients = { h1 = { n = 1, client = "chromium" }, '
                                        'h3 = { n = 1, client = "firefox" } }\n')
    assert t["status"] == "valid", t["reason"]
    assert [(c["grp"], c["kind"]) for c in clients] == [("h1", "chromium"), ("h3", "firefox")]
    assert t["m"]["start_skew_ms"] <= 50.0
    for c in clients:
        protos = {p for cl, url, p in objects if cl == c["client"] and "/uniform-100k/" in url}
        assert protos == {"http/1.1" if c["grp"] == "h1" else "h3"}, (c, protos)
        assert c["plt_ms"] > 0 and c["fcp_ms"] is not None


def test_clients_starved_of_cpu_make_the_trial_invalid(tmp_path: Path) -> None:
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        t, _, _ = run(tmp_path, 'link = "fair-lan"\npage = "uniform-100k"\nclient = "loader"\ncc = "cubic"\n'
                                'clients = { h2 = 2 }\n', attempts=1)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert t["status"] == "invalid" and "CPU-starved" in t["reason"], t["reason"]
    assert t["m"]["cpu_idle_median_pct"] < 5.0
