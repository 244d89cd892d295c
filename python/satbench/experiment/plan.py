"""A study's plan: its trials in run order, what is already done, and how
long the rest will take (:mod:`.estimate`). Nothing here runs a trial."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ..model import ClientKind
from .design import RunOrder, Trial
from .estimate import trial_s
from .spec import Experiment


def trial_estimate(t: Trial) -> float:
    return trial_s(t.spec, t.link)


#: Browsers of each kind a population may run per core of this machine and stay valid (not CPU-starved,
#: started within 50 ms of each other): measured by experiments/findings/browsers-per-core.toml on the
#: project's 2-core machine (docs/benchmarks.md, "Browsers at once"); and loader clients per core.
BROWSERS_PER_CORE = {"chromium": 2, "firefox": 2}
LOADERS_PER_CORE = 200
#: See CORES_PER_TESTBED.
BROWSER_TESTBED_CORES = 2


def heavy_populations(trials: list[Trial], cores: int | None = None) -> list[str]:
    """Warnings for populations too heavy for this machine's cores, each with the cores the study
    needs and why (their trials would be stored invalid as CPU-starved or skewed, and the time
    spent on them lost)."""
    cores = cores or os.cpu_count() or 1
    need: dict[str, int] = {}
    loaders = 0
    for t in trials:
        groups = list(t.spec.population or ())
        for kind in BROWSERS_PER_CORE:
            need[kind] = max(need.get(kind, 0), sum(g.n for g in groups if g.kind.value == kind))
        loaders = max(loaders, sum(g.n for g in groups if not g.kind.browser))
    out = []
    for kind, n in need.items():
        per = BROWSERS_PER_CORE[kind]
        if n > per * cores:
            out.append(f"populations of up to {n} {kind.capitalize()} clients need about {-(-n // per)} cores: "
                       f"this machine has {cores}, and runs at most {per} {kind.capitalize()} per core at once "
                       "without starving them (docs/benchmarks.md, \"Browsers at once\"); their trials would be "
                       "stored invalid. Run the loader's variant, a smaller population, or a machine with more cores")
    if loaders > LOADERS_PER_CORE * cores:
        out.append(f"populations of up to {loaders} loader clients need about {-(-loaders // LOADERS_PER_CORE)} "
                   f"cores (this machine has {cores}): their trials may be CPU-starved")
    return out


#: The cores one testbed needs of its own, by the heaviest client among its trials, for a trial run
#: beside others (``--parallel N``) to measure as it does alone: measured on the project's 2-core
#: machine with one testbed per core (docs/benchmarks.md, "Testbeds at once").
CORES_PER_TESTBED = {"browser": BROWSER_TESTBED_CORES, "loader": 1, "curl": 1}


def _heaviest_client(t: Trial) -> str:
    kinds = t.spec.kinds
    return "browser" if any(k.browser for k in kinds) else "curl" if kinds == [ClientKind.CURL] else "loader"


def parallel_problems(trials: list[Trial], testbeds: int, cores: int) -> list[str]:
    """Why ``testbeds`` at once on ``cores`` would not measure these trials as one testbed at a
    time does (empty: they may run so)."""
    each = cores // testbeds
    out = [f"{testbeds} testbeds at once leave each {each} core(s): {w}" for w in heavy_populations(trials, each)]
    for kind in sorted({_heaviest_client(t) for t in trials}):
        need = CORES_PER_TESTBED[kind]
        if each < need:
            most = max(1, cores // need)
            out.append(f"{testbeds} testbeds at once leave each {each} core(s), and a {kind} trial needs {need} of its "
                       f"own to measure as it does alone (docs/benchmarks.md, \"Testbeds at once\"): at most "
                       f"--parallel {most} on {cores} cores")
    return out


@dataclass(frozen=True)
class Plan:
    experiment: Experiment
    order: RunOrder
    done: frozenset[str]

    @property
    def todo(self) -> list[Trial]:
        return [t for t in self.order.trials if t.key not in self.done]

    def estimate_s(self) -> float:
        """Seconds to run what is left, with the warm-up trials."""
        todo = self.todo
        warm = sum(trial_estimate(t) for t in todo[:self.experiment.warmup])
        return warm + sum(trial_estimate(t) for t in todo)

    def to_json(self) -> dict[str, Any]:
        e = self.experiment
        return {**e.spec_json(self.order.seed), "estimate_s": self.estimate_s(),
                "warnings": heavy_populations(self.order.trials),
                "links": {h: s.to_json() for h, s in e.links.items()},
                "trials": [{"key": t.key, "rep": t.rep, "factors": t.factors, "scenarios": t.scenarios,
                            "links": {r: s.hash for r, s in t.links.items()}, "done": t.key in self.done,
                            "estimate_s": trial_estimate(t)} for t in self.order.trials]}

    def format(self, limit: int | None = None) -> str:
        e = self.experiment
        trials = self.order.trials
        lines = [f"experiment {e.name}: {len(trials)} trials ({e.repetitions} repetitions), "
                 f"order {e.order} (seed {self.order.seed}), {e.warmup} warm-up, timeout {e.timeout_s:g} s",
                 f"  varied: {', '.join(e.varied) or 'nothing'}",
                 f"  fixed: {' '.join(f'{k}={v}' for k, v in trials[0].factors.items() if k not in e.varied)}",
                 "  links: " + "; ".join(f"{s.label} [{h}] base RTT {s.base_rtt_ms:g} ms"
                                          for h, s in e.links.items()),
                 f"  to run: {len(self.todo)} trials, estimated {format_duration(self.estimate_s())}"]
        lines += [f"  WARNING: {w}" for w in heavy_populations(trials)]
        if e.parallel and e.parallel > 1:
            lines += [f"  REFUSED as written (parallel = {e.parallel}): {w}"
                      for w in parallel_problems(trials, e.parallel, len(os.sched_getaffinity(0)))]
        if e.design is not None:
            lines[2:2] = ["  " + d for d in e.design.describe()] + (
                [f"  blocks: by {e.block}, each in its own random order"] if e.block else [])
        for i, t in enumerate(trials[:limit] if limit else trials, 1):
            mark = "done" if t.key in self.done else f"~{trial_estimate(t):.1f} s"
            lines.append(f"  {i:4d}. [{t.key}] rep {t.rep}  {t.label(e.varied)}  ({mark})")
        if limit and len(trials) > limit:
            lines.append(f"  ... {len(trials) - limit} more")
        return "\n".join(lines)


def format_duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
