"""Writing the results database (SQLite, WAL): experiments, trials with their
factors, status and resolved links, page metrics, per-object timings,
per-client results, link counters and a summary of the server's telemetry.
Each trial is written in one transaction, so a crash loses at most the trial
that was running.

Reading is :mod:`.read`; the schema and its migrations are :mod:`.schema`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..link.spec import LinkSpec
from ..model import ClientResult, ObjectTiming, ServerSummary, TrialStatus
from ..workloads import tables
from . import schema


@dataclass(kw_only=True)
class TrialRecord:
    """Everything one trial produced, written at once."""

    key: str
    rep: int
    seq: int
    factors: dict[str, Any]
    scenarios: list[str]
    status: TrialStatus
    reason: str | None
    started: float
    duration_s: float
    overhead_s: float | None
    seed: int | None
    env: dict[str, Any]
    links: dict[str, LinkSpec] = field(default_factory=dict)
    artefacts: str | None = None
    #: The emulator's counters of the satellite link, as it wrote them.
    link_counters: dict[str, Any] | None = None
    server_summary: ServerSummary | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)
    objects: list[ObjectTiming] = field(default_factory=list)
    clients: list[ClientResult] = field(default_factory=list)
    #: Rows of the tables its workload declares (satbench.workloads), by table.
    rows: dict[str, list[tuple[Any, ...]]] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredExperiment:
    id: int
    name: str
    file: str | None
    seed: int
    spec: dict[str, Any]


def is_sqlite(path: Path) -> bool:
    """True for a file that starts as an SQLite database does."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def check_path(path: Path) -> None:
    """Refuse a database path that is not ours, or cannot be, without
    creating or changing anything: a folder, a file that is not SQLite, an
    SQLite file of another program, a folder that cannot be made."""
    if path.exists():
        if not path.is_file():
            raise InputError(f"{path}: not a file")
        if path.stat().st_size and not is_sqlite(path):
            raise InputError(f"{path}: not a satbench results database (not an SQLite file)")
        if path.stat().st_size:
            try:
                con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
                try:
                    names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                finally:
                    con.close()
            except sqlite3.DatabaseError as e:
                raise InputError(f"{path}: not a satbench results database ({e})") from None
            if names and not {"experiments", "trials"} <= names:
                raise InputError(f"{path}: an SQLite database, but not satbench's (no trials table)")
        return
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{path}: cannot create the database there ({parent} is not a writable folder)")


class Store:
    """The results database, open for writing (migrated to the current schema)."""

    def __init__(self, path: str | Path, *, resolve_links: schema.LinkResolver, make_key: schema.KeyMaker,
                 timeout_s: float = 30):
        self.path, self.timeout_s = Path(path), timeout_s
        if self.path.exists() and (not self.path.is_file() or (self.path.stat().st_size and not is_sqlite(self.path))):
            raise InputError(f"{self.path}: not a satbench results database (not an SQLite file)")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"{self.path.parent}: cannot create the database's folder: {e.strerror}") from None
        try:
            self.db = sqlite3.connect(str(self.path), timeout=timeout_s)
            if self.path.stat().st_size and not self._ours():
                self.db.close()
                raise InputError(f"{self.path}: an SQLite database, but not satbench's (no trials table)")
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.migrated_from = schema.migrate(self.db, str(self.path), resolve_links, make_key)
        except sqlite3.DatabaseError as e:
            raise InputError(f"{self.path}: not a satbench results database ({e})") from None

    def _ours(self) -> bool:
        names = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return not names or {"experiments", "trials"} <= names

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def experiment(self, name: str) -> StoredExperiment | None:
        row = self.db.execute("SELECT id, name, file, seed, spec FROM experiments WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        return StoredExperiment(id=row[0], name=row[1], file=row[2], seed=row[3], spec=json.loads(row[4] or "{}"))

    def begin_experiment(self, name: str, file: str, text: str, spec: dict[str, Any], seed: int) -> int:
        now = time.time()
        with self.db:
            found = self.experiment(name)
            if found:
                self.db.execute("UPDATE experiments SET file = ?, text = ?, spec = ?, updated = ? WHERE id = ?",
                                (file, text, json.dumps(spec), now, found.id))
                return found.id
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
        def dumps(x: Any) -> str | None:
            return None if x is None else json.dumps(x, default=str)

        with self.db:
            for spec in r.links.values():
                self.db.execute("INSERT OR IGNORE INTO links (hash, spec) VALUES (?, ?)",
                                (spec.hash, json.dumps(spec.to_json())))
            self.db.execute("DELETE FROM trials WHERE experiment_id = ? AND key = ? AND status = 'failed'",
                            (experiment_id, r.key))
            cur = self.db.execute(
                "INSERT INTO trials (experiment_id, key, rep, seq, factors, scenarios, status, reason, started, "
                "duration_s, overhead_s, seed, env, artefacts, link_counters, server_summary, client_raw, links) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (experiment_id, r.key, r.rep, r.seq, json.dumps(r.factors), json.dumps(r.scenarios), r.status.value,
                 r.reason, r.started, r.duration_s, r.overhead_s, r.seed, json.dumps(r.env, default=str), r.artefacts,
                 dumps(r.link_counters), dumps(r.server_summary.to_json() if r.server_summary else None), None,
                 json.dumps({role: s.hash for role, s in r.links.items()})))
            tid = int(cur.lastrowid or 0)
            self.db.executemany("INSERT INTO metrics (trial_id, name, value) VALUES (?, ?, ?)",
                                [(tid, k, v) for k, v in r.metrics.items()])
            self.db.executemany(
                "INSERT INTO objects (trial_id, client, url, protocol, status, bytes, start_ms, ttfb_ms, end_ms, "
                "connection, connect_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(tid, o.client, o.url, o.protocol, o.status, o.bytes, o.start_ms, o.ttfb_ms, o.end_ms, o.connection,
                  o.connect_ms) for o in r.objects])
            self.db.executemany(
                "INSERT INTO clients (trial_id, client, valid, reason, plt_ms, fcp_ms, lcp_ms, ttfb_ms, bytes, "
                "throughput_mbps, grp, kind, host, start_unix_ms, connections, normalised_throughput) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(tid, c.client, int(c.valid), c.reason, c.plt_ms, c.fcp_ms, c.lcp_ms, c.ttfb_ms, c.bytes,
                  c.throughput_mbps, c.group, c.kind, c.host, c.start_unix_ms, c.connections,
                  c.normalised_throughput) for c in r.clients])
            for t in tables():
                if rows := r.rows.get(t.name):
                    self.db.executemany(f"INSERT INTO {t.name} (trial_id, {', '.join(t.columns)}) VALUES "
                                        f"({', '.join('?' * (len(t.columns) + 1))})", [(tid, *row) for row in rows])
        return tid
