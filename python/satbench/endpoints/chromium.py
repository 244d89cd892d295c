"""Real-browser page loads: Playwright driving Debian's Chromium.

Every load gets a fresh browser process and profile: no cache, no connection
reuse, no DNS cache. The protocol is forced per load:

    h1  --disable-quic --disable-http2
    h2  --disable-quic      (otherwise Chromium races QUIC after seeing Alt-Svc)
    h3  --origin-to-force-quic-on=HOST:PORT

Chromium trusts the test CA through an NSS database in a temporary HOME.
Metrics and the protocol check are :mod:`satbench.endpoints.browser`'s. The
protocol each response really used, its connection, and the bytes received
come from Chromium's DevTools network events.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import sync_playwright

from ..errors import PrerequisiteError, TestbedError
from ..model import ClientKind, ClientOutcome, Protocol
from ..testbed.host import Host
from . import ca as ca_mod
from .base import Client, LoadRequest, Problem
from .browser import (
    _COLLECT,
    _OBSERVER,
    DEVICES,
    FRAMES_TAIL_MS,
    BrowseOptions,
    LoadResult,
    judge,
    outcome,
    page_metrics,
    settle,
    visual_of,
)

if TYPE_CHECKING:
    from ..experiment.population import Group

CHROMIUM = "/usr/bin/chromium"
BASE_FLAGS = ["--no-sandbox", "--headless", "--disable-gpu", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--disable-default-apps", "--no-default-browser-check",
              "--disable-features=MediaRouter,OptimizationHints,Translate,AutofillServerCommunication"]


#: A repeat view's pause between its two loads, once the first view's connections are closed: long
#: enough for the closes to leave (the servers learn of them over the path), short against any
#: session's lifetime.
REPEAT_PAUSE_MS = 500


def _flags(opts: BrowseOptions, url: str) -> list[str]:
    flags = list(BASE_FLAGS)
    if opts.repeat_view:
        flags += ["--enable-net-benchmarking"]  # chrome.benchmarking.closeConnections between the views
    if opts.protocol == "h1":
        flags += ["--disable-quic", "--disable-http2"]
    elif opts.protocol == "h2":
        flags += ["--disable-quic"]
    elif opts.negotiate:
        # QUIC where Alt-Svc offers it, and on the origins named (HOST or HOST:PORT), nowhere forced else.
        force = [o if ":" in o else f"{o}:443" for o in opts.origins]
        # Chromium takes QUIC from Alt-Svc only for a certificate of a public root, or for a host it
        # forces QUIC on: each host is named here on port 1, which no page uses, so that the test CA's
        # certificates are taken over QUIC while nothing is forced (QUIC_PROTOCOL_ERROR otherwise,
        # "certificate unknown", and every response over TCP).
        named = dict.fromkeys(h for h in [urlsplit(url).hostname, *(o.rsplit(":", 1)[0] for o in opts.origins)] if h)
        force += [f"{h}:1" for h in named]
        flags += ["--enable-quic", f"--origin-to-force-quic-on={','.join(force)}"]
    else:
        u = urlsplit(url)
        # The page's origin and the others (HOST or HOST:PORT); an http:// page has none of its own.
        page = [f"{u.hostname}:{u.port or 443}"] if u.scheme == "https" else []
        hosts = list(dict.fromkeys([*page, *(o if ":" in o else f"{o}:443" for o in opts.origins)]))
        flags += ["--enable-quic", f"--origin-to-force-quic-on={','.join(hosts)}"]
    if opts.netlog:
        flags += [f"--log-net-log={opts.netlog}", "--net-log-capture-mode=Default"]
    return flags


_STARTING = threading.Lock()

#: A load with an instant (a population's release, experiment/population.py): the blank page
#: navigates itself to the URL at a unix time (ms), a timer in the renderer, so that no driver round
#: trip lies between the common instant and each browser's navigation start (performance.timeOrigin).
#: A renderer-initiated navigation from about:blank; a load with no instant goes through the driver
#: (page.goto).
#: Always from a timer, even when late: the evaluate call returns before its page goes away.
_NAVIGATE_AT = """([u, t]) => { setTimeout(() => { location.href = u; }, Math.max(0, t - Date.now())); }"""


def _children() -> set[int]:
    """This process's children (of every thread)."""
    return _children_of(os.getpid())


class Browser:
    """A Playwright driver kept across loads; every load still gets a fresh
    Chromium process and profile. With ``host``, Chromium runs inside that
    testbed host (through ``ip netns exec``, talking to the driver over
    pipes), so one driver serves every trial of a sweep."""

    def __init__(self) -> None:
        if not Path(CHROMIUM).exists():
            raise PrerequisiteError([f"no Chromium at {CHROMIUM}: install Debian's chromium (scripts/setup does)"])
        self._tmp = tempfile.TemporaryDirectory(prefix="satbench-browser-")
        # One NSS database trusting the CA, copied into each load's fresh HOME.
        self._nss_template = ca_mod.nss_home(Path(self._tmp.name) / "template")
        with _STARTING:  # one driver at a time, so that the new child is this one's
            before = _children()
            self._pw = sync_playwright().start()
            #: The Playwright driver's pid: the watchdog's last resort.
            self.driver_pids = sorted(_children() - before)

    def close(self) -> None:
        try:
            self._pw.stop()
        finally:
            self._tmp.cleanup()

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _executable(self, host: Host | None, where: Path) -> str:
        if host is None:
            return CHROMIUM
        wrapper = where / "chromium-in-netns"
        wrapper.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in host.cmd([CHROMIUM])) + ' "$@"\n')
        wrapper.chmod(0o755)
        return str(wrapper)

    def load(self, url: str, opts: BrowseOptions, *, host: Host | None = None,
             closing: Callable[[], None] | None = None) -> LoadResult:
        """Load ``url`` once in a fresh Chromium and return what happened; ``closing`` is called
        just before the browser is closed (a watchdog stops taking its exit for a death)."""
        opts.validate()
        want = None if opts.negotiate else Protocol(opts.protocol).alpn
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="satbench-browse-", dir=self._tmp.name) as tmp:
            home = Path(tmp) / "home"
            shutil.copytree(self._nss_template, home)
            responses: dict[str, dict[str, Any]] = {}
            shots: list[tuple[float, bytes]] = []
            finished: dict[str, int] = {}
            failed: dict[str, str] = {}
            sent: dict[str, str] = {}  # request id -> URL: a request that fails has no response to name it
            browser = self._pw.chromium.launch(executable_path=self._executable(host, Path(tmp)), headless=True,
                                               args=_flags(opts, url), env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
            try:
                device = DEVICES[opts.device]
                shape: dict[str, Any] = (dict(self._pw.devices[device]) if device is not None else
                                         {"viewport": {"width": opts.viewport[0], "height": opts.viewport[1]}})
                shape.pop("default_browser_type", None)
                ctx = browser.new_context(**shape, record_har_path=str(opts.har) if opts.har else None)
                page = ctx.new_page()
                cdp = ctx.new_cdp_session(page)
                if opts.cpu_slowdown != 1:
                    cdp.send("Emulation.setCPUThrottlingRate", {"rate": opts.cpu_slowdown})
                emulation: dict[str, Any] = {
                    "cpu_slowdown": opts.cpu_slowdown, "device": opts.device,
                    **{k: shape.get(k) for k in ("viewport", "device_scale_factor", "is_mobile", "has_touch",
                                                 "user_agent") if k in shape}}

                def on_response(ev: dict[str, Any]) -> None:
                    r = ev["response"]
                    responses[ev["requestId"]] = {"url": r["url"], "status": r.get("status"),
                                                  "requested": (r.get("timing") or {}).get("requestTime"),
                                                  "protocol": r.get("protocol"), "connection": r.get("connectionId"),
                                                  "remote": r.get("remoteIPAddress"),
                                                  # (Whether the origin offers HTTP/3: what a recording
                                                  # asks QUIC of.)
                                                  "h3_offered": "h3" in str({k.lower(): v for k, v in (
                                                      r.get("headers") or {}).items()}.get("alt-svc", "")),
                                                  "cached": bool(r.get("fromDiskCache") or r.get("fromMemoryCache")
                                                                 or r.get("fromPrefetchCache"))}

                cdp.on("Network.responseReceived", on_response)
                cdp.on("Network.loadingFinished",
                       lambda ev: finished.__setitem__(ev["requestId"], int(ev.get("encodedDataLength", 0))))
                cdp.on("Network.loadingFailed",
                       lambda ev: failed.__setitem__(ev["requestId"], ev.get("errorText", "failed")))
                cdp.on("Network.requestWillBeSent",
                       lambda ev: sent.__setitem__(ev["requestId"], (ev.get("request") or {}).get("url", "")))
                cdp.send("Network.enable")
                # A first view has no cache to use; a repeat view's first load fills it for the second.
                cdp.send("Network.setCacheDisabled", {"cacheDisabled": not opts.repeat_view})

                def start_frames() -> None:
                    # Every frame the compositor produces, as it swaps it; each acknowledged, or the
                    # screencast stops after the first few. The first is the blank page before the load.
                    def on_frame(ev: dict[str, Any]) -> None:
                        shots.append((float(ev["metadata"].get("timestamp") or time.time()),
                                      base64.b64decode(ev["data"])))
                        cdp.send("Page.screencastFrameAck", {"sessionId": ev["sessionId"]})

                    cdp.on("Page.screencastFrame", on_frame)
                    size = shape["viewport"]
                    cdp.send("Page.startScreencast", {"format": "jpeg", "quality": 85, "everyNthFrame": 1,
                                                      "maxWidth": size["width"], "maxHeight": size["height"]})

                if opts.frames and not opts.repeat_view:
                    start_frames()
                page.add_init_script(_OBSERVER)

                def visit(at: float | None) -> tuple[str | None, dict[str, Any]]:
                    try:
                        if at is None:
                            page.goto(url, wait_until="load", timeout=opts.timeout_s * 1000)
                        else:
                            with page.expect_navigation(wait_until="load", timeout=opts.timeout_s * 1000):
                                page.evaluate(_NAVIGATE_AT, [url, at * 1000])
                    except PlaywrightError as e:
                        if "has been closed" in str(e) or not browser.is_connected():
                            raise  # the browser died: the harness failed, not the path
                        return str(e).splitlines()[0], {}
                    return None, settle(lambda: page.evaluate(_COLLECT), opts, lambda: page.wait_for_timeout(50))

                error, data = visit(opts.instant())  # a population's instant: the page navigates itself then
                version = browser.version
                first: LoadResult | None = None
                if opts.repeat_view:
                    # The first view, then what a returning visitor has: the browser's connections closed
                    # (chrome.benchmarking.closeConnections: sockets and QUIC sessions, each closed as
                    # the protocol closes it), its TLS sessions, 0-RTT keys, Alt-Svc and (unless
                    # cold) cache kept; then the same page again, measured.
                    first = _result(url, opts, want, t0, version, error, data, dict(responses), dict(finished),
                                    dict(failed), dict(sent))
                    page.goto("about:blank")
                    page.evaluate("chrome.benchmarking.closeConnections()")
                    if opts.cold_cache:
                        cdp.send("Network.clearBrowserCache")
                    if opts.frames:
                        start_frames()  # the repeat view's frames, from the blank page before it
                    page.wait_for_timeout(REPEAT_PAUSE_MS)
                    responses.clear()
                    finished.clear()
                    failed.clear()
                    sent.clear()
                    t0 = time.monotonic()
                    error, data = visit(None)
                if opts.frames:
                    page.wait_for_timeout(FRAMES_TAIL_MS)  # the last frames are still on their way
                    cdp.send("Page.stopScreencast")
                if opts.har:
                    ctx.close()  # writes the HAR; otherwise closing the browser is enough
            finally:
                if closing is not None:
                    closing()
                browser.close()
        res = _result(url, opts, want, t0, version, error, data, responses, finished, failed, sent)
        res.emulation = emulation
        res.first_view = first
        if opts.frames and res.valid:
            res.visual = visual_of(shots, res.start_unix_ms, "chromium devtools screencast (jpeg 85)",
                                   opts.frames_dir)
        return res


def browse(url: str, opts: BrowseOptions) -> LoadResult:
    """Load ``url`` once in a fresh Chromium (here) and return what happened."""
    opts.validate()
    with Browser() as b:
        return b.load(url, opts)


def _result(url: str, opts: BrowseOptions, want: str | None, t0: float, version: str, error: str | None,
            data: dict[str, Any], responses: dict[str, dict[str, Any]], finished: dict[str, int],
            failed: dict[str, str], sent: dict[str, str] | None = None) -> LoadResult:
    wall = time.monotonic() - t0
    res = LoadResult(url=url, protocol=opts.protocol, valid=True, invalid_reason=None, browser=f"chromium {version}",
                     wall_s=wall)
    if error is not None:
        res.valid, res.invalid_reason = False, f"navigation failed: {error}"
        return res
    page_metrics(res, data)
    http = {rid: r for rid, r in responses.items() if r["url"].startswith(("http://", "https://"))}
    # (A response from the cache crossed no connection.)
    res.connections = len({r["connection"] for r in http.values() if r["connection"] is not None and not r["cached"]})
    res.bytes_received = sum(finished.get(rid, 0) for rid in http)
    timing = resource_timing_of(http, data.get("resources", []), url, data.get("nav") or {})
    for rid, got in http.items():
        t = timing.get(rid, {})
        r = {k: v for k, v in got.items() if k != "requested"}
        res.resources.append({**r, "bytes": finished.get(rid), "failed": failed.get(rid),
                              "start_ms": t.get("startTime"), "response_start_ms": t.get("responseStart"),
                              "end_ms": t.get("responseEnd"), "transfer_size": t.get("transferSize"),
                              "next_hop_protocol": t.get("nextHopProtocol"), "connect_ms": _connect_ms(t)})
    judge(res, want, failed, sent)
    return res



def _connect_ms(t: dict[str, Any]) -> float | None:
    """The connection's set-up (TCP or QUIC, and TLS) a response waited for, from its Resource
    Timing entry: None for a response over a connection already open (or with no timing)."""
    start, end = t.get("connectStart"), t.get("connectEnd")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end > start:
        return float(end - start)
    return None


def resource_timing_of(http: dict[str, dict[str, Any]], entries: list[dict[str, Any]], url: str,
                       nav: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each response's Resource Timing entry, by request id: a URL fetched more than once has an
    entry per fetch, matched in order (the responses by when they were requested, the entries by
    their start); the document's is the navigation's timing (it has no resource entry)."""
    by_url: dict[str, list[dict[str, Any]]] = {}
    for e in sorted(entries, key=lambda e: e.get("startTime") or 0.0):
        by_url.setdefault(e["name"], []).append(e)
    if nav and url not in by_url:
        by_url[url] = [{"startTime": nav.get("startTime"), "responseStart": nav.get("responseStart"),
                        "responseEnd": nav.get("responseEnd"), "transferSize": nav.get("transferSize"),
                        "nextHopProtocol": nav.get("nextHopProtocol"), "connectStart": nav.get("connectStart"),
                        "connectEnd": nav.get("connectEnd")}]
    out: dict[str, dict[str, Any]] = {}
    order = sorted(http.items(), key=lambda kv: (kv[1].get("requested") is None, kv[1].get("requested") or 0.0))
    for rid, r in order:
        queue = by_url.get(r["url"])
        if queue:
            out[rid] = queue.pop(0)
    return out


#: How long a load may outlive its own timeout before its browser is killed.
WATCHDOG_GRACE_S = 60.0


class Watchdog:
    """Ends a load whose browser is gone or stuck: kills the browser's
    processes (by name, in the client host's namespace), then if need be the
    Playwright driver, so that the load raises and its trial fails with
    :meth:`reason`. A browser whose main process died can leave Playwright
    waiting forever on a pipe its children still hold, so the watchdog fires
    when that process exits while the load is still running (after
    ``EXIT_GRACE_S``) and before :meth:`closing` says the browser is being
    closed, and in any case once the load outlives ``limit_s``."""

    #: How long the load may go on once the browser's processes were killed before the driver is.
    DRIVER_GRACE_S = 10.0
    #: The same once the browser's main process exited: the driver has no browser to wait for (seen:
    #: a driver that still waited 10 s after every process of the browser was gone).
    EXIT_DRIVER_GRACE_S = 2.0
    #: How often the browser's main process is looked at (a read of /proc: no process is started).
    POLL_S = 0.2
    #: How long a load may go on after its browser's main process exited (a close returns sooner).
    EXIT_GRACE_S = 2.0

    def __init__(self, host: Host | None, names: tuple[str, ...], limit_s: float):
        self.host, self.names, self.limit_s = host, names, limit_s
        self.fired = False
        #: Why it fired: the load outlived its limit, or the browser's main process exited (its pid).
        self.exited: int | None = None
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._closing = threading.Event()
        #: The Playwright driver serving the load (its pids): its children are the browsers' main
        #: processes, and it is killed if killing the browser was not enough.
        self.driver: list[int] = []

    def reason(self) -> str:
        if self.exited is not None:
            return (f"browser: its main process (pid {self.exited}) exited during the load; "
                    "its other processes were killed")
        return f"browser: no answer within {self.limit_s:.0f} s; its processes were killed"

    def closing(self) -> None:
        """The browser is being closed: its main process exits now, and that is no death."""
        self._closing.set()

    def _mains(self) -> set[int]:
        """The browsers' main processes: the driver's children of the browser's name, alive."""
        out: set[int] = set()
        for d in self.driver:
            for pid in _children_of(d):
                try:
                    comm = Path(f"/proc/{pid}/comm").read_text().strip()
                    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
                except (OSError, IndexError):
                    continue
                if comm.startswith(self.names) and state != "Z":
                    out.add(pid)
        return out

    def _watch(self) -> None:
        deadline = time.monotonic() + self.limit_s
        seen: set[int] = set()
        gone_at: float | None = None
        while not self._done.wait(self.POLL_S):
            now = time.monotonic()
            if now >= deadline:
                self._fire()
                return
            if self._closing.is_set():
                continue
            alive = self._mains()
            lost = seen - alive
            seen |= alive
            if not lost:
                gone_at = None
            elif gone_at is None:
                gone_at = now
            elif now - gone_at >= self.EXIT_GRACE_S:
                self.exited = min(lost)
                self._fire(self.EXIT_DRIVER_GRACE_S)
                return

    def _fire(self, driver_grace_s: float | None = None) -> None:
        if self.host is None:
            return
        self.fired = True
        p = subprocess.run(["ip", "netns", "pids", self.host.ns], capture_output=True, text=True)
        for pid in (int(x) for x in p.stdout.split() if x.isdigit()):
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
                if comm.startswith(self.names):
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                continue
        # A driver left waiting on a browser that is gone never answers: end it, so the call raises.
        if not self._done.wait(self.DRIVER_GRACE_S if driver_grace_s is None else driver_grace_s):
            for pid in self.driver:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    continue

    def __enter__(self) -> "Watchdog":
        self._thread = threading.Thread(target=self._watch, name="browser-watchdog", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()


def _children_of(pid: int) -> set[int]:
    """A process's children (of every thread); none if it is gone."""
    out: set[int] = set()
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out |= {int(x) for x in (task / "children").read_text().split()}
        except OSError:
            continue
    return out


class Chromium(Client):
    """Debian's Chromium, one Playwright driver for the sweep, a fresh
    browser per load inside the client's namespace."""

    kind = ClientKind.CHROMIUM
    artefacts = frozenset({"har", "netlog", "frames", "video"})

    def __init__(self) -> None:
        self.browser = Browser()

    @classmethod
    def check(cls, group: "Group") -> Problem | None:
        if group.n != 1:
            return "clients", "a browser trial runs one browser; use client = \"loader\" for many clients"
        if group.connections != 6:
            return "connections", ("Chromium's HTTP/1.1 limit of 6 connections per host cannot be changed; "
                                   "use client = \"firefox\" or \"loader\"")
        return None

    @classmethod
    def version(cls) -> str | None:
        return program_version(CHROMIUM)

    @classmethod
    def settings(cls) -> dict[str, Any]:
        return {"flags": list(BASE_FLAGS)}

    def load(self, req: LoadRequest) -> ClientOutcome:
        art = req.artefacts
        opts = BrowseOptions(protocol=req.protocol.version.value, timeout_s=req.timeout_s, start_at=req.start_at,
                             release=req.release, origins=req.origins, negotiate=req.negotiate,
                             har=art / "page.har" if art and "har" in req.keep else None,
                             netlog=art / "netlog.json" if art and "netlog" in req.keep else None,
                             frames=bool({"frames", "video"} & req.keep),
                             frames_dir=art / "frames" if art and {"frames", "video"} & req.keep else None,
                             cpu_slowdown=req.cpu_slowdown, device=req.device,
                             repeat_view=req.repeat_view, cold_cache=req.cold_cache)
        # A repeat view is two loads, each within the trial's timeout.
        loads = 2 if req.repeat_view else 1
        watchdog = Watchdog(req.host, ("chromium", "chrome"), loads * req.timeout_s + WATCHDOG_GRACE_S)
        try:
            if threading.current_thread() is threading.main_thread():
                watchdog.driver = self.browser.driver_pids
                try:
                    with watchdog:
                        r = self.browser.load(req.url, opts, host=req.host, closing=watchdog.closing)
                finally:
                    if watchdog.fired:  # its driver may be gone: the next load gets a new one
                        self._replace_browser()
            else:  # one of a population: Playwright's sync API wants a driver per thread
                # CPython's C accelerator caches "the running loop" by thread-state id, and a
                # thread started while another's Playwright loop runs can be handed that loop:
                # say plainly that this thread runs none.
                asyncio.events._set_running_loop(None)
                with Browser() as b:
                    watchdog.driver = b.driver_pids
                    with watchdog:
                        r = b.load(req.url, opts, host=req.host, closing=watchdog.closing)
        except PlaywrightError as e:  # the harness failed, not the path
            if watchdog.fired:
                raise TestbedError(watchdog.reason()) from None
            raise TestbedError(f"browser: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
        out = outcome(r)
        if art and "video" in req.keep:
            out.env["video"] = _video(art)
        return out

    def _replace_browser(self) -> None:
        """A new driver after the watchdog ended the old one (closing what is left of it)."""
        try:
            self.browser.close()
        except Exception:  # noqa: BLE001 - a driver killed mid-call fails to stop in many ways
            pass
        self.browser = Browser()

    def close(self) -> None:
        self.browser.close()


def program_version(binary: str) -> str | None:
    """A browser's ``--version`` line, or None if it is not there."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20).stdout
        return out.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _video(art: Path) -> dict[str, Any]:
    """The load's video from its frames (satbench.video), or why there is none: the measurement
    stands either way."""
    from ..video import make_video  # noqa: PLC0415 - only the video artefact needs it

    try:
        made = make_video(art / "frames", art / "video.mp4")
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        return {"error": str(e)}
    return {"file": "video.mp4"} if made else {"error": "no frames"}
