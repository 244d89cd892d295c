"""``satbench bench shaped``: browser-shaped loader clients against Chromium
(issue 25). On each link, N Chromium loads of the page; the schedule learned
from the one with the median PLT (:mod:`satbench.endpoints.schedule`); then
N loads by one loader client replaying it and N by one loader client that
discovers the page from its HTML and CSS. Printed per link: the median PLT
of each, the difference of the shaped loader's from Chromium's with its 95 %
bootstrap interval (target: within 10 %), and the CPU each client spent per
load: the loader's own (getrusage), Chromium's summed over its processes and
the Playwright driver that starts and reaps them (/proc: their own CPU and
that of the children they reaped, around each trial; the driver's own work
is counted with the browser's)."""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from ..endpoints import schedule as schedules
from ..experiment import spec
from ..experiment.runner import Runner
from ..model import TrialStatus
from ..results.stats import median_diff_ci

TARGET_PCT = 10.0


def _chromium_cpu_s() -> float:
    """CPU seconds of every Chromium process and Playwright driver (node) now, with the children each
    has reaped (a load's Chromium has exited, and been reaped by the driver, when its trial returns)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            raw = (d / "stat").read_text()
        except OSError:
            continue
        comm, rest = raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()
        if comm.startswith(("chrom", "headless_shell")) or comm == "node":
            total += sum(int(x) for x in rest[11:15])  # utime, stime, cutime, cstime
    return total / tick


def _run(exp: spec.Experiment, tmp: Path, cpu_of_chromium: bool) -> list[dict[str, Any]]:
    runner = Runner(exp, 1, tmp / "pages", tmp / "art" / exp.name)
    out = []
    try:
        for i, t in enumerate(exp.trials):
            before = _chromium_cpu_s() if cpu_of_chromium else 0.0
            r = runner.run_trial(t, i)
            cpu = (_chromium_cpu_s() - before) if cpu_of_chromium else r.metrics.get("loader_cpu_s")
            out.append({"status": r.status.value, "reason": r.reason, "plt_ms": r.metrics.get("plt_ms"),
                        "cpu_s": cpu, "objects": r.objects})
    finally:
        runner.close()
    return out


def _cell(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rows if r["status"] == TrialStatus.VALID.value and r["plt_ms"] is not None]
    return {"trials": len(rows), "valid": len(ok), "plt": [r["plt_ms"] for r in ok],
            "plt_median_ms": statistics.median(r["plt_ms"] for r in ok) if ok else None,
            "cpu_median_s": statistics.median(r["cpu_s"] for r in ok if r["cpu_s"] is not None) if ok else None,
            "invalid": [r["reason"] for r in rows if r not in ok][:3]}


def run(quick: bool = False, page: str = "shop", links: tuple[str, ...] = ("fair-lte", "geo"),
        protocol: str = "h2") -> dict[str, Any]:
    n = 3 if quick else 10
    out: dict[str, Any] = {"page": page, "protocol": protocol, "repetitions": n, "target_pct": TARGET_PCT,
                           "links": {}}
    with tempfile.TemporaryDirectory(prefix="satbench-bench-") as tmpd:
        tmp = Path(tmpd)
        for link in links:
            base = {"link": link, "protocol": protocol, "page": page}
            chrome = _run(spec.build(f"shaped-chromium-{link}", {**base, "client": "chromium"}, repetitions=n,
                                     seed=25, timeout_s=120), tmp, cpu_of_chromium=True)
            c = _cell(chrome)
            res: dict[str, Any] = {"chromium": c}
            ok = sorted((r for r in chrome if r["status"] == TrialStatus.VALID.value and r["plt_ms"] is not None),
                        key=lambda r: r["plt_ms"])
            if not ok:
                out["links"][link] = res
                continue
            median = ok[(len(ok) - 1) // 2]
            seen = schedules.usable([(o.url, o.status, o.start_ms, o.end_ms) for o in median["objects"]],
                                    median["plt_ms"])
            page_url = schedules.page_url({**base, "shards": 1}, seen)
            learned = schedules.learn(str(page_url), seen,
                                      f"the median of {len(ok)} Chromium loads of {page} on {link}")
            file = tmp / f"{link}.schedule.json"
            learned.write(file)
            res["schedule"] = schedules.summary(learned)
            for mode, extra in (("shaped", {"schedule": str(file)}), ("discover", {})):
                rows = _run(spec.build(f"shaped-{mode}-{link}", {**base, "client": "loader", **extra},
                                       repetitions=n, seed=25, timeout_s=120), tmp, cpu_of_chromium=False)
                res[mode] = _cell(rows)
                res[mode]["objects"] = statistics.median(len(r["objects"]) for r in rows) if rows else None
                if res[mode]["plt"] and c["plt"]:
                    d, lo, hi = median_diff_ci(c["plt"], res[mode]["plt"])
                    res[mode]["diff_pct"] = 100 * d / c["plt_median_ms"]
                    res[mode]["ci_pct"] = [100 * lo / c["plt_median_ms"], 100 * hi / c["plt_median_ms"]]
            res["chromium"]["objects"] = len(seen)
            out["links"][link] = res
    for res in out["links"].values():
        for cell in res.values():
            if isinstance(cell, dict):
                cell.pop("plt", None)
    return out


def format_report(r: dict[str, Any]) -> str:
    lines = [f"satbench bench shaped: {r['page']} over {r['protocol']}, {r['repetitions']} loads per client and "
             "link; PLT median, difference from Chromium's [95 % bootstrap interval], CPU per load"]
    for link, res in r["links"].items():
        c = res["chromium"]
        if c["plt_median_ms"] is None:
            lines.append(f"  {link}: no valid Chromium load ({c['invalid']})")
            continue
        lines.append(f"  {link}: schedule: {res.get('schedule')}")
        lines.append(f"    chromium            PLT {c['plt_median_ms']:8,.0f} ms  CPU {c['cpu_median_s']:.3f} s  "
                     f"({c['valid']}/{c['trials']} valid, {c['objects']} requests)")
        for mode in ("shaped", "discover"):
            x = res.get(mode)
            if not x or x["plt_median_ms"] is None:
                lines.append(f"    loader ({mode}): no valid load ({(x or {}).get('invalid')})")
                continue
            mark = ""
            if mode == "shaped":
                mark = f"  [{'meets' if abs(x['diff_pct']) <= r['target_pct'] else 'MISSES'} target: within " \
                       f"{r['target_pct']:g} %]"
            cpu = x["cpu_median_s"]
            ratio = f" ({c['cpu_median_s'] / cpu:.0f}x less)" if cpu and c["cpu_median_s"] else ""
            lines.append(f"    loader ({mode + ')':9s} PLT {x['plt_median_ms']:8,.0f} ms  {x['diff_pct']:+.1f} % "
                         f"[{x['ci_pct'][0]:+.1f}, {x['ci_pct'][1]:+.1f}]  CPU {cpu:.3f} s{ratio}  "
                         f"({x['valid']}/{x['trials']} valid, {x['objects']:.0f} requests){mark}")
    return "\n".join(lines)
