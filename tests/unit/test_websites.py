"""Sites shaped like the web's real pages (``web:PRESET``): each preset's requests, bytes per content
type and third-party hosts as its published medians say, the same site for the same seed, and the
page importable and laid out for replay as any recording."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from satbench.endpoints import sites, websites


@pytest.mark.parametrize("name", list(websites.PRESETS))
def test_a_preset_has_its_medians_and_imports_as_a_recording(name: str, tmp_path: Path) -> None:
    p = websites.PRESETS[name]
    har = websites.generate(name, seed=3)
    assert json.dumps(har) == json.dumps(websites.generate(name, seed=3))  # the same site, byte for byte
    assert json.dumps(har) != json.dumps(websites.generate(name, seed=4))
    entries = har["log"]["entries"]
    objects = entries[1:]  # after the typed domain's redirect
    assert entries[0]["response"]["status"] == 301 and entries[0]["request"]["url"].startswith("http://")
    # The page's requests: the median's, plus a beacon for each third party that drew none.
    assert p.requests <= len(objects) <= p.requests + p.third_parties
    total = sum(e["response"]["content"]["size"] for e in objects)
    want = max(p.kb, sum(p.kbs.values()) + 16) * 1024
    assert abs(total - want) <= 0.02 * want + 200 * p.third_parties, (total, want)
    by_type = Counter(urlsplit(e["request"]["url"]).path.split("/")[1] for e in objects)
    for kind in ("css", "js", "img", "font"):
        assert by_type[kind] == p.counts[kind], (kind, by_type)
        got = sum(e["response"]["content"]["size"] for e in objects
                  if urlsplit(e["request"]["url"]).path.startswith(f"/{kind}/"))
        assert abs(got - p.kbs[kind] * 1024) <= 64 * p.counts[kind], (kind, got)
    hosts = {urlsplit(e["request"]["url"]).hostname for e in entries}
    assert sum(h.endswith(".test") and ".party" in h for h in hosts) == p.third_parties
    src = tmp_path / "w.har"
    src.write_text(json.dumps(har))
    site = sites.import_archive(src, tmp_path / "site")
    assert site.page.startswith("http://") and site.failed == []
    groups = sites.server_groups(sites.load_site(tmp_path / "site"))
    assert len(groups) == p.third_parties + 2  # the page's address, the static one, one per third party
