"""The results database (SQLite, WAL): experiments, trials with their factors
and status, page metrics, per-object timings, per-client results, link
counters and a summary of server telemetry. Each trial is written in one
transaction, so a crash loses at most the trial that was running.

A Python API returns pandas DataFrames (:func:`open_results`), and
:func:`export` writes CSV or Parquet.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .errors import InputError

SCHEMA = """
CREATE TABLE IF NOT EXISTS experiments (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    file TEXT, text TEXT, spec TEXT,
    seed INTEGER NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS trials (
    id INTEGER PRIMARY KEY,
    experiment_id INTEGER NOT NULL REFERENCES experiments(id),
    key TEXT NOT NULL,
    rep INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    factors TEXT NOT NULL,
    scenarios TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('valid', 'invalid', 'failed')),
    reason TEXT,
    started REAL NOT NULL,
    duration_s REAL NOT NULL,
    overhead_s REAL,
    seed INTEGER,
    env TEXT NOT NULL,
    artefacts TEXT,
    link_counters TEXT,
    server_summary TEXT,
    client_raw TEXT,
    UNIQUE (experiment_id, key)
);
CREATE TABLE IF NOT EXISTS metrics (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    name TEXT NOT NULL,
    value REAL,
    PRIMARY KEY (trial_id, name)
);
CREATE TABLE IF NOT EXISTS objects (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    client INTEGER NOT NULL,
    url TEXT NOT NULL,
    protocol TEXT,
    status INTEGER,
    bytes INTEGER,
    start_ms REAL, ttfb_ms REAL, end_ms REAL
);
CREATE TABLE IF NOT EXISTS clients (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    client INTEGER NOT NULL,
    valid INTEGER NOT NULL,
    reason TEXT,
    plt_ms REAL, fcp_ms REAL, lcp_ms REAL, ttfb_ms REAL,
    bytes INTEGER, throughput_mbps REAL,
    PRIMARY KEY (trial_id, client)
);
CREATE INDEX IF NOT EXISTS objects_trial ON objects(trial_id);
"""


@dataclass
class TrialRecord:
    """Everything one trial produced, written at once."""

    key: str
    rep: int
    seq: int
    factors: dict[str, Any]
    scenarios: list[str]
    status: str
    reason: str | None
    started: float
    duration_s: float
    overhead_s: float | None
    seed: int | None
    env: dict[str, Any]
    artefacts: str | None = None
    link_counters: dict[str, Any] | None = None
    server_summary: dict[str, Any] | None = None
    client_raw: dict[str, Any] | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)
    objects: list[dict[str, Any]] = field(default_factory=list)
    clients: list[dict[str, Any]] = field(default_factory=list)


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(str(self.path), timeout=30)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as e:
            raise InputError(f"{self.path}: not a satbench results database ({e})") from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def experiment(self, name: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT id, name, file, seed, spec FROM experiments WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        return {"id": row[0], "name": row[1], "file": row[2], "seed": row[3], "spec": json.loads(row[4] or "{}")}

    def begin_experiment(self, name: str, file: str, text: str, spec: dict[str, Any], seed: int) -> int:
        now = time.time()
        with self.db:
            found = self.experiment(name)
            if found:
                self.db.execute("UPDATE experiments SET file = ?, text = ?, spec = ?, updated = ? WHERE id = ?",
                                (file, text, json.dumps(spec), now, found["id"]))
                return int(found["id"])
            cur = self.db.execute("INSERT INTO experiments (name, file, text, spec, seed, created, updated) "
                                  "VALUES (?, ?, ?, ?, ?, ?, ?)", (name, file, text, json.dumps(spec), seed, now, now))
            return int(cur.lastrowid or 0)

    def done(self, experiment_id: int, *, include_failed: bool = False) -> dict[str, float]:
        """Trials already stored (key -> duration): valid and invalid ones, and failed ones if asked."""
        q = "SELECT key, duration_s FROM trials WHERE experiment_id = ?"
        if not include_failed:
            q += " AND status != 'failed'"
        return {k: d for k, d in self.db.execute(q, (experiment_id,))}

    def write_trial(self, experiment_id: int, r: TrialRecord) -> int:
        """Store one trial and everything it measured in one transaction
        (replacing an earlier failed attempt of the same trial)."""
        dumps = lambda x: None if x is None else json.dumps(x, default=str)  # noqa: E731
        with self.db:
            self.db.execute("DELETE FROM trials WHERE experiment_id = ? AND key = ? AND status = 'failed'",
                            (experiment_id, r.key))
            cur = self.db.execute(
                "INSERT INTO trials (experiment_id, key, rep, seq, factors, scenarios, status, reason, started, "
                "duration_s, overhead_s, seed, env, artefacts, link_counters, server_summary, client_raw) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (experiment_id, r.key, r.rep, r.seq, json.dumps(r.factors), json.dumps(r.scenarios), r.status,
                 r.reason, r.started, r.duration_s, r.overhead_s, r.seed, json.dumps(r.env), r.artefacts,
                 dumps(r.link_counters), dumps(r.server_summary), dumps(r.client_raw)))
            tid = int(cur.lastrowid or 0)
            self.db.executemany("INSERT INTO metrics (trial_id, name, value) VALUES (?, ?, ?)",
                                [(tid, k, v) for k, v in r.metrics.items()])
            self.db.executemany(
                "INSERT INTO objects (trial_id, client, url, protocol, status, bytes, start_ms, ttfb_ms, end_ms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(tid, o.get("client", 0), o["url"], o.get("protocol"), o.get("status"), o.get("bytes"),
                  o.get("start_ms"), o.get("ttfb_ms"), o.get("end_ms")) for o in r.objects])
            self.db.executemany(
                "INSERT INTO clients (trial_id, client, valid, reason, plt_ms, fcp_ms, lcp_ms, ttfb_ms, bytes, "
                "throughput_mbps) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(tid, c["client"], int(bool(c["valid"])), c.get("reason"), c.get("plt_ms"), c.get("fcp_ms"),
                  c.get("lcp_ms"), c.get("ttfb_ms"), c.get("bytes"), c.get("throughput_mbps")) for c in r.clients])
        return tid


# -- reading: pandas -------------------------------------------------------------------


class Results:
    """Read access to a results database as pandas DataFrames."""

    def __init__(self, path: str | Path):
        p = Path(path)
        if not p.is_file():
            raise InputError(f"{p}: no such results database (run an experiment with 'satbench run FILE --db {p}')")
        self.path = p
        self.db = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=30)

    def close(self) -> None:
        self.db.close()

    def experiments(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT name FROM experiments ORDER BY id")]

    def _where(self, experiment: str | None) -> tuple[str, tuple[Any, ...]]:
        if experiment is None:
            return "", ()
        if experiment not in self.experiments():
            found = ", ".join(self.experiments())
            raise InputError(f"{self.path}: no experiment named {experiment!r} (found: {found})")
        return " WHERE e.name = ?", (experiment,)

    def trials(self, experiment: str | None = None):  # type: ignore[no-untyped-def]
        """One row per trial: identity, status, every factor as a column, every metric as a column."""
        import pandas as pd

        where, args = self._where(experiment)
        rows = self.db.execute(
            "SELECT t.id, e.name, t.key, t.rep, t.seq, t.status, t.reason, t.started, t.duration_s, t.overhead_s, "
            "t.seed, t.factors, t.scenarios, t.artefacts, t.env FROM trials t JOIN experiments e "
            "ON e.id = t.experiment_id" + where + " ORDER BY t.id", args).fetchall()
        recs = []
        for r in rows:
            env = json.loads(r[14])
            rec = {"trial_id": r[0], "experiment": r[1], "key": r[2], "rep": r[3], "seq": r[4], "status": r[5],
                   "reason": r[6], "started": r[7], "duration_s": r[8], "overhead_s": r[9], "seed": r[10],
                   "scenarios": ",".join(json.loads(r[12])), "artefacts": r[13],
                   "satbench_commit": env.get("commit"), "kernel": env.get("kernel"), "browser": env.get("browser")}
            rec.update({f: v for f, v in json.loads(r[11]).items()})
            recs.append(rec)
        df = pd.DataFrame(recs)
        if df.empty:
            return df
        m = self.metrics(experiment)
        if not m.empty:
            wide = m.pivot_table(index="trial_id", columns="name", values="value", aggfunc="first")
            df = df.merge(wide, left_on="trial_id", right_index=True, how="left")
        return df

    def metrics(self, experiment: str | None = None):  # type: ignore[no-untyped-def]
        import pandas as pd

        where, args = self._where(experiment)
        return pd.read_sql_query(
            "SELECT m.trial_id, m.name, m.value FROM metrics m JOIN trials t ON t.id = m.trial_id "
            "JOIN experiments e ON e.id = t.experiment_id" + where, self.db, params=args)

    def objects(self, experiment: str | None = None):  # type: ignore[no-untyped-def]
        import pandas as pd

        where, args = self._where(experiment)
        return pd.read_sql_query(
            "SELECT o.* FROM objects o JOIN trials t ON t.id = o.trial_id "
            "JOIN experiments e ON e.id = t.experiment_id" + where, self.db, params=args)

    def clients(self, experiment: str | None = None):  # type: ignore[no-untyped-def]
        import pandas as pd

        where, args = self._where(experiment)
        return pd.read_sql_query(
            "SELECT c.* FROM clients c JOIN trials t ON t.id = c.trial_id "
            "JOIN experiments e ON e.id = t.experiment_id" + where, self.db, params=args)


def open_results(path: str | Path) -> Results:
    """The results in ``path`` as DataFrames: ``.trials()``, ``.metrics()``, ``.objects()``, ``.clients()``."""
    return Results(path)


def export(path: str | Path, out: str | Path, fmt: str = "csv", experiment: str | None = None) -> list[Path]:
    """Write trials (wide), metrics, objects and clients as CSV or Parquet files into ``out``."""
    if fmt not in ("csv", "parquet"):
        raise InputError(f"--format: csv or parquet, got {fmt!r}")
    r = Results(path)
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    written = []
    tables: Iterable[tuple[str, Any]] = (("trials", r.trials(experiment)), ("metrics", r.metrics(experiment)),
                                         ("objects", r.objects(experiment)), ("clients", r.clients(experiment)))
    for name, df in tables:
        p = o / f"{name}.{fmt}"
        if fmt == "csv":
            df.to_csv(p, index=False)
        else:
            df.to_parquet(p, index=False)
        written.append(p)
    r.close()
    return written
