"""``satbench bench parallel``: what ``satbench run --parallel N`` gains in
trials per hour and costs in fidelity, at N = 1, 2, ... one testbed beyond
one per core (on 2 cores: 1, 2 and 3; the third shows why the planner
refuses it). For each N:

- **trials and their PLT**: the harness's reference trial (the loader, a
  500 KB page over a 10 ms wire) ``repetitions`` x N times on N testbeds at
  once, each pinned as ``--parallel`` pins it (beyond one testbed per core,
  testbeds share cores in turn, which ``satbench run`` never does): trials
  per hour (from the first trial's start to the last one's end), the PLT's
  median and 10th and 90th percentiles, the median's difference from N = 1
  with its 95 % bootstrap interval, and the trials stored invalid with
  their reasons;
- **the emulator's RTT error**: a probe every 10 ms through a 250 ms one-way
  wire on one testbed while each of the N - 1 others carries a CUBIC bulk
  download (100 Mbit/s, 10 ms one way);
- **goodput**: the first testbed's own bulk download through 100 Mbit/s
  against the ideal, with the others' downloads still running;
- **the planner's word**: whether ``satbench run --parallel N`` accepts the
  reference trials (a loader study) and a browser study at N here.
"""

from __future__ import annotations

import collections
import os
import platform
import sqlite3
import statistics
import tempfile
import threading
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..experiment import plan, spec
from ..experiment.distributed import dask_executor, split_cores
from ..experiment.runner import run as run_experiment
from ..results.stats import median_diff_ci
from ..testbed import measure
from ..testbed.testbed import Testbed, TestbedSpec
from . import link as link_bench
from .link import wire

#: The neighbours' traffic: what a study's trial might carry, at the studies' highest rate.
NEIGHBOUR = ["rate_mbps=100", "delay_ms=10"]


#: The reference trial of ``satbench bench parallel``: the loader over a fast wire, so the CPU shows.
REFERENCE = {"link": "wire", "link.delay_ms": 10, "protocol": "h2", "page": "uniform-500k", "client": "loader"}


def reference_study(name: str, repetitions: int, **overrides: str | int) -> spec.Experiment:
    """The reference trial (:data:`REFERENCE`, with ``overrides``) ``repetitions`` times."""
    factors = "\n".join(f'"{k}" = {v!r}'.replace("'", '"') for k, v in {**REFERENCE, **overrides}.items())
    text = (f'[experiment]\nname = "{name}"\nseed = 1\ntimeout_s = 60\nrepetitions = {repetitions}\n\n'
            f"[factors]\n{factors}\n")
    return spec.parse(tomllib.loads(text), text, f"<bench {name}>")


def cores_for(n: int, avail: list[int]) -> list[list[int]]:
    """The cores of ``n`` testbeds: ``--parallel``'s split while there is a core each; beyond
    that one core each, shared in turn (what the planner refuses, measured here to show why)."""
    if n <= len(avail):
        return split_cores(n, avail)
    return [[avail[i % len(avail)]] for i in range(n)]


def counts(cores: int) -> list[int]:
    """The N measured: 1 up to one beyond one testbed per core, at most 4."""
    return list(range(1, min(cores + 1, 4) + 1))


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * (len(s) - 1))))]


def _trials(db: Path) -> dict[str, Any]:
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT t.status, t.reason, t.started, t.duration_s, "
                           "(SELECT value FROM metrics m WHERE m.trial_id = t.id AND m.name = 'plt_ms') "
                           "FROM trials t").fetchall()
    finally:
        con.close()
    plts = [float(p) for s, _, _, _, p in rows if s == "valid" and p is not None]
    span = (max(st + d for _, _, st, d, _ in rows) - min(st for _, _, st, _, _ in rows)) if rows else 0.0
    reasons = collections.Counter((r or "").split(":")[0][:60] for s, r, _, _, _ in rows if s != "valid")
    return {"trials": len(rows), "valid": len(plts), "plts_ms": plts, "span_s": span,
            "trials_per_hour": len(rows) / span * 3600 if span > 0 else None,
            "not_valid": dict(reasons)}


def plts_at(n: int, repetitions: int, tmp: Path, avail: list[int]) -> dict[str, Any]:
    """The reference trial ``repetitions`` x ``n`` times on ``n`` testbeds at once."""
    cores = cores_for(n, avail)
    db = tmp / f"n{n}.sqlite"
    run_experiment(reference_study(f"parallel-{n}", repetitions * n), db, art_root=tmp / f"art{n}",
                   pages_root=tmp / "pages", executor=dask_executor(parallel=n, cores=cores))
    out = _trials(db)
    plts = out["plts_ms"]
    out.update(cores=cores, plt_median_ms=statistics.median(plts) if plts else None,
               plt_p10_ms=_quantile(plts, 0.1) if plts else None, plt_p90_ms=_quantile(plts, 0.9) if plts else None)
    return out


@contextmanager
def _pinned(cores: list[int]) -> Iterator[None]:
    """This thread (and what it starts) on ``cores``."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def _neighbour(cores: list[int], seed: int, up: threading.Event, stop: threading.Event,
               out: dict[str, Any]) -> None:
    try:
        with _pinned(cores), Testbed(TestbedSpec(link=wire(NEIGHBOUR), seed=seed, tcp_cc="cubic")) as tb:
            up.set()
            got: list[float] = []
            while not stop.is_set():
                b = measure.bulk(tb.client, tb.server, seconds=4.0, cc="cubic")
                got.append(b.bytes_received * 8 / b.seconds / 1e6)
            out["mbps"] = statistics.median(got) if got else None
    except Exception as e:  # noqa: BLE001 - reported in the figures, never hidden
        out["error"] = str(e)[:200]
        up.set()


def fidelity_at(n: int, avail: list[int], probes: int, goodput_s: float) -> dict[str, Any]:
    """RTT error and goodput on the first testbed while the ``n - 1`` others carry bulk downloads."""
    cores = cores_for(n, avail)
    stop = threading.Event()
    ups = [threading.Event() for _ in range(n - 1)]
    outs: list[dict[str, Any]] = [{} for _ in range(n - 1)]
    threads = [threading.Thread(target=_neighbour, args=(cores[i + 1], i + 2, ups[i], stop, outs[i]), daemon=True)
               for i in range(n - 1)]
    for t in threads:
        t.start()
    res: dict[str, Any] = {"testbeds": n}
    try:
        for e in ups:
            e.wait(120)
        time.sleep(2.0 if n > 1 else 0.0)  # the neighbours past slow start
        with _pinned(cores[0]):
            with Testbed(TestbedSpec(link=wire(["delay_ms=250"]), seed=1)) as tb:
                res["rtt_error"] = link_bench.probe_errors(measure.probe(tb.client, tb.server, count=probes,
                                                                         interval_ms=10), 500.0)
            g = link_bench.goodput(100.0, goodput_s, 3.0)
            res["goodput"] = {"mbps": g["goodput_mbps"], "fraction": g["fraction"]}
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    res["neighbours"] = outs
    return res


def planner_says(n: int, cores: int) -> dict[str, str]:
    """What ``satbench run --parallel n`` says of a loader study and of a browser study here."""
    out = {}
    for kind, client in (("loader", "loader"), ("browser", "chromium")):
        exp = reference_study("plan", 1, client=client)
        problems = plan.parallel_problems(exp.trials, n, cores) if n > 1 else []
        out[kind] = "; ".join(problems) if problems else "accepted"
    return out


def run(quick: bool = False) -> dict[str, Any]:
    avail = sorted(os.sched_getaffinity(0))
    reps, probes, goodput_s = (5, 200, 8.0) if quick else (10, 500, 12.0)
    res: dict[str, Any] = {"machine": {"cores": len(avail), "kernel": platform.release()}, "repetitions": reps,
                           "levels": []}
    with tempfile.TemporaryDirectory(prefix="satbench-bench-parallel-") as tmp:
        base: list[float] = []
        for n in counts(len(avail)):
            level: dict[str, Any] = {"testbeds": n, "planner": planner_says(n, len(avail))}
            (Path(tmp) / str(n)).mkdir()
            level["trials"] = plts_at(n, reps, Path(tmp) / str(n), avail)
            plts = level["trials"].pop("plts_ms")
            if n == 1:
                base = plts
            elif base and len(plts) >= 2:
                d, lo, hi = median_diff_ci(base, plts)
                level["trials"]["plt_difference_ms"] = [d, lo, hi]
            level["fidelity"] = fidelity_at(n, avail, probes, goodput_s)
            res["levels"].append(level)
    return res


def _f(x: float | None, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def format_report(r: dict[str, Any]) -> str:
    lines = [f"satbench bench parallel  ({r['machine']['cores']} cores, kernel {r['machine']['kernel']}): the "
             f"reference trial (loader, 500 KB, 10 ms wire) {r['repetitions']} times per testbed; RTT error "
             "through 250 ms one way and goodput at 100 Mbit/s on one testbed while the others carry bulk "
             "downloads"]
    for lv in r["levels"]:
        t, f = lv["trials"], lv["fidelity"]
        pins = "; ".join(",".join(map(str, c)) for c in t["cores"])
        lines.append(f"  N = {lv['testbeds']} (cores {pins}):")
        lines.append(f"      trials: {t['trials']} ({t['valid']} valid) in {t['span_s']:.0f} s = "
                     f"{_f(t['trials_per_hour'], '.0f')} per hour"
                     + ("; not valid: " + ", ".join(f"{k} x{v}" for k, v in t["not_valid"].items())
                        if t["not_valid"] else ""))
        line = (f"      PLT: median {_f(t['plt_median_ms'], '.1f')} ms (p10 {_f(t['plt_p10_ms'], '.1f')}, "
                f"p90 {_f(t['plt_p90_ms'], '.1f')})")
        if "plt_difference_ms" in t:
            d, lo, hi = t["plt_difference_ms"]
            line += f"; against N = 1: {d:+.1f} ms [{lo:+.1f}, {hi:+.1f}]"
        lines.append(line)
        e = f.get("rtt_error", {})
        g = f.get("goodput", {})
        lines.append(f"      RTT error: median {_f(e.get('median_ms'), '+.3f')} ms, p99 {_f(e.get('p99_ms'), '+.3f')} "
                     f"ms ({e.get('received', 0)} of {e.get('probes', 0)} probes); goodput "
                     f"{_f(g.get('mbps'), '.2f')} Mbit/s = {_f(100 * g['fraction'] if g else None, '.2f')} % of ideal")
        for i, nb in enumerate(f.get("neighbours", [])):
            lines.append(f"      neighbour {i + 2}: " + (f"error: {nb['error']}" if "error" in nb else
                                                          f"bulk {_f(nb.get('mbps'), '.1f')} Mbit/s"))
        lines.append(f"      planner: loader study {lv['planner']['loader']}; browser study "
                     f"{lv['planner']['browser']}")
    return "\n".join(lines)
