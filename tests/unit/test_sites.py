"""Recorded sites imported: a HAR with text, base64, missing and compressed
bodies and a multi-origin page, and a Web Page Replay archive with a gzipped,
chunked response; what was filled, decoded and dropped is in the manifest;
malformed archives are refused naming the file and the entry; nothing given
is changed."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import re
from pathlib import Path

import pytest

from satbench.endpoints import sites
from satbench.errors import InputError

from ..helpers import run_cli

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(200))


def har(entries: list[dict], page: str = "https://www.example.test/") -> dict:
    return {"log": {"version": "1.2", "creator": {"name": "test", "version": "1"},
                    "pages": [{"id": "page_1", "title": page}], "entries": entries}}


def entry(url: str, status: int = 200, mime: str = "text/html", text: str | None = "<html></html>",
          headers: list[tuple[str, str]] | None = None, b64: bool = False, size: int | None = None,
          wait: float | None = 12.5) -> dict:
    content: dict = {"mimeType": mime, "size": size if size is not None else len(text or "")}
    if text is not None:
        content["text"] = text
        if b64:
            content["encoding"] = "base64"
    return {"request": {"method": "GET", "url": url, "headers": []},
            "response": {"status": status, "headers": [{"name": k, "value": v} for k, v in headers or []],
                         "content": content, "bodySize": -1},
            "timings": {"wait": wait} if wait is not None else {}}


def test_a_har_imports_with_what_was_filled_decoded_and_dropped(tmp_path: Path) -> None:
    src = tmp_path / "site.har"
    src.write_text(json.dumps(har([
        entry("https://www.example.test/", headers=[(":status", "200"), ("Content-Type", "text/html"),
                                                   ("Content-Encoding", "gzip"), ("Connection", "keep-alive"),
                                                   ("Content-Length", "13"), ("Cache-Control", "max-age=60")]),
        entry("https://img.example.test/a.png?v=123", mime="image/png", text=base64.b64encode(PNG).decode(),
              b64=True),
        entry("https://cdn.example.test/big.js", mime="application/javascript", text=None, size=5000, wait=None),
    ])))
    given = src.read_bytes()
    out = tmp_path / "out"
    site = sites.import_archive(src, out)
    assert src.read_bytes() == given
    assert site.page == "https://www.example.test/"
    assert site.hosts == ["cdn.example.test", "img.example.test", "www.example.test"]
    html, img, js = site.entries
    assert html.headers == [("Content-Type", "text/html"), ("Cache-Control", "max-age=60")]
    assert html.encoding == "gzip" and "decoded" in html.changed
    assert {"dropped :status", "dropped connection", "dropped content-length"} <= set(html.changed)
    assert html.server_ms == 12.5 and not html.filled
    assert (out / "bodies" / img.body).read_bytes() == PNG and img.query == "v=123" and img.path == "/a.png"
    assert js.filled and js.bytes == 5000 and js.server_ms is None
    filled = (out / "bodies" / js.body).read_bytes()
    assert len(filled) == 5000 and len(gzip.compress(filled)) > 4900  # incompressible
    manifest = json.loads((out / "site.json").read_text())
    assert manifest["filled"] == 1 and manifest["decoded"] == 1 and len(manifest["entries"]) == 3
    # The same archive again: the same manifest and bodies (the fill is seeded by its URL).
    again = sites.import_archive(src, tmp_path / "again")
    assert [e.body for e in again.entries] == [e.body for e in site.entries]


@pytest.mark.parametrize("encoding", ["gzip", "br"])
def test_a_web_page_replay_archive_imports(tmp_path: Path, encoding: str) -> None:
    # Web Page Replay keeps bodies as they crossed the wire: gzip or brotli, chunked; stored decoded.
    import brotli

    body = b"<html><body>hello</body></html>" * 10
    z = gzip.compress(body) if encoding == "gzip" else brotli.compress(body)
    chunked = f"{len(z):x}\r\n".encode() + z + b"\r\n0\r\n\r\n"
    response = (b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Encoding: "
                + encoding.encode() + b"\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
    request = b"GET /index.html HTTP/1.1\r\nHost: www.example.test\r\n\r\n"
    archive = {"Requests": {"www.example.test": {"https://www.example.test/index.html": [
        {"SerializedRequest": base64.b64encode(request).decode(),
         "SerializedResponse": base64.b64encode(response).decode()}]}}}
    src = tmp_path / "set.wprgo"
    src.write_bytes(gzip.compress(json.dumps(archive).encode()))
    site = sites.import_archive(src, tmp_path / "out")
    (e,) = site.entries
    assert e.status == 200 and e.mime == "text/html" and e.encoding == encoding and "decoded" in e.changed
    assert (tmp_path / "out" / "bodies" / e.body).read_bytes() == body
    assert e.body == hashlib.sha256(body).hexdigest() and "dropped transfer-encoding" in e.changed
    # A body that is not what its header says is refused with its entry.
    bad = response.replace(z, b"\x00" * len(z))
    archive["Requests"]["www.example.test"]["https://www.example.test/index.html"][0]["SerializedResponse"] = (
        base64.b64encode(bad).decode())
    src.write_bytes(gzip.compress(json.dumps(archive).encode()))
    with pytest.raises(InputError, match="index.html"):
        sites.import_archive(src, tmp_path / "out2")


@pytest.mark.parametrize("content, words", [
    ("{", "not JSON"),
    ('{"log": {}}', "not a HAR (no log.entries)"),
    ('{"log": {"entries": [{"request": {"url": "https://a.test/"}}]}}', "entry 0: missing or malformed field"),
    ('{"log": {"entries": [{"request": {"method": "GET", "url": "ftp://a.test/"}, "response": {"status": 200}}]}}',
     "entry 0: request.url is not an http(s) URL"),
    ('{"log": {"entries": []}}', "no entries to import"),
])
def test_a_malformed_archive_is_refused_with_its_entry(tmp_path: Path, content: str, words: str) -> None:
    src = tmp_path / "bad.har"
    src.write_text(content)
    with pytest.raises(InputError, match=re.escape(words)):
        sites.import_archive(src, tmp_path / "out")
    p = run_cli("pages", "import", str(src), "--out", str(tmp_path / "out2"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and words.split("(")[0] in p.stderr


GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"


def shop_har() -> dict:
    """A recorded origin with what replay must keep: the cleartext redirect a recording that began
    by typing the domain starts with, two queries of one path (one volatile parameter), a redirect,
    recorded headers and think times, headers the server sets itself."""
    return har([
        entry("http://www.shop.test/", status=301, text="", mime="text/html",
              headers=[("Location", "https://www.shop.test/")]),
        entry("https://www.shop.test/", headers=[("Content-Type", "text/html; charset=utf-8"),
                                                 ("Server", "nginx"), ("Cache-Control", "no-cache")]),
        entry("https://www.shop.test/app.js?v=7&session=abc", mime="text/javascript", text="var v = 7;",
              headers=[("Content-Type", "text/javascript"), ("Cache-Control", "max-age=600"),
                       ("Content-Length", "10"), ("Alt-Svc", 'h3=":443"')], wait=40),
        entry("https://www.shop.test/app.js?v=8&session=abc", mime="text/javascript", text="var v = 8;",
              headers=[("Content-Type", "text/javascript")], wait=0),
        entry("https://www.shop.test/old", status=301, text="", mime="text/html",
              headers=[("Location", "https://www.shop.test/"), ("X-Bad", "caf\u00e9")]),
    ], page="https://www.shop.test/")


def test_replay_manifest_keeps_statuses_headers_and_think_times(tmp_path: Path) -> None:
    (tmp_path / "a.har").write_text(json.dumps(shop_har()))
    sites.import_archive(tmp_path / "a.har", tmp_path / "site", volatile=["session"])
    r = sites.materialize(tmp_path / "site", tmp_path / "out")
    assert r.hosts == ["www.shop.test"] and r.served == 5
    # The recording began with the cleartext redirect: replay starts there too.
    assert r.page == "http://www.shop.test/"
    m = json.loads(r.manifests[0].read_text())
    assert m["volatile"] == ["session"] and Path(m["bodies"]).is_absolute()
    origins = {(o["scheme"], o["host"], o["port"]): o["entries"] for o in m["origins"]}
    assert list(origins) == [("http", "www.shop.test", 80), ("https", "www.shop.test", 443)]
    assert [(e["path"], e["status"]) for e in origins[("http", "www.shop.test", 80)]] == [("/", 301)]
    by = {(e["path"], e["query"]): e for e in origins[("https", "www.shop.test", 443)]}
    js = by[("/app.js", "v=7&session=abc")]
    # What the server sets itself (type, length, Alt-Svc, Server) is not sent as recorded; the rest is.
    assert js["headers"] == [["cache-control", "max-age=600"]] and js["content_type"] == "text/javascript"
    assert js["server_ms"] == 40 and (Path(m["bodies"]) / js["body"]).read_bytes() == b"var v = 7;"
    old = by[("/old", "")]
    assert old["status"] == 301 and old["headers"] == [["location", "https://www.shop.test/"]]
    assert any("X-Bad" in n for n in r.notes)  # a header HTTP cannot carry: left out, and said
    with pytest.raises(InputError, match="--volatile"):
        sites.import_archive(tmp_path / "a.har", tmp_path / "x", volatile=["a=b"])


def test_the_replay_manifest_fixture_is_what_the_importer_writes(tmp_path: Path) -> None:
    """The manifest's format is the orchestrator's; satbench-server's replay.rs reads this fixture
    (``reads_the_orchestrators_manifest``), so a change on either side fails a test. Rewrite it
    with SATBENCH_BLESS=1."""
    import os
    import shutil

    (tmp_path / "a.har").write_text(json.dumps(shop_har()))
    sites.import_archive(tmp_path / "a.har", tmp_path / "site", volatile=["session"])
    r = sites.materialize(tmp_path / "site", tmp_path / "out")
    m = json.loads(r.manifests[0].read_text())
    m["bodies"] = "replay-bodies"  # relative: the fixture's own folder
    text = json.dumps(m, indent=1) + "\n"
    if os.environ.get("SATBENCH_BLESS"):
        shutil.rmtree(GOLDEN / "replay-bodies", ignore_errors=True)
        (GOLDEN / "replay-bodies").mkdir()
        for o in m["origins"]:
            for e in o["entries"]:
                shutil.copy(tmp_path / "site" / "bodies" / e["body"], GOLDEN / "replay-bodies" / e["body"])
        (GOLDEN / "replay.json").write_text(text)
    assert (GOLDEN / "replay.json").read_text() == text, "stale: SATBENCH_BLESS=1 pytest tests/unit/test_sites.py"
    for e in (e for o in m["origins"] for e in o["entries"]):
        assert (GOLDEN / "replay-bodies" / e["body"]).read_bytes() == (tmp_path / "site" / "bodies" / e["body"]).read_bytes()


def test_the_headers_left_out_are_those_the_server_refuses() -> None:
    """What the importer leaves out of a replay manifest's headers is exactly what satbench-server's
    replay.rs refuses in one (``SERVER_SETS``): a header the one side lets through, the other
    does not turn into a refused manifest."""
    src = (Path(__file__).resolve().parents[2] / "crates" / "server" / "src" / "replay.rs").read_text()
    block = re.search(r"pub const SERVER_SETS: &\[&str\] = &\[(.*?)\];", src, re.S)
    assert block, "SERVER_SETS not found in replay.rs"
    assert set(re.findall(r'"([^"]+)"', block.group(1))) == sites.HOP_BY_HOP | sites.SERVER_SET


@pytest.mark.parametrize("entries, words", [
    ([entry("https://www.a.test:99999/")], "entry 0: request.url's port is out of range"),
    ([entry("https://www.a.test/"), entry("https://a_b.test/")], "entry 1: request.url's host is no host name"),
    ([entry("https://www.a.test/x", status=302, headers=[("Location", "/x")])],
     "entry 0: response.headers: a 302 redirect to its own URL"),
    ([entry("http://a.test/", status=301, headers=[("Location", "http://a.test:80/#top")])],
     "entry 0: response.headers: a 301 redirect to its own URL"),
    ([entry(f"https://h{i}.a.test/") for i in range(sites.MAX_HOSTS + 1)], "1001 hosts; a site replays at most 1000"),
])
def test_bad_real_recordings_are_refused_in_one_line_and_write_nothing(tmp_path: Path, entries: list[dict],
                                                                        words: str) -> None:
    src = tmp_path / "bad.har"
    src.write_text(json.dumps(har(entries)))
    p = run_cli("pages", "import", str(src), "--out", str(tmp_path / "out"))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert f"{src}: {words}" in p.stderr, p.stderr
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").rglob("*")) == []  # not one body


def test_hosts_are_grouped_by_the_address_the_recording_saw_them_at(tmp_path: Path) -> None:
    def at(url: str, ip: str | None) -> dict:
        e = entry(url)
        if ip is not None:
            e["serverIPAddress"] = ip
        return e

    src = tmp_path / "a.har"
    src.write_text(json.dumps(har([
        at("http://a.test/", "203.0.113.1"), at("https://www.a.test/", "203.0.113.1"),
        at("https://cdn.a.test/x", "[2001:db8::7]"), at("https://img.a.test/y", "2001:db8::7"),
        at("https://api.a.test:8443/z", "203.0.113.1"), at("https://lone.test/", None),
        # A host answered from two addresses: the one it was seen at most.
        at("https://multi.test/1", "203.0.113.9"), at("https://multi.test/2", "203.0.113.1"),
        at("https://multi.test/3", "203.0.113.1")], page="https://www.a.test/")))
    sites.import_archive(src, tmp_path / "site")
    groups = sites.server_groups(sites.load_site(tmp_path / "site"))
    assert [(g.names, g.recorded) for g in groups] == [
        (["www.a.test", "a.test", "api.a.test", "multi.test"], "203.0.113.1"),
        (["cdn.a.test", "img.a.test"], "2001:db8::7"), (["lone.test"], None)]
    assert groups[0].listeners == [(443, 80), (8443, 0)] and groups[2].listeners == [(443, 0)]
    assert ("http", "a.test", 80) in groups[0].origins and ("https", "api.a.test", 8443) in groups[0].origins


def test_the_recording_time_reaches_the_replay_manifest(tmp_path: Path) -> None:
    doc = har([entry("https://www.a.test/")], page="https://www.a.test/")
    doc["log"]["pages"][0]["startedDateTime"] = "2026-01-02T03:04:05.678+01:00"
    (tmp_path / "a.har").write_text(json.dumps(doc))
    site = sites.import_archive(tmp_path / "a.har", tmp_path / "site")
    assert site.recorded_at_ms == 1767319445678
    r = sites.materialize(tmp_path / "site", tmp_path / "out")
    assert json.loads(r.manifests[0].read_text())["recorded_at_ms"] == 1767319445678
    doc["log"]["pages"][0]["startedDateTime"] = "yesterday"
    (tmp_path / "b.har").write_text(json.dumps(doc))
    assert sites.import_archive(tmp_path / "b.har", tmp_path / "site2").recorded_at_ms is None


def test_the_report_gives_each_origin_its_requests_bytes_connections_set_up_and_sharing() -> None:
    import pandas as pd

    from satbench.workloads.site import _per_origin

    rows = []
    for tid in (1, 2):
        rows += [
            # a.test's page opens connection 1 (its set-up 30 ms); b.test coalesces onto it; c.test has its own.
            {"trial_id": tid, "client": 0, "url": "https://a.test/", "bytes": 1000, "start_ms": 0.0, "ttfb_ms": 50.0,
             "connection": "1", "connect_ms": 30.0},
            {"trial_id": tid, "client": 0, "url": "https://b.test/x", "bytes": 200, "start_ms": 60.0,
             "ttfb_ms": 70.0, "connection": "1", "connect_ms": None},
            {"trial_id": tid, "client": 0, "url": "https://b.test/y", "bytes": 300, "start_ms": 60.0,
             "ttfb_ms": 80.0, "connection": "1", "connect_ms": None},
            {"trial_id": tid, "client": 0, "url": "https://c.test/z", "bytes": 5, "start_ms": 60.0,
             "ttfb_ms": 100.0 + tid, "connection": "2", "connect_ms": 20.0 + tid}]
    objects = pd.DataFrame(rows)
    trials = pd.DataFrame({"trial_id": [1, 2]})
    got = {r[1]: r[2:] for r in _per_origin(objects, [((), trials)], [])}
    assert got["a.test"] == [1.0, 1000.0, 1.0, 30.0, 50.0, "b.test"]
    assert got["b.test"] == [2.0, 500.0, 1.0, "-", 15.0, "a.test"]
    assert got["c.test"] == [1.0, 5.0, 1.0, 21.5, 41.5, "-"]


def test_each_origin_keeps_the_version_most_of_its_responses_spoke() -> None:
    from satbench.workloads.site import _served_as_recorded

    def e(url: str, version: str | None, ip: str) -> dict:
        u = urlsplit_(url)
        return {"host": u.hostname, "scheme": u.scheme, "port": u.port or 443, "version": version, "ip": ip}

    from urllib.parse import urlsplit as urlsplit_

    doc = {"page": "https://a.test/", "entries": [
        e("https://a.test/", "h2", "203.0.113.1"), e("https://a.test/x", "h3", "203.0.113.1"),
        e("https://a.test/y", "h3", "203.0.113.1"), e("https://b.test/", "h1", "203.0.113.2"),
        e("https://c.test/", None, "203.0.113.3")]}
    a, b, c = sites.server_groups(doc)
    assert a.versions == {("https", "a.test", 443): "h3"} and a.newest == "h3" and _served_as_recorded(a) == ()
    assert b.newest == "h1" and dict(_served_as_recorded(b)) == {"h2": False, "h3": False}
    assert c.newest is None and _served_as_recorded(c) == ()
