"""Learning a browser's request schedule (satbench.endpoints.schedule), and
the file it writes read by its owner, satbench-load --check-schedule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from satbench.endpoints import loader, schedule
from satbench.endpoints.schedule import Seen, learn
from satbench.errors import InputError

PAGE = "https://s.test/p/"


def test_each_request_waits_for_the_latest_response_ended_before_it() -> None:
    s = learn(PAGE, [
        Seen("https://s.test/p/a.png", 95.0, 300.0),     # asked while the HTML still arrived: waits for its end
        Seen(PAGE, 0.0, 100.0),
        Seen("https://s.test/p/style.css", 104.0, 200.0),
        Seen("https://s.test/font.ttf", 230.0, 400.0),   # after the stylesheet's end (200), 30 ms later
        Seen("https://t.test/x.js", 310.0, 500.0),       # the latest ended before it: a.png (300)
    ], "test")
    assert s.requests == [(PAGE, None, 0.0), ("https://s.test/p/a.png", 0, 0.0),
                          ("https://s.test/p/style.css", 0, pytest.approx(4.0)),
                          ("https://s.test/font.ttf", 2, pytest.approx(30.0)),
                          ("https://t.test/x.js", 1, pytest.approx(10.0))]
    assert "1 requests asked for before" in s.notes[0]


def test_a_named_initiator_is_what_a_request_waits_for() -> None:
    s = learn(PAGE, [Seen(PAGE, 0.0, 100.0), Seen("https://s.test/app.js", 110.0, 150.0),
                     Seen("https://s.test/late.css", 120.0, 130.0),
                     Seen("https://s.test/api", 170.0, 200.0, initiator="https://s.test/app.js")], "test")
    assert s.requests[3] == ("https://s.test/api", 1, pytest.approx(20.0))


def test_a_load_without_its_page_is_refused() -> None:
    with pytest.raises(InputError, match="no request for its page"):
        learn(PAGE, [Seen("https://s.test/a", 0.0, 1.0)], "trial k")


def test_from_a_har_and_read_back_by_the_loader(tmp_path: Path) -> None:
    def entry(url: str, at_ms: int, took: float, **kw: object) -> dict[str, object]:
        return {"startedDateTime": f"2026-11-27T10:00:00.{at_ms:03d}Z", "time": took, "pageref": "page_1",
                "request": {"method": "GET", "url": url}, "response": {"status": 200}, **kw}

    har = tmp_path / "site.har"
    har.write_text(json.dumps({"log": {"pages": [{"id": "page_1"}], "entries": [
        entry(PAGE, 0, 100.0), entry("https://s.test/p/a.css", 110, 50.0),
        entry("https://s.test/p/b.png", 170, 20.0, _initiator={"type": "parser", "url": "https://s.test/p/a.css"}),
        entry("data:image/png;base64,AA", 171, 0.0)]}}))
    s = schedule.from_har(har)
    assert [(u, a) for u, a, _ in s.requests] == [(PAGE, None), ("https://s.test/p/a.css", 0),
                                                  ("https://s.test/p/b.png", 1)]
    assert s.requests[2][2] == pytest.approx(10.0)
    out = tmp_path / "s.json"
    s.write(out)
    assert len(out.read_text().splitlines()) == 2 + len(s.requests)  # a line per request
    binary = loader.loader_binary()
    if not binary.exists():
        pytest.skip("satbench-load is not built")
    why, page = schedule.check(str(out), str(binary))
    assert why is None and page == PAGE
    bad = tmp_path / "bad.json"
    bad.write_text(out.read_text().replace('"after": 1', '"after": 7'))
    why, _ = schedule.check(str(bad), str(binary))
    assert why is not None and why.endswith("requests[2].after: must be null or an earlier request's index "
                                            "(0 to 1), got 7"), why


def test_a_malformed_har_names_the_entry(tmp_path: Path) -> None:
    har = tmp_path / "x.har"
    har.write_text(json.dumps({"log": {"entries": [{"request": {"url": PAGE}, "time": 1}]}}))
    with pytest.raises(InputError, match=r"x.har: entry 0: missing or malformed field 'startedDateTime'"):
        schedule.from_har(har)


def test_only_answered_requests_of_the_load_itself_are_learned() -> None:
    rows = [(PAGE, 200, 0.0, 100.0), ("https://s.test/p/a.png", 200, 110.0, 200.0),
            ("https://s.test/p/gone.png", 404, 110.0, 150.0),        # an error: a replay would be invalid
            ("https://s.test/favicon.ico", None, None, None),         # never timed (cached, failed)
            ("https://s.test/beacon", 204, 900.0, 950.0)]             # after the load event (800 ms)
    assert [x.url for x in schedule.usable(rows, 800.0)] == [PAGE, "https://s.test/p/a.png"]
    assert schedule.page_url({"page": "shop", "protocol": "h1c"}, []) == "http://server.test/shop/"
