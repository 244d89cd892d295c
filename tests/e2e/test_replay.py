"""A recorded site as real ones are recorded: a HAR with a body left out, a
compressed stylesheet, a redirect, a script whose query changes on every
load (a cache-buster), a request the recording lacks, and server think
times. Replayed in Chromium over HTTP/1.1, HTTP/2 and HTTP/3 (both QUIC
stacks): the origins answer with the recorded statuses, headers and bodies,
match the changing query (exactly when the parameter is marked volatile at
import, by the closest query when not), answer the missing request 404 and
count it, and wait the recorded think time only when asked to."""

from __future__ import annotations

import base64
import gzip
import json
import sqlite3
from pathlib import Path

import pytest

from ..helpers import run_cli

HTML = ('<!DOCTYPE html><html><head><link rel="stylesheet" href="/style.css"></head><body><h1>shop</h1>'
        '<img src="/filled.png"><img src="/old.png"><img src="/missing.png">'
        "<script>var s = document.createElement('script'); s.src = '/app.js?v=7&cb=' + Date.now();"
        "document.head.appendChild(s);</script></body></html>")
CSS = "h1 { color: #123456; }\n" * 200
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
THINK_MS = 400


def _entry(path: str, mime: str, text: str | None, *, status: int = 200, b64: bool = False, size: int = 0,
           headers: list[tuple[str, str]] = (), wait: float = 1.0) -> dict:  # type: ignore[assignment]
    content: dict = {"mimeType": mime, "size": size or len(text or "")}
    if text is not None:
        content["text"] = text
        if b64:
            content["encoding"] = "base64"
    return {"request": {"method": "GET", "url": f"https://www.shop.test{path}", "headers": []},
            "response": {"status": status, "headers": [{"name": k, "value": v} for k, v in
                                                       [("Content-Type", mime), *headers]], "content": content},
            "timings": {"wait": wait}}


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("har")
    har = {"log": {"version": "1.2", "creator": {"name": "test", "version": "1"},
                   "pages": [{"id": "p", "title": "https://www.shop.test/"}], "entries": [
        _entry("/", "text/html", HTML, wait=THINK_MS),
        # As a browser's HAR has it: the text decoded, the encoding in the headers.
        _entry("/style.css", "text/css", CSS, headers=[("Content-Encoding", "gzip"),
                                                      ("Content-Length", str(len(gzip.compress(CSS.encode()))))]),
        _entry("/filled.png", "image/png", None, size=20_000),
        _entry("/old.png", "text/html", "", status=301, headers=[("Location", "https://www.shop.test/real.png")]),
        _entry("/real.png", "image/png", base64.b64encode(PNG).decode(), b64=True),
        _entry("/app.js?v=7&cb=1700000000000", "text/javascript", "document.title = 'replayed';"),
    ]}}
    (tmp / "shop.har").write_text(json.dumps(har))
    return tmp / "shop.har"


def test_a_recorded_site_replays_statuses_fills_queries_misses_and_think_times(archive: Path, tmp_path: Path
                                                                              ) -> None:
    exact, closest = tmp_path / "exact", tmp_path / "closest"
    for out, extra in ((exact, ["--volatile", "cb"]), (closest, [])):
        p = run_cli("pages", "import", str(archive), "--out", str(out), *extra)
        assert p.returncode == 0, p.stdout + p.stderr
    exp = tmp_path / "replay.toml"
    exp.write_text(
        '[experiment]\nname = "replay"\nseed = 1\ntimeout_s = 60\nartefacts = ["har", "server"]\n'
        f'[factors]\nlink = "lan"\nclient = "chromium"\nprotocol = ["h1", "h2", "h3"]\npage = "site:{exact}"\n'
        f'[[trial]]\nprotocol = "h2"\npage = "site:{closest}"\n'
        f'[[trial]]\nprotocol = "h2"\npage = "site:{exact}"\n"server.replay_think" = true\n'
        f'[[trial]]\nprotocol = "h3"\npage = "site:{exact}"\n"server.replay_think" = true\n'
        f'[[trial]]\nprotocol = "h3"\nquic_stack = "quiche"\npage = "site:{exact}"\n"server.replay_think" = true\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    con = sqlite3.connect(db)
    rows = con.execute("SELECT id, factors, status, reason, server_summary FROM trials ORDER BY id").fetchall()
    assert len(rows) == 7
    plain_ttfb, think_ttfb = [], []
    for tid, factors, status, reason, summary in rows:
        f, srv = json.loads(factors), json.loads(summary)
        m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
        assert status == "valid", (f, reason)
        objs = {u.split("?")[0].rsplit("/", 1)[1] or "/": (st, b) for u, st, b in con.execute(
            "SELECT url, status, bytes FROM objects WHERE trial_id = ?", (tid,))}
        # The recorded statuses and bodies: the redirect followed (the browser reports the object at
        # the URL it ended at), the stylesheet decoded and served as it is, the fill (below).
        assert objs["real.png"][0] == 200 and objs["filled.png"][0] == 200, objs
        assert objs["missing.png"][0] == 404 and objs["style.css"][0] == 200, objs
        # The origins counted what the recording lacked, and what a closest query answered.
        assert m["site_not_found"] == 1, (f, srv.get("replay"))
        # The import's fill (one body the archive lacked) is reported with the trial.
        env = json.loads(con.execute("SELECT env FROM trials WHERE id = ?", (tid,)).fetchone()[0])
        assert m["site_filled"] == 1 and env["site"]["filled"] == 1, (m, env.get("site"))
        volatile = f["page"].endswith("exact")
        assert m["site_fuzzy_matched"] == (0 if volatile else 1), (f, srv.get("replay"))
        assert srv["replay"]["exact"] >= 5, srv
        (plain_ttfb if not f.get("server.replay_think") else think_ttfb).append(m["ttfb_ms"])
    con.close()
    # The origins answered the recorded redirect as recorded, and the fill at its recorded size (a
    # browser may give up on a body that is no image before its end), in every trial.
    served = [e for log in (tmp_path / "artefacts").rglob("access.jsonl") for e in map(json.loads, log.open())
              if e.get("type") == "request"]
    redirects = [e for e in served if e["path"] == "/old.png"]
    assert len(redirects) == 7 and all(e["status"] == 301 and e["replay"] == "exact" for e in redirects), redirects
    fills = [e for e in served if e["path"] == "/filled.png"]
    assert len(fills) >= 7 and all(e["content_length"] == 20_000 for e in fills), fills
    # The recorded 400 ms of think time before the HTML, only when asked for (LAN: a 1 ms round trip).
    assert max(plain_ttfb) < THINK_MS - 50 < THINK_MS <= min(think_ttfb), (plain_ttfb, think_ttfb)
    bodies = {}
    for h in (tmp_path / "artefacts").rglob("page.har"):
        for e in json.loads(h.read_text())["log"]["entries"]:
            c = e["response"]["content"]
            if e["request"]["url"].endswith(("/filled.png", "/style.css")) and "text" in c:
                raw = base64.b64decode(c["text"]) if c.get("encoding") == "base64" else c["text"].encode()
                bodies.setdefault(e["request"]["url"].rsplit("/", 1)[1], set()).add(len(raw))
    assert bodies == {"filled.png": {20_000}, "style.css": {len(CSS)}}, bodies
