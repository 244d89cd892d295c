#!/usr/bin/env python3
"""A copy of a results database holding only the trials run from committed
code, so that running the same sets into the copy runs again exactly the
trials that were run from uncommitted changes (their commit ends in
``-dirty``, or none was recorded). The judge's ``--committed-only`` leaves
those trials out; this makes them run again. The source is only read, never
changed; the copy is new (an existing DST is refused).

Usage: .venv/bin/python scripts/committed-copy.py SRC DST
Then, for example: satbench validate D --db DST   (resumes: only the missing trials run)
(docs/validation.md, the tally)."""

import sqlite3
import sys
from pathlib import Path


def dirty(commit: object) -> bool:
    return not isinstance(commit, str) or not commit or commit.endswith("-dirty")


def main(src: str, dst: str) -> None:
    s, d = Path(src), Path(dst)
    if not s.is_file():
        sys.exit(f"committed-copy: {src}: no such database")
    if d.exists():
        sys.exit(f"committed-copy: {dst}: exists; name a new file")
    try:
        kept, ids, tables = copy(s, d)
    except BaseException:
        d.unlink(missing_ok=True)  # never a half-made copy that the next attempt would refuse
        raise
    print(f"{dst}: {kept} trials from committed code kept, {len(ids)} left out to run again "
          f"(rows removed from trials and {', '.join(tables)})")


def copy(s: Path, d: Path) -> tuple[int, list[int], list[str]]:
    con = sqlite3.connect(f"file:{s}?mode=ro", uri=True)
    out = sqlite3.connect(d)
    con.backup(out)  # a consistent copy, even of a database in WAL mode
    con.close()
    ids = [tid for tid, commit in out.execute("SELECT id, json_extract(env, '$.commit') FROM trials")
           if dirty(commit)]
    kept = out.execute("SELECT count(*) FROM trials").fetchone()[0] - len(ids)
    tables = [n for (n,) in out.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
              if "trial_id" in {r[1] for r in out.execute(f'PRAGMA table_info("{n}")')}]
    with out:
        out.execute("CREATE TEMP TABLE gone (id INTEGER PRIMARY KEY)")
        out.executemany("INSERT INTO gone VALUES (?)", [(i,) for i in ids])
        for t in tables:
            out.execute(f'DELETE FROM "{t}" WHERE trial_id IN (SELECT id FROM gone)')
        out.execute("DELETE FROM trials WHERE id IN (SELECT id FROM gone)")
    out.execute("VACUUM")
    out.close()
    return kept, ids, tables


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: committed-copy.py SRC DST")
    main(sys.argv[1], sys.argv[2])
