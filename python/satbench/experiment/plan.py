"""A study's plan: its trials in run order, what is already done, and how
long the rest will take (:mod:`.estimate`). Nothing here runs a trial."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from . import population
from .design import RunOrder, Trial
from .estimate import trial_s
from .spec import Experiment


def trial_estimate(t: Trial) -> float:
    return trial_s(t.factors, t.link)


#: Browsers per core a population may have before its trials risk being CPU-starved (measured: two
#: Chromium loads of a small page keep a core busy while they run), and loader clients per core.
BROWSERS_PER_CORE = 2
LOADERS_PER_CORE = 200


def heavy_populations(trials: list[Trial], cores: int | None = None) -> list[str]:
    """Warnings for populations likely too heavy for this machine's cores (their trials would be
    stored invalid as CPU-starved, and the time spent on them lost)."""
    cores = cores or os.cpu_count() or 1
    browsers = loaders = 0
    for t in trials:
        groups = population.groups(t.factors) or []
        browsers = max(browsers, sum(g.n for g in groups if g.kind.browser))
        loaders = max(loaders, sum(g.n for g in groups if not g.kind.browser))
    out = []
    if browsers > BROWSERS_PER_CORE * cores:
        out.append(f"populations of up to {browsers} browsers on {cores} cores (more than {BROWSERS_PER_CORE} per "
                   "core): their trials may be CPU-starved, and are then stored invalid; consider the loader, "
                   "or a machine with more cores")
    if loaders > LOADERS_PER_CORE * cores:
        out.append(f"populations of up to {loaders} loader clients on {cores} cores: their trials may be "
                   "CPU-starved")
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
