"""The studies' object-based metrics, from per-object timings."""

from __future__ import annotations

from satbench.metrics import object_metrics, one_client
from satbench.model import ObjectTiming

URL = "https://server.test/triangular-500k/"
SIZES = {f"img{i}.jpg": kb * 1000 for i, kb in enumerate([20, 40, 70, 100, 110, 80, 50, 30], 1)}


def obj(client: int, path: str, end: float) -> ObjectTiming:
    return ObjectTiming(client=client, url=URL + path, protocol="h2", status=200, bytes=None, start_ms=0.0,
                        ttfb_ms=None, end_ms=end)


def test_first_largest_and_last_object() -> None:
    # The HTML at 600 ms, then images in page order, 100 ms apart; a favicon last, not the page's.
    objects = [obj(0, "", 600.0)] + [obj(0, f"img{i}.jpg", 600.0 + 100 * i) for i in range(1, 9)]
    objects.append(obj(0, "../favicon.ico", 5000.0))
    m = one_client(objects, URL, SIZES)
    assert m == {"first_object_ms": 700.0, "largest_object_ms": 1100.0, "last_object_ms": 1400.0}
    assert m["first_object_ms"] < m["largest_object_ms"]


def test_ties_blank_pages_and_many_clients() -> None:
    uniform = {f"img{i}.jpg": 62_500 for i in range(1, 9)}
    objs = [obj(0, "index.html", 500.0)] + [obj(0, f"img{i}.jpg", 900.0 - 10 * i) for i in range(1, 9)]
    m = one_client(objs, URL, uniform)
    assert m["largest_object_ms"] == 820.0 == m["first_object_ms"]  # of equal objects, the first done
    assert one_client([obj(0, "", 300.0)], URL, {}) == dict.fromkeys(m, 300.0)
    two = [obj(0, "", 100.0), obj(0, "img1.jpg", 200.0), obj(1, "", 100.0), obj(1, "img1.jpg", 400.0)]
    assert object_metrics(two, URL, {"img1.jpg": 1})["last_object_ms"] == 300.0  # the median of 200 and 400
