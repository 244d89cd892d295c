"""Runs an experiment: every trial in a fresh testbed (namespaces, emulator,
path elements, server, client), its measurements committed to the results
database in one transaction, its artefacts in a folder of its own. Running
the same experiment again runs only the trials that are missing (and those
that failed).

The runner knows the endpoints and path elements only through their
interfaces and registries, and the testbed through a :class:`Lab`; tests
give it a fake lab and fake endpoints. It reports progress as events to a
callback and prints nothing.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from typing import Protocol as Interface

from .. import prereq
from ..bound import (
    CHROMIUM_CONNECTIONS,
    Bottleneck,
    Bound,
    ClientLimits,
    PageShape,
    lower_bound,
    population_bound,
)
from ..endpoints import LoadRequest, ServeRequest, client_class, pages, server_class
from ..endpoints.base import Client, Origin, Server
from ..endpoints.options import ServerOptions
from ..errors import SatbenchError, TestbedError
from ..metrics import object_metrics, page_path
from ..model import (
    HEADER_FLOOR_PCT,
    ClientKind,
    ClientOutcome,
    LinkCounters,
    ObjectTiming,
    Protocol,
    ServerKind,
    ServerSummary,
    TrialStatus,
)
from ..path import PathElement, element_class, elements
from ..results.store import Store, TrialRecord, check_path
from ..testbed import knobs
from ..testbed.cleanup import cleanup
from ..testbed.compose import composed
from ..testbed.host import Host
from ..testbed.testbed import Testbed, TestbedSpec
from ..version import __version__
from ..workloads import workload_of
from . import population
from .design import Trial, trial_key, trial_seed
from .plan import trial_estimate
from .spec import Experiment, resolve_trial_links

METRIC_KEYS = ("plt_ms", "fcp_ms", "lcp_ms", "ttfb_ms")
#: The trial metrics taken from the link's counters (LinkCounters.metrics).
LINK_METRIC_PREFIXES = ("wire_", "oh_", "ecn_", "access_", "encap_", "dama_")
#: A trial's TLS keys (artefact "keylog"), beside its capture (pcap/).
KEYLOG = "tls-keys.log"
#: The metrics no load can make faster than the path's lower bound (bound.py),
#: and the timers' granularity allowed below it.
BOUNDED = ("plt_ms", "last_object_ms")
BOUND_SLACK_MS = 2.0


# -- the environment a trial runs in ---------------------------------------------------


class RunningTestbed(Interface):
    """What the runner needs of a testbed (a real one, or a test's fake)."""

    @property
    def client(self) -> Host: ...

    @property
    def server(self) -> Host: ...

    @property
    def servers(self) -> list[Host]: ...

    @property
    def clients(self) -> list[Host]: ...

    @property
    def link_counters(self) -> LinkCounters | None: ...

    @property
    def client_terminal(self) -> list[int]:
        """Each client host's terminal (0-based index), in the order of :attr:`clients`."""
        ...

    @property
    def effective_tcp_cc(self) -> str | None: ...

    @property
    def terminals(self) -> list[Host]:
        """The satellite terminals' hosts (routers: where a PEP may sit)."""
        ...

    @property
    def gateway(self) -> Host: ...

    def faults(self) -> list[str]: ...

    def udp_dropped(self) -> int | None:
        """UDP packets the gateway dropped (a trial's ``udp`` blocked or policed; None: open)."""
        ...

    def __enter__(self) -> "RunningTestbed": ...

    def __exit__(self, *exc: object) -> None: ...


@dataclass
class Lab:
    """Where trials run: how a testbed is made and which class serves each
    kind of client and server. The default is the real thing."""

    testbed: Callable[[TestbedSpec], AbstractContextManager[Any]] = Testbed
    client: Callable[[ClientKind], type[Client]] = client_class
    server: Callable[[ServerKind], type[Server]] = server_class
    prerequisites: Callable[[], None] = prereq.require_testbed
    #: Installs the optional parts (caddy, Firefox, the proxies) the trials need, before any runs.
    provide: Callable[[set[str]], None] = prereq.provide
    cleanup: Callable[[], list[str]] = cleanup


def _git_commit() -> str | None:
    try:
        git = ["git", "-C", str(prereq.REPO)]
        sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=5).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def _lock_version(crate: str) -> str | None:
    lock = prereq.REPO / "Cargo.lock"
    if not lock.exists():
        return None
    m = re.search(r'name = "' + re.escape(crate) + r'"\nversion = "([^"]+)"', lock.read_text())
    return m.group(1) if m else None


def _file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def static_environment(lab: Lab, kinds: set[ClientKind]) -> dict[str, Any]:
    """What every trial of the sweep shares: versions, kernel, machine."""
    browsers = any(k.browser for k in kinds)
    return {"satbench": __version__, "commit": _git_commit(), "kernel": platform.release(),
            "python": platform.python_version(), "python_lock": _file_sha256(prereq.REPO / "uv.lock"),
            "browser": lab.client(ClientKind.CHROMIUM).version() if browsers else None,
            "firefox": lab.client(ClientKind.FIREFOX).version() if browsers else None,
            "quiche": _lock_version("quiche"), "hyper": _lock_version("hyper"), "rustls": _lock_version("rustls"),
            "cores": os.cpu_count(), "host": platform.node(), "binaries": _binaries(),
            # The browsers' (their flags and prefs); the others' settings are their factors.
            "client_settings": {k.value: s for k in sorted(kinds, key=lambda k: k.value)
                                if k.browser and (s := lab.client(k).settings()) is not None}}


def trial_environment(shared: dict[str, Any], kinds: list[ClientKind]) -> dict[str, Any]:
    """A trial's share of the sweep's environment: the settings of the clients that load in it
    only (a loader trial of a sweep that also runs Chromium carries no Chromium flags)."""
    settings = shared.get("client_settings") or {}
    mine = {k.value for k in kinds}
    return {**shared, "client_settings": {k: v for k, v in settings.items() if k in mine}}


def _binaries() -> dict[str, Any]:
    """The binaries the trials run, where each is and its sha256 (a SATBENCH_*_BIN path, or the
    workspace's build, which the commit alone may not say: a tree built and then changed)."""
    from ..endpoints.loader import loader_binary  # noqa: PLC0415 - the endpoints import the runner's types
    from ..endpoints.satbench_server import server_binary  # noqa: PLC0415

    out: dict[str, Any] = {}
    for name, path in (("satbench-server", server_binary()), ("satbench-link", prereq.link_binary()),
                       ("satbench-load", loader_binary())):
        out[name] = {"path": str(path), "sha256": _file_sha256(path)}
    return out


# -- one trial ---------------------------------------------------------------------------


def trial_bound(t: Trial, pages_root: Path, page_sizes: dict[str, int],
                objects: list[ObjectTiming] | None = None) -> Bound:
    """The physical and window bounds of a trial (bound.py) with each
    client's real limits: HTTP/1.1 connections per origin (Chromium's 6, the
    factor for Firefox and the loader), the handshake of its protocol; for a
    population, the least of its groups' bounds. Only the objects every
    client really fetched count (``objects``: the load's per-object records;
    None: all of the page's)."""
    ts = t.spec
    page = ts.page
    upload = ts.upload_bytes is not None
    path = Bottleneck.of(t.links, upload=upload)
    if ts.single or not ts.client.fetches_objects or not workload_of(ts).generated:
        shape = PageShape(page_sizes.get(page, 0))
    else:
        fetched: set[str] | None = None
        if objects:
            url = pages.url_of(page, shards=ts.shards)
            per: dict[int, set[str]] = {}
            for o in objects:
                if (rel := page_path(o.url, url)) and o.end_ms is not None:
                    per.setdefault(o.client, set()).add(rel)
            fetched = set.intersection(*per.values()) if per else set()
        shape = PageShape.load(pages_root, page, shards=ts.shards, fetched=fetched)
    bounds = [lower_bound(shape, path, limits) for limits in client_limits(t)]
    return min(bounds, key=lambda b: b.lower_bound_ms)


def client_limits(t: Trial) -> list[ClientLimits]:
    """Each client group's limits, as the bounds take them (:func:`trial_bound`)."""
    ts = t.spec
    upload = ts.upload_bytes is not None
    returning = ts.view == "repeat"
    # A warm cache may hold the page if its origins let it: a replayed site's recorded headers may,
    # generated pages only with the server's cache lifetime.
    cached = (returning and ts.cache == "warm" and ClientKind.CHROMIUM in ts.kinds  # the loader keeps no cache
              and (not workload_of(ts).generated or ts.server_options.get("cache_max_age") is not None))
    # Fast Open for a returning loader when the server has it (Chromium sends no Fast Open SYN).
    tfo = bool(ts.server_options.get("tfo"))
    return [ClientLimits(
        g.protocol.version, connections=CHROMIUM_CONNECTIONS if g.kind is ClientKind.CHROMIUM else g.connections,
        tls=g.protocol.tls, dns_rounds=1 if ts.dns_over_link else 0,
        initcwnd=(None if upload else ts.initcwnd_of(g.protocol)) or 10, returning=returning, cached=cached,
        fast_open=returning and tfo and g.kind is ClientKind.LOADER)
        for g in ts.groups]


def fetched_bytes(t: Trial, pages_root: Path, page_sizes: dict[str, int], objects: list[ObjectTiming]) -> int:
    """The page's bytes the trial's clients really loaded: each client's HTML and the objects of the
    page it fetched (once each, by the page's manifest), summed over the clients; without per-object
    records, the whole page once per client. What the protocol overhead is counted against: the
    loader fetches no object a script adds, and a page it only partly loaded is no whole page."""
    ts = t.spec
    page = ts.page
    whole = page_sizes.get(page, 0)
    n = ts.clients
    loaded = whole * n
    if objects and not ts.single:
        sizes = pages.object_sizes(pages_root, page)
        html = whole - sum(sizes.values())
        url = pages.url_of(page, shards=ts.shards)
        per: dict[int, set[str]] = {}
        for o in objects:
            rel = page_path(o.url, url)
            if rel is not None and o.end_ms is not None:
                per.setdefault(o.client, set()).add(rel)
        loaded = sum(html + sum(sizes.get(r, 0) for r in rels if r) for rels in per.values()) or loaded
    return workload_of(ts).page_bytes(ts, loaded)


class _Clock:
    """A trial's timings: marks from its start, the load's own duration."""

    def __init__(self) -> None:
        self.started, self.t0 = time.time(), time.monotonic()
        self.marks: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.marks[name] = time.monotonic() - self.t0

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        t = time.monotonic()
        try:
            yield
        finally:
            self.marks[name] = time.monotonic() - t

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0


class Runner:
    """Runs trials of one experiment in a lab, with one client object per
    kind for the whole sweep (a browser driver starts once)."""

    def __init__(self, exp: Experiment, order_seed: int, pages_root: Path, art_root: Path, lab: Lab | None = None):
        self.exp, self.order_seed, self.pages_root, self.art_root = exp, order_seed, pages_root, art_root
        self.lab = lab or Lab()
        own: dict[str, int] = {}  # pages a workload makes ready itself (a replayed site)
        for t in exp.trials:
            if (size := workload_of(t.spec).prepare(t.spec, pages_root)) is not None:
                own[t.spec.page] = size
        self.page_sizes = {**pages.prepare(pages_root, {t.spec.page for t in exp.trials if t.spec.page not in own}),
                           **own}
        for page, k in {(t.spec.page, t.spec.shards) for t in exp.trials if t.spec.shards > 1}:
            pages.shard(pages_root, page, k)
        self.env = static_environment(self.lab, {k for t in exp.trials for k in t.spec.kinds})
        self.clients: dict[ClientKind, Client] = {}

    def close(self) -> None:
        for c in self.clients.values():
            try:
                c.close()
            except Exception:  # noqa: BLE001 - a driver may have died with Ctrl-C
                pass
        self.clients.clear()

    def client(self, kind: ClientKind) -> Client:
        if kind not in self.clients:
            self.clients[kind] = self.lab.client(kind)()
        return self.clients[kind]

    def run_trial(self, t: Trial, seq: int, art_root: Path | None = None) -> TrialRecord:
        """Build a fresh testbed, start the path elements and the server, run
        the client, tear down. A harness problem comes back as a failed record,
        never as an exception."""
        clock = _Clock()
        seed = trial_seed(self.order_seed, t.key)
        art = (art_root or self.art_root) / t.key
        rec = self._record(t, seq, seed, clock, art)
        outcome = None
        try:
            shutil.rmtree(art, ignore_errors=True)
            art.mkdir(parents=True)
            path = elements(t.spec, t.links)
            set_knobs = list(t.spec.knobs)

            def setup(tb: RunningTestbed) -> None:
                clock.mark("testbed_up_s")
                rec.env["knobs"] = knobs.apply(set_knobs, tb)

            server = self.lab.server(t.spec.server)
            with composed(self._testbed_spec(t, seed, art), path, art, testbed=self.lab.testbed, setup=setup,
                          serve=lambda tb: (server.start(req) for req in self._serve(t, tb, art))) as (tb, servers):
                clock.mark("server_up_s")
                for e in path:
                    e.load_starting(tb)
                with clock.span("client_s"):
                    outcome = self._load(t, tb, art)
                for e in path:
                    e.load_done(tb)
                faults = self._faults(servers, tb, path, set_knobs, rec)
                dropped = tb.udp_dropped()
            rec.server_summary = ServerSummary.combined([s.summary() for s in servers])
            self._collect(rec, tb, path)
            self._judge(rec, t, outcome)
            if dropped is not None:
                rec.metrics["udp_dropped_packets"] = float(dropped)
            if faults:
                rec.status, rec.reason = TrialStatus.FAILED, "; ".join(faults)
        except (SatbenchError, OSError, subprocess.SubprocessError, json.JSONDecodeError, KeyError) as e:
            rec.status, rec.reason = TrialStatus.FAILED, f"{type(e).__name__}: {e}"[:2000]
        return self._finish(rec, t, clock, art, outcome)

    def _testbed_spec(self, t: Trial, seed: int, art: Path) -> TestbedSpec:
        """The trial's testbed, before its path elements shape it."""
        spec = TestbedSpec(link=t.link, seed=seed, clients=t.spec.hosts_needed, servers=t.spec.shards,
                           terminals=t.spec.terminals, dns=t.spec.dns_over_link, ip=t.spec.ip,
                           ip_drop=t.spec.ip_drop, udp=t.spec.udp,
                           pcap_dir=art / "pcap" if "pcap" in self.exp.artefacts else None)
        workload_of(t.spec).configure(t.spec, spec)
        return spec

    @staticmethod
    def _faults(servers: list[Server], tb: RunningTestbed, path: list[PathElement], set_knobs: list[knobs.Knob],
                rec: TrialRecord) -> list[str]:
        """Why the load is no measurement of the path: a part that died during
        it, or a knob that no longer reads as set (read again, and recorded)."""
        faults = [f for f in (*(s.fault() for s in servers), *tb.faults(), *(e.fault() for e in path)) if f]
        rec.env["knobs_after_load"], drift = knobs.reread(set_knobs, tb)
        return faults + drift

    @staticmethod
    def _collect(rec: TrialRecord, tb: RunningTestbed, path: list[PathElement]) -> None:
        """After teardown (an emulated element's counters come when it stops):
        the path elements' summaries and metrics, the server's, the link's."""
        for e in path:
            if summary := e.summary():
                rec.env.setdefault("path", {})[e.factor] = summary
            rec.metrics.update(e.metrics())
        assert rec.server_summary is not None
        rec.server_summary.tcp_cc_route = tb.effective_tcp_cc
        rec.metrics.update(rec.server_summary.limited_shares())
        rec.metrics.update(rec.server_summary.connection_metrics())  # as the origins counted them
        rec.link_counters = None if tb.link_counters is None else tb.link_counters.raw

    def _record(self, t: Trial, seq: int, seed: int, clock: _Clock, art: Path) -> TrialRecord:
        env = {**trial_environment(self.env, t.spec.kinds), "loadavg": os.getloadavg(), "emulator_seed": seed,
               "order_seed": self.order_seed}
        return TrialRecord(key=t.key, rep=t.rep, seq=seq, factors=t.factors, scenarios=t.scenarios,
                           status=TrialStatus.FAILED, reason=None, started=clock.started, duration_s=0.0,
                           overhead_s=None, seed=seed, env=env, links=t.links, artefacts=str(art))

    def _serve(self, t: Trial, tb: RunningTestbed, art: Path) -> list[ServeRequest]:
        """An origin on the first server host, and on each further shard host
        of a sharded page (its logs in a folder of its own under server/)."""
        ts = t.spec
        given = dict(ts.server_options)
        window = self._quic_window(t)
        if window is not None:
            given.setdefault("quic_max_data", window)
            given.setdefault("quic_max_stream_data", window)
        given.update(workload_of(ts).server_options(ts))  # what the workload needs of the server, over the rest
        opts = ServerOptions(quic_stack=ts.quic_stack, nodelay=ts.nodelay, keylog="keylog" in self.exp.artefacts,
                             **given)
        origins = workload_of(ts).origins(ts, self.pages_root) or [Origin(self.pages_root)] * ts.shards
        # (A host's second server, for a recorded origin on another port, logs in a folder of its own.)
        return [ServeRequest(root=o.root, log_dir=art / "server" / (h.role if j else "") / (
                                 f"port-{https or http}" if k else ""),
                             host=h, cc=ts.cc, options=dataclasses.replace(opts, **dict(o.options)),
                             telemetry="server" in self.exp.artefacts, cert=o.cert,
                             replay=o.replay, https_port=https, http_port=http)
                for j, (h, o) in enumerate(zip(tb.servers, origins)) for k, (https, http) in enumerate(o.listeners)]

    def _load(self, t: Trial, tb: RunningTestbed, art: Path) -> ClientOutcome:
        """The trial's load: one client (of any kind), or a population released at once."""
        if t.spec.population is None:
            return self.client(t.spec.client).load(self._request(t, tb, art))
        fair = t.link.forward.mean_mbps
        out = population.run(list(t.spec.population), self._request(t, tb, art), tb.clients, self.client, fair)
        if len(set(tb.client_terminal)) > 1:
            out.metrics.update(population.by_terminal(out.clients, dict(
                zip((h.role for h in tb.clients), tb.client_terminal))))
            out.env["client_terminals"] = {h.role: k + 1 for h, k in zip(tb.clients, tb.client_terminal)}
        return out

    def _request(self, t: Trial, tb: RunningTestbed, art: Path) -> LoadRequest:
        ts = t.spec
        url = pages.url_of(ts.page, shards=ts.shards, scheme=ts.protocol.scheme if ts.protocol else "https")
        req = LoadRequest(url=url, origins=pages.shard_hosts(ts.shards), protocol=ts.protocol or Protocol.H2,
                          host=tb.client, timeout_s=self.exp.timeout_s, clients=1 if ts.population else ts.clients,
                          connections=ts.connections, artefacts=art, keep=frozenset(self.exp.artefacts),
                          quic_stack=ts.quic_stack, quic_window=self._quic_window(t), cpu_slowdown=ts.cpu_slowdown,
                          device=ts.device, repeat_view=ts.view == "repeat", cold_cache=ts.cache == "cold",
                          # Fast Open acts on a returning client only (a first view's loads keep theirs off).
                          tfo=ts.view == "repeat" and bool(ts.server_options.get("tfo")), schedule=ts.schedule,
                          # HTTP/3 from Alt-Svc, as a browser comes to it: nothing forced, nothing judged.
                          negotiate=ts.h3_discovery == "alt-svc")
        return workload_of(ts).request(ts, req, session=t.key, seed=trial_seed(self.order_seed, t.key))

    @staticmethod
    def _quic_window(t: Trial) -> int | None:
        """The QUIC windows a trial sets: none (each stack's own), bytes, or twice the path's BDP."""
        w = t.spec.quic_window
        if w == "stack":
            return None
        if w == "bdp":
            rate = t.link.forward.mean_bps
            return None if rate is None else max(262_144, int(2 * rate / 8 * t.link.base_rtt_ms / 1e3))
        return int(w)

    @staticmethod
    def _judge(rec: TrialRecord, t: Trial, outcome: ClientOutcome) -> None:
        """The client's judgement, and what the server really did: a trial
        whose server used another congestion control than asked is invalid."""
        rec.status, rec.reason = outcome.status, outcome.reason
        if outcome.env:
            rec.env["client"] = outcome.env
        if t.spec.schedule is not None:  # what the loader's clients replayed, by content
            f = Path(t.spec.schedule)
            rec.env["schedule"] = {"file": str(f.resolve()), "sha256": _file_sha256(f)}
        rec.metrics.update(outcome.metrics)
        rec.objects, rec.clients = outcome.objects, outcome.clients
        if t.spec.h3_discovery == "alt-svc":
            # What a browser that came to HTTP/3 by Alt-Svc used: never counted as HTTP/3 where it fell back.
            https = [o for o in rec.objects if o.url.startswith("https://") and o.protocol]
            share = sum(o.protocol == "h3" for o in https) / len(https) if https else 0.0
            rec.metrics["h3_share"] = share
            rec.metrics["fell_back"] = float(share == 0.0)
        used = rec.server_summary.cc if rec.server_summary else None
        ts = t.spec
        if rec.status is TrialStatus.VALID and used and used != [ts.cc.value]:
            rec.status, rec.reason = TrialStatus.INVALID, f"the server used {', '.join(used)}, not {ts.cc.value}"
        stack = ts.quic_stack
        stacks = rec.server_summary.quic_stacks if rec.server_summary else None
        if rec.status is TrialStatus.VALID and stacks and stacks != [stack]:
            rec.status = TrialStatus.INVALID
            rec.reason = f"the server's QUIC stack was {', '.join(stacks)}, not {stack}"
        tls = rec.server_summary.tls if rec.server_summary else None
        # (A recorded site's http:// origins are cleartext beside its TLS ones.)
        mixed = tls == [False, True] and ts.protocol is not None and ts.protocol.tls and \
            workload_of(ts).mixes_cleartext(ts)
        if (rec.status is TrialStatus.VALID and tls and ts.protocol is not None and tls != [ts.protocol.tls]
                and not mixed):
            rec.status = TrialStatus.INVALID
            rec.reason = (f"the server saw {'TLS' if True in tls else 'cleartext'} requests, not only "
                          f"{'TLS' if ts.protocol.tls else 'cleartext'} ones")
        workload_of(ts).judge(rec, ts, t.links, outcome)

    def _bound(self, rec: TrialRecord, t: Trial) -> None:
        """Store the trial's lower bounds and their terms (bound.py). A load
        faster than the physical one is the harness's error: the trial fails
        saying which number broke it. One faster than the window bound is the
        sender's doing (a window that grew faster than any standard
        start-up): kept, and marked (beats_window_bound)."""
        bound = trial_bound(t, self.pages_root, self.page_sizes, rec.objects if rec.objects else None)
        rec.metrics.update(bound.metrics())
        measured = [(name, v) for name in BOUNDED if (v := rec.metrics.get(name)) is not None]
        if measured:
            rec.metrics["beats_window_bound"] = float(any(v < bound.window_bound_ms for _, v in measured))
        shared = self._population_bound(rec, t)
        if rec.status is not TrialStatus.VALID:  # a failed or invalid load keeps its own reason
            return
        if shared is not None:
            span, bound_ms = shared
            if span < bound_ms - BOUND_SLACK_MS:
                rec.status = TrialStatus.FAILED
                rec.reason = (f"harness error: the population's loads spanned {span:.1f} ms, below the physical "
                              f"lower bound of its shared link {bound_ms:.1f} ms (every client's bytes through "
                              f"one bottleneck)")
                return
        for name, v in measured:
            if v < bound.lower_bound_ms - BOUND_SLACK_MS:
                rec.status = TrialStatus.FAILED
                rec.reason = (f"harness error: {name} {v:.1f} ms is below the physical lower bound "
                              f"{bound.lower_bound_ms:.1f} ms ({bound.critical}: {bound.rounds:g} round trips "
                              f"of {bound.rtt_ms:.1f} ms + {bound.serial_ms:.1f} ms of bytes)")
                return

    def _population_bound(self, rec: TrialRecord, t: Trial) -> tuple[float, float] | None:
        """For clients loading together through one bottleneck: the time from the first client's
        start to the last one's end (each client's start plus its PLT), and the shared link's bound
        on it (:func:`satbench.bound.population_bound`), both stored with their ratio. None for one
        client, or where a client's PLT is missing."""
        done = [c for c in rec.clients if c.plt_ms is not None]
        if t.spec.clients < 2 or len(done) < 2 or len(done) != len(rec.clients):
            return None
        total = fetched_bytes(t, self.pages_root, self.page_sizes, rec.objects)
        path = Bottleneck.of(t.links, upload=t.spec.upload_bytes is not None)
        bound_ms = population_bound(total, path, client_limits(t))
        if all(c.start_unix_ms is not None for c in done):
            first = min(float(c.start_unix_ms) for c in done)  # type: ignore[arg-type]
            span = max(float(c.start_unix_ms) + float(c.plt_ms) for c in done) - first  # type: ignore[arg-type]
        else:
            span = max(float(c.plt_ms) for c in done)  # type: ignore[arg-type]
        rec.metrics["population_span_ms"] = span
        rec.metrics["population_bound_ms"] = bound_ms
        if bound_ms > 0:
            rec.metrics["population_span_over_bound"] = span / bound_ms
        return span, bound_ms

    def _finish(self, rec: TrialRecord, t: Trial, clock: _Clock, art: Path, outcome: ClientOutcome | None
                ) -> TrialRecord:
        page = t.spec.page
        page_total = fetched_bytes(t, self.pages_root, self.page_sizes, rec.objects)
        if outcome is not None and rec.objects:
            rec.metrics.update(object_metrics(rec.objects, pages.url_of(page, shards=t.spec.shards),
                                              pages.object_sizes(self.pages_root, page)))
        if rec.link_counters is not None:
            try:
                rec.metrics.update(LinkCounters.parse(rec.link_counters).metrics(page_total))
            except ValueError as e:  # the emulator's counters contradict themselves: nothing of them is kept
                rec.status, rec.reason = TrialStatus.FAILED, f"harness error: {e}"
        shared = any(element_class(f).shares_link for f in t.spec.path)
        if shared or t.spec.view == "repeat":
            # The link's counters hold other traffic too (cross traffic), or both views of a repeat
            # view: they are not this load's bytes.
            for k in [k for k in rec.metrics if k.startswith(LINK_METRIC_PREFIXES)
                      or k in ("overhead_pct", "link_drops", "modcod_changes")]:
                del rec.metrics[k]
        down = all((not isinstance(v, dict)) or v.get("direction", "down") == "down" for v in t.spec.path.values())
        if shared and down:
            mine, theirs = rec.metrics.get("bytes_received"), rec.metrics.get("cross_bytes")
            if mine and theirs is not None:  # the load's share of what came down while it ran
                rec.metrics["load_share"] = mine / (mine + theirs)
        if rec.status is not TrialStatus.VALID:
            # A load that did not complete (timed out, failed) delivered part of the page: its bytes on
            # the wire are no overhead over the page's.
            rec.metrics.pop("overhead_pct", None)
        rec.metrics.update(workload_of(t.spec).wire_metrics(rec.metrics))
        self._bound(rec, t)
        oh = rec.metrics.get("overhead_pct")
        if rec.status is TrialStatus.VALID and oh is not None and oh < HEADER_FLOOR_PCT:
            rec.status = TrialStatus.FAILED
            rec.reason = (f"harness error: the protocol overhead {oh:.2f} % is below the TCP/IP header floor "
                          f"({HEADER_FLOOR_PCT:.2f} %): the page's bytes counted are not the bytes loaded")
        rec.metrics.update(clock.marks)
        if "keylog" in self.exp.artefacts:
            # Every origin's TLS keys (SSLKEYLOGFILE format) beside the capture: what decrypts it.
            keys = b"".join(f.read_bytes() for f in sorted((art / "server").rglob("keys.log")))
            (art / KEYLOG).write_bytes(keys)
        if "server" not in self.exp.artefacts:
            shutil.rmtree(art / "server", ignore_errors=True)
        raw = outcome.raw if outcome is not None else None
        try:
            (art / "client.json").write_text(json.dumps(raw, default=str) if raw is not None else "null")
        except OSError as e:  # a full disk, say: the trial's evidence is incomplete, and is removed
            shutil.rmtree(art, ignore_errors=True)
            if rec.status is not TrialStatus.FAILED:
                rec.status, rec.reason = TrialStatus.FAILED, f"artefacts in {art}: {e.strerror}"
        rec.duration_s = clock.elapsed
        load_s = outcome.load_s if outcome is not None else None
        rec.overhead_s = rec.duration_s - load_s if load_s is not None else None
        return rec


# -- the sweep -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    experiment: str
    db: Path
    planned: int
    already: int
    todo: int
    seed: int
    migrated_from: int


@dataclass(frozen=True)
class WarmUp:
    index: int
    count: int
    trial: Trial


@dataclass(frozen=True)
class TrialDone:
    done: int
    planned: int
    elapsed_s: float
    eta_s: float
    trial: Trial
    record: TrialRecord
    cell: str
    cell_median_ms: float | None


@dataclass(frozen=True)
class Interrupted:
    ran: int
    signal: int = signal.SIGINT


@dataclass(frozen=True)
class Waiting:
    """The run waits for something outside it (a database another writer holds)."""

    reason: str


Event = Started | WarmUp | TrialDone | Interrupted | Waiting


@dataclass
class RunSummary:
    experiment: str
    db: Path
    planned: int
    already: int
    ran: int = 0
    valid: int = 0
    invalid: int = 0
    failed: int = 0
    interrupted: bool = False
    #: The signal that interrupted the run (SIGINT, SIGTERM, SIGHUP), if one did.
    signal: int | None = None
    seconds: float = 0.0
    reasons: dict[str, int] = field(default_factory=dict)


def _v1_links(factors: dict[str, Any], config: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {role: s.to_json() for role, s in resolve_trial_links(factors, config).items()}


def _key(factors: dict[str, Any], rep: int, hashes: dict[str, str]) -> str:
    return trial_key(factors, rep, hashes)


def done_keys(db: sqlite3.Connection, version: int, experiment_id: int) -> frozenset[str]:
    """The keys of a study's stored trials that need not run again (all but
    the failed), read only: a satbench 0.1 database's (schema 1) under the
    keys they will have once migrated, computed as the migration computes them."""
    if version >= 2:
        return frozenset(k for (k,) in db.execute(
            "SELECT key FROM trials WHERE experiment_id = ? AND status != 'failed'", (experiment_id,)))
    out = set()
    for factors, rep, counters in db.execute("SELECT factors, rep, link_counters FROM trials "
                                             "WHERE experiment_id = ? AND status != 'failed'", (experiment_id,)):
        f = json.loads(factors)
        ran = (json.loads(counters) or {}).get("config") if counters else None
        try:
            out.add(_key(f, int(rep), {role: s.hash for role, s in resolve_trial_links(f, ran).items()}))
        except (SatbenchError, KeyError, ValueError, TypeError):  # a stored trial today's factors cannot read
            continue
    return frozenset(out)


def open_store(db: Path, timeout_s: float = 30) -> Store:
    """The results database for writing, migrated to the current schema
    (a satbench 0.1 database gets the links its trials really ran)."""
    return Store(db, resolve_links=_v1_links, make_key=_key, timeout_s=timeout_s)


#: How many times a trial's write waits for a database another writer holds.
LOCK_ATTEMPTS = 10


T = TypeVar("T")


def _patient(store: Store, what: str, write: Callable[[], T], report: Callable[[Event], None]) -> T:
    """Write to the database, waiting (and saying so) while another writer holds it."""
    for attempt in range(1, LOCK_ATTEMPTS + 1):
        try:
            return write()
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) and "busy" not in str(e):
                raise
            report(Waiting(f"{store.path} is locked by another writer (try {attempt} of {LOCK_ATTEMPTS})"))
    raise TestbedError(f"{store.path}: locked by another writer for {LOCK_ATTEMPTS} tries of {store.timeout_s:g} s; "
                       f"{what} (run the same command again to resume)")


class Executor(Interface):
    """Where a sweep's trials run: here, one after another (:class:`Sequential`),
    or elsewhere (a cluster's workers). It yields each trial's record as it
    finishes, in any order; the sweep stores each as it arrives."""

    def results(self, todo: list[tuple[Trial, int]]) -> Iterator[tuple[Trial, TrialRecord]]: ...

    def close(self) -> None: ...


class Sequential:
    """The trials one after another, in this process."""

    def __init__(self, runner: Runner):
        self.runner = runner

    def results(self, todo: list[tuple[Trial, int]]) -> Iterator[tuple[Trial, TrialRecord]]:
        for t, seq in todo:
            yield t, self.runner.run_trial(t, seq)

    def close(self) -> None:
        pass


def run(exp: Experiment, db: Path, *, progress: Callable[[Event], None] | None = None, art_root: Path | None = None,
        pages_root: Path | None = None, lab: Lab | None = None, db_timeout_s: float = 30,
        executor: Callable[[Runner], Executor] | None = None) -> RunSummary:
    """Run the experiment's missing trials. SIGINT (Ctrl-C), SIGTERM and SIGHUP
    stop the run after tearing the current trial down (it is not stored: a
    trial cut short is no result); what finished is kept."""
    report = progress or (lambda e: None)
    lab = lab or Lab()
    check_path(Path(db))
    lab.prerequisites()
    lab.provide(set().union(*(prereq.parts_of(t.spec.factors) for t in exp.trials))
                | ({"ffmpeg"} if "video" in exp.artefacts else set()))
    lab.cleanup()  # what runs killed before (SIGKILL, power loss) left behind; live testbeds are not touched
    db = Path(db)
    with open_store(db, db_timeout_s) as store:
        found = store.experiment(exp.name)
        order = exp.run_order(found.seed if found else None)
        eid = _patient(store, "nothing ran", lambda: store.begin_experiment(
            exp.name, exp.file, exp.text, exp.spec_json(order.seed), order.seed), report)
        done = store.done(eid)
        todo = [t for t in order.trials if t.key not in done]
        # (of this run's trials: a run of some of a file's scenarios leaves the others' stored trials aside)
        already = len(order.trials) - len(todo)
        summary = RunSummary(experiment=exp.name, db=db, planned=len(order.trials), already=already)
        runner = Runner(exp, order.seed, pages_root or db.parent / "pages",
                        (art_root or db.parent / "artefacts") / exp.name, lab)
        report(Started(exp.name, db, len(order.trials), already, len(todo), order.seed, store.migrated_from))
        t_start = time.monotonic()
        stopping: list[int] = []

        def on_signal(signum: int, frame: Any) -> None:
            stopping.append(signum)
            raise KeyboardInterrupt

        stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        previous = {s: signal.signal(s, on_signal) for s in stops}
        closing: list[Executor] = []
        try:
            # Warm-ups run here, one after another; an executor elsewhere warms its own testbeds (its workers).
            for i, t in enumerate(todo[:exp.warmup] if executor is None else [], 1):
                report(WarmUp(i, exp.warmup, t))
                runner.run_trial(t, 0, runner.art_root / "_warmup")
            shutil.rmtree(runner.art_root / "_warmup", ignore_errors=True)
            est_left = sum(trial_estimate(t) for t in todo)
            spent_est, spent_real = 0.0, 0.0
            cells: dict[str, list[float]] = {}
            where = (executor or Sequential)(runner)
            closing.append(where)
            for i, (t, rec) in enumerate(where.results([(t, len(done) + k) for k, t in enumerate(todo, 1)]), 1):
                if stopping:
                    raise KeyboardInterrupt  # a trial cut short by a signal is not a result
                _patient(store, "the last trial is not stored", functools.partial(store.write_trial, eid, rec), report)
                summary.ran += 1
                setattr(summary, rec.status.value, getattr(summary, rec.status.value) + 1)
                if rec.reason and rec.status is not TrialStatus.VALID:
                    summary.reasons[rec.reason[:120]] = summary.reasons.get(rec.reason[:120], 0) + 1
                est = trial_estimate(t)
                spent_est, spent_real, est_left = spent_est + est, spent_real + rec.duration_s, est_left - est
                cell = " ".join(f"{k}={t.spec.factors[k]}" for k in exp.varied
                                if k in t.spec.factors and t.spec.applies(k)) or "all"
                plt = rec.metrics.get("plt_ms")
                if plt is not None and rec.status is TrialStatus.VALID:
                    cells.setdefault(cell, []).append(plt)
                report(TrialDone(already + i, len(order.trials), time.monotonic() - t_start,
                                 est_left * (spent_real / spent_est if spent_est else 1.0), t, rec, cell,
                                 statistics.median(cells[cell]) if cells.get(cell) else None))
        except KeyboardInterrupt:
            summary.interrupted = True
            summary.signal = stopping[0] if stopping else signal.SIGINT
            report(Interrupted(summary.ran, summary.signal))
        finally:
            for s, h in previous.items():
                signal.signal(s, h)
            for c in closing:
                c.close()
            runner.close()
        summary.seconds = time.monotonic() - t_start
        return summary


__all__ = ["Event", "Executor", "Interrupted", "Lab", "RunSummary", "Runner", "Sequential", "Started", "TrialDone",
           "Waiting", "WarmUp", "open_store", "run", "static_environment"]
