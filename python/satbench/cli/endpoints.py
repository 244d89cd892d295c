"""Commands that run one server or one client by hand, outside a testbed:
``serve``, ``record``, ``browse``, ``load``, ``timing``, and the certificates
and pages they use (``ca``, ``pages``)."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from ..endpoints import ca, pages
from ..endpoints.browser import BrowseOptions, LoadResult
from ..endpoints.curl import format_timing, timing
from ..endpoints.loader import LoadOptions, format_run, load
from ..endpoints.satbench_server import SatbenchServer
from ..errors import InputError
from ..model import DEFAULT_QUIC_STACK, QUIC_STACKS, Protocol, choices
from .common import _options_from, _output_dir, _server_args, ranged

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
    from ..endpoints import safeio, sites  # noqa: PLC0415 - one command's modules
    from ..endpoints.chromium import browse  # noqa: PLC0415 - Playwright loads on use

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
        from ..endpoints.firefox import firefox_load  # noqa: PLC0415 - Playwright and browsers load on use

        if a.har or a.netlog:
            raise InputError("--har and --netlog are Chromium's; Firefox loads have neither here")
        r = firefox_load(a.url, opts, connections=a.connections or 6)
    else:
        from ..endpoints.chromium import browse  # noqa: PLC0415 - Playwright loads on use

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
        from ..experiment import cluster_tls  # noqa: PLC0415 - one command's module

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
        from ..endpoints import schedule  # noqa: PLC0415 - one command's module

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
        from ..endpoints.loader import loader_binary  # noqa: PLC0415 - the format's owner checks what was written

        if loader_binary().exists() and (why := schedule.check(str(out), str(loader_binary()))[0]) is not None:
            raise InputError(f"pages schedule: the schedule learned is not one the loader takes: {why}")
        print(f"{out}: {schedule.summary(s)}")
        return 0
    if any(v is not None for v in learning):
        raise InputError("pages: --db, --trial, --page, --link and --protocol are for pages schedule")
    if a.action == "import":
        if not a.archive:
            raise InputError("pages import: name the archive (a .har, .har.gz or .wprgo file)")
        from ..endpoints import sites  # noqa: PLC0415 - one command's module

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
