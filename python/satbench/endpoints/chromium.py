"""Real-browser page loads: Playwright driving Debian's Chromium.

Every load gets a fresh browser process and profile: no cache, no connection
reuse, no DNS cache. The protocol is forced per load:

    h1  --disable-quic --disable-http2
    h2  --disable-quic      (otherwise Chromium races QUIC after seeing Alt-Svc)
    h3  --origin-to-force-quic-on=HOST:PORT

Chromium trusts the test CA through an NSS database in a temporary HOME.
Metrics come from the page's own performance APIs:

- PLT = loadEventEnd - startTime (of the navigation entry);
- TTFB = responseStart;
- DOMContentLoaded = domContentLoadedEventEnd;
- FCP = the first-contentful-paint entry;
- LCP = the last largest-contentful-paint entry. The observer is installed
  before any page script runs, and the load waits until no new LCP entry has
  come for ``lcp_settle_ms``, since FCP and LCP can come after the load event.

Per-resource timings come from Resource Timing. The protocol each response
really used, its connection, and the bytes received come from Chromium's
DevTools network events. A load in which any response used another protocol
than the one asked for is **invalid**, and the result says why.
"""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import urlsplit

from . import ca as ca_mod
from .errors import InputError, PrerequisiteError

if TYPE_CHECKING:
    from .testbed import Host

CHROMIUM = "/usr/bin/chromium"
BASE_FLAGS = ["--no-sandbox", "--headless", "--disable-gpu", "--no-first-run", "--disable-background-networking",
              "--disable-component-update", "--disable-sync", "--disable-default-apps", "--no-default-browser-check",
              "--disable-features=MediaRouter,OptimizationHints,Translate,AutofillServerCommunication"]
PROTOCOLS = {"h1": "http/1.1", "h2": "h2", "h3": "h3"}
#: How long after the load event a page may take to paint at all.
FCP_GRACE_S = 3.0

_OBSERVER = """
window.__satbench = {lcp: []};
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    window.__satbench.lcp.push({t: e.startTime, size: e.size, url: e.url || null,
                                element: e.element ? e.element.tagName.toLowerCase() : null});
  }
}).observe({type: 'largest-contentful-paint', buffered: true});
"""

_COLLECT = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const fcp = performance.getEntriesByName('first-contentful-paint')[0];
  const lcp = window.__satbench ? window.__satbench.lcp : [];
  return {
    nav: nav ? {startTime: nav.startTime, responseStart: nav.responseStart, domContentLoadedEventEnd:
                nav.domContentLoadedEventEnd, loadEventEnd: nav.loadEventEnd, nextHopProtocol: nav.nextHopProtocol,
                transferSize: nav.transferSize, responseEnd: nav.responseEnd, connectStart: nav.connectStart,
                connectEnd: nav.connectEnd, requestStart: nav.requestStart} : null,
    fcp: fcp ? fcp.startTime : null,
    lcp: lcp,
    resources: performance.getEntriesByType('resource').map(r => ({
      name: r.name, nextHopProtocol: r.nextHopProtocol, transferSize: r.transferSize,
      encodedBodySize: r.encodedBodySize, startTime: r.startTime, responseStart: r.responseStart,
      responseEnd: r.responseEnd, initiatorType: r.initiatorType, connectStart: r.connectStart,
      connectEnd: r.connectEnd, requestStart: r.requestStart})),
  };
}"""


@dataclass(kw_only=True)
class BrowseOptions:
    protocol: str
    timeout_s: float = 120.0
    lcp_settle_ms: int = 300
    viewport: tuple[int, int] = (1280, 720)
    har: Path | None = None
    netlog: Path | None = None

    def validate(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise InputError(f"--protocol: must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")


@dataclass
class LoadResult:
    url: str
    protocol: str
    valid: bool
    invalid_reason: str | None
    plt_ms: float | None = None
    fcp_ms: float | None = None
    lcp_ms: float | None = None
    lcp_element: str | None = None
    lcp_url: str | None = None
    ttfb_ms: float | None = None
    dcl_ms: float | None = None
    connections: int = 0
    bytes_received: int = 0
    resources: list[dict[str, Any]] = field(default_factory=list)
    browser: str = ""
    wall_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _flags(opts: BrowseOptions, url: str) -> list[str]:
    flags = list(BASE_FLAGS)
    if opts.protocol == "h1":
        flags += ["--disable-quic", "--disable-http2"]
    elif opts.protocol == "h2":
        flags += ["--disable-quic"]
    else:
        u = urlsplit(url)
        flags += ["--enable-quic", f"--origin-to-force-quic-on={u.hostname}:{u.port or 443}"]
    if opts.netlog:
        flags += [f"--log-net-log={opts.netlog}", "--net-log-capture-mode=Default"]
    return flags


class Browser:
    """A Playwright driver kept across loads; every load still gets a fresh
    Chromium process and profile. With ``host``, Chromium runs inside that
    testbed host (through ``ip netns exec``, talking to the driver over
    pipes), so one driver serves every trial of a sweep."""

    def __init__(self) -> None:
        if not Path(CHROMIUM).exists():
            raise PrerequisiteError([f"no Chromium at {CHROMIUM}: install Debian's chromium (scripts/setup does)"])
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            raise PrerequisiteError(["no playwright in the Python environment (scripts/setup installs it)"]) from None
        self._tmp = tempfile.TemporaryDirectory(prefix="satbench-browser-")
        # One NSS database trusting the CA, copied into each load's fresh HOME.
        self._nss_template = ca_mod.nss_home(Path(self._tmp.name) / "template")
        self._pw = sync_playwright().start()

    def close(self) -> None:
        try:
            self._pw.stop()
        finally:
            self._tmp.cleanup()

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _executable(self, host: "Host | None", where: Path) -> str:
        if host is None:
            return CHROMIUM
        wrapper = where / "chromium-in-netns"
        wrapper.write_text("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in host.cmd([CHROMIUM])) + ' "$@"\n')
        wrapper.chmod(0o755)
        return str(wrapper)

    def load(self, url: str, opts: BrowseOptions, *, host: "Host | None" = None) -> LoadResult:
        """Load ``url`` once in a fresh Chromium and return what happened."""
        from playwright.sync_api import Error as PlaywrightError

        opts.validate()
        want = PROTOCOLS[opts.protocol]
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="satbench-browse-", dir=self._tmp.name) as tmp:
            home = Path(tmp) / "home"
            shutil.copytree(self._nss_template, home)
            responses: dict[str, dict[str, Any]] = {}
            finished: dict[str, int] = {}
            failed: dict[str, str] = {}
            browser = self._pw.chromium.launch(executable_path=self._executable(host, Path(tmp)), headless=True,
                                               args=_flags(opts, url), env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
            try:
                ctx = browser.new_context(viewport={"width": opts.viewport[0], "height": opts.viewport[1]},
                                          record_har_path=str(opts.har) if opts.har else None)
                page = ctx.new_page()
                cdp = ctx.new_cdp_session(page)

                def on_response(ev: dict[str, Any]) -> None:
                    r = ev["response"]
                    responses[ev["requestId"]] = {"url": r["url"], "status": r.get("status"),
                                                  "protocol": r.get("protocol"), "connection": r.get("connectionId"),
                                                  "remote": r.get("remoteIPAddress")}

                cdp.on("Network.responseReceived", on_response)
                cdp.on("Network.loadingFinished",
                       lambda ev: finished.__setitem__(ev["requestId"], int(ev.get("encodedDataLength", 0))))
                cdp.on("Network.loadingFailed",
                       lambda ev: failed.__setitem__(ev["requestId"], ev.get("errorText", "failed")))
                cdp.send("Network.enable")
                cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
                page.add_init_script(_OBSERVER)
                error = None
                try:
                    page.goto(url, wait_until="load", timeout=opts.timeout_s * 1000)
                except PlaywrightError as e:
                    error = str(e).splitlines()[0]
                data = {} if error is not None else settle(lambda: page.evaluate(_COLLECT), opts,
                                                            lambda: page.wait_for_timeout(50))
                version = browser.version
                if opts.har:
                    ctx.close()  # writes the HAR; otherwise closing the browser is enough
            finally:
                browser.close()
        return _result(url, opts, want, t0, version, error, data, responses, finished, failed)


def browse(url: str, opts: BrowseOptions) -> LoadResult:
    """Load ``url`` once in a fresh Chromium (here) and return what happened."""
    opts.validate()
    with Browser() as b:
        return b.load(url, opts)


def _result(url: str, opts: BrowseOptions, want: str, t0: float, version: str, error: str | None,
            data: dict[str, Any], responses: dict[str, dict[str, Any]], finished: dict[str, int],
            failed: dict[str, str]) -> LoadResult:
    wall = time.monotonic() - t0
    res = LoadResult(url=url, protocol=opts.protocol, valid=True, invalid_reason=None, browser=f"chromium {version}",
                     wall_s=wall)
    if error is not None:
        res.valid, res.invalid_reason = False, f"navigation failed: {error}"
        return res
    page_metrics(res, data)
    http = {rid: r for rid, r in responses.items() if r["url"].startswith(("http://", "https://"))}
    res.connections = len({r["connection"] for r in http.values() if r["connection"] is not None})
    res.bytes_received = sum(finished.get(rid, 0) for rid in http)
    timing = {r["name"]: r for r in data.get("resources", [])}
    for rid, r in http.items():
        t = timing.get(r["url"], {})
        res.resources.append({**r, "bytes": finished.get(rid), "failed": failed.get(rid),
                              "start_ms": t.get("startTime"), "response_start_ms": t.get("responseStart"),
                              "end_ms": t.get("responseEnd"), "transfer_size": t.get("transferSize"),
                              "next_hop_protocol": t.get("nextHopProtocol")})
    judge(res, want, failed)
    return res


def settle(collect: Callable[[], dict[str, Any]], opts: BrowseOptions, pause: Callable[[], Any]) -> dict[str, Any]:
    """After the load event, collect the page's metrics until LCP settles: FCP
    and LCP can come after the load event. A page that paints nothing (blank)
    gets FCP_GRACE_S to do so, and then counts as unpainted."""
    data: dict[str, Any] = {}
    t_load = time.monotonic()
    last_n, last_change = -1, t_load
    while time.monotonic() < t_load + opts.timeout_s:
        data = collect()
        n = len(data["lcp"])
        now = time.monotonic()
        if n != last_n:
            last_n, last_change = n, now
        elif now - last_change >= opts.lcp_settle_ms / 1e3 and (
                data["fcp"] is not None or now - t_load >= FCP_GRACE_S):
            break
        pause()
    return data


def page_metrics(res: LoadResult, data: dict[str, Any]) -> None:
    """PLT, TTFB, DOMContentLoaded, FCP and LCP from what ``_COLLECT`` returned (any browser)."""
    nav = data.get("nav") or {}
    res.plt_ms = nav.get("loadEventEnd", 0) - nav.get("startTime", 0) if nav else None
    res.ttfb_ms = nav.get("responseStart")
    res.dcl_ms = nav.get("domContentLoadedEventEnd")
    res.fcp_ms = data.get("fcp")
    if data.get("lcp"):
        last = data["lcp"][-1]
        res.lcp_ms, res.lcp_element, res.lcp_url = last["t"], last["element"], last["url"]


def judge(res: LoadResult, want: str, failed: dict[str, str] | None = None) -> None:
    """Mark the load invalid, with the reason, if any response used another
    protocol than ``want``, any request failed, or nothing was loaded or painted."""
    wrong = [r for r in res.resources if r["protocol"] != want]
    if wrong:
        r = wrong[0]
        res.valid = False
        res.invalid_reason = (f"{len(wrong)} of {len(res.resources)} responses used another protocol than {want}; "
                              f"first: {r['url']} over {r['protocol'] or 'nothing (failed)'}")
    elif failed:
        res.valid = False
        res.invalid_reason = f"{len(failed)} requests failed; first: {next(iter(failed.values()))}"
    elif res.plt_ms is None or res.fcp_ms is None:
        res.valid = False
        res.invalid_reason = "no load event or no first contentful paint"


def main_json(url: str, opts: BrowseOptions) -> str:
    return json.dumps(browse(url, opts).to_json())
