"""``satbench bench server``: the test server's throughput per protocol."""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from ..endpoints import ca, pages
from ..endpoints.loader import LoadOptions
from ..endpoints.options import ServerOptions
from ..endpoints.satbench_server import SatbenchServer
from ..errors import TestbedError
from ..testbed import measure
from ..testbed.testbed import Testbed, TestbedSpec
from .link import wire

SERVER_TARGETS = {"http/1.1": 500.0, "https/1.1": 500.0, "h2": 500.0, "h3 quiche": 200.0, "h3 quinn": 200.0}
#: Each row: its name, the wire protocol, the QUIC stack of server and loader.
ROWS = (("http/1.1", "http/1.1", None), ("https/1.1", "https/1.1", None), ("h2", "h2", None),
        ("h3 quiche", "h3", "quiche"), ("h3 quinn", "h3", "quinn"))
URL_PATH = "/single-2m/img1.jpg"
OBJECT_BYTES = 2_000_000


def run(quick: bool = False) -> dict[str, Any]:
    return server_bench(count=10 if quick else 50)


def _fetch(tb: Any, proto: str, stack: str | None, count: int, tmp: Path, cert: str) -> tuple[bool, int, str]:
    """Fetch the object ``count`` times on one connection: (ok, bytes, error)."""
    if proto == "h3":
        argv = LoadOptions(protocol="h3", mode="single", repeat=count, timeout_s=600,
                           quic_stack=stack or "quiche").argv(f"https://server.test{URL_PATH}")
        p = tb.client.run(argv, capture_output=True, text=True, timeout=660)
        ok = p.returncode == 0 and json.loads(p.stdout)["valid_n"] == 1
        total = json.loads(p.stdout)["clients"][0]["bytes"] if ok else 0
    else:
        scheme = "http" if proto == "http/1.1" else "https"
        cfg = tmp / "curl.cfg"
        cfg.write_text("".join(f'url = "{scheme}://server.test{URL_PATH}"\noutput = "/dev/null"\n'
                               for _ in range(count)))
        argv = ["curl", "-sS", "-K", str(cfg), "--cacert", cert, "-w", "%{size_download}\n"]
        argv.append("--http2" if proto == "h2" else "--http1.1")
        p = tb.client.run(argv, capture_output=True, text=True, timeout=600)
        ok = p.returncode == 0
        total = sum(int(x) for x in p.stdout.split()) if ok else 0
    return ok, total, "" if ok else (p.stderr.strip()[-300:] or f"exit {p.returncode}")


def server_bench(count: int = 50) -> dict[str, Any]:
    """Throughput of satbench-server per protocol (and per QUIC stack, the
    loader on the same stack) for a 2 MB object, fetched ``count`` times
    over one connection through an unlimited link."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="satbench-bench-") as tmp:
        root = Path(tmp) / "pages"
        pages.generate(root, ["single-2m"])
        cert = str(ca.ensure().cert)
        with Testbed(TestbedSpec(link=wire([]), seed=1)) as tb:
            for name, proto, stack in ROWS:
                opts = ServerOptions(quic_stack=stack or "quiche")
                with SatbenchServer(root, Path(tmp) / "logs" / name.replace(" ", "-").replace("/", "_"), opts,
                                    cc="cubic", telemetry=False, host=tb.server) as srv:
                    cpu0 = measure.cpu_seconds(srv.pid)
                    t0 = time.monotonic()
                    ok, total, error = _fetch(tb, proto, stack, count, Path(tmp), cert)
                    secs = time.monotonic() - t0
                    cpu = measure.cpu_seconds(srv.pid) - cpu0
                if not ok or total < count * OBJECT_BYTES:
                    raise TestbedError(f"{name}: fetched {total} of the {count * OBJECT_BYTES} bytes asked"
                                       f"{f' ({error})' if error else ''}: no throughput to give")
                mbps = total * 8 / secs / 1e6
                results[name] = {"mbps": mbps, "bytes": total, "seconds": secs, "server_cpu_s": cpu,
                                 "server_cores": cpu / secs, "target_mbps": SERVER_TARGETS[name],
                                 "meets": ok and mbps >= SERVER_TARGETS[name], "error": error or None}
    return {"object_bytes": OBJECT_BYTES, "fetches": count, "link": "wire (no delay, no rate limit)",
            "machine": {"cores": os.cpu_count(), "kernel": platform.release()}, "protocols": results}


def format_report(r: dict[str, Any]) -> str:
    lines = [f"satbench bench server  ({r['machine']['cores']} cores): a 2 MB object fetched {r['fetches']} times "
             f"on one connection, through the {r['link']} link"]
    for proto, x in r["protocols"].items():
        mark = "meets target" if x["meets"] else "MISSES target"
        err = f"  error: {x['error']}" if x["error"] else ""
        lines.append(f"  {proto:11s} {x['mbps']:8.0f} Mbit/s, server {x['server_cores']:.2f} cores  "
                     f"[{mark}: >= {x['target_mbps']:g} Mbit/s]{err}")
    return "\n".join(lines)
