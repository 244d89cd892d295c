"""Visual progress and Speed Index from frames, on images whose answer is known
by hand: the histograms leave near-white out, progress is the share of the
change from the first frame to the last, colours within 5 levels match, and
Speed Index integrates what is still missing over time."""

from __future__ import annotations

import numpy as np
import pytest

from satbench.visual import histogram, progress, visual_metrics

W, H = 40, 20


def frame(black_rows: int = 0, colour: tuple[int, int, int] = (0, 0, 0), background: int = 255) -> np.ndarray:
    """A white (or ``background``) page with its top ``black_rows`` rows painted ``colour``."""
    img = np.full((H, W, 3), background, dtype=np.uint8)
    img[:black_rows] = colour
    return img


def test_near_white_pixels_are_not_counted() -> None:
    assert histogram(frame()).sum() == 0
    assert histogram(frame(background=251)).sum() == 0  # compression noise on the background
    h = histogram(frame(5))
    assert h.shape == (3, 256) and h[0, 0] == h[1, 0] == h[2, 0] == 5 * W and h.sum() == 3 * 5 * W
    # A pixel with one channel below 250 is content (pale yellow text, say).
    assert histogram(frame(1, colour=(255, 255, 200)))[2, 200] == W
    with pytest.raises(ValueError, match="height x width x 3"):
        histogram(np.zeros((4, 4), dtype=np.uint8))


def test_progress_is_the_share_of_the_change_made() -> None:
    blank, half, quarter = histogram(frame()), histogram(frame(10)), histogram(frame(5))
    assert progress(blank, blank, half) == 0
    assert progress(quarter, blank, half) == 50
    assert progress(half, blank, half) == 100
    # Colours within 5 levels match (scaling, compression); further ones do not.
    assert progress(histogram(frame(10, colour=(4, 4, 4))), blank, half) == 100
    assert progress(histogram(frame(10, colour=(5, 5, 5))), blank, half) == 0
    # Nothing to change: complete.
    assert progress(half, half, half) == 100


def test_speed_index_and_milestones_of_a_load() -> None:
    # Blank at 0 ms, a quarter of the page at 100 ms (50 %), repeated at 150 ms (the same frame),
    # 90 % at 200 ms, all of it at 300 ms, and the same again at 900 ms.
    frames = [(0.0, frame()), (100.0, frame(5)), (150.0, frame(5)), (200.0, frame(9)), (300.0, frame(10)),
              (900.0, frame(10))]
    m = visual_metrics([(t, histogram(f)) for t, f in frames])
    assert m.frames == 4 and [p for _, p in m.progress] == [0, 50, 90, 100]
    assert m.first_visual_change_ms == 100 and m.last_visual_change_ms == 300
    # 100 ms with nothing, 100 ms at half, 100 ms at 90 %.
    assert m.speed_index_ms == pytest.approx(100 + 50 + 10)
    assert m.visually_complete_ms == {85: 200, 95: 300, 99: 300, 100: 300}
    metrics = m.metrics()
    assert metrics["speed_index_ms"] == pytest.approx(160) and metrics["visually_complete_85_ms"] == 200
    assert metrics["visually_complete_ms"] == 300 and metrics["visual_frames"] == 4


def test_a_page_that_ends_as_it_began_is_complete_at_once() -> None:
    # A flash of content that goes away again: the last frame is the first, so there is no progress to make.
    m = visual_metrics([(0.0, histogram(frame())), (50.0, histogram(frame(3))), (80.0, histogram(frame()))])
    assert m.speed_index_ms == 0 and m.first_visual_change_ms == 50 and m.last_visual_change_ms == 80
    one = visual_metrics([(12.0, histogram(frame(4)))])
    assert one.speed_index_ms == 0 and one.first_visual_change_ms == one.last_visual_change_ms == 12
    with pytest.raises(ValueError, match="no frames"):
        visual_metrics([])
