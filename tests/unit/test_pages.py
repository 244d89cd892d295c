"""Test pages: exact sizes, real decodable JPEGs, layouts whose largest image
is the largest painted element, manifests that describe what is on disk."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from PIL import Image

from satbench.endpoints import pages
from satbench.errors import InputError

from ..helpers import run_cli

REFERENCE_KB = {  # ../shared/REFERENCE.md, study A
    ("single", "100k"): [100], ("single", "500k"): [500], ("single", "1m"): [1000], ("single", "2m"): [2000],
    ("uniform", "100k"): [12.5] * 8, ("uniform", "500k"): [62.5] * 8, ("uniform", "1m"): [125] * 8,
    ("uniform", "2m"): [250] * 8,
    ("triangular", "100k"): [3, 8, 14, 20, 22, 16, 11, 6],
    ("triangular", "500k"): [20, 40, 70, 100, 110, 80, 50, 30],
    ("triangular", "1m"): [5, 50, 135, 230, 270, 200, 100, 10],
    ("triangular", "2m"): [10, 100, 270, 450, 540, 400, 200, 20],
}


@pytest.fixture(scope="module")
def generated(generated_pages):  # type: ignore[no-untyped-def]
    return generated_pages


def _imgs(html: str) -> list[tuple[str, int, int]]:
    return [(s, int(w), int(h)) for s, w, h in re.findall(r'<img src="([^"]+)" width="(\d+)" height="(\d+)"', html)]


@pytest.mark.parametrize("structure, label", list(REFERENCE_KB))
def test_study_a_pages_are_exact(generated, structure: str, label: str) -> None:
    out, ms = generated
    name = f"{structure}-{label}"
    m = ms[name]
    d = out / name
    assert [o.bytes for o in m.objects] == [round(kb * 1000) for kb in REFERENCE_KB[structure, label]]
    html = (d / "index.html").read_text()
    shown = _imgs(html)
    assert [s for s, _, _ in shown] == [o.path for o in m.objects]  # page order = manifest order
    for o, (_, dw, dh) in zip(m.objects, shown):
        data = (d / o.path).read_bytes()
        assert len(data) == o.bytes and hashlib.sha256(data).hexdigest() == o.sha256
        with Image.open(d / o.path) as im:
            assert im.format == "JPEG" and im.size == (o.width, o.height)
            im.load()  # decodes fully
        assert o.width >= dw and o.height >= dh  # never upscaled: LCP counts the displayed area
        assert o.padding is not None and o.padding <= 0.05 * o.bytes
    # Displayed areas proportional to bytes, inside a 1200x600 box: the largest
    # image is the largest painted element, and all of it is in a 1280x720 viewport.
    areas = [dw * dh for _, dw, dh in shown]
    per_byte = [a / o.bytes for a, o in zip(areas, m.objects)]
    assert max(per_byte) / min(per_byte) < 1.1, per_byte
    largest = max(range(len(areas)), key=areas.__getitem__)
    assert m.objects[largest].path == m.lcp_candidate == max(m.objects, key=lambda o: o.bytes).path
    assert sum(areas) <= 1200 * 600 * 1.02
    # No text in the body: first contentful paint is the first image.
    body = re.sub(r"<[^>]+>", "", html.split("<body>")[1])
    assert body.strip() == ""


def test_manifest_on_disk_matches(generated) -> None:
    out, ms = generated
    index = json.loads((out / "pages.json").read_text())
    assert set(index) == set(pages.ALL_PAGES)
    for name, m in ms.items():
        disk = json.loads((out / name / "manifest.json").read_text())
        assert disk["total_bytes"] == m.total_bytes == (out / name / "index.html").stat().st_size + sum(
            (out / name / o.path).stat().st_size for o in m.objects)
        assert disk["object_count"] == len(m.objects) == index[name]["objects"]


def test_blank_flags_and_640_images(generated) -> None:
    out, ms = generated
    assert ms["blank"].objects == [] and ms["blank"].html_bytes < 200
    flags = ms["flags"]
    assert len(flags.objects) == 200
    for o in flags.objects[:20]:
        with Image.open(out / "flags" / o.path) as im:
            assert im.format == "PNG" and im.size == (48, 32)
    tiles = ms["images640"]
    assert len(tiles.objects) == 640 and all(o.bytes == 1000 for o in tiles.objects)
    for o in tiles.objects[::64]:
        with Image.open(out / "images640" / o.path) as im:
            im.load()


def test_shop_page_is_realistic(generated) -> None:
    out, ms = generated
    m = ms["shop"]
    assert 165 <= len(m.objects) <= 180, len(m.objects)
    assert 2.3e6 <= m.total_bytes <= 2.7e6, m.total_bytes
    types = {o.type for o in m.objects}
    assert {"text/css", "application/javascript", "image/jpeg", "image/png", "font/ttf"} <= types
    assert max(o.depth for o in m.objects) >= 3
    # Each object is named by the file that references it.
    for o in m.objects:
        parent = (out / "shop" / o.referenced_by).read_text()
        rel = o.path if o.referenced_by == "index.html" or o.referenced_by.startswith("js/") else o.path.split("/")[-1]
        assert rel in parent, (o.path, o.referenced_by)


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    a = pages.generate(tmp_path / "a", ["triangular-100k"], seed=5)[0]
    b = pages.generate(tmp_path / "b", ["triangular-100k"], seed=5)[0]
    c = pages.generate(tmp_path / "c", ["triangular-100k"], seed=6)[0]
    assert [o.sha256 for o in a.objects] == [o.sha256 for o in b.objects]
    assert [o.sha256 for o in a.objects] != [o.sha256 for o in c.objects]


def _tree(d: Path) -> dict[str, bytes]:
    return {str(f.relative_to(d)): f.read_bytes() for f in sorted(d.rglob("*")) if f.is_file()}


def test_the_page_cache_gives_the_generated_bytes_and_keeps_one_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv(pages.PAGE_CACHE_ENV, str(cache))
    # An older generator's copy of the page, and another page's, in the cache.
    (cache / "single-10k-0123456789abcdef").mkdir(parents=True)
    (cache / "single-100k-0123456789abcdef").mkdir()
    first = pages.prepare(tmp_path / "a", ["single-10k"])
    key = pages.generator_key("single-10k")
    assert sorted(p.name for p in cache.iterdir()) == sorted([f"single-10k-{key}", "single-100k-0123456789abcdef"])
    # A second run copies it (generating nothing): the same bytes as generating it afresh, and a
    # copy of its own.
    generate = pages.generate
    with monkeypatch.context() as m:
        m.setattr(pages, "generate", lambda *a, **k: pytest.fail("generated again, not copied"))
        second = pages.prepare(tmp_path / "b", ["single-10k"])
    assert pages.generate is generate
    monkeypatch.setenv(pages.PAGE_CACHE_ENV, "off")
    pages.prepare(tmp_path / "c", ["single-10k"])
    assert first == second
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b") == _tree(tmp_path / "c") != {}
    assert not (tmp_path / "b" / "single-10k").samefile(cache / f"single-10k-{key}")
    assert json.loads((tmp_path / "b" / "pages.json").read_text())["single-10k"]["objects"] == 1
    # What the key depends on: the page and the seed.
    assert len({key, pages.generator_key("single-100k"), pages.generator_key("single-10k", seed=2)}) == 3


def test_bulk_files(tmp_path: Path) -> None:
    assert pages.parse_size("100M") == 100_000_000 and pages.parse_size("1M") == 1_000_000
    with pytest.raises(InputError, match="not a size"):
        pages.parse_size("lots")
    p = pages.bulk_file(tmp_path, 3_000_001)
    assert p.stat().st_size == 3_000_001
    mtime = p.stat().st_mtime_ns
    assert pages.bulk_file(tmp_path, 3_000_001).stat().st_mtime_ns == mtime  # reused
    import zlib

    head = p.read_bytes()[:1 << 20]
    assert len(zlib.compress(head)) > 0.99 * len(head)  # incompressible


def test_pages_cli_rejects_unknown_page(tmp_path: Path) -> None:
    p = run_cli("pages", "--out", str(tmp_path), "--only", "nosuch")
    assert p.returncode == 2 and "nosuch" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_a_manifest_loads_as_it_was_generated(tmp_path: Path) -> None:
    (m,) = pages.generate(tmp_path, ["triangular-100k"])
    assert pages.Manifest.load(tmp_path, "triangular-100k") == m
