"""The ``satbench`` command: a thin layer over the library."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Sequence

from . import profiles
from .errors import SatbenchError


def _cmd_links(a: argparse.Namespace) -> int:
    found = profiles.available()
    rows = []
    for name, path in sorted(found.items()):
        try:
            p = profiles.load(str(path))
        except SatbenchError as e:
            rows.append({"name": name, "error": str(e), "file": str(path)})
            continue
        rows.append({"name": p.name, "rtt_ms": p.base_rtt_ms, "forward": p.forward.summary(),
                     "return": p.ret.summary(), "description": p.description, "file": str(path),
                     "emulator_config": p.emulator_config(0) if a.json else None})
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


def _spec_from(a: argparse.Namespace):  # type: ignore[no-untyped-def]
    from .testbed import TestbedSpec

    link = profiles.load(a.link, a.set)
    access = profiles.load(a.access) if a.access else None
    return TestbedSpec(link=link, clients=a.clients, servers=a.servers, access=access, seed=a.seed,
                       tcp_cc=a.default_cc, pcap_dir=Path(a.pcap) if a.pcap else None, dns=a.dns)


def _server_options(a: argparse.Namespace):  # type: ignore[no-untyped-def]
    from .serve import ServerOptions

    return ServerOptions(cc=a.cc, h3=not a.no_h3, tfo=a.tfo, resumption=not a.no_resumption, zero_rtt=not a.no_0rtt,
                         sndbuf=a.sndbuf, rcvbuf=a.rcvbuf, quic_initcwnd=a.quic_initcwnd, keylog=a.keylog,
                         tcp_initcwnd=a.tcp_initcwnd, pacing=not a.no_pacing)


def _cmd_shell(a: argparse.Namespace, rest: list[str]) -> int:
    from .errors import InputError
    from .prereq import require_testbed
    from .shell import run_shell

    spec = _spec_from(a)
    if a.cc and not a.serve:
        raise InputError("--cc sets the congestion control of the server started by --serve; "
                         "use --default-cc for the namespaces' default")
    serve = None
    if a.serve:
        if not Path(a.serve).is_dir():
            raise InputError(f"--serve {a.serve}: not a directory")
        opts = _server_options(a)
        opts.validate()
        serve = (Path(a.serve), Path(a.server_logs) if a.server_logs else None, opts)
    require_testbed()
    return run_shell(spec, rest or None, json_stderr=a.json, json_out=Path(a.json_out) if a.json_out else None,
                     quiet=a.quiet, serve=serve)


def _cmd_serve(a: argparse.Namespace) -> int:
    import tempfile

    from .serve import serve_forever

    opts = _server_options(a)
    opts.http_port, opts.https_port = a.http_port, a.https_port
    log_dir = Path(a.log_dir) if a.log_dir else Path(tempfile.mkdtemp(prefix="satbench-serve-"))
    return serve_forever(Path(a.dir), log_dir, opts, a.bind)


def _cmd_cleanup(a: argparse.Namespace) -> int:
    from .prereq import require_testbed
    from .testbed import cleanup

    if not a.force:
        require_testbed()
    removed = cleanup()
    print(f"removed {len(removed)} stale testbed(s)" + (f": {', '.join(removed)}" if removed else ""))
    return 0


def _cmd_check(a: argparse.Namespace) -> int:
    from .prereq import missing_for_testbed

    missing = missing_for_testbed()
    for m in missing:
        print(m)
    if not missing:
        print("ok: root, /dev/net/tun, ip, emulator binary")
    return 2 if missing else 0


def _cmd_bench(a: argparse.Namespace) -> int:
    from .bench import run_harness_bench, run_link_bench, run_loader_bench, run_server_bench

    if a.what == "harness":
        return run_harness_bench(json_out=a.json, quick=a.quick)
    if a.what == "loader":
        return run_loader_bench(json_out=a.json, quick=a.quick)
    if a.what == "server":
        return run_server_bench(json_out=a.json, quick=a.quick)
    return run_link_bench(json_out=a.json, quick=a.quick)


def _cmd_pages(a: argparse.Namespace) -> int:
    from . import pages

    out = Path(a.out)
    made = pages.generate(out, a.only.split(",") if a.only else None, seed=a.seed) if not a.bulk_only else []
    for m in made:
        print(f"{m.page}: {len(m.objects)} objects, {m.total_bytes} bytes -> {out / m.page}")
    for s in (a.bulk.split(",") if a.bulk else []):
        p = pages.bulk_file(out, pages.parse_size(s), seed=a.seed)
        print(f"bulk {s}: {p.stat().st_size} bytes -> {p}")
    return 0


def _cmd_ca(a: argparse.Namespace) -> int:
    from . import ca

    c = ca.ensure()
    print(f"CA certificate:      {c.cert}\nCA key (0600):       {c.key}\n"
          f"server certificate:  {c.server_cert}\nserver key (0600):   {c.server_key}")
    if a.nss_home:
        home = ca.nss_home(Path(a.nss_home), c)
        print(f"NSS database trusting the CA: {home / '.pki' / 'nssdb'} (use HOME={home} for the browser)")
    return 0


def _cmd_browse(a: argparse.Namespace) -> int:
    from .browse import BrowseOptions, browse
    from .errors import InputError

    opts = BrowseOptions(protocol=a.protocol, timeout_s=a.timeout, har=Path(a.har) if a.har else None,
                         netlog=Path(a.netlog) if a.netlog else None)
    if a.browser == "firefox":
        from .firefox import firefox_load

        if a.har or a.netlog:
            raise InputError("--har and --netlog are Chromium's; Firefox loads have neither here")
        r = firefox_load(a.url, opts, connections=a.connections or 6)
    else:
        if a.connections not in (None, 6):
            raise InputError("--connections: Chromium's 6 HTTP/1.1 connections per host cannot be changed; "
                             "use --browser firefox or 'satbench load'")
        r = browse(a.url, opts)
    if a.json:
        print(json.dumps(r.to_json()))
    else:
        state = "valid" if r.valid else f"INVALID: {r.invalid_reason}"
        fmt = lambda v: "-" if v is None else f"{v:.0f} ms"  # noqa: E731
        print(f"{r.url} over {r.protocol} ({r.browser}): {state}")
        print(f"  PLT {fmt(r.plt_ms)}, TTFB {fmt(r.ttfb_ms)}, FCP {fmt(r.fcp_ms)}, LCP {fmt(r.lcp_ms)}"
              f" ({r.lcp_element or '-'}), DOMContentLoaded {fmt(r.dcl_ms)}")
        print(f"  {len(r.resources)} responses on {r.connections} connections, {r.bytes_received} bytes received")
    return 0 if r.valid else 3


def _cmd_load(a: argparse.Namespace) -> int:
    from .load import LoadOptions, main_cli

    mode = "bulk" if a.bulk else "single" if a.single else "page"
    return main_cli(a.url, LoadOptions(protocol=a.protocol, clients=a.clients, connections=a.connections, mode=mode,
                                       timeout_s=a.timeout), a.json)


DEFAULT_DB = "results/satbench.sqlite"


def _cmd_plan(a: argparse.Namespace) -> int:
    from . import experiment

    exp = experiment.load(a.file)
    done: set[str] = set()
    if a.db and Path(a.db).exists():
        from .store import Store

        with Store(a.db) as st:
            found = st.experiment(exp.name)
            if found:
                if not exp.seed_given:
                    exp = experiment.reorder(exp, int(found["seed"]))
                done = set(st.done(int(found["id"])))
    if a.json:
        print(json.dumps({**exp.spec_json(), "estimate_s": experiment.estimate_s(exp, {k: 0.0 for k in done}),
                          "trials": [{"key": t.key, "rep": t.rep, "factors": t.factors, "scenarios": t.scenarios,
                                      "done": t.key in done, "estimate_s": experiment.estimate_trial_s(t.factors)}
                                     for t in exp.trials]}))
    else:
        print(experiment.format_plan(exp, done, limit=None if a.all else 50))
    return 0


def _cmd_run(a: argparse.Namespace) -> int:
    from . import experiment, runner

    exp = experiment.load(a.file)
    s = runner.run(exp, Path(a.db))
    print(f"{s.experiment}: {s.ran} trials run in {s.seconds:.0f} s ({s.valid} valid, {s.invalid} invalid, "
          f"{s.failed} failed); {s.already + s.ran - s.failed} of {s.planned} done; results in {s.db}")
    for reason, n in sorted(s.reasons.items(), key=lambda x: -x[1]):
        print(f"  {n} x {reason}")
    if s.interrupted:
        return 130
    return 0 if s.failed == 0 else 1


def _cmd_report(a: argparse.Namespace) -> int:
    from .report import write_report

    path = write_report(Path(a.db), Path(a.out), experiment=a.experiment)
    print(f"report: {path}")
    return 0


def _cmd_export(a: argparse.Namespace) -> int:
    from .store import export

    for p in export(a.db, a.out, a.format, a.experiment):
        print(p)
    return 0


def _cmd_timing(a: argparse.Namespace) -> int:
    from .timing import format_timing, timing

    t = timing(a.url, a.protocol, a.count)
    print(json.dumps({"url": t.url, "protocol": t.protocol, "rows": t.rows, "summary": t.summary()})
          if a.json else format_timing(t))
    return 0


def _add_testbed_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--link", required=True, help="link profile name or .toml file (see 'satbench links')")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a profile key: forward.KEY, return.KEY or KEY for both (repeatable)")
    p.add_argument("--access", help="profile of an access link between clients and terminal (e.g. wifi)")
    p.add_argument("--clients", type=int, default=1, help="client hosts (default 1)")
    p.add_argument("--servers", type=int, default=1, help="server hosts (default 1)")
    p.add_argument("--seed", type=int, help="seed of the emulator's randomness (default: random, reported)")
    p.add_argument("--default-cc", choices=["cubic", "bbr", "reno"],
                   help="default TCP congestion control in every host namespace")
    p.add_argument("--pcap", metavar="DIR", help="write a pcap of each side of the link into DIR")
    p.add_argument("--dns", action="store_true",
                   help="clients resolve names through a DNS server on the server host (lookups cross the link)")
    p.add_argument("--serve", metavar="DIR", help="start satbench-server on the server host, serving DIR")
    p.add_argument("--server-logs", metavar="DIR", help="keep the server's logs (access, TCP_INFO, qlog) in DIR")
    _add_server_args(p)


def _add_server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cc", choices=["cubic", "bbr", "reno"],
                   help="server congestion control: TCP_CONGESTION per socket, and quiche's (bbr = BBRv2 in quiche)")
    p.add_argument("--no-h3", action="store_true", help="no HTTP/3 and no Alt-Svc")
    p.add_argument("--tfo", action="store_true", help="TCP Fast Open on the server's listeners")
    p.add_argument("--no-resumption", action="store_true", help="no TLS session resumption over TCP")
    p.add_argument("--no-0rtt", action="store_true", help="no QUIC 0-RTT")
    p.add_argument("--no-pacing", action="store_true", help="no QUIC pacing")
    p.add_argument("--sndbuf", type=int, metavar="BYTES", help="server socket send buffer")
    p.add_argument("--rcvbuf", type=int, metavar="BYTES", help="server socket receive buffer")
    p.add_argument("--quic-initcwnd", type=int, metavar="PACKETS", help="QUIC initial congestion window")
    p.add_argument("--tcp-initcwnd", type=int, metavar="SEGMENTS",
                   help="TCP initial congestion window, on the server host's route (shell --serve only)")
    p.add_argument("--keylog", action="store_true", help="write TLS keys (SSLKEYLOGFILE format) to the log folder")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="satbench", description="Web performance over emulated satellite links.")
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("links", help="list link profiles with their parameters")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("shell", help="run a command (or a shell) on a client behind the emulated link",
                       usage="satbench shell --link PROFILE [options] [-- CMD ...]")
    _add_testbed_args(p)
    p.add_argument("--json", action="store_true", help="print the link counters as JSON on stderr")
    p.add_argument("--json-out", metavar="FILE", help="write the link counters as JSON to FILE")
    p.add_argument("-q", "--quiet", action="store_true", help="print no counters")
    p = sub.add_parser("cleanup", help="remove what dead runs left behind")
    p.add_argument("--force", action="store_true", help=argparse.SUPPRESS)
    sub.add_parser("check", help="check the prerequisites")
    p = sub.add_parser("serve", help="serve a directory over HTTP/1.1, HTTP/2 and HTTP/3 in this namespace")
    p.add_argument("dir")
    p.add_argument("--bind", default="0.0.0.0")
    p.add_argument("--http-port", type=int, default=80)
    p.add_argument("--https-port", type=int, default=443)
    p.add_argument("--log-dir", help="access log, TCP_INFO and qlog (default: a new temporary folder)")
    _add_server_args(p)
    p = sub.add_parser("browse", help="load a page in a fresh Chromium with the protocol forced; print the metrics")
    p.add_argument("url")
    p.add_argument("--protocol", required=True, choices=["h1", "h2", "h3"])
    p.add_argument("--timeout", type=float, default=120.0, help="seconds (default 120)")
    p.add_argument("--browser", choices=["chromium", "firefox"], default="chromium",
                   help="Debian's Chromium (default) or Firefox ESR")
    p.add_argument("--connections", type=int, help="HTTP/1.1 connections per host (Firefox only; default 6)")
    p.add_argument("--har", help="write a HAR file of the load")
    p.add_argument("--netlog", help="write Chromium's net-log of the load")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("load", help="synthetic page loads (Rust): C clients at once, HTTP/1.1 on K connections")
    p.add_argument("url")
    p.add_argument("--protocol", required=True, choices=["h1", "h2", "h3"])
    p.add_argument("--clients", type=int, default=1, help="concurrent clients, each on its own connections (default 1)")
    p.add_argument("--connections", type=int, default=6, help="HTTP/1.1 connections per host (default 6)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--single", action="store_true", help="fetch only URL (curl-style breakdown)")
    g.add_argument("--bulk", action="store_true", help="fetch only URL, printing progress on stderr")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per client (default 120)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("plan", help="print an experiment's trials and estimated duration; run nothing")
    p.add_argument("file")
    p.add_argument("--db", help="results database: mark trials already done")
    p.add_argument("--all", action="store_true", help="list every trial (default: the first 50)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("run", help="run an experiment file: a fresh testbed per trial, results in SQLite (resumes)")
    p.add_argument("file")
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    p = sub.add_parser("report", help="write an HTML report (with SVG figures and statistics) of a results database")
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    p.add_argument("-o", "--out", default="report", help="output folder (default report/)")
    p.add_argument("--experiment", help="only this experiment (default: all in the database)")
    p = sub.add_parser("export", help="export a results database as CSV or Parquet")
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    p.add_argument("-o", "--out", required=True, help="output folder")
    p.add_argument("--format", choices=["csv", "parquet"], default="csv")
    p.add_argument("--experiment", help="only this experiment")
    p = sub.add_parser("timing", help="curl-style timing (DNS, connect, TLS, first byte, total) over fresh connections")
    p.add_argument("url")
    p.add_argument("--protocol", required=True, choices=["h1", "h2", "h3"])
    p.add_argument("--count", type=int, default=100, help="repetitions (default 100)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("ca", help="make (once) and show the test CA and server certificate")
    p.add_argument("--nss-home", metavar="DIR", help="also make DIR/.pki/nssdb trust the CA (a browser HOME)")
    p = sub.add_parser("pages", help="generate the test pages (and bulk files) of the literature")
    p.add_argument("--out", required=True, help="folder to write the pages into")
    p.add_argument("--only", help="comma-separated page names (default: all)")
    p.add_argument("--bulk", help="also make bulk files, e.g. 1M,100M,250M,500M")
    p.add_argument("--bulk-only", action="store_true", help="make only the bulk files")
    p.add_argument("--seed", type=int, default=1, help="content seed (default 1)")
    p = sub.add_parser("bench", help="benchmarks: 'link' (the emulator's speed and error), 'server' (its throughput), "
                                         "'loader' (the synthetic loader's CPU), "
                                         "'harness' (overhead per trial, plan accuracy)")
    p.add_argument("what", choices=["link", "server", "loader", "harness"])
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="shorter runs (less precise)")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in args:
        i = args.index("--")
        args, rest = args[:i], args[i + 1:]
    a = build_parser().parse_args(args)
    try:
        if a.command == "links":
            return _cmd_links(a)
        if a.command == "shell":
            return _cmd_shell(a, rest)
        if rest:
            raise SatbenchError(f"'{a.command}' takes no command after --")
        if a.command == "cleanup":
            return _cmd_cleanup(a)
        if a.command == "check":
            return _cmd_check(a)
        if a.command == "bench":
            return _cmd_bench(a)
        if a.command == "pages":
            return _cmd_pages(a)
        if a.command == "ca":
            return _cmd_ca(a)
        if a.command == "serve":
            return _cmd_serve(a)
        if a.command == "browse":
            return _cmd_browse(a)
        if a.command == "plan":
            return _cmd_plan(a)
        if a.command == "run":
            return _cmd_run(a)
        if a.command == "report":
            return _cmd_report(a)
        if a.command == "export":
            return _cmd_export(a)
        if a.command == "load":
            return _cmd_load(a)
        if a.command == "timing":
            return _cmd_timing(a)
    except SatbenchError as e:
        print(f"satbench: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        # The reader went away (e.g. `satbench links | head`): not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
