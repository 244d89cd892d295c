"""A page recorded here: Chromium, run by `satbench record` inside a testbed
(`satbench shell`), loads a page spread over four shard origins; its HAR is
imported as a site whose every object is byte-exact the file its origin
served, each under the host it came from."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from satbench.endpoints import pages

from ..helpers import run_cli


def test_a_multi_origin_page_is_recorded_and_imported_byte_exact(tmp_path: Path) -> None:
    www, out = tmp_path / "www", tmp_path / "site"
    pages.generate(www, ["uniform-500k"])
    url = pages.url_of("uniform-500k", shards=4)
    p = run_cli("shell", "--link", "lan", "--serve", str(www), "--shards", "4", "--quiet", "--",
                sys.executable, "-m", "satbench", "record", url, "--out", str(out), timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
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
