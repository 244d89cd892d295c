"""Real-browser page loads in Debian's Firefox ESR, driven over WebDriver
BiDi (Firefox's own remote agent: no geckodriver, no patched browser).

Firefox is the browser whose number of HTTP/1.1 connections per server can
be set (``network.http.max-persistent-connections-per-server``), as study A
did to load objects one after another on one connection. Every load gets a
fresh profile and process. The protocol is forced with preferences:

    h1  network.http.http2.enabled = false, network.http.http3.enable = false
    h2  network.http.http3.enable = false
    h3  network.http.http3.alt-svc-mapping-for-testing = "HOST;h3=:PORT", with
        ...force-use-alt-svc-mapping-for-testing and, since the test CA is a
        third-party root, ...disable_when_third_party_roots_found = false

and verified per response from Resource Timing's ``nextHopProtocol``. The test
CA is trusted through the profile's own NSS database. Metrics are the ones
:mod:`satbench.endpoints.browser` reports, from the same performance APIs.

On a testbed host the browser runs inside the host's namespace and the
orchestrator talks to its agent over a socket made in that namespace
(:meth:`~satbench.testbed.host.Host.socket`), so a sweep drives Firefox in
its own process, as it drives Chromium.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from websockets.sync.client import connect

from .. import prereq
from ..errors import InputError, PrerequisiteError, TestbedError
from ..model import ClientKind, ClientOutcome, Protocol
from ..testbed.host import Host
from . import ca as ca_mod
from .base import Client, LoadRequest, Problem
from .browser import (
    _COLLECT,
    _OBSERVER,
    FRAMES_TAIL_MS,
    BrowseOptions,
    LoadResult,
    judge,
    outcome,
    page_metrics,
    settle,
    visual_of,
)
from .chromium import program_version

if TYPE_CHECKING:
    from ..experiment.population import Group

FIREFOX = prereq.FIREFOX

#: Preferences for a quiet, cache-less, measurement profile: nothing reaches
#: for outside hosts, nothing connects speculatively (it would skew the
#: connection count), DNS goes to the system resolver, and the page's clock
#: is not coarsened to whole milliseconds (Firefox's default for
#: fingerprinting; the real-time page's stamps and Navigation Timing then
#: come to a millisecond or two, and a message seemed to beat the speed of
#: light by 1.26 ms: satbench.realtime.BOUND_SLACK_MS).
QUIET_PREFS: dict[str, Any] = {
    "network.trr.mode": 5, "network.dns.disablePrefetch": True, "network.prefetch-next": False,
    "network.http.speculative-parallel-limit": 0, "network.predictor.enabled": False,
    "browser.urlbar.speculativeConnect.enabled": False, "network.captive-portal-service.enabled": False,
    "network.connectivity-service.enabled": False, "browser.cache.disk.enable": False,
    "browser.cache.memory.enable": False, "app.update.disabledForTesting": True, "app.normandy.enabled": False,
    "browser.safebrowsing.malware.enabled": False, "browser.safebrowsing.phishing.enabled": False,
    "browser.safebrowsing.downloads.enabled": False, "browser.safebrowsing.blockedURIs.enabled": False,
    "datareporting.policy.dataSubmissionEnabled": False, "datareporting.healthreport.uploadEnabled": False,
    "toolkit.telemetry.enabled": False, "extensions.update.enabled": False, "extensions.blocklist.enabled": False,
    "browser.shell.checkDefaultBrowser": False, "browser.startup.homepage_override.mstone": "ignore",
    "browser.aboutwelcome.enabled": False, "services.settings.server": "data:,",
    "network.http.http3.enable_0rtt": False, "privacy.reduceTimerPrecision": False,
    "security.OCSP.enabled": 0, "security.remote_settings.crlite_filters.enabled": False,
    "browser.ping-centre.telemetry": False, "browser.newtabpage.enabled": False,
}


def _prefs(protocol: str, url: str, connections: int, origins: tuple[str, ...] = ()) -> dict[str, Any]:
    p = dict(QUIET_PREFS)
    p["network.http.max-persistent-connections-per-server"] = connections
    if protocol == "h1":
        p["network.http.http2.enabled"] = False
        p["network.http.http3.enable"] = False
    elif protocol == "h2":
        p["network.http.http3.enable"] = False
    else:
        u = urlsplit(url)
        p["network.http.http3.enable"] = True
        hosts = dict.fromkeys([str(u.hostname), *origins])
        # (HOST, or HOST:PORT for an origin on another port than the page's.)
        p["network.http.http3.alt-svc-mapping-for-testing"] = ",".join(
            f"{h.split(':')[0]};h3=:{h.split(':')[1] if ':' in h else (u.port or 443)}" for h in hosts)
        p["network.http.http3.force-use-alt-svc-mapping-for-testing"] = True
        # The test CA is a third-party root, for which Firefox would otherwise turn HTTP/3 off.
        p["network.http.http3.disable_when_third_party_roots_found"] = False
    return p


def _profile(root: Path, prefs: dict[str, Any]) -> Path:
    prof = root / "profile"
    prof.mkdir(parents=True)
    (prof / "user.js").write_text("".join(f'user_pref("{k}", {json.dumps(v)});\n' for k, v in prefs.items()))
    certutil = shutil.which("certutil")
    if certutil is None:
        raise PrerequisiteError(["no certutil: install libnss3-tools (scripts/setup does)"])
    cert = str(ca_mod.ensure().cert)
    subprocess.run([certutil, "-N", "-d", f"sql:{prof}", "--empty-password"], check=True, capture_output=True)
    subprocess.run([certutil, "-A", "-d", f"sql:{prof}", "-n", "satbench test CA", "-t", "C,,", "-i", cert],
                   check=True, capture_output=True)
    return prof


class _Bidi:
    """The few WebDriver BiDi commands a page load needs."""

    def __init__(self, ws_url: str, host: Host | None = None):
        sock = None
        if host is not None:
            # The agent listens on the loopback of the browser's namespace.
            u = urlsplit(ws_url)
            sock = host.socket()
            sock.settimeout(30)
            sock.connect((u.hostname or "127.0.0.1", u.port or 80))
            sock.settimeout(None)
        self.ws = connect(ws_url, sock=sock, max_size=64 << 20, open_timeout=30)
        self.next_id = 0

    def send(self, method: str, params: dict[str, Any], timeout: float = 60) -> dict[str, Any]:
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{method}: no answer within {timeout:.0f} s")
            msg = json.loads(self.ws.recv(timeout=left))
            if msg.get("id") != my:
                continue  # an event
            if msg.get("type") == "error":
                raise RuntimeError(f"{method}: {msg.get('error')}: {msg.get('message')}")
            return dict(msg.get("result") or {})

    def evaluate_json(self, context: str, expression: str) -> Any:
        r = self.send("script.evaluate", {"expression": f"JSON.stringify(({expression})())",
                                          "target": {"context": context}, "awaitPromise": True})
        if r.get("type") == "exception":
            raise RuntimeError(f"page script failed: {r.get('exceptionDetails', {}).get('text')}")
        return json.loads(r["result"]["value"])

    def close(self) -> None:
        try:
            self.ws.close()
        except Exception:  # noqa: BLE001 - the browser may be gone already
            pass


def firefox_load(url: str, opts: BrowseOptions, connections: int = 6, *, host: Host | None = None) -> LoadResult:
    """Load ``url`` once in a fresh Firefox, here or inside testbed host ``host``."""
    opts.validate()
    if not 1 <= connections <= 64:
        raise InputError(f"--connections: must be 1 to 64, got {connections}")
    prereq.provide(["firefox"])
    if not Path(FIREFOX).exists():
        raise PrerequisiteError([f"no Firefox at {FIREFOX}: bash scripts/setup --with firefox installs Debian's "
                                 "firefox-esr"])
    want = Protocol(opts.protocol).alpn
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="satbench-firefox-") as tmp:
        prof = _profile(Path(tmp), _prefs(opts.protocol, url, connections, opts.origins))
        env = {"HOME": tmp, "PATH": "/usr/bin:/bin", "MOZ_CRASHREPORTER_DISABLE": "1",
               "MOZ_DISABLE_AUTO_SAFE_MODE": "1", "TMPDIR": tmp}
        argv = [FIREFOX, "--headless", "--no-remote", "--profile", str(prof), "--remote-debugging-port", "0",
                "about:blank"]
        proc = subprocess.Popen(host.cmd(argv) if host else argv,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
        bidi = None
        try:
            ws_url = _wait_for_agent(proc, 60)
            bidi = _Bidi(ws_url + "/session", host)
            version = bidi.send("session.new", {"capabilities": {}}).get("capabilities", {}).get("browserVersion", "")
            context = bidi.send("browsingContext.getTree", {})["contexts"][0]["context"]
            bidi.send("script.addPreloadScript", {"functionDeclaration": "() => {" + _OBSERVER_SAFE + "}"})
            error = None
            shots: list[tuple[float, bytes]] = []

            def shot() -> None:
                """One frame (Firefox has no screencast: a screenshot, timed at the middle of its taking)."""
                a = time.time()
                png = base64.b64decode(bidi.send("browsingContext.captureScreenshot", {"context": context})["data"])
                shots.append(((a + time.time()) / 2, png))

            if opts.frames:
                shot()  # the blank page before the navigation
            opts.start()
            try:
                if opts.frames:
                    # Frames while the page loads: navigate without waiting, then take screenshots until
                    # the load is complete (the page asked to be held done too).
                    bidi.send("browsingContext.navigate", {"context": context, "url": url, "wait": "none"})
                    deadline = time.monotonic() + opts.timeout_s
                    while True:
                        shot()
                        try:
                            st = bidi.evaluate_json(context,
                                                    "() => ({ready: document.readyState, url: location.href})")
                        except RuntimeError:  # the document is being replaced mid-navigation: ask again
                            st = {"ready": "loading", "url": ""}
                        if st["ready"] == "complete" and st["url"] not in ("about:blank", ""):
                            break
                        if time.monotonic() > deadline:
                            raise TimeoutError(f"no load within {opts.timeout_s:.0f} s")
                else:
                    bidi.send("browsingContext.navigate", {"context": context, "url": url, "wait": "complete"},
                              timeout=opts.timeout_s)
            except (RuntimeError, TimeoutError) as e:
                error = str(e)
            pause = shot if opts.frames else (lambda: time.sleep(0.05))
            data = {} if error is not None else settle(lambda: bidi.evaluate_json(context, _COLLECT), opts, pause)
            if opts.frames and error is None:
                tail = time.monotonic() + FRAMES_TAIL_MS / 1000
                while time.monotonic() < tail:
                    shot()
        finally:
            if bidi is not None:
                bidi.close()
            _stop(proc)
    res = _result(url, opts, want, t0, f"firefox {version}", error, data, connections)
    if opts.frames and res.valid:
        res.visual = visual_of(_as_jpeg(shots), res.start_unix_ms, "firefox webdriver bidi screenshots (polled)",
                               opts.frames_dir)
    return res


def _as_jpeg(shots: list[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
    """Screenshots (PNG) as the filmstrip keeps frames (JPEG, quality 85, as Chromium's screencast)."""
    import io  # noqa: PLC0415 - only a load that captured frames converts them

    from PIL import Image  # noqa: PLC0415

    out = []
    for t, png in shots:
        buf = io.BytesIO()
        with Image.open(io.BytesIO(png)) as im:
            im.convert("RGB").save(buf, "JPEG", quality=85)
        out.append((t, buf.getvalue()))
    return out


#: The LCP observer, tolerant of a browser without 'largest-contentful-paint'.
_OBSERVER_SAFE = "try {" + _OBSERVER + "} catch (e) { window.__satbench = {lcp: []}; }"


def _wait_for_agent(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            if proc.poll() is not None:
                raise RuntimeError(f"Firefox exited ({proc.returncode}): {' '.join(seen)[-500:]}")
            continue
        seen.append(line.strip())
        m = re.search(r"WebDriver BiDi listening on (ws://\S+)", line)
        if m:
            return m.group(1)
    raise RuntimeError("Firefox's remote agent did not start within 60 s")


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
            proc.wait()


def _result(url: str, opts: BrowseOptions, want: str, t0: float, browser: str, error: str | None,
            data: dict[str, Any], connections: int) -> LoadResult:
    res = LoadResult(url=url, protocol=opts.protocol, valid=True, invalid_reason=None, browser=browser,
                     wall_s=time.monotonic() - t0)
    if error is not None:
        res.valid, res.invalid_reason = False, f"navigation failed: {error}"
        return res
    page_metrics(res, data)
    nav = data.get("nav") or {}
    entries = [{"name": url, "nextHopProtocol": nav.get("nextHopProtocol"), "transferSize": nav.get("transferSize"),
                "startTime": 0.0, "responseStart": nav.get("responseStart"), "responseEnd": nav.get("responseEnd"),
                "connectStart": nav.get("connectStart"), "connectEnd": nav.get("connectEnd")},
               *data.get("resources", [])]
    for r in entries:
        res.resources.append({"url": r["name"], "status": None, "protocol": r.get("nextHopProtocol"),
                              "connection": None, "remote": None, "bytes": r.get("transferSize"), "failed": None,
                              "start_ms": r.get("startTime"), "response_start_ms": r.get("responseStart"),
                              "end_ms": r.get("responseEnd"), "transfer_size": r.get("transferSize"),
                              "next_hop_protocol": r.get("nextHopProtocol")})
    # A response that set up its own connection (Resource Timing shows a connect phase).
    res.connections = sum(1 for r in entries if (r.get("connectEnd") or 0) > (r.get("connectStart") or 0))
    res.bytes_received = sum(int(r.get("transferSize") or 0) for r in entries)
    judge(res, want)
    return res


class Firefox(Client):
    """Debian's Firefox ESR over WebDriver BiDi, a fresh process and profile per load."""

    kind = ClientKind.FIREFOX
    artefacts = frozenset({"frames", "video"})

    @classmethod
    def check(cls, group: "Group") -> Problem | None:
        if group.n != 1:
            return "clients", "a browser trial runs one browser; use client = \"loader\" for many clients"
        return None

    @classmethod
    def version(cls) -> str | None:
        return program_version(FIREFOX)

    @classmethod
    def settings(cls) -> dict[str, Any]:
        return {"prefs": dict(QUIET_PREFS)}

    def load(self, req: LoadRequest) -> ClientOutcome:
        art = req.artefacts
        frames = bool({"frames", "video"} & req.keep)
        opts = BrowseOptions(protocol=req.protocol.version.value, timeout_s=req.timeout_s, start_at=req.start_at,
                             release=req.release, origins=req.origins, frames=frames,
                             frames_dir=art / "frames" if art and frames else None)
        try:
            r = firefox_load(req.url, opts, req.connections, host=req.host)
        except (RuntimeError, OSError, TimeoutError) as e:  # the harness failed, not the path
            raise TestbedError(f"firefox: {type(e).__name__}: {e}") from None
        out = outcome(r)
        if art and "video" in req.keep:
            from .chromium import _video  # noqa: PLC0415 - one helper for both browsers' videos

            out.env["video"] = _video(art)
        return out
