"""Visual metrics from Chromium's frames over GEO: the frames are captured as
the page paints (its DevTools screencast), kept as the trial's filmstrip, and
give a first visual change no sooner than the HTML can arrive and at the
page's first contentful paint, a Speed Index between the first and the last
visual change, and a visually complete no later than the load's end."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from satbench.results.report import write_report
from tests.e2e.test_quic_stacks import assert_within_bounds, trials
from tests.helpers import run_cli

#: Runs alone, after the parallel part of the e2e layer (tests/conftest.py: serial).
pytestmark = pytest.mark.serial


def test_chromium_frames_give_the_visual_metrics_over_geo(tmp_path: Path) -> None:
    exp = tmp_path / "visual.toml"
    exp.write_text('[experiment]\nname = "visual"\nseed = 2\ntimeout_s = 90\n'
                   'artefacts = ["frames"]\n[factors]\nlink = "geo"\nprotocol = "h2"\npage = "uniform-500k"\n'
                   'client = "chromium"\ncc = "bbr"\n')  # BBR: test_bound's multi-object cells
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ts = trials(db)
    assert len(ts) == 1 and all(t["status"] == "valid" for t in ts), [t["reason"] for t in ts]
    assert_within_bounds(ts)  # the multi-object page over HTTP/2 in Chromium: test_bound's other versions
    for t in ts:
        m = t["m"]
        # The HTML cannot be painted before the handshake and its request: 3 round trips of 530 ms.
        assert m["first_visual_change_ms"] >= 3 * 530
        # The first frame with content is the first contentful paint's (a frame is 1/60 s).
        assert abs(m["first_visual_change_ms"] - m["fcp_ms"]) < 100, m
        assert m["first_visual_change_ms"] <= m["speed_index_ms"] <= m["last_visual_change_ms"]
        assert m["visually_complete_85_ms"] <= m["visually_complete_99_ms"] <= m["visually_complete_ms"]
        assert m["visually_complete_ms"] == m["last_visual_change_ms"] <= m["plt_ms"] + 100
        # Eight images after the text: the page paints in several steps.
        assert m["visual_frames"] >= 4, m
        assert t["env"]["client"]["visual"]["source"].startswith("chromium devtools screencast")
    films = sorted((tmp_path / "artefacts").rglob("frames/ms_*.jpg"))
    assert len({f.parent for f in films}) == 1 and len(films) >= 4, films
    # Every object names the connection that carried it (HTTP/2: one).
    con = sqlite3.connect(db)
    conns = con.execute("SELECT trial_id, count(DISTINCT connection), sum(connection IS NULL) FROM objects "
                        "WHERE url LIKE 'https://server.test/%' GROUP BY trial_id").fetchall()
    con.close()
    assert [(n, missing) for _, n, missing in conns] == [(1, 0)], conns
    # The report shows the median trial's filmstrip and waterfall.
    page = write_report(db, tmp_path / "report").read_text()
    assert "<h3>Filmstrips</h3>" in page and page.count("data:image/jpeg;base64,") >= 3
    assert "<h3>Waterfalls</h3>" in page and "Waterfall, all (its median-PLT trial" in page


@pytest.mark.parametrize("browser", ["chromium", "firefox"])
def test_content_at_known_times_gives_known_visual_metrics(tmp_path: Path, browser: str) -> None:
    # The visual page fills the window's top half at 400 ms and its bottom half at 1200 ms after the
    # navigation started, and stamps each paint (the painting frame's requestAnimationFrame time):
    # first visual change at the first stamp, visually complete at the second, and Speed Index the
    # integral of what is missing between them (the top half's share of the progress as the frames
    # measured it, about half). A frame's stamp is its start, and what it paints is on the screen a
    # frame later: the metrics come one to two frame intervals after the stamps (Chromium's
    # screencast: the 60 Hz compositor's interval, 1 or 2 exactly in 10 of 10 loads here; Firefox's
    # screenshots, taken one after another: the mean gap between them, from the recorded rate, 0.5
    # to 1.7 in 10 loads, 2.1 once in a full test run), never before; asserted within four (a test
    # run on a busy day measured Chromium's first change 3.003 intervals after its stamp). The
    # stamps are within a frame before and 50 ms after the nominal times (a loaded host delays the
    # page's timers).
    exp = tmp_path / "known.toml"
    exp.write_text('[experiment]\nname = "known"\nseed = 1\ntimeout_s = 60\n'
                   'artefacts = ["frames"]\n[factors]\nlink = "lan"\nprotocol = "h2"\npage = "visual"\n'
                   f'client = "{browser}"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ts = trials(db)
    assert len(ts) == 1 and all(t["status"] == "valid" for t in ts), [t["reason"] for t in ts]
    con = sqlite3.connect(db)  # the client's own report (the page's result in it) is the trial's client.json
    raws = [json.loads((Path(a) / "client.json").read_text()) for (a,) in
            con.execute("SELECT artefacts FROM trials ORDER BY id")]
    con.close()
    for t, raw in zip(ts, raws, strict=True):
        m, visual = t["m"], t["env"]["client"]["visual"]
        painted = raw["page_result"]["painted_ms"]
        top, bottom = painted["top"], painted["bottom"]
        frame_ms = 1000 / 60 if browser == "chromium" else 1000 / visual["fps"]
        assert 400 - frame_ms <= top <= 450 and 1200 - frame_ms <= bottom <= 1250, (painted, frame_ms)
        half = next(p for t, p in raw["visual"]["progress"] if 0 < p < 100)  # the top half's share, in %
        assert 40 <= half <= 60, raw["visual"]["progress"]
        for name, want in (("first_visual_change_ms", top), ("speed_index_ms", top + (bottom - top) * (1 - half / 100)),
                           ("visually_complete_ms", bottom), ("visually_complete_85_ms", bottom),
                           ("last_visual_change_ms", bottom)):
            assert want <= m[name] <= want + 4 * frame_ms, (name, m[name], painted, frame_ms)
        assert m["visual_frames"] == 3  # blank, the top half, both


def test_a_loads_video_shows_what_was_on_screen_when(tmp_path: Path) -> None:
    # The video artefact (ffmpeg) of the visual page: blank until 400 ms, the top half (blue) until
    # 1200 ms, then both halves (the bottom one red), the load's time the video's.
    import subprocess

    import numpy as np

    from satbench.video import duration_s

    exp = tmp_path / "video.toml"
    exp.write_text('[experiment]\nname = "video"\nseed = 1\ntimeout_s = 60\nartefacts = ["video"]\n[factors]\n'
                   'link = "lan"\nprotocol = "h2"\npage = "visual"\nclient = "chromium"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (video,) = list((tmp_path / "artefacts").rglob("video.mp4"))
    assert 1.2 + 0.5 - 0.1 <= duration_s(video) <= 1.2 + 0.5 + 0.2  # the last change, held 500 ms

    def at(t: float) -> tuple[np.ndarray, np.ndarray]:
        """The mean colour of the top and bottom halves of the frame on screen at ``t`` s."""
        raw = subprocess.run(["ffmpeg", "-v", "error", "-ss", str(t), "-i", str(video), "-frames:v", "1",
                              "-vf", "scale=64:64", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
                             capture_output=True, check=True).stdout
        img = np.frombuffer(raw, dtype=np.uint8).reshape(64, 64, 3).astype(float)
        return img[4:28].mean(axis=(0, 1)), img[36:60].mean(axis=(0, 1))

    white, blue, red = np.array([255, 255, 255]), np.array([0x1f, 0x5f, 0xa8]), np.array([0xc8, 0x40, 0x1a])

    def near(c: np.ndarray, want: np.ndarray) -> bool:
        return bool(np.abs(c - want).max() < 40)

    from PIL import Image

    from satbench.video import HOLD_MS, frame_times

    def halves(f: Path) -> tuple[np.ndarray, np.ndarray]:
        with Image.open(f) as im:
            img = np.asarray(im.convert("RGB").resize((64, 64))).astype(float)
        return img[4:28].mean(axis=(0, 1)), img[36:60].mean(axis=(0, 1))

    # The video shows each frame of the filmstrip for as long as it was on screen (blank before the
    # first): what the screencast caught, whenever the compositor delivered it.
    shots = frame_times(video.parent / "frames")
    assert shots
    top, bottom = at(shots[0][0] / 2000)
    assert near(top, white) and near(bottom, white), (top, bottom)
    for (t, f), nxt in zip(shots, [s[0] for s in shots[1:]] + [shots[-1][0] + HOLD_MS]):
        top, bottom = at((t + nxt) / 2000)
        want_top, want_bottom = halves(f)
        assert near(top, want_top) and near(bottom, want_bottom), (t, top, bottom, want_top, want_bottom)
    # The page's last state (top blue, bottom red, from 1200 ms), held at the end. Its first change
    # (top blue from 400 ms) is in the video when the screencast caught a frame of it in time: once,
    # in a fresh-clone run, the video was still blank at 800 ms; the times of the changes are the
    # known-times test's to check, within its bound.
    top, bottom = at(1.5)
    assert near(top, blue) and near(bottom, red), (top, bottom)
