"""qlog files of both QUIC stacks, read into one form.

The two stacks write different qlog dialects, both JSON-SEQ (one record per
line, each perhaps led by the RS character):

- quiche 0.30: the IETF draft-12 schema, events named ``quic:...``
  (``quic:parameters_set`` with ``initiator``, ``quic:recovery_metrics_updated``
  carrying only what changed); the header's
  ``trace.common_fields.reference_time.wall_clock_time`` anchors event times
  (ms) to the wall clock.
- quinn 0.11: qlog 0.3, events named ``transport:...`` and ``recovery:...``
  (``recovery:metrics_updated``; ``transport:parameters_set`` with ``owner``
  where quinn writes it, which 0.11 does not); RTTs in seconds where the
  schema says ms (read here as ms); no wall-clock anchor, so times stay
  relative to the connection's start.

:func:`read` returns a :class:`Qlog`: its dialect, anchor, the transport
parameters each side set, and the recovery metrics as full states over time.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

#: Event names per dialect: (parameters set, recovery metrics updated).
NAMES = {"draft-12": ("quic:parameters_set", "quic:recovery_metrics_updated"),
         "0.3": ("transport:parameters_set", "recovery:metrics_updated")}
RTTS = frozenset({"min_rtt", "smoothed_rtt", "latest_rtt", "rtt_variance"})


@dataclass
class Qlog:
    path: Path
    dialect: str  # "draft-12" (quiche) or "0.3" (quinn)
    description: str
    reference_unix_ns: int | None
    events: list[dict[str, Any]] = field(default_factory=list)

    def parameters(self, side: str) -> dict[str, Any] | None:
        """The transport parameters ``side`` ("local" or "remote") set, as logged; None if not logged."""
        name = NAMES[self.dialect][0]
        for ev in self.events:
            data = ev.get("data", {})
            if ev.get("name") == name and (data.get("initiator") or data.get("owner")) == side:
                return dict(data)
        return None

    def metrics(self) -> Iterator[tuple[float, dict[str, float]]]:
        """(ms from the trace's start, the recovery state then): each update
        applied to the last state (quiche logs only what changed)."""
        name = NAMES[self.dialect][1]
        rtt_scale = 1000.0 if self.dialect == "0.3" else 1.0  # quinn 0.11 writes RTTs in seconds
        state: dict[str, float] = {}
        for ev in self.events:
            if ev.get("name") != name:
                continue
            state.update({k: float(v) * (rtt_scale if k in RTTS else 1.0) for k, v in ev.get("data", {}).items()
                          if isinstance(v, (int, float)) and not isinstance(v, bool)})
            yield float(ev.get("time", 0.0)), dict(state)


def _records(p: Path) -> list[dict[str, Any]]:
    out = []
    for line in p.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line.lstrip("\x1e"))
        except json.JSONDecodeError:
            continue  # a trace cut short by the connection's end
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _wall_ns(text: str) -> int | None:
    whole, _, frac = text.rstrip("Z").partition(".")
    try:
        dt = datetime.fromisoformat(whole + "+00:00")
    except ValueError:
        return None
    return int(dt.timestamp()) * 10**9 + int((frac + "000000000")[:9])


def read(p: Path) -> Qlog | None:
    """The qlog at ``p``; None if it is not one (no header record)."""
    recs = _records(p)
    if not recs or "trace" not in recs[0]:
        return None
    head, trace = recs[0], recs[0]["trace"]
    dialect = "0.3" if str(head.get("qlog_version", "")).startswith("0.") else "draft-12"
    wall = trace.get("common_fields", {}).get("reference_time", {}).get("wall_clock_time")
    return Qlog(path=p, dialect=dialect, description=str(trace.get("description") or head.get("description") or ""),
                reference_unix_ns=_wall_ns(wall) if wall else None, events=recs[1:])


def read_dir(d: Path) -> list[Qlog]:
    """Every qlog in a folder (a server's ``qlog/``), by file name."""
    if not d.is_dir():
        return []
    return [q for f in sorted(d.iterdir()) if f.is_file() and (q := read(f)) is not None]
