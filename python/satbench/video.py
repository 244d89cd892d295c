"""A load's video, made from the frames its browser painted (the filmstrip's
``ms_NNNNNN.jpg``, each named by its time since the navigation started), as
WebPageTest and Browsertime give one: a blank page from the start to the
first frame, then each frame for as long as it was on screen, the last held
for a moment, at a constant frame rate, H.264 in MP4 (ffmpeg, Debian's; the
optional part ``ffmpeg``). The video's time is the load's time: a frame
painted at 1.234 s is on screen from 1.234 s of the video."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from .errors import PrerequisiteError

#: Frames per second of the video (a frame lasts 1/FPS s at least).
FPS = 30
#: How long the last frame stays on after it was painted, in ms.
HOLD_MS = 500
_NAME = re.compile(r"ms_(\d+)\.jpg")


def frame_times(frames: Path) -> list[tuple[int, Path]]:
    """The frames of a filmstrip folder with their times (ms), in order."""
    out = []
    for f in frames.glob("ms_*.jpg"):
        m = _NAME.fullmatch(f.name)
        if m:
            out.append((int(m.group(1)), f))
    return sorted(out)


def make_video(frames: Path, out: Path) -> Path | None:
    """Write the video of a filmstrip folder to ``out`` (None when it holds no frame)."""
    shots = frame_times(frames)
    if not shots:
        return None
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise PrerequisiteError(["ffmpeg: the video artefact needs it (bash scripts/setup --only ffmpeg)"])
    from PIL import Image  # noqa: PLC0415 - only a video needs its frames' size

    with Image.open(shots[0][1]) as im:
        size = im.size
    with tempfile.TemporaryDirectory(prefix="satbench-video-") as tmp:
        blank = Path(tmp) / "blank.jpg"  # the concat demuxer wants one codec: JPEG, as the frames
        Image.new("RGB", size, "white").save(blank, quality=95)
        # The concat demuxer's list: each picture with how long it was on screen.
        def entry(path: Path) -> str:
            # The concat list's quoting: a quote inside a path closes it, is escaped, and reopens it.
            return "file '" + str(path).replace("'", "'\\''") + "'"

        lines = ["ffconcat version 1.0"]
        if shots[0][0] > 0:
            lines += [entry(blank), f"duration {shots[0][0] / 1000:.3f}"]
        for (t, f), nxt in zip(shots, [s[0] for s in shots[1:]] + [shots[-1][0] + HOLD_MS]):
            lines += [entry(f.resolve()), f"duration {max(nxt - t, 1) / 1000:.3f}"]
        lines.append(entry(shots[-1][1].resolve()))  # the demuxer takes the last duration from a next file
        listing = Path(tmp) / "frames.ffconcat"
        listing.write_text("\n".join(lines) + "\n")
        out.parent.mkdir(parents=True, exist_ok=True)
        p = subprocess.run([ffmpeg, "-v", "error", "-y", "-f", "concat", "-safe", "0", "-i", str(listing),
                            "-vf", f"fps={FPS},pad=ceil(iw/2)*2:ceil(ih/2)*2,format=yuv420p", "-c:v", "libx264",
                            "-movflags", "+faststart", str(out)], capture_output=True, text=True, timeout=300)
        # At -v error, anything said is an error (ffmpeg exits 0 after frames it could not decode).
        if p.returncode != 0 or p.stderr.strip():
            raise RuntimeError(f"ffmpeg: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else p.returncode}")
    return out


def duration_s(video: Path) -> float:
    """A video's duration (ffprobe)."""
    p = subprocess.run(["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", str(video)],
                       capture_output=True, text=True, timeout=60, check=True)
    return float(p.stdout.strip())
