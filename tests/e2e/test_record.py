"""A page recorded here: Chromium, run by `satbench record` inside a testbed
(`satbench shell`), loads the shop page spread over four shard origins (its
HTML, stylesheets, scripts, fonts and images); its HAR is imported as a site
whose every object is byte-exact the file its origin served, each under the
host it came from; replayed in both browsers over every version, every
object arrives from the origin it was recorded from, and it opens as many
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

PAGE = "shop"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """The shop page over four shard origins, recorded in Chromium inside a testbed:
    (the pages served, the imported site, the page's URL)."""
    tmp = tmp_path_factory.mktemp("record")
    www, out = tmp / "www", tmp / "site"
    pages.generate(www, [PAGE])
    url = pages.url_of(PAGE, shards=4)
    p = run_cli("shell", "--link", "lan", "--serve", str(www), "--shards", "4", "--quiet", "--",
                sys.executable, "-m", "satbench", "record", url, "--out", str(out), timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return www, out, url


def _served(www: Path, entry: dict) -> bytes:
    """The file the origins served for a recorded entry (the sharded index is written beside the page)."""
    return (www / entry["path"].lstrip("/")).read_bytes()


def test_a_multi_origin_page_is_recorded_and_imported_byte_exact(recorded: tuple[Path, Path, str]) -> None:
    www, out, url = recorded
    site = json.loads((out / "site.json").read_text())
    assert site["page"] == url and site["filled"] == 0
    hosts = {e["host"] for e in site["entries"]}
    assert {"server.test", "s2.test", "s3.test", "s4.test"} <= hosts, hosts
    mine = [e for e in site["entries"] if e["path"].startswith(f"/{PAGE}/")]
    kinds = {e["mime"].split(";")[0] for e in mine}
    assert len(mine) > 100 and {"text/html", "text/css", "image/jpeg"} <= kinds, (len(mine), kinds)
    for e in mine:  # every object, whatever its type: the body the origin served, stored as its sha256
        body = (out / "bodies" / e["body"]).read_bytes()
        assert hashlib.sha256(body).hexdigest() == hashlib.sha256(_served(www, e)).hexdigest() == e["body"], e["url"]
        assert e["status"] == 200


def _origin_logs(art: Path) -> dict[tuple[str, str], list[tuple[str, int]]]:
    """What each origin's server logged: (host asked for, path) -> [(the server's log folder, body bytes)]."""
    out: dict[tuple[str, str], list[tuple[str, int]]] = {}
    for log in (art / "server").rglob("access.jsonl"):
        for line in log.read_text().splitlines():
            r = json.loads(line)
            if r.get("type") == "request" and r.get("status") == 200:
                out.setdefault((r["authority"].split(":")[0], r["path"]), []).append(
                    (str(log.parent.relative_to(art)), int(r["body_bytes"])))
    return out


def test_a_recorded_site_replays_from_its_own_origins_over_every_version(recorded: tuple[Path, Path, str],
                                                                        tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Replay the recorded four-origin page over the LAN in Chromium and Firefox over HTTP/1.1, HTTP/2 and
    # HTTP/3: every object comes from the origin it was recorded from (that origin's server logged it,
    # no other did, at its recorded size), byte-exact where the browser keeps bodies (Chromium's HAR
    # against the recording), over the version asked for, and nothing is missing.
    _, out, _ = recorded
    entries = json.loads((out / "site.json").read_text())["entries"]
    bodies = {e["url"]: e["body"] for e in entries}
    sizes = {(e["host"], e["path"]): e["bytes"] for e in entries if e["status"] == 200}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    exp = tmp_path / "replay.toml"
    exp.write_text('[experiment]\nname = "replay"\nseed = 1\ntimeout_s = 60\nartefacts = ["har", "server"]\n'
                   f'[factors]\nlink = "lan"\nprotocol = ["h1", "h2", "h3"]\npage = "site:{out}"\n'
                   'client = ["chromium", "firefox"]\n'
                   # the recording as it is: imported on first use (into XDG_CACHE_HOME), then replayed
                   f'[[trial]]\nprotocol = "h2"\npage = "har:{out}/recording.har"\nclient = "chromium"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    from tests.e2e.test_quic_stacks import trials

    ts = trials(db)
    # Firefox takes each object's protocol from Resource Timing, which shows another origin's only with
    # the server's Timing-Allow-Origin: its trials are valid only if every origin sent it.
    assert len(ts) == 7 and all(t["status"] == "valid" for t in ts), [(t["f"]["client"], t["f"]["protocol"],
                                                                         t["reason"]) for t in ts]
    assert len(list((tmp_path / "cache" / "satbench" / "sites").glob("*/site.json"))) == 1
    con = sqlite3.connect(db)
    arts = dict(con.execute("SELECT id, artefacts FROM trials"))
    site = json.loads((out / "site.json").read_text())
    recorded_ip = {e["host"]: e["ip"] for e in site["entries"]}
    assert all(recorded_ip.values()), recorded_ip  # Chromium's HAR names each response's server address
    for t in ts:
        # Every recorded host name is an origin of its own (s1.test was the page host's alias when recorded).
        assert t["m"]["site_not_found"] == 0 and t["m"]["site_origins_contacted"] == 5, t["m"]
        assert t["protocols"] == {"h1": {"http/1.1"}, "h2": {"h2"}, "h3": {"h3"}}[t["f"]["protocol"]]
        # Every recorded object was served, each by its own origin's server alone, at its recorded size.
        (tid,) = [i for i, a in arts.items() if t["f"] == json.loads(con.execute(
            "SELECT factors FROM trials WHERE id = ?", (i,)).fetchone()[0])]
        logged = _origin_logs(Path(arts[tid]))
        missing = [k for k in sizes if k[1].startswith(f"/{PAGE}/") and k not in logged]
        assert not missing, (t["f"], missing[:5])
        for (host, path), served in logged.items():
            assert (host, path) in sizes, (t["f"], host, path)
            assert {b for _, b in served} == {sizes[(host, path)]}, (t["f"], host, path, served)
        by_folder: dict[str, set[str]] = {}
        for (host, _), served in logged.items():
            for folder, _ in served:
                by_folder.setdefault(host, set()).add(folder)
        # One server per origin; two hosts share one exactly when the recording saw them at one address
        # (server.test and s1.test were one server host when recorded).
        assert all(len(f) == 1 for f in by_folder.values()), by_folder
        for a in by_folder:
            for b in by_folder:
                assert (by_folder[a] == by_folder[b]) == (recorded_ip[a] == recorded_ip[b]), (a, b, by_folder)
        assert recorded_ip["server.test"] == recorded_ip["s1.test"] != recorded_ip["s2.test"]
    # Connections per origin as in the recording (Chromium, HTTP/2): the same hosts, each with the
    # same number of connections (the recording's HAR names each entry's connection).
    rec = json.loads((out / "recording.har").read_text())["log"]["entries"]
    recorded_conns: dict[str, set[str]] = {}
    for e in rec:
        if e.get("connection"):
            recorded_conns.setdefault(urlsplit(e["request"]["url"]).hostname or "", set()).add(str(e["connection"]))
    assert recorded_conns, "the recording names no connections"
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
    assert "Per origin, medians" in page and "<td>s2.test</td>" in page and "shared a connection with" in page
    hars = sorted((tmp_path / "artefacts").rglob("page.har"))
    assert len(hars) == 4  # Chromium's: three versions of the site, and the archive given as it is
    for h in hars:
        got = [e for e in json.loads(h.read_text())["log"]["entries"]
               if urlsplit(e["request"]["url"]).path.startswith(f"/{PAGE}/") and e["response"]["status"] == 200]
        assert len(got) > 100
        checked = 0
        for e in got:  # every object Chromium kept a body of, byte-exact
            c = e["response"]["content"]
            if "text" not in c:
                continue
            body = base64.b64decode(c["text"]) if c.get("encoding") == "base64" else c["text"].encode()
            assert hashlib.sha256(body).hexdigest() == bodies[e["request"]["url"]], e["request"]["url"]
            checked += 1
        assert checked >= 0.9 * len(got), (checked, len(got))  # nearly all: the check checked something


def test_the_shell_replays_a_site_from_its_origins(recorded: tuple[Path, Path, str], tmp_path: Path) -> None:
    # satbench shell --site: each recorded origin answers under its own name with its own certificate.
    www, out, _ = recorded
    image = next(e for e in json.loads((out / "site.json").read_text())["entries"]
                 if e["host"] == "s2.test" and e["path"].endswith(".jpg"))  # an image recorded from s2.test
    got = tmp_path / "image.jpg"
    p = run_cli("shell", "--link", "lan", "--site", str(out), "--quiet", "--", "curl", "-sS", "--fail",
                "--cacert", str(ca.ensure().cert), "-o", str(got), "-w", "%{http_version} %{ssl_verify_result}",
                f"https://s2.test{image['path']}", timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert got.read_bytes() == _served(www, image) and p.stdout.split() == ["2", "0"]


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


def test_record_keeps_every_object_of_origins_that_speak_different_versions(tmp_path: Path) -> None:
    """Inside a testbed: the shop page over three shard origins, s2.test speaking HTTP/1.1 only and
    s3.test HTTP/1.1 and HTTP/2, server.test (s1) all three. `satbench record` keeps every object,
    and the manifest says what each origin spoke: with the default (auto), what each negotiated;
    with --protocol h3, HTTP/3 from the first request wherever it was offered (s1 alone)."""
    from satbench import Testbed, TestbedSpec, load_profile
    from satbench.endpoints.options import ServerOptions
    from satbench.endpoints.satbench_server import SatbenchServer

    www = tmp_path / "www"
    pages.generate(www, [PAGE])
    pages.shard(www, PAGE, 3)
    url = pages.url_of(PAGE, shards=3)
    only = {1: ServerOptions(), 2: ServerOptions(h2=False, h3=False), 3: ServerOptions(h3=False)}
    with Testbed(TestbedSpec(link=load_profile("lan"), servers=3, seed=1)) as tb:
        servers = [SatbenchServer(www, tmp_path / "logs" / h.role, only[j], host=h)
                   for j, h in enumerate(tb.servers, 1)]
        try:
            got = {}
            for mode in ("auto", "h3"):
                out = tmp_path / f"site-{mode}"
                p = tb.client.run([sys.executable, "-m", "satbench", "record", url, "--out", str(out),
                                   "--protocol", mode], capture_output=True, text=True, timeout=300)
                assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
                site = json.loads((out / "site.json").read_text())
                assert site["failed"] == 0, site["failed"]
                mine = [e for e in site["entries"] if e["path"].startswith(f"/{PAGE}/")]
                assert len(mine) > 100 and all(e["status"] == 200 for e in mine), len(mine)
                for e in mine:  # every object, byte-exact
                    assert hashlib.sha256(_served(www, e)).hexdigest() == e["body"], e["url"]
                versions: dict[str, set[str]] = {}
                for e in mine:
                    versions.setdefault(e["host"], set()).add(e["version"])
                got[mode] = versions
                assert "protocols:" in p.stdout
        finally:
            for s in servers:
                s.stop()
    for mode, v in got.items():
        assert v["s2.test"] == {"h1"} and v["s3.test"] == {"h2"}, (mode, v)
    # server.test and s1.test (one server, offering HTTP/3): HTTP/2 first, then HTTP/3 once Alt-Svc
    # was seen (auto); HTTP/3 throughout (h3).
    for host in ("server.test", "s1.test"):
        assert got["auto"][host] <= {"h2", "h3"} and got["h3"][host] == {"h3"}, (host, got)
