"""Hostile recordings, through the command line as a user meets them: a HAR
whose URLs climb out with ``..``, name absolute paths, or carry hosts that
are no host names; a gzip bomb as the archive, as a body, and as a size a
HAR claims for a body it left out; symlinks planted in ``--out`` and in a
folder served as a page; a hand-made ``site.json`` naming ``../..``. Nothing
is written outside ``--out`` (the whole temporary tree and a file a symlink
points at are compared before and after), and what is refused exits with
code 2 and one line naming the file and the entry."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
from pathlib import Path

import pytest

from satbench.endpoints import safeio, sites
from satbench.errors import InputError

from ..helpers import run_cli


def har(entries: list[dict]) -> dict:
    return {"log": {"version": "1.2", "creator": {"name": "test", "version": "1"}, "entries": entries}}


def entry(url: str, text: str | None = "<html></html>", mime: str = "text/html", size: int = 0) -> dict:
    content: dict = {"mimeType": mime, "size": size or len(text or "")}
    if text is not None:
        content["text"] = text
    return {"request": {"method": "GET", "url": url, "headers": []},
            "response": {"status": 200, "headers": [{"name": "Content-Type", "value": mime}], "content": content}}


def tree(root: Path, skip: Path) -> dict[str, str]:
    """Every file under ``root`` but ``skip`` (and what is under it), with a hash of its content."""
    out = {}
    for top, dirs, names in os.walk(root):
        if Path(top) == skip or skip in Path(top).parents:
            continue
        for n in names + [d for d in dirs if Path(top, d).is_symlink()]:
            p = Path(top, n)
            out[str(p.relative_to(root))] = ("link " + os.readlink(p) if p.is_symlink() else
                                             hashlib.sha256(p.read_bytes()).hexdigest())
    return out


def bomb(mib: int) -> bytes:
    """``mib`` MiB of zeros as a gzip file of some KB: one member of 1 MiB, ``mib`` times (RFC 1952
    allows members one after another)."""
    return gzip.compress(bytes(1 << 20), 9) * mib


def import_cli(src: Path, out: Path) -> tuple[int, str]:
    p = run_cli("pages", "import", str(src), "--out", str(out))
    return p.returncode, p.stderr


def test_urls_that_climb_or_name_absolute_paths_import_into_out_and_nowhere_else(tmp_path: Path) -> None:
    src = tmp_path / "climb.har"
    src.write_text(json.dumps(har([
        entry("https://www.site.test/"),
        entry("https://www.site.test/../../../../etc/passwd", "root", "text/plain"),
        entry("https://www.site.test/%2e%2e/%2e%2e/x", "x", "text/plain"),
        entry("https://www.site.test//etc/shadow", "y", "text/plain"),
        entry("https://www.site.test/C:\\Windows\\con", "z", "text/plain"),
    ])))
    before = tree(tmp_path, tmp_path / "out")
    code, err = import_cli(src, tmp_path / "out")
    assert code == 0, err
    assert tree(tmp_path, tmp_path / "out") == before
    written = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*"))
    assert written[0] == "bodies" and written[-1] == "site.json" and len(written) == 2 + 5
    assert all(len(Path(w).name) == 64 for w in written[1:-1])  # bodies are named by their hash alone
    doc = json.loads((tmp_path / "out" / "site.json").read_text())
    assert doc["hosts"] == ["www.site.test"]
    # Laid out for replay: one manifest per host, inside the folder given.
    rep = sites.materialize(tmp_path / "out", tmp_path / "layout")
    assert all(tmp_path / "layout" in m.parents for m in rep.manifests)


@pytest.mark.parametrize("url, host", [
    ("https://../x", ".."),
    ("https://%2f..%2fetc/x", "%2f..%2fetc"),
    ("https://a b.test/", "a b.test"),
    ("https://203.0.113.5/x", "203.0.113.5"),
    ("https://" + "a" * 300 + ".test/", "a" * 200),
])
def test_a_host_that_is_no_host_name_is_refused_in_one_line(tmp_path: Path, url: str, host: str) -> None:
    src = tmp_path / "host.har"
    src.write_text(json.dumps(har([entry("https://www.site.test/"), entry(url)])))
    code, err = import_cli(src, tmp_path / "out")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{src}: entry 1: request.url" in err and "no host name" in err and repr(host)[:-1] in err
    assert not (tmp_path / "out" / "site.json").exists()


def test_gzip_bombs_are_refused_without_being_inflated(tmp_path: Path) -> None:
    # The archive: 2 GiB + 1 MiB of zeros in about 2 MB.
    src = tmp_path / "bomb.har.gz"
    src.write_bytes(bomb((safeio.MAX_ARCHIVE_BYTES >> 20) + 1))
    code, err = import_cli(src, tmp_path / "out1")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "once decompressed; refused" in err, err
    # A body of a Web Page Replay archive, gzip on the wire: 512 MiB + 1 in about 0.5 MB.
    body = bomb((safeio.MAX_BODY_BYTES >> 20) + 1)
    response = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Encoding: gzip\r\n\r\n" + body
    wpr = {"Requests": {"www.site.test": {"https://www.site.test/": [{
        "SerializedRequest": base64.b64encode(b"GET / HTTP/1.1\r\nHost: www.site.test\r\n\r\n").decode(),
        "SerializedResponse": base64.b64encode(response).decode()}]}}}
    src = tmp_path / "bomb.wprgo"
    src.write_bytes(gzip.compress(json.dumps(wpr).encode()))
    code, err = import_cli(src, tmp_path / "out2")
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "entry 0" in err and "over 512 MiB once decoded (gzip); refused" in err
    # A body a HAR left out, claimed at a terabyte.
    src = tmp_path / "claim.har"
    src.write_text(json.dumps(har([entry("https://www.site.test/", None, size=10**12)])))
    code, err = import_cli(src, tmp_path / "out3")
    assert code == 2 and "entry 0: response.content.size 1000000000000 is over 512 MiB; refused" in err, err
    for n in (1, 2, 3):
        assert not list((tmp_path / f"out{n}").glob("bodies/*"))


def test_within_the_caps_a_multi_member_gzip_body_decodes_whole() -> None:
    assert safeio.inflate(bomb(3), "gzip", 3 << 20) == bytes(3 << 20)
    with pytest.raises(safeio.TooLarge):
        safeio.inflate(bomb(3), "gzip", (3 << 20) - 1)
    with pytest.raises(ValueError, match="truncated"):
        safeio.inflate(gzip.compress(b"x" * 1000)[:-12], "gzip", 1 << 20)


def test_symlinks_planted_in_out_are_replaced_or_refused_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    src = tmp_path / "page.har"
    src.write_text(json.dumps(har([entry("https://www.site.test/", "<html>hello</html>")])))
    out = tmp_path / "out"
    (out / "bodies").mkdir(parents=True)
    sha = hashlib.sha256(b"<html>hello</html>").hexdigest()
    (out / "bodies" / sha).symlink_to(victim)
    (out / "site.json").symlink_to(victim)
    code, err = import_cli(src, out)
    assert code == 0, err
    assert victim.read_text() == "untouched"
    assert not (out / "site.json").is_symlink() and not (out / "bodies" / sha).is_symlink()
    assert (out / "bodies" / sha).read_bytes() == b"<html>hello</html>"
    # A symlink as the bodies' folder: refused, nothing written through it.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out2 = tmp_path / "out2"
    out2.mkdir()
    (out2 / "bodies").symlink_to(elsewhere)
    code, err = import_cli(src, out2)
    assert code == 2 and "is a symlink" in err and len(err.strip().splitlines()) == 1, err
    assert list(elsewhere.iterdir()) == []


def test_a_folder_served_as_a_page_refuses_its_symlinks(tmp_path: Path) -> None:
    page = tmp_path / "page"
    page.mkdir()
    (page / "index.html").write_text("<html></html>")
    (page / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(InputError, match="passwd: a symlink"):
        sites.import_folder(page, tmp_path / "out")


@pytest.mark.parametrize("field, value, words", [
    ("hosts", ["../../etc"], "hosts[0] is no host name"),
    ("hosts", ["/etc/cron.d/x"], "hosts[0] is no host name"),
    ("body", "../../../etc/passwd", "entries[0].body is not a SHA-256"),
])
def test_a_hand_made_site_manifest_cannot_name_paths(tmp_path: Path, field: str, value: object, words: str
                                                     ) -> None:
    src = tmp_path / "page.har"
    src.write_text(json.dumps(har([entry("https://www.site.test/")])))
    site = tmp_path / "site"
    assert import_cli(src, site)[0] == 0
    doc = json.loads((site / "site.json").read_text())
    if field == "hosts":
        doc["hosts"] = value
        doc["entries"][0]["host"] = value[0]  # type: ignore[index]
    else:
        doc["entries"][0]["body"] = value
    (site / "site.json").write_text(json.dumps(doc))
    before = tree(tmp_path, tmp_path / "layout")
    with pytest.raises(InputError, match=words.replace("[", r"\[").replace("]", r"\]")):
        sites.materialize(site, tmp_path / "layout")
    assert tree(tmp_path, tmp_path / "layout") == before and not (tmp_path / "layout").exists()


def test_the_importer_survives_its_fuzzer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bounded run of tests/fuzz_import.py (``python -m tests.fuzz_import SECONDS`` is the long
    one): every mutant is imported or refused in one line, and nothing lands outside its folder."""
    from .. import fuzz_import

    monkeypatch.setenv("SATBENCH_FUZZ_OUT", str(tmp_path))
    tried, failures = fuzz_import.run(float(os.environ.get("SATBENCH_IMPORT_FUZZ_SECONDS", "3")), seed=1)
    assert tried > 100 and failures == [], failures[:5]


def test_a_gzip_stream_of_many_empty_members_is_refused_at_once() -> None:
    """Members that inflate to nothing never reach a size cap: their number is capped, and each costs
    at most a chunk's copy (a 4 MB stream of 200,000 empty members took hours before)."""
    import time

    data = gzip.compress(b"") * 200_000
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="over 10000 gzip members"):
        safeio.inflate(data, "gzip", 1 << 20)
    assert time.monotonic() - t0 < 10
    assert safeio.inflate(gzip.compress(b"ab") + bytes(100), "gzip", 10) == b"ab"  # zero padding after the end
    with pytest.raises(ValueError, match="after the compressed data"):
        safeio.inflate(gzip.compress(b"ab") + b"\0junk", "gzip", 10)
