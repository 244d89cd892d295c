"""Sequential repetitions (``satbench validate --sequential``): repetitions
are added only to the cells an undecided check reads, until the check is
decided or its set's own repetitions are reached (the cap).

The design is a group sequential one with Pocock's constant boundary: the
sets are judged after 3, 5, 10, 20, 30 and 50 repetitions of every cell
still needed, and at the cap (each set's own count), at most 7 looks. Every
look's intervals are at level 1 - α and Holm's correction at α, where α is
Pocock's nominal level for that many looks (0.0221 for 3): the chance that
any look finds a direction that is not there stays near 5 %, as
``satbench validate --calibrate`` measures (its sequential rows). A check
decided at a look keeps that verdict; more trials for other checks do not
reopen it. "Inconclusive" then means "still undecided at the cap".

With ``--judge-only`` nothing runs: the stored trials are judged look by
look (each look sees the repetitions up to its own), which shows what a
sequential run would have decided, and with how many trials.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .claims import Claim, StudySets
from .judge import Result

if TYPE_CHECKING:
    from ..experiment.spec import Experiment
    from . import Validation

#: Pocock's nominal two-sided level per look for an overall 0.05, by the number of equally spaced
#: looks (Pocock 1977; Jennison and Turnbull 2000, table 2.1).
POCOCK = {1: 0.05, 2: 0.0294, 3: 0.0221, 4: 0.0182, 5: 0.0158, 6: 0.0142, 7: 0.0130}
#: The repetitions per cell at which the sets are judged, below the cap.
STEPS = (3, 5, 10, 20, 30, 50)


def looks(cap: int) -> list[int]:
    """The repetitions per cell at each look, up to ``cap`` (the last look)."""
    return [n for n in STEPS if n < cap] + [cap]


@dataclass(frozen=True)
class Look:
    #: Repetitions per cell at this look (at most each set's own), and the nominal level spent.
    n: int
    alpha: float
    #: Trials the look judged, and the checks it decided (the rest go on).
    trials: int
    decided: int
    undecided: int
    #: The trials the study's looks have asked for so far, of its sets' planned ones.
    asked: int = 0
    planned: int = 0


RunSet = Callable[[Path, "Experiment", Path], Any]


def run(studies: list[StudySets], quick: bool, db: Path, run_one: RunSet, claims: list[Claim]
        ) -> tuple[Validation, list[tuple[str, Look]]]:
    """Each study's sets (quick or full) run look by look into ``db`` (``run_one(file, experiment,
    db)`` runs or resumes the trials given), each look judged at the level its study's number of
    looks allows; the physical checks judged at the end on every trial run. The final verdicts, and
    what each look of each study did."""
    from . import PHYSICAL, Validation, judge, load_set, sets_of  # noqa: PLC0415 - the package's

    decided: dict[tuple[str, str], Result] = {}
    history: list[tuple[str, Look]] = []
    every: list[tuple[str, str, frozenset[str]]] = []
    judged: dict[str, int] = {}
    for study in studies:
        mine = [c for c in claims if c.study == study.study]
        # Each set by the name the study gives it (experiments/FILE), as the judge finds it.
        named = [f"experiments/{x}" for x in (study.quick if quick else study.full)]
        sets = [(f, load_set(f)) for f in sets_of([study], quick)]
        if not mine or not sets:
            continue
        ns = looks(max((t.rep for _, e in sets for t in e.trials), default=1))
        alpha = POCOCK.get(len(ns), 0.05 / len(ns))
        needed: frozenset[tuple[str, str]] | None = None  # None: every cell
        ran: list[tuple[str, str, frozenset[str]]] = []
        asked: set[tuple[str, str, int]] = set()
        planned = sum(len(e.trials) for _, e in sets)
        # A trial's key names its repetition too: a cell is the set and the trial's factors.
        cell = {t.key: (e.name, json.dumps(t.factors, sort_keys=True, default=str)) for _, e in sets for t in e.trials}
        for i, n in enumerate(ns, 1):
            ran = []
            for (f, exp), name in zip(sets, named):
                part = exp.first_repetitions(n)
                todo = part if needed is None else dataclasses.replace(
                    part, trials=[t for t in part.trials if cell[t.key] in needed])
                asked |= {(exp.name, t.key, t.rep) for t in todo.trials}
                if todo.trials:
                    run_one(f, todo, db)
                ran.append((exp.name, name, frozenset(t.key for t in exp.trials)))
            if not db.exists():
                break
            v = judge(db, [study], mine, ran, alpha=alpha, max_rep=n)
            last, now = i == len(ns), 0
            for r in v.results:
                ident = (r.claim.id, r.check.label)
                # Undecided: inconclusive, or not measured where its cells' trials so far were invalid.
                if ident not in decided and (last or not (r.verdict == "inconclusive" or (
                        r.verdict == "not measured" and r.keys))):
                    decided[ident] = dataclasses.replace(r, look=i)
                    now += 1
            open_ = [r for r in v.results if (r.claim.id, r.check.label) not in decided]
            history.append((study.study, Look(n, alpha, v.judged.get(study.study, 0), now, len(open_), len(asked),
                                              planned)))
            judged[study.study] = v.judged.get(study.study, 0)
            if not open_:
                break
            needed = frozenset(cell[k] for r in open_ for k in r.keys if k in cell)
        every += ran
    physical = [c for c in claims if c.study == PHYSICAL]
    results = list(decided.values())
    if physical and db.exists():  # not statistics: judged once, on every trial run
        results += judge(db, studies, physical, every).results
    order = {(c.id, k.label): i for i, c in enumerate(claims) for k in c.checks} if claims else {}
    results.sort(key=lambda r: order.get((r.claim.id, r.check.label), len(order)))
    return Validation(studies, results, [(name, f, len(keys)) for name, f, keys in every], judged), history


def format_looks(history: list[tuple[str, Look]]) -> str:
    """What each study's looks did, one line a look."""
    lines = ["sequential: each study's looks, each at Pocock's level for its number of looks"]
    done: dict[str, int] = {}
    for study, h in history:
        done[study] = done.get(study, 0) + 1
        lines.append(f"  {study} look {done[study]}: up to {h.n} repetitions a cell, level {1 - h.alpha:.4f}; "
                     f"{h.decided} checks decided, {h.undecided} undecided; {h.asked} of the sets' {h.planned} "
                     f"trials asked for so far")
    return "\n".join(lines)


__all__ = ["POCOCK", "STEPS", "Look", "format_looks", "looks", "run"]
