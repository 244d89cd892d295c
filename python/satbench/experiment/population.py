"""Mixed client populations on one bottleneck (study B): HTTP/1.1, HTTP/2
and HTTP/3 clients of any kind loading the same page at the same instant.

    clients = { h1 = 5, h2 = 5 }                          # 5 + 5 clients of the `client` kind
    clients = { h1 = { n = 5, client = "firefox", connections = 6 }, h3 = 5 }

Each client runs on its own client host behind the same terminal
(``hosts = "shared"`` puts them all on one). Every client prepares (a
browser launches, a loader starts) and then waits for one barrier: a wall
clock instant shared by every namespace. Chromium is told the instant a
second ahead and navigates itself at it, from a timer in its blank page:
asked through its driver at the instant, four browsers on two cores started
as far apart as the driver's round trip on a busy machine (before and
after: docs/benchmarks.md, "Browsers at once"). What each really started at is
measured (a page's ``performance.timeOrigin``, the loader's own clock), and
the **start skew** is the last start minus the first. A trial is valid only
if every client's load is valid, the skew is within its target (5 ms for
loaders, 50 ms with browsers), and the clients had CPU enough: the machine's
idle share, sampled every 100 ms during the load, must have a median of at
least :data:`CPU_IDLE_MIN_PCT` percent (ten browsers on two cores measure the
machine, not the network).

**Fairness**: Jain's index over normalised throughputs,
J = (sum x_i)^2 / (n * sum x_i^2) with x_i = T_i / (C / n): T_i a client's
throughput over its own load (bytes received / its PLT), C the link's
forward rate, C / n the fair share. With equal shares the normalisation does
not change J; it makes x_i readable (1.0 = exactly a fair share).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..endpoints.base import Client, LoadRequest
from ..errors import TestbedError
from ..model import ClientKind, ClientOutcome, ClientResult, ObjectTiming, Protocol, TrialStatus, choices, jain

#: Targets for the start skew, by whether browsers take part (ms).
SKEW_TARGET_MS = {"loader": 5.0, "browser": 50.0}
#: Below this median idle share of the machine's CPU during a load, the clients were starved.
CPU_IDLE_MIN_PCT = 5.0
#: How long the clients may take to get ready (browsers launched) before the population fails.
READY_TIMEOUT_S = 120.0
#: From the last client ready to the common start: a base, and per loader client (its process starts then).
RELEASE_LEAD_S = 0.1
RELEASE_LEAD_PER_LOADER_S = 0.03
#: The base with browsers: each is told the instant and arms a timer in its blank page, one call
#: through its driver each (tens to hundreds of ms apiece on a busy machine), all before the instant.
RELEASE_LEAD_BROWSERS_S = 1.0


@dataclass(frozen=True)
class Group:
    protocol: Protocol
    n: int
    kind: ClientKind
    connections: int


def check(value: Any) -> str | None:
    """Why ``value`` is no level of the ``clients`` factor (None if it is)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return None if 1 <= value <= 200 else f"must be a whole number from 1 to 200, got {value!r}"
    if not isinstance(value, dict) or not value:
        return f"must be a number of clients, or a table of protocols (h1, h2, h3) to clients, got {value!r}"
    total = 0
    groups = [p for p in choices(Protocol) if p != Protocol.H1C]
    for k, v in value.items():
        if k not in groups:
            return f"{k!r}: groups are protocols ({', '.join(groups)})"
        n = v.get("n") if isinstance(v, dict) else v
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= 200:
            return f"{k}: must be a number of clients from 0 to 200, got {n!r}"
        if isinstance(v, dict):
            extra = set(v) - {"n", "client", "connections"}
            if extra:
                return f"{k}: unknown key {sorted(extra)[0]!r} (known: n, client, connections)"
            kinds = [c.value for c in ClientKind if c.in_populations]
            if "client" in v and v["client"] not in kinds:
                return f"{k}.client: must be {', '.join(kinds[:-1])} or {kinds[-1]}, got {v['client']!r}"
            c = v.get("connections", 6)
            if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= 64:
                return f"{k}.connections: must be a whole number from 1 to 64, got {c!r}"
        total += n
    if not 1 <= total <= 200:
        return f"a population of 1 to 200 clients, got {total}"
    return None


def groups(value: Mapping[str, Any], client: ClientKind, connections: int) -> list[Group]:
    """The population a checked ``clients`` table describes: each protocol's clients, of the trial's
    ``client`` kind and ``connections`` unless its group names its own (empty groups left out)."""
    out = []
    for k, v in value.items():
        spec = v if isinstance(v, dict) else {"n": v}
        out.append(Group(Protocol(k), int(spec["n"]), ClientKind(spec.get("client", client)),
                         int(spec.get("connections", connections))))
    return [g for g in out if g.n > 0]


class CpuSampler:
    """The machine's idle share of CPU, sampled every 100 ms while it runs
    (each sample with the unix time at its end)."""

    def __init__(self, period_s: float = 0.1):
        self.period_s = period_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    @staticmethod
    def _read() -> tuple[int, int]:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return idle, sum(fields[:8])

    def _run(self) -> None:
        last = self._read()
        while not self._stop.wait(self.period_s):
            now = self._read()
            d_idle, d_total = now[0] - last[0], now[1] - last[1]
            if d_total > 0:
                self.samples.append((time.time(), 100.0 * d_idle / d_total))
            last = now

    def __enter__(self) -> "CpuSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def median_since(self, t0: float | None) -> float | None:
        """The median idle share over the samples that end after ``t0`` (all, if None): the
        load itself, not the browsers' launch before the barrier."""
        xs = [v for t, v in self.samples if t0 is None or t > t0]
        return statistics.median(xs) if xs else None


def run(population: list[Group], request: LoadRequest, hosts: list[Any], client: Callable[[ClientKind], Client],
        fair_share_mbps: float | None) -> ClientOutcome:
    """Load the page with every client of the population at once; one outcome for all."""
    plan: list[tuple[int, Group]] = [(i, g) for g in population for i in range(g.n)]
    n = len(plan)
    browsers = any(g.kind.browser for g in population)
    loaders = sum(g.n for g in population if not g.kind.browser)
    # One barrier: each client waits at it when ready (a browser launched, a loader about to start);
    # the last to arrive sets the instant, a lead ahead (a loader process must start by then).
    lead_s = (RELEASE_LEAD_BROWSERS_S if browsers else RELEASE_LEAD_S) + (RELEASE_LEAD_PER_LOADER_S * loaders)
    instant: list[float] = []
    barrier = threading.Barrier(n, action=lambda: instant.append(time.time() + lead_s))

    def release() -> float:
        try:
            barrier.wait(timeout=READY_TIMEOUT_S)
        except threading.BrokenBarrierError:
            raise TestbedError(f"the population was not ready within {READY_TIMEOUT_S:g} s "
                               "(a client failed or was too slow to start)") from None
        return instant[0]

    results: list[ClientOutcome | BaseException | None] = [None] * n
    reqs: list[LoadRequest] = []
    for idx, (_, g) in enumerate(plan):
        host = hosts[idx % len(hosts)]
        art = request.artefacts / f"client{idx}" if request.artefacts else None
        if art is not None:
            art.mkdir(parents=True, exist_ok=True)
        reqs.append(replace(request, protocol=g.protocol, host=host, clients=1, connections=g.connections,
                            start_at=None, release=release, artefacts=art))

    def one(idx: int) -> None:
        try:
            results[idx] = client(plan[idx][1].kind).load(reqs[idx])
        except BaseException as e:  # noqa: BLE001 - carried to the caller's thread
            results[idx] = e
            barrier.abort()  # the others stop waiting for this one

    threads = [threading.Thread(target=one, args=(i,), name=f"client{i}") for i in range(n)]
    with CpuSampler() as cpu:
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    failed = [r for r in results if isinstance(r, BaseException) or r is None]
    if failed:
        e = failed[0]
        raise TestbedError(f"a client of the population failed: {e}") from (e if isinstance(e, BaseException) else None)
    outs = [r for r in results if isinstance(r, ClientOutcome)]
    return merge(plan, reqs, outs, fair_share_mbps, cpu.median_since(instant[0] if instant else None),
                 "browser" if browsers else "loader")


def merge(plan: list[tuple[int, Group]], reqs: list[LoadRequest], outs: list[ClientOutcome],
          link_mbps: float | None, cpu_idle_pct: float | None, target: str) -> ClientOutcome:
    """Per client results, per group and overall medians, Jain's index, the start skew and the verdict."""
    n = len(outs)
    clients: list[ClientResult] = []
    objects: list[ObjectTiming] = []
    fair = link_mbps / n if link_mbps else None
    for idx, ((_, g), req, o) in enumerate(zip(plan, reqs, outs, strict=True)):
        c = o.clients[0] if o.clients else None
        thr = c.throughput_mbps if c else None
        clients.append(ClientResult(
            client=idx, valid=o.status is TrialStatus.VALID, reason=o.reason,
            plt_ms=c.plt_ms if c else o.metrics.get("plt_ms"), fcp_ms=c.fcp_ms if c else None,
            lcp_ms=c.lcp_ms if c else None, ttfb_ms=c.ttfb_ms if c else None, bytes=c.bytes if c else None,
            throughput_mbps=thr, group=g.protocol.value, kind=g.kind.value, host=req.host.role,
            start_unix_ms=o.start_unix_ms, connections=int(o.metrics.get("connections_opened") or 0),
            normalised_throughput=thr / fair if thr is not None and fair else None))
        objects += [replace(ob, client=idx) for ob in o.objects]
    out = ClientOutcome(status=TrialStatus.VALID, clients=clients, objects=objects,
                        raw=[o.raw for o in outs])
    starts = [c.start_unix_ms for c in clients if c.start_unix_ms is not None]
    skew = max(starts) - min(starts) if len(starts) == n and n else None
    m: dict[str, float | None] = {k: out.median(k) for k in ("plt_ms", "fcp_ms", "lcp_ms", "ttfb_ms",
                                                             "throughput_mbps")}
    for grp in sorted({c.group for c in clients if c.group}):
        sub = [c for c in clients if c.group == grp]
        for k in ("plt_ms", "fcp_ms", "lcp_ms", "throughput_mbps"):
            xs = [getattr(c, k) for c in sub if getattr(c, k) is not None]
            m[f"{k}_{grp}"] = statistics.median(xs) if xs else None
        m[f"clients_{grp}"] = len(sub)
    norm = [c.normalised_throughput for c in clients if c.normalised_throughput is not None]
    m.update({"jain_throughput": jain(norm) if len(norm) == n else None, "clients_n": n,
              "start_skew_ms": skew, "cpu_idle_median_pct": cpu_idle_pct,
              "connections_opened": sum(c.connections or 0 for c in clients),
              "bytes_received": sum(c.bytes or 0 for c in clients)})
    out.metrics = m
    out.load_s = max((o.load_s or 0.0) for o in outs) if outs else None
    bad = [c for c in clients if not c.valid]
    if bad:
        out.status, out.reason = TrialStatus.INVALID, f"client {bad[0].client} ({bad[0].group}): {bad[0].reason}"
    elif skew is None:
        out.status, out.reason = TrialStatus.INVALID, "the start of some client is unknown: no start skew"
    elif skew > SKEW_TARGET_MS[target]:
        out.status, out.reason = (TrialStatus.INVALID, f"start skew {skew:.1f} ms over the {target} target of "
                                                       f"{SKEW_TARGET_MS[target]:g} ms")
    elif cpu_idle_pct is not None and cpu_idle_pct < CPU_IDLE_MIN_PCT:
        out.status, out.reason = (TrialStatus.INVALID, f"CPU-starved: the machine was {cpu_idle_pct:.1f} % idle "
                                                       f"during the load (median; at least {CPU_IDLE_MIN_PCT:g} % "
                                                       "needed)")
    return out


def by_terminal(clients: list[ClientResult], terminal_of: dict[str, int]) -> dict[str, float | None]:
    """Per satellite terminal (numbered from 1): the median PLT and the
    throughput its clients got together; and Jain's index over the
    terminals' throughputs (each terminal's fair share being equal)."""
    m: dict[str, float | None] = {}
    totals = []
    for k in sorted(set(terminal_of.values())):
        sub = [c for c in clients if c.host is not None and terminal_of.get(c.host) == k]
        plts = [c.plt_ms for c in sub if c.plt_ms is not None]
        thr = [c.throughput_mbps for c in sub if c.throughput_mbps is not None]
        m[f"plt_ms_term{k + 1}"] = statistics.median(plts) if plts else None
        m[f"throughput_mbps_term{k + 1}"] = sum(thr) if len(thr) == len(sub) and sub else None
        totals.append(m[f"throughput_mbps_term{k + 1}"])
    m["jain_terminals"] = jain([x for x in totals if x is not None]) if None not in totals else None
    return m
