"""``satbench bench link``: the emulator's own speed and error, as figures.

Measured on a fresh testbed each:
  - maximum TCP throughput through a zero-delay, unlimited link, and the
    emulator's CPU time per Gbit/s;
  - RTT error at 250 ms one-way delay (measured minus configured), idle and
    during a bulk transfer, with the same probe's RTT over one LAN hop that
    does not cross the emulator as a reference;
  - TCP goodput as a fraction of the ideal at 10 and 100 Mbit/s after slow start.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import threading
import time
import tomllib
from typing import Any

from . import measure, profiles
from .testbed import Host, Testbed, TestbedSpec

TARGETS = {
    "throughput_gbps_min": 2.0,
    "cores_per_gbps_max": 0.5,
    "rtt_error_median_ms_max": 0.1,
    "rtt_error_p99_ms_max": 1.0,
    "goodput_fraction_min": 0.99,
}


def _link(overrides: list[str]) -> profiles.LinkProfile:
    return profiles.load("wire", overrides)


def throughput(seconds: float) -> dict[str, Any]:
    with Testbed(TestbedSpec(link=_link([]), seed=1)) as tb:
        pid = measure.emulator_pid(tb)
        cpu0, t0 = measure.cpu_seconds(pid), time.monotonic()
        b = measure.bulk(tb.client, tb.server, seconds=seconds)
        cpu1, t1 = measure.cpu_seconds(pid), time.monotonic()
    gbps = b.bytes_received * 8 / b.seconds / 1e9
    cores = (cpu1 - cpu0) / (t1 - t0)
    return {"gbps": gbps, "emulator_cores": cores, "cores_per_gbps": cores / gbps if gbps else None,
            "retransmits": b.retransmits, "seconds": b.seconds}


def _errors(r: measure.ProbeResult, configured_ms: float) -> dict[str, Any]:
    errs = sorted(x - configured_ms for x in r.rtts)
    if not errs:
        return {"probes": r.sent, "received": 0}
    q = lambda p: errs[min(len(errs) - 1, round(p * (len(errs) - 1)))]  # noqa: E731
    return {"probes": r.sent, "received": r.received, "median_ms": q(0.5), "p99_ms": q(0.99),
            "max_ms": errs[-1], "min_ms": errs[0]}


def _reference(tb: Testbed, count: int) -> dict[str, Any]:
    """The probe's RTT between a client and the terminal's LAN side: the same
    endpoints' stack and wake-up cost, without the emulator."""
    term_lan = Host("terminal-lan", tb.terminal.ns, "198.18.1.1")
    r = measure.probe(tb.client, term_lan, count=count, interval_ms=10)
    return {"median_ms": r.median, "p99_ms": r.quantile(0.99)}


def rtt_error(count: int, bulk_s: float) -> dict[str, Any]:
    out: dict[str, Any] = {"one_way_ms": 250.0}
    with Testbed(TestbedSpec(link=_link(["delay_ms=250"]), seed=1)) as tb:
        out["reference_no_emulator"] = _reference(tb, count)
        out["idle"] = _errors(measure.probe(tb.client, tb.server, count=count, interval_ms=10), 500.0)
        res: dict[str, Any] = {}
        t = threading.Thread(target=lambda: res.update(b=measure.bulk(tb.client, tb.server, seconds=bulk_s)))
        t.start()
        time.sleep(2.0)  # past slow start's first round trips
        n = min(count, int((bulk_s - 3) * 100))
        out["bulk"] = _errors(measure.probe(tb.client, tb.server, count=n, interval_ms=10), 500.0)
        t.join()
        if "b" in res:
            out["bulk"]["bulk_mbps"] = res["b"].bytes_received * 8 / res["b"].seconds / 1e6
    return out


def goodput(rate_mbps: float, seconds: float, skip_s: float) -> dict[str, Any]:
    # A queue deeper than TCP's largest window: no loss, so the figure is the
    # rate the emulator delivers, not CUBIC's reaction to tail drops.
    link = _link([f"rate_mbps={rate_mbps}", "delay_ms=10", "queue_ms=4000"])
    # CUBIC, whatever the host's default: BBR's ProbeRTT would halve the rate
    # for 200 ms every 10 s and the figure would measure BBR, not the link.
    # Set on the testbed's routes (kernel-enforced) and on iperf3's sockets.
    with Testbed(TestbedSpec(link=link, seed=1, tcp_cc="cubic")) as tb:
        b = measure.bulk(tb.client, tb.server, seconds=seconds, cc="cubic")
        cc = tb.tcp_cc()
    reported = b.raw["end"].get("sender_tcp_congestion")  # None when iperf3's server did not send it
    mss = b.mss or 1448
    ideal = measure.ideal_goodput_bps(rate_mbps * 1e6, mss)
    g = b.goodput_bps(skip_s)
    drops = tb.link_stats["forward"]["dropped"] if tb.link_stats else {}
    return {"rate_mbps": rate_mbps, "rtt_ms": 20.0, "cc": cc, "cc_reported_by_iperf3": reported, "goodput_mbps": g / 1e6, "ideal_mbps": ideal / 1e6,
            "fraction": g / ideal, "mss": mss, "skipped_s": skip_s, "retransmits": b.retransmits,
            "link_drops": sum(v["packets"] for v in drops.values())}


def run(quick: bool = False) -> dict[str, Any]:
    secs = 4.0 if quick else 10.0
    count = 150 if quick else 500
    res: dict[str, Any] = {
        "machine": {"cores": os.cpu_count(), "kernel": platform.release()},
        "targets": TARGETS,
        "throughput": throughput(secs),
        "rtt_error": rtt_error(count, 8.0 if quick else 12.0),
        "goodput": [goodput(r, 8.0 if quick else 15.0, 3.0) for r in (10.0, 100.0)],
    }
    t, e = res["throughput"], res["rtt_error"]
    res["meets"] = {
        "throughput": t["gbps"] >= TARGETS["throughput_gbps_min"],
        "cpu": (t["cores_per_gbps"] or 9) <= TARGETS["cores_per_gbps_max"],
        "rtt_idle": e["idle"].get("median_ms", 9) <= TARGETS["rtt_error_median_ms_max"]
        and e["idle"].get("p99_ms", 9) <= TARGETS["rtt_error_p99_ms_max"],
        "goodput": all(g["fraction"] >= TARGETS["goodput_fraction_min"] for g in res["goodput"]),
    }
    return res


def format_report(r: dict[str, Any]) -> str:
    t, e = r["throughput"], r["rtt_error"]
    ok = lambda b: "meets target" if b else "MISSES target"  # noqa: E731
    lines = [
        f"satbench bench link  ({r['machine']['cores']} cores, kernel {r['machine']['kernel']})",
        f"  zero-delay unlimited link: {t['gbps']:.2f} Gbit/s, emulator {t['emulator_cores']:.2f} cores"
        f" = {t['cores_per_gbps']:.3f} cores per Gbit/s  [{ok(r['meets']['throughput'] and r['meets']['cpu'])}:"
        f" >= 2 Gbit/s at <= 0.5 core/Gbit/s]",
        f"  RTT error at 250 ms one way (measured - configured):",
    ]
    for k in ("idle", "bulk"):
        x = e[k]
        extra = f", during {x['bulk_mbps']:.0f} Mbit/s bulk" if "bulk_mbps" in x else ""
        lines.append(f"    {k:5s} median {x['median_ms']:+.3f} ms, p99 {x['p99_ms']:+.3f} ms, max {x['max_ms']:+.3f} ms"
                     f" ({x['received']}/{x['probes']} probes{extra})")
    ref = e["reference_no_emulator"]
    lines.append(f"    reference: same probe over one LAN hop without the emulator: median {ref['median_ms']:.3f} ms,"
                 f" p99 {ref['p99_ms']:.3f} ms")
    lines.append(f"    [{ok(r['meets']['rtt_idle'])}: idle median <= 0.1 ms, p99 <= 1 ms]")
    for g in r["goodput"]:
        lines.append(f"  goodput at {g['rate_mbps']:g} Mbit/s ({g['cc']}, 20 ms RTT, after {g['skipped_s']:g} s):"
                     f" {g['goodput_mbps']:.3f} of ideal {g['ideal_mbps']:.3f} Mbit/s = {100 * g['fraction']:.2f} %")
    lines.append(f"    [{ok(r['meets']['goodput'])}: >= 99 %]")
    return "\n".join(lines)


def run_link_bench(*, json_out: bool = False, quick: bool = False) -> int:
    r = run(quick=quick)
    print(json.dumps(r, indent=1) if json_out else format_report(r))
    return 0


# -- satbench bench server ------------------------------------------------------

SERVER_TARGETS = {"http/1.1": 500.0, "https/1.1": 500.0, "h2": 500.0, "h3": 200.0}


def server_bench(count: int = 50) -> dict[str, Any]:
    """Throughput of satbench-server per protocol for a 2 MB object, fetched
    ``count`` times over one connection through an unlimited link."""
    import subprocess
    import tempfile
    from pathlib import Path

    from . import ca, pages
    from .load import LoadOptions
    from .serve import Server, ServerOptions

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="satbench-bench-") as tmp:
        root = Path(tmp) / "pages"
        pages.generate(root, ["single-2m"])
        cert = str(ca.ensure().cert)
        url_path = "/single-2m/img1.jpg"
        with Testbed(TestbedSpec(link=_link([]), seed=1)) as tb:
            with Server(root, Path(tmp) / "logs", ServerOptions(cc="cubic", tcp_info=False, qlog=False),
                        host=tb.server) as srv:
                for proto in ("http/1.1", "https/1.1", "h2", "h3"):
                    cpu0 = measure.cpu_seconds(srv.proc.pid)
                    t0 = time.monotonic()
                    if proto == "h3":
                        argv = LoadOptions(protocol="h3", mode="single", repeat=count, timeout_s=600).argv(
                            f"https://server.test{url_path}")
                        p = tb.client.run(argv, capture_output=True, text=True, timeout=660)
                        ok = p.returncode == 0 and json.loads(p.stdout)["valid_n"] == 1
                        total = json.loads(p.stdout)["clients"][0]["bytes"] if ok else 0
                    else:
                        scheme = "http" if proto == "http/1.1" else "https"
                        cfg = Path(tmp) / "curl.cfg"
                        cfg.write_text("".join(f'url = "{scheme}://server.test{url_path}"\noutput = "/dev/null"\n'
                                               for _ in range(count)))
                        argv = ["curl", "-sS", "-K", str(cfg), "--cacert", cert, "-w", "%{size_download}\n"]
                        argv.append("--http2" if proto == "h2" else "--http1.1")
                        p = tb.client.run(argv, capture_output=True, text=True, timeout=600)
                        ok = p.returncode == 0
                        total = sum(int(x) for x in p.stdout.split()) if ok else 0
                    secs = time.monotonic() - t0
                    cpu = measure.cpu_seconds(srv.proc.pid) - cpu0
                    mbps = total * 8 / secs / 1e6
                    results[proto] = {"mbps": mbps, "bytes": total, "seconds": secs, "server_cpu_s": cpu,
                                      "server_cores": cpu / secs, "target_mbps": SERVER_TARGETS[proto],
                                      "meets": ok and mbps >= SERVER_TARGETS[proto],
                                      "error": None if ok else (p.stderr.strip()[-300:] or f"exit {p.returncode}")}
    return {"object_bytes": 2_000_000, "fetches": count, "link": "wire (no delay, no rate limit)",
            "machine": {"cores": os.cpu_count(), "kernel": platform.release()}, "protocols": results}


def format_server_report(r: dict[str, Any]) -> str:
    lines = [f"satbench bench server  ({r['machine']['cores']} cores): a 2 MB object fetched {r['fetches']} times "
             f"on one connection, through the {r['link']} link"]
    for proto, x in r["protocols"].items():
        mark = "meets target" if x["meets"] else "MISSES target"
        err = f"  error: {x['error']}" if x["error"] else ""
        lines.append(f"  {proto:10s} {x['mbps']:8.0f} Mbit/s, server {x['server_cores']:.2f} cores  "
                     f"[{mark}: >= {x['target_mbps']:g} Mbit/s]{err}")
    return "\n".join(lines)


def run_server_bench(*, json_out: bool = False, quick: bool = False) -> int:
    r = server_bench(count=10 if quick else 50)
    print(json.dumps(r, indent=1) if json_out else format_server_report(r))
    return 0


# -- satbench bench loader ------------------------------------------------------

LOADER_TARGET_CORE_FRACTION = 0.10


def loader_bench(*, page: str = "uniform-2m", clients: int = 10, rate_mbps: float = 10.0) -> dict[str, Any]:
    """CPU of the synthetic loader: ``clients`` concurrent page loads sharing
    a ``rate_mbps`` link of 100 ms RTT, per protocol."""
    import tempfile
    from pathlib import Path

    from . import pages
    from .load import LoadOptions
    from .serve import Server, ServerOptions

    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="satbench-bench-") as tmp:
        root = Path(tmp) / "pages"
        pages.generate(root, [page])
        link = _link(["delay_ms=50", f"rate_mbps={rate_mbps:g}"])
        with Testbed(TestbedSpec(link=link, seed=1)) as tb:
            with Server(root, Path(tmp) / "logs", ServerOptions(cc="cubic", tcp_info=False, qlog=False),
                        host=tb.server):
                for proto in ("h1", "h2", "h3"):
                    argv = LoadOptions(protocol=proto, clients=clients, timeout_s=600).argv(
                        f"https://server.test/{page}/")
                    p = tb.client.run(argv, capture_output=True, text=True, timeout=660)
                    if p.returncode != 0:
                        results[proto] = {"error": p.stderr.strip()[-300:] or f"exit {p.returncode}", "meets": False}
                        continue
                    d = json.loads(p.stdout)
                    frac = d["cpu_s"] / d["wall_s"]
                    total = sum(c["bytes"] for c in d["clients"])
                    results[proto] = {"valid_clients": d["valid_n"], "cpu_s": d["cpu_s"], "wall_s": d["wall_s"],
                                      "core_fraction": frac, "mbps": total * 8 / d["wall_s"] / 1e6,
                                      "plt_median_s": statistics.median(c["plt_s"] for c in d["clients"]
                                                                        if c["plt_s"] is not None),
                                      "meets": d["valid_n"] == clients and frac <= LOADER_TARGET_CORE_FRACTION,
                                      "error": None}
    return {"page": page, "clients": clients, "link": f"{rate_mbps:g} Mbit/s each way, 100 ms RTT",
            "target_core_fraction": LOADER_TARGET_CORE_FRACTION,
            "machine": {"cores": os.cpu_count(), "kernel": platform.release()}, "protocols": results}


def format_loader_report(r: dict[str, Any]) -> str:
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


def run_loader_bench(*, json_out: bool = False, quick: bool = False) -> int:
    r = loader_bench(page="uniform-500k" if quick else "uniform-2m")
    print(json.dumps(r, indent=1) if json_out else format_loader_report(r))
    return 0


# -- satbench bench harness -------------------------------------------------------

HARNESS_TARGETS_S = {"chromium": 1.5, "loader": 0.3}


def _trial_overheads(client: str, n: int, tmp: Any) -> dict[str, Any]:
    from pathlib import Path

    from . import experiment, runner

    text = (f'[experiment]\nname = "harness-{client}"\nrepetitions = {n + 1}\nseed = 1\ntimeout_s = 60\n'
            f'[factors]\nlink = "wire"\nprotocol = "h2"\npage = "uniform-100k"\nclient = "{client}"\n')
    exp = experiment.parse(tomllib.loads(text), text, "<bench>")
    root = Path(tmp)
    sizes = runner.prepare_pages(root / "pages", exp.trials)
    env = runner.static_environment(client == "chromium")
    browser = None
    if client == "chromium":
        from .browse import Browser

        browser = Browser()
    recs = []
    try:
        for i, t in enumerate(exp.trials):
            r = runner.run_trial(exp, t, i, root / "pages", sizes, root / "art" / client, env, browser)
            if i > 0:  # the first is a warm-up
                recs.append(r)
    finally:
        if browser is not None:
            browser.close()
    bad = [r.reason for r in recs if r.status != "valid"]
    ov = sorted(r.overhead_s for r in recs if r.overhead_s is not None)
    pick = lambda k: statistics.median(r.metrics[k] for r in recs if r.metrics.get(k) is not None)  # noqa: E731
    target = HARNESS_TARGETS_S.get(client)
    res: dict[str, Any] = {"trials": len(recs), "invalid": bad, "target_s": target}
    if ov:
        res.update({"overhead_median_s": statistics.median(ov), "overhead_max_s": ov[-1],
                    "trial_median_s": statistics.median(r.duration_s for r in recs),
                    "testbed_up_s": pick("testbed_up_s"), "server_up_s": pick("server_up_s"),
                    "client_s": pick("client_s"),
                    "meets": None if target is None else statistics.median(ov) <= target})
    return res


def _plan_check(sample: int, tmp: Any) -> dict[str, Any]:
    """Run a seeded sample of the GEO study's trials and compare the plan's estimate with the time they took."""
    import random
    from pathlib import Path

    from . import experiment, runner
    from .browse import Browser
    from .prereq import REPO

    exp = experiment.load(REPO / "experiments" / "geo-study-a.toml")
    trials = random.Random(7).sample(exp.trials, sample)
    root = Path(tmp)
    sizes = runner.prepare_pages(root / "pages", trials)
    env = runner.static_environment(True)
    est = sum(experiment.estimate_trial_s(t.factors) for t in trials)
    real = 0.0
    rows = []
    with Browser() as browser:
        for i, t in enumerate(trials):
            r = runner.run_trial(exp, t, i, root / "pages", sizes, root / "art" / "plan", env, browser)
            real += r.duration_s
            rows.append({"trial": t.label(exp.varied), "estimate_s": experiment.estimate_trial_s(t.factors),
                         "real_s": r.duration_s, "status": r.status})
    return {"sample": sample, "estimate_s": est, "real_s": real, "error_pct": (est - real) / real * 100,
            "target_pct": 20.0, "meets": abs(est - real) <= 0.2 * real, "trials": rows}


def harness_bench(n: int = 5, plan_sample: int = 6) -> dict[str, Any]:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="satbench-bench-") as tmp:
        out = {"machine": {"cores": os.cpu_count(), "kernel": platform.release()},
               "clients": {c: _trial_overheads(c, n, tmp) for c in ("loader", "chromium", "firefox")}}
        if plan_sample:
            out["plan"] = _plan_check(plan_sample, tmp)
    return out


def format_harness_report(r: dict[str, Any]) -> str:
    lines = [f"satbench bench harness  ({r['machine']['cores']} cores): overhead per trial = trial time - page load "
             "(testbed build and teardown, server start, client start)"]
    for c, x in r["clients"].items():
        if "overhead_median_s" not in x:
            lines.append(f"  {c}: no valid trial ({x['invalid'][:1]})")
            continue
        mark = ("no target" if x["meets"] is None else
                f"{'meets' if x['meets'] else 'MISSES'} target: <= {x['target_s']} s")
        lines.append(f"  {c:9s} median {x['overhead_median_s']:.3f} s, max {x['overhead_max_s']:.3f} s over "
                     f"{x['trials']} trials (testbed up {x['testbed_up_s']:.3f} s, server up "
                     f"{x['server_up_s'] - x['testbed_up_s']:.3f} s, client {x['client_s']:.3f} s)  [{mark}]")
    if "plan" in r:
        p = r["plan"]
        mark = "meets target" if p["meets"] else "MISSES target"
        lines.append(f"  plan: {p['sample']} GEO-study trials estimated {p['estimate_s']:.1f} s, took "
                     f"{p['real_s']:.1f} s ({p['error_pct']:+.1f} %)  [{mark}: within {p['target_pct']:g} %]")
        for t in p["trials"]:
            lines.append(f"      {t['trial']}: estimated {t['estimate_s']:.1f} s, "
                         f"took {t['real_s']:.1f} s ({t['status']})")
    return "\n".join(lines)


def run_harness_bench(*, json_out: bool = False, quick: bool = False) -> int:
    r = harness_bench(n=3 if quick else 5, plan_sample=3 if quick else 8)
    print(json.dumps(r, indent=1) if json_out else format_harness_report(r))
    return 0
