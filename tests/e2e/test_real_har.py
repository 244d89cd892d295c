"""A HAR shaped like the ones browsers save for real sites, replayed in
Chromium over HTTP/1.1, HTTP/2 and HTTP/3: it starts with a cleartext
redirect of the bare domain to https://www., has an origin on port 8443, and
123 hosts on 12 recorded server addresses. Every trial is valid; the
redirect is followed once, in the clear; every recorded object is served by
its own origin at its recorded size; and over HTTP/2 and HTTP/3 the browser
opens fewer connections than there are hosts, as the recorded addresses
allow (one certificate per address naming all its hosts)."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from urllib.parse import urlsplit

from ..helpers import run_cli

ADDRESSES = 12
CDN_HOSTS = 120
SIZE = 1500


#: A real 1x1 PNG, padded to SIZE after its end (a browser that finds no image in the bytes may stop
#: reading them before their end).
PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
IMAGE = base64.b64encode(PNG + bytes(SIZE - len(PNG))).decode()


def _entry(url: str, mime: str, *, text: str | None = None, size: int = 0, status: int = 200, ip: str,
           headers: tuple[tuple[str, str], ...] = (), version: str = "h2", b64: bool = False) -> dict:
    content: dict = {"mimeType": mime, "size": size or len(text or "")}
    if text is not None:
        content["text"] = text
    if b64:
        content["encoding"] = "base64"
    return {"request": {"method": "GET", "url": url, "httpVersion": version, "headers": []},
            "response": {"status": status, "httpVersion": version,
                         "headers": [{"name": "Content-Type", "value": mime},
                                     *({"name": k, "value": v} for k, v in headers)],
                         "content": content},
            "serverIPAddress": ip, "timings": {"wait": 1}}


def cdn(i: int) -> str:
    return f"https://img{i}.cdn{i % ADDRESSES}.test/p{i}.png"


def har() -> dict:
    images = "".join(f'<img src="{cdn(i)}" width="8" height="8">' for i in range(CDN_HOSTS))
    html = (f"<!DOCTYPE html><html><head><script src='https://api.shop.test:8443/app.js'></script></head>"
            f"<body><h1>shop</h1>{images}</body></html>")
    entries = [
        _entry("http://shop.test/", "text/html", text="", status=301, ip="203.0.113.10", version="http/1.1",
               headers=(("Location", "https://www.shop.test/"),)),
        _entry("https://www.shop.test/", "text/html", text=html, ip="203.0.113.10"),
        _entry("https://api.shop.test:8443/app.js", "text/javascript", text="document.title = 'replayed';",
               ip="203.0.113.10"),
        *(_entry(cdn(i), "image/png", text=IMAGE, size=SIZE, b64=True, ip=f"203.0.113.{100 + i % ADDRESSES}")
          for i in range(CDN_HOSTS)),
    ]
    return {"log": {"version": "1.2", "creator": {"name": "test", "version": "1"},
                    "pages": [{"id": "p", "title": "https://www.shop.test/"}], "entries": entries}}


def test_a_real_shaped_har_replays_with_its_redirect_ports_and_hosts_grouped_by_address(tmp_path: Path) -> None:
    src = tmp_path / "shop.har"
    src.write_text(json.dumps(har()))
    site = tmp_path / "site"
    p = run_cli("pages", "import", str(src), "--out", str(site))
    assert p.returncode == 0, p.stderr
    doc = json.loads((site / "site.json").read_text())
    assert doc["page"] == "http://shop.test/" and len(doc["hosts"]) == CDN_HOSTS + 3
    exp = tmp_path / "real.toml"
    exp.write_text('[experiment]\nname = "real"\nseed = 1\ntimeout_s = 90\nartefacts = ["server"]\n'
                   f'[factors]\nlink = "lan"\nclient = "chromium"\nprotocol = ["h1", "h2", "h3"]\npage = "site:{site}"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    con = sqlite3.connect(db)
    rows = con.execute("SELECT id, factors, status, reason, env, artefacts FROM trials ORDER BY id").fetchall()
    assert len(rows) == 3
    for tid, factors, status, reason, env, art in rows:
        proto = json.loads(factors)["protocol"]
        assert status == "valid", (proto, reason)
        replay = json.loads(env)["site"]["replay"]
        # 12 addresses for the images, one for the shop's three hosts; a second server there for port 8443.
        assert replay["addresses"] == ADDRESSES + 1 == replay["certificates"], replay
        assert replay["servers"] == ADDRESSES + 2 and replay["recorded_addresses"] == ADDRESSES + 1, replay
        objs = con.execute("SELECT url, status, connection FROM objects WHERE trial_id = ?", (tid,)).fetchall()
        got = {u: st for u, st, _ in objs}
        assert all(got.get(cdn(i)) == 200 for i in range(CDN_HOSTS)), (proto, got)
        assert got["https://api.shop.test:8443/app.js"] == 200, proto
        # As the servers logged it: every image by its own address's server, whole; the redirect once
        # and in the clear; the page after it over TLS.
        logs = [(f.parent, json.loads(line)) for f in Path(art).rglob("access.jsonl") for line in f.open()]
        reqs = [e for _, e in logs if e.get("type") == "request"]
        by_address: dict[str, set[Path]] = {}
        for folder, e in logs:
            if e.get("type") == "request" and ".cdn" in (e.get("authority") or ""):
                assert (e["status"], e["content_length"], e["body_bytes"]) == (200, SIZE, SIZE), (proto, e)
                by_address.setdefault(e["authority"].split(".")[1], set()).add(folder)
        assert len(by_address) == ADDRESSES and all(len(f) == 1 for f in by_address.values()), by_address
        assert len({min(f) for f in by_address.values()}) == ADDRESSES  # one server per address
        assert sum(".cdn" in (e.get("authority") or "") for e in reqs) == CDN_HOSTS, proto
        clear = [e for e in reqs if not e["tls"]]
        assert [(e["authority"], e["path"], e["status"]) for e in clear] == [("shop.test", "/", 301)], clear
        assert sum(e["authority"] == "www.shop.test" and e["path"] == "/" for e in reqs) == 1
        hosts = {urlsplit(u).hostname for u, *_ in objs}
        conns = {c for *_, c in objs if c is not None}
        if proto != "h1":
            # Coalesced as the recorded addresses allow: never fewer connections than addresses and ports
            # (13 addresses, and the page's second port), far fewer than hosts. (Not one per address:
            # Chromium pools a host onto a session that is up, and opens several to one address while
            # the first is still in its handshake.)
            assert ADDRESSES + 2 <= len(conns) < len(hosts), (proto, len(conns), len(hosts))
            print(f"{proto}: {len(conns)} connections for {len(hosts)} hosts on {ADDRESSES + 1} addresses")
    con.close()


def _first_random() -> float:
    """The deterministic script's first Math.random() (its seed is crates/server/src/determinism.rs's)."""
    import re

    src = (Path(__file__).resolve().parents[2] / "crates" / "server" / "src" / "determinism.rs").read_text()
    m = re.search(r"pub const SEED: u32 = 0x([0-9a-f_]+);", src)
    assert m, "SEED not found in determinism.rs"
    mask = 0xFFFFFFFF
    t = (int(m.group(1).replace("_", ""), 16) + 0x6D2B79F5) & mask
    t = ((t ^ (t >> 15)) * (t | 1)) & mask
    t ^= (t + (((t ^ (t >> 7)) * (t | 61)) & mask)) & mask
    return ((t ^ (t >> 14)) & mask) / 4294967296


def test_deterministic_replay_repeats_the_urls_scripts_build_from_date_and_math_random(tmp_path: Path) -> None:
    import datetime

    started = "2026-01-02T03:04:05.678Z"
    t = int(datetime.datetime.fromisoformat(started.replace("Z", "+00:00")).timestamp() * 1000)
    recorded = f"/ad.js?t={t}&r={_first_random()!r}"
    html = ("<!DOCTYPE html><html><head><title>ads</title></head><body><h1>ads</h1><script>"
            "var s = document.createElement('script'); s.src = '/ad.js?t=' + Date.now() + '&r=' + Math.random();"
            "document.body.appendChild(s);</script></body></html>")
    doc = {"log": {"version": "1.2", "creator": {"name": "test", "version": "1"},
                   "pages": [{"id": "p", "title": "https://www.ads.test/", "startedDateTime": started}],
                   "entries": [_entry("https://www.ads.test/", "text/html", text=html, ip="203.0.113.5"),
                               _entry(f"https://www.ads.test{recorded}", "text/javascript",
                                      text="document.title = 'ad';", ip="203.0.113.5")]}}
    (tmp_path / "ads.har").write_text(json.dumps(doc))
    exp = tmp_path / "det.toml"
    exp.write_text('[experiment]\nname = "det"\nseed = 1\ntimeout_s = 60\nrepetitions = 3\nartefacts = ["server"]\n'
                   f'[factors]\nlink = "lan"\nclient = "chromium"\nprotocol = "h2"\npage = "har:{tmp_path}/ads.har"\n'
                   '"server.replay_deterministic" = [false, true]\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300,
                env={**__import__("os").environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    con = sqlite3.connect(db)
    asked: dict[bool, list[str]] = {False: [], True: []}
    for tid, factors, status, reason, art in con.execute("SELECT id, factors, status, reason, artefacts FROM trials"):
        on = json.loads(factors)["server.replay_deterministic"]
        assert status == "valid", reason
        m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
        logs = [json.loads(line) for f in Path(art).rglob("access.jsonl") for line in f.open()]
        ads = [e["path"] for e in logs if e.get("type") == "request" and e["path"].startswith("/ad.js")]
        assert len(ads) == 1, ads
        asked[on] += ads
        # With the script: the recorded URL exactly, nothing missing; without: a closest query.
        assert (m["site_fuzzy_matched"], m["site_not_found"]) == ((0, 0) if on else (1, 0)), (on, m)
    con.close()
    assert asked[True] == [recorded] * 3, asked
    assert len(set(asked[False])) == 3 and recorded not in asked[False], asked


def test_each_origin_speaks_the_version_it_spoke_in_the_recording(tmp_path: Path) -> None:
    """replay_protocols = "recorded": a page whose origins were recorded over HTTP/2 (the page), HTTP/1.1
    (an old API host) and HTTP/3 (a CDN) replays with each over its own version, in one Chromium
    load; by default (trial) every origin speaks the trial's."""
    html = ("<!DOCTYPE html><html><head><script src='https://old.shop.test/a.js'></script></head><body>"
            + "".join(f'<img src="https://cdn.shop.test/{i}.png" width="4" height="4">' for i in range(5))
            + "</body></html>")
    entries = [_entry("https://www.shop.test/", "text/html", text=html, ip="203.0.113.1", version="HTTP/2.0"),
               _entry("https://old.shop.test/a.js", "text/javascript", text="var a = 1;", ip="203.0.113.2",
                      version="HTTP/1.1"),
               *(_entry(f"https://cdn.shop.test/{i}.png", "image/png", text=IMAGE, size=SIZE, b64=True,
                        ip="203.0.113.3", version="h3") for i in range(5))]
    doc = {"log": {"version": "1.2", "creator": {"name": "test", "version": "1"},
                   "pages": [{"id": "p", "title": "https://www.shop.test/"}], "entries": entries}}
    (tmp_path / "v.har").write_text(json.dumps(doc))
    exp = tmp_path / "v.toml"
    exp.write_text('[experiment]\nname = "v"\nseed = 1\ntimeout_s = 60\n'
                   f'[factors]\nlink = "lan"\nclient = "chromium"\nprotocol = "h3"\npage = "har:{tmp_path}/v.har"\n'
                   'replay_protocols = ["recorded", "trial"]\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300,
                env={**__import__("os").environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    con = sqlite3.connect(db)
    for tid, factors, status, reason in con.execute("SELECT id, factors, status, reason FROM trials"):
        mode = json.loads(factors)["replay_protocols"]
        assert status == "valid", (mode, reason)
        spoke: dict[str, set[str]] = {}
        for url, proto in con.execute("SELECT url, protocol FROM objects WHERE trial_id = ? AND status = 200",
                                      (tid,)):
            spoke.setdefault(urlsplit(url).hostname or "", set()).add(proto)
        want = ({"www.shop.test": {"h2"}, "old.shop.test": {"http/1.1"}, "cdn.shop.test": {"h3"}} if mode == "recorded"
                else {"www.shop.test": {"h3"}, "old.shop.test": {"h3"}, "cdn.shop.test": {"h3"}})
        assert spoke == want, (mode, spoke)
    con.close()


def test_a_page_shaped_like_the_median_mobile_page_replays_without_a_recording(tmp_path: Path) -> None:
    """web:median-mobile: the Web Almanac's median mobile home page, generated and replayed in Chromium
    over HTTP/2 and HTTP/3, every object loaded."""
    from satbench.endpoints import websites

    exp = tmp_path / "web.toml"
    exp.write_text('[experiment]\nname = "web"\nseed = 1\ntimeout_s = 90\n'
                   '[factors]\nlink = "lan"\nclient = "chromium"\nprotocol = ["h2", "h3"]\npage = "web:median-mobile"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300,
                env={**__import__("os").environ, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    want = websites.generate("median-mobile")["log"]["entries"]
    con = sqlite3.connect(db)
    for tid, status, reason, env in con.execute("SELECT id, status, reason, env FROM trials"):
        assert status == "valid", reason
        objs = con.execute("SELECT url, status FROM objects WHERE trial_id = ?", (tid,)).fetchall()
        loaded = {u for u, st in objs if st == 200}
        assert {e["request"]["url"] for e in want[1:]} <= loaded, len(loaded)
        assert json.loads(env)["site"]["replay"]["addresses"] == websites.PRESETS["median-mobile"].third_parties + 2
    con.close()
