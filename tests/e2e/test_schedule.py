"""Browser-shaped loader clients (issue 25): a schedule learned from a
Chromium trial on the shop page, then a 5:5 population of loader clients
replaying it on one bottleneck: every client asks for exactly what Chromium
asked for, never before the response it waits for has ended and the
browser's delay has passed, and the trial is not starved on 2 cores."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from ..helpers import run_cli

#: Runs alone, after the parallel part of the e2e layer (tests/conftest.py: serial).
pytestmark = pytest.mark.serial


def _run(tmp_path: Path, name: str, factors: str, attempts: int = 3) -> tuple[sqlite3.Connection, dict]:
    exp = tmp_path / f"{name}.toml"
    exp.write_text(f'[experiment]\nname = "{name}"\nseed = 1\ntimeout_s = 90\n[factors]\n{factors}')
    for attempt in range(attempts):  # a machine busy with other work can starve the clients: that trial is invalid
        db = tmp_path / f"{name}{attempt}.sqlite"
        p = run_cli("run", str(exp), "--db", str(db), timeout=600)
        assert p.returncode == 0, p.stdout + p.stderr
        con = sqlite3.connect(db)
        con.row_factory = sqlite3.Row
        [t] = [dict(r) for r in con.execute("SELECT * FROM trials")]
        if t["status"] == "valid" or "CPU-starved" not in (t["reason"] or "") or attempt == attempts - 1:
            return con, t
        con.close()
    raise AssertionError("unreachable")


def test_a_population_of_browser_shaped_loaders_replays_chromiums_schedule(tmp_path: Path) -> None:
    con, chrome = _run(tmp_path, "chrome", 'link = "fair-lte"\npage = "shop"\nprotocol = "h2"\nclient = "chromium"\n')
    assert chrome["status"] == "valid", chrome["reason"]
    (plt,) = con.execute("SELECT value FROM metrics WHERE trial_id = ? AND name = 'plt_ms'", (chrome["id"],)).fetchone()
    # What Chromium asked for over the network and had answered, up to its load event (its favicon's 404 is not).
    asked = Counter(u for (u,) in con.execute(
        "SELECT url FROM objects WHERE trial_id = ? AND start_ms IS NOT NULL AND end_ms IS NOT NULL AND start_ms <= ? "
        "AND (status IS NULL OR status BETWEEN 200 AND 399)", (chrome["id"], plt)))
    assert 150 < sum(asked.values()) < 200  # the shop page's objects
    db = con.execute("PRAGMA database_list").fetchone()[2]
    con.close()
    sched = tmp_path / "shop.json"
    p = run_cli("pages", "schedule", "--db", db, "--page", "shop", "--out", str(sched))
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(sched.read_text())
    reqs = doc["requests"]
    assert reqs[0] == {"url": "https://server.test/shop/", "after": None, "delay_ms": 0.0}
    assert Counter(r["url"] for r in reqs) == asked
    # The shop page's stylesheets name a font and images: those waited for their stylesheet.
    assert any(r["after"] not in (None, 0) for r in reqs), reqs

    # The ten browser-shaped clients: one attempt, so a starved trial fails the test (the one browser
    # above may be retried: its load is not what this test is about).
    con, t = _run(tmp_path, "shaped", f'link = "fair-lte"\npage = "shop"\nclient = "loader"\ncc = "cubic"\n'
                                      f'clients = {{ h1 = 5, h2 = 5 }}\nschedule = "{sched}"\n', attempts=1)
    assert t["status"] == "valid", t["reason"]
    env = json.loads(t["env"])
    assert env["schedule"]["file"] == str(sched.resolve()) and len(env["schedule"]["sha256"]) == 64
    objs: dict[int, dict[str, list[tuple[float, float]]]] = {}
    for r in con.execute("SELECT client, url, start_ms, end_ms FROM objects WHERE trial_id = ?", (t["id"],)):
        objs.setdefault(r["client"], {}).setdefault(r["url"], []).append((r["start_ms"], r["end_ms"]))
    con.close()
    assert len(objs) == 10
    for client, got in objs.items():
        assert Counter({u: len(v) for u, v in got.items()}) == asked, client
        for r in reqs[1:]:
            if r["after"] is None:
                continue
            dep = reqs[r["after"]]["url"]
            # Each asked for no sooner than the end of the response it waited for plus the delay.
            assert min(s for s, _ in got[r["url"]]) >= min(e for _, e in got[dep]) + r["delay_ms"] - 1.0, \
                (client, r, got[dep], got[r["url"]])


def test_a_schedule_of_another_page_is_refused_naming_the_field(tmp_path: Path) -> None:
    sched = tmp_path / "s.json"
    sched.write_text('{"schedule": 1, "requests": [{"url": "https://server.test/flags/", "after": null}]}\n')
    exp = tmp_path / "e.toml"
    exp.write_text(f'[experiment]\nname = "e"\n[factors]\nlink = "lan"\npage = "shop"\nprotocol = "h2"\n'
                   f'client = "loader"\nschedule = "{sched}"\n')
    p = run_cli("plan", str(exp))
    assert p.returncode == 2 and "schedule" in p.stderr and "not of this trial's page" in p.stderr, p.stderr
    sched.write_text('{"schedule": 1, "requests": [{"url": "https://server.test/shop/", "after": 3}]}\n')
    p = run_cli("plan", str(exp))
    assert p.returncode == 2 and "requests[0].after" in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
