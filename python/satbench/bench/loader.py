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
from ..link import profile
from ..testbed.testbed import Testbed, TestbedSpec
from .link import wire

LOADER_TARGET_CORE_FRACTION = 0.10
#: Many clients on one satellite beam: 100 clients over the GEO link within 20 % of one core.
BEAM_TARGET_CORE_FRACTION = 0.20
BEAM_CLIENTS = 100


def run(quick: bool = False) -> dict[str, Any]:
    out = loader_bench(page="uniform-500k" if quick else "uniform-2m")
    out["beam"] = beam_bench(clients=30 if quick else BEAM_CLIENTS)
    return out


def _load(tb: Testbed, page: str, proto: str, clients: int, target: float) -> dict[str, Any]:
    argv = LoadOptions(protocol=proto, clients=clients, timeout_s=600).argv(f"https://server.test/{page}/")
    p = tb.client.run(argv, capture_output=True, text=True, timeout=660)
    if p.returncode != 0:
        return {"error": p.stderr.strip()[-300:] or f"exit {p.returncode}", "meets": False}
    d = json.loads(p.stdout)
    cpu_s, wall_s = d["cpu_ms"] / 1e3, d["wall_ms"] / 1e3
    frac = cpu_s / wall_s
    total = sum(c["bytes"] for c in d["clients"])
    plts = [c["plt_ms"] / 1e3 for c in d["clients"] if c["plt_ms"] is not None]
    return {"valid_clients": d["valid_n"], "cpu_s": cpu_s, "wall_s": wall_s, "core_fraction": frac,
            "mbps": total * 8 / wall_s / 1e6, "plt_median_s": statistics.median(plts) if plts else None,
            "meets": d["valid_n"] == clients and frac <= target, "error": None}


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
                    results[proto] = _load(tb, page, proto, clients, LOADER_TARGET_CORE_FRACTION)
    return {"page": page, "clients": clients, "link": f"{rate_mbps:g} Mbit/s each way, 100 ms RTT",
            "target_core_fraction": LOADER_TARGET_CORE_FRACTION,
            "machine": {"cores": os.cpu_count(), "kernel": platform.release()}, "protocols": results}


def beam_bench(*, clients: int = BEAM_CLIENTS, page: str = "uniform-100k") -> dict[str, Any]:
    """Many users on one satellite beam: ``clients`` loader clients at once over the GEO link."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="satbench-bench-") as tmp:
        root = Path(tmp) / "pages"
        pages.generate(root, [page])
        with Testbed(TestbedSpec(link=profile.load("geo"), seed=1)) as tb:
            with SatbenchServer(root, Path(tmp) / "logs", ServerOptions(), cc="cubic", telemetry=False,
                                host=tb.server):
                for proto in ("h1", "h2", "h3"):
                    results[proto] = _load(tb, page, proto, clients, BEAM_TARGET_CORE_FRACTION)
    return {"page": page, "clients": clients, "link": "geo (10 Mbit/s, 530 ms RTT)",
            "target_core_fraction": BEAM_TARGET_CORE_FRACTION, "protocols": results}


def _lines(r: dict[str, Any]) -> list[str]:
    lines = []
    for proto, x in r["protocols"].items():
        if x.get("error"):
            lines.append(f"  {proto}: ERROR {x['error']}")
            continue
        mark = "meets target" if x["meets"] else "MISSES target"
        plt = "-" if x["plt_median_s"] is None else f"{x['plt_median_s']:.1f} s"
        lines.append(f"  {proto}: {x['valid_clients']} valid, {x['cpu_s']:.2f} CPU-s in {x['wall_s']:.1f} s = "
                     f"{100 * x['core_fraction']:.1f} % of a core, {x['mbps']:.2f} Mbit/s together, median PLT "
                     f"{plt}  [{mark}: <= {100 * r['target_core_fraction']:g} % of a core]")
    return lines


def format_report(r: dict[str, Any]) -> str:
    lines = [f"satbench bench loader  ({r['machine']['cores']} cores): {r['clients']} clients load {r['page']} "
             f"at once over {r['link']}", *_lines(r)]
    if "beam" in r:
        b = r["beam"]
        lines += [f"  a satellite beam: {b['clients']} clients load {b['page']} at once over {b['link']}",
                  *["  " + x for x in _lines(b)]]
    return "\n".join(lines)
