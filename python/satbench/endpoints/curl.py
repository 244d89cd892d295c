"""Scripted, curl-style timing (study E): one fresh connection per repetition,
the phases of each transfer cumulative from its start, as curl reports them.

HTTP/1.1 and HTTP/2 use curl itself (``-w '%{json}'``); HTTP/3 uses the
synthetic loader's single-URL mode (``satbench-load --single``, on the trial's QUIC stack),
since Debian's curl has no HTTP/3. QUIC has no
separate TCP connect: its ``connect_s`` is empty and its handshake (transport
and TLS together) ends at ``tls_s``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..errors import InputError, TestbedError
from ..model import DEFAULT_QUIC_STACK, ClientKind, ClientOutcome, TrialStatus
from . import ca as ca_mod
from .base import Client, LoadRequest, Problem
from .loader import LoadOptions, load

if TYPE_CHECKING:
    from ..experiment.population import Group

PHASES = ("dns_s", "connect_s", "tls_s", "first_byte_s", "total_s")


@dataclass
class Timing:
    url: str
    protocol: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for ph in PHASES:
            xs = sorted(r[ph] for r in self.rows if r.get(ph) is not None)
            if xs:
                out[ph] = {"median": statistics.median(xs), "p95": xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))],
                           "min": xs[0], "max": xs[-1]}
        return out


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def _curl(url: str, protocol: str, cacert: str, run: Runner = subprocess.run, timeout: float = 3600) -> dict[str, Any]:
    argv = ["curl", "-sS", "-o", "/dev/null", "--cacert", cacert, "-w", "%{json}",
            "--http2" if protocol == "h2" else "--http1.1", "--max-time", str(timeout)]
    p = run([*argv, url], capture_output=True, text=True, timeout=timeout + 10)
    if p.returncode != 0:
        raise TestbedError(f"curl failed: {p.stderr.strip()}")
    d = json.loads(p.stdout)
    tls = d["time_appconnect"] if url.startswith("https://") else None
    return {"dns_s": d["time_namelookup"], "connect_s": d["time_connect"], "tls_s": tls,
            "first_byte_s": d["time_starttransfer"], "total_s": d["time_total"], "bytes": d["size_download"],
            "status": d["http_code"], "http_version": d["http_version"]}


def _h3(url: str, run: Runner = subprocess.run, timeout: float = 3600, quic_stack: str = DEFAULT_QUIC_STACK
        ) -> dict[str, Any]:
    r = load(url, LoadOptions(protocol="h3", mode="single", timeout_s=timeout, quic_stack=quic_stack), run=run)
    c = r.clients[0]
    if not c["valid"]:
        raise TestbedError(f"HTTP/3 transfer of {url} failed: {c['invalid_reason']}")
    t = c["timeline"]
    def s(ms: float | None) -> float | None:
        return None if ms is None else ms / 1e3

    return {"dns_s": s(t["dns_ms"]), "connect_s": None, "tls_s": s(t["tls_ms"]), "first_byte_s": s(t["first_byte_ms"]),
            "total_s": s(t["total_ms"]), "bytes": c["bytes"], "status": c["objects"][0]["status"], "http_version": "3"}


def fetch_once(url: str, protocol: str, *, run: Runner = subprocess.run, timeout: float = 3600,
               quic_stack: str = DEFAULT_QUIC_STACK) -> dict[str, Any]:
    """One transfer on a fresh connection; ``run`` runs the client (e.g. ``Host.run`` in a testbed)."""
    if protocol == "h3":
        return _h3(url, run, timeout, quic_stack)
    return _curl(url, protocol, str(ca_mod.ensure().cert), run, timeout)


def timing(url: str, protocol: str, count: int = 100) -> Timing:
    """Fetch ``url`` ``count`` times, each on a fresh connection."""
    if protocol not in ("h1", "h2", "h3"):  # the scheme of the URL says cleartext
        raise InputError(f"--protocol: must be h1, h2 or h3, got {protocol!r}")
    if protocol == "h3" and not url.startswith("https://"):
        raise InputError("HTTP/3 needs an https:// URL")
    if count < 1:
        raise InputError(f"--count: must be at least 1, got {count}")
    t = Timing(url=url, protocol=protocol)
    for _ in range(count):
        t.rows.append(fetch_once(url, protocol))
    return t


def format_timing(t: Timing) -> str:
    lines = [f"{t.url} over {t.protocol}, {len(t.rows)} transfers on fresh connections (cumulative, median / p95):"]
    for ph, v in t.summary().items():
        lines.append(f"  {ph[:-2]:11s} {v['median'] * 1e3:9.1f} ms / {v['p95'] * 1e3:9.1f} ms")
    return "\n".join(lines)


def _ms(v: float | None) -> float | None:
    return None if v is None else v * 1e3


class Curl(Client):
    """One transfer on a fresh connection, timed as curl times it (study E):
    curl itself for HTTP/1.1 and HTTP/2, the loader's single mode for HTTP/3."""

    kind = ClientKind.CURL

    @classmethod
    def check(cls, group: "Group") -> Problem | None:
        if group.n != 1:
            return "clients", "curl fetches one URL per trial: clients must be 1"
        return None

    def load(self, req: LoadRequest) -> ClientOutcome:
        try:
            row = fetch_once(req.url, req.protocol.version.value, run=req.host.run, timeout=req.timeout_s,
                             quic_stack=req.quic_stack)
        except subprocess.TimeoutExpired:
            raise TestbedError(f"the transfer did not finish within {req.timeout_s:.0f} s") from None
        ok = 200 <= int(row.get("status") or 0) < 400
        status, reason = (TrialStatus.VALID, None) if ok else (TrialStatus.INVALID, f"HTTP status {row.get('status')}")
        want = req.protocol.http_version
        if ok and str(row.get("http_version")) != want:
            status, reason = TrialStatus.INVALID, f"came over HTTP/{row.get('http_version')}, not HTTP/{want}"
        metrics = {"dns_ms": _ms(row["dns_s"]), "connect_ms": _ms(row["connect_s"]), "tls_ms": _ms(row["tls_s"]),
                   "first_byte_ms": _ms(row["first_byte_s"]), "total_ms": _ms(row["total_s"]),
                   "ttfb_ms": _ms(row["first_byte_s"]), "plt_ms": _ms(row["total_s"]),
                   "bytes_received": row["bytes"],
                   "throughput_mbps": row["bytes"] * 8 / row["total_s"] / 1e6 if row["total_s"] else None}
        return ClientOutcome(status=status, reason=reason, metrics=metrics, raw=row,
                             load_s=row["total_s"] if row["total_s"] else None)
