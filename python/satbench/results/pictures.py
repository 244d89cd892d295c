"""The report's pictures of single trials: which trials to show (each combination's median one, or the
ones chosen: :class:`ViewChoice`), their filmstrips and their waterfalls (drawn by views.py)."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .figures import Figures
from .read import Results
from .tables import cell_label
from .views import MILESTONES, Strip, filmstrip, waterfall


@dataclass(frozen=True)
class ViewChoice:
    """Which trials the filmstrips and waterfalls show: by default each combination's median one; the
    trials chosen (by key, a key's prefix, or id), in the order given; ``side_by_side`` a varied factor
    whose levels sit in adjacent rows (the other factors' combinations then in turn)."""

    trials: tuple[str, ...] = ()
    side_by_side: str | None = None


#: At most this many combinations get a waterfall and a filmstrip row.
VIEW_CELLS = 8


def _representatives(valid: Any, varied: list[str], metric: str,
                     views: ViewChoice = ViewChoice()) -> list[tuple[str, Any]]:
    """The trials to show, as (label, row): the chosen ones (``views.trials``, each matching key prefix
    or id, in the order given); else per combination of the varied factors (at most VIEW_CELLS), its
    trial with the median of ``metric`` (the lower middle one of an even count), the levels of
    ``views.side_by_side`` in adjacent rows."""
    have = valid[valid[metric].notna()] if metric in valid.columns else valid.iloc[0:0]
    if have.empty:
        return []
    if views.trials:
        out = []
        for want in views.trials:
            hit = have[have["key"].astype(str).str.startswith(want) | (have["trial_id"].astype(str) == want)]
            for _, row in hit.iterrows():
                label = " ".join(f"{k}={row[k]}" for k in varied) or "all"
                out.append((f"{label}, trial {row['key']}", row))
        return out
    if views.side_by_side in varied:  # grouped with it last: its levels change fastest
        varied = [*[v for v in varied if v != views.side_by_side], views.side_by_side]
    groups = have.groupby(varied, dropna=False) if varied else [((), have)]
    out = []
    for cell, g in groups:
        cell = cell if isinstance(cell, tuple) else (cell,)
        g = g.sort_values(metric)
        row = g.iloc[(len(g) - 1) // 2]
        out.append((cell_label(varied, cell) or "all", row))
    return out[:VIEW_CELLS]


def _filmstrip_section(r: Results, valid: Any, varied: list[str], views: ViewChoice = ViewChoice()) -> str:
    """The frames of each combination's median-Speed-Index trial (or of the chosen trials), side by side
    on one time axis (and their videos, where the trials made them)."""
    strips: list[Strip] = []
    videos: list[str] = []
    for label, row in _representatives(valid, varied, "speed_index_ms", views):
        art = Path(str(row.get("artefacts") or ""))
        if not art.is_absolute():  # stored as given: relative to where the study ran (its database's folder)
            art = r.path.parent / art if (r.path.parent / art).is_dir() else art
        if not (art / "frames").is_dir():
            continue
        progress: list[tuple[float, int]] = []
        try:
            raw = json.loads((art / "client.json").read_text())
            progress = [(float(t), int(p)) for t, p in ((raw.get("visual") or {}).get("progress") or [])]
        except (OSError, ValueError, TypeError, AttributeError):
            pass
        strips.append(Strip(f"{label} (SI {row['speed_index_ms']:.0f} ms)", art / "frames", progress))
        if (art / "video.mp4").is_file():
            videos.append(f"<li>{html.escape(label)}: <a href='{html.escape((art / 'video.mp4').resolve().as_uri())}'>"
                          "video.mp4</a></li>")
    film = filmstrip(strips) if strips else ""
    if not film:
        return ""
    which = ("the trials chosen (<code>--trial</code>)" if views.trials else
             "per combination, its trial with the median Speed Index"
             + (f", the levels of {html.escape(views.side_by_side)} side by side"
                if views.side_by_side in varied else ""))
    return ("<h3>Filmstrips</h3><p class='note'>What the browser showed, " + which + "; each picture is the last "
            "frame painted by that time, with its visual progress (the frames are the trial's artefacts, "
            "<code>frames/</code>).</p>" + film
            + (f"<p class='note'>Their videos (the load's time is the video's):</p><ul>{''.join(videos)}</ul>"
               if videos else ""))


def _waterfall_section(r: Results, name: str, valid: Any, varied: list[str], figs: Figures,
                       views: ViewChoice = ViewChoice()) -> str:
    """Each combination's median-PLT trial (or each chosen trial) as a waterfall of its first client's
    objects."""
    reps = _representatives(valid, varied, "plt_ms", views)
    if not reps:
        return ""
    objects = r.objects_of([int(row["trial_id"]) for _, row in reps], client=0)
    if objects.empty:
        return ""
    out: list[str] = []
    for label, row in reps:
        mine = objects[objects["trial_id"] == row["trial_id"]]
        if mine.empty:
            continue
        marks = {k: (float(row[k]) if k in row and row[k] == row[k] else None) for k, _, _ in MILESTONES}
        fig = waterfall(mine.to_dict("records"), marks, f"{label}: trial {row['key']}")
        out.append(figs.add(fig, f"waterfall-{len(out) + 1}",
                            f"Waterfall, {label}" if views.trials else
                            f"Waterfall, {label} (its median-PLT trial, {row['key']})"))
    if not out:
        return ""
    return ("<h3>Waterfalls</h3><p class='note'>" + ("The trials chosen" if views.trials else
                                                     "Per combination, its trial with the median page load time")
            + ": each "
            "object from its request (pale) through its first byte to its end (solid), coloured by the connection "
            "that carried it, with the page's milestones.</p>" + "".join(out))


__all__ = ["VIEW_CELLS", "ViewChoice"]
