"""The results database's schema, its version and its migrations.

The version is SQLite's ``user_version``:

- 1: satbench 0.1 (the version was not yet written: 0 with a ``trials`` table).
- 2: the resolved links. A ``links`` table holds each link's canonical
  specification once (by hash); each trial names its links (``links``, a JSON
  object of role to hash) and its key covers them. ``key_v1`` keeps a
  migrated trial's old key.
- 3: mixed client populations: each client's group, kind, host, real start
  (unix ms), connections and normalised throughput (``clients``).
- 4: real-time web trials: every message's direction (down, up, or relayed
  from client to client in a chat room), its sender and receiver (a client's
  index, -1 for the server), number, send and receive stamps (unix ms), and
  one-way latency in ms and in units of the path's base RTT (``messages``).
- 5: the default QUIC stack became quinn. A trial's key leaves out a later
  factor at its default, so every stored trial is keyed again with today's
  defaults; one stored before the stack was a factor ran quiche, the only
  stack then, and now says so (``quic_stack``). Nothing else changes.
- 6: each object's connection, as its client names it (``objects.connection``;
  NULL for objects stored before).
- 7: the connection set-up an object waited for (``objects.connect_ms``: TCP
  or QUIC and TLS, where it opened a connection; NULL before, and where not).

:func:`migrate` brings a database up to :data:`VERSION` in one transaction;
a database from a newer satbench is refused rather than guessed at.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any, Callable

from ..errors import InputError

VERSION = 7

#: The real-time workload's table as schema 4 added it (satbench.workloads.realtime owns it now).
MESSAGES_V4 = """
CREATE TABLE IF NOT EXISTS messages (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    dir TEXT NOT NULL CHECK (dir IN ('down', 'up', 'relay')),
    sender INTEGER NOT NULL,
    receiver INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    sent_unix_ms REAL, recv_unix_ms REAL, latency_ms REAL, latency_rtt REAL,
    PRIMARY KEY (trial_id, sender, receiver, seq)
);
"""

TABLES = """
CREATE TABLE IF NOT EXISTS experiments (
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    file TEXT, text TEXT, spec TEXT,
    seed INTEGER NOT NULL,
    created REAL NOT NULL, updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS links (
    hash TEXT PRIMARY KEY,
    spec TEXT NOT NULL
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
    links TEXT,
    key_v1 TEXT,
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
    start_ms REAL, ttfb_ms REAL, end_ms REAL,
    connection TEXT, connect_ms REAL
);
CREATE TABLE IF NOT EXISTS clients (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    client INTEGER NOT NULL,
    valid INTEGER NOT NULL,
    reason TEXT,
    plt_ms REAL, fcp_ms REAL, lcp_ms REAL, ttfb_ms REAL,
    bytes INTEGER, throughput_mbps REAL,
    grp TEXT, kind TEXT, host TEXT, start_unix_ms REAL, connections INTEGER, normalised_throughput REAL,
    PRIMARY KEY (trial_id, client)
);
CREATE INDEX IF NOT EXISTS objects_trial ON objects(trial_id);
"""


def version(db: sqlite3.Connection) -> int:
    """The schema version of an open database (0: empty)."""
    v = int(db.execute("PRAGMA user_version").fetchone()[0])
    if v:
        return v
    has_trials = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'trials'").fetchone()
    return 1 if has_trials else 0


#: Resolves a v1 trial's links: (factors, the emulator's stored config or None) -> {role: spec JSON}.
LinkResolver = Callable[[dict[str, Any], dict[str, Any] | None], dict[str, dict[str, Any]]]
#: A trial's v2 key: (factors, rep, {role: hash}) -> key.
KeyMaker = Callable[[dict[str, Any], int, dict[str, str]], str]


def migrate(db: sqlite3.Connection, path: str, resolve_links: LinkResolver, make_key: KeyMaker) -> int:
    """Bring the database to :data:`VERSION`; return the version it had."""
    had = version(db)
    if had > VERSION:
        raise InputError(f"{path}: results database of schema {had}, newer than this satbench's {VERSION}; "
                         "upgrade satbench to use it")
    if had == 0:
        with db:
            db.executescript(TABLES + workload_tables())
            db.execute(f"PRAGMA user_version = {VERSION}")
        return 0
    if had == 1:
        with db:
            _v1_to_v2(db, resolve_links, make_key)
            db.execute("PRAGMA user_version = 2")
    if had <= 2:
        with db:
            for col in ("grp TEXT", "kind TEXT", "host TEXT", "start_unix_ms REAL", "connections INTEGER",
                        "normalised_throughput REAL"):
                db.execute(f"ALTER TABLE clients ADD COLUMN {col}")
            db.execute("PRAGMA user_version = 3")
    if had <= 3:
        with db:
            db.executescript(MESSAGES_V4)
            db.execute("PRAGMA user_version = 4")
    if had <= 4:
        with db:
            _rekey(db, make_key)
            db.execute("PRAGMA user_version = 5")
    if had <= 5:
        with db:
            db.execute("ALTER TABLE objects ADD COLUMN connection TEXT")
            db.execute("PRAGMA user_version = 6")
    if had <= 6:
        with db:
            db.execute("ALTER TABLE objects ADD COLUMN connect_ms REAL")
            db.execute("PRAGMA user_version = 7")
    with db:  # a workload added since the database was made brings its tables (nothing else changes)
        db.executescript(workload_tables())
    return had


def workload_tables() -> str:
    """The tables the workloads declare (satbench.workloads), as CREATE TABLE IF NOT EXISTS statements."""
    from ..workloads import tables  # noqa: PLC0415 - the registry imports each workload on use

    return "".join(t.ddl for t in tables())


def _rekey(db: sqlite3.Connection, make_key: KeyMaker) -> None:
    """Every trial keyed again with today's factor defaults (see version 5);
    a trial without a QUIC stack ran quiche."""
    rows = db.execute("SELECT id, rep, factors, links FROM trials").fetchall()
    for tid, rep, factors_json, links_json in rows:
        factors = json.loads(factors_json)
        if "quic_stack" not in factors:
            factors["quic_stack"] = "quiche"
        hashes = json.loads(links_json) if links_json else {}
        db.execute("UPDATE trials SET key = ?, factors = ? WHERE id = ?",
                   (make_key(factors, int(rep), hashes), json.dumps(factors), tid))


def _v1_to_v2(db: sqlite3.Connection, resolve_links: LinkResolver, make_key: KeyMaker) -> None:
    """Links enter the trial key: each stored trial gets the link it really ran
    (the configuration the emulator reported with its counters), stored once
    in ``links``, and the key a trial with those factors and links has today."""
    db.execute("CREATE TABLE IF NOT EXISTS links (hash TEXT PRIMARY KEY, spec TEXT NOT NULL)")
    db.execute("ALTER TABLE trials ADD COLUMN links TEXT")
    db.execute("ALTER TABLE trials ADD COLUMN key_v1 TEXT")
    rows = db.execute("SELECT id, key, rep, factors, link_counters FROM trials").fetchall()
    for tid, key, rep, factors_json, counters_json in rows:
        factors = json.loads(factors_json)
        counters = json.loads(counters_json) if counters_json else None
        config = counters.get("config") if isinstance(counters, dict) else None
        try:
            specs = resolve_links(factors, config)
        except Exception:  # noqa: BLE001 - a link that no longer resolves keeps the trial under its old key
            db.execute("UPDATE trials SET key_v1 = ? WHERE id = ?", (key, tid))
            continue
        for spec in specs.values():
            db.execute("INSERT OR IGNORE INTO links (hash, spec) VALUES (?, ?)", (spec["hash"], json.dumps(spec)))
        hashes = {role: spec["hash"] for role, spec in specs.items()}
        db.execute("UPDATE trials SET key = ?, key_v1 = ?, links = ? WHERE id = ?",
                   (make_key(factors, int(rep), hashes), key, json.dumps(hashes), tid))
