"""`satbench validate E --quick` end to end, as a smoke run (`--repetitions
5`: the first 5 repetitions of every cell, 30 trials): study E's quick set runs over
the LEO profile (curl and the loader, DNS across the link), and every check
of E's claim and the physical checks print a verdict, in the terminal and
on the page beside the report; run again, it resumes and runs nothing."""

from __future__ import annotations

import html
import re
import sqlite3
from pathlib import Path

import pytest

from satbench.validate import load, load_set

from ..helpers import REPO, run_cli

#: Runs alone, after the parallel part of the e2e layer (tests/conftest.py: serial).
pytestmark = pytest.mark.serial


def test_validate_study_e_quick(tmp_path: Path) -> None:
    db, out = tmp_path / "v.sqlite", tmp_path / "out"
    p = run_cli("validate", "E", "--quick", "--repetitions", "5", "--db", str(db), "-o", str(out), timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    _, claims = load()
    checks = [(c.id, k.label) for c in claims if c.study in ("E", "P") for k in c.checks]
    lines = p.stdout[p.stdout.index("claim by claim"):].splitlines()[1:]
    verdicts = {}
    for cid, label in checks:
        line = next((x for x in lines if x.startswith(cid) and label[:44] in x), None)
        assert line is not None, (cid, label, lines)
        verdicts[(cid, label)] = re.split(r"n=\d+\s+", line)[-1]
    assert all(v in ("reproduced", "direction reproduced, size differs", "differs", "inconclusive", "holds")
               for v in verdicts.values()), verdicts
    # The physical checks hold on every trial the set ran.
    assert [v for (cid, _), v in verdicts.items() if cid.startswith("P")] == ["holds", "holds"]
    con = sqlite3.connect(db)
    n, valid = con.execute("SELECT count(*), sum(status = 'valid') FROM trials").fetchone()
    dns = con.execute("SELECT count(*) FROM trials WHERE json_extract(factors, '$.dns') = 'link'").fetchone()[0]
    con.close()
    # The smoke run's trials: repetitions 1 to 5 of each of the set's 6 cells, under the set's own keys.
    (f,) = [s for s in load()[0] if s.study == "E"][0].quick
    full = load_set(REPO / "experiments" / f)
    want = {t.key for t in full.trials if t.rep <= 5}
    rows = set(sqlite3.connect(db).execute("SELECT key, rep FROM trials").fetchall())
    assert n == valid == dns == len(want) == 30, (n, valid, dns, len(want))
    assert {k for k, _ in rows} == want and {r for _, r in rows} == {1, 2, 3, 4, 5}
    page = html.unescape((out / "validation.html").read_text())
    assert all(label in page for _, label in checks)
    # Run again: everything is stored; the verdicts come back without a trial run.
    again = run_cli("validate", "E", "--quick", "--repetitions", "5", "--db", str(db), "-o", str(out), timeout=600)
    assert again.returncode == 0 and "0 trials run" in again.stdout, again.stdout[-2000:]
