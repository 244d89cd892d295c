"""The two interfaces of the endpoints: a :class:`Client` loads a page (or
fetches a URL) from a testbed host and judges the load; a :class:`Server`
serves the test pages from a testbed host and says what its telemetry saw.

A new kind of client or server is one module with one class implementing
its interface, plus one line in the registry (:mod:`satbench.endpoints`).
The runner knows only these interfaces.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

from ..model import (
    DEFAULT_QUIC_STACK,
    ClientKind,
    ClientOutcome,
    CongestionControl,
    Protocol,
    ServerKind,
    ServerSummary,
)
from ..testbed.host import Host
from .options import ServerOptions

if TYPE_CHECKING:
    from ..experiment.population import Group
    from ..experiment.trialspec import TrialSpec

#: What an impossible combination of factors is: (the factor to blame, why).
Problem = tuple[str, str]


@dataclass(frozen=True, kw_only=True)
class LoadRequest:
    """One load a client is asked for."""

    url: str
    protocol: Protocol
    #: Where the client runs (its network namespace).
    host: Host
    timeout_s: float
    #: Concurrent clients (each on its own connections).
    clients: int = 1
    #: HTTP/1.1 connections per host.
    connections: int = 6
    #: Fetch only the URL (a bulk file), with a curl-style breakdown.
    single: bool = False
    #: POST this many incompressible bytes to the URL (the server's upload sink) instead of a GET.
    upload: int | None = None
    #: The trial's artefact folder, and which optional artefacts to keep there.
    artefacts: Path | None = None
    keep: frozenset[str] = frozenset()
    #: Start the load at this unix time (seconds), not before (all namespaces share one clock).
    start_at: float | None = None
    #: A population's barrier: called once the client is ready to load (a
    #: browser launched, say), it returns when every client is, with the unix
    #: time at which all start. Raises if the population was not ready in time.
    release: Callable[[], float] | None = field(default=None, compare=False)
    #: The QUIC stack, and the flow-control window to advertise (None: the stack's own), where the client has both.
    quic_stack: str = DEFAULT_QUIC_STACK
    quic_window: int | None = None
    #: Other hosts the page loads from (a sharded page's), besides the URL's.
    origins: tuple[str, ...] = ()
    #: Each origin speaks what the browser negotiates with it (HTTP/3 only on ``origins``), and no
    #: response is judged by the trial's protocol: a replayed site's versions as recorded.
    negotiate: bool = False
    #: A real-time scenario's mechanism (poll, sse, ws): the URL's query says the rest.
    realtime: str | None = None
    #: A browser's CPU throttling (1: none) and emulated device (satbench.endpoints.browser.DEVICES).
    cpu_slowdown: float = 1.0
    device: str = "desktop"
    #: Load the page twice in the same browser, its connections closed between, and measure the
    #: second (a repeat view); with ``cold_cache``, its HTTP cache emptied first.
    repeat_view: bool = False
    cold_cache: bool = False
    #: Open TCP connections with TCP Fast Open, where the client can (the loader).
    tfo: bool = False
    #: A browser's request schedule the loader's clients replay (a file; None: they discover the page).
    schedule: str | None = None


class Client(ABC):
    """A kind of client. One object serves a whole sweep (a browser driver is
    started once); every :meth:`load` is fresh (no cache, no connections kept)."""

    kind: ClassVar[ClientKind]
    #: The optional artefacts it can write (besides its own output).
    artefacts: ClassVar[frozenset[str]] = frozenset()
    #: Whether it can run an upload (page = "upload:SIZE").
    uploads: ClassVar[bool] = False

    @classmethod
    def check(cls, group: "Group") -> Problem | None:
        """Why this client cannot load as ``group`` asks: its clients at once in one process (a
        population's are one each), its protocol, its connections (None if it can)."""
        return None

    @classmethod
    def version(cls) -> str | None:
        """The client's version, for the trial's environment (None: no separate program)."""
        return None

    @classmethod
    def settings(cls) -> dict[str, Any] | None:
        """What every load of this client shares and its version does not say (a browser's
        command-line flags, its profile's preferences), for the trial's environment; the settings
        a trial's factors choose (its protocol, its connections) follow from the factors."""
        return None

    @abstractmethod
    def load(self, req: LoadRequest) -> ClientOutcome:
        """Run one load; a problem of the load is an invalid outcome, a problem
        of the harness an exception."""

    def close(self) -> None:
        """Release what the sweep shared (a browser driver)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Origin:
    """What one server host serves: a folder, with its own certificate (None: the test CA's server
    certificate), or a recorded origin replayed (its manifest, ``satbench.endpoints.sites``)."""

    root: Path
    cert: tuple[Path, Path] | None = None
    replay: Path | None = None
    #: The (HTTPS port, cleartext port) of each server the host runs (0: none of that kind): one
    #: server on 443 and 80 unless a recorded origin had another port.
    listeners: tuple[tuple[int, int], ...] = ((443, 80),)
    #: Server options of this host's own, over the trial's (an origin recorded over HTTP/1.1: h2 and h3 off).
    options: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True, kw_only=True)
class ServeRequest:
    """How to start an origin on a testbed host."""

    root: Path
    log_dir: Path
    host: Host
    cc: CongestionControl
    options: ServerOptions = field(default_factory=ServerOptions)
    #: Per-connection telemetry (TCP_INFO samples, qlog) where the server has it.
    telemetry: bool = True
    #: The origin's own certificate (chain, key); None: the test CA's server certificate.
    cert: tuple[Path, Path] | None = None
    #: A recorded origin's replay manifest (satbench servers only; ``Origin.replay``).
    replay: Path | None = None
    #: Its ports (0: none of that kind; satbench servers only; ``Origin.listeners``).
    https_port: int = 443
    http_port: int = 80


class Server(ABC):
    """A running origin; a context manager that stops it."""

    kind: ClassVar[ServerKind]
    protocols: ClassVar[frozenset[Protocol]] = frozenset(Protocol)

    @classmethod
    def check(cls, trial: "TrialSpec") -> Problem | None:
        """Why this server cannot serve this trial (None if it can)."""
        return None

    @classmethod
    @abstractmethod
    def start(cls, req: ServeRequest) -> "Server":
        """Start serving; return once the server listens."""

    @abstractmethod
    def stop(self) -> None:
        """Stop serving (idempotent)."""

    def begin_stop(self) -> None:
        """Ask the server to stop without waiting for it (several then stop at once); :meth:`stop`
        still waits. A server that stops at once needs nothing here."""

    def fault(self) -> str | None:
        """Why the server is no longer serving (it died), or None while it serves."""
        return None

    @abstractmethod
    def summary(self) -> ServerSummary:
        """What the server's telemetry says happened (call after :meth:`stop`)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
