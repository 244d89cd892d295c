"""One trial, typed once.

An experiment file's factors are checked level by level
(:mod:`.factors`) and combined into trials (:mod:`.spec`); each trial's
complete factor values (every default filled) become a :class:`TrialSpec`
here, once, and every later room (the planner, the estimate, the runner, the
bound, the real-time judge, the endpoints' and path elements' checks) reads
its typed fields. Nothing after this module calls ``factors.get(key,
default)``: a default lives in its factor's definition and is read here.

The factor values themselves are kept (:attr:`TrialSpec.factors`, a read-only
``Mapping`` to the type checker; a plain dict so that a trial pickles for Dask):
they are what the results database stores and what the trial's key hashes
(:func:`.factors.keyed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..endpoints import pages
from ..endpoints.options import experiment_keys
from ..model import ClientKind, CongestionControl, Protocol, ServerKind
from ..path import ELEMENTS, element_class
from ..realtime import RealtimeSpec
from ..testbed.knobs import Knob, from_factors
from . import population as populations
from .factors import FACTORS
from .population import Group

#: The protocol factor of a population: each group's protocol is its own.
MIX = "mix"


def complete(given: Mapping[str, Any]) -> dict[str, Any]:
    """The factor values with every defaulted factor filled in: the named
    factors in their registry's order, then the families (``link.*``,
    ``server.*``, knobs) in name order. A required factor left out stays out
    (the experiment's parser names it)."""
    full: dict[str, Any] = {}
    for k, fac in FACTORS.items():
        if k in given:
            full[k] = given[k]
        elif fac.default is not None:
            full[k] = fac.default
    for k in sorted(given):
        if k not in FACTORS:
            full[k] = given[k]
    return full


def _quic_window(v: Any) -> str | int:
    return v if v in ("stack", "bdp") else int(v)


@dataclass(frozen=True, eq=False)
class TrialSpec:
    """What one trial is, as every room after the parser reads it. Frozen; compared and hashed by
    identity (its factor values are dicts): a trial's identity is its key (:mod:`.design`)."""

    #: Every factor's value, defaults filled (read-only): what is stored and keyed.
    factors: Mapping[str, Any] = field(repr=False)
    link: str
    #: None for a population (each group has its own).
    protocol: Protocol | None
    cc: CongestionControl
    page: str
    client: ClientKind
    #: The mixed population (None: ``clients`` of the one client kind).
    population: tuple[Group, ...] | None
    #: How many clients load at once (a population's total).
    clients: int
    connections: int
    server: ServerKind
    #: A population's client hosts: one each (``each``) or one for all (``shared``).
    hosts: str
    terminals: int
    shards: int
    realtime: RealtimeSpec | None
    nodelay: bool
    #: ``local`` (hosts files) or ``link`` (a DNS server across the link).
    dns: str
    #: The address family of the trial's traffic: ``v4``, ``v6`` or ``dual``.
    ip: str
    #: A family the gateway drops (``v6``, ``v4``), or None.
    ip_drop: str | None
    #: UDP at the gateway: ``open``, ``blocked`` or ``policed:KBITS``; and how a browser comes to HTTP/3
    #: (``forced`` or ``alt-svc``).
    udp: str
    h3_discovery: str
    quic_stack: str
    #: A browser's CPU throttling (1: none) and emulated device.
    cpu_slowdown: float
    device: str
    #: ``first`` or ``repeat`` (a browser's second load of the page, in the same profile), and a repeat
    #: view's HTTP cache (``warm`` or ``cold``).
    view: str
    cache: str
    #: ``stack``, ``bdp`` or bytes.
    quic_window: str | int
    #: The loader's request schedule (a file; None: it discovers the page's objects).
    schedule: str | None
    #: The satbench server's options the trial sets (``server.OPTION``), by option name.
    server_options: Mapping[str, Any]
    #: Link-profile overrides (``link.KEY``), as ``--set KEY=VALUE`` takes them.
    link_overrides: Mapping[str, Any]
    #: The path elements placed (their factor's value; absent ones left out).
    path: Mapping[str, Any]

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> TrialSpec:
        """The trial of a combination of factor values (checked level by level already)."""
        f = complete(given)
        if f.keys() == given.keys():
            f = dict(given)  # complete already: its order is the stored one (a population's protocol last)
        client = ClientKind(str(f["client"]))
        groups = (populations.groups(f["clients"], client, int(f["connections"])) if isinstance(f["clients"], dict)
                  else None)
        proto = str(f["protocol"])
        size = sum(g.n for g in groups) if groups is not None else int(f["clients"])
        rt = None
        if f["realtime"] != "none":
            rt = RealtimeSpec(mechanism=str(f["realtime"]), scenario=str(f["scenario"]), messages=int(f["messages"]),
                              message_bytes=int(f["message_bytes"]), interval_ms=float(f["interval_ms"]),
                              arrivals=str(f["arrivals"]), clients=1 if client.browser else size)
        names = experiment_keys()
        return cls(
            factors=f, link=str(f["link"]),
            protocol=None if groups is not None or proto == MIX else Protocol(proto),
            cc=CongestionControl(str(f["cc"])), page=str(f["page"]), client=client,
            population=tuple(groups) if groups is not None else None, clients=size,
            connections=int(f["connections"]), server=ServerKind(str(f["server"])), hosts=str(f["hosts"]),
            terminals=int(f["terminals"]), shards=int(f["shards"]), realtime=rt, nodelay=bool(f["nodelay"]),
            dns=str(f["dns"]), ip=str(f["ip"]), ip_drop=None if f["ip_drop"] == "none" else str(f["ip_drop"]),
            udp=str(f["udp"]), h3_discovery=str(f["h3_discovery"]),
            quic_stack=str(f["quic_stack"]),
            quic_window=_quic_window(f["quic_window"]),
            cpu_slowdown=float(f["cpu_slowdown"]), device=str(f["device"]), view=str(f["view"]),
            cache=str(f["cache"]), schedule=None if f["schedule"] == "discover" else str(f["schedule"]),
            server_options={k[7:]: v for k, v in f.items() if k.startswith("server.") and k[7:] in names},
            link_overrides={k[5:]: v for k, v in f.items() if k.startswith("link.")},
            path={k: f[k] for k in ELEMENTS if k in f and f[k] != element_class(k).default})

    # -- derived, each in one place ------------------------------------------------------

    @property
    def kinds(self) -> list[ClientKind]:
        """The client kinds that load (a population's groups', or the one)."""
        return [g.kind for g in self.population] if self.population is not None else [self.client]

    @property
    def groups(self) -> list[Group]:
        """The clients as groups: a population's, or one group of the one kind and protocol."""
        if self.population is not None:
            return list(self.population)
        assert self.protocol is not None
        return [Group(self.protocol, self.clients, self.client, self.connections)]

    @property
    def upload_bytes(self) -> int | None:
        """The bytes an upload POSTs (None: the trial downloads)."""
        return pages.upload_size(self.page)

    @property
    def single(self) -> bool:
        """One file (``bulk:`` or ``upload:``), not a page of objects."""
        return self.page.startswith(("bulk:", "upload:"))

    def applies(self, factor: str) -> bool:
        """Whether a factor has any say in this trial: a QUIC stack or window only where some client
        speaks HTTP/3 (what a progress line and a cell's name show)."""
        if factor in ("quic_stack", "quic_window"):
            return any(g.protocol is Protocol.H3 for g in self.groups)
        return True

    @property
    def hosts_needed(self) -> int:
        """Client hosts: one per client, or one for all (``hosts = "shared"``)."""
        return 1 if self.hosts == "shared" else self.clients

    @property
    def dns_over_link(self) -> bool:
        return self.dns == "link"

    def initcwnd_of(self, protocol: Protocol) -> int | None:
        """The server's initial window the trial sets for a client of ``protocol`` (None: the sender's own)."""
        v = self.server_options.get("quic_initcwnd" if protocol is Protocol.H3 else "tcp_initcwnd")
        return None if v is None else int(v)

    @cached_property
    def knobs(self) -> tuple[Knob, ...]:
        """The sysctl and offload settings the trial makes on its hosts."""
        return tuple(from_factors(dict(self.factors)))

    def get(self, name: str) -> Any:
        """A factor's value by name (defaults filled; None if the trial has no such factor):
        for code that is handed a factor's name, such as a report's grouping or a block."""
        return self.factors.get(name)


def shards_problem(t: TrialSpec) -> tuple[str, str] | None:
    """Why a trial cannot shard its page, as (factor, why) (None if it can, or does not shard)."""
    if t.shards <= 1:
        return None
    if t.single or t.page == "blank":
        return "shards", f"the page {t.page} has no objects to spread over shards"
    if not all(k.fetches_objects for k in t.kinds):
        return "shards", "a sharded page needs a client that loads its objects (a browser or the loader)"
    if t.server is not ServerKind.SATBENCH:
        return "shards", "the shards are satbench servers (their logs count each origin's connections)"
    return None


def schedule_problem(t: TrialSpec) -> tuple[str, str] | None:
    """Why a trial's loader clients cannot replay its schedule (None if they can, or discover the page)."""
    if t.schedule is None:
        return None
    if ClientKind.LOADER not in t.kinds:
        return "schedule", ("a schedule shapes the loader's clients: client = \"loader\", or a population with "
                            "loader clients (browsers make their own)")
    if t.single or t.upload_bytes is not None or t.realtime is not None:
        return "schedule", "a schedule replays a page's requests, not a bulk file, an upload or a real-time scenario"
    from ..endpoints import loader, schedule  # noqa: PLC0415 - the loader's check, where a trial asks for one

    binary = loader.loader_binary()
    if not binary.exists():  # not built yet (set-up builds it): the loader checks the file when it runs
        return None if Path(t.schedule).is_file() else ("schedule", f"no such file {t.schedule}")
    why, page = schedule.check(t.schedule, str(binary))
    if why is not None:
        return "schedule", why
    if t.page in pages.ALL_PAGES:
        url = pages.url_of(t.page, shards=t.shards, scheme=t.protocol.scheme if t.protocol else "https")
        if page != url:
            return "schedule", f"{t.schedule} is a schedule of {page}, not of this trial's page {url}"
    return None


def view_problem(t: TrialSpec) -> tuple[str, str] | None:
    """Why a trial cannot load a repeat view (None if it can, or asks none)."""
    if t.view == "first":
        return ("cache", "a first view's cache is empty: cache = \"cold\" is a repeat view's") if t.cache != "warm" \
            else None
    if t.server is not ServerKind.SATBENCH:
        return "view", ("a repeat view's origins are satbench servers (they say what was resumed; nginx and caddy "
                        "send validators a browser may cache by, which no bound could count)")
    if t.single or t.upload_bytes is not None:
        return "view", "a repeat view loads a page again, not a bulk file or an upload"
    if any(k not in (ClientKind.CHROMIUM, ClientKind.LOADER) for k in t.kinds):
        return "view", ("a repeat view is Chromium's (it closes its connections between the views and keeps its "
                        "sessions: chrome.benchmarking) or the loader's; Firefox and curl load first views only")
    if ClientKind.LOADER in t.kinds and any(g.protocol is Protocol.H3 for g in t.groups) and t.quic_stack != "quiche":
        return "view", ("the loader's HTTP/3 repeat views are quiche's (quinn resumes no sessions in the loader "
                        "yet): quic_stack = \"quiche\"")
    if t.cache == "cold" and ClientKind.LOADER in t.kinds:
        return "cache", "the loader keeps no HTTP cache: its repeat views are cold already"
    if ClientKind.CHROMIUM in t.kinds and t.clients != 1:
        return "view", "a repeat view is one browser's: clients = 1"
    if t.realtime is not None:
        return "view", "a real-time scenario runs once per browser: view = \"first\""
    return None


def emulation_problem(t: TrialSpec) -> tuple[str, str] | None:
    """Why a trial cannot emulate what it asks (None if it can, or asks nothing): CPU throttling and
    device emulation are Chromium's, through the DevTools protocol."""
    why = {"cpu_slowdown": "Firefox's remote protocol (WebDriver BiDi) has no CPU throttling",
           "device": ("Firefox's remote protocol sets a viewport and pixel ratio but no mobile layout, user agent "
                      "or touch per page (Playwright's phones are Chromium's too)")}
    for factor, asked in (("cpu_slowdown", t.cpu_slowdown != 1), ("device", t.device != "desktop")):
        if asked and any(k is not ClientKind.CHROMIUM for k in t.kinds):
            return factor, (f"Chromium's (the DevTools protocol's emulation): client = \"chromium\"; {why[factor]}, "
                            "and the loader and curl render nothing")
    return None
