"""Reading a results database as pandas DataFrames, read-only: a database of
any schema this satbench knows opens as it is (nothing is migrated by
reading), and the export to CSV or Parquet."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import InputError
from ..workloads import tables as workload_tables
from . import schema
from .analysis import factorial_effects, is_knob, knob_effects, to_frame, tuned_against_default
from .store import is_sqlite


class Results:
    """Read access to a results database as pandas DataFrames."""

    def __init__(self, path: str | Path):
        p = Path(path)
        if not p.is_file():
            raise InputError(f"{p}: no such results database (run an experiment with 'satbench run FILE --db {p}')")
        if not is_sqlite(p):
            raise InputError(f"{p}: not a satbench results database (not an SQLite file)")
        self.path = p
        try:
            self.db = sqlite3.connect(f"file:{p}?mode=ro", uri=True, timeout=30)
            self.version = schema.version(self.db)
            names = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        except sqlite3.DatabaseError as e:
            raise InputError(f"{p}: not a satbench results database ({e})") from None
        if not {"experiments", "trials"} <= names:
            self.db.close()
            raise InputError(f"{p}: an SQLite database, but not satbench's (no trials table)")
        if self.version > schema.VERSION:
            self.db.close()
            raise InputError(f"{p}: results database of schema {self.version}, newer than this satbench's "
                             f"{schema.VERSION}; upgrade satbench to read it")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "Results":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def experiments(self) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT name FROM experiments ORDER BY id")]

    def spec(self, experiment: str) -> dict[str, Any]:
        row = self.db.execute("SELECT spec FROM experiments WHERE name = ?", (experiment,)).fetchone()
        return dict(json.loads(row[0] or "{}")) if row else {}

    def _where(self, experiment: str | None) -> tuple[str, tuple[Any, ...]]:
        if experiment is None:
            return "", ()
        if experiment not in self.experiments():
            found = ", ".join(self.experiments())
            raise InputError(f"{self.path}: no experiment named {experiment!r} (found: {found})")
        return " WHERE e.name = ?", (experiment,)

    def trials(self, experiment: str | None = None) -> pd.DataFrame:
        """One row per trial: identity, status, every factor as a column, every metric as a column."""
        where, args = self._where(experiment)
        links = "t.links" if self.version >= 2 else "NULL"
        rows = self.db.execute(
            "SELECT t.id, e.name, t.key, t.rep, t.seq, t.status, t.reason, t.started, t.duration_s, t.overhead_s, "
            f"t.seed, t.factors, t.scenarios, t.artefacts, t.env, {links} FROM trials t JOIN experiments e "
            "ON e.id = t.experiment_id" + where + " ORDER BY t.id", args).fetchall()
        recs = []
        for r in rows:
            env = json.loads(r[14])
            hashes = json.loads(r[15]) if r[15] else {}
            rec = {"trial_id": r[0], "experiment": r[1], "key": r[2], "rep": r[3], "seq": r[4], "status": r[5],
                   "reason": r[6], "started": r[7], "duration_s": r[8], "overhead_s": r[9], "seed": r[10],
                   "scenarios": ",".join(json.loads(r[12])), "artefacts": r[13],
                   "satbench_commit": env.get("commit"), "kernel": env.get("kernel"), "browser": env.get("browser"),
                   "link_hash": hashes.get("link")}
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

    def metrics(self, experiment: str | None = None) -> pd.DataFrame:
        where, args = self._where(experiment)
        return pd.read_sql_query(
            "SELECT m.trial_id, m.name, m.value FROM metrics m JOIN trials t ON t.id = m.trial_id "
            "JOIN experiments e ON e.id = t.experiment_id" + where, self.db, params=args)

    def objects(self, experiment: str | None = None) -> pd.DataFrame:
        where, args = self._where(experiment)
        return pd.read_sql_query(
            "SELECT o.* FROM objects o JOIN trials t ON t.id = o.trial_id "
            "JOIN experiments e ON e.id = t.experiment_id" + where, self.db, params=args)

    def objects_of(self, trial_ids: list[int], client: int | None = None) -> pd.DataFrame:
        """The objects of these trials only (of one client, if given): what a report's waterfalls read."""
        if not trial_ids:
            return pd.DataFrame()
        marks = ", ".join("?" * len(trial_ids))
        q = f"SELECT * FROM objects WHERE trial_id IN ({marks})" + (" AND client = ?" if client is not None else "")
        return pd.read_sql_query(q, self.db, params=[*trial_ids, *([client] if client is not None else [])])

    def clients(self, experiment: str | None = None) -> pd.DataFrame:
        where, args = self._where(experiment)
        return pd.read_sql_query(
            "SELECT c.* FROM clients c JOIN trials t ON t.id = c.trial_id "
            "JOIN experiments e ON e.id = t.experiment_id" + where, self.db, params=args)

    def table(self, name: str, experiment: str | None = None) -> pd.DataFrame:
        """A workload's table (satbench.workloads): the real-time trials' ``messages`` (direction,
        sender and receiver, a client's index or -1 for the server, number, stamps, one-way latency
        in ms and in RTTs), say. Empty, with its columns, in a database made before the workload."""
        t = next((t for t in workload_tables() if t.name == name), None)
        if t is None:
            known = ", ".join(x.name for x in workload_tables())
            raise InputError(f"no workload stores a table {name!r} (tables: {known})")
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)).fetchone():
            return pd.DataFrame(columns=["trial_id", *t.columns])
        where, args = self._where(experiment)
        return pd.read_sql_query(
            f"SELECT g.* FROM {name} g JOIN trials t ON t.id = g.trial_id "
            "JOIN experiments e ON e.id = t.experiment_id" + where, self.db, params=args)

    def settings(self, experiment: str, metric: str = "plt_ms", correction: str = "holm") -> dict[str, pd.DataFrame]:
        """Which settings matter in a parameter study (study D), as the report
        computes them (:mod:`satbench.results.analysis`), from the valid
        trials, against the experiment's baseline: ``effects`` (each knob
        against its baseline, for OFAT and full designs), ``factorial`` (main
        effects and two-factor interactions, for fractional designs) and
        ``tuned`` (tuned against default, per protocol; its ``beats`` column
        holds each comparison); p adjusted by ``correction`` ("holm" or "bh")."""
        spec = self.spec(experiment)
        df = self.trials(experiment)
        valid = df[df["status"] == "valid"] if not df.empty else df
        varied = list(spec.get("varied") or [])
        knobs = [v for v in varied if is_knob(v)]
        network = "link" if "link" in varied else "none"
        others = [v for v in varied if v not in knobs and v != "link"]
        design = spec.get("design") or {}
        fractional = design.get("kind") == "fractional"
        baseline = spec.get("baseline") or None
        out = {"effects": pd.DataFrame(), "factorial": pd.DataFrame(), "tuned": pd.DataFrame()}
        if not knobs or valid.empty or metric not in valid.columns:
            return out
        if fractional:
            facs = [f for f in design.get("factors", []) if f in valid.columns]
            out["factorial"] = to_frame(factorial_effects(valid, facs, metric, network, others=others,
                                                          baseline=baseline, correction=correction))
        else:
            out["effects"] = to_frame(knob_effects(valid, knobs, metric, network, others, baseline, correction))
        if "protocol" in varied:
            out["tuned"] = to_frame(tuned_against_default(valid, [k for k in knobs if k in valid.columns], metric,
                                                          network, baseline=baseline, fractional=fractional))
        return out

    def links(self) -> dict[str, dict[str, Any]]:
        """Every resolved link stored (schema 2 on), by hash."""
        if self.version < 2:
            return {}
        return {h: json.loads(s) for h, s in self.db.execute("SELECT hash, spec FROM links")}


def open_results(path: str | Path) -> Results:
    """The results in ``path`` as DataFrames: ``.trials()``, ``.metrics()``, ``.objects()``, ``.clients()``."""
    return Results(path)


def export(path: str | Path, out: str | Path, fmt: str = "csv", experiment: str | None = None) -> list[Path]:
    """Write trials (wide), metrics, objects, clients and the workloads' tables (messages) as CSV or
    Parquet files into ``out``."""
    if fmt not in ("csv", "parquet"):
        raise InputError(f"--format: csv or parquet, got {fmt!r}")
    o = Path(out)
    with Results(path) as r:
        try:
            o.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InputError(f"{o}: cannot create the output folder: {e.strerror}") from None
        written = []
        tables: list[tuple[str, pd.DataFrame]] = [
            ("trials", r.trials(experiment)), ("metrics", r.metrics(experiment)),
            ("objects", r.objects(experiment)), ("clients", r.clients(experiment)),
            *((t.name, r.table(t.name, experiment)) for t in workload_tables())]
        for name, df in tables:
            p = o / f"{name}.{fmt}"
            if fmt == "csv":
                df.to_csv(p, index=False)
            else:
                df.to_parquet(p, index=False)
            written.append(p)
    return written
