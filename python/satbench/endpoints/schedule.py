"""A browser's request schedule, learned for the loader (``schedule = FILE``):
which request waited for which response, and how long after it the browser
asked (its parsing, script and layout time), so that a light client of
satbench-load asks for what a browser asks for, when a browser would.

The file's format is the loader's (``crates/client/src/schedule.rs`` owns it;
:func:`check` asks ``satbench-load --check-schedule``). It is learned here
from what a browser did:

- a Chromium trial in a results database (each object's start and end, from
  Resource Timing; the document's from the navigation's timing), or
- a HAR (each entry's ``startedDateTime`` and ``time``; Chromium's
  ``_initiator`` when the HAR has it).

A request waits for its initiator's response when the recording names one
(HAR ``_initiator.url``), else for the latest response that had ended when
the browser asked for it (the WProf-style critical-path inference from
timing alone); the page's own requests that the browser asked for while the
HTML was still arriving (its preload scanner) wait for the HTML's end with no
delay (counted in the notes: over a path where the HTML takes several round
trips, the replay asks for them that much later than the browser did). The
delay is what remains between that response's end and the request's start.
Priorities are not replayed (the loader sends none); connections follow the
loader's policy per origin (``connections`` HTTP/1.1 connections, one HTTP/2
or HTTP/3 connection), as Chromium's does.
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ..errors import InputError
from . import sites

#: The format's version, and the longest delay it takes (schedule.rs).
VERSION = 1
MAX_DELAY_MS = 600_000.0


@dataclass(frozen=True)
class Seen:
    """One request as a browser made it: ms since the navigation's start."""

    url: str
    start_ms: float
    end_ms: float
    initiator: str | None = None


@dataclass
class Schedule:
    page: str
    source: str
    #: (url, after, delay_ms) in the order the browser asked.
    requests: list[tuple[str, int | None, float]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"schedule": VERSION, "page": self.page, "source": self.source, "notes": "; ".join(self.notes),
                "requests": [{"url": u, "after": a, "delay_ms": round(d, 3)} for u, a, d in self.requests]}

    def write(self, path: Path) -> None:
        """One request per line, so that a line names a request."""
        d = self.to_json()
        reqs = ",\n".join("  " + json.dumps(r) for r in d.pop("requests"))
        head = json.dumps(d)[:-1]
        path.write_text(f'{head}, "requests": [\n{reqs}\n]}}\n')


def learn(page: str, seen: Sequence[Seen], source: str) -> Schedule:
    """The schedule of a load whose requests were ``seen`` (the page's among them)."""
    doc = [s for s in seen if s.url == page]
    if not doc:
        raise InputError(f"{source}: the load has no request for its page {page}")
    rest = sorted((s for s in seen if s is not doc[0]), key=lambda s: s.start_ms)
    order = [doc[0], *rest]
    out = Schedule(page=page, source=source, requests=[(page, None, 0.0)])
    early = capped = 0
    by_url: dict[str, int] = {page: 0}
    for i, s in enumerate(order[1:], 1):
        dep = by_url.get(s.initiator) if s.initiator else None
        if dep is None or order[dep].start_ms > s.start_ms:
            ended = [j for j in range(i) if order[j].end_ms <= s.start_ms]
            dep = max(ended, key=lambda j: order[j].end_ms) if ended else 0
        delay = s.start_ms - order[dep].end_ms
        if delay < 0:
            early += 1
            delay = 0.0
        if delay > MAX_DELAY_MS:
            capped += 1
            delay = MAX_DELAY_MS
        out.requests.append((s.url, dep, delay))
        by_url.setdefault(s.url, i)
    if early:
        out.notes.append(f"{early} requests asked for before the response they wait for had ended (the browser's "
                         "preload scanner, say) wait for its end")
    if capped:
        out.notes.append(f"{capped} delays longer than {MAX_DELAY_MS / 1e3:.0f} s cut to it")
    return out


def usable(rows: Sequence[tuple[str, int | None, float | None, float | None]], plt_ms: float | None
           ) -> list[Seen]:
    """What a load's objects (url, status, start, end) teach: those that crossed the network with a
    success (a status of 2xx or 3xx, or none recorded), asked for no later than the load event (what
    a page fetches after it is no part of its load time)."""
    return [Seen(str(u), float(a), float(b)) for u, st, a, b in rows
            if a is not None and b is not None and (st is None or 200 <= st < 400)
            and (plt_ms is None or a <= plt_ms)]


def from_trial(db: Path, key: str | None = None, page: str | None = None, link: str | None = None,
               protocol: str | None = None) -> Schedule:
    """Learn from a valid first-view Chromium trial of one client: the one keyed ``key``, or of the
    trials of ``page`` (on ``link``, over ``protocol``) the one with the median PLT."""
    if not db.exists():
        raise InputError(f"--db {db}: no such database")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        where = ["t.status = 'valid'", "json_extract(t.factors, '$.client') = 'chromium'",
                 "json_extract(t.factors, '$.clients') = 1",
                 "coalesce(json_extract(t.factors, '$.view'), 'first') = 'first'"]
        args: list[Any] = []
        for col, v in (("t.key", key), ("json_extract(t.factors, '$.page')", page),
                       ("json_extract(t.factors, '$.link')", link),
                       ("json_extract(t.factors, '$.protocol')", protocol)):
            if v is not None:
                where.append(f"{col} = ?")
                args.append(v)
        rows = con.execute("SELECT t.id, t.key, m.value, t.factors FROM trials t JOIN metrics m ON m.trial_id = t.id "
                           f"AND m.name = 'plt_ms' WHERE {' AND '.join(where)} ORDER BY m.value", args).fetchall()
        if not rows:
            raise InputError(f"--db {db}: no valid first-view Chromium trial of one client " + ", ".join(
                f"{k} {v}" for k, v in (("key", key), ("page", page), ("link", link), ("protocol", protocol)) if v))
        tid, tkey, plt, factors = rows[(len(rows) - 1) // 2]
        objs = con.execute("SELECT url, status, start_ms, end_ms FROM objects WHERE trial_id = ? AND client = 0",
                           (tid,)).fetchall()
    finally:
        con.close()
    f = json.loads(factors)
    seen = usable(objs, plt)
    url = page_url(f, seen)
    if url is None or not any(x.url == url for x in seen):
        raise InputError(f"--db {db}: trial {tkey} stored no timing of its page {url or ''} (trials from before "
                         "the document's own row was kept)")
    where_from = (f"Chromium trial {tkey} ({f.get('page')} over {f.get('protocol')} on {f.get('link')}; "
                  f"median PLT of {len(rows)})" if key is None else f"Chromium trial {tkey}")
    return learn(url, seen, where_from)


def page_url(factors: dict[str, Any], seen: Sequence[Seen]) -> str | None:
    """A trial's page URL: a generated page's from its factors, else the request asked for first."""
    from .pages import ALL_PAGES, url_of  # noqa: PLC0415 - the page catalogue, where a trial names one

    page, proto = factors.get("page"), factors.get("protocol")
    if page in ALL_PAGES:
        return url_of(str(page), shards=int(factors.get("shards") or 1),
                      scheme="http" if proto == "h1c" else "https")
    return min(seen, key=lambda x: x.start_ms).url if seen else None


def from_har(path: Path) -> Schedule:
    """Learn from a HAR: its first page's entries (all entries if it names no page)."""
    doc = sites._json(path, gz=path.suffix == ".gz")
    log = doc.get("log") if isinstance(doc, dict) else None
    if not isinstance(log, dict) or not isinstance(log.get("entries"), list):
        raise InputError(f"{path}: not a HAR (no log.entries)")
    pages = log.get("pages") or []
    first = pages[0].get("id") if pages and isinstance(pages[0], dict) else None
    entries = [(i, e) for i, e in enumerate(log["entries"]) if first is None or e.get("pageref") in (None, first)]
    seen: list[Seen] = []
    t0: float | None = None
    for i, e in entries:
        try:
            url = str(e["request"]["url"])
            at = datetime.fromisoformat(str(e["startedDateTime"]).replace("Z", "+00:00")).timestamp() * 1e3
            took = float(e["time"])
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(f"{path}: entry {i}: missing or malformed field {err}") from None
        status = (e.get("response") or {}).get("status") if isinstance(e.get("response"), dict) else None
        if urlsplit(url).scheme not in ("http", "https") or took < 0 or status == 0 or e.get("_fromCache"):
            continue  # not a request over the network that was answered: nothing to replay
        t0 = at if t0 is None else min(t0, at)
        ini = e.get("_initiator")
        seen.append(Seen(url, at, at + took, str(ini["url"]) if isinstance(ini, dict) and ini.get("url") else None))
    if not seen or t0 is None:
        raise InputError(f"{path}: no http(s) entries to learn a schedule from")
    seen = [Seen(s.url, s.start_ms - t0, s.end_ms - t0, s.initiator) for s in seen]
    page = min(seen, key=lambda s: s.start_ms).url
    return learn(page, seen, f"HAR {path.name}")


def check(path: str, loader: str) -> tuple[str | None, str | None]:
    """(why the file is no schedule, or None; its page URL). Asks the loader, which owns the format
    (once per file's content: its size and time of change)."""
    p = Path(path)
    if not p.is_file():
        return f"no such file {path}", None
    st = p.stat()
    return _check(str(p.resolve()), st.st_size, st.st_mtime_ns, loader)


@cache
def _check(path: str, _size: int, _mtime_ns: int, loader: str) -> tuple[str | None, str | None]:
    p = Path(path)
    r = subprocess.run([loader, "--check-schedule", path], capture_output=True, text=True)
    if r.returncode != 0:
        return r.stderr.strip().removeprefix("satbench-load: "), None
    try:
        page = json.loads(p.read_text())["requests"][0]["url"]
    except (ValueError, KeyError, IndexError, TypeError):
        return f"{path}: no first request", None
    return None, str(page)


def summary(s: Schedule) -> str:
    delays = [d for _, a, d in s.requests[1:]]
    waits = sum(a not in (None, 0) for _, a, _ in s.requests[1:])
    med = statistics.median(delays) if delays else 0.0
    return (f"{len(s.requests)} requests ({waits} wait for a response other than the page's); median delay "
            f"{med:.1f} ms; from {s.source}" + (f"; {'; '.join(s.notes)}" if s.notes else ""))
