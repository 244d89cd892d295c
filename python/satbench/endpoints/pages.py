"""Test pages: the page structures of the literature as real files.

``generate(out)`` writes one folder per page, each with ``index.html``, its
objects and a ``manifest.json`` (objects, sizes, order, dependency depth),
plus ``pages.json`` listing every page:

- ``{single,uniform,triangular}-{100k,500k,1m,2m}``: study A's pages. There is
  one JPEG, or eight equal ones, or eight of increasing-then-decreasing size,
  in exactly the sizes of ../shared/REFERENCE.md (1 KB = 1000 bytes). The page
  has no text, so First Contentful Paint is the first image painted. Every
  image is a block laid out inside a 1200x600 box (a 1280x720 viewport shows
  it whole) with an area proportional to its bytes, never upscaled, so the
  largest image is the Largest Contentful Paint element.
- ``single-10k``: an HTML and one 10 KB JPEG, the whole page within a
  server's first window: where a load is its round trips and nothing else
  (the physical bound's tightness is checked on it).
- ``blank``: a minimal HTML page (study E).
- ``flags``: 200 small flag icons (PNG) in a grid (study C).
- ``images640``: 640 small JPEG tiles of exactly 1000 bytes (study C).
- ``shop``: a shopping-like page of about 171 objects and 2.5 MB (study B):
  HTML, style sheets (one imports another), scripts (one loads another, which
  adds images), a web font, a hero image, product images and icons.
- ``realtime``: the real-time web client (``rt.js``): its URL's query names a
  mechanism and a scenario, which it runs against the server's ``/rt/``
  endpoints (see :mod:`satbench.realtime`).
- ``visual``: content at known times, whatever the network: the top half of
  the window filled (with a heading) 400 ms after the navigation started,
  the bottom half at 1200 ms (:data:`VISUAL_STEPS_MS`); the page holds the
  load until both are painted and leaves their paint times. Its visual
  metrics are known in advance: first visual change 400 ms, Speed Index 800
  ms, visually complete 1200 ms.
- ``script``: a page whose load is a fixed amount of script work (a hash
  over :data:`SCRIPT_ROUNDS` rounds, in the head, before anything is shown):
  what CPU throttling acts on.

Every JPEG is a real, decodable image of the exact byte size. The encoder's
quality is searched so that the image falls just short of the size, and a JPEG
comment segment (``COM``) makes up the difference. The manifest records the
quality and the padding. Content is deterministic for a given seed.

``bulk_file(out, size)`` makes incompressible bulk files (1, 100, 250, 500 MB)
on demand. They are never committed.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import logging
import math
import os
import random
import re
import shutil
import threading
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from fontTools import subset
from PIL import Image, ImageDraw, ImageFile, ImageFilter

from ..errors import InputError

KB = 1000
SIZES_KB = {"10k": 10, "100k": 100, "500k": 500, "1m": 1000, "2m": 2000}
TRIANGULAR_KB = {
    100: [3, 8, 14, 20, 22, 16, 11, 6],
    500: [20, 40, 70, 100, 110, 80, 50, 30],
    1000: [5, 50, 135, 230, 270, 200, 100, 10],
    2000: [10, 100, 270, 450, 540, 400, 200, 20],
}
BOX_W, BOX_H = 1200, 600
VIEWPORT = (1280, 720)
BYTES_PER_PIXEL = 0.4  # intrinsic density aimed at (about JPEG quality 90)
BULK_SIZES = {"1M": 1_000_000, "100M": 100_000_000, "250M": 250_000_000, "500M": 500_000_000}
GENERATOR_VERSION = 1


@dataclass
class PageObject:
    path: str
    type: str
    bytes: int
    order: int
    depth: int
    referenced_by: str
    width: int | None = None
    height: int | None = None
    quality: int | None = None
    padding: int | None = None
    encoder: str | None = None
    sha256: str = ""
    #: The CSS pixels the page displays the image at (None: as large as it is).
    display_area: int | None = None


@dataclass
class Manifest:
    page: str
    description: str
    html_bytes: int
    objects: list[PageObject] = field(default_factory=list)
    lcp_candidate: str | None = None
    viewport: tuple[int, int] = VIEWPORT
    seed: int = 0
    generator_version: int = GENERATOR_VERSION

    @property
    def object_bytes(self) -> int:
        return sum(o.bytes for o in self.objects)

    @property
    def total_bytes(self) -> int:
        return self.html_bytes + self.object_bytes

    def largest(self) -> tuple[list[str], list[str] | None]:
        """The images largest by bytes (the studies' LCP) and largest by
        displayed area (the browsers' LCP); None where areas are not known."""
        imgs = [o for o in self.objects if o.type.startswith("image/")]
        if not imgs:
            return [], None
        most = max(o.bytes for o in imgs)
        by_bytes = [o.path for o in imgs if o.bytes == most]
        if any(o.display_area is None for o in imgs):
            return by_bytes, None
        widest = max(o.display_area or 0 for o in imgs)
        return by_bytes, [o.path for o in imgs if o.display_area == widest]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["object_bytes"] = self.object_bytes
        d["total_bytes"] = self.total_bytes
        d["object_count"] = len(self.objects)
        by_bytes, by_area = self.largest()
        # The studies' LCP is the largest object by bytes; a browser's is the
        # largest element by rendered area. Where they can differ, say so.
        d["largest_by_bytes"], d["largest_by_area"] = by_bytes, by_area
        d["area_and_bytes_agree"] = None if by_area is None else set(by_bytes) == set(by_area)
        return d

    @classmethod
    def load(cls, root: Path, page: str) -> "Manifest":
        """The manifest of a page generated under ``root`` (what :meth:`to_json` wrote)."""
        d = json.loads((root / page / "manifest.json").read_text())
        own, obj = {f.name for f in fields(cls)}, {f.name for f in fields(PageObject)}
        objs = [PageObject(**{k: v for k, v in o.items() if k in obj}) for o in d["objects"]]
        m = cls(**{k: v for k, v in d.items() if k in own and k != "objects"}, objects=objs)
        m.viewport = (int(m.viewport[0]), int(m.viewport[1]))
        return m


# -- JPEG of an exact size ------------------------------------------------------


def _photo(w: int, h: int, seed: int):  # type: ignore[no-untyped-def]
    """A photo-like picture: gradients, shapes and noise, deterministic per seed."""
    rnd = random.Random(seed)
    g1 = Image.linear_gradient("L").resize((w, h))
    g2 = Image.linear_gradient("L").rotate(90 + 180 * (seed % 2)).resize((w, h))
    # Noise from the seeded generator (Image.effect_noise is not reproducible),
    # softened so that quality behaves as on photographs.
    def noise() -> Image.Image:
        return Image.frombytes("L", (w, h), rnd.randbytes(w * h)).filter(ImageFilter.GaussianBlur(0.6))

    n = noise()
    img = Image.merge("RGB", (g1, g2, n) if seed % 3 else (n, g1, g2))
    d = ImageDraw.Draw(img)
    for _ in range(12):
        x, y = rnd.randrange(w), rnd.randrange(h)
        r = rnd.randrange(max(2, min(w, h) // 8), max(3, min(w, h) // 3))
        d.ellipse((x - r, y - r, x + r, y + r), fill=(rnd.randrange(256), rnd.randrange(256), rnd.randrange(256)))
    return Image.blend(img, Image.merge("RGB", [noise()] * 3), 0.25)


# Encoder variants beside quality, tried near the chosen quality to make the
# padding small: (optimise Huffman tables, chroma subsampling, progressive).
_VARIANTS = [(False, 2, False), (True, 2, False), (False, 1, False), (True, 1, False), (False, 0, False),
             (True, 0, False), (True, 2, True)]


def _encode(img, q: int, variant: tuple[bool, int, bool] = _VARIANTS[0]) -> bytes:  # type: ignore[no-untyped-def]
    optimize, subsampling, progressive = variant
    b = io.BytesIO()
    # Pillow sizes the encoder's buffer at one byte per pixel for optimised or
    # progressive output, too small for noisy high-quality pictures; it takes
    # the maximum with ImageFile.MAXBLOCK.
    ImageFile.MAXBLOCK = max(ImageFile.MAXBLOCK, img.size[0] * img.size[1] * 4 + 65536)
    img.save(b, "JPEG", quality=q, optimize=optimize, subsampling=subsampling, progressive=progressive)
    return b.getvalue()


def _pad(jpeg: bytes, n: int, seed: int) -> bytes:
    """Insert COM segments after SOI so that the file is exactly ``n`` bytes."""
    r = n - len(jpeg)
    if r == 0:
        return jpeg
    assert r >= 4 and jpeg[:2] == b"\xff\xd8"
    rnd = random.Random(seed)
    segs = []
    while r > 0:
        take = min(r, 65537)
        if 0 < r - take < 4:  # leave at least a minimal segment for the rest
            take = r - 4
        data = rnd.randbytes(take - 4)
        segs.append(b"\xff\xfe" + (take - 2).to_bytes(2, "big") + data)
        r -= take
    return jpeg[:2] + b"".join(segs) + jpeg[2:]


def jpeg_of_size(n: int, width: int, height: int, seed: int) -> tuple[bytes, int, int, int, int, str]:
    """A decodable JPEG of exactly ``n`` bytes showing a ``width`` x ``height`` picture.

    Returns (data, width, height, quality, padding, encoder variant). If even
    quality 1 is too big the picture is shrunk; if quality 100 is too small
    the rest is padding.
    """
    def fits(size: int) -> bool:  # what is left to pad is 0 or a whole COM segment
        rest = n - size
        return rest == 0 or rest >= 4

    w, h = width, height
    while True:
        img = _photo(w, h, seed)
        lo, hi, q_best = 1, 100, 0
        while lo <= hi:  # largest quality that fits, default encoder
            q = (lo + hi) // 2
            if fits(len(_encode(img, q))):
                q_best, lo = q, q + 1
            else:
                hi = q - 1
        if q_best:
            best: tuple[int, int, tuple[bool, int, bool], bytes] | None = None
            for q in range(max(1, q_best - 2), min(100, q_best + 3) + 1):
                for v in _VARIANTS:
                    data = _encode(img, q, v)
                    if fits(len(data)) and (best is None or n - len(data) < n - len(best[3])):
                        best = (q, len(data), v, data)
            assert best is not None
            q, _, v, data = best
            variant = f"optimize={v[0]},subsampling={v[1]},progressive={v[2]}"
            return _pad(data, n, seed), w, h, q, n - len(data), variant
        w, h = max(8, int(w * 0.8)), max(8, int(h * 0.8))


# -- layout ---------------------------------------------------------------------


def _rows(sizes: list[int], per_row: int) -> list[list[tuple[int, int]]]:
    """Displayed (width, height) per image: rows filling BOX_W, total height
    BOX_H, each image's area proportional to its bytes."""
    total = sum(sizes)
    out = []
    for i in range(0, len(sizes), per_row):
        row = sizes[i:i + per_row]
        h = BOX_H * sum(row) / total
        out.append([(max(1, round(BOX_W * s / sum(row))), max(1, round(h))) for s in row])
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _jpeg_object(d: Path, path: str, n: int, w: int, h: int, seed: int, *, order: int, depth: int = 1,
                 by: str = "index.html") -> PageObject:
    """Write a JPEG of exactly ``n`` bytes to ``d/path`` and describe it."""
    data, iw, ih, q, pad, enc = jpeg_of_size(n, w, h, seed)
    (d / path).write_bytes(data)
    return PageObject(path=path, type="image/jpeg", bytes=len(data), order=order, depth=depth, referenced_by=by,
                      width=iw, height=ih, quality=q, padding=pad, encoder=enc, sha256=_sha(data))


def _write_index(d: Path, m: Manifest, title: str, head: str, body: str) -> Manifest:
    """Write the page's index.html and record its size in the manifest."""
    html = _html(title, head, body)
    (d / "index.html").write_bytes(html)
    m.html_bytes = len(html)
    return m


def _html(title: str, head: str, body: str) -> bytes:
    return (f"<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{title}</title>\n"
            f"{head}</head>\n<body>\n{body}</body>\n</html>\n").encode()


def _study_a_page(out: Path, structure: str, label: str, seed: int) -> Manifest:
    total_kb = SIZES_KB[label]
    if structure == "single":
        sizes = [total_kb * KB]
    elif structure == "uniform":
        sizes = [total_kb * KB // 8] * 8
    else:
        sizes = [kb * KB for kb in TRIANGULAR_KB[total_kb]]
    name = f"{structure}-{label}"
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    rows = _rows(sizes, per_row=1 if structure == "single" else 4)
    shown = [wh for row in rows for wh in row]
    # One scale for the whole page: intrinsic area proportional to bytes too.
    scale = max(1.0, math.sqrt(sum(sizes) / (BOX_W * BOX_H * BYTES_PER_PIXEL)))
    m = Manifest(page=name, description=f"study A, {structure} structure, {total_kb} KB of images", html_bytes=0,
                 seed=seed)
    imgs = []
    for i, (size, (dw, dh)) in enumerate(zip(sizes, shown), 1):
        fn = f"img{i}.jpg"
        m.objects.append(_jpeg_object(d, fn, size, round(dw * scale), round(dh * scale), seed * 1000 + i, order=i))
        m.objects[-1].display_area = dw * dh
        imgs.append(f'<img src="{fn}" width="{dw}" height="{dh}" alt="">')
    body, k = "", 0
    for row in rows:
        body += '<div class="row">' + "".join(imgs[k:k + len(row)]) + "</div>\n"
        k += len(row)
    head = ("<style>html,body{margin:0;padding:0}.row{display:flex}"
            "img{display:block;flex:none}</style>\n")
    m.lcp_candidate = max(m.objects, key=lambda o: o.bytes).path
    return _write_index(d, m, name, head, body)


def realtime_script() -> bytes:
    """The browsers' real-time client (``static/rt.js``)."""
    return (Path(__file__).with_name("static") / "rt.js").read_bytes()


def _realtime(out: Path, seed: int) -> Manifest:
    """The real-time web client: a heading (its first paint) and rt.js, which
    runs the scenario its URL's query names."""
    d = out / "realtime"
    d.mkdir(parents=True, exist_ok=True)
    js = realtime_script()
    (d / "rt.js").write_bytes(js)
    m = Manifest(page="realtime", description="the real-time web client (long polling, SSE, WebSocket)",
                 html_bytes=0, seed=seed)
    m.objects.append(PageObject(path="rt.js", type="text/javascript", bytes=len(js), order=1, depth=1,
                                referenced_by="index.html", sha256=_sha(js)))
    body = '<h1>satbench real-time client: <span id="state">running</span></h1>\n<script src="rt.js"></script>\n'
    return _write_index(d, m, "realtime", "", body)


#: When the ``visual`` page shows its two halves (ms after the navigation started).
VISUAL_STEPS_MS = (400, 1200)


def _visual(out: Path, seed: int) -> Manifest:
    """Two halves of the window filled at known times (timers against the navigation's start), the
    load held until both are painted; their paint times (the frames' ``requestAnimationFrame``
    stamps) are the page's result."""
    d = out / "visual"
    d.mkdir(parents=True, exist_ok=True)
    a, b = VISUAL_STEPS_MS
    head = ("<style>html,body{margin:0;height:100%}.half{position:fixed;left:0;width:100%;height:50%;"
            "display:none;margin:0;color:#fff;font:bold 40px sans-serif}#top{top:0;background:#1f5fa8}"
            "#bottom{top:50%;background:#c8401a}</style>\n")
    body = ('<h1 class="half" id="top">top</h1>\n<h1 class="half" id="bottom">bottom</h1>\n<script>\n'
            "window.__satbench_hold = true;\nconst painted = {};\n"
            "function show(id, at) {\n  setTimeout(() => {\n    document.getElementById(id).style.display = 'block';\n"
            "    requestAnimationFrame(t => { painted[id] = t; if (Object.keys(painted).length === 2) {\n"
            "      // released two frames later: the last change is on the screen by then\n"
            "      requestAnimationFrame(() => requestAnimationFrame(() => {\n"
            "        window.__satbench_result = {painted_ms: painted}; window.__satbench_hold = false; })); } });\n"
            "  }, Math.max(0, at - performance.now()));\n}\n"
            f"show('top', {a});\nshow('bottom', {b});\n</script>\n")
    m = Manifest(page="visual", description=f"content at known times: the top half at {a} ms, the bottom at {b} ms",
                 html_bytes=0, seed=seed)
    return _write_index(d, m, "visual", head, body)


#: The ``script`` page's work: rounds of a 32-bit multiply-xorshift hash (about 0.1 s of a core here).
SCRIPT_ROUNDS = 30_000_000


def _script(out: Path, seed: int) -> Manifest:
    """A fixed amount of script work in the head, then a heading: the load is the CPU's."""
    d = out / "script"
    d.mkdir(parents=True, exist_ok=True)
    head = ("<script>\n(() => {\n  let h = " + str(seed) + " >>> 0;\n"
            f"  for (let i = 0; i < {SCRIPT_ROUNDS}; i++) {{ h = Math.imul(h ^ (h >>> 15), 2246822507) + i >>> 0; }}\n"
            "  window.__satbench_hash = h;\n})();\n</script>\n")
    m = Manifest(page="script", description=f"{SCRIPT_ROUNDS:,} rounds of a hash in a script, then a heading",
                 html_bytes=0, seed=seed)
    return _write_index(d, m, "script", head, "<h1>done</h1>\n")


def _blank(out: Path, seed: int) -> Manifest:
    d = out / "blank"
    d.mkdir(parents=True, exist_ok=True)
    html = _html("blank", "", "")
    (d / "index.html").write_bytes(html)
    return Manifest(page="blank", description="a minimal HTML page with no objects", html_bytes=len(html), seed=seed)


def _flag_png(seed: int) -> bytes:
    rnd = random.Random(seed)
    w, h = 48, 32
    img = Image.new("RGB", (w, h))
    dr = ImageDraw.Draw(img)
    colours = [(rnd.randrange(256), rnd.randrange(256), rnd.randrange(256)) for _ in range(3)]
    if rnd.random() < 0.5:
        for i, c in enumerate(colours):
            dr.rectangle((0, i * h // 3, w, (i + 1) * h // 3), fill=c)
    else:
        for i, c in enumerate(colours):
            dr.rectangle((i * w // 3, 0, (i + 1) * w // 3, h), fill=c)
    if rnd.random() < 0.5:
        dr.ellipse((w // 2 - 7, h // 2 - 7, w // 2 + 7, h // 2 + 7), fill=colours[rnd.randrange(3)][::-1])
    for _ in range(rnd.randrange(0, 40)):  # emblem detail, so sizes vary like real icons
        dr.point((rnd.randrange(w), rnd.randrange(h)), fill=colours[0][::-1])
    b = io.BytesIO()
    img.save(b, "PNG")
    return b.getvalue()


def _flags(out: Path, seed: int, count: int = 200) -> Manifest:
    d = out / "flags"
    (d / "flags").mkdir(parents=True, exist_ok=True)
    m = Manifest(page="flags", description=f"{count} small flag icons (PNG)", html_bytes=0, seed=seed)
    cells = []
    for i in range(1, count + 1):
        data = _flag_png(seed * 7919 + i)
        fn = f"flags/f{i:03d}.png"
        (d / fn).write_bytes(data)
        m.objects.append(PageObject(path=fn, type="image/png", bytes=len(data), order=i, depth=1,
                                    referenced_by="index.html", width=48, height=32, sha256=_sha(data)))
        cells.append(f'<img src="{fn}" width="48" height="32" alt="flag {i}">')
    head = "<style>body{margin:8px}img{margin:2px;vertical-align:top}</style>\n"
    return _write_index(d, m, "flags", head, "<h1>Flags of the world</h1>\n<div>" + "".join(cells) + "</div>\n")


def _images640(out: Path, seed: int) -> Manifest:
    d = out / "images640"
    (d / "t").mkdir(parents=True, exist_ok=True)
    m = Manifest(page="images640", description="640 small JPEG tiles of 1000 bytes each", html_bytes=0, seed=seed)
    tiles = []
    for i in range(1, 641):
        fn = f"t/{i:03d}.jpg"
        m.objects.append(_jpeg_object(d, fn, 1000, 40, 30, seed * 104729 + i, order=i))
        tiles.append(f'<img src="{fn}" width="40" height="30" alt="">')
    head = "<style>body{margin:0;line-height:0}img{display:inline-block}</style>\n"
    return _write_index(d, m, "640 images", head, "<div>" + "".join(tiles) + "</div>\n")


#: The system fonts the shop page's web font is cut from, the first present.
FONTS = ("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf")


def _font_bytes() -> bytes | None:
    for p in FONTS:
        if Path(p).exists():
            data = Path(p).read_bytes()
            try:  # keep the page realistic: a Latin subset, as sites serve
                logging.getLogger("fontTools.subset").setLevel(logging.ERROR)
                opts = subset.Options()
                font = subset.load_font(p, opts)
                sub = subset.Subsetter(opts)
                sub.populate(text="".join(chr(c) for c in range(32, 127)))
                sub.subset(font)
                b = io.BytesIO()
                font.save(b)
                return b.getvalue()
            except ImportError:
                return data
    return None


def _shop(out: Path, seed: int) -> Manifest:
    """About 171 objects and 2.5 MB, with a realistic dependency depth:
    html -> css -> @import css -> font / background images;
    html -> js -> dynamically added js -> images it inserts."""
    rnd = random.Random(seed)
    d = out / "shop"
    for sub in ("css", "js", "img", "fonts"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    m = Manifest(page="shop", description="shopping-like page: HTML, CSS, JS, a font and images", html_bytes=0,
                 seed=seed)
    order = [0]

    def add(path: str, data: bytes, typ: str, depth: int, by: str, **kw: Any) -> None:
        (d / path).write_bytes(data)
        order[0] += 1
        m.objects.append(PageObject(path=path, type=typ, bytes=len(data), order=order[0], depth=depth,
                                    referenced_by=by, sha256=_sha(data), **kw))

    def jpeg(path: str, n: int, w: int, h: int, depth: int, by: str) -> None:
        order[0] += 1
        m.objects.append(_jpeg_object(d, path, n, w, h, rnd.randrange(1 << 30), order=order[0], depth=depth, by=by))

    def filler(kind: str, n: int) -> str:
        words = ["product", "price", "cart", "offer", "review", "shipping", "delivery", "size", "colour"]
        lines: list[str] = []
        while sum(len(x) + 1 for x in lines) < n:
            w = rnd.choice(words)
            if kind == "css":
                lines.append(f".{w}-{rnd.randrange(10**6)}{{margin:{rnd.randrange(20)}px;color:#{rnd.randrange(1<<24):06x}}}")
            else:
                lines.append(f"function {w}{rnd.randrange(10**6)}(a)"
                             f"{{return a*{rnd.randrange(1000)}+{rnd.randrange(99)};}}")
        return "\n".join(lines)[:n]

    font = _font_bytes()
    base_css = ("@font-face{font-family:ShopSans;src:url(../fonts/shop.ttf) format('truetype')}\n"
                "body{font-family:ShopSans,sans-serif;margin:0}\n.hero{background:url(../img/pattern.jpg)}\n"
                "main{display:flex;flex-wrap:wrap;gap:8px;padding:8px}\n.product{width:220px}\n"
                ".product img{display:block}\n.product p{margin:4px 0;font-size:14px}\nnav{padding:4px 8px}\n"
                "footer{font-size:10px;color:#666;padding:8px}\n")
    add("css/main.css", ("@import url(theme.css);\n" + filler("css", 18000)).encode(), "text/css", 1, "index.html")
    add("css/theme.css", (base_css + filler("css", 9000)).encode(), "text/css", 2, "css/main.css")
    if font:
        add("fonts/shop.ttf", font, "font/ttf", 3, "css/theme.css")
    jpeg("img/pattern.jpg", 24 * KB, 200, 200, 3, "css/theme.css")
    for i in range(1, 3):
        add(f"css/extra{i}.css", filler("css", 6000 + 2000 * i).encode(), "text/css", 1, "index.html")
    add("js/app.js", (filler("js", 40000) + "\nvar s=document.createElement('script');s.src='js/recs.js';"
                      "document.head.appendChild(s);\n").encode(), "application/javascript", 1, "index.html")
    recs = [f"img/rec{i}.jpg" for i in range(1, 9)]
    recs_js = ("var box=document.getElementById('recs');\n" +
               "".join(f"var i{k}=new Image();i{k}.src='{p}';box.appendChild(i{k});\n" for k, p in enumerate(recs)))
    add("js/recs.js", (filler("js", 12000) + "\n" + recs_js).encode(), "application/javascript", 2, "js/app.js")
    for p in recs:
        jpeg(p, rnd.randrange(8, 16) * KB, 160, 160, 3, "js/recs.js")
    for i in range(1, 11):
        add(f"js/lib{i}.js", filler("js", rnd.randrange(8000, 30000)).encode(), "application/javascript", 1,
            "index.html")
    jpeg("img/hero.jpg", 180 * KB, 1200, 400, 1, "index.html")
    products = []
    for i in range(1, 121):
        p = f"img/p{i:03d}.jpg"
        jpeg(p, rnd.randrange(9, 22) * KB, 220, 220, 1, "index.html")
        products.append(p)
    icons = []
    for i in range(1, 26):
        data = _flag_png(seed * 31 + i)
        p = f"img/icon{i:02d}.png"
        add(p, data, "image/png", 1, "index.html", width=48, height=32)
        icons.append(p)
    # Top the images up to about 2.5 MB in total.
    rest = 2_500_000 - sum(o.bytes for o in m.objects) - 60_000
    banners = max(1, min(4, rest // (60 * KB)))
    for i in range(1, banners + 1):
        n = max(20 * KB, rest // banners)
        k = max(1.0, math.sqrt(n / (600 * 200 * BYTES_PER_PIXEL)))
        jpeg(f"img/banner{i}.jpg", n, round(600 * k), round(200 * k), 1, "index.html")

    head = "".join(f'<link rel="stylesheet" href="{o.path}">\n' for o in m.objects
                   if o.type == "text/css" and o.depth == 1)
    head += "".join(f'<script src="{o.path}" defer></script>\n' for o in m.objects
                    if o.type == "application/javascript" and o.depth == 1)
    body = '<header class="hero"><img src="img/hero.jpg" width="1200" height="400" alt="Offers"></header>\n'
    body += "<nav>" + "".join(f'<img src="{p}" width="48" height="32" alt="">' for p in icons) + "</nav>\n<main>\n"
    for p in products:
        body += (f'<div class="product"><img src="{p}" width="220" height="220" alt="">'
                 f"<p>Product {p[5:8]} - {rnd.randrange(5, 500)}.{rnd.randrange(100):02d} EUR</p></div>\n")
    body += "".join(f'<img src="img/banner{i}.jpg" width="600" height="200" alt="">\n'
                    for i in range(1, banners + 1))
    body += '</main>\n<aside id="recs"></aside>\n'
    body += "<footer>" + filler("css", 8000).replace("{", " ").replace("}", " ") + "</footer>\n"
    return _write_index(d, m, "Shop", head, body)


# -- entry points ---------------------------------------------------------------

STUDY_A = [f"{s}-{label}" for s in ("single", "uniform", "triangular") for label in ("100k", "500k", "1m", "2m")]
#: An HTML and one 10 KB image: the whole page fits in a server's first window (the bound's tightness).
FIRST_WINDOW = "single-10k"
ALL_PAGES = [*STUDY_A, FIRST_WINDOW, "blank", "flags", "images640", "shop", "realtime", "visual", "script"]


def generate(out: Path, pages: list[str] | None = None, *, seed: int = 1) -> list[Manifest]:
    """Write the pages named (default: all) under ``out``; return their manifests."""
    names = pages or ALL_PAGES
    for n in names:
        if n not in ALL_PAGES:
            raise InputError(f"--only {n}: unknown page (available: {', '.join(ALL_PAGES)})")
    out.mkdir(parents=True, exist_ok=True)
    manifests = []
    for n in names:
        if n in STUDY_A or n == FIRST_WINDOW:
            structure, label = n.split("-")
            m = _study_a_page(out, structure, label, seed)
        elif n == "blank":
            m = _blank(out, seed)
        elif n == "flags":
            m = _flags(out, seed)
        elif n == "images640":
            m = _images640(out, seed)
        elif n == "realtime":
            m = _realtime(out, seed)
        elif n == "visual":
            m = _visual(out, seed)
        elif n == "script":
            m = _script(out, seed)
        else:
            m = _shop(out, seed)
        (out / n / "manifest.json").write_text(json.dumps(m.to_json(), indent=1) + "\n")
        manifests.append(m)
    _add_to_index(out, {m.page: {"description": m.description, "objects": len(m.objects),
                                 "total_bytes": m.total_bytes} for m in manifests})
    return manifests


def _add_to_index(out: Path, entries: dict[str, dict[str, Any]]) -> None:
    """List pages in ``out/pages.json`` (kept sorted; others already there stay)."""
    index_path = out / "pages.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {}
    index.update(entries)
    index_path.write_text(json.dumps(dict(sorted(index.items())), indent=1) + "\n")


#: Where generated pages are kept between runs (``SATBENCH_PAGE_CACHE``; ``off`` for none).
PAGE_CACHE_ENV = "SATBENCH_PAGE_CACHE"


def page_cache() -> Path | None:
    """The folder of generated pages kept between runs: ``$SATBENCH_PAGE_CACHE``, or
    target/page-cache in the checkout; None if set to ``off``."""
    env = os.environ.get(PAGE_CACHE_ENV)
    if env == "off":
        return None
    if env:
        return Path(env)
    from ..prereq import REPO  # noqa: PLC0415 - the checkout's root

    return REPO / "target" / "page-cache"


#: This generator's source as imported (a file edited during a run does not change what it makes).
_SOURCE = Path(__file__).read_bytes()


@functools.cache
def _generator_hash() -> bytes:
    """The source, the static files, the image and font libraries' versions and the system font."""
    import fontTools  # noqa: PLC0415
    import PIL  # noqa: PLC0415

    h = hashlib.sha256(_SOURCE)
    for f in sorted(Path(__file__).with_name("static").iterdir()):
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    font = next((Path(p) for p in FONTS if Path(p).exists()), None)
    h.update(f"\0{PIL.__version__}\0{fontTools.version}\0{font}\0".encode())
    h.update(font.read_bytes() if font else b"no font")
    return h.digest()


def generator_key(page: str, seed: int = 1) -> str:
    """What a generated page's bytes depend on: this generator (:func:`_generator_hash`), the page
    and the seed (16 hex digits)."""
    return hashlib.sha256(_generator_hash() + f"\0{page}\0{seed}".encode()).hexdigest()[:16]


def _generate_cached(root: Path, page: str, seed: int = 1) -> None:
    """Generate ``page`` under ``root`` as :func:`generate` does, from the page cache when it
    has this generator's version of it (copied: a run may add files to its own copy); a
    version made now is kept there for the next run, and older versions of the page go."""
    cache = page_cache()
    entry = None if cache is None else cache / f"{page}-{generator_key(page, seed)}"
    try:
        if entry is not None and not (entry / "manifest.json").exists():
            assert cache is not None
            cache.mkdir(parents=True, exist_ok=True)
            tmp = cache / f".new-{page}-{os.getpid()}-{threading.get_ident()}"
            try:
                generate(tmp, [page], seed=seed)
                try:
                    (tmp / page).rename(entry)  # atomic: a run beside this one sees all of it or none
                except OSError:
                    pass  # another run made it first
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            for old in cache.iterdir():
                if re.fullmatch(re.escape(page) + r"-[0-9a-f]{16}", old.name) and old != entry:
                    shutil.rmtree(old, ignore_errors=True)
        if entry is not None:
            shutil.copytree(entry, root / page, dirs_exist_ok=True)
            m = json.loads((entry / "manifest.json").read_text())
    except OSError:
        # A cache that cannot be written, or an entry another version's run removed while this
        # one copied it: generate in place.
        entry = None
    if entry is None:
        generate(root, [page], seed=seed)
        return
    _add_to_index(root, {page: {"description": m["description"], "objects": len(m["objects"]),
                                "total_bytes": m["total_bytes"]}})


def parse_size(text: str) -> int:
    """'100M' -> 100_000_000 (K, M, G are powers of 1000)."""
    mt = re.fullmatch(r"(\d+)([KMG]?)B?", text.strip().upper())
    if not mt:
        raise InputError(f"--bulk: not a size: {text!r} (examples: 1M, 100M, 250M, 500M)")
    return int(mt.group(1)) * {"": 1, "K": 10**3, "M": 10**6, "G": 10**9}[mt.group(2)]


def bulk_file(out: Path, size: int, *, seed: int = 1) -> Path:
    """An incompressible file of exactly ``size`` bytes at out/bulk/<size>.bin,
    made once and reused while it has the right size."""
    d = out / "bulk"
    d.mkdir(parents=True, exist_ok=True)
    p = d / f"{size}.bin"
    if p.exists() and p.stat().st_size == size:
        return p
    rnd = random.Random(seed ^ size)
    tmp = p.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        left = size
        while left > 0:
            n = min(left, 1 << 20)
            f.write(rnd.randbytes(n))
            left -= n
    tmp.replace(p)
    return p


def upload_size(page: str) -> int | None:
    """The bytes an ``upload:SIZE`` workload POSTs to the server's sink (None for anything else)."""
    return parse_size(page[7:]) if page.startswith("upload:") else None


def url_of(page: str, host: str = "server.test", shards: int = 1, scheme: str = "https") -> str:
    """The URL a trial loads: a page's index (its sharded one with ``shards``
    > 1), a bulk file, or the upload sink; ``scheme`` http for cleartext."""
    if page.startswith("upload:"):
        return f"{scheme}://{host}/upload"
    if page.startswith("bulk:"):
        return f"{scheme}://{host}/bulk/{parse_size(page[5:])}.bin"
    return f"{scheme}://{host}/{page}/" + (SHARDED_INDEX.format(k=shards) if shards > 1 else "")


#: A page's index with its objects spread over ``k`` shard hosts (beside index.html).
SHARDED_INDEX = "index-shards{k}.html"
#: The shard hosts' names: shard j (from 1) is the testbed's server host j.
SHARD_HOST = "s{j}.test"
_REF = re.compile(r'(<(?:img|script|link)\b[^>]*?\s(?:src|href)=")([^"]+)(")', re.IGNORECASE)


def shard_hosts(shards: int) -> tuple[str, ...]:
    """The hosts a page sharded over ``shards`` loads its objects from."""
    return tuple(SHARD_HOST.format(j=j) for j in range(1, shards + 1)) if shards > 1 else ()


def shard(root: Path, page: str, shards: int) -> Path:
    """Write the page's index with its objects spread over ``shards`` hosts
    (``s1.test`` ... ``sK.test``, in turn, in document order), as HTTP/1.1-era
    sites sharded theirs: every ``img``/``script``/``link`` reference of the
    HTML becomes an absolute URL on its shard; what a stylesheet or script
    names stays relative to it (on the same shard). The HTML itself stays on
    ``server.test``. Made once; returns its path."""
    src = root / page / "index.html"
    out = root / page / SHARDED_INDEX.format(k=shards)
    if out.exists():
        return out
    n = 0

    def absolute(m: re.Match[str]) -> str:
        nonlocal n
        ref = m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:|/", ref, re.IGNORECASE):
            return m.group(0)  # absolute already
        host = SHARD_HOST.format(j=n % shards + 1)
        n += 1
        return f"{m.group(1)}https://{host}/{page}/{ref}{m.group(3)}"

    tmp = out.with_suffix(".tmp")
    tmp.write_text(_REF.sub(absolute, src.read_text()))
    tmp.replace(out)
    return out


def object_sizes(root: Path, page: str) -> dict[str, int]:
    """Each object's bytes by its path in the page, from the page's manifest ({} for a bulk file or an upload)."""
    mf = root / page / "manifest.json"
    if page.startswith(("bulk:", "upload:")) or not mf.exists():
        return {}
    return {str(o["path"]): int(o["bytes"]) for o in json.loads(mf.read_text())["objects"]}


def _stale(root: Path, page: str) -> bool:
    """Whether a generated page no longer matches its source (the realtime
    client's script is copied from the package, which may have changed)."""
    if page != "realtime":
        return False
    js = root / page / "rt.js"
    return not js.exists() or js.read_bytes() != realtime_script()


def prepare(root: Path, names: set[str] | list[str]) -> dict[str, int]:
    """Generate the pages and bulk files named (once); return their sizes in
    bytes (an upload's: the bytes it sends; it needs no file). The root is
    made even if nothing needs a file (the server serves it)."""
    root.mkdir(parents=True, exist_ok=True)
    sizes: dict[str, int] = {}
    for page in sorted(set(names)):
        if (up := upload_size(page)) is not None:
            sizes[page] = up
            continue
        if page.startswith("bulk:"):
            size = parse_size(page[5:])
            bulk_file(root, size)
            sizes[page] = size
            continue
        mf = root / page / "manifest.json"
        if not mf.exists() or _stale(root, page):
            _generate_cached(root, page)
        m = json.loads(mf.read_text())
        sizes[page] = int(m["html_bytes"]) + sum(int(o["bytes"]) for o in m["objects"])
    return sizes
