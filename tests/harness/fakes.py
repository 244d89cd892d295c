"""A fake lab for the runner: a testbed that builds nothing, a client that
"loads" a page in a time computed from the trial's link, a server that
reports what it was asked. Nothing needs root; a trial takes microseconds."""

from __future__ import annotations

import itertools
import math
import random
from typing import Any

from satbench.endpoints.base import Client, LoadRequest, Server, ServeRequest
from satbench.errors import TestbedError
from satbench.experiment.runner import Lab
from satbench.model import (
    ClientKind,
    ClientOutcome,
    ClientResult,
    LinkCounters,
    ObjectTiming,
    ServerKind,
    ServerSummary,
    TrialStatus,
)
from satbench.testbed.host import Host
from satbench.testbed.testbed import TestbedSpec, as_spec


def counters(wire_bytes: int, seed: int) -> dict[str, Any]:
    """An emulator report as satbench-link writes it (the fields the runner reads)."""
    def direction(b: int) -> dict[str, Any]:
        t = {"packets": b // 1500 + 1, "bytes": b}
        zero = {"packets": 0, "bytes": 0}
        return {"offered": t, "delivered": t, "dropped": {"queue": zero, "aqm": zero, "loss": zero, "outage": zero}}

    return {"seed": seed, "duration_s": 1.0, "forward": direction(wire_bytes), "return": direction(wire_bytes // 20)}


class FakeTestbed:
    built: list[TestbedSpec] = []

    def __init__(self, spec: TestbedSpec):
        self.spec = spec
        self.link = as_spec(spec.link)
        self.clients = [Host(f"c{i}", f"fake-c{i}", f"198.18.1.{9 + i}", [f"c{i}.test"])
                        for i in range(1, spec.clients + 1)]
        self.client = self.clients[0]
        self.client_terminal = [(i - 1) % spec.terminals for i in range(1, spec.clients + 1)]
        self.server = Host("s1", "fake-s1", "198.18.3.10", ["server.test"])
        self.servers = [self.server]
        self.effective_tcp_cc = "cubic"
        self._counters: dict[str, Any] | None = None

    def __enter__(self) -> "FakeTestbed":
        FakeTestbed.built.append(self.spec)
        return self

    def __exit__(self, *exc: object) -> None:
        # A little more than each client's 100 KB page and its headers.
        self._counters = counters(120_000 * max(1, self.spec.clients), self.spec.seed or 0)

    @property
    def link_counters(self) -> LinkCounters | None:
        return None if self._counters is None else LinkCounters.parse(self._counters)

    #: Faults the next testbed reports (then reset).
    next_faults: list[str] = []

    def faults(self) -> list[str]:
        f, FakeTestbed.next_faults = FakeTestbed.next_faults, []
        return f

    def udp_dropped(self) -> int | None:
        return None


class FakeServer(Server):
    kind = ServerKind.SATBENCH
    #: The congestion control the fake reports (None: the one asked for).
    report_cc: str | None = None

    def __init__(self, req: ServeRequest):
        self.req = req
        req.log_dir.mkdir(parents=True, exist_ok=True)

    @classmethod
    def start(cls, req: ServeRequest) -> "FakeServer":
        return cls(req)

    #: Set to make the next server report that it died.
    die: str | None = None

    def stop(self) -> None:
        pass

    def fault(self) -> str | None:
        f, FakeServer.die = FakeServer.die, None
        return f

    def summary(self) -> ServerSummary:
        return ServerSummary(kind=ServerKind.SATBENCH, connections=1, requests=9, protocols=["h2"],
                             cc=[self.report_cc or self.req.cc.value],
                             limited_ms={"cwnd": 300.0, "application": 100.0, "receive_window": 0.0})


class FakeLoader(Client):
    """PLT = the link's base RTT times 6 plus 10 ms per client (above the physical bound of
    every page the tests load): a deterministic number per trial."""

    kind = ClientKind.LOADER
    #: Raise this for the next load (a harness failure), then reset.
    fail_next: Exception | None = None
    #: Report the next load as taking one base RTT (faster than physics allows), then reset.
    too_fast_next: bool = False
    #: A population's clients start 0, 1 or 2 times this many ms after its barrier, in turn.
    start_spread_ms: float = 0.5
    #: Spread each load's times by this coefficient of variation (log-normal, seeded by the load's
    #: turn): 0, every load of a cell alike.
    noise_cv: float = 0.0
    counter = itertools.count()
    loads: list[LoadRequest] = []

    def load(self, req: LoadRequest) -> ClientOutcome:
        FakeLoader.loads.append(req)
        nth = next(FakeLoader.counter)  # taken now: a population's clients reach the barrier together
        if FakeLoader.fail_next is not None:
            e, FakeLoader.fail_next = FakeLoader.fail_next, None
            raise e
        plt = 6 * self.rtt_ms + 10 * req.clients
        if FakeLoader.too_fast_next:
            FakeLoader.too_fast_next, plt = False, self.rtt_ms
        # HTTP/1.1 clients take a little longer here: a population's groups differ.
        plt += 20 if req.protocol.value == "h1" else 0
        if FakeLoader.noise_cv:
            plt *= math.exp(FakeLoader.noise_cv * random.Random(nth).gauss(0, 1))
        clients = [ClientResult(client=i, valid=True, reason=None, plt_ms=plt + i, fcp_ms=plt / 2, lcp_ms=plt,
                                ttfb_ms=self.rtt_ms, bytes=100_000, throughput_mbps=0.8 / (plt / 1000))
                   for i in range(req.clients)]
        objects = [ObjectTiming(client=0, url=req.url + f"img{k}.jpg", protocol=req.protocol.alpn, status=200,
                                bytes=12_500, start_ms=self.rtt_ms, ttfb_ms=2 * self.rtt_ms, end_ms=plt)
                   for k in range(8)]
        at = req.release() if req.release is not None else req.start_at
        start = (at or 0.0) * 1000 + FakeLoader.start_spread_ms * (nth % 3)  # after the barrier
        out = ClientOutcome(status=TrialStatus.VALID, objects=objects, clients=clients, raw={"fake": True},
                            load_s=plt / 1000, start_unix_ms=start if at else None)
        out.metrics = {k: out.median(k) for k in ("plt_ms", "fcp_ms", "lcp_ms", "ttfb_ms")}
        return out

    rtt_ms: float = 0.0


def lab() -> Lab:
    """A lab whose testbeds, loader and server are the fakes above."""
    def client(kind: ClientKind) -> type[Client]:
        if kind is not ClientKind.LOADER:
            raise TestbedError(f"the fake lab has no {kind}")
        return FakeLoader

    def testbed(spec: TestbedSpec) -> FakeTestbed:
        tb = FakeTestbed(spec)
        FakeLoader.rtt_ms = tb.link.base_rtt_ms
        return tb

    return Lab(testbed=testbed, client=client, server=lambda kind: FakeServer, prerequisites=lambda: None, provide=lambda parts: None,
               cleanup=lambda: [])
