"""One trial over time: what each connection's congestion controller did
(congestion window, bytes in flight, pacing and delivery rates, RTT), with
each object's request and completion marked, all on the server's clock.

Sources, from the trial's artefact folder (``artefacts = ["server"]``):

- ``server/tcp_info.jsonl``: TCP_INFO every 10 ms and at close (TCP);
- ``server/quic_info.jsonl``: the QUIC server's own samples, where the
  server writes them; else ``server/qlog/*`` (:mod:`.qlog`): the recovery
  metrics, on the wall clock where the qlog is anchored to it (quiche's);
- ``server/access.jsonl``: each request's arrival and completion;
- the trial's stored link counters: the satellite access's series per
  terminal (C/N and the MODCOD in use forward, the granted return rate),
  on the emulator's clock (its start is recorded in unix ns).

``satbench trace --db DB TRIAL`` draws it; :func:`load` returns it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ..errors import InputError  # noqa: E402
from . import qlog  # noqa: E402


@dataclass
class Sample:
    t_s: float  # seconds from the trial's first request
    cwnd_bytes: float | None = None
    inflight_bytes: float | None = None
    srtt_ms: float | None = None
    pacing_mbps: float | None = None
    delivery_mbps: float | None = None


@dataclass
class Connection:
    id: str
    transport: str  # tcp or quic
    cc: str | None
    samples: list[Sample] = field(default_factory=list)


@dataclass
class ObjectMark:
    path: str
    conn: str
    request_s: float
    done_s: float | None
    bytes: int


@dataclass
class AccessSeries:
    """One terminal's satellite access over time (seconds on the trial's axis)."""

    terminal: int
    cn_db: list[tuple[float, float]] = field(default_factory=list)
    modcod: list[tuple[float, str]] = field(default_factory=list)
    granted_mbps: list[tuple[float, float]] = field(default_factory=list)


@dataclass
class TrialSeries:
    key: str
    label: str
    t0_unix_ns: int
    connections: list[Connection]
    objects: list[ObjectMark]
    access: list[AccessSeries] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "t0_unix_ns": self.t0_unix_ns,
                "connections": [{"id": c.id, "transport": c.transport, "cc": c.cc,
                                 "samples": [s.__dict__ for s in c.samples]} for c in self.connections],
                "objects": [o.__dict__ for o in self.objects], "access": [a.__dict__ for a in self.access]}


def access_series(stats: dict[str, Any] | None, t0_unix_ns: int) -> list[AccessSeries]:
    """The access series of an emulator's report, shifted onto the trial's axis."""
    if not stats or not stats.get("started_unix_ns"):
        return []
    shift = (int(stats["started_unix_ns"]) - t0_unix_ns) / 1e9
    out: dict[int, AccessSeries] = {}
    for direction in ("forward", "return"):
        for i, t in enumerate((stats.get(direction, {}).get("access") or {}).get("terminals", [])):
            a = out.setdefault(i, AccessSeries(terminal=i + 1))
            a.cn_db += [(x + shift, float(v)) for x, v in t.get("cn_db_series", [])]
            a.modcod += [(x + shift, str(v)) for x, v in t.get("modcod_series", [])]
            a.granted_mbps += [(x + shift, float(v) / 1e6) for x, v in t.get("granted_bps_series", [])]
    return list(out.values())


def _jsonl(p: Path) -> list[dict[str, Any]]:
    out = []
    if p.exists():
        for line in p.read_text().splitlines():
            try:
                out.append(json.loads(line.lstrip("\x1e")))
            except json.JSONDecodeError:
                continue
    return out


def _trial(db: Path, which: str) -> tuple[str, str, Path, dict[str, Any] | None]:
    """(key, label, artefact folder, link counters) of a trial given by id or key (a prefix will do)."""
    if not db.is_file():
        raise InputError(f"{db}: no such results database")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT t.key, t.factors, t.artefacts, t.link_counters, t.id, e.name FROM trials t "
                           "JOIN experiments e ON e.id = t.experiment_id WHERE CAST(t.id AS TEXT) = ? "
                           "OR t.key LIKE ?", (which, which + "%")).fetchall()
    except sqlite3.DatabaseError as e:
        raise InputError(f"{db}: not a satbench results database ({e})") from None
    finally:
        con.close()
    if not rows:
        raise InputError(f"TRIAL {which}: no trials match (give an id or a key)")
    by_id = [r for r in rows if str(r[4]) == which]
    if by_id:  # an id is exact; digits that also begin some keys name the trial of that id
        rows = by_id
    if len(rows) > 1:
        # A key is the trial's factors: the same trial of two experiments shares it.
        some = ", ".join(f"{r[4]} ({r[5]})" for r in rows[:5])
        raise InputError(f"TRIAL {which}: {len(rows)} trials match, give one id: {some}")
    key, factors, art, counters = rows[0][:4]
    f = json.loads(factors)
    label = " ".join(f"{k}={f[k]}" for k in ("link", "protocol", "cc", "page", "client") if k in f)
    if not art or not (Path(art) / "server").is_dir():
        raise InputError(f"TRIAL {which}: no server artefacts stored (run with artefacts = [\"server\"])")
    return key, label, Path(art), json.loads(counters) if counters else None


def load(db: Path, which: str) -> TrialSeries:
    key, label, art, counters = _trial(db, which)
    server = art / "server"
    access = _jsonl(server / "access.jsonl")
    reqs = [e for e in access if e.get("type") == "request" and e.get("t_request_unix_ns")]
    t0 = min((int(e["t_request_unix_ns"]) for e in reqs), default=0)

    def rel(ns: int | None) -> float | None:
        return None if ns is None else (int(ns) - t0) / 1e9

    conns: dict[str, Connection] = {}
    for s in _jsonl(server / "tcp_info.jsonl"):
        c = conns.setdefault(str(s["conn"]), Connection(str(s["conn"]), "tcp", s.get("cc")))
        mss = float(s.get("mss") or 1448)
        c.samples.append(Sample(
            t_s=rel(s["t_unix_ns"]) or 0.0, cwnd_bytes=float(s["cwnd"]) * mss,
            inflight_bytes=float(s.get("unacked") or 0) * mss,
            srtt_ms=float(s["srtt_us"]) / 1e3 if s.get("srtt_us") else None,
            pacing_mbps=float(s["pacing_rate_Bps"]) * 8 / 1e6 if s.get("pacing_rate_Bps") is not None else None,
            delivery_mbps=float(s["delivery_rate_Bps"]) * 8 / 1e6 if s.get("delivery_rate_Bps") else None))
    qinfo = _jsonl(server / "quic_info.jsonl")
    for s in qinfo:
        c = conns.setdefault(str(s["conn"]), Connection(str(s["conn"]), "quic", s.get("cc")))
        c.samples.append(Sample(
            t_s=rel(s["t_unix_ns"]) or 0.0, cwnd_bytes=s.get("cwnd"), inflight_bytes=s.get("bytes_in_flight"),
            srtt_ms=s.get("srtt_ms"),
            pacing_mbps=s["pacing_rate_bps"] / 1e6 if s.get("pacing_rate_bps") else None,
            delivery_mbps=s["delivery_rate_bps"] / 1e6 if s.get("delivery_rate_bps") else None))
    if not qinfo:
        for q in qlog.read_dir(server / "qlog"):
            if q.reference_unix_ns is None:
                continue  # quinn's qlog has no wall-clock anchor (its server writes quic_info instead)
            c = Connection(q.path.stem, "quic", None)
            for t_ms, state in q.metrics():
                pr = state.get("pacing_rate")
                c.samples.append(Sample(t_s=(q.reference_unix_ns + t_ms * 1e6 - t0) / 1e9,
                                        cwnd_bytes=state.get("congestion_window"),
                                        inflight_bytes=state.get("bytes_in_flight"),
                                        srtt_ms=state.get("smoothed_rtt"),
                                        pacing_mbps=pr * 8 / 1e6 if pr else None))
            conns[c.id] = c
    objects = [ObjectMark(path=str(e.get("path")), conn=str(e.get("conn")),
                          request_s=rel(e["t_request_unix_ns"]) or 0.0, done_s=rel(e.get("t_done_unix_ns")),
                          bytes=int(e.get("body_bytes") or 0)) for e in reqs]
    return TrialSeries(key, label, t0, [c for c in conns.values() if c.samples], objects, access_series(counters, t0))


def plot(ts: TrialSeries) -> Any:
    """Four panels on one time axis: window and bytes in flight; pacing and
    delivery rates; RTT; each object from its request to its completion."""
    ratios = [3, 2, 2, max(1.5, 0.12 * len(ts.objects))] + ([2] if ts.access else [])
    fig, axes = plt.subplots(len(ratios), 1, figsize=(9, 9 + (2 if ts.access else 0)), sharex=True,
                             gridspec_kw={"height_ratios": ratios})
    shown = ts.connections[:8]
    for i, c in enumerate(shown):
        col = f"C{i}"
        t = [s.t_s for s in c.samples]
        axes[0].plot(t, [s.cwnd_bytes for s in c.samples], color=col, lw=1.2, label=f"{c.id} cwnd")
        axes[0].plot(t, [s.inflight_bytes for s in c.samples], color=col, lw=0.8, ls=":", label=f"{c.id} in flight")
        axes[1].plot(t, [s.pacing_mbps for s in c.samples], color=col, lw=1.0, label=f"{c.id} pacing")
        axes[1].plot(t, [s.delivery_mbps for s in c.samples], color=col, lw=0.8, ls="--", label=f"{c.id} delivery")
        axes[2].plot(t, [s.srtt_ms for s in c.samples], color=col, lw=1.0, label=c.id)
    colours = {c.id: f"C{i}" for i, c in enumerate(shown)}
    for j, o in enumerate(ts.objects):
        end = o.done_s if o.done_s is not None else o.request_s
        axes[3].plot([o.request_s, end], [j, j], color=colours.get(o.conn, "grey"), lw=3)
        axes[3].text(end, j, f" {o.path.rsplit('/', 1)[-1] or '/'}", fontsize=6, va="center")
    axes[0].set_ylabel("bytes")
    axes[1].set_ylabel("Mbit/s")
    axes[2].set_ylabel("smoothed RTT (ms)")
    axes[3].set_ylabel("objects")
    axes[3].set_yticks([])
    axes[-1].set_xlabel("seconds from the first request (server's clock)")
    if ts.access:
        _draw_access(axes[4], ts.access)
    for ax in axes[:3]:
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6, ncol=2)
    axes[0].set_title(f"trial {ts.key}: {ts.label}", fontsize=9)
    fig.tight_layout()
    return fig


def _draw_access(ax: Any, access: list[AccessSeries]) -> None:
    """C/N per terminal (left), the granted return rate (right), each MODCOD change marked."""
    right = ax.twinx() if any(a.granted_mbps for a in access) else None
    for a in access:
        col = f"C{a.terminal - 1}"
        if a.cn_db:
            ax.plot([t for t, _ in a.cn_db], [v for _, v in a.cn_db], color=col, lw=1.2,
                    label=f"terminal {a.terminal} C/N")
            for t, name in a.modcod:
                ax.axvline(t, color=col, lw=0.6, ls=":")
                ax.text(t, ax.get_ylim()[1] if ax.get_ylim() else 0, f" {name}", fontsize=6, rotation=90, va="top",
                        color=col)
        if right is not None and a.granted_mbps:
            right.step([t for t, _ in a.granted_mbps], [v for _, v in a.granted_mbps], where="post", color=col,
                       lw=1.0, ls="--", label=f"terminal {a.terminal} granted")
    ax.set_ylabel("C/N (dB)")
    ax.grid(alpha=0.3)
    if right is not None:
        right.set_ylabel("granted return (Mbit/s)")
    handles = ax.get_legend_handles_labels()[0] + (right.get_legend_handles_labels()[0] if right else [])
    if handles:
        ax.legend(handles=handles, fontsize=6, ncol=2)


def write_svg(ts: TrialSeries, out: Path) -> Path:
    fig = plot(ts)
    try:
        fig.savefig(out, format="svg")
    except OSError as e:
        raise InputError(f"-o {out}: cannot write: {e.strerror}") from None
    finally:
        plt.close(fig)
    return out
