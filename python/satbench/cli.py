"""The ``satbench`` command: a thin layer over the library.

Each subcommand is one row of :data:`COMMANDS`: its arguments and a handler
that builds library objects, calls the library and prints what it returns.
All printing is here; the library reports progress through callbacks. A
library error becomes one line on stderr and its exit code (2 for bad input
or a missing prerequisite, 1 for a testbed failure).
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from . import prereq
from .bench import BENCHES
from .endpoints import ca, pages
from .endpoints import options as server_options
from .endpoints.base import Server
from .endpoints.browser import BrowseOptions, LoadResult
from .endpoints.curl import format_timing, timing
from .endpoints.loader import LoadOptions, format_run, load
from .endpoints.options import ServerOptions
from .endpoints.satbench_server import SatbenchServer
from .errors import InputError, SatbenchError
from .experiment import plan as plan_mod
from .experiment import runner
from .experiment import spec as experiment_spec
from .experiment.plan import Plan
from .experiment.trialspec import TrialSpec
from .link import profile
from .link.spec import LinkSpec, resolve
from .model import DEFAULT_QUIC_STACK, QUIC_STACKS, CongestionControl, Protocol, TrialStatus, choices
from .path import PathElement, element_class
from .testbed.cleanup import cleanup
from .testbed.shell import format_counters, run_shell
from .testbed.testbed import (
    IP_FAMILIES,
    MAX_TERMINALS,
    Testbed,
    TestbedSpec,
    check_namespace_default_cc,
    terminal_subnets,
)

DEFAULT_DB = "results/satbench.sqlite"
Handler = Callable[[argparse.Namespace, list[str]], int]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    args: Callable[[argparse.ArgumentParser], None]
    run: Handler
    usage: str | None = None
    #: Takes a command after ``--`` (only ``shell``).
    takes_command: bool = False


# -- links, shell, cleanup, check ----------------------------------------------------------



def ranged(lo: float, hi: float, kind: type[int] | type[float] = int) -> Callable[[str], float]:
    """An argparse type: a number of ``kind`` from ``lo`` to ``hi``; anything else is
    refused as one line (``--FLAG: must be ...``), exit 2."""
    def parse(text: str) -> float:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {'whole ' if kind is int else ''}number from {lo:g} to "
                                             f"{hi:g}, got {text!r}") from None
        if not (lo <= v <= hi) or v != v:
            raise argparse.ArgumentTypeError(f"must be from {lo:g} to {hi:g}, got {text}")
        return v
    parse.__name__ = "number"
    return parse


def _series_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="the series: lines of TIME RTT_MS (or TIME lost), or ping -D -O output")
    p.add_argument("--out", required=True, help="folder for the profile and its delay traces")
    p.add_argument("--name", required=True, help="the profile's name (NAME.toml)")
    p.add_argument("--split", type=float, default=0.5, help="the forward share of each round trip (default 0.5)")
    p.add_argument("--loss-window-s", type=float, default=1.0, help="seconds per loss estimate (default 1)")
    p.add_argument("--interval-ms", type=float, help="the delay trace's interval (default: the probes' spacing)")
    p.add_argument("--forward-mbps", type=float, default=100.0, help="forward rate (default 100)")
    p.add_argument("--return-mbps", type=float, default=15.0, help="return rate (default 15)")
    p.add_argument("--queue-ms", type=float, default=100.0, help="each direction's queue in ms (default 100)")
    p.add_argument("--align-minute", action="store_true",
                   help="the series' time 0 at the start of every UTC minute (a series whose length divides 60 s)")


def _series(a: argparse.Namespace, _: list[str]) -> int:
    from .link import series  # noqa: PLC0415 - one command's module

    out = series.write(Path(a.file), Path(a.out), a.name, split=a.split, loss_window_s=a.loss_window_s,
                       interval_ms=a.interval_ms, forward_mbps=a.forward_mbps, return_mbps=a.return_mbps,
                       queue_ms=a.queue_ms, align_minute=a.align_minute)
    prof = profile.load(str(out))
    link = resolve(prof)  # the emulator checks it, as a trial would
    print(f"wrote {out} ({link.label}; base RTT {link.base_rtt_ms:.1f} ms); use it as link = \"{out}\"")
    return 0


def _links_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true")


def _links(a: argparse.Namespace, _: list[str]) -> int:
    rows: list[dict[str, Any]] = []
    for name, path in sorted(profile.available().items()):
        try:
            prof = profile.load(str(path))
            link: LinkSpec = resolve(prof)
        except SatbenchError as e:
            rows.append({"name": name, "error": str(e), "file": str(path)})
            continue
        rows.append({"name": prof.name, "rtt_ms": link.base_rtt_ms, "forward": prof.forward.summary(),
                     "return": prof.ret.summary(), "description": prof.description, "file": str(path),
                     "hash": link.hash, "emulator_config": link.config if a.json else None})
    if a.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        if "error" in r:
            print(f"{r['name']}: INVALID: {r['error']}")
            continue
        print(f"{r['name']}  (base RTT {r['rtt_ms']:g} ms)")
        print(f"    {r['description']}")
        print(f"    forward: {r['forward']}")
        print(f"    return:  {r['return']}")
    return 0


def _server_args(p: argparse.ArgumentParser) -> None:
    """The server's flags, derived from :class:`ServerOptions`."""
    p.add_argument("--cc", choices=choices(CongestionControl),
                   help="server congestion control: TCP_CONGESTION per socket, and quiche's (bbr = BBRv2 in quiche)")
    for f in server_options.fields():
        flag, help = server_options.flag_of(f), str(f.metadata["help"])
        if f.metadata["choices"]:
            p.add_argument(flag, dest=f.name, choices=f.metadata["choices"], default=f.default, help=help)
        elif server_options.is_bool(f):
            p.add_argument(flag, dest=f.name, action="store_false" if f.default else "store_true",
                           help=("no " + help) if f.default else help)
        else:
            p.add_argument(flag, dest=f.name, type=ranged(f.metadata["lo"], f.metadata["hi"]),
                           metavar=f.metadata["metavar"], help=help)


def _options_from(a: argparse.Namespace) -> ServerOptions:
    return ServerOptions(**{f.name: getattr(a, f.name) for f in server_options.fields()})


def _shell_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--link", required=True, help="link profile name or .toml file (see 'satbench links')")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile key: forward.KEY, return.KEY or KEY for both (repeatable)")
    p.add_argument("--access", help="profile of an access link between clients and terminal (e.g. wifi)")
    p.add_argument("--terrestrial", metavar="PROFILE",
                   help="profile of a terrestrial link between the gateway and the servers (loss, delay there only)")
    p.add_argument("--pep", choices=("terminal", "gateway", "both"),
                   help="a split-TCP PEP (satbench-pep) at the terminal, the gateway or both")
    p.add_argument("--pep-satellite", metavar="SETTINGS",
                   help="the PEP's satellite leg's TCP settings (cc=bbr,sndbuf=16M,rcvbuf=16M,nodelay,fastopen)")
    p.add_argument("--pep-terrestrial", metavar="SETTINGS", help="the PEP's terrestrial legs' TCP settings")
    p.add_argument("--proxy", choices=("nginx", "gateway", "nghttpx"),
                   help="an HTTP proxy at the gateway (HTTP/2 or HTTP/1.1 to the client; nginx: HTTP/1.1 to the "
                        "origin, nghttpx: see --proxy-upstream); needs --serve")
    p.add_argument("--proxy-upstream", choices=("h1", "h2"),
                   help="the proxy's protocol to the origin (h2: nghttpx only; default h1)")
    p.add_argument("--proxy-cache", choices=("none", "cold"),
                   help="nginx's cache: none (default) or cold (empty at the start; an experiment's proxy cache "
                        "can also be warm, its trial's page fetched through the proxy first)")
    p.add_argument("--cross", choices=("bulk", "video", "web"),
                   help="other users' traffic sharing the link from hosts of its own (xclient, xserver), started "
                        "before the command and running through it: a bulk TCP download, a video-like or web-like "
                        "one")
    p.add_argument("--tunnel", choices=("wireguard", "vpn"),
                   help="a VPN from the client host to an endpoint on the server LAN (satbench-tunnel): it hides "
                        "TCP from PEPs")
    p.add_argument("--clients", type=ranged(1, 200), default=1, help="client hosts (default 1)")
    p.add_argument("--servers", type=ranged(1, 32), default=1, help="server hosts (default 1)")
    p.add_argument("--terminals", type=ranged(1, MAX_TERMINALS), default=1,
                   help="satellite terminals sharing the link, clients dealt to them in turn (default 1)")
    p.add_argument("--seed", type=ranged(0, 2**63 - 1),
                   help="seed of the emulator's randomness (default: random, reported)")
    p.add_argument("--default-cc", choices=choices(CongestionControl),
                   help="default TCP congestion control in every host namespace")
    p.add_argument("--pcap", metavar="DIR", help="write a pcap of each side of the link into DIR")
    p.add_argument("--ip", choices=IP_FAMILIES, default="v4",
                   help="the address family of the hosts' names: v4, v6 (every host also gets an IPv6 address and "
                        "names resolve to it alone) or dual (names resolve to both)")
    p.add_argument("--dns", action="store_true",
                   help="clients resolve names through a DNS server on the server host (lookups cross the link)")
    p.add_argument("--serve", metavar="DIR", help="start satbench-server on the server host, serving DIR")
    p.add_argument("--shards", type=ranged(1, 32), default=1, metavar="K",
                   help="serve DIR from K server hosts (s1.test ... sK.test, each its own address); every page "
                        "folder in DIR gets index-shardsK.html with its objects spread over them (needs --serve)")
    p.add_argument("--site", metavar="DIR",
                   help="replay an imported site (satbench pages import): one server host per recorded origin, "
                        "each with its own name and certificate")
    p.add_argument("--server-logs", metavar="DIR", help="keep the server's logs (access, TCP_INFO, qlog) in DIR")
    _server_args(p)
    p.add_argument("--json", action="store_true", help="print the link counters as JSON on stderr")
    p.add_argument("--json-out", metavar="FILE", help="write the link counters as JSON to FILE")
    p.add_argument("-q", "--quiet", action="store_true", help="print no counters")


def _output_dir(flag: str, path: str | None) -> Path | None:
    """An output folder the user named, made now (or refused) before anything starts."""
    if path is None:
        return None
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot create the folder: {e.strerror}") from None
    return p


def _shell(a: argparse.Namespace, rest: list[str]) -> int:
    if a.default_cc:
        check_namespace_default_cc(a.default_cc)
    for name, v in (("--clients", a.clients), ("--servers", a.servers)):
        if not 1 <= v <= 200:
            raise InputError(f"{name}: must be from 1 to 200, got {v}")
    if a.seed is not None and not 0 <= a.seed < 2**64:
        raise InputError(f"--seed: must be a whole number from 0 to 2^64-1, got {a.seed}")
    if a.json_out and not Path(a.json_out).parent.is_dir():
        raise InputError(f"--json-out {a.json_out}: no such folder {Path(a.json_out).parent}")
    pcap_dir = _output_dir("--pcap", a.pcap)
    _output_dir("--server-logs", a.server_logs)
    if not 1 <= a.terminals <= MAX_TERMINALS:
        raise InputError(f"--terminals: must be from 1 to {MAX_TERMINALS}, got {a.terminals}")
    if a.terminals > 1 and a.access:
        raise InputError("--access: an access link behind several terminals is not supported")
    link = resolve(profile.load(a.link, a.set),
                   terminal_subnets(a.terminals, a.ip != "v4") if a.terminals > 1 else None)
    access = resolve(profile.load(a.access)) if a.access else None
    if a.terminals > 1 and a.terrestrial:
        raise InputError("--terrestrial: a terrestrial link with several terminals is not supported")
    terrestrial = resolve(profile.load(a.terrestrial)) if a.terrestrial else None
    if not 1 <= a.shards <= 32:
        raise InputError(f"--shards: must be from 1 to 32, got {a.shards}")
    if a.shards > 1 and not a.serve:
        raise InputError("--shards needs --serve (the shards are satbench servers)")
    spec = TestbedSpec(link=link, clients=a.clients, servers=max(a.servers, a.shards), access=access, seed=a.seed,
                       tcp_cc=a.default_cc, pcap_dir=pcap_dir, dns=a.dns, terminals=a.terminals,
                       terrestrial=terrestrial, ip=a.ip)
    if a.cc and not (a.serve or a.site):
        raise InputError("--cc sets the congestion control of the server started by --serve; "
                         "use --default-cc for the namespaces' default")
    serve = None
    if a.site and (a.serve or a.shards > 1):
        raise InputError("--site replays a recorded site's own origins: no --serve, no --shards")
    if a.site:
        from .endpoints import sites  # noqa: PLC0415 - one option's module

        site_dir = Path(a.site)
        groups = sites.server_groups(sites.load_site(site_dir))
        spec.servers = max(spec.servers, len(groups))
        opts, cc = _options_from(a), a.cc

        def serve(tb: Testbed) -> Iterator[Server]:  # each server group on its own host, with its certificate
            replay = sites.materialize(site_dir, tb.run_dir / "site")
            logs = Path(a.server_logs) if a.server_logs else tb.run_dir / "server"
            return (SatbenchServer(root, logs / (h.role if j else "") / (f"port-{https or http}" if k else ""), opts,
                                   host=h, cc=cc, cert=ca.issue(g.names), replay=manifest, https_port=https or 443,
                                   http_port=http, tls=https != 0, extra=None if https else ["--no-h3"])
                    for j, (h, root, g, manifest) in enumerate(zip(tb.servers, replay.roots, replay.groups,
                                                                   replay.manifests))
                    for k, (https, http) in enumerate(g.listeners))

        spec.server_names = [g.names for g in groups]
    if a.serve:
        root = Path(a.serve)
        if not root.is_dir():
            raise InputError(f"--serve {a.serve}: not a directory")
        opts, cc = _options_from(a), a.cc
        if a.shards > 1:
            for index in sorted(root.glob("*/index.html")):
                pages.shard(root, index.parent.name, a.shards)

        def serve(tb: Testbed) -> Iterator[Server]:  # one at a time: each running before the next starts
            logs = Path(a.server_logs) if a.server_logs else tb.run_dir / "server"
            return (SatbenchServer(root, logs / (h.role if j else ""), opts, host=h, cc=cc)
                    for j, h in enumerate(tb.servers[:a.shards]))

    def banner(tb: Testbed) -> None:
        if not a.quiet:
            print(f"satbench: shell on {tb.client.name} ({tb.client.addr}) behind link '{tb.link.name}'; "
                  f"server {tb.server.name} ({tb.server.addr}); exit to tear down", file=sys.stderr)

    if (a.pep_satellite or a.pep_terrestrial) and not a.pep:
        raise InputError("--pep-satellite and --pep-terrestrial need --pep")
    pep = {"at": a.pep, **({"satellite": a.pep_satellite} if a.pep_satellite else {}),
           **({"terrestrial": a.pep_terrestrial} if a.pep_terrestrial else {})} if a.pep else None
    # The path elements, as an experiment's factors would place them (the registry builds and checks them).
    if (a.proxy_upstream or a.proxy_cache) and not a.proxy:
        raise InputError("--proxy-upstream and --proxy-cache need --proxy")
    if a.proxy and not a.serve:
        raise InputError("--proxy needs --serve (the proxy's origins are the servers it starts)")
    proxy = ({"kind": a.proxy, **({"upstream": a.proxy_upstream} if a.proxy_upstream else {}),
              **({"cache": a.proxy_cache} if a.proxy_cache else {})}
             if a.proxy and (a.proxy_upstream or a.proxy_cache) else a.proxy)
    # The shell's trial, as the path elements see one: its path and congestion control (it loads no page).
    given = {"pep": pep or "none", "tunnel": a.tunnel or "none", "proxy": proxy or "none", "cross": a.cross or "none",
             "cc": a.cc or "cubic"}
    for factor in ("pep", "tunnel", "proxy", "cross"):
        if problem := element_class(factor).check(given[factor]):
            raise InputError(f"--{factor}: {problem}")
    trial = TrialSpec.of({"link": link.name, "protocol": "h2", "page": "blank", **given})
    path: list[PathElement] = []
    for factor, value in trial.path.items():
        cls = element_class(factor)
        if problem := cls.conflict(value, trial):
            raise InputError(f"--{factor}: {problem}")
        path.append(cls(value, {}, trial))
    prereq.require_testbed()
    r = run_shell(spec, rest or None, serve=serve, on_ready=banner, path=path)
    if a.json_out:
        Path(a.json_out).write_text(json.dumps(r.report, indent=1) + "\n")
    if a.json:
        print(json.dumps(r.report), file=sys.stderr)
    elif not a.quiet:
        print(format_counters(r.link_counters, f"satbench: link '{link.name}'"), file=sys.stderr)
        if access is not None:
            print(format_counters(r.access_counters, f"satbench: access link '{access.name}'"), file=sys.stderr)
        if terrestrial is not None:
            print(format_counters(r.report.get("terrestrial_counters"), f"satbench: terrestrial link "
                                  f"'{terrestrial.name}'"), file=sys.stderr)
        for e in path:
            for line in e.describe():
                print(f"satbench: {line}", file=sys.stderr)
    return r.exit_code


def _cleanup_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true", help=argparse.SUPPRESS)


def _cleanup(a: argparse.Namespace, _: list[str]) -> int:
    if not a.force:
        prereq.require_testbed()
    removed = cleanup()
    print(f"removed {len(removed)} stale testbed(s)" + (f": {', '.join(removed)}" if removed else ""))
    return 0


def _check(a: argparse.Namespace, _: list[str]) -> int:
    missing = prereq.missing_for_testbed()
    for m in missing:
        print(m)
    if not missing:
        print("ok: root, /dev/net/tun, ip, emulator binary")
    return 2 if missing else 0


# -- servers and clients -------------------------------------------------------------------


def _serve_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir")
    p.add_argument("--bind", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: loopback only; 0.0.0.0 serves every interface)")
    p.add_argument("--http-port", type=ranged(0, 65535), default=80, help="0: none")
    p.add_argument("--https-port", type=ranged(1, 65535), default=443)
    p.add_argument("--log-dir", help="access log, TCP_INFO and qlog (default: a new temporary folder)")
    _server_args(p)


def _serve(a: argparse.Namespace, _: list[str]) -> int:
    log_dir = _output_dir("--log-dir", a.log_dir) or Path(tempfile.mkdtemp(prefix="satbench-serve-"))
    srv = SatbenchServer(Path(a.dir), log_dir, _options_from(a), cc=a.cc, bind=a.bind, http_port=a.http_port,
                         https_port=a.https_port)
    print(json.dumps({**srv.ready, "log_dir": str(log_dir)}), flush=True)
    stopping: list[int] = []
    old = {s: signal.signal(s, lambda n, _f: stopping.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while srv.proc.poll() is None and not stopping:
            try:
                srv.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        srv.stop()
    return 0 if stopping else (srv.returncode or 0)


def _record_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("url")
    p.add_argument("--out", required=True, help="folder for the recording (recording.har) and the imported site")
    p.add_argument("--protocol", choices=["auto", *choices(Protocol)[:3]], default="auto",
                   help="the newest HTTP version Chromium may speak: auto (default: what each origin negotiates, "
                        "HTTP/3 where Alt-Svc offers it), h1, h2, or h3 (a first load finds the origins that "
                        "offer HTTP/3; the recorded load asks QUIC of each of them from its first request)")
    p.add_argument("--timeout", type=ranged(0.1, 86_400, float), default=120.0, help="seconds (default 120)")


def _record(a: argparse.Namespace, _: list[str]) -> int:
    """Load the page in Chromium with its HAR (bodies embedded), each origin speaking what it
    negotiates, and import it as a site: failed requests are kept, marked (their recorded status)."""
    from .endpoints import safeio, sites  # noqa: PLC0415 - one command's modules
    from .endpoints.chromium import browse  # noqa: PLC0415 - Playwright loads on use

    _check_url(a.url)
    out = Path(a.out)
    har = out / "recording.har"
    try:
        safeio.real_folder(out)
        if har.is_symlink():
            har.unlink()  # the browser writes the recording here: never through a link planted in its place
    except OSError as e:
        raise InputError(f"--out {a.out}: cannot write there: {e.strerror or e}") from None
    cap = "h3" if a.protocol == "auto" else a.protocol
    quic: tuple[str, ...] = ()
    if a.protocol == "h3":  # a first load: which origins offer HTTP/3
        first = browse(a.url, BrowseOptions(protocol="h3", timeout_s=a.timeout, negotiate=True))
        quic = tuple(dict.fromkeys(f"{u.hostname}:{u.port or 443}" for x in first.resources if x.get("h3_offered")
                                   for u in [urlsplit(str(x["url"]))] if u.scheme == "https"))
    r = browse(a.url, BrowseOptions(protocol=cap, timeout_s=a.timeout, har=har, negotiate=True, origins=quic))
    if r.plt_ms is None:  # the page itself did not load: nothing to keep
        print(f"satbench: {a.url}: the load failed ({r.invalid_reason}); nothing imported", file=sys.stderr)
        return 3
    sites.annotate_connections(har, r.resources)
    site = sites.import_archive(har, out)
    spoke: dict[str, set[str]] = {}
    for x in r.resources:
        spoke.setdefault(urlsplit(str(x["url"])).hostname or "", set()).add(str(x.get("protocol") or "failed"))
    failed = site.failed
    print(f"{a.url}: {len(site.entries)} entries from {len(site.hosts)} hosts; {r.bytes_received} bytes -> "
          f"{out / 'site.json'}\n  protocols: " + ", ".join(f"{h} {'/'.join(sorted(p))}" for h, p in spoke.items()))
    if failed:
        print(f"  {len(failed)} requests failed, kept in the recording and marked by their status: "
              + ", ".join(u[:120] for u in failed[:5]), file=sys.stderr)
    return 0


def _browse_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("url")
    p.add_argument("--protocol", required=True, choices=choices(Protocol)[:3],
                   help="the HTTP version (a cleartext http:// URL is HTTP/1.1 in the clear)")
    p.add_argument("--timeout", type=ranged(0.1, 86_400, float), default=120.0, help="seconds (default 120)")
    p.add_argument("--browser", choices=["chromium", "firefox"], default="chromium",
                   help="Debian's Chromium (default) or Firefox ESR")
    p.add_argument("--connections", type=ranged(1, 64), help="HTTP/1.1 connections per host (Firefox only; default 6)")
    p.add_argument("--har", help="write a HAR file of the load")
    p.add_argument("--netlog", help="write Chromium's net-log of the load")
    p.add_argument("--json", action="store_true")


def _browse(a: argparse.Namespace, _: list[str]) -> int:
    opts = BrowseOptions(protocol=a.protocol, timeout_s=a.timeout, har=Path(a.har) if a.har else None,
                         netlog=Path(a.netlog) if a.netlog else None)
    _check_url(a.url)
    r: LoadResult
    if a.browser == "firefox":
        from .endpoints.firefox import firefox_load  # noqa: PLC0415 - Playwright and browsers load on use

        if a.har or a.netlog:
            raise InputError("--har and --netlog are Chromium's; Firefox loads have neither here")
        r = firefox_load(a.url, opts, connections=a.connections or 6)
    else:
        from .endpoints.chromium import browse  # noqa: PLC0415 - Playwright loads on use

        if a.connections not in (None, 6):
            raise InputError("--connections: Chromium's 6 HTTP/1.1 connections per host cannot be changed; "
                             "use --browser firefox or 'satbench load'")
        r = browse(a.url, opts)
    if a.json:
        print(json.dumps(r.to_json()))
    else:
        state = "valid" if r.valid else f"INVALID: {r.invalid_reason}"

        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v:.0f} ms"

        print(f"{r.url} over {r.protocol} ({r.browser}): {state}")
        print(f"  PLT {ms(r.plt_ms)}, TTFB {ms(r.ttfb_ms)}, FCP {ms(r.fcp_ms)}, LCP {ms(r.lcp_ms)}"
              f" ({r.lcp_element or '-'}), DOMContentLoaded {ms(r.dcl_ms)}")
        print(f"  {len(r.resources)} responses on {r.connections} connections, {r.bytes_received} bytes received")
    return 0 if r.valid else 3


def _check_url(url: str) -> None:
    """A URL a client can fetch: http(s) with a host."""
    try:
        u = urlsplit(url)
        port = u.port
    except ValueError as e:
        raise InputError(f"URL {url!r}: {e}") from None
    if u.scheme not in ("http", "https") or not u.hostname:
        raise InputError(f"URL {url!r}: needs http:// or https:// and a host")
    del port


def _load_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("url")
    p.add_argument("--protocol", required=True, choices=choices(Protocol)[:3],
                   help="the HTTP version (a cleartext http:// URL is HTTP/1.1 in the clear)")
    p.add_argument("--clients", type=ranged(1, 10_000), default=1,
                   help="concurrent clients, each on its own connections (default 1)")
    p.add_argument("--connections", type=ranged(1, 64), default=6, help="HTTP/1.1 connections per host (default 6)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--single", action="store_true", help="fetch only URL (curl-style breakdown)")
    g.add_argument("--bulk", action="store_true", help="fetch only URL, printing progress on stderr")
    g.add_argument("--upload", metavar="SIZE",
                   help="POST SIZE incompressible bytes to URL (satbench-server's sink: https://server.test/upload)")
    g.add_argument("--schedule", metavar="FILE",
                   help="replay a browser's request schedule (satbench pages schedule) instead of discovering the "
                        "page's objects")
    g.add_argument("--realtime", choices=("poll", "sse", "ws"),
                   help="run the real-time scenario URL's query names against satbench-server's /rt/ endpoints, "
                        "e.g. 'https://server.test/rt/?scenario=room&room=r&members=10&n=20&session=s' with "
                        "--clients 10 (h1 or h2)")
    p.add_argument("--timeout", type=ranged(0.1, 86_400, float), default=120.0, help="seconds per client (default 120)")
    p.add_argument("--quic-stack", choices=QUIC_STACKS, default=DEFAULT_QUIC_STACK,
                   help=f"the QUIC stack for HTTP/3 (default {DEFAULT_QUIC_STACK})")
    p.add_argument("--quic-window", type=ranged(1024, 1 << 40), metavar="BYTES",
                   help="fixed QUIC connection and stream windows to advertise (default: the stack's own)")
    p.add_argument("--json", action="store_true")


def _load(a: argparse.Namespace, _: list[str]) -> int:
    _check_url(a.url)
    mode = "realtime" if a.realtime else "bulk" if a.bulk else "single" if a.single or a.upload else "page"
    upload = None if a.upload is None else pages.parse_size(a.upload)
    r = load(a.url, LoadOptions(protocol=a.protocol, clients=a.clients, connections=a.connections, mode=mode,
                                timeout_s=a.timeout, quic_stack=a.quic_stack, quic_window=a.quic_window,
                                upload=upload, realtime=a.realtime, schedule=a.schedule),
             stderr=sys.stderr)
    print(json.dumps(r.to_json()) if a.json else format_run(r))
    return 0 if r.valid else 3


def _timing_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("url")
    p.add_argument("--protocol", required=True, choices=choices(Protocol)[:3],
                   help="the HTTP version (a cleartext http:// URL is HTTP/1.1 in the clear)")
    p.add_argument("--count", type=ranged(1, 100_000), default=100, help="repetitions (default 100)")
    p.add_argument("--json", action="store_true")


def _timing(a: argparse.Namespace, _: list[str]) -> int:
    _check_url(a.url)
    t = timing(a.url, a.protocol, a.count)
    print(json.dumps({"url": t.url, "protocol": t.protocol, "rows": t.rows, "summary": t.summary()})
          if a.json else format_timing(t))
    return 0


def _ca_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nss-home", metavar="DIR", help="also make DIR/.pki/nssdb trust the CA (a browser HOME for "
                                                     "tests only: a browser using it trusts every site this CA "
                                                     "signs)")
    p.add_argument("--renew", action="store_true", help="replace the CA and its certificates with new ones")
    p.add_argument("--cluster", metavar="DIR", help="instead: make a Dask cluster's own CA and its scheduler, "
                                                    "worker and client certificates in DIR (docs/security.md)")
    p.add_argument("--days", type=ranged(1, 3650), default=365, help="--cluster: how long they are valid "
                                                                     "(default 365)")


def _ca(a: argparse.Namespace, _: list[str]) -> int:
    if a.cluster:
        from .experiment import cluster_tls  # noqa: PLC0415 - one command's module

        if a.nss_home or a.renew:
            raise InputError("ca --cluster: not with --nss-home or --renew")
        d = Path(a.cluster)
        if d.exists() and (not d.is_dir() or any(d.iterdir())):
            raise InputError(f"ca --cluster: {d} exists and is not an empty folder")
        try:
            tls = cluster_tls.make(d, days=a.days, keep_ca_key=True)
        except OSError as e:
            raise InputError(f"ca --cluster: {e}") from None
        print(f"cluster CA:          {tls.ca}\nCA key (0600):       {d / 'ca.key'} (keep it off the workers)")
        for role in cluster_tls.ROLES:
            print(f"{role + ':':<21}{tls.cert(role)}, key {tls.key(role)} (0600)")
        print("Dask's configuration for them (docs/security.md says which machine needs which):")
        for k, v in tls.config().items():
            print(f"  {k}: {v}")
        return 0
    c = ca.renew() if a.renew else ca.ensure()
    print(f"CA certificate:      {c.cert}\nCA key (0600):       {c.key}\n"
          f"server certificate:  {c.server_cert}\nserver key (0600):   {c.server_key}")
    if a.renew:
        print("renewed: browser HOMEs made with --nss-home trust the old CA; make them again")
    if a.nss_home:
        home = ca.nss_home(Path(a.nss_home), c)
        print(f"NSS database trusting the CA: {home / '.pki' / 'nssdb'} (use HOME={home} for the browser)")
        print(f"satbench: warning: a browser using HOME={home} accepts any certificate this CA signs, for any "
              f"site; its key is {c.key}. Use that HOME for tests only"
              + ca.home_of_user_note(home), file=sys.stderr)
    return 0


def _pages_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", nargs="?", choices=("import", "schedule"),
                   help="import ARCHIVE: a recorded site (HAR 1.2, or a Web Page Replay .wprgo) into --out; "
                        "schedule [HAR]: a browser's request schedule for the loader (schedule = FILE), learned "
                        "from a HAR or from a Chromium trial (--db with --trial or --page), written to --out")
    p.add_argument("archive", nargs="?", help="the archive to import (or to learn a schedule from)")
    p.add_argument("--db", type=Path, help="schedule: the results database with the Chromium trial")
    p.add_argument("--trial", metavar="KEY", help="schedule: the Chromium trial's key")
    p.add_argument("--page", help="schedule: the page whose valid Chromium trials are searched (the median PLT's "
                                  "taken)")
    p.add_argument("--link", help="schedule: only trials on this link (with --page)")
    p.add_argument("--protocol", choices=choices(Protocol), help="schedule: only trials over this version (--page)")
    p.add_argument("--out", required=True, help="folder to write the pages into (schedule: the file to write)")
    p.add_argument("--only", help="comma-separated page names (default: all)")
    p.add_argument("--bulk", help="also make bulk files, e.g. 1M,100M,250M,500M")
    p.add_argument("--bulk-only", action="store_true", help="make only the bulk files")
    p.add_argument("--seed", type=ranged(0, 2**63 - 1), default=1, help="content seed (default 1)")
    p.add_argument("--volatile", help="import: comma-separated query parameters replay ignores when it matches "
                                      "a request (cache-busters, session ids)")


def _pages(a: argparse.Namespace, _: list[str]) -> int:
    out = Path(a.out)
    learning = (a.db, a.trial, a.page, a.link, a.protocol)
    if a.action == "schedule":
        from .endpoints import schedule  # noqa: PLC0415 - one command's module

        if a.archive and any(v is not None for v in learning):
            raise InputError("pages schedule: learn from a HAR or from a database's trial, not both")
        if a.archive:
            s = schedule.from_har(Path(a.archive))
        elif a.db is None or (a.trial is None) == (a.page is None):
            raise InputError("pages schedule: give a HAR, or --db DB with --trial KEY or --page PAGE")
        elif a.trial is not None and (a.link or a.protocol):
            raise InputError("pages schedule: --link and --protocol narrow --page, not --trial")
        else:
            s = schedule.from_trial(a.db, key=a.trial, page=a.page, link=a.link, protocol=a.protocol)
        try:
            s.write(out)
        except OSError as e:
            raise InputError(f"--out {a.out}: cannot write there: {e.strerror}") from None
        from .endpoints.loader import loader_binary  # noqa: PLC0415 - the format's owner checks what was written

        if loader_binary().exists() and (why := schedule.check(str(out), str(loader_binary()))[0]) is not None:
            raise InputError(f"pages schedule: the schedule learned is not one the loader takes: {why}")
        print(f"{out}: {schedule.summary(s)}")
        return 0
    if any(v is not None for v in learning):
        raise InputError("pages: --db, --trial, --page, --link and --protocol are for pages schedule")
    if a.action == "import":
        if not a.archive:
            raise InputError("pages import: name the archive (a .har, .har.gz or .wprgo file)")
        from .endpoints import sites  # noqa: PLC0415 - one command's module

        site = sites.import_archive(Path(a.archive), out, a.volatile.split(",") if a.volatile else ())
        d = site.to_json()
        print(f"{a.archive}: {len(site.entries)} entries from {len(site.hosts)} hosts ({', '.join(site.hosts[:6])}"
              f"{', ...' if len(site.hosts) > 6 else ''}); page {site.page}; {d['filled']} bodies filled, "
              f"{d['decoded']} decoded -> {out / 'site.json'}")
        return 0
    if a.volatile:
        raise InputError("pages: --volatile is for pages import")
    if a.archive:
        raise InputError(f"pages: unexpected {a.archive!r} (to import it: satbench pages import {a.archive} --out DIR)")
    sizes = [pages.parse_size(s) for s in (a.bulk.split(",") if a.bulk else [])]
    try:
        made = pages.generate(out, a.only.split(",") if a.only else None, seed=a.seed) if not a.bulk_only else []
        for m in made:
            print(f"{m.page}: {len(m.objects)} objects, {m.total_bytes} bytes -> {out / m.page}")
        for s, size in zip(a.bulk.split(",") if a.bulk else [], sizes):
            p = pages.bulk_file(out, size, seed=a.seed)
            print(f"bulk {s}: {p.stat().st_size} bytes -> {p}")
    except OSError as e:
        raise InputError(f"--out {a.out}: cannot write there: {e.strerror}") from None
    return 0


# -- experiments -----------------------------------------------------------------------------


def _plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    p.add_argument("--db", help="results database: mark trials already done")
    p.add_argument("--all", action="store_true", help="list every trial (default: the first 50)")
    p.add_argument("--json", action="store_true")
    _scenario_arg(p)


def _scenario_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", action="append", metavar="NAME",
                   help="only the trials of this scenario: a [[scenario]] table's name, 'main' for [factors], "
                        "'trialN' for the N-th [[trial]] (repeatable; a later run of the whole file adds the rest)")


def _plan(a: argparse.Namespace, _: list[str]) -> int:
    exp = experiment_spec.load(a.file)
    if a.scenario:
        exp = exp.only_scenarios(a.scenario)
    stored_seed, done = None, frozenset[str]()
    if a.db and Path(a.db).exists():
        from .results.read import Results  # noqa: PLC0415 - pandas loads on use (a plan without --db needs none)

        # Read-only: planning never migrates or writes a database.
        with Results(a.db) as r:
            row = r.db.execute("SELECT id, seed FROM experiments WHERE name = ?", (exp.name,)).fetchone()
            if row:
                stored_seed = int(row[1])
                done = runner.done_keys(r.db, r.version, int(row[0]))
    plan = Plan(exp, exp.run_order(stored_seed), done)
    print(json.dumps(plan.to_json()) if a.json else plan.format(limit=None if a.all else 50))
    return 0


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the trials on a Dask cluster: tls://HOST:PORT (tcp:// on loopback only); "
                        "workers are 'satbench worker' (default: the file's scheduler, if any)")
    g.add_argument("--parallel", type=ranged(1, 256), metavar="N",
                   help="N testbeds at once on this machine, each pinned to cores of its own (default: the file's)")
    p.add_argument("--artefacts-on-workers", action="store_true",
                   help="with a cluster: keep each trial's artefacts on its worker (stored as HOST:PATH) "
                        "instead of fetching them")
    _scenario_arg(p)


def _fmt_clock(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _progress(e: runner.Event) -> None:
    out = sys.stderr
    if isinstance(e, runner.Started):
        if e.migrated_from == 1:
            print(f"satbench: {e.db}: migrated from schema 1 (satbench 0.1): trials now keyed by their links",
                  file=out, flush=True)
        print(f"satbench run {e.experiment}: {e.planned} trials, {e.already} already stored in {e.db}, "
              f"{e.todo} to run (order seed {e.seed})", file=out, flush=True)
    elif isinstance(e, runner.WarmUp):
        print(f"  warm-up {e.index}/{e.count}: {e.trial.label()}", file=out, flush=True)
    elif isinstance(e, runner.TrialDone):
        rec = e.record
        plt = rec.metrics.get("plt_ms")
        result = f"PLT {plt:.0f} ms" if plt is not None else "no PLT"
        state = "valid" if rec.status is TrialStatus.VALID else f"{rec.status.value.upper()} ({rec.reason})"
        bar = "#" * round(20 * e.done / e.planned)
        med = f" | cell median {e.cell_median_ms:.0f} ms" if e.cell_median_ms is not None else ""
        print(f"  [{bar:.<20}] {e.done}/{e.planned} {_fmt_clock(e.elapsed_s)} elapsed, ETA {_fmt_clock(e.eta_s)} "
              f"| {e.cell} rep {e.trial.rep}: {state}, {result}{med}", file=out, flush=True)
    elif isinstance(e, runner.Interrupted):
        name = signal.Signals(e.signal).name
        print(f"\ninterrupted ({name}): {e.ran} trials stored by this run; run the same command again to resume",
              file=out, flush=True)
    elif isinstance(e, runner.Waiting):
        print(f"  waiting: {e.reason}", file=out, flush=True)


def _cluster_progress(e: Any) -> None:
    from .experiment import distributed  # noqa: PLC0415 - Dask loads only for a cluster

    out = sys.stderr
    if isinstance(e, distributed.WorkerJoined):
        print(f"  worker {e.name} joined ({e.address}, {e.host}): {e.testbeds} testbed(s)", file=out, flush=True)
    elif isinstance(e, distributed.WorkerRefused):
        print(f"  worker {e.name} refused ({e.address}): {e.reason}", file=out, flush=True)
    elif isinstance(e, distributed.WorkerLost):
        print(f"  worker {e.name} lost ({e.address})" + (f"; running again elsewhere: {', '.join(e.trials)}"
                                                         if e.trials else ""), file=out, flush=True)
    else:
        _progress(e)


def _executor(a: argparse.Namespace, exp: experiment_spec.Experiment) -> Any:
    """Where the trials run: here one after another (None), on a cluster, or N at once here."""
    scheduler = a.scheduler or (exp.scheduler if a.parallel is None else None)
    parallel = a.parallel or (exp.parallel if a.scheduler is None else None)
    if scheduler is None and parallel is None:
        if a.artefacts_on_workers:
            raise InputError("--artefacts-on-workers: only with --scheduler or --parallel")
        return None
    from .experiment import distributed  # noqa: PLC0415 - Dask loads only for a cluster

    logging.getLogger("distributed").setLevel(logging.ERROR)  # the coordinator says what matters itself
    if scheduler is not None:
        distributed.check_scheduler_address(scheduler)
        if scheduler.startswith("tcp://"):
            print(f"satbench: warning: {distributed.PLAIN_TCP_RISK}", file=sys.stderr)
    cores = distributed.split_cores(parallel) if parallel is not None else None
    if parallel is not None and parallel > 1:
        # N testbeds on this machine: refused where they would not measure as one at a time does.
        problems = plan_mod.parallel_problems(exp.trials, parallel, len(os.sched_getaffinity(0)))
        if problems:
            raise InputError(f"--parallel {parallel}: {problems[0]}")
    return distributed.dask_executor(scheduler=scheduler, parallel=parallel, cores=cores,
                                     fetch_artefacts=not a.artefacts_on_workers, progress=_cluster_progress)


def _run(a: argparse.Namespace, _: list[str]) -> int:
    exp = experiment_spec.load(a.file)
    if a.scenario:
        exp = exp.only_scenarios(a.scenario)
    s = runner.run(exp, Path(a.db), progress=_progress, executor=_executor(a, exp))
    print(f"{s.experiment}: {s.ran} trials run in {s.seconds:.0f} s ({s.valid} valid, {s.invalid} invalid, "
          f"{s.failed} failed); {s.already + s.ran - s.failed} of {s.planned} done; results in {s.db}")
    for reason, n in sorted(s.reasons.items(), key=lambda x: -x[1]):
        print(f"  {n} x {reason}")
    if s.interrupted:
        return 128 + (s.signal or signal.SIGINT)
    return 0 if s.failed == 0 else 1


VALIDATION_DB = "reports/validation/results.sqlite"


def _validate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("studies", nargs="*", metavar="STUDY",
                   help="studies to check: A, B, C, D, E (default: all); the physical checks come with any")
    p.add_argument("--quick", action="store_true",
                   help="the reduced sets (every study in under 20 minutes here) instead of the presets as the "
                        "studies ran them")
    p.add_argument("--db", default=VALIDATION_DB, help=f"results database (default {VALIDATION_DB}; resumes)")
    p.add_argument("-o", "--out", default="reports/validation", help="folder of validation.html")
    p.add_argument("--judge-only", action="store_true", help="run nothing: judge what the database holds")
    p.add_argument("--repetitions", type=ranged(1, 1000), metavar="N",
                   help="a smoke run: each set's first N repetitions of every cell (the verdicts say less; the same "
                        "set run later without it resumes and adds the rest)")
    p.add_argument("--sequential", action="store_true",
                   help="add repetitions only to the cells an undecided check reads, judging after 3, 5, 10, 20, 30 "
                        "and 50 repetitions and at each set's own (the cap), each look at Pocock's level; with "
                        "--judge-only, what such a run would have decided on the stored trials")
    p.add_argument("--committed-only", action="store_true",
                   help="judge only trials run from committed code (a trial whose commit ends in -dirty is left "
                        "out, and counted)")
    p.add_argument("--tally", metavar="QUICK_DB",
                   help="run nothing: every check's verdict from the full presets (--db) beside the quick sets' "
                        "(QUICK_DB), study by study, as Markdown, from committed code only")
    p.add_argument("--calibrate", action="store_true",
                   help="run nothing: how often the judge's intervals are wrong, on planted nulls and effects drawn "
                        "from the stored trials' spread (--db), at 3, 5, 10 and 30 trials a side")
    p.add_argument("--sims", type=ranged(100, 1_000_000), default=2000, metavar="N",
                   help="--calibrate: planted nulls and effects per n (default 2000)")


def _validate(a: argparse.Namespace, _: list[str]) -> int:
    from . import validate  # noqa: PLC0415 - pandas and numpy load on use

    if a.calibrate:
        from .validate import calibrate  # noqa: PLC0415

        pops = calibrate.populations(Path(a.db)) if Path(a.db).is_file() else []
        if not pops:
            raise InputError(f"--db {a.db}: no cell of {calibrate.MIN_CELL} valid trials to draw planted data from")
        print(calibrate.format_table(calibrate.calibrate(pops, sims=a.sims), len(pops), 10.0), end="")
        seq = [calibrate.sequential(pops, looks, sims=a.sims) for looks in ((3, 5), (3, 5, 10), (3, 5, 10, 20, 30))]
        print(calibrate.format_sequential(seq, 10.0), end="")
        return 0

    studies, claims = validate.load()
    known = [s.study for s in studies if s.study != validate.PHYSICAL]
    if a.tally:
        from .validate import tally  # noqa: PLC0415

        for f in (a.db, a.tally):
            if not Path(f).is_file():
                raise InputError(f"{f}: no such results database")
        asked = [s for s in studies if s.study in ([x.upper() for x in a.studies] or known)]
        judged = []
        for quick, path in ((False, Path(a.db)), (True, Path(a.tally))):
            ran = validate.run_sets(validate.sets_of(asked, quick), path, lambda *_: None)
            judged.append(validate.judge(path, asked, claims, ran, committed_only=True))
        full, quick_v = judged
        print(tally.markdown(full.results, quick_v.results, full.dirty, quick_v.dirty,
                             [s.study for s in asked]), end="")
        return 0
    want = [x.upper() for x in a.studies] or known
    bad = [x for x in want if x not in known]
    if bad:
        raise InputError(f"STUDY: {bad[0]!r} is no study (known: {', '.join(known)})")
    chosen = [s for s in studies if s.study in want]
    files = validate.sets_of(chosen, a.quick)
    db = Path(a.db)
    db.parent.mkdir(parents=True, exist_ok=True)

    def run_one(f: Path, exp: experiment_spec.Experiment, db: Path) -> None:
        if a.judge_only:
            return
        print(f"== {exp.name} ({f}): {len(exp.trials)} trials", flush=True)
        # As the set's file says: one testbed at a time, or its parallel ones.
        here = argparse.Namespace(scheduler=None, parallel=None, artefacts_on_workers=False)
        s = runner.run(exp, db, progress=_progress, executor=_executor(here, exp))
        if s.interrupted:
            raise KeyboardInterrupt
        print(f"{s.experiment}: {s.ran} trials run in {s.seconds:.0f} s ({s.valid} valid, {s.invalid} invalid, "
              f"{s.failed} failed)", flush=True)

    if not a.judge_only:
        prereq.require_testbed()
    if a.repetitions is not None and a.judge_only:
        raise InputError("--repetitions: a smoke run's, not --judge-only's (which judges what is stored)")
    if a.repetitions is not None and a.sequential:
        raise InputError("--repetitions: a smoke run's; --sequential chooses the repetitions itself")
    if a.judge_only and not db.exists():
        raise InputError(f"--db {db}: no results yet (run without --judge-only)")
    looks = ""
    if a.sequential:
        from .validate import sequential  # noqa: PLC0415

        v, history = sequential.run(chosen, a.quick, db, run_one, claims)
        looks = sequential.format_looks(history) + "\n"
    else:
        sets = validate.run_sets(files, db, run_one, a.repetitions)
        if not db.exists():
            raise InputError(f"--db {db}: no results yet (run without --judge-only)")
        v = validate.judge(db, chosen, claims, sets, committed_only=a.committed_only)
    command = "satbench validate " + " ".join([*a.studies, *(["--quick"] if a.quick else []),
                                               *(["--sequential"] if a.sequential else []),
                                               *([f"--repetitions {a.repetitions}"] if a.repetitions else [])])
    print(f"\n{looks}{command.strip()}: claim by claim (measured: interval; n: trials)")
    print(v.table())
    page = validate.write_html(v, Path(a.out), command.strip())
    counts: dict[str, int] = {}
    for r in v.results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    print("\n" + ", ".join(f"{n} {k}" for k, n in counts.items()) + f"; page: {page}")
    if v.failed:
        print("a physical check failed: the testbed measured something physics does not allow", file=sys.stderr)
        return 1
    return 0


def _worker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheduler", required=True, metavar="ADDRESS",
                   help="the Dask scheduler: tls://HOST:PORT (tcp:// on loopback only)")
    p.add_argument("--testbeds", type=ranged(1, 256), default=1, metavar="N",
                   help="testbeds at once (default 1); several are pinned to equal shares of the cores")
    p.add_argument("--cores", metavar="LIST", help="only these cores, e.g. 0-3 (default: all this process may use)")
    p.add_argument("--name", help="the worker's name (default HOST-PID)")
    p.add_argument("--dir", help="pages and artefacts in flight (default ~/.cache/satbench/worker)")


def _worker(a: argparse.Namespace, _: list[str]) -> int:
    from .experiment import distributed, worker  # noqa: PLC0415 - Dask loads only for a cluster

    cores = distributed.parse_cores(a.cores) if a.cores else None
    if a.scheduler.startswith("tcp://"):
        print(f"satbench: warning: {distributed.PLAIN_TCP_RISK}", file=sys.stderr)
    worker.serve_worker(a.scheduler, testbeds=a.testbeds, name=a.name, cores=cores,
                        directory=Path(a.dir) if a.dir else None,
                        on_ready=lambda line: print(line, file=sys.stderr, flush=True))
    return 0


def _scheduler_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", required=True, metavar="ADDRESS",
                   help="where: tls://HOST:PORT (Dask's TLS configuration gives the certificates: satbench ca "
                        "--cluster), or tcp://127.0.0.1:PORT")


def _scheduler(a: argparse.Namespace, _: list[str]) -> int:
    from .experiment import distributed  # noqa: PLC0415 - Dask loads only for a cluster
    from .experiment.scheduler import serve_scheduler  # noqa: PLC0415

    if a.listen.startswith("tcp://"):
        print(f"satbench: warning: {distributed.PLAIN_TCP_RISK}", file=sys.stderr)
    serve_scheduler(a.listen, on_ready=lambda line: print(line, file=sys.stderr, flush=True))
    return 0


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    p.add_argument("-o", "--out", default="report", help="output folder (default report/)")
    p.add_argument("--experiment", help="only this experiment (default: all in the database)")
    p.add_argument("--trial", action="append", default=[], metavar="KEY",
                   help="filmstrips and waterfalls of this trial (its key, its first 4 characters or more, or its id; "
                        "repeatable, shown side by side in the order given) instead of each combination's median one")
    p.add_argument("--side-by-side", metavar="FACTOR",
                   help="the filmstrips' and waterfalls' rows with this factor's levels next to each other")


def _report(a: argparse.Namespace, _: list[str]) -> int:
    from .results.report import ViewChoice, write_report  # noqa: PLC0415 - matplotlib and pandas load on use

    views = ViewChoice(trials=tuple(a.trial), side_by_side=a.side_by_side)
    print(f"report: {write_report(Path(a.db), Path(a.out), experiment=a.experiment, views=views)}")
    return 0


def _compare_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("first", metavar="A", help="the run before: a results database, or DB:EXPERIMENT")
    p.add_argument("second", metavar="B", help="the run after: another database, or DB:EXPERIMENT (the same DB)")
    p.add_argument("--metric", default="plt_ms", help="the metric to compare (default plt_ms; fcp_ms, lcp_ms, ...)")


def _compare(a: argparse.Namespace, _: list[str]) -> int:
    from .results import compare  # noqa: PLC0415 - pandas loads on use

    text = compare.run(compare.Run.parse(a.first), compare.Run.parse(a.second), a.metric)[1]
    print(text, end="")
    return 0


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    p.add_argument("-o", "--out", required=True, help="output folder")
    p.add_argument("--format", choices=["csv", "parquet"], default="csv")
    p.add_argument("--experiment", help="only this experiment")


def _export(a: argparse.Namespace, _: list[str]) -> int:
    from .results.read import export  # noqa: PLC0415 - pandas loads on use

    for p in export(a.db, a.out, a.format, a.experiment):
        print(p)
    return 0


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trial", help="a trial's id or key (a unique prefix of the key will do)")
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    p.add_argument("-o", "--out", help="write the figure here (SVG; default trace-KEY.svg)")
    p.add_argument("--json", action="store_true", help="print the time series as JSON instead")


def _trace(a: argparse.Namespace, _: list[str]) -> int:
    from .results import timeseries  # noqa: PLC0415 - matplotlib loads on use

    ts = timeseries.load(Path(a.db), a.trial)
    if a.json:
        print(json.dumps(ts.to_json()))
        return 0
    out = timeseries.write_svg(ts, Path(a.out or f"trace-{ts.key}.svg"))
    print(f"trace of trial {ts.key} ({ts.label}): {len(ts.connections)} connections, {len(ts.objects)} objects "
          f"-> {out}")
    return 0


def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=BENCHES)
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="shorter runs (less precise)")
    p.add_argument("--trials", type=ranged(1, 1_000_000), metavar="N", help="soak: how many trials (default 1000)")
    p.add_argument("--client", choices=("chromium", "firefox"), help="capture: the browser (default chromium)")
    p.add_argument("--db", type=Path, metavar="DB",
                   help="capture, returning: the database their trials go to (resumed; default: a temporary one)")


def _bench(a: argparse.Namespace, _: list[str]) -> int:
    if a.trials is not None and (a.what != "soak" or not 1 <= a.trials <= 1_000_000):
        raise InputError("--trials: the soak's number of trials, from 1 to 1000000")
    if a.client is not None and a.what != "capture":
        raise InputError("--client is the capture benchmark's: satbench bench capture --client firefox")
    if a.db is not None and a.what not in ("capture", "returning"):
        raise InputError("--db is the capture and returning benchmarks': satbench bench returning --db DB")
    prereq.require_testbed()
    mod = importlib.import_module(f"satbench.bench.{a.what}")
    extra: dict[str, Any] = ({"trials": a.trials} if a.what == "soak"
                             else {"client": a.client or "chromium", "db": a.db}
                             if a.what == "capture" else {"db": a.db} if a.what == "returning" else {})
    r = mod.run(quick=a.quick, **extra)
    print(json.dumps(r, indent=1) if a.json else mod.format_report(r))
    return 0


COMMANDS: tuple[Command, ...] = (
    Command("links", "list link profiles with their parameters", _links_args, _links),
    Command("series", "a link profile from a measured RTT and loss series (ping, IRTT)", _series_args, _series),
    Command("shell", "run a command (or a shell) on a client behind the emulated link", _shell_args, _shell,
            usage="satbench shell --link PROFILE [options] [-- CMD ...]", takes_command=True),
    Command("cleanup", "remove what dead runs left behind", _cleanup_args, _cleanup),
    Command("check", "check the prerequisites", lambda p: None, _check),
    Command("serve", "serve a directory over HTTP/1.1, HTTP/2 and HTTP/3 in this namespace", _serve_args, _serve),
    Command("record", "record a page in Chromium (a HAR with its bodies) and import it as a site", _record_args,
            _record),
    Command("browse", "load a page in a fresh browser with the protocol forced; print the metrics", _browse_args,
            _browse),
    Command("load", "synthetic page loads (Rust): C clients at once, HTTP/1.1 on K connections", _load_args, _load),
    Command("plan", "print an experiment's trials and estimated duration; run nothing", _plan_args, _plan),
    Command("run", "run an experiment file: a fresh testbed per trial, results in SQLite (resumes)", _run_args, _run),
    Command("validate", "check the testbed against the literature, claim by claim (runs the validation sets)",
            _validate_args, _validate),
    Command("worker", "serve testbeds to a Dask scheduler: run the trials a 'satbench run --scheduler' sends",
            _worker_args, _worker),
    Command("scheduler", "a Dask scheduler for satbench workers: mutual TLS, or plain TCP on loopback",
            _scheduler_args, _scheduler),
    Command("compare", "did my change help? two runs side by side: each combination's median and the change "
                       "with its interval", _compare_args, _compare),
    Command("report", "write an HTML report (with SVG figures and statistics) of a results database", _report_args,
            _report),
    Command("export", "export a results database as CSV or Parquet", _export_args, _export),
    Command("trace", "draw one trial over time: cwnd, in flight, pacing, delivery, RTT, objects", _trace_args,
            _trace),
    Command("timing", "curl-style timing (DNS, connect, TLS, first byte, total) over fresh connections",
            _timing_args, _timing),
    Command("ca", "make (once) and show the test CA and server certificate", _ca_args, _ca),
    Command("pages", "generate the test pages (and bulk files) of the literature", _pages_args, _pages),
    Command("bench", "benchmarks: " + ", ".join(BENCHES), _bench_args, _bench),
)


class _Parser(argparse.ArgumentParser):
    """argparse, with bad usage as one line and exit code 2."""

    def error(self, message: str) -> Any:
        if message.startswith("argument command: invalid choice:"):
            given = message.split("invalid choice:", 1)[1].split("(", 1)[0].strip()
            raise InputError(f"unknown command {given}; satbench --help lists them")
        where = self.prog.removeprefix("satbench").strip()
        raise InputError(f"{where}: {message}" if where else message)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="satbench", description="Web performance over emulated satellite links.")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for c in COMMANDS:
        c.args(sub.add_parser(c.name, help=c.help, usage=c.usage))
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in args:
        i = args.index("--")
        args, rest = args[:i], args[i + 1:]
    try:
        a = build_parser().parse_args(args)
        cmd = {c.name: c for c in COMMANDS}[a.command]
        if rest and not cmd.takes_command:
            raise InputError(f"'{a.command}' takes no command after --")
        return cmd.run(a, rest)
    except SatbenchError as e:
        print(f"satbench: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        # The reader went away (e.g. `satbench links | head`): not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
