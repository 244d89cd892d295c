"""The report's views of single trials: a filmstrip shows, at each time step,
the last frame painted by then (blank before the first), its rows on one
time axis; a waterfall draws each object from its request through its first
byte to its end, coloured by connection, with the page's milestones; and the
trials shown are each combination's median one, the levels of a chosen
factor side by side, or the trials one names."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import pandas as pd
import pytest
from PIL import Image

from satbench.results.pictures import ViewChoice, _representatives
from satbench.results.views import Strip, _step, filmstrip, frames_of, waterfall

matplotlib.use("Agg")


def _frames(folder: Path, at: dict[int, tuple[int, int, int]]) -> Path:
    folder.mkdir(parents=True)
    for ms, colour in at.items():
        Image.new("RGB", (40, 20), colour).save(folder / f"ms_{ms:06d}.jpg")
    (folder / "notes.txt").write_text("not a frame")
    return folder


def test_a_filmstrip_shows_the_last_frame_painted_by_each_step(tmp_path: Path) -> None:
    a = _frames(tmp_path / "a", {0: (255, 255, 255), 400: (0, 0, 255), 1200: (255, 0, 0)})
    b = _frames(tmp_path / "b", {0: (255, 255, 255), 900: (0, 255, 0)})
    assert [ms for ms, _ in frames_of(a)] == [0, 400, 1200]
    page = filmstrip([Strip("h2", a, [(0, 0), (400, 50), (1200, 100)]), Strip("h3", b)], step_ms=200)
    # One shared axis to the last frame of any row: 200 ... 1200 ms, six columns.
    assert re.findall(r"<th>([\d.]+) s</th>", page) == ["0.2", "0.4", "0.6", "0.8", "1.0", "1.2"]
    rows = page.split("<tr>")[2:]
    assert [re.search(r"<th>(.*?)</th>", r).group(1) for r in rows] == ["h2", "h3"]  # type: ignore[union-attr]
    # Row h2: the blue frame from 400 ms with its progress (50 %), the last one at 1.2 s (100 %).
    assert re.findall(r"<small>(\d+) %</small>", rows[0]) == ["0", "50", "50", "50", "50", "100"]
    # Row h3 has no progress known: pictures only, and the same number of cells.
    assert rows[1].count("<td") == 6 and "<small>" not in rows[1]
    assert filmstrip([Strip("none", _frames(tmp_path / "c", {}))]) == ""
    assert _step(1200) == 100 and _step(30_000) == 5000


def test_a_waterfall_draws_every_object_by_connection_with_its_milestones() -> None:
    objects = [{"url": "https://server.test/index.html", "protocol": "h2", "start_ms": 0, "ttfb_ms": 540,
                "end_ms": 560, "connection": "1"},
               {"url": "https://server.test/a.jpg", "protocol": "h2", "start_ms": 600, "ttfb_ms": 1100,
                "end_ms": 1500, "connection": "1"},
               {"url": "https://s2.test/b.jpg", "protocol": "h2", "start_ms": 600, "ttfb_ms": None,
                "end_ms": 1900, "connection": "2"},
               {"url": "https://server.test/failed", "protocol": None, "start_ms": None, "end_ms": None}]
    fig = waterfall(objects, {"fcp_ms": 700, "plt_ms": 1950, "lcp_ms": float("nan")}, "a trial")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels == ["/index.html (h2, c0)", "/a.jpg (h2, c0)", "s2.test/b.jpg (h2, c1)"]
    bars = ax.patches
    assert len(bars) == 6  # request to first byte, then the body, per object drawn
    # The object without a first byte is drawn from its request: a zero-length pale bar.
    assert bars[4].get_width() == 0 and bars[5].get_x() == 600 and bars[5].get_width() == 1300
    assert bars[0].get_facecolor()[:3] == bars[2].get_facecolor()[:3] != bars[4].get_facecolor()[:3]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["FCP 700 ms", "PLT 1950 ms"]  # NaN LCP left out
    assert ax.get_xlim()[1] == pytest.approx(1950 * 1.02)


def _trials() -> pd.DataFrame:
    rows = []
    for i, (proto, link, si) in enumerate([("h2", "geo", 3000), ("h2", "geo", 3100), ("h2", "geo", 2900),
                                           ("h3", "geo", 2500), ("h2", "leo", 900), ("h3", "leo", 800)]):
        rows.append({"trial_id": i + 1, "key": f"k{i}abc", "protocol": proto, "link": link, "speed_index_ms": si})
    return pd.DataFrame(rows)


def test_the_trials_shown_are_medians_side_by_side_or_the_chosen_ones() -> None:
    df = _trials()
    reps = _representatives(df, ["protocol", "link"], "speed_index_ms")
    assert [(label, int(row["trial_id"])) for label, row in reps] == [
        ("protocol=h2 link=geo", 1), ("protocol=h2 link=leo", 5), ("protocol=h3 link=geo", 4),
        ("protocol=h3 link=leo", 6)]
    # The protocols side by side: per link, h2 then h3.
    reps = _representatives(df, ["protocol", "link"], "speed_index_ms", ViewChoice(side_by_side="protocol"))
    assert [label for label, _ in reps] == ["link=geo protocol=h2", "link=geo protocol=h3", "link=leo protocol=h2",
                                            "link=leo protocol=h3"]
    # Chosen: by key prefix or id, in the order given.
    reps = _representatives(df, ["protocol", "link"], "speed_index_ms", ViewChoice(trials=("k5", "2")))
    assert [(label, int(row["trial_id"])) for label, row in reps] == [
        ("protocol=h3 link=leo, trial k5abc", 6), ("protocol=h2 link=geo, trial k1abc", 2)]
