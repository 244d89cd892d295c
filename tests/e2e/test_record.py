"""A page recorded here: Chromium, run by `satbench record` inside a testbed
(`satbench shell`), loads a page spread over four shard origins; its HAR is
imported as a site whose every object is byte-exact the file its origin
served, each under the host it came from; replayed, it opens as many
connections to each origin as the recorded load did."""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from satbench.endpoints import ca, pages
from satbench.results.report import write_report

from ..helpers import run_cli


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The uniform 500 KB page over four shard origins, recorded in Chromium inside a testbed:
    (the pages served, the imported site, the page's URL)."""
    tmp = tmp_path_factory.mktemp("record")
    www, out = tmp / "www", tmp / "site"
    pages.generate(www, ["uniform-500k"])
    url = pages.url_of("uniform-500k", shards=4)
    p = run_cli("shell", "--link", "lan", "--serve", str(www), "--shards", "4", "--quiet", "--",
                sys.executable, "-m", "satbench", "record", url, "--out", str(out), timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return www, out, url


def test_a_multi_origin_page_is_recorded_and_imported_byte_exact(recorded: tuple[Path, Path, str]) -> None:
    www, out, url = recorded
    site = json.loads((out / "site.json").read_text())
    assert site["page"] == url and site["filled"] == 0
    hosts = {e["host"] for e in site["entries"]}
    assert {"server.test", "s2.test", "s3.test", "s4.test"} <= hosts, hosts
    files = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in (www / "uniform-500k").glob("img*.jpg")}
    images = [e for e in site["entries"] if e["path"].endswith(".jpg")]
    assert len(images) == 8 and {e["path"].rsplit("/", 1)[1] for e in images} == set(files)
    for e in images:
        body = (out / "bodies" / e["body"]).read_bytes()
        assert hashlib.sha256(body).hexdigest() == files[e["path"].rsplit("/", 1)[1]] == e["body"], e["url"]
        assert e["status"] == 200 and e["mime"] == "image/jpeg"


def test_a_recorded_site_replays_from_its_own_origins_over_every_version(recorded: tuple[Path, Path, str],
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Replay the recorded four-origin page over the LAN in Chromium and Firefox over HTTP/1.1, HTTP/2 and
    # HTTP/3: every image comes from the origin it was recorded from, byte-exact (the replay's HAR
    # against the recording), over the version asked for, and nothing is missing.
    _, out, _ = recorded
    bodies = {e["url"]: e["body"] for e in json.loads((out / "site.json").read_text())["entries"]}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    exp = tmp_path / "replay.toml"
    exp.write_text('[experiment]\nname = "replay"\nseed = 1\ntimeout_s = 60\nartefacts = ["har"]\n[factors]\n'
                   f'link = "lan"\nprotocol = ["h1", "h2", "h3"]\npage = "site:{out}"\nclient = ["chromium", "firefox"]\n'
                   # the recording as it is: imported on first use (into XDG_CACHE_HOME), then replayed
                   f'[[trial]]\nprotocol = "h2"\npage = "har:{out}/recording.har"\nclient = "chromium"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    from tests.e2e.test_quic_stacks import trials

    ts = trials(db)
    # Firefox takes each object's protocol from Resource Timing, which shows another origin's only with
    # the server's Timing-Allow-Origin: its trials are valid only if every origin sent it.
    assert len(ts) == 7 and all(t["status"] == "valid" for t in ts), [t["reason"] for t in ts]
    assert len(list((tmp_path / "cache" / "satbench" / "sites").glob("*/site.json"))) == 1
    for t in ts:
        # Every recorded host name is an origin of its own (s1.test was the page host's alias when recorded).
        assert t["m"]["site_not_found"] == 0 and t["m"]["site_origins_contacted"] == 5, t["m"]
        assert t["protocols"] == {"h1": {"http/1.1"}, "h2": {"h2"}, "h3": {"h3"}}[t["f"]["protocol"]]
    # Connections per origin as in the recording (Chromium, HTTP/2): the same hosts, each with the
    # same number of connections (the recording's HAR names each entry's connection).
    rec = json.loads((out / "recording.har").read_text())["log"]["entries"]
    recorded_conns: dict[str, set[str]] = {}
    for e in rec:
        if e.get("connection"):
            recorded_conns.setdefault(urlsplit(e["request"]["url"]).hostname or "", set()).add(str(e["connection"]))
    assert recorded_conns, "the recording names no connections"
    con = sqlite3.connect(db)
    (tid,) = con.execute("SELECT id FROM trials WHERE json_extract(factors, '$.client') = 'chromium' AND "
                         "json_extract(factors, '$.protocol') = 'h2' AND json_extract(factors, '$.page') "
                         "LIKE 'site:%'").fetchone()
    replayed: dict[str, set[str]] = {}
    for url, conn in con.execute("SELECT url, connection FROM objects WHERE trial_id = ? AND connection IS NOT "
                                 "NULL AND url NOT LIKE '%favicon%'", (tid,)):
        replayed.setdefault(urlsplit(url).hostname or "", set()).add(str(conn))
    con.close()
    assert {h: len(c) for h, c in replayed.items()} == {h: len(c) for h, c in recorded_conns.items()}, (
        replayed, recorded_conns)
    page = write_report(db, tmp_path / "report").read_text()
    assert "<h3>Replayed sites</h3>" in page
    assert "Connections per origin" in page and "<td>s2.test</td>" in page
    hars = sorted((tmp_path / "artefacts").rglob("page.har"))
    assert len(hars) == 4  # Chromium's: three versions of the site, and the archive given as it is
    for h in hars:
        images = [e for e in json.loads(h.read_text())["log"]["entries"] if e["request"]["url"].endswith(".jpg")]
        assert len(images) == 8
        for e in images:
            body = base64.b64decode(e["response"]["content"]["text"])
            assert hashlib.sha256(body).hexdigest() == bodies[e["request"]["url"]], e["request"]["url"]


def test_the_shell_replays_a_site_from_its_origins(recorded: tuple[Path, Path, str], tmp_path: Path) -> None:
    # satbench shell --site: each recorded origin answers under its own name with its own certificate.
    www, out, _ = recorded
    got = tmp_path / "img2.jpg"
    p = run_cli("shell", "--link", "lan", "--site", str(out), "--quiet", "--", "curl", "-sS", "--fail",
                "--cacert", str(ca.ensure().cert), "-o", str(got), "-w", "%{http_version} %{ssl_verify_result}",
                "https://s2.test/uniform-500k/img2.jpg", timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert got.read_bytes() == (www / "uniform-500k" / "img2.jpg").read_bytes() and p.stdout.split() == ["2", "0"]


def test_a_folder_of_ones_own_files_is_a_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # page = "dir:PATH": the folder's index.html and what it names, from one origin, over GEO.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    mine = tmp_path / "mine"
    pages.generate(tmp_path / "www", ["single-100k"])
    (mine / "pics").mkdir(parents=True)
    (mine / "pics" / "a.jpg").write_bytes((tmp_path / "www" / "single-100k" / "img1.jpg").read_bytes())
    (mine / "index.html").write_text('<!DOCTYPE html><html><body><h1>mine</h1><img src="pics/a.jpg"></body></html>')
    exp = tmp_path / "dir.toml"
    exp.write_text(f'[experiment]\nname = "dir"\nseed = 1\ntimeout_s = 60\n[factors]\nlink = "geo"\n'
                   f'protocol = "h2"\npage = "dir:{mine}"\nclient = "chromium"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    from tests.e2e.test_quic_stacks import trials

    (t,) = trials(db)
    assert t["status"] == "valid", t["reason"]
    assert t["m"]["site_not_found"] == 0 and t["m"]["site_origins_contacted"] == 1
    # The HTML and the image cross the link: 2 handshake round trips, then one each, over 530 ms.
    assert t["m"]["plt_ms"] >= 4 * 530
