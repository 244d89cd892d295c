"""What both browsers share: the load options, the result of a load, the
scripts that read the page's own performance APIs, the wait for LCP to
settle, the metrics and the judgement of a load, and its conversion into the
runner's :class:`~satbench.model.ClientOutcome`.

Metrics come from the page's own performance APIs:

- PLT = loadEventEnd - startTime (of the navigation entry);
- TTFB = responseStart;
- DOMContentLoaded = domContentLoadedEventEnd;
- FCP = the first-contentful-paint entry;
- LCP = the last largest-contentful-paint entry. The observer is installed
  before any page script runs, and the load waits until no new LCP entry has
  come for ``lcp_settle_ms``, since FCP and LCP can come after the load event.

A page that measures something itself (the real-time client) sets
``window.__satbench_hold`` while it runs: the load also waits until it is
cleared, and its ``window.__satbench_result`` is the result's ``page_result``.

A load in which any response used another protocol than the one asked for
is **invalid**, and the result says why.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from ..errors import InputError
from ..model import TESTBED_NETWORKS, ClientOutcome, ClientResult, ObjectTiming, Protocol, TrialStatus, choices
from ..testbed.proc import wait_until

#: How long after the load event a page may take to paint at all.
FCP_GRACE_S = 3.0
#: How long frames are captured on after the load is over: a frame painted at its end is still
#: being encoded and sent (with the CPU throttled, for longer).
FRAMES_TAIL_MS = 200

#: Resource Timing entries a page may keep: the buffer holds 250 by default, and a page of more
#: objects (flags has 200, images640 640) would keep no timing for the rest.
RESOURCE_TIMING_BUFFER = 100_000

_OBSERVER = f"performance.setResourceTimingBufferSize({RESOURCE_TIMING_BUFFER});\n" + """
window.__satbench = {lcp: [], shifts: [], longtasks: []};
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    window.__satbench.lcp.push({t: e.startTime, size: e.size, url: e.url || null,
                                element: e.element ? e.element.tagName.toLowerCase() : null});
  }
}).observe({type: 'largest-contentful-paint', buffered: true});
// Layout shifts and long tasks (Chromium's; a browser without them leaves the lists empty).
if ((PerformanceObserver.supportedEntryTypes || []).includes('layout-shift')) {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) {
      window.__satbench.shifts.push({t: e.startTime, value: e.value, input: e.hadRecentInput});
    }
  }).observe({type: 'layout-shift', buffered: true});
}
if ((PerformanceObserver.supportedEntryTypes || []).includes('longtask')) {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__satbench.longtasks.push({t: e.startTime, d: e.duration});
  }).observe({type: 'longtask', buffered: true});
}
"""

_COLLECT = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const fcp = performance.getEntriesByName('first-contentful-paint')[0];
  const lcp = window.__satbench ? window.__satbench.lcp : [];
  return {
    time_origin: performance.timeOrigin,
    hold: !!window.__satbench_hold,
    page_result: window.__satbench_result || null,
    nav: nav ? {startTime: nav.startTime, responseStart: nav.responseStart, domContentLoadedEventEnd:
                nav.domContentLoadedEventEnd, loadEventEnd: nav.loadEventEnd, nextHopProtocol: nav.nextHopProtocol,
                transferSize: nav.transferSize, responseEnd: nav.responseEnd, connectStart: nav.connectStart,
                connectEnd: nav.connectEnd, requestStart: nav.requestStart} : null,
    fcp: fcp ? fcp.startTime : null,
    lcp: lcp,
    shifts: window.__satbench ? window.__satbench.shifts || [] : [],
    longtasks: window.__satbench ? window.__satbench.longtasks || [] : [],
    layout_metrics: (PerformanceObserver.supportedEntryTypes || []).includes('layout-shift'),
    resources: performance.getEntriesByType('resource').map(r => ({
      name: r.name, nextHopProtocol: r.nextHopProtocol, transferSize: r.transferSize,
      encodedBodySize: r.encodedBodySize, startTime: r.startTime, responseStart: r.responseStart,
      responseEnd: r.responseEnd, initiatorType: r.initiatorType, connectStart: r.connectStart,
      connectEnd: r.connectEnd, requestStart: r.requestStart})),
  };
}"""


#: The devices a browser trial may emulate: Playwright's descriptor name (None: the desktop window).
DEVICES: dict[str, str | None] = {"desktop": None, "phone": "Pixel 7"}


@dataclass(kw_only=True)
class BrowseOptions:
    protocol: str
    timeout_s: float = 120.0
    lcp_settle_ms: int = 300
    viewport: tuple[int, int] = (1280, 720)
    har: Path | None = None
    netlog: Path | None = None
    #: Navigate at this unix time, not before.
    start_at: float | None = None
    #: A population's barrier (see LoadRequest.release): called once the
    #: browser is ready; navigate at the instant it returns (Chromium arms a
    #: timer in its page for it; Firefox is asked at the instant: ``start``).
    release: Callable[[], float] | None = None
    #: Other hosts the page loads from (a sharded page's), besides the URL's:
    #: HTTP/3 is forced on each of them too.
    origins: tuple[str, ...] = ()
    #: Capture the frames the browser paints and compute the visual metrics (satbench.visual); keep
    #: the frames in this folder (the filmstrip) if one is given.
    frames: bool = False
    frames_dir: Path | None = None
    #: CPU throttling (1: none) and the device emulated (a key of DEVICES).
    cpu_slowdown: float = 1.0
    device: str = "desktop"
    #: A repeat view: load, close the browser's connections, load again in the same profile and
    #: measure that (the first view's result kept in ``LoadResult.first_view``); ``cold_cache``
    #: empties the HTTP cache between the two.
    repeat_view: bool = False
    cold_cache: bool = False
    #: Each origin speaks what the browser negotiates with it, up to ``protocol`` (HTTP/3 only where
    #: Alt-Svc offers it, or where ``origins`` name it), and no response is judged by its protocol:
    #: a live site recorded as it is (``satbench record``).
    negotiate: bool = False

    def instant(self) -> float | None:
        """The moment to navigate (unix time): the population's, once its barrier releases, or the fixed
        one; None: now."""
        return self.release() if self.release is not None else self.start_at

    def start(self) -> None:
        """Wait for the moment to navigate."""
        wait_until(self.instant())

    def validate(self) -> None:
        if self.protocol not in choices(Protocol):
            raise InputError(f"--protocol: must be one of {', '.join(choices(Protocol))}, got {self.protocol!r}")


@dataclass
class LoadResult:
    url: str
    protocol: str
    valid: bool
    invalid_reason: str | None
    plt_ms: float | None = None
    fcp_ms: float | None = None
    lcp_ms: float | None = None
    #: Cumulative Layout Shift (its largest session window) and Total Blocking Time from FCP to the
    #: load's end (layout_metrics: Chromium; None where the browser reports neither).
    cls: float | None = None
    tbt_ms: float | None = None
    lcp_element: str | None = None
    lcp_url: str | None = None
    ttfb_ms: float | None = None
    dcl_ms: float | None = None
    connections: int = 0
    bytes_received: int = 0
    resources: list[dict[str, Any]] = field(default_factory=list)
    browser: str = ""
    wall_s: float = 0.0
    #: When the navigation really started (the page's performance.timeOrigin, unix ms).
    start_unix_ms: float | None = None
    #: The visual metrics (satbench.visual) and how the frames were captured, if they were.
    visual: dict[str, Any] | None = None
    #: What the browser emulated (CPU throttling, the device: viewport, pixel ratio, user agent, touch).
    emulation: dict[str, Any] | None = None
    #: What a page that measures for itself left (``window.__satbench_result``).
    page_result: dict[str, Any] | None = None
    #: The page was still measuring when the load's time was up.
    held: bool = False
    #: A repeat view's first view (None: this load was a first view).
    first_view: "LoadResult | None" = None
    #: Requests for an address outside the testbed (or a name it does not know), each refused in the
    #: client's namespace: ``{"url", "error"}`` (docs/security.md, "A hostile page").
    blocked: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


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
                data["fcp"] is not None or now - t_load >= FCP_GRACE_S) and not data.get("hold"):
            break
        pause()
    return data


def page_metrics(res: LoadResult, data: dict[str, Any]) -> None:
    """PLT, TTFB, DOMContentLoaded, FCP and LCP from what ``_COLLECT`` returned (any browser)."""
    nav = data.get("nav") or {}
    res.start_unix_ms = data.get("time_origin")
    res.page_result = data.get("page_result")
    res.held = bool(data.get("hold"))
    res.plt_ms = nav.get("loadEventEnd", 0) - nav.get("startTime", 0) if nav else None
    res.ttfb_ms = nav.get("responseStart")
    res.dcl_ms = nav.get("domContentLoadedEventEnd")
    res.fcp_ms = data.get("fcp")
    if data.get("lcp"):
        last = data["lcp"][-1]
        res.lcp_ms, res.lcp_element, res.lcp_url = last["t"], last["element"], last["url"]
    if data.get("layout_metrics"):
        res.cls = cumulative_layout_shift(data.get("shifts") or [])
        end = nav.get("loadEventEnd") if nav else None
        res.tbt_ms = total_blocking_time(data.get("longtasks") or [], res.fcp_ms, end)


#: A session window of layout shifts: shifts less than 1 s apart, for at most 5 s (web.dev's CLS).
SHIFT_GAP_MS, SHIFT_WINDOW_MS = 1000.0, 5000.0
#: A task blocks the main thread for what it lasts beyond 50 ms (Lighthouse's TBT).
BLOCKING_MS = 50.0


def cumulative_layout_shift(shifts: list[dict[str, Any]]) -> float:
    """CLS as Chromium's metric defines it: the largest sum of a session window's layout shifts,
    those right after user input left out."""
    best = current = 0.0
    first = last = None
    for s in sorted((x for x in shifts if not x.get("input")), key=lambda x: float(x["t"])):
        t = float(s["t"])
        if first is None or last is None or t - last > SHIFT_GAP_MS or t - first > SHIFT_WINDOW_MS:
            first, current = t, 0.0
        current += float(s["value"])
        last = t
        best = max(best, current)
    return best


def total_blocking_time(tasks: list[dict[str, Any]], fcp_ms: float | None, end_ms: float | None) -> float | None:
    """TBT: each long task clipped to the time from FCP to ``end_ms``, counted beyond 50 ms, summed
    (Lighthouse's rule; it ends at Time to Interactive, which a load does not wait for: here, the
    load's end)."""
    if fcp_ms is None:
        return None
    total = 0.0
    for task in tasks:
        start, stop = float(task["t"]), float(task["t"]) + float(task["d"])
        # As Lighthouse does: the task clipped to the window, then what of it lies beyond 50 ms.
        clipped = (stop if end_ms is None else min(stop, end_ms)) - max(start, fcp_ms)
        total += max(0.0, clipped - BLOCKING_MS)
    return total


def outside_testbed(url: str, error: str) -> bool:
    """A failed request for something beyond the testbed: an address outside its ranges (the
    client's own loopback included), or a name its hosts and DNS server do not know."""
    host = (urlsplit(url).hostname or "").strip("[]")
    if error == "net::ERR_NAME_NOT_RESOLVED" or host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return not any(ip in ipaddress.ip_network(n) for n in TESTBED_NETWORKS)


def judge(res: LoadResult, want: str | None, failed: dict[str, str] | None = None,
          urls: dict[str, str] | None = None) -> None:
    """Mark the load invalid, with the reason, if any response used another
    protocol than ``want``, any request failed (``failed``: request id to error; ``urls``: request
    id to URL, to name the first failed request), or nothing was loaded or painted. Failed requests
    that tried to leave the testbed are listed in ``res.blocked``, and the reason says so first."""
    res.blocked = [{"url": urls[rid], "error": err} for rid, err in (failed or {}).items()
                   if urls and rid in urls and outside_testbed(urls[rid], err)]
    # A response from the HTTP cache (a repeat view's) crossed no connection now.
    # (A cleartext URL is HTTP/1.1 whatever the trial's version: a recorded site's http:// redirect.)
    wrong = [r for r in res.resources if want is not None and not r.get("cached")
             and r["protocol"] != ("http/1.1" if r["url"].startswith("http://") else want)]
    if res.blocked:
        b = res.blocked
        res.valid = False
        res.invalid_reason = (f"{len(b)} requests left the testbed and were blocked (nothing outside it is "
                              f"reachable): " + ", ".join(f"{x['url'][:200]} ({x['error']})" for x in b[:3])
                              + (f" and {len(b) - 3} more" if len(b) > 3 else ""))
    elif wrong:
        r = wrong[0]
        res.valid = False
        res.invalid_reason = (f"{len(wrong)} of {len(res.resources)} responses used another protocol than {want}; "
                              f"first: {r['url']} over {r['protocol'] or 'nothing (failed)'}")
    elif failed := {k: v for k, v in (failed or {}).items()
                    if not (res.page_result is not None and v == "net::ERR_ABORTED")}:
        # (A page that measures for itself closes its own streams: aborted
        # requests are its doing, and it reports its own errors.)
        rid, error = next(iter(failed.items()))
        where = f" ({urls[rid]})" if urls and rid in urls else ""
        res.valid = False
        res.invalid_reason = f"{len(failed)} requests failed; first: {error}{where}"
    elif res.plt_ms is None or res.fcp_ms is None:
        res.valid = False
        res.invalid_reason = "no load event or no first contentful paint"
    elif res.held:
        res.valid = False
        res.invalid_reason = "the page was still measuring when the load's time was up"




def outcome(r: LoadResult) -> ClientOutcome:
    """A browser's load as the runner's outcome."""
    status = TrialStatus.VALID if r.valid else TrialStatus.INVALID
    reason = r.invalid_reason
    metrics: dict[str, float | None] = {
        "plt_ms": r.plt_ms, "fcp_ms": r.fcp_ms, "lcp_ms": r.lcp_ms, "ttfb_ms": r.ttfb_ms, "dcl_ms": r.dcl_ms,
        "cls": r.cls, "tbt_ms": r.tbt_ms,
        "connections_opened": r.connections, "bytes_received": r.bytes_received, "responses": len(r.resources),
        "responses_cached": sum(bool(x.get("cached")) for x in r.resources),
        "requests_blocked": len(r.blocked),
        # Responses the browser finished but gave no Resource Timing for: their objects' times are
        # missing, and the bound and the overhead count only the objects that have them. (Chromium's
        # count: Firefox lists only the responses Resource Timing has.)
        "responses_untimed": sum(x["end_ms"] is None and x.get("bytes") is not None and not x.get("failed")
                                 for x in r.resources),
        "browser_wall_s": r.wall_s, **(r.visual or {}).get("metrics", {})}
    objects = [ObjectTiming(client=0, url=x["url"], protocol=x["protocol"], status=x["status"], bytes=x["bytes"],
                            start_ms=x["start_ms"], ttfb_ms=x["response_start_ms"], end_ms=x["end_ms"],
                            connection=None if x.get("connection") is None else str(x["connection"]),
                            connect_ms=x.get("connect_ms"))
               for x in r.resources]
    client = ClientResult(client=0, valid=r.valid, reason=r.invalid_reason, plt_ms=r.plt_ms, fcp_ms=r.fcp_ms,
                          lcp_ms=r.lcp_ms, ttfb_ms=r.ttfb_ms, bytes=r.bytes_received,
                          throughput_mbps=r.bytes_received * 8 / r.plt_ms / 1e3 if r.plt_ms else None)
    if r.first_view is not None:
        f = r.first_view
        metrics.update({"first_plt_ms": f.plt_ms, "first_fcp_ms": f.fcp_ms, "first_lcp_ms": f.lcp_ms,
                        "first_ttfb_ms": f.ttfb_ms, "first_connections_opened": f.connections,
                        "first_bytes_received": f.bytes_received})
        if not f.valid:  # a repeat view after a failed first view measures no return
            status, reason = TrialStatus.INVALID, f"first view: {f.invalid_reason}"
    env: dict[str, Any] = {}
    if r.visual:
        env["visual"] = {k: v for k, v in r.visual.items() if k in ("source", "captured", "fps")}
    if r.emulation:
        env["emulation"] = r.emulation
    return ClientOutcome(status=status, reason=reason, metrics=metrics, objects=objects, clients=[client],
                         raw=r.to_json(), load_s=None if r.plt_ms is None else r.plt_ms / 1e3,
                         start_unix_ms=r.start_unix_ms, env=env)


def visual_of(shots: list[tuple[float, bytes]], origin_unix_ms: float | None, source: str,
              keep: Path | None = None) -> dict[str, Any] | None:
    """The visual metrics of a load from its captured frames: (unix seconds, encoded image) each,
    timed from the navigation's start (``origin_unix_ms``); the page before its first paint is blank
    (a frame from before the navigation, or white). The frames after the start are written to
    ``keep`` as ``ms_NNNNNN.jpg`` (the filmstrip). None without a start or a frame."""
    if origin_unix_ms is None or not shots:
        return None
    import io  # noqa: PLC0415 - only a load that captured frames decodes them

    import numpy as np  # noqa: PLC0415
    from PIL import Image  # noqa: PLC0415

    from ..visual import histogram, visual_metrics  # noqa: PLC0415

    base: tuple[float, Any] = (0.0, np.zeros((3, 256), dtype=np.int64))
    frames = []
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
    for ts, data in sorted(shots, key=lambda s: s[0]):
        t = ts * 1000 - origin_unix_ms
        with Image.open(io.BytesIO(data)) as im:
            h = histogram(np.asarray(im.convert("RGB")))
        if t <= 0:
            base = (0.0, h)
            continue
        frames.append((t, h))
        if keep is not None:
            (keep / f"ms_{round(t):06d}.jpg").write_bytes(data)
    vm = visual_metrics([base, *frames])
    span_s = (max(s[0] for s in shots) - min(s[0] for s in shots)) or None
    return {"metrics": vm.metrics(), "progress": vm.progress, "source": source, "captured": len(shots),
            "fps": None if span_s is None else round(len(shots) / span_s, 2)}
