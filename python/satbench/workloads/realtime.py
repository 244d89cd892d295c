"""The real-time web as a workload: long polling, Server-Sent Events, WebSocket
and WebTransport between a browser's ``realtime`` page or the loader's light
clients and satbench-server's ``/rt/`` endpoints (:mod:`satbench.realtime` has
the scenario, its query and its judge). Here: which trials can run one, the
request, the verdict with the server's TCP_NODELAY read back, every message
as a row of ``messages``, and the report's section."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .. import realtime
from ..model import ClientKind, ClientOutcome, Protocol, TrialStatus
from . import Problem, Table, Workload

if TYPE_CHECKING:
    import pandas as pd

    from ..endpoints.base import LoadRequest
    from ..experiment.trialspec import TrialSpec
    from ..link.spec import LinkSpec
    from ..results.read import Results
    from ..results.report import Figures
    from ..results.store import TrialRecord

MESSAGES = Table("messages", ("dir", "sender", "receiver", "seq", "sent_unix_ms", "recv_unix_ms", "latency_ms",
                              "latency_rtt"), """
CREATE TABLE IF NOT EXISTS messages (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    dir TEXT NOT NULL CHECK (dir IN ('down', 'up', 'relay')),
    sender INTEGER NOT NULL,
    receiver INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    sent_unix_ms REAL, recv_unix_ms REAL, latency_ms REAL, latency_rtt REAL,
    PRIMARY KEY (trial_id, sender, receiver, seq)
);
""")


class Realtime(Workload):
    name = "realtime"
    meaning = "a real-time scenario (realtime, scenario, messages, ...) on the realtime page or the loader's clients"
    tables = (MESSAGES,)

    @classmethod
    def claims(cls, trial: TrialSpec) -> bool:
        return trial.realtime is not None or trial.page == "realtime"

    @classmethod
    def problem(cls, t: TrialSpec) -> Problem | None:
        rt = t.realtime
        if rt is None:
            if t.page == "realtime":
                return "page", "the realtime page runs a real-time scenario: set realtime (poll, sse or ws)"
            return None
        if t.page != "realtime":
            return "realtime", "a real-time trial loads the realtime page: page = \"realtime\""
        if t.population is not None or not (t.client.browser or t.client is ClientKind.LOADER):
            return "realtime", ("the real-time client runs in a browser (client = \"chromium\" or \"firefox\") or "
                                "in the loader (client = \"loader\", clients = N light clients)")
        if rt.mechanism == "wt":
            if not t.client.browser:
                return "realtime", "WebTransport runs in a browser (client = \"chromium\" or \"firefox\")"
            if t.protocol is not Protocol.H3 or t.quic_stack != "quinn":
                return "realtime", ("WebTransport is HTTP/3's, on the server's quinn stack: protocol = \"h3\", "
                                    "quic_stack = \"quinn\"")
        elif t.protocol not in (Protocol.H1, Protocol.H2):
            return "realtime", ("poll, sse and ws run over h1 or h2 (the server's HTTP/3 has only WebTransport, "
                                "and no browser opens a WebSocket over HTTP/3): realtime = \"wt\" for HTTP/3")
        if rt.scenario == "room" and (t.client is not ClientKind.LOADER or t.clients < 2):
            return "scenario", "a chat room's members are the loader's clients: client = \"loader\", clients >= 2"
        if t.server.value != "satbench" or t.shards > 1:
            return "realtime", "the real-time endpoints are satbench-server's, on one host (server = \"satbench\")"
        if "proxy" in t.path:
            return "realtime", "the gateway proxy does not pass WebSocket or hold long polls: proxy = \"none\""
        return None

    @classmethod
    def request(cls, trial: TrialSpec, req: LoadRequest, session: str, seed: int) -> LoadRequest:
        rt = trial.realtime
        assert rt is not None
        url = (realtime.loader_url(rt, session=session, seed=seed) if not trial.client.browser
               else req.url + realtime.query(rt, session=session, seed=seed))
        return replace(req, url=url, realtime=rt.mechanism)

    @classmethod
    def server_options(cls, trial: TrialSpec) -> dict[str, Any]:
        return {"webtransport": trial.realtime is not None and trial.realtime.mechanism == "wt"}

    @classmethod
    def judge(cls, rec: TrialRecord, trial: TrialSpec, links: Mapping[str, LinkSpec], outcome: ClientOutcome
              ) -> None:
        """The messages and their metrics (:func:`satbench.realtime.judge`), and the server's
        TCP_NODELAY as read back from its connections."""
        rt = trial.realtime
        assert rt is not None
        summary = rec.server_summary
        v = realtime.judge(rt, str(trial.protocol), realtime.client_results(outcome.raw),
                           (summary.realtime_log if summary else None) or [], links)
        rec.metrics.update(v.metrics)
        rtt = rec.metrics.get("rt_path_rtt_ms")
        rec.rows["messages"] = [(m.dir, m.sender, m.receiver, m.seq, m.sent_unix_ms, m.recv_unix_ms, m.latency_ms,
                                 m.latency_ms / rtt if m.latency_ms is not None and rtt else None)
                                for m in v.messages]
        rec.env["realtime"] = v.env
        want = trial.nodelay
        seen = summary.nodelay if summary else None
        # What the server's connections read back (1: TCP_NODELAY on all; 0: off on all), beside the factor.
        rec.metrics["server_nodelay"] = None if not seen or len(seen) > 1 else float(seen == [True])
        if rec.status is not TrialStatus.VALID:
            return
        if v.failed:
            rec.status, rec.reason = TrialStatus.FAILED, v.failed
        elif v.invalid:
            rec.status, rec.reason = TrialStatus.INVALID, v.invalid
        elif seen != [want] and not (rt.mechanism == "wt" and not seen):  # WebTransport: QUIC only
            rec.status, rec.reason = TrialStatus.INVALID, f"the server's TCP_NODELAY read {seen}, not {want}"

    @classmethod
    def wire_metrics(cls, metrics: Mapping[str, float | None]) -> dict[str, float | None]:
        return realtime.wire_per_message(metrics)

    @classmethod
    def page_bytes(cls, trial: TrialSpec, loaded: int) -> int:
        # The loader's real-time clients load no page: their bytes are messages (rt_wire_*).
        return loaded if trial.client.browser else 0

    @classmethod
    def extra_s(cls, trial: TrialSpec, rtt_s: float) -> float:
        # The scenario's schedule, then its last message's trip.
        rt = trial.realtime
        return 0.0 if rt is None else rt.messages * rt.interval_ms / 1000 + 2 * rtt_s

    @classmethod
    def report(cls, r: Results, experiment: str, valid: Any, varied: list[str], figs: Figures) -> str:
        return _section(r, experiment, valid, varied, figs)


#: What a real-time trial's messages are grouped by, where it varies.
REALTIME_BY = ("realtime", "scenario", "nodelay", "protocol", "client", "clients", "arrivals", "link", "access")
REALTIME_NAMES = {"poll": "long polling", "sse": "Server-Sent Events", "ws": "WebSocket", "wt": "WebTransport"}
#: A message's direction, as the report says it.
DIRECTIONS = {"down": "server to client", "up": "client to server", "relay": "client to client (room)"}


@dataclass(frozen=True)
class TrialMedians:
    """A cell's trials each as one figure, its median one-way latency in a direction: what the
    pooled messages hide is how far the trials of a cell lie apart."""

    median_ms: float
    low_ms: float
    high_ms: float
    #: The median of the trials' medians in units of their path's base RTT (None: no RTT known).
    median_rtt: float | None
    trials: int

    def range_ms(self) -> str:
        """The median and [range] in ms, as the report's table gives them."""
        return f"{self.median_ms:.0f} [{self.low_ms:.0f}-{self.high_ms:.0f}]"

    def __str__(self) -> str:
        rtt = f" ({self.median_rtt:.2f})" if self.median_rtt is not None else ""
        return f"{self.range_ms()}{rtt} n={self.trials}"


def trial_medians(trials: pd.DataFrame, direction: str) -> TrialMedians | None:
    """The trials' (a frame of valid trials' metrics) median one-way latencies in ``direction``
    (``down``, ``up``, ``relay``): their median, range and count (None: no trial has one)."""
    col_ms, col_rtt = f"rt_latency_{direction}_median_ms", f"rt_latency_{direction}_median_rtt"
    if col_ms not in trials or (ms := trials[col_ms].dropna()).empty:
        return None
    rtt = trials[col_rtt].dropna() if col_rtt in trials else ms.iloc[0:0]
    return TrialMedians(float(ms.median()), float(ms.min()), float(ms.max()),
                        None if rtt.empty else float(rtt.median()), len(ms))


def _section(r: Results, name: str, valid: Any, varied: list[str], figs: Figures) -> str:
    """Real-time trials: every message's one-way latency, pooled per
    combination of mechanism, scenario, Nagle and the other varied factors
    and per direction, in ms and in units of the path's base RTT; and its
    distribution per mechanism, one panel per scenario, Nagle on against off."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 - the report's backend, loaded with the report
    import numpy as np  # noqa: PLC0415

    from ..metrics import nearest_rank  # noqa: PLC0415
    from ..results.report import level_order, table_html  # noqa: PLC0415 - the report imports the workloads
    if "realtime" not in valid.columns or "rt_messages" not in valid.columns:
        return ""
    rt = valid[valid["realtime"].fillna("none") != "none"]
    msgs = r.table("messages", name)
    if rt.empty or msgs.empty:
        return ""
    by = [c for c in REALTIME_BY if c in rt.columns and (c in varied or c in ("realtime", "scenario", "nodelay"))]
    cols = ["trial_id", *by, "rt_setup_ms", "rt_first_update_ms"]
    m = msgs.merge(rt[[c for c in cols if c in rt.columns]], on="trial_id")
    m = m[m["latency_ms"].notna()].copy()
    m["rtt"] = m["latency_rtt"]
    rows = []
    for cell, g in m.groupby([*by, "dir"], dropna=False):
        cell = cell if isinstance(cell, tuple) else (cell,)
        lat, rtts = g["latency_ms"].tolist(), g["rtt"].dropna().tolist()
        t = rt.loc[rt["trial_id"].isin(g["trial_id"].unique())]
        per = trial_medians(t, str(cell[-1]))
        rows.append([" ".join(f"{k}={v}" for k, v in zip(by, cell[:-1])), DIRECTIONS.get(str(cell[-1]), cell[-1]),
                     t["trial_id"].nunique(), len(g),
                     "-" if per is None else per.range_ms(),
                     float(t["rt_setup_ms"].median()),
                     float(t["rt_first_update_ms"].median()),
                     statistics.median(lat), nearest_rank(lat, 0.95), max(lat),
                     *((statistics.median(rtts), nearest_rank(rtts, 0.95), max(rtts)) if rtts else ("-",) * 3)])
    out = ("<h3>Real-time web</h3><p class='note'>Every message's one-way latency (its receive stamp minus its "
           "send stamp on the host's one clock: for messages from the server, from when it was due; for a room's, "
           "from when their sender sent them), pooled over the trials of each combination and direction, in ms "
           "and in units of the path's base RTT (95th percentiles by nearest rank); trial medians are each "
           "trial's own median latency, their median and [range] across the combination's trials; set-up is the "
           "client's time to an open channel (an opened long-polling session, an event stream's response, a "
           "WebSocket's open; the median over a trial's clients), first update the time from then to the first "
           "message.</p>"
           + table_html(rows, ["combination", "direction", "trials", "messages", "trial medians (ms)", "set-up (ms)",
                           "first update (ms)", "median (ms)", "p95 (ms)", "max (ms)", "median (RTT)", "p95 (RTT)",
                           "max (RTT)"]))
    scenarios = level_order(m["scenario"]) if "scenario" in m else ["all"]
    fig, axes = plt.subplots(1, len(scenarios), figsize=(4.8 * len(scenarios), 3.4), squeeze=False)
    for ax, sc in zip(axes[0], scenarios):
        d = m[m["scenario"] == sc] if "scenario" in m else m
        # The updates a user sees: from the server, or relayed from another member (the client's own, in
        # the client-update scenario).
        d = d[d["dir"].isin(("up",) if sc == "client" else ("down", "relay"))]
        keys = ["realtime", "nodelay"] if "nodelay" in d.columns else ["realtime"]
        for key, g in d.groupby(keys, dropna=False):
            mech, nd = (*key, True)[:2] if isinstance(key, tuple) else (key, True)
            xs = np.sort(g["rtt"].dropna().to_numpy())
            if len(xs):
                label = REALTIME_NAMES.get(str(mech), str(mech)) + ("" if nd in (None, True) else ", Nagle")
                ax.step(xs, np.arange(1, len(xs) + 1) / len(xs), where="post", label=label,
                        linestyle="-" if nd in (None, True) else "--")
        ax.set_title(f"scenario {sc}", fontsize=9)
        ax.set_xlabel("one-way latency (RTTs)")
        ax.set_ylabel("CDF")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    out += figs.add(fig, "realtime-latency", "One-way latency of the updates by mechanism, per scenario: to "
                    "the client (from the server, or in a room from another member through it), or in the client-"
                    "update scenario to the server (dashed: Nagle's algorithm on at the server)")
    return out
