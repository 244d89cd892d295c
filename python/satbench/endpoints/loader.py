"""The synthetic loader (``satbench-load``, Rust): many light clients, each
loading a page with a browser's connection policy, or one URL with a
curl-style breakdown, or a bulk download with progress.

It runs in the calling namespace (inside ``satbench shell``, behind the
link). Page metrics follow the studies' definitions: PLT is the last object
done, FCP the first object after the HTML done, LCP the largest object done;
all in seconds from the client's start.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import ca as ca_mod
from .errors import InputError, PrerequisiteError, TestbedError
from .prereq import REPO

PROTOCOLS = ("h1", "h2", "h3")
MODES = ("page", "single", "bulk")


def loader_binary() -> Path:
    return REPO / "target" / "release" / "satbench-load"


@dataclass(kw_only=True)
class LoadOptions:
    protocol: str
    clients: int = 1
    connections: int = 6
    mode: str = "page"
    repeat: int = 1
    timeout_s: float = 120.0
    connect_to: str | None = None

    def validate(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise InputError(f"--protocol: must be one of {', '.join(PROTOCOLS)}, got {self.protocol!r}")
        if self.clients < 1:
            raise InputError(f"--clients: must be at least 1, got {self.clients}")
        if self.connections < 1:
            raise InputError(f"--connections: must be at least 1, got {self.connections}")
        if self.mode not in MODES:
            raise InputError(f"mode: must be one of {', '.join(MODES)}, got {self.mode!r}")
        if self.repeat < 1 or (self.repeat > 1 and self.mode == "page"):
            raise InputError(f"repeat: must be 1 for a page load and at least 1 otherwise, got {self.repeat}")
        if self.timeout_s <= 0:
            raise InputError(f"--timeout: must be positive, got {self.timeout_s}")

    def argv(self, url: str) -> list[str]:
        argv = [str(loader_binary()), url, "--protocol", self.protocol, "--clients", str(self.clients),
                "--connections", str(self.connections), "--timeout", str(self.timeout_s)]
        if url.startswith("https://"):
            argv += ["--cacert", str(ca_mod.ensure().cert)]
        if self.mode != "page":
            argv += [f"--{self.mode}", "--repeat", str(self.repeat)]
        if self.connect_to:
            argv += ["--connect-to", self.connect_to]
        return argv


@dataclass
class LoadRun:
    """What one run of the loader reported: one entry per client."""

    url: str
    protocol: str
    clients: list[dict[str, Any]] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict)

    @property
    def valid(self) -> bool:
        return all(c["valid"] for c in self.clients)

    def to_json(self) -> dict[str, Any]:
        return self.raw


def load(url: str, opts: LoadOptions, *, stderr: Any = None, run: Callable[..., Any] = subprocess.run) -> LoadRun:
    """Run the loader (here, or with ``run``, e.g. ``Host.run``, elsewhere); raise
    on a crash, report invalid loads in the result."""
    opts.validate()
    if opts.protocol != "h1" and not url.startswith("https://"):
        raise InputError("HTTP/2 and HTTP/3 need an https:// URL")
    b = loader_binary()
    if not b.is_file():
        raise PrerequisiteError([f"no loader binary at {b}: run 'cargo build --release' (scripts/setup does)"])
    p = run(opts.argv(url), stdout=subprocess.PIPE, stderr=stderr if stderr is not None else subprocess.PIPE,
                       text=True, timeout=opts.timeout_s + 30)
    if p.returncode != 0:
        raise TestbedError(f"satbench-load failed ({p.returncode}): {(p.stderr or '').strip()}")
    d = json.loads(p.stdout)
    return LoadRun(url=url, protocol=opts.protocol, clients=d["clients"], cpu_s=d["cpu_s"], wall_s=d["wall_s"], raw=d)


def format_run(r: LoadRun) -> str:
    ms = lambda v: "-" if v is None else f"{v * 1e3:.0f} ms"  # noqa: E731
    lines = [f"{r.url} over {r.raw.get('protocol')}: {sum(c['valid'] for c in r.clients)} of {len(r.clients)} "
             f"clients valid; {r.cpu_s:.2f} CPU-s in {r.wall_s:.2f} s "
             f"({100 * r.cpu_s / max(r.wall_s, 1e-9):.1f} % of a core)"]
    for c in r.clients:
        state = "valid" if c["valid"] else f"INVALID: {c['invalid_reason']}"
        mbps = "-" if c["throughput_mbps"] is None else f"{c['throughput_mbps']:.2f} Mbit/s"
        lines.append(f"  client {c['client']}: {state}; PLT {ms(c['plt_s'])}, TTFB {ms(c['ttfb_s'])}, "
                     f"FCP {ms(c['fcp_s'])}, LCP {ms(c['lcp_s'])}; {c['objects_n']} objects, {c['bytes']} bytes "
                     f"on {len(c['connections'])} connections, {mbps}")
    if len(r.clients) == 1 and r.raw.get("mode") != "page":
        t = r.clients[0]["timeline"]
        lines.append("  " + ", ".join(f"{k[:-2]} {ms(v)}" for k, v in t.items() if v is not None))
    return "\n".join(lines)


def main_cli(url: str, opts: LoadOptions, as_json: bool) -> int:
    r = load(url, opts, stderr=sys.stderr)
    print(json.dumps(r.to_json()) if as_json else format_run(r))
    return 0 if r.valid else 3
