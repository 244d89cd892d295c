"""``satbench validate``: the testbed checked against the literature, claim
by claim.

For each study asked, its validation sets (experiment files under
``experiments/``: the quick ones, or the full presets as the study ran them)
run into one results database, resuming what is stored; then every claim of
``claims.toml`` is judged on the trials (:mod:`.judge`): the published
figure, the measured one with its 95 % interval, and a verdict. A claim that
differs is a finding (where its cause is known, the claim names the page
that shows it); a physical check that fails (a load below its lower bound,
overhead below the TCP/IP header floor) is the testbed's error, and the
command exits non-zero.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from .. import prereq
from ..results.read import Results
from . import intervals
from .claims import Claim, StudySets, load
from .judge import VERDICTS, Result, evaluate, keys_of

if TYPE_CHECKING:
    from ..experiment.spec import Experiment

__all__ = ["Claim", "Result", "StudySets", "Validation", "judge", "load", "load_set", "run_sets", "write_html"]

#: The physical checks' study: judged over every trial of the studies run.
PHYSICAL = "P"


@dataclass
class Validation:
    studies: list[StudySets]
    results: list[Result]
    #: Each set's experiment name, file and trial count, as run.
    sets: list[tuple[str, str, int]]
    #: The trials judged, per study, and those left out as run from uncommitted code.
    judged: dict[str, int] = dataclasses.field(default_factory=dict)
    dirty: dict[str, int] = dataclasses.field(default_factory=dict)


    @property
    def failed(self) -> bool:
        return any(r.failed for r in self.results)

    def table(self) -> str:
        lines = []
        for r in self.results:
            look = f" (look {r.look})" if r.look else ""
            lines.append(f"{r.claim.id:4s} {r.check.label[:44]:44s} {r.measured[:58]:58s} n={r.n:<4d} "
                         f"{r.verdict}{look}")
            if r.split:
                lines.append(f"{'':4s} {'':44s} {r.split}")
        return "\n".join(lines)


def sets_of(studies: list[StudySets], quick: bool) -> list[Path]:
    root = prereq.REPO / "experiments"
    return [root / f for s in studies for f in (s.quick if quick else s.full)]


#: A set as run: its experiment's name, its file (under the repository) and its trials' keys.
Set = tuple[str, str, frozenset[str]]


def run_sets(files: list[Path], db: Path, run: Callable[[Path, Experiment, Path], Any],
             repetitions: int | None = None) -> list[Set]:
    """Run (resume) each set into ``db`` with ``run(file, experiment, db)``, each file loaded once;
    what each set is (with ``repetitions``, its first that many repetitions of every cell: see
    :func:`load_set`)."""
    out = []
    for f in files:
        exp = load_set(f, repetitions)
        run(f, exp, db)
        out.append((exp.name, str(f.relative_to(prereq.REPO)), frozenset(t.key for t in exp.trials)))
    return out


def load_set(f: Path, repetitions: int | None = None) -> Experiment:
    """A set's experiment; with ``repetitions``, only its first that many repetitions of every cell
    (the same keys and name: a full run of the set later resumes and adds the rest)."""
    from ..experiment.spec import load as load_experiment  # noqa: PLC0415 - planning needs the emulator

    exp = load_experiment(f)
    return exp if repetitions is None else exp.first_repetitions(repetitions)


def judge(db: Path, studies: list[StudySets], claims: list[Claim], sets: list[Set], alpha: float = 0.05,
          max_rep: int | None = None, committed_only: bool = False) -> Validation:
    """Every claim of the studies asked (and the physical ones) on the trials of their sets (a
    trial the database holds under a set's name that the set no longer plans does not count), its
    intervals at level 1 - ``alpha`` and Holm's correction at ``alpha`` (a sequential look spends
    less than 0.05: :mod:`.sequential`); with ``max_rep``, only each cell's repetitions up to it; with
    ``committed_only``, only trials run from committed code (their commit without ``-dirty``), the
    others counted per study in :attr:`Validation.dirty`."""
    by_file = {f: (name, keys) for name, f, keys in sets}
    results: list[Result] = []
    frames: dict[str, pd.DataFrame] = {}
    dirty: dict[str, int] = {}
    with Results(db) as r:
        stored = set(r.experiments())
        for s in studies:
            mine = [by_file[k] for f in (*s.quick, *s.full) if (k := f"experiments/{f}") in by_file]
            dfs = [d[d["key"].isin(keys) & (d["rep"] <= (max_rep or d["rep"].max()))] if not d.empty else d
                   for name, keys in mine if name in stored for d in [r.trials(name)]]
            frame = pd.concat([d for d in dfs if not d.empty], ignore_index=True) if any(
                not d.empty for d in dfs) else pd.DataFrame()
            if committed_only and "satbench_commit" in frame.columns:
                clean = ~frame["satbench_commit"].fillna("-dirty").astype(str).str.endswith("-dirty")
                dirty[s.study] = int((~clean).sum())
                frame = frame[clean]
            frames[s.study] = frame
    everything = pd.concat([f for f in frames.values() if not f.empty], ignore_index=True) if any(
        not f.empty for f in frames.values()) else pd.DataFrame()
    for c in claims:
        if c.study == PHYSICAL:
            df = everything
        elif c.study in frames:
            df = frames[c.study]
            df = df[df["status"] == "valid"] if "status" in df.columns else df
        else:
            continue
        run = everything if c.study == PHYSICAL else frames[c.study]  # invalid trials' cells too
        for check in c.checks:
            with intervals.at_level(1 - alpha):
                got = evaluate(df, c, check)
            results.append(dataclasses.replace(got, keys=keys_of(run, c, check)))
    return Validation(studies, holm_by_study(results, alpha), [(name, f, len(keys)) for name, f, keys in sets],
                      {k: len(f) for k, f in frames.items()}, dirty)


#: The verdicts that claim a direction was found: what Holm's correction across a study's checks guards.
DIRECTIONAL = ("reproduced", "direction reproduced, size differs", "direction reproduced, size undecided")


def holm_by_study(results: list[Result], alpha: float = 0.05) -> list[Result]:
    """Holm's correction of the directional checks' p-values across each study's checks (66 checks at
    once would otherwise find a few directions by chance): a direction found whose corrected p is not
    below ``alpha`` becomes inconclusive, and says so."""
    from ..results.analysis import holm  # noqa: PLC0415

    out = list(results)
    for study in {r.claim.study for r in results}:
        idx = [i for i, r in enumerate(out) if r.claim.study == study and r.p is not None]
        if not idx:
            continue
        adjusted = holm([float(out[i].p) for i in idx])  # type: ignore[arg-type]
        for i, q in zip(idx, adjusted):
            r = out[i]
            note = r.split
            verdict = r.verdict
            if verdict in DIRECTIONAL and not q < alpha:
                verdict = "inconclusive"
                note = (note + "; " if note else "") + f"Holm across {len(idx)} checks: p {q:.3f}"
            out[i] = dataclasses.replace(r, verdict=verdict, split=note, p_holm=q)
    return out


def write_html(v: Validation, out: Path, command: str) -> Path:
    """The same table as a page (validation.html in ``out``)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for r in v.results:
        link = (f" <a href='{html.escape(r.claim.finding)}'>why</a>" if r.claim.finding and r.verdict in (
            "differs", "direction reproduced, size differs") else "")
        rows.append(f"<tr class='{r.verdict.split()[0].rstrip(',')}'><td>{r.claim.id}</td>"
                    f"<td>{html.escape(r.claim.text)}</td><td>{html.escape(r.claim.published)}</td>"
                    f"<td>{html.escape(r.check.label)}</td><td>{html.escape(r.measured)}"
                    + (f"<br><small>{html.escape(r.split)}</small>" if r.split else "") + f"</td><td>{r.n}</td>"
                    f"<td>{html.escape(r.verdict)}{link}</td></tr>")
    sets = "".join(f"<li><code>{html.escape(f)}</code> ({name}, {n} trials)</li>" for name, f, n in v.sets)
    page = f"""<!doctype html><meta charset="utf-8"><title>satbench validation</title>
<style>body{{font-family:sans-serif;max-width:1200px;margin:2em auto}}td,th{{border:1px solid #ccc;padding:4px;
vertical-align:top;font-size:13px}}table{{border-collapse:collapse}}.reproduced,.holds{{background:#e8f5e9}}
.differs,.fails{{background:#ffebee}}.direction{{background:#fff8e1}}.inconclusive{{background:#eceff1}}</style>
<h1>satbench against the literature</h1>
<p>Command: <code>{html.escape(command)}</code>. Sets run:</p><ul>{sets}</ul>
<p>Each claim as ../shared/STUDIES.md states it, the published figure, what satbench measured with its 95 %
interval (Student-t, calibrated: satbench validate --calibrate) and the trials behind it, and the verdict:
{", ".join(VERDICTS)}. Directions are held to every cell of a pooled check and to Holm's correction across each
study's checks.
A claim that differs is a finding; where its cause is known, "why" links the page that shows it.</p>
<table><tr><th>claim</th><th>published claim</th><th>published figure</th><th>check</th><th>measured</th>
<th>trials</th><th>verdict</th></tr>{"".join(rows)}</table>"""
    path = out / "validation.html"
    path.write_text(page)
    return path
