"""``satbench bench harness``: the harness's own cost per trial (testbed
build and teardown, server start, client start) with each client, and the
plan's estimate against a seeded sample of GEO-study trials."""

from __future__ import annotations

import dataclasses
import os
import platform
import random
import statistics
import tempfile
from pathlib import Path
from typing import Any

from .. import prereq
from ..experiment import spec
from ..experiment.plan import trial_estimate
from ..experiment.runner import Runner
from ..model import TrialStatus

HARNESS_TARGETS_S = {"chromium": 1.5, "loader": 0.3}


def _trial_overheads(client: str, n: int, tmp: Path) -> dict[str, Any]:
    exp = spec.build(f"harness-{client}", {"link": "wire", "protocol": "h2", "page": "uniform-100k",
                                           "client": client}, repetitions=n + 1, seed=1, timeout_s=60)
    runner = Runner(exp, 1, tmp / "pages", tmp / "art" / client)
    recs = []
    try:
        for i, t in enumerate(exp.trials):
            r = runner.run_trial(t, i)
            if i > 0:  # the first is a warm-up
                recs.append(r)
    finally:
        runner.close()
    bad = [r.reason for r in recs if r.status is not TrialStatus.VALID]
    ov = sorted(r.overhead_s for r in recs if r.overhead_s is not None)

    def pick(k: str) -> float:
        return statistics.median(v for r in recs if (v := r.metrics.get(k)) is not None)

    target = HARNESS_TARGETS_S.get(client)
    res: dict[str, Any] = {"trials": len(recs), "invalid": bad, "target_s": target}
    if ov:
        res.update({"overhead_median_s": statistics.median(ov), "overhead_max_s": ov[-1],
                    "trial_median_s": statistics.median(r.duration_s for r in recs),
                    "testbed_up_s": pick("testbed_up_s"), "server_up_s": pick("server_up_s"),
                    "client_s": pick("client_s"),
                    "meets": None if target is None else statistics.median(ov) <= target})
    return res


def _plan_check(sample: int, tmp: Path) -> dict[str, Any]:
    """Run a seeded sample of the GEO study's trials and compare the plan's estimate with the time they took."""
    exp = spec.load(prereq.REPO / "experiments" / "geo-study-a.toml")
    trials = random.Random(7).sample(exp.trials, sample)
    runner = Runner(dataclasses.replace(exp, trials=trials), 1, tmp / "pages", tmp / "art" / "plan")
    est = sum(trial_estimate(t) for t in trials)
    real = 0.0
    rows = []
    try:
        for i, t in enumerate(trials):
            r = runner.run_trial(t, i)
            real += r.duration_s
            rows.append({"trial": t.label(exp.varied), "estimate_s": trial_estimate(t), "real_s": r.duration_s,
                         "status": r.status.value})
    finally:
        runner.close()
    return {"sample": sample, "estimate_s": est, "real_s": real, "error_pct": (est - real) / real * 100,
            "target_pct": 20.0, "meets": abs(est - real) <= 0.2 * real, "trials": rows}


def harness_bench(n: int = 5, plan_sample: int = 6) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="satbench-bench-") as tmp:
        root = Path(tmp)
        out: dict[str, Any] = {"machine": {"cores": os.cpu_count(), "kernel": platform.release()},
                               "clients": {c: _trial_overheads(c, n, root) for c in ("loader", "chromium", "firefox")}}
        if plan_sample:
            out["plan"] = _plan_check(plan_sample, root)
    return out


def run(quick: bool = False) -> dict[str, Any]:
    return harness_bench(n=3 if quick else 5, plan_sample=3 if quick else 8)


def format_report(r: dict[str, Any]) -> str:
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


