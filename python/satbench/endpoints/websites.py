"""Sites shaped like the web's real pages, without anyone's recording
(``page = "web:PRESET"``, or ``web:PRESET:SEED``): a HAR generated from
published distributions and imported as any recording is
(:mod:`.sites`), so that it replays as one: its hosts on their own recorded
addresses, the page starting with the cleartext redirect a typed domain
gets, each origin with a recorded HTTP version.

The figures are the HTTP Archive's Web Almanac 2024 (Page Weight, Third
Parties and HTTP chapters; crawl of June and October 2024), as
docs/manual.md tables them with their sources. What the chapters do not give
is an assumption, named here once:

- the requests per content type and their bytes are the chapter's medians
  (p90 for ``heavy-desktop``); "other" requests (JSON, beacons) make up the
  rest of the page's median requests and median bytes, since medians do not
  add up;
- third-party hosts: the chapter's median number of third parties per page
  (66 for the top thousand sites in ``heavy-desktop``), each on an address of
  its own, each serving a share of the scripts, images and other requests
  (:data:`THIRD_PARTY_SHARE` of them: the chapters give no share);
- first-party objects come from the page's host and a ``static.`` host on a
  second address;
- each origin's version is drawn from the main documents' shares
  (HTTP/1.1 22 %, HTTP/2 71 %, HTTP/3 7 % on desktop; 21, 70, 9 on mobile);
- object sizes are drawn around each type's median size per object
  (lognormal, sigma 0.8), then scaled so that each type sums to its median.

Bodies are what crosses the wire (the chapters' sizes are transfer sizes):
valid PNG, CSS, JavaScript and JSON, padded. The same preset and seed give
the same site, byte for byte.
"""

from __future__ import annotations

import base64
import json
import random
import zlib
from dataclasses import dataclass
from typing import Any

#: The share of scripts, images and other requests served by third parties (an assumption; see above).
THIRD_PARTY_SHARE = 0.4
_PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
                        "AAAABJRU5ErkJggg==")


@dataclass(frozen=True)
class Preset:
    name: str
    meaning: str
    #: Requests and KB per content type: html, css, js, img, font; ``requests`` and ``kb`` in all.
    counts: dict[str, int]
    kbs: dict[str, int]
    requests: int
    kb: int
    third_parties: int
    #: The main documents' HTTP versions (shares of h1, h2, h3).
    versions: tuple[float, float, float]


PRESETS: dict[str, Preset] = {p.name: p for p in (
    Preset("median-desktop", "the median desktop home page (Web Almanac 2024: 74 requests, 2,652 KB)",
           {"html": 2, "css": 8, "js": 24, "img": 18, "font": 4},
           {"html": 18, "css": 78, "js": 613, "img": 1054, "font": 131}, 74, 2652, 22, (0.22, 0.71, 0.07)),
    Preset("median-mobile", "the median mobile home page (Web Almanac 2024: 70 requests, 2,311 KB)",
           {"html": 2, "css": 8, "js": 22, "img": 16, "font": 3},
           {"html": 18, "css": 73, "js": 558, "img": 900, "font": 111}, 70, 2311, 22, (0.21, 0.70, 0.09)),
    Preset("heavy-desktop", "a heavy desktop home page: each type's 90th percentile of requests and (CSS, "
                            "JavaScript, images) bytes, HTML's and fonts' median bytes, which sum to more than "
                            "the page's own 90th percentile (8,375 KB; percentiles do not add up); 182 requests; "
                            "the top thousand sites' median of 66 third parties",
           {"html": 12, "css": 26, "js": 70, "img": 60, "font": 11},
           {"html": 18, "css": 269, "js": 1834, "img": 6526, "font": 131}, 182, 8375, 66, (0.22, 0.71, 0.07)),
)}


def _sizes(rng: random.Random, n: int, total: int) -> list[int]:
    """``n`` sizes around total/n (lognormal), scaled to sum to ``total`` bytes."""
    if n <= 0:
        return []
    raw = [rng.lognormvariate(0.0, 0.8) for _ in range(n)]
    k = total / sum(raw)
    out = [max(64, int(x * k)) for x in raw]
    out[-1] = max(64, out[-1] + total - sum(out))
    return out


def _body(kind: str, size: int, tag: str) -> tuple[str, bytes]:
    """A valid body of ``kind`` padded to ``size`` bytes, and its type."""
    if kind == "img":
        return "image/png", _PNG + bytes(max(0, size - len(_PNG)))
    head = {"css": f"/* {tag} */ h1 {{ margin: 0 }}\n/*", "js": f"/* {tag} */ var x{zlib.crc32(tag.encode())} = 1;\n/*",
            "font": "wOF2", "other": f'{{"id": "{tag}", "pad": "'}[kind]
    tail = {"css": "*/\n", "js": "*/\n", "font": "", "other": '"}'}[kind]
    pad = max(0, size - len(head) - len(tail))
    mime = {"css": "text/css", "js": "text/javascript", "font": "font/woff2", "other": "application/json"}[kind]
    return mime, (head + "x" * pad + tail).encode()


def generate(preset: str, seed: int = 1) -> dict[str, Any]:
    """The HAR of a site shaped as ``preset`` says (see the module)."""
    p = PRESETS[preset]
    rng = random.Random(f"{preset}:{seed}")
    site = f"{preset.replace('-', '')}{seed}"
    www, static = f"www.{site}.test", f"static.{site}.test"
    third = [f"t{k}.party{k}.test" for k in range(p.third_parties)]
    ver = {h: rng.choices(("h1", "h2", "h3"), weights=p.versions)[0] for h in [www, static, *third]}
    ver[www] = "h2"  # (the page itself: the most common)
    other_n = max(0, p.requests - sum(p.counts.values()))
    other_kb = max(16, p.kb - sum(p.kbs.values()))  # (the rest of the median page, or a little)
    kinds = {**p.counts, "other": other_n}
    sizes = {k: _sizes(rng, n, 1024 * (p.kbs.get(k, other_kb) if k != "other" else other_kb))
             for k, n in kinds.items()}
    objs: list[tuple[str, str, int]] = []  # (url, kind, size)
    third_i = 0
    for kind in ("css", "js", "img", "font", "other"):
        for i, size in enumerate(sizes[kind]):
            if kind in ("js", "img", "other") and third and rng.random() < THIRD_PARTY_SHARE:
                host = third[third_i % len(third)]
                third_i += 1
            else:
                host = static if i % 2 else www
            ext = {"css": "css", "js": "js", "img": "png", "font": "woff2", "other": "json"}[kind]
            objs.append((f"https://{host}/{kind}/{i}.{ext}", kind, size))
    # Every third party serves at least one request: a beacon, if none of its own came up.
    served = {o[0].split("/")[2] for o in objs}
    for h in third:
        if h not in served:
            objs.append((f"https://{h}/b.json", "other", 200))
    html_sizes = sizes["html"] or [18 * 1024]
    css = [u for u, k, _ in objs if k == "css"]
    fonts = [u for u, k, _ in objs if k == "font"]
    font_css = "".join(f"@font-face {{ font-family: f{i}; src: url({u}); }} .f{i} {{ font-family: f{i} }}\n"
                       for i, u in enumerate(fonts))
    page = ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>" + p.name + "</title>"
            + "".join(f"<link rel='stylesheet' href='{u}'>" for u in css)
            + f"<style>{font_css}</style>"
            + "".join(f"<script src='{u}'{' async' if n % 3 else ''}></script>"
                      for n, (u, k, _) in enumerate(objs) if k == "js")
            + "</head><body><h1>" + p.name + "</h1><p>Generated from the Web Almanac 2024.</p>"
            + "".join(f"<p class='f{i}'>text</p>" for i in range(len(fonts)))  # (a font loads where it is used)
            + "".join(f"<img src='{u}' width='64' height='64' alt=''>" for u, k, _ in objs if k == "img")
            + "".join(f"<iframe src='https://{www}/frame{i}.html' width='8' height='8'></iframe>"
                      for i in range(1, len(html_sizes)))
            + "<script>" + "".join(f"fetch('{u}');" for u, k, _ in objs if k == "other") + "</script>"
            + "</body></html>")
    page = page + "<!--" + "x" * max(0, html_sizes[0] - len(page) - 7) + "-->"
    addr = {www: "192.0.2.10", static: "192.0.2.11", **{h: f"198.51.{k // 250}.{k % 250 + 1}"
                                                         for k, h in enumerate(third)}}

    def entry(url: str, mime: str, body: bytes, status: int = 200, headers: tuple[tuple[str, str], ...] = ()
              ) -> dict[str, Any]:
        host = url.split("/")[2]
        content: dict[str, Any] = {"mimeType": mime, "size": len(body), "text": base64.b64encode(body).decode(),
                         "encoding": "base64"}
        v = {"h1": "HTTP/1.1", "h2": "HTTP/2.0", "h3": "h3"}[ver.get(host, "h1")]
        return {"request": {"method": "GET", "url": url, "headers": []},
                "serverIPAddress": addr.get(host, "192.0.2.10"),
                "response": {"status": status, "httpVersion": v if url.startswith("https") else "HTTP/1.1",
                             "headers": [{"name": "Content-Type", "value": mime},
                                         *({"name": k, "value": val} for k, val in headers)],
                             "content": content}}

    entries = [entry(f"http://{site}.test/", "text/html", b"", 301, (("Location", f"https://{www}/"),)),
               entry(f"https://{www}/", "text/html", page.encode())]
    addr[f"{site}.test"] = addr[www]
    for i, extra in enumerate(html_sizes[1:], 1):  # the other documents: the iframes'
        entries.append(entry(f"https://{www}/frame{i}.html", "text/html", b"<p>" + b"x" * extra))
    for u, kind, size in objs:
        mime, body = _body(kind, size, u)
        # (Cross-origin fonts and fetches need it, as CDNs and third parties send it.)
        entries.append(entry(u, mime, body, headers=(("Access-Control-Allow-Origin", "*"),)))
    return {"log": {"version": "1.2", "creator": {"name": "satbench websites", "version": "1"},
                    "pages": [{"id": "p", "title": f"https://{www}/"}], "entries": entries}}


def parse(page: str) -> tuple[str, int]:
    """``web:PRESET`` or ``web:PRESET:SEED`` as (preset, seed); ValueError otherwise."""
    _, _, rest = page.partition(":")
    name, _, seed = rest.partition(":")
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r} (available: {', '.join(PRESETS)})")
    if seed and not seed.isdigit():
        raise ValueError(f"web:PRESET:SEED needs a whole number as its seed, got {seed!r}")
    return name, int(seed or 1)


def to_json(preset: str, seed: int = 1) -> str:
    return json.dumps(generate(preset, seed))


__all__ = ["PRESETS", "Preset", "generate", "parse", "to_json"]
