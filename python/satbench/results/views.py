"""What a load looked like: the waterfall of its objects and the filmstrip
of its frames, for the report (one representative trial per combination:
the one with the median page load time, or the median Speed Index) and for
anyone holding a trial's records.

- :func:`waterfall`: each object's request (its start), first byte and end,
  one row per object in the order requested, coloured by its connection,
  its protocol in the label; the page's milestones as vertical lines (first
  and last object, FCP, LCP, visually complete, PLT).
- :func:`filmstrip`: the frames the browser painted (``frames/ms_*.jpg`` in
  the trial's artefacts), one thumbnail per time step, each the last frame
  painted by then, with its visual progress; rows of trials share the time
  steps, so two levels of a factor compare side by side.
"""

from __future__ import annotations

import base64
import html
import io
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The milestones drawn on a waterfall, by metric, with their labels and styles.
MILESTONES = (("first_object_ms", "first object", ":"), ("fcp_ms", "FCP", "--"), ("lcp_ms", "LCP", "-."),
              ("visually_complete_ms", "visually complete", (0, (1, 1))), ("last_object_ms", "last object", ":"),
              ("plt_ms", "PLT", "-"))
#: At most this many objects are drawn (the first requested); the caption says how many were left out.
MAX_ROWS = 60
FRAME_RE = re.compile(r"ms_(\d+)\.(?:jpg|png)$")


def waterfall(objects: Sequence[Mapping[str, Any]], milestones: Mapping[str, float | None], title: str) -> Any:
    """A matplotlib figure of one client's objects: ``objects`` as rows of the ``objects`` table (url,
    protocol, start_ms, ttfb_ms, end_ms, connection), ``milestones`` by metric name."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - the report's backend, set by the report

    rows = sorted((o for o in objects if _num(o.get("start_ms")) is not None and _num(o.get("end_ms")) is not None),
                  key=lambda o: (float(o["start_ms"]), float(o["end_ms"])))
    shown = rows[:MAX_ROWS]
    conns = list(dict.fromkeys(str(o.get("connection")) for o in shown))
    colours = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(10, 1.4 + 0.18 * max(1, len(shown))))
    for y, o in enumerate(shown):
        start, end = float(o["start_ms"]), float(o["end_ms"])
        first = _num(o.get("ttfb_ms")) or start
        c = colours(conns.index(str(o.get("connection"))) % 20)
        ax.barh(y, first - start, left=start, height=0.7, color=c, alpha=0.35)  # request to first byte
        ax.barh(y, end - first, left=first, height=0.7, color=c)  # first byte to end
    labels = [f"{_short(str(o['url']))} ({o.get('protocol') or '?'}, c{conns.index(str(o.get('connection')))})"
              for o in shown]
    ax.set_yticks(range(len(shown)), labels, fontsize=6)
    ax.invert_yaxis()
    marks = {k: v for k, x in milestones.items() if (v := _num(x)) is not None}
    top = max([float(o["end_ms"]) for o in shown] + list(marks.values()) + [1.0])
    for key, label, style in MILESTONES:
        v = marks.get(key)
        if v is not None:
            ax.axvline(v, color="black", linestyle=style, linewidth=0.9, label=f"{label} {v:.0f} ms")
    ax.set_xlim(0, top * 1.02)
    ax.set_xlabel("ms from the load's start (pale: request to first byte; solid: the body; colour: connection)")
    more = len(rows) - len(shown)
    ax.set_title(title + (f" (first {len(shown)} of {len(rows)} objects)" if more else ""), fontsize=9)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def _num(x: Any) -> float | None:
    """A finite number, or None (a missing value, NaN)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _short(url: str) -> str:
    """The URL as a waterfall labels it: its path (and its host if not the page's server.test)."""
    path = re.sub(r"^https?://(server\.test)?", "", url)
    return path if len(path) <= 36 else path[:15] + "…" + path[-20:]


@dataclass(frozen=True)
class Strip:
    """One trial's row of a filmstrip."""

    label: str
    frames_dir: Path
    #: (ms, progress %) of its distinct frames (the trial's visual progress), if known.
    progress: Sequence[tuple[float, int]] = ()


def frames_of(folder: Path) -> list[tuple[float, Path]]:
    """The frames a trial kept: (ms from the navigation's start, file), in time order."""
    out = []
    for p in folder.glob("ms_*"):
        m = FRAME_RE.search(p.name)
        if m:
            out.append((float(m.group(1)), p))
    return sorted(out)


def filmstrip(strips: Sequence[Strip], step_ms: float | None = None, width: int = 120) -> str:
    """HTML: one row per strip, one thumbnail per time step (each the last frame painted by then;
    blank before the first), the time steps shared by every row."""
    from PIL import Image  # noqa: PLC0415 - only a report with frames decodes them

    frames = [frames_of(s.frames_dir) for s in strips]
    end = max((f[-1][0] for f in frames if f), default=0.0)
    if not end:
        return ""
    step = step_ms or _step(end)
    times = [step * k for k in range(1, int(math.ceil(end / step)) + 1)]
    head = "".join(f"<th>{t / 1000:.1f} s</th>" for t in times)
    body = []
    for s, fs in zip(strips, frames):
        cells = []
        for t in times:
            shown = [p for ms, p in fs if ms <= t]
            if not shown:
                cells.append("<td class='blank'></td>")
                continue
            buf = io.BytesIO()
            try:
                with Image.open(shown[-1]) as im:
                    im.thumbnail((width, width * 4))
                    im.convert("RGB").save(buf, "JPEG", quality=70)
            except OSError:  # a frame cut short on disk: a blank cell, not a report that fails
                cells.append("<td class='blank'>?</td>")
                continue
            pct = next((p for ms, p in reversed(list(s.progress)) if ms <= t), None)
            src = "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode()
            cells.append(f"<td><img src='{src}' alt='{t:.0f} ms'>"
                         + (f"<br><small>{pct} %</small>" if pct is not None else "") + "</td>")
        body.append(f"<tr><th>{html.escape(s.label)}</th>{''.join(cells)}</tr>")
    return f"<table class='film'><tr><th></th>{head}</tr>{''.join(body)}</table>"


def _step(end_ms: float) -> float:
    """A round time step giving at most 12 columns up to ``end_ms``."""
    for step in (100, 200, 250, 500, 1000, 2000, 5000, 10_000, 20_000, 60_000):
        if end_ms / step <= 12:
            return float(step)
    return float(math.ceil(end_ms / 12))
