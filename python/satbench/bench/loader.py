"""``satbench bench loader``: the synthetic loader's CPU with many clients."""

from __future__ import annotations

import json
import os
import platform
import statistics
import tempfile
from pathlib import Path
from typing import Any

from .. import realtime
from ..endpoints import pages
from ..endpoints.loader import LoadOptions
from ..endpoints.options import ServerOptions
from ..endpoints.satbench_server import SatbenchServer
from ..errors import TestbedError
from ..link import profile
from ..testbed.testbed import Testbed, TestbedSpec
from .link import wire

LOADER_TARGET_CORE_FRACTION = 0.10
#: Many clients on one satellite beam: 100 clients over the GEO link within 20 % of one core.
BEAM_TARGET_CORE_FRACTION = 0.20
BEAM_CLIENTS = 100


#: A chat room of that many users, each sending this many messages (Poisson, 1 s apart on average).
ROOM_CLIENTS, ROOM_MESSAGES = 100, 20


def run(quick: bool = False) -> dict[str, Any]:
    out = loader_bench(page="uniform-500k" if quick else "uniform-2m")
    out["beam"] = beam_bench(clients=30 if quick else BEAM_CLIENTS)
    out["room"] = room_bench(clients=30 if quick else ROOM_CLIENTS, messages=5 if quick else ROOM_MESSAGES)
    return out


def _load(tb: Testbed, page: str, proto: str, clients: int, target: float) -> dict[str, Any]:
    argv = LoadOptions(protocol=proto, clients=clients, timeout_s=600).argv(f"https://server.test/{page}/")
    p = tb.client.run(argv, capture_output=True, text=True, timeout=660)
    if p.returncode != 0:
        raise TestbedError(f"the loader's {clients} clients over {proto}: "
                           f"{p.stderr.strip()[-300:] or f'exit {p.returncode}'}")
    d = json.loads(p.stdout)
    _all_loaded(d, clients, proto)
    cpu_s, wall_s = d["cpu_ms"] / 1e3, d["wall_ms"] / 1e3
    frac = cpu_s / wall_s
    total = sum(c["bytes"] for c in d["clients"])
    plts = [c["plt_ms"] / 1e3 for c in d["clients"] if c["plt_ms"] is not None]
    return {"valid_clients": d["valid_n"], "cpu_s": cpu_s, "wall_s": wall_s, "core_fraction": frac,
            "mbps": total * 8 / wall_s / 1e6, "plt_median_s": statistics.median(plts) if plts else None,
            "meets": d["valid_n"] == clients and frac <= target, "error": None}


def _all_loaded(d: dict[str, Any], clients: int, what: str, *, page: bool = True) -> None:
    """A figure of the loader's CPU is one of every client's whole load: short of that, none.
    ``page`` False: real-time clients, which load no page (their relays are checked apart)."""
    if d["valid_n"] != clients or (page and not all(c.get("bytes") for c in d["clients"])):
        why = next((c.get("invalid_reason") for c in d["clients"] if not c.get("valid")), None)
        raise TestbedError(f"the loader's {clients} clients over {what}: {d['valid_n']} loaded in full"
                           f"{f' ({why})' if why else ''}: no figure to give")


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


def room_bench(*, clients: int = ROOM_CLIENTS, messages: int = ROOM_MESSAGES) -> dict[str, Any]:
    """Many real-time users: ``clients`` loader clients in one chat room over the GEO link (HTTP/2), per
    mechanism, each on a fresh testbed: every member's messages relayed by satbench-server to all the
    others; with the satellite link's own count of what it carried towards the clients."""
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="satbench-bench-") as tmp:
        root = Path(tmp) / "pages"
        pages.generate(root, ["blank"])
        for mech in ("poll", "sse", "ws"):
            tb = Testbed(TestbedSpec(link=profile.load("geo"), seed=1))
            with tb:
                with SatbenchServer(root, Path(tmp) / "logs", ServerOptions(), cc="cubic", telemetry=False,
                                    host=tb.server):
                    rt = realtime.RealtimeSpec(mechanism=mech, scenario="room", messages=messages, message_bytes=100,
                                               interval_ms=1000, arrivals="poisson", clients=clients)
                    url = realtime.loader_url(rt, session=f"bench-{mech}", seed=1)
                    argv = LoadOptions(protocol="h2", clients=clients, timeout_s=600, mode="realtime",
                                       realtime=mech).argv(url)
                    p = tb.client.run(argv, capture_output=True, text=True, timeout=660)
            if p.returncode != 0:
                raise TestbedError(f"the room of {clients} over {mech}: "
                                   f"{p.stderr.strip()[-300:] or f'exit {p.returncode}'}")
            d = json.loads(p.stdout)
            _all_loaded(d, clients, f"{mech} in one room", page=False)
            lat = [m["recv_ms"] - m["t_ms"] for c in d["clients"] for m in c["realtime"]["down"]]
            if not lat:
                raise TestbedError(f"the room of {clients} over {mech} relayed nothing: no figure to give")
            cpu_s, wall_s = d["cpu_ms"] / 1e3, d["wall_ms"] / 1e3
            link = tb.link_counters
            fwd = link.forward if link is not None else None
            results[mech] = {"valid_clients": d["valid_n"], "relays": len(lat), "cpu_s": cpu_s, "wall_s": wall_s,
                             "core_fraction": cpu_s / wall_s,
                             "latency_median_ms": statistics.median(lat) if lat else None,
                             "forward_bytes": fwd.delivered.bytes if fwd else None,
                             "forward_packets": fwd.delivered.packets if fwd else None,
                             "forward_drops": fwd.dropped_packets if fwd else None,
                             "meets": d["valid_n"] == clients and len(lat) == clients * (clients - 1) * messages
                             and cpu_s / wall_s <= BEAM_TARGET_CORE_FRACTION, "error": None}
    return {"clients": clients, "messages": messages, "link": "geo (10 Mbit/s, 530 ms RTT), HTTP/2",
            "target_core_fraction": BEAM_TARGET_CORE_FRACTION, "mechanisms": results}


def _room_lines(r: dict[str, Any]) -> list[str]:
    lines = [f"  a chat room: {r['clients']} clients, {r['messages']} messages each relayed to all the others, "
             f"over {r['link']}"]
    for mech, x in r["mechanisms"].items():
        if x.get("error"):
            lines.append(f"    {mech}: ERROR {x['error']}")
            continue
        mark = "meets target" if x["meets"] else "MISSES target"
        wire = ("" if x.get("forward_bytes") is None else
                f"; towards the clients the link carried {x['forward_bytes'] / 1e6:.1f} MB in "
                f"{x['forward_packets']} packets ({x['forward_bytes'] / max(x['relays'], 1):.0f} bytes per relayed "
                f"message), dropped {x['forward_drops']}")
        lines.append(f"    {mech}: {x['valid_clients']} valid, {x['relays']} relayed messages had, {x['cpu_s']:.2f} "
                     f"CPU-s in {x['wall_s']:.1f} s = {100 * x['core_fraction']:.1f} % of a core, median latency "
                     f"{x['latency_median_ms']:.0f} ms{wire}  [{mark}: every message, <= "
                     f"{100 * r['target_core_fraction']:g} % of a core]")
    return lines


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
    if "room" in r:
        lines += _room_lines(r["room"])
    return "\n".join(lines)
