"""Commands that drive a testbed by hand: link profiles (``links``, ``series``),
a shell behind the emulated link (``shell``), ``cleanup`` and ``check``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import prereq
from ..endpoints import ca, pages
from ..endpoints.base import Server
from ..endpoints.satbench_server import SatbenchServer
from ..errors import InputError, SatbenchError
from ..experiment.trialspec import TrialSpec
from ..link import profile
from ..link.spec import LinkSpec, resolve
from ..model import CongestionControl, choices
from ..path import PathElement, element_class
from ..testbed.cleanup import cleanup
from ..testbed.shell import format_counters, run_shell
from ..testbed.testbed import (
    IP_FAMILIES,
    MAX_TERMINALS,
    Testbed,
    TestbedSpec,
    check_namespace_default_cc,
    terminal_subnets,
)
from .common import _options_from, _output_dir, _server_args, ranged

# -- links, shell, cleanup, check ----------------------------------------------------------


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
    from ..link import series  # noqa: PLC0415 - one command's module

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
        from ..endpoints import sites  # noqa: PLC0415 - one option's module

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
