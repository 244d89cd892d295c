"""The studies' object-based page metrics, defined once for every client.

The published studies define their metrics by objects, not paints:

    first_object_ms    FCP as "the first object loaded": the first object
                       after the HTML done (the HTML itself on a page without
                       objects)
    largest_object_ms  LCP as "the largest object loaded": the object with the
                       most bytes done (of equal ones, the first done)
    last_object_ms     PLT as "the whole page loaded": the last object done,
                       the HTML included

Bytes are the page's own (its manifest), not what a client reports, and
only the page's objects count (a browser's favicon request does not). The
browsers' paint metrics (fcp_ms, lcp_ms: first paint, largest rendered
area) are kept beside these, under their own names; the synthetic loader's
fcp/lcp/plt are these definitions already.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from urllib.parse import urlsplit

from .model import ObjectTiming

NAMES = ("first_object_ms", "largest_object_ms", "last_object_ms")


def page_path(url: str, page_url: str) -> str | None:
    """An object's path inside the page ('img1.jpg'), '' for the HTML, None
    if not the page's. Only paths count: a sharded page's objects come from
    other hosts, under the same page folder."""
    index, path = urlsplit(page_url).path, urlsplit(url).path
    base = index[:index.rfind("/") + 1]
    if not path.startswith(base):
        return None
    rel = path[len(base):]
    return "" if rel in ("", "index.html", index[len(base):]) else rel


def one_client(objects: Iterable[ObjectTiming], page_url: str, sizes: dict[str, int]) -> dict[str, float | None]:
    html_end: float | None = None
    subs: list[tuple[int, float]] = []  # (bytes, end)
    for o in objects:
        rel = page_path(o.url, page_url)
        if rel is None or o.end_ms is None:
            continue
        if rel == "":
            html_end = o.end_ms if html_end is None else min(html_end, o.end_ms)
        elif rel in sizes:
            subs.append((sizes[rel], o.end_ms))
    if html_end is None and not subs:
        return dict.fromkeys(NAMES)
    ends = [e for _, e in subs]
    first = min(ends) if ends else html_end
    largest = min((e for b, e in subs if b == max(b for b, _ in subs)), default=html_end)
    last = max([*ends, *([html_end] if html_end is not None else [])])
    return {"first_object_ms": first, "largest_object_ms": largest, "last_object_ms": last}


def object_metrics(objects: list[ObjectTiming], page_url: str, sizes: dict[str, int]) -> dict[str, float | None]:
    """The object-based metrics of a load: per client, then the median over clients."""
    clients = sorted({o.client for o in objects})
    per = [one_client([o for o in objects if o.client == c], page_url, sizes) for c in clients]
    out: dict[str, float | None] = {}
    for name in NAMES:
        xs = [v for p in per if (v := p[name]) is not None]
        out[name] = statistics.median(xs) if xs else None
    return out


def nearest_rank(xs: Sequence[float], q: float) -> float:
    """The q-quantile by nearest rank (0 < q <= 1): a value of ``xs`` itself, never an interpolation."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]
