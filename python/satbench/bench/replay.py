"""``satbench bench replay``: what replaying a site of many hosts costs. For
sites of 10, 100 and 300 hosts (ten hosts to a recorded address, as real
pages share CDN addresses), one loader trial each over the LAN: the
testbed's set-up, the servers' start, and the memory of its servers at their
peak; then one Chromium load of the 100-host site over GEO, with the time
spent outside the page load. Goal for 300 hosts: set-up under 5 s and the
servers under 1 GiB."""

from __future__ import annotations

import base64
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from ..experiment import spec
from ..experiment.runner import Runner
from ..model import TrialStatus

#: Hosts per recorded address in the generated sites.
PER_ADDRESS = 10
SIZES = (10, 100, 300)
GOAL_SETUP_S, GOAL_MEMORY_BYTES = 5.0, 1 << 30
_PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9aw"
                        "AAAABJRU5ErkJggg==")


def site_har(hosts: int) -> dict[str, Any]:
    """A page on www.bench.test with one 2 KB image from each of ``hosts - 1`` other hosts, ten to a
    recorded address."""
    image = base64.b64encode(_PNG + bytes(2000 - len(_PNG))).decode()
    urls = [f"https://img{i}.cdn{i // PER_ADDRESS}.bench.test/i.png" for i in range(hosts - 1)]
    html = ("<!DOCTYPE html><html><body>" + "".join(f'<img src="{u}" width="4" height="4">' for u in urls)
            + "</body></html>")

    def entry(url: str, mime: str, text: str, ip: str, b64: bool = False) -> dict[str, Any]:
        content: dict[str, Any] = {"mimeType": mime, "size": len(base64.b64decode(text)) if b64 else len(text),
                                   "text": text}
        if b64:
            content["encoding"] = "base64"
        return {"request": {"method": "GET", "url": url, "headers": []}, "serverIPAddress": ip,
                "response": {"status": 200, "headers": [{"name": "Content-Type", "value": mime}], "content": content}}

    entries = [entry("https://www.bench.test/", "text/html", html, "203.0.113.1")]
    entries += [entry(u, "image/png", image, f"198.51.100.{i // PER_ADDRESS % 250 + 1}", b64=True)
                for i, u in enumerate(urls)]
    return {"log": {"version": "1.2", "creator": {"name": "satbench bench replay", "version": "1"},
                    "pages": [{"id": "p", "title": "https://www.bench.test/"}], "entries": entries}}


def _servers_rss() -> int:
    """The resident memory of every satbench-server process now (bytes)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if Path("/proc", pid, "comm").read_text().strip() != "satbench-server":
                continue
            for line in Path("/proc", pid, "status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


class _Peak:
    """The servers' memory at its peak, sampled every 50 ms in a thread."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _servers_rss())
            self._stop.wait(0.05)

    def __enter__(self) -> _Peak:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _one(hosts: int, client: str, link: str, tmp: Path) -> dict[str, Any]:
    har = tmp / f"site-{hosts}.har"
    har.write_text(json.dumps(site_har(hosts)))
    exp = spec.build(f"bench-replay-{hosts}-{client}", {"link": link, "protocol": "h2", "page": f"har:{har}",
                                                        "client": client}, repetitions=1, seed=1, timeout_s=300)
    runner = Runner(exp, 1, tmp / "pages", tmp / "art" / f"{hosts}-{client}")
    try:
        t0 = time.monotonic()
        with _Peak() as peak:
            rec = runner.run_trial(exp.trials[0], 0)
        wall = time.monotonic() - t0
    finally:
        runner.close()
    m = rec.metrics
    return {"hosts": hosts, "addresses": -(-(hosts - 1) // PER_ADDRESS) + 1, "client": client, "link": link,
            "status": rec.status.value, "reason": rec.reason if rec.status is not TrialStatus.VALID else None,
            "testbed_up_s": m.get("testbed_up_s"), "server_up_s": m.get("server_up_s"),
            "setup_s": (m.get("testbed_up_s") or 0) + (m.get("server_up_s") or 0),
            "servers_peak_bytes": peak.peak, "plt_ms": m.get("plt_ms"), "overhead_s": rec.overhead_s,
            "trial_s": wall}


def replay_bench(sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="satbench-bench-replay-") as tmp:
        os.environ.setdefault("XDG_CACHE_HOME", str(Path(tmp) / "cache"))
        rows = [_one(n, "loader", "lan", Path(tmp)) for n in sizes]
        browser = _one(100, "chromium", "geo", Path(tmp)) if 100 in sizes else None
    big = next((r for r in rows if r["hosts"] == max(sizes)), None)
    return {"sites": rows, "chromium_geo": browser, "goal": {
        "hosts": max(sizes), "setup_s": GOAL_SETUP_S, "memory_bytes": GOAL_MEMORY_BYTES,
        "meets": None if big is None else (big["setup_s"] <= GOAL_SETUP_S
                                           and big["servers_peak_bytes"] <= GOAL_MEMORY_BYTES)}}


def run(quick: bool = False) -> dict[str, Any]:
    """The benchmark (``--quick``: sites of 10 and 100 hosts only)."""
    return replay_bench((10, 100) if quick else SIZES)


def format_report(r: dict[str, Any]) -> str:
    lines = ["replay: testbed set-up and server memory by site size (loader, LAN, one trial each)",
             f"  {'hosts':>6} {'addresses':>9} {'testbed':>8} {'servers':>8} {'set-up':>8} {'memory':>9} {'status'}"]
    for x in r["sites"]:
        lines.append(f"  {x['hosts']:>6} {x['addresses']:>9} {x['testbed_up_s'] or 0:>7.2f}s "
                     f"{x['server_up_s'] or 0:>7.2f}s {x['setup_s']:>7.2f}s {x['servers_peak_bytes'] / 2**20:>7.0f}MiB"
                     f" {x['status']}{' (' + x['reason'] + ')' if x['reason'] else ''}")
    g = r["goal"]
    lines.append(f"  goal at {g['hosts']} hosts: set-up under {g['setup_s']:g} s, servers under "
                 f"{g['memory_bytes'] >> 20} MiB: {'met' if g['meets'] else 'NOT met'}")
    b = r.get("chromium_geo")
    if b:
        lines.append(f"  Chromium, {b['hosts']} hosts over GEO: PLT {b['plt_ms'] or float('nan'):.0f} ms, "
                     f"harness {b['overhead_s'] or float('nan'):.2f} s outside the load, {b['status']}")
    return "\n".join(lines) + "\n"


__all__ = ["format_report", "replay_bench", "run", "site_har"]
