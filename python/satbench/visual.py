"""What the user sees: visual progress, Speed Index and the visual milestones
of a page load, from the frames a browser painted.

The computation is the one the field's tools share (WebPageTest's visual
metrics, which Browsertime and sitespeed.io run), re-derived here:

- Each frame is reduced to three colour histograms (red, green, blue; 256
  buckets each) of its pixels, leaving out near-white ones (all three
  channels at 250 or above): a page's empty background is no progress, and
  compression noise on it is none either.
- A frame's **visual progress** is how much of the change from the first
  frame to the last one it has made: per channel and bucket, the change the
  last frame needs, matched against the change this frame has (from buckets
  within 5 of each other, for slight colour variations), summed over the
  channels; progress = matched / needed, floored to a whole percent. A load
  whose last frame equals its first has nothing to progress: 100 %.
- **Speed Index** = the integral of (1 - progress) over time, from the first
  frame: the average time at which the visible page is displayed (ms).
- **First visual change**: the first frame that differs from the first one;
  **last visual change**: the last frame that differs from the one before;
  **visually complete** at 85, 95 and 99 %: the first frame with at least
  that progress (100 %: the first frame at full progress).

Frames come as (ms since the navigation started, RGB image); repeated
identical frames are kept once (the earliest). Nothing here knows a
browser: :mod:`satbench.endpoints.chromium` feeds it its screencast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: A pixel whose three channels are all at least this is near-white (the page's background): not counted.
WHITE = 250
#: Buckets either side a colour may match from (slight variations: scaling, compression).
SLOP = 5
#: The visually-complete thresholds reported (%).
THRESHOLDS = (85, 95, 99, 100)

Histogram = npt.NDArray[np.int64]  # shape (3, 256)


def histogram(rgb: npt.NDArray[np.uint8]) -> Histogram:
    """The colour histograms of an RGB image (height x width x 3, or more channels, the rest ignored)
    over its non-near-white pixels."""
    if rgb.ndim != 3 or rgb.shape[2] < 3:
        raise ValueError(f"an RGB image is height x width x 3, got shape {rgb.shape}")
    px = rgb[..., :3].reshape(-1, 3)
    keep = px[(px < WHITE).any(axis=1)]
    return np.stack([np.bincount(keep[:, c], minlength=256) for c in range(3)]).astype(np.int64)


def progress(h: Histogram, first: Histogram, last: Histogram, slop: int = SLOP) -> int:
    """A frame's visual progress (%, whole) from ``first`` towards ``last``."""
    total = matched = 0
    for c in range(3):
        available = np.abs(h[c] - first[c])
        need = np.abs(last[c] - first[c])
        for i in (int(x) for x in np.flatnonzero(need)):
            target = int(need[i])
            total += target
            for j in range(max(0, i - slop), min(256, i + slop)):
                take = min(target, int(available[j]))
                available[j] -= take
                matched += take
                target -= take
                if not target:
                    break
    return 100 if not total else math.floor(100 * matched / total)


@dataclass(frozen=True)
class VisualMetrics:
    """A load's visual metrics (ms since the navigation started) and its progress curve."""

    first_visual_change_ms: float
    last_visual_change_ms: float
    speed_index_ms: float
    #: Visually complete at 85, 95, 99 and 100 % (ms).
    visually_complete_ms: dict[int, float]
    #: (ms, progress %) of every distinct frame, the first included.
    progress: list[tuple[float, int]]
    frames: int

    def metrics(self) -> dict[str, float | None]:
        """As a trial's metrics."""
        out: dict[str, float | None] = {
            "first_visual_change_ms": self.first_visual_change_ms,
            "last_visual_change_ms": self.last_visual_change_ms, "speed_index_ms": self.speed_index_ms,
            "visual_frames": float(self.frames)}
        for k, v in self.visually_complete_ms.items():
            out["visually_complete_ms" if k == 100 else f"visually_complete_{k}_ms"] = v
        return out


def distinct(frames: Sequence[tuple[float, Histogram]]) -> list[tuple[float, Histogram]]:
    """The frames in time order, each repeated identical frame kept once (its first)."""
    out: list[tuple[float, Histogram]] = []
    for t, h in sorted(frames, key=lambda f: f[0]):
        if not out or not np.array_equal(out[-1][1], h):
            out.append((t, h))
    return out


def visual_metrics(frames: Sequence[tuple[float, Histogram]]) -> VisualMetrics:
    """The visual metrics of a load from its frames' histograms: (ms, histogram), the first frame
    the page before it painted (a blank frame at the navigation's start)."""
    fs = distinct(frames)
    if not fs:
        raise ValueError("no frames")
    first, last = fs[0][1], fs[-1][1]
    curve = [(t, progress(h, first, last)) for t, h in fs]
    si, (t0, p0) = 0.0, curve[0]
    for t, p in curve:
        si += (t - t0) * (1 - p0 / 100)
        t0, p0 = t, p
    change = fs[1][0] if len(fs) > 1 else fs[0][0]
    complete = {k: next(t for t, p in curve if p >= k) for k in THRESHOLDS}
    return VisualMetrics(first_visual_change_ms=change, last_visual_change_ms=fs[-1][0], speed_index_ms=si,
                         visually_complete_ms=complete, progress=curve, frames=len(fs))
