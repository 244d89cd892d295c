"""The report as a reader opens it, in headless Chromium: on the demo's stored
database and on a fresh database of two experiments, no console error, every
figure decoded, the headline table's medians equal to the database's, every
link resolving (in-page anchors, the figure files; nothing leaves the
machine), and the demo's page at most 1 MB."""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
import time
from pathlib import Path
from typing import Any

from ..helpers import run_cli

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "docs" / "data" / "demo-2026-12-05.sqlite"


def _open(index: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        page = b.new_page()
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        # Nothing but the report's own file may be asked for.
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url))
        page.goto(index.as_uri())
        got = page.evaluate("""() => ({
            imgs: Array.from(document.images).map(i => [i.complete, i.naturalWidth, i.naturalHeight]),
            links: Array.from(document.querySelectorAll('a[href]')).map(a => a.getAttribute('href')),
            ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id),
            answers: Array.from(document.querySelectorAll('h3')).filter(h => h.textContent === 'The answer')
                .map(h => { let t = h.nextElementSibling; while (t && t.tagName !== 'TABLE') t = t.nextElementSibling;
                            return Array.from(t.querySelectorAll('tr')).map(r =>
                                Array.from(r.children).map(c => c.textContent)); }),
        })""")
        b.close()
    got["errors"], got["asked"] = errors, asked
    return got


def _medians(db: Path) -> list[dict[tuple[str, ...], float]]:
    """Per experiment (in the report's order), PLT medians of valid trials by every varied factor,
    HTTP/3 named with its stack."""
    con = sqlite3.connect(db)
    out = []
    for eid, spec in con.execute("SELECT id, spec FROM experiments ORDER BY id"):
        varied = [v for v in json.loads(spec).get("varied", []) if v != "quic_stack"]
        if "quic_stack" in json.loads(spec).get("varied", []) and "protocol" not in varied:
            varied.append("protocol")
        cells: dict[tuple[str, ...], list[float]] = {}
        for factors, plt in con.execute(
                "SELECT t.factors, m.value FROM trials t JOIN metrics m ON m.trial_id = t.id AND m.name = 'plt_ms' "
                "WHERE t.experiment_id = ? AND t.status = 'valid'", (eid,)):
            f = json.loads(factors)
            if f.get("protocol") == "h3":
                f["protocol"] = f"h3 ({f['quic_stack']})"
            cells.setdefault(tuple(str(f[v]) for v in varied), []).append(plt)
        out.append({k: statistics.median(v) for k, v in cells.items()})
    con.close()
    return out


def _check(out: Path, db: Path) -> dict[str, Any]:
    got = _open(out / "index.html")
    assert got["errors"] == [], got["errors"]
    assert got["asked"] and all(u.startswith(("file://", "data:")) for u in got["asked"]), got["asked"]
    assert got["imgs"] and all(c and w > 100 and h > 100 for c, w, h in got["imgs"]), got["imgs"]
    ids = set(got["ids"])
    for href in got["links"]:
        if href.startswith("#"):
            assert href[1:] in ids, href
        else:
            assert "://" not in href and (out / href).is_file(), href
    medians = _medians(db)
    assert len(got["answers"]) == len(medians)
    for table, want in zip(got["answers"], medians):
        head, rows = table[0], table[1:]
        keys = head[:head.index("trials")]
        assert len(rows) == len(want), (rows, want)
        for row in rows:
            cell = tuple(c.removeprefix("★ ") for c in row[:len(keys)])
            plt = float(row[head.index("PLT (ms) [95 %]")].split()[0])
            assert plt == round(want[cell]), (cell, plt, want[cell])
    return got


def test_the_demo_report_in_a_browser(tmp_path: Path) -> None:
    db = tmp_path / "demo.sqlite"
    shutil.copy(DEMO, db)
    t0 = time.monotonic()
    p = run_cli("report", "--db", str(db), "-o", str(tmp_path / "out"), timeout=300)
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    got = _check(tmp_path / "out", db)
    size = (tmp_path / "out" / "index.html").stat().st_size
    assert size <= 1_000_000, size  # the page, its figures inside it
    assert took < 60, took  # generous: about 5 s here (docs/benchmarks.md)
    assert len(got["imgs"]) >= 20
    print(f"demo report: {size / 1e6:.2f} MB, {len(got['imgs'])} figures, {len(got['links'])} links, {took:.1f} s")


def test_a_report_of_two_experiments_in_a_browser(tmp_path: Path) -> None:
    db = tmp_path / "two.sqlite"
    for name, cc in (("first", '["cubic", "bbr"]'), ("second", '"bbr"')):
        exp = tmp_path / f"{name}.toml"
        exp.write_text(f'[experiment]\nname = "{name}"\nseed = 1\nrepetitions = 2\ntimeout_s = 60\n'
                       f'[factors]\nlink = "wire"\n"link.delay_ms" = 20\npage = "uniform-100k"\nclient = "loader"\n'
                       f'protocol = ["h2", "h3"]\ncc = {cc}\n')
        p = run_cli("run", str(exp), "--db", str(db), timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
    p = run_cli("report", "--db", str(db), "-o", str(tmp_path / "out"), timeout=300)
    assert p.returncode == 0, p.stderr
    got = _check(tmp_path / "out", db)
    assert len(got["answers"]) == 2
