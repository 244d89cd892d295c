"""The factors an experiment may set or vary, defined once.

A factor has a check (why a value is no level of it), a default (None: the
factor is required), and its meaning. The core factors are below; path
elements bring their own (:mod:`satbench.path`); two families are open:
``link.KEY`` (any link-profile key, as ``--set``) and ``server.OPTION``
(any option of :class:`~satbench.endpoints.options.ServerOptions`).

Factors added after satbench 0.1 set ``keyed=False``: at their default they
are left out of a trial's key, so that a study stored before they existed is
still recognised when it resumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from .. import path, realtime
from ..endpoints import options as server_options
from ..endpoints import pages
from ..endpoints.browser import DEVICES
from ..errors import SatbenchError
from ..link.profile import KEYS as LINK_KEYS
from ..model import DEFAULT_QUIC_STACK, QUIC_STACKS, ClientKind, CongestionControl, Protocol, ServerKind, choices
from ..path import ELEMENTS, element_class
from ..testbed import knobs
from ..testbed.testbed import IP_FAMILIES, udp_problem
from . import population

Check = Callable[[Any], "str | None"]


@dataclass(frozen=True)
class Factor:
    name: str
    check: Check
    #: The value a trial gets when the experiment does not set it; None: required.
    default: Any
    meaning: str
    #: In the trial's key even at its default (the factors of satbench 0.1).
    keyed: bool = True


def one_of(values: tuple[str, ...]) -> Check:
    return lambda v: None if v in values else f"must be one of {', '.join(values)}, got {v!r}"


def whole(lo: int, hi: int) -> Check:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            return f"must be a whole number from {lo} to {hi}, got {v!r}"
        return None
    return check


def page_check(v: Any) -> str | None:
    if not isinstance(v, str):
        return f"must be a page name, got {v!r}"
    if v.startswith("web:"):
        from ..endpoints import websites  # noqa: PLC0415

        try:
            websites.parse(v)
        except ValueError as e:
            return str(e)
        return None
    if v.startswith(("site:", "har:", "dir:")):
        return None if v.partition(":")[2] else (
            "site:DIR needs the folder of an imported site (satbench pages import), har:FILE a HAR or .wprgo "
            "file, dir:DIR a folder with an index.html")
    for kind in ("bulk", "upload"):
        if v.startswith(f"{kind}:"):
            try:
                pages.parse_size(v[len(kind) + 1:])
            except SatbenchError:
                return f"{kind}:SIZE needs a size such as {kind}:1M or {kind}:100M, got {v!r}"
            return None
    if v not in pages.ALL_PAGES:
        return f"unknown page {v!r} (available: {', '.join(pages.ALL_PAGES)}, bulk:SIZE, upload:SIZE)"
    return None


def nonempty_string(v: Any) -> str | None:
    return None if isinstance(v, str) and v else f"must be a non-empty string, got {v!r}"


CORE: tuple[Factor, ...] = (
    Factor("link", nonempty_string, None, "link profile name or .toml file"),
    Factor("protocol", one_of(choices(Protocol)), None, "HTTP version"),
    Factor("cc", one_of(choices(CongestionControl)), "cubic", "the server's congestion control (TCP and QUIC)"),
    Factor("page", page_check, None, "test page, bulk:SIZE (download one file), upload:SIZE (POST that many bytes), "
                                     "site:DIR (a recorded site, imported by satbench pages import, replayed), "
                                     "har:FILE (a HAR or Web Page Replay archive, imported on first use, replayed), "
                                     "dir:DIR (a folder of one's own files with an index.html, one origin) "
                                     "or web:PRESET[:SEED] (a site shaped like the web's real pages: "
                                     "median-desktop, median-mobile, heavy-desktop)"),
    Factor("client", one_of(choices(ClientKind)), "chromium",
           "chromium or firefox (real browsers), loader (satbench-load), curl (timing)"),
    Factor("clients", population.check, 1,
           "concurrent clients (loader), or a population such as { h1 = 5, h2 = 5 } (any client kinds)"),
    Factor("connections", whole(1, 64), 6, "HTTP/1.1 connections per host (loader, firefox)"),
    Factor("server", one_of(choices(ServerKind)), "satbench", "the origin server"),
    Factor("hosts", one_of(("each", "shared")), "each",
           "a population's client hosts: one each, or all on one", keyed=False),
    Factor("terminals", whole(1, 50), 1,
           "satellite terminals sharing the link (clients dealt to them in turn; the link profile's "
           "[[terminals]] settings used in turn)", keyed=False),
    Factor("shards", whole(1, 32), 1,
           "origin names a page's objects are spread over (s1.test ... sK.test; the HTML stays on server.test, "
           "whose host s1.test names too; s2.test ... are server hosts of their own): 1 is no sharding",
           keyed=False),
    Factor("realtime", one_of(("none", *realtime.MECHANISMS)), "none",
           "a real-time web trial's mechanism: long polling (poll), Server-Sent Events (sse), WebSocket (ws, "
           "over HTTP/1.1 or, with protocol h2, RFC 8441), or WebTransport (wt: HTTP/3, quic_stack quinn, a "
           "browser); needs page = \"realtime\" and a browser or the loader",
           keyed=False),
    Factor("scenario", one_of(realtime.SCENARIOS), "server",
           "a real-time trial's updates: from the server, from the client, both (chat), or a chat room of the "
           "loader's clients, each one's messages relayed to all the others (room)", keyed=False),
    Factor("messages", whole(1, realtime.MAX_MESSAGES), 100, "a real-time trial's messages in each direction",
           keyed=False),
    Factor("message_bytes", whole(realtime.MIN_MESSAGE_BYTES, realtime.MAX_MESSAGE_BYTES), 100,
           "the size of each real-time message", keyed=False),
    Factor("interval_ms", lambda v: None if isinstance(v, (int, float)) and not isinstance(v, bool) and
           0 <= v <= realtime.MAX_INTERVAL_MS else f"must be a number of ms from 0 to {realtime.MAX_INTERVAL_MS}, "
           f"got {v!r}", 1000,
           "the mean time between real-time messages (0: back to back)", keyed=False),
    Factor("arrivals", one_of(realtime.ARRIVALS), "constant",
           "real-time messages at a constant interval or as a Poisson process of that mean", keyed=False),
    Factor("nodelay", lambda v: None if isinstance(v, bool) else f"must be true or false, got {v!r}", True,
           "TCP_NODELAY on the satbench server's connections (false: Nagle's algorithm on)", keyed=False),
    Factor("ip", one_of(IP_FAMILIES), "v4",
           "the address family of the trial's traffic: v4, v6 (every host also has an IPv6 address, and names "
           "resolve to it alone), or dual (names resolve to both; the client chooses, as Happy Eyeballs does); "
           "the family each connection used is stored (conns_ipv4, conns_ipv6)", keyed=False),
    Factor("ip_drop", one_of(("none", "v6", "v4")), "none",
           "a broken family: the gateway drops every packet of it (with ip = \"dual\", in a browser), so that "
           "the browser's fallback to the other family shows (Happy Eyeballs: Chromium starts IPv4 300 ms after "
           "an unanswered IPv6 attempt)", keyed=False),
    Factor("udp", udp_problem, "open",
           "UDP at the gateway, as some satellite and enterprise networks treat it: open, blocked (every UDP packet "
           "but DNS dropped), or policed:KBITS (UDP beyond that many kbit/s dropped); the packets dropped are "
           "counted (udp_dropped_packets)", keyed=False),
    Factor("h3_discovery", one_of(("forced", "alt-svc")), "forced",
           "how a browser in an h3 trial comes to HTTP/3: told to use QUIC from the first request (forced), or "
           "as a returning browser does, from the Alt-Svc header of a first response over TCP, racing QUIC "
           "against TCP and falling back (alt-svc: Chromium; each response's protocol stored, h3_share and "
           "fell_back say what it used)", keyed=False),
    Factor("dns", one_of(("local", "link")), "local",
           "how clients look names up: from their own hosts file (local), or from a DNS server on the server host, "
           "each lookup a round trip across the link (link), as study E's curl did", keyed=False),
    Factor("quic_stack", one_of(QUIC_STACKS), DEFAULT_QUIC_STACK,
           "the QUIC stack of the satbench server and of the loader: quiche or quinn", keyed=False),
    Factor("cpu_slowdown", lambda v: None if isinstance(v, (int, float)) and not isinstance(v, bool) and
           1 <= v <= 20 else f"must be a number from 1 to 20, got {v!r}", 1,
           "Chromium's CPU throttling (the DevTools protocol's Emulation.setCPUThrottlingRate): each task takes "
           "this many times as long; 4 is a mid-range phone, as Lighthouse sets it", keyed=False),
    Factor("device", one_of(tuple(DEVICES)), "desktop",
           "the browser's device: desktop (a 1280x720 window) or phone (Playwright's Pixel 7: a 412x839 "
           "viewport, device pixel ratio 2.625, a mobile user agent, touch)", keyed=False),
    Factor("view", one_of(("first", "repeat")), "first",
           "a browser's load: the first view, in a fresh profile, or a repeat view: the page loaded again in the "
           "same browser after its connections were closed, with what a returning visitor keeps (TLS session "
           "tickets, QUIC's 0-RTT keys, the HTTP cache, Alt-Svc); the repeat view is the trial's measurement and "
           "the first view's is stored beside it (first_plt_ms, ...)", keyed=False),
    Factor("cache", one_of(("warm", "cold")), "warm",
           "a repeat view's HTTP cache: as the first view left it (warm), or emptied first (cold: only the TLS "
           "and QUIC state carry over)", keyed=False),
    Factor("schedule", lambda v: None if v == "discover" or (isinstance(v, str) and v.endswith(".json")) else
           f"must be discover or a schedule file (.json, satbench pages schedule), got {v!r}", "discover",
           "how the loader's clients ask for a page's objects: as they find them in its HTML and CSS (discover), "
           "or as a browser asked for them (a schedule file learned from a Chromium trial or a HAR by satbench "
           "pages schedule: each request after the response it waited for and the browser's delay)",
           keyed=False),
    Factor("replay_protocols", one_of(("trial", "recorded")), "trial",
           "a replayed site's HTTP versions: every origin speaks the trial's protocol (trial), or each the one it "
           "spoke in the recording (recorded: HTTP/1.1, HTTP/2 or HTTP/3 per origin, HTTP/3 only where recorded; "
           "Chromium; the protocol factor is then the newest any origin may speak)", keyed=False),
    Factor("quic_window", lambda v: None if v in ("stack", "bdp") or (isinstance(v, int) and not isinstance(
        v, bool) and 1024 <= v <= 1 << 40) else f"must be stack, bdp or a number of bytes, got {v!r}", "stack",
           "QUIC flow-control windows (connection and stream) of the loader and the satbench server: each "
           "stack's own (stack), twice the link's bandwidth-delay product (bdp), or bytes", keyed=False),
)


def _path_factor(name: str) -> Factor:
    cls = element_class(name)

    def check(v: Any) -> str | None:
        return cls.check(v)

    # The access link is satbench 0.1's; elements added since are keyed only when present.
    return Factor(name, check, cls.default, cls.meaning, keyed=name == "access")


def _path_factors() -> tuple[Factor, ...]:
    return tuple(_path_factor(name) for name in ELEMENTS)


#: Every named factor, in the order trials list them.
FACTORS: dict[str, Factor] = {f.name: f for f in (*CORE[:1], *_path_factors(), *CORE[1:])}


def add_path_factor(name: str) -> None:
    """The factor of a path element registered after start-up (:func:`satbench.path.register`)."""
    FACTORS[name] = _path_factor(name)


def _remove_path_factor(name: str) -> None:
    FACTORS.pop(name, None)


path.watch(lambda name: name in FACTORS, add_path_factor, _remove_path_factor)
REQUIRED = tuple(f.name for f in FACTORS.values() if f.default is None)


def check_of(name: str) -> Check | None:
    """The check of a factor or of a family member (None: no such factor)."""
    if name in FACTORS:
        return FACTORS[name].check
    if name.startswith("link.") and name[5:].rpartition(".")[2] in LINK_KEYS:
        return lambda v: None if isinstance(v, (int, float, str)) and not isinstance(v, bool) \
            else f"must be a number or string, got {v!r}"
    if knobs.is_knob(name):
        return lambda v: knobs.check(name, v)
    if name.startswith("server.") and name[7:] in server_options.experiment_keys():
        return lambda v: server_options.check_value(name[7:], v)
    return None


def known() -> str:
    return ", ".join([*FACTORS, "link.KEY", "server.OPTION", "server.sysctl.KEY", "client.sysctl.KEY",
                      "server.offload.FEATURE", "client.offload.FEATURE"])


def keyed(factors: dict[str, Any]) -> dict[str, Any]:
    # Knob and option families are keyed when given: a study without them keeps its keys.
    """The factors that identify a trial: all but the later ones at their default, and the QUIC
    stack of a trial that speaks no QUIC (it acts on nothing there)."""
    return {k: v for k, v in factors.items()
            if not (k in FACTORS and not FACTORS[k].keyed and v == FACTORS[k].default)
            and not (k == "quic_stack" and factors.get("protocol") not in ("h3", "mix"))}
