"""Server options, defined once.

Each field of :class:`ServerOptions` is an option with its default, its help
text, its command-line flag and the server kinds it applies to. The
``satbench serve`` and ``satbench shell`` flags and the experiment keys
``server.NAME`` are derived from these fields; nothing else lists them.
The flags and ranges of those passed to satbench-server are the binary's
(its ``--describe``): tests/unit/test_contracts.py holds these to them, at
the edges of every range.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from ..model import DEFAULT_QUIC_STACK, QUIC_STACKS, ServerKind

SATBENCH_ONLY = frozenset({ServerKind.SATBENCH})
#: The largest QUIC variable-length integer (a flow-control window's limit).
QUIC_VARINT_MAX = (1 << 62) - 1


def option(default: Any, help: str, *, flag: str | None = None, metavar: str | None = None,
           servers: frozenset[ServerKind] = SATBENCH_ONLY, lo: int = 1, hi: int = 1 << 30,
           experiment: bool = True, choices: tuple[str, ...] | None = None, binary: bool = True,
           returning: str | None = None) -> Any:
    """A server option: a dataclass field carrying how it is offered (and,
    with ``binary``, that satbench-server takes it as the same flag).
    ``returning`` says what of a client that comes back it acts on: an
    option that acts on nothing else measures nothing for first views."""
    return dataclasses.field(default=default, metadata={
        "help": help, "flag": flag, "metavar": metavar, "servers": servers, "lo": lo, "hi": hi,
        "experiment": experiment, "choices": choices, "binary": binary, "returning": returning})


@dataclass(frozen=True, kw_only=True)
class ServerOptions:
    """How the origin server runs, besides its congestion control (a factor of its own)."""

    h3: bool = option(True, "serve HTTP/3 and advertise it with Alt-Svc", flag="--no-h3",
                      servers=frozenset({ServerKind.SATBENCH, ServerKind.CADDY}))
    h2: bool = option(True, "offer HTTP/2 over TLS (ALPN); off: HTTP/1.1 only, as an old origin (a trial over h2 "
                            "or h3 then falls back, and is stored invalid)", flag="--no-h2")
    tfo: bool = option(False, "TCP Fast Open on the server's listeners",
                       returning="a Fast Open cookie, which a client gets on its first connection and uses on the next")
    nodelay: bool = option(True, "TCP_NODELAY on the server's TCP connections (off: Nagle's algorithm; the "
                                 "experiment factor is nodelay)", flag="--no-nodelay", experiment=False)
    resumption: bool = option(True, "TLS session resumption over TCP", flag="--no-resumption",
                              returning="a session ticket from an earlier connection")
    zero_rtt: bool = option(True, "QUIC 0-RTT", flag="--no-0rtt",
                            returning="a session ticket and transport parameters from an earlier connection")
    pacing: bool = option(True, "QUIC pacing", flag="--no-pacing")
    sndbuf: int | None = option(None, "server socket send buffer", metavar="BYTES")
    rcvbuf: int | None = option(None, "server socket receive buffer", metavar="BYTES")
    quic_initcwnd: int | None = option(None, "QUIC initial congestion window", metavar="PACKETS", hi=10_000)
    idle_timeout_s: int | None = option(None, "seconds a connection may stay idle before the server closes it "
                                              "(default 30)", metavar="SECONDS", hi=86_400, binary=False)
    tcp_initcwnd: int | None = option(None, "TCP initial congestion window, on the server host's route "
                                            "(testbed servers only)", metavar="SEGMENTS", hi=1000, binary=False)
    quic_stack: str = option(DEFAULT_QUIC_STACK, "the QUIC stack serving HTTP/3: quinn (with the h3 crate) or quiche",
                             choices=QUIC_STACKS, experiment=False)
    quic_max_data: int | None = option(None, "the QUIC connection flow-control window the server advertises "
                                             "(fixed; default: the stack's own)", metavar="BYTES", hi=QUIC_VARINT_MAX)
    quic_max_stream_data: int | None = option(None, "the QUIC stream flow-control window the server advertises "
                                                    "(fixed; default: the stack's own)", metavar="BYTES",
                                               hi=QUIC_VARINT_MAX)
    webtransport: bool = option(False, "WebTransport over HTTP/3 (quinn stack): the real-time endpoint /rt/wt "
                                       "(the experiment factor is realtime = \"wt\")", experiment=False)
    cache_max_age: int | None = option(None, "Cache-Control: max-age on every file the server sends (default: "
                                             "none, so a repeat view fetches everything again; a replayed site "
                                             "sends its recorded headers)", metavar="SECONDS", lo=0, hi=31_536_000,
                                       returning="the HTTP cache of a repeat view")
    replay_think: bool = option(False, "a replayed site's origins wait each request's recorded server think time "
                                       "(HAR timings.wait) before answering (default: answer at once)")
    replay_deterministic: bool = option(False, "a replayed site's HTML pages get a script first that fixes Date to "
                                               "the recorded time and Math.random to one sequence, as Web Page "
                                               "Replay does, so that URLs built from them repeat (default: off)")
    keylog: bool = option(False, "write TLS keys (SSLKEYLOGFILE format) to the log folder", experiment=False,
                          binary=False)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            problem = check_value(f.name, v)
            if problem:
                raise InputError(f"{flag_of(f)}: {problem}")
        if self.quic_stack == "quinn" and not self.pacing:
            raise InputError("--no-pacing: quinn always paces (quinn-proto has no switch for its pacer)")
        if self.webtransport and self.quic_stack != "quinn":
            raise InputError("--webtransport: needs --quic-stack quinn (quiche's HTTP/3 has no WebTransport)")

    def given(self) -> dict[str, Any]:
        """The options that differ from their defaults."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}


def server_argv(o: ServerOptions) -> list[str]:
    """The options as satbench-server's flags: a switch when it is not at its
    default, a value when one is given."""
    argv: list[str] = []
    for f in fields():
        if not f.metadata["binary"]:
            continue
        v = getattr(o, f.name)
        if is_bool(f):
            if v != f.default:
                argv.append(flag_of(f))
        elif v is not None:
            argv += [flag_of(f), str(v)]
    return argv


def fields() -> tuple[dataclasses.Field[Any], ...]:
    return dataclasses.fields(ServerOptions)


def experiment_keys() -> dict[str, dataclasses.Field[Any]]:
    """The options an experiment may set or vary, as ``server.NAME``."""
    return {f.name: f for f in fields() if f.metadata["experiment"]}


def flag_of(f: dataclasses.Field[Any]) -> str:
    return str(f.metadata["flag"] or "--" + f.name.replace("_", "-"))


def is_bool(f: dataclasses.Field[Any]) -> bool:
    return isinstance(f.default, bool)


def check_value(name: str, v: Any) -> str | None:
    """Why ``v`` is no value for option ``name`` (None if it is)."""
    f = {x.name: x for x in fields()}[name]
    if f.metadata["choices"]:
        ok = v in f.metadata["choices"]
        return None if ok else f"must be one of {', '.join(f.metadata['choices'])}, got {v!r}"
    if is_bool(f):
        return None if isinstance(v, bool) else f"must be true or false, got {v!r}"
    if v is None:
        return None
    lo, hi = f.metadata["lo"], f.metadata["hi"]
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        return f"must be a whole number from {lo} to {hi}, got {v!r}"
    return None


def needs_returning_client(name: str) -> str | None:
    """What of a returning client option ``name`` acts on (None: it acts on every load)."""
    f = {x.name: x for x in fields()}.get(name)
    return None if f is None else f.metadata["returning"]


def servers_of(name: str) -> frozenset[ServerKind]:
    return frozenset({x.name: x for x in fields()}[name].metadata["servers"])
