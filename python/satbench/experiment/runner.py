"""Runs an experiment: every trial in a fresh testbed (namespaces, emulator,
server, client), its measurements committed to the results database in one
transaction, its artefacts in a folder of its own. Running the same
experiment again runs only the trials that are missing (and those that
failed).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from . import __version__, profiles
from . import pages as pages_mod
from .errors import SatbenchError
from .experiment import Experiment, Trial, estimate_trial_s, link_profile, page_bytes
from .prereq import REPO, require_testbed
from .stats import jain
from .store import Store, TrialRecord
from .testbed import Testbed, TestbedSpec

METRIC_KEYS = ("plt_ms", "fcp_ms", "lcp_ms", "ttfb_ms")


class TrialFailed(SatbenchError):
    """The harness could not complete the trial (not a measurement of the path)."""


@dataclass
class RunSummary:
    experiment: str
    db: Path
    planned: int
    already: int
    ran: int = 0
    valid: int = 0
    invalid: int = 0
    failed: int = 0
    interrupted: bool = False
    seconds: float = 0.0
    reasons: dict[str, int] = field(default_factory=dict)


# -- environment ------------------------------------------------------------------

def _git_commit() -> str | None:
    try:
        sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) or None
    except (OSError, subprocess.SubprocessError):
        return None


def _version(binary: str) -> str | None:
    """A browser's ``--version`` line, or None if it is not there."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=20).stdout
        return out.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _lock_version(crate: str) -> str | None:
    lock = REPO / "Cargo.lock"
    if not lock.exists():
        return None
    m = re.search(r'name = "' + re.escape(crate) + r'"\nversion = "([^"]+)"', lock.read_text())
    return m.group(1) if m else None


def static_environment(needs_browser: bool) -> dict[str, Any]:
    return {"satbench": __version__, "commit": _git_commit(), "kernel": platform.release(),
            "python": platform.python_version(), "browser": _version("/usr/bin/chromium") if needs_browser else None,
            "firefox": _version("/usr/bin/firefox-esr") if needs_browser else None,
            "quiche": _lock_version("quiche"), "hyper": _lock_version("hyper"), "rustls": _lock_version("rustls"),
            "cores": os.cpu_count(), "host": platform.node()}


# -- one trial -----------------------------------------------------------------------

def trial_seed(exp_seed: int, key: str) -> int:
    return int(hashlib.sha1(f"{exp_seed}:{key}".encode()).hexdigest()[:15], 16)


def page_url(page: str) -> str:
    if page.startswith("bulk:"):
        return f"https://server.test/bulk/{pages_mod.parse_size(page[5:])}.bin"
    return f"https://server.test/{page}/"


def prepare_pages(root: Path, trials: list[Trial]) -> dict[str, int]:
    """Generate the pages and bulk files the trials need (once); return their sizes in bytes."""
    sizes: dict[str, int] = {}
    for page in sorted({str(t.factors["page"]) for t in trials}):
        if page.startswith("bulk:"):
            size = pages_mod.parse_size(page[5:])
            pages_mod.bulk_file(root, size)
            sizes[page] = size
            continue
        mf = root / page / "manifest.json"
        if not mf.exists():
            pages_mod.generate(root, [page])
        m = json.loads(mf.read_text())
        sizes[page] = int(m["html_bytes"]) + sum(int(o["bytes"]) for o in m["objects"])
    return sizes


def _quiche_cc(name: str | None) -> str | None:
    if name is None:
        return None
    return {"bbr2_gcongestion": "bbr", "bbr2": "bbr", "bbr": "bbr", "cubic": "cubic", "reno": "reno"}.get(name, name)


def _server_summary(log_dir: Path, kind: str) -> dict[str, Any]:
    """Connections, protocols and congestion controls the server really used, and TCP_INFO extremes."""
    out: dict[str, Any] = {"kind": kind}
    acc = log_dir / "access.jsonl"
    if kind != "satbench" or not acc.exists():
        return out
    conns, reqs = [], []
    for line in acc.read_text().splitlines():
        try:
            e = json.loads(line)
        except json.JSONDecodeError:
            continue
        (conns if e.get("type") == "connection" else reqs).append(e)
    out["connections"] = len(conns)
    out["requests"] = len(reqs)
    out["protocols"] = sorted({str(r.get("proto")) for r in reqs})
    out["cc"] = sorted({str(_quiche_cc(r.get("cc"))) for r in reqs if r.get("cc")})
    out["bytes_served"] = sum(int(r.get("body_bytes") or 0) for r in reqs)
    ti = log_dir / "tcp_info.jsonl"
    if ti.exists():
        last: dict[str, dict[str, Any]] = {}
        max_cwnd = 0
        for line in ti.read_text().splitlines():
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue
            last[str(e.get("conn"))] = e
            max_cwnd = max(max_cwnd, int(e.get("cwnd") or 0))
        out["tcp_total_retrans"] = sum(int(e.get("total_retrans") or 0) for e in last.values())
        out["tcp_max_cwnd"] = max_cwnd
        out["tcp_min_rtt_ms"] = min((e["min_rtt_us"] / 1000 for e in last.values() if e.get("min_rtt_us")),
                                    default=None)
    qdir = log_dir / "qlog"
    if qdir.is_dir():
        out["qlogs"] = len(list(qdir.iterdir()))
    return out


def _link_metrics(stats: dict[str, Any] | None, page_total: int) -> dict[str, float | None]:
    if not stats:
        return {}
    f, r = stats["forward"], stats["return"]
    wire = f["delivered"]["bytes"] + r["delivered"]["bytes"]
    lost = sum(d["packets"] for d in f["dropped"].values()) + sum(d["packets"] for d in r["dropped"].values())
    return {"wire_bytes_forward": f["delivered"]["bytes"], "wire_bytes_return": r["delivered"]["bytes"],
            "wire_bytes": wire, "wire_packets": f["delivered"]["packets"] + r["delivered"]["packets"],
            "link_drops": lost, "page_bytes": page_total,
            "overhead_pct": (wire - page_total) / page_total * 100 if page_total else None}


def _chromium(browser: Any, tb: Testbed, url: str, protocol: str, timeout: float, art: Path, artefacts: list[str]
              ) -> tuple[dict[str, Any], TrialRecord]:
    from .browse import BrowseOptions

    opts = BrowseOptions(protocol=protocol, timeout_s=timeout, har=art / "page.har" if "har" in artefacts else None,
                         netlog=art / "netlog.json" if "netlog" in artefacts else None)
    try:
        r = browser.load(url, opts, host=tb.client).to_json()
    except SatbenchError:
        raise
    except Exception as e:  # noqa: BLE001 - Playwright's own errors: the harness failed, not the path
        raise TrialFailed(f"browser: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    return _browser_record(r)


def _browser_record(r: dict[str, Any]) -> tuple[dict[str, Any], TrialRecord]:
    """A browser's load (satbench.browse.LoadResult as JSON) as a trial record."""
    rec = _record()
    rec.status, rec.reason = ("valid", None) if r["valid"] else ("invalid", r["invalid_reason"])
    rec.metrics = {"plt_ms": r["plt_ms"], "fcp_ms": r["fcp_ms"], "lcp_ms": r["lcp_ms"], "ttfb_ms": r["ttfb_ms"],
                   "dcl_ms": r["dcl_ms"], "connections_opened": r["connections"], "bytes_received": r["bytes_received"],
                   "responses": len(r["resources"]), "browser_wall_s": r["wall_s"]}
    rec.objects = [{"client": 0, "url": x["url"], "protocol": x["protocol"], "status": x["status"], "bytes": x["bytes"],
                    "start_ms": x["start_ms"], "ttfb_ms": x["response_start_ms"], "end_ms": x["end_ms"]}
                   for x in r["resources"]]
    rec.clients = [{"client": 0, "valid": r["valid"], "reason": r["invalid_reason"], "plt_ms": r["plt_ms"],
                    "fcp_ms": r["fcp_ms"], "lcp_ms": r["lcp_ms"], "ttfb_ms": r["ttfb_ms"],
                    "bytes": r["bytes_received"],
                    "throughput_mbps": r["bytes_received"] * 8 / r["plt_ms"] / 1e3 if r["plt_ms"] else None}]
    return r, rec


def _firefox(tb: Testbed, url: str, protocol: str, connections: int, timeout: float
             ) -> tuple[dict[str, Any], TrialRecord]:
    argv = [sys.executable, "-m", "satbench", "browse", url, "--browser", "firefox", "--protocol", protocol,
            "--connections", str(connections), "--json", "--timeout", str(timeout)]
    try:
        p = tb.client.run(argv, capture_output=True, text=True, timeout=timeout + 90)
    except subprocess.TimeoutExpired:
        raise TrialFailed(f"Firefox did not finish within {timeout + 90:.0f} s") from None
    if p.returncode not in (0, 3):
        raise TrialFailed(f"satbench browse --browser firefox failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return _browser_record(json.loads(p.stdout))


def _loader(tb: Testbed, url: str, f: dict[str, Any], timeout: float) -> tuple[dict[str, Any], TrialRecord]:
    from .load import LoadOptions

    mode = "single" if str(f["page"]).startswith("bulk:") else "page"
    argv = LoadOptions(protocol=f["protocol"], clients=int(f["clients"]), connections=int(f["connections"]),
                       mode=mode, timeout_s=timeout).argv(url)
    try:
        p = tb.client.run(argv, capture_output=True, text=True, timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        raise TrialFailed(f"the loader did not finish within {timeout + 60:.0f} s") from None
    if p.returncode != 0:
        raise TrialFailed(f"satbench-load failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    d = json.loads(p.stdout)
    rec = _record()
    ms = lambda v: None if v is None else v * 1e3  # noqa: E731
    cs = d["clients"]
    rec.clients = [{"client": c["client"], "valid": c["valid"], "reason": c["invalid_reason"], "plt_ms": ms(c["plt_s"]),
                    "fcp_ms": ms(c["fcp_s"]), "lcp_ms": ms(c["lcp_s"]), "ttfb_ms": ms(c["ttfb_s"]),
                    "bytes": c["bytes"], "throughput_mbps": c["throughput_mbps"]} for c in cs]
    rec.objects = [{"client": c["client"], "url": o["url"], "protocol": o["protocol"], "status": o["status"],
                    "bytes": o["bytes"], "start_ms": ms(o["start_s"]), "ttfb_ms": ms(o["ttfb_s"]),
                    "end_ms": ms(o["done_s"])} for c in cs for o in c["objects"]]
    bad = [c for c in cs if not c["valid"]]
    rec.status, rec.reason = ("invalid", f"client {bad[0]['client']}: {bad[0]['invalid_reason']}") if bad \
        else ("valid", None)

    def med(key: str) -> float | None:
        xs = [c[key] for c in rec.clients if c[key] is not None]
        return statistics.median(xs) if xs else None

    rec.metrics = {k: med(k) for k in METRIC_KEYS}
    rec.metrics.update({"throughput_mbps": med("throughput_mbps"), "bytes_received": sum(c["bytes"] for c in cs),
                        "connections_opened": sum(len(c["connections"]) for c in cs), "responses": len(rec.objects),
                        "loader_cpu_s": d["cpu_s"], "loader_wall_s": d["wall_s"]})
    if len(cs) > 1:
        rec.metrics["jain_throughput"] = jain([c["throughput_mbps"] for c in rec.clients])
        rec.metrics["plt_max_ms"] = max((c["plt_ms"] for c in rec.clients if c["plt_ms"] is not None), default=None)
    if mode == "single":
        t = cs[0]["timeline"]
        rec.metrics.update({f"{k[:-2]}_ms": ms(v) for k, v in t.items()})
    return d, rec


def _curl(tb: Testbed, url: str, protocol: str, timeout: float) -> tuple[dict[str, Any], TrialRecord]:
    from .timing import fetch_once

    try:
        row = fetch_once(url, protocol, run=tb.client.run, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TrialFailed(f"the transfer did not finish within {timeout:.0f} s") from None
    rec = _record()
    ok = 200 <= int(row.get("status") or 0) < 400
    rec.status, rec.reason = ("valid", None) if ok else ("invalid", f"HTTP status {row.get('status')}")
    want = {"h1": "1.1", "h2": "2", "h3": "3"}[protocol]
    if ok and str(row.get("http_version")) != want:
        rec.status, rec.reason = "invalid", f"came over HTTP/{row.get('http_version')}, not HTTP/{want}"
    ms = lambda v: None if v is None else v * 1e3  # noqa: E731
    rec.metrics = {"dns_ms": ms(row["dns_s"]), "connect_ms": ms(row["connect_s"]), "tls_ms": ms(row["tls_s"]),
                   "first_byte_ms": ms(row["first_byte_s"]), "total_ms": ms(row["total_s"]),
                   "ttfb_ms": ms(row["first_byte_s"]), "plt_ms": ms(row["total_s"]), "bytes_received": row["bytes"],
                   "throughput_mbps": row["bytes"] * 8 / row["total_s"] / 1e6 if row["total_s"] else None}
    return row, rec


def _record() -> TrialRecord:
    return TrialRecord(key="", rep=0, seq=0, factors={}, scenarios=[], status="failed", reason=None, started=0.0,
                       duration_s=0.0, overhead_s=None, seed=None, env={})


def run_trial(exp: Experiment, t: Trial, seq: int, pages_root: Path, page_sizes: dict[str, int],
              art_root: Path, env: dict[str, Any], browser: Any = None) -> TrialRecord:
    """Build a fresh testbed, run the trial's client against its server, tear down; never raises
    for a trial-level problem (it comes back as a failed record)."""
    from .serve import Server, ServerOptions
    from .thirdparty import ThirdPartyServer

    f = t.factors
    started, t0 = time.time(), time.monotonic()
    seed = trial_seed(exp.seed, t.key)
    art = art_root / t.key
    if art.exists():
        shutil.rmtree(art)
    art.mkdir(parents=True)
    trial_env = {**env, "loadavg": os.getloadavg(), "emulator_seed": seed, "order_seed": exp.seed}
    link_stats = None
    server_summary: dict[str, Any] = {}
    raw: dict[str, Any] | None = None
    load_s: float | None = None
    timings: dict[str, float] = {}
    try:
        access = profiles.load(f["access"]) if f["access"] != "none" else None
        spec = TestbedSpec(link=link_profile(f), access=access, seed=seed,
                           pcap_dir=art / "pcap" if "pcap" in exp.artefacts else None)
        url = page_url(str(f["page"]))
        log_dir = art / "server"
        tb = Testbed(spec)
        with tb:
            timings["testbed_up_s"] = time.monotonic() - t0
            opts = {k[7:]: v for k, v in f.items() if k.startswith("server.")}
            if f["server"] == "satbench":
                srv: Any = Server(pages_root, log_dir, ServerOptions(cc=f["cc"], qlog="server" in exp.artefacts,
                                                                      tcp_info="server" in exp.artefacts, **opts),
                                  host=tb.server)
            else:
                if any(k not in ("h3",) for k in opts):
                    raise TrialFailed(f"server options {sorted(opts)} apply to the satbench server only")
                srv = ThirdPartyServer(f["server"], pages_root, log_dir, tb.server, cc=f["cc"], h3=opts.get("h3", True))
            with srv:
                timings["server_up_s"] = time.monotonic() - t0
                tc = time.monotonic()
                if f["client"] == "chromium":
                    raw, rec = _chromium(browser, tb, url, f["protocol"], exp.timeout_s, art, exp.artefacts)
                    if rec.metrics.get("plt_ms") is not None:
                        load_s = rec.metrics["plt_ms"] / 1e3
                elif f["client"] == "firefox":
                    raw, rec = _firefox(tb, url, f["protocol"], int(f["connections"]), exp.timeout_s)
                    if rec.metrics.get("plt_ms") is not None:
                        load_s = rec.metrics["plt_ms"] / 1e3
                elif f["client"] == "loader":
                    raw, rec = _loader(tb, url, f, exp.timeout_s)
                    load_s = raw["wall_s"]
                else:
                    raw, rec = _curl(tb, url, f["protocol"], exp.timeout_s)
                    load_s = rec.metrics["total_ms"] / 1e3 if rec.metrics.get("total_ms") else None
                timings["client_s"] = time.monotonic() - tc
            server_summary = _server_summary(log_dir, f["server"])
        link_stats = tb.link_stats
        server_summary["tcp_cc_route"] = tb.effective_tcp_cc
    except (SatbenchError, OSError, subprocess.SubprocessError, json.JSONDecodeError, KeyError) as e:
        rec = _record()
        rec.status, rec.reason = "failed", f"{type(e).__name__}: {e}"[:2000]
    duration = time.monotonic() - t0
    # What really happened: the server's congestion control and protocols.
    if rec.status == "valid" and server_summary.get("cc") and server_summary["cc"] != [f["cc"]]:
        rec.status, rec.reason = "invalid", f"the server used {', '.join(server_summary['cc'])}, not {f['cc']}"
    total = page_sizes.get(str(f["page"]), 0) * int(f["clients"])
    rec.metrics.update(_link_metrics(link_stats, total))
    rec.metrics.update(timings)
    if "server" not in exp.artefacts and (art / "server").exists():
        shutil.rmtree(art / "server")
    (art / "client.json").write_text(json.dumps(raw, default=str) if raw is not None else "null")
    rec.key, rec.rep, rec.seq, rec.factors, rec.scenarios = t.key, t.rep, seq, f, t.scenarios
    rec.started, rec.duration_s, rec.seed, rec.env = started, duration, seed, trial_env
    rec.overhead_s = duration - load_s if load_s is not None else None
    rec.artefacts = str(art)
    rec.link_counters, rec.server_summary = link_stats, server_summary
    return rec


# -- the sweep ---------------------------------------------------------------------

def _fmt_s(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def run(exp: Experiment, db: Path, *, out: TextIO | None = None, art_root: Path | None = None,
        pages_root: Path | None = None) -> RunSummary:
    """Run the experiment's missing trials; Ctrl-C stops after tearing the current trial down."""
    out = out or sys.stderr
    require_testbed()
    from .testbed import cleanup

    cleanup()  # what runs killed before (SIGKILL, power loss) left behind; live testbeds are not touched
    db = Path(db)
    store = Store(db)
    try:
        found = store.experiment(exp.name)
        if found and not exp.seed_given and found["seed"] != exp.seed:
            # Same experiment, no seed in the file: keep the first run's order.
            from .experiment import reorder
            exp = reorder(exp, int(found["seed"]))
        eid = store.begin_experiment(exp.name, exp.file, exp.text, exp.spec_json(),
                                     exp.seed if not found else int(found["seed"]))
        done = store.done(eid)
        todo = [t for t in exp.trials if t.key not in done]
        summary = RunSummary(experiment=exp.name, db=db, planned=len(exp.trials), already=len(done))
        pages_root = pages_root or db.parent / "pages"
        art_root = (art_root or db.parent / "artefacts") / exp.name
        page_sizes = prepare_pages(pages_root, exp.trials)
        needs_browser = any(t.factors["client"] == "chromium" for t in todo)
        env = static_environment(any(t.factors["client"] in ("chromium", "firefox") for t in todo))
        browser = None
        if needs_browser:
            from .browse import Browser

            browser = Browser()
        print(f"satbench run {exp.name}: {len(exp.trials)} trials, {len(done)} already stored in {db}, "
              f"{len(todo)} to run (order seed {exp.seed})", file=out, flush=True)
        t_start = time.monotonic()
        stopping = False

        def on_sigint(signum: int, frame: Any) -> None:
            nonlocal stopping
            stopping = True
            raise KeyboardInterrupt

        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            for i, t in enumerate(todo[:exp.warmup] if todo else [], 1):
                print(f"  warm-up {i}/{exp.warmup}: {t.label()}", file=out, flush=True)
                run_trial(exp, t, 0, pages_root, page_sizes, art_root / "_warmup", env, browser)
            shutil.rmtree(art_root / "_warmup", ignore_errors=True)
            est_left = sum(estimate_trial_s(t.factors) for t in todo)
            spent_est, spent_real = 0.0, 0.0
            cells: dict[str, list[float]] = {}
            for i, t in enumerate(todo, 1):
                rec = run_trial(exp, t, len(done) + i, pages_root, page_sizes, art_root, env, browser)
                if stopping:
                    raise KeyboardInterrupt  # a trial cut short by Ctrl-C is not a result
                store.write_trial(eid, rec)
                summary.ran += 1
                setattr(summary, rec.status, getattr(summary, rec.status) + 1)
                if rec.reason and rec.status != "valid":
                    summary.reasons[rec.reason[:120]] = summary.reasons.get(rec.reason[:120], 0) + 1
                est = estimate_trial_s(t.factors)
                spent_est += est
                spent_real += rec.duration_s
                est_left -= est
                eta = est_left * (spent_real / spent_est if spent_est else 1.0)
                plt = rec.metrics.get("plt_ms")
                cell = " ".join(f"{k}={t.factors[k]}" for k in exp.varied if k in t.factors) or "all"
                if plt is not None and rec.status == "valid":
                    cells.setdefault(cell, []).append(plt)
                med = statistics.median(cells[cell]) if cells.get(cell) else None
                result = f"PLT {plt:.0f} ms" if plt is not None else "no PLT"
                state = rec.status if rec.status == "valid" else f"{rec.status.upper()} ({rec.reason})"
                n_done = len(done) + i
                bar = "#" * round(20 * n_done / len(exp.trials))
                print(f"  [{bar:.<20}] {n_done}/{len(exp.trials)} {_fmt_s(time.monotonic() - t_start)} elapsed, "
                      f"ETA {_fmt_s(eta)} | {cell} rep {t.rep}: {state}, {result}"
                      + (f" | cell median {med:.0f} ms" if med is not None else ""), file=out, flush=True)
        except KeyboardInterrupt:
            summary.interrupted = True
            print(f"\ninterrupted: {summary.ran} trials stored by this run; run the same command again to "
                  f"resume", file=out, flush=True)
        finally:
            signal.signal(signal.SIGINT, previous)
            if browser is not None:
                try:
                    browser.close()
                except Exception:  # noqa: BLE001 - the driver may have died with Ctrl-C
                    pass
        summary.seconds = time.monotonic() - t_start
        return summary
    finally:
        store.close()
