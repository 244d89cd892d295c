"""``satbench bench loader``: the synthetic loader's CPU with many clients."""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
from pathlib import Path
from typing import Any

from ..endpoints import pages
from ..endpoints.loader import LoadOptions
from ..endpoints.options import ServerOptions
from ..endpoints.satbench_server import SatbenchServer
from ..testbed.testbed import Testbed, TestbedSpec
from .link import wire

LOADER_TARGET_CORE_FRACTION = 0.10


def run(quick: bool = False) -> dict[str, Any]:
    return loader_bench(page="uniform-500k" if quick else "uniform-2m")


def loader_bench(*, page: str = "uniform-2m", clients: int = 10, rate_mbps: float = 10.0) -> dict[str, Any]:
    """CPU of the synthetic loader: ``clients`` concurrent page loads sharing
    a ``rate_mbps`` link of 100 ms RTT, per protocol."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="satbench-bench-") as tmp:
        root = Path(tmp) / "pages"
        pages.generate(root, [page])
        link = wire(["delay_ms=50", f"rate_mbps={rate_mbps:g}"])
        with Testbed(TestbedSpec(link=link, seed=1)) as tb:
            with SatbenchServer(root, Path(tmp) / "logs", ServerOptions(), cc="cubic", telemetry=False,
                                host=tb.server):
                for proto in ("h1", "h2", "h3"):
                    argv = LoadOptions(protocol=proto, clients=clients, timeout_s=600).argv(
                        f"https://server.test/{page}/")
                    p = tb.client.run(argv, capture_output=True, text=True, timeout=660)
                    if p.returncode != 0:
                        results[proto] = {"error": p.stderr.strip()[-300:] or f"exit {p.returncode}", "meets": False}
                        continue
                    d = json.loads(p.stdout)
                    cpu_s, wall_s = d["cpu_ms"] / 1e3, d["wall_ms"] / 1e3
                    frac = cpu_s / wall_s
                    total = sum(c["bytes"] for c in d["clients"])
                    results[proto] = {"valid_clients": d["valid_n"], "cpu_s": cpu_s, "wall_s": wall_s,
                                      "core_fraction": frac, "mbps": total * 8 / wall_s / 1e6,
                                      "plt_median_s": statistics.median(c["plt_ms"] / 1e3 for c in d["clients"]
                                                                        if c["plt_ms"] is not None),
                                      "meets": d["valid_n"] == clients and frac <= LOADER_TARGET_CORE_FRACTION,
                                      "error": None}
    return {"page": page, "clients": clients, "link": f"{rate_mbps:g} Mbit/s each way, 100 ms RTT",
            "target_core_fraction": LOADER_TARGET_CORE_FRACTION,
            "machine": {"cores": os.cpu_count(), "kernel": platform.release()}, "protocols": results}


def format_report(r: dict[str, Any]) -> str:
    lines = [f"satbench bench loader  ({r['machine']['cores']} cores): {r['clients']} clients load {r['page']} "
             f"at once over {r['link']}"]
    for proto, x in r["protocols"].items():
        if x.get("error"):
            lines.append(f"  {proto}: ERROR {x['error']}")
            continue
        mark = "meets target" if x["meets"] else "MISSES target"
        lines.append(f"  {proto}: {x['valid_clients']} valid, {x['cpu_s']:.2f} CPU-s in {x['wall_s']:.1f} s = "
                     f"{100 * x['core_fraction']:.1f} % of a core, {x['mbps']:.2f} Mbit/s together, median PLT "
                     f"{x['plt_median_s']:.1f} s  [{mark}: <= {100 * r['target_core_fraction']:g} % of a core]")
    return "\n".join(lines)
