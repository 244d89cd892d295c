"""`satbench trace` picks one trial: by id, or by a key that one trial has. A trial's key is its
factors, so the same trial of two experiments in one database shares it; the refusal then lists
the ids to give instead of failing with a bare count."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from satbench.errors import InputError
from satbench.results.timeseries import _trial


def _db(tmp_path: Path) -> Path:
    db = tmp_path / "r.sqlite"
    con = sqlite3.connect(db)
    con.executescript(
        "CREATE TABLE experiments (id INTEGER PRIMARY KEY, name TEXT);"
        "CREATE TABLE trials (id INTEGER PRIMARY KEY, experiment_id INTEGER, key TEXT, factors TEXT, "
        "artefacts TEXT, link_counters TEXT);"
        "INSERT INTO experiments VALUES (1, 'quic-bbr-start-geo'), (2, 'geo-stacks');")
    art = tmp_path / "a"
    (art / "server").mkdir(parents=True)
    con.executemany("INSERT INTO trials VALUES (?, ?, ?, ?, ?, NULL)",
                    [(78, 1, "51fe8173617b2c49", '{"link": "geo"}', str(art)),
                     (301, 2, "51fe8173617b2c49", '{"link": "geo"}', str(art)),
                     (5, 2, "0aa1", '{"link": "lan"}', str(art)),
                     (6, 2, "78aa", '{"link": "leo"}', str(art))])
    con.commit()
    con.close()
    return db


def test_a_key_two_experiments_share_is_refused_naming_each_trials_id(tmp_path: Path) -> None:
    db = _db(tmp_path)
    with pytest.raises(InputError) as e:
        _trial(db, "51fe8173")
    assert "2 trials match" in str(e.value)
    assert "78 (quic-bbr-start-geo)" in str(e.value) and "301 (geo-stacks)" in str(e.value)
    assert _trial(db, "301")[0] == "51fe8173617b2c49"
    # Digits that are one trial's id and the start of another's key name the trial of that id.
    assert _trial(db, "78")[0] == "51fe8173617b2c49"
    assert _trial(db, "78a")[1] == "link=leo"
    assert _trial(db, "0aa1")[1] == "link=lan"
    with pytest.raises(InputError, match="no trials match"):
        _trial(db, "ffff")
