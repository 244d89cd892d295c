"""The published claims, as data: ``claims.toml`` beside this module holds
every claim of ../shared/STUDIES.md (its text as published, the figure it
gives) and how satbench measures it: which validation set (an experiment
file under ``experiments/``), which trials, which metric and which
comparison. Nothing of a claim is written in code; :mod:`.judge` evaluates
what a claim says.

A claim's checks (``[[claim.check]]``) each compare trials of its set:

- ``relative``: ``(mean(a) / mean(b) - 1)`` in %, per cell of ``pair``
  (e.g. each page), averaged over the cells; ``published`` is the study's
  figure in %, ``direction`` ("lower" or "higher") what it says of a
  against b.
- ``similar``: the same relative difference, claimed to be nothing: within
  ``margin`` % either way.
- ``value``: the mean of ``a``'s metric against a published value:
  ``about`` it (the value, give or take its rounding ``precision``, within
  the interval), ``at least`` / ``at most`` it, or ``between`` it and
  ``upper`` (a published range: "10-20").
- ``trend``: the metric against a factor ``x``: Spearman's rank
  correlation, ``direction`` "falls" or "rises"; ``x`` numeric, or its
  levels ranked by ``order`` (links by their RTT, say).
- ``share``: how much of the change from ``c`` to ``b`` the side ``a``
  gives back, ``(mean a - mean b) / (mean c - mean b)`` per cell of
  ``pair``, averaged ("a tunnel removes most of the PEP's gain": a = PEP
  and tunnel, b = the PEP, c = neither; ``at least`` 0.5).
- ``spread``: the coefficient of variation of a against b's, ``direction``
  "higher" or "lower".
- ``largest_effect``: the knob whose change moves the metric most is
  ``knob``: among the ``knobs`` (their baseline levels in ``a``), each
  changed one at a time against the baseline; or, where a set's trials
  change several knobs at once (a two-level factorial design, study D's
  full set), among every knob of that design, by its main effects.
- ``bound`` and ``floor`` (the physical checks): no valid trial of any set
  run below its lower bound; no overhead below the TCP/IP header floor. A
  failed physical check is an error of the testbed, not a finding.

``a`` and ``b`` are filters: factor = value (or a list of values; a value
with ``*`` is a pattern, ``!value`` anything but it), and ``metric`` to read
another metric than the claim's (two metrics of the same trials: study B's
groups; ``"a - b"``: the difference of two, a phase of cumulative timings).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError

CLAIMS = Path(__file__).with_name("claims.toml")
KINDS = ("relative", "similar", "value", "trend", "share", "spread", "largest_effect", "bound", "floor")


@dataclass(frozen=True)
class Check:
    label: str
    kind: str
    a: dict[str, Any] = field(default_factory=dict)
    b: dict[str, Any] = field(default_factory=dict)
    #: A share's third side (the change from ``c`` to ``b`` is the one ``a`` gives back part of).
    c: dict[str, Any] = field(default_factory=dict)
    pair: tuple[str, ...] = ("page",)
    published: float | None = None
    direction: str | None = None
    margin: float = 10.0
    relation: str = "about"
    x: str | None = None
    #: A trend's levels of ``x`` in rank order, where ``x`` is not a number.
    order: tuple[Any, ...] = ()
    #: A ``between`` value's upper end (``published`` the lower).
    upper: float | None = None
    knobs: tuple[str, ...] = ()
    knob: str | None = None
    metric: str | None = None
    #: How far the published figure may be from the measured one for its rounding: half a unit
    #: of its last digit as the study wrote it ("1 RTT": 0.5; "about 1.6 s": 50 ms); 0: exact.
    precision: float = 0.0


@dataclass(frozen=True)
class Claim:
    id: str
    study: str
    text: str
    #: The published figure, as the study gives it (for the table).
    published: str
    metric: str
    #: Filters every check's trials share.
    where: dict[str, Any]
    checks: tuple[Check, ...]
    #: Where a known difference is explained (a section of docs/validation.md or docs/results.md).
    finding: str | None = None

    @property
    def physical(self) -> bool:
        return all(c.kind in ("bound", "floor") for c in self.checks)


@dataclass(frozen=True)
class StudySets:
    """A study's validation sets: experiment files under ``experiments/``, quick and full."""

    study: str
    title: str
    quick: tuple[str, ...]
    full: tuple[str, ...]
    #: The full sets' duration on this project's 2-core machine, as measured or estimated.
    full_duration: str = ""


def load(path: Path = CLAIMS) -> tuple[list[StudySets], list[Claim]]:
    """The studies' sets and the claims, checked."""
    try:
        doc = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise InputError(f"{path}: {e}") from None
    studies = [StudySets(s["study"], s["title"], tuple(s["quick"]), tuple(s["full"]), s.get("full_duration", ""))
               for s in doc.get("study", [])]
    known = {s.study for s in studies}
    claims: list[Claim] = []
    for i, c in enumerate(doc.get("claim", [])):
        where = f"{path.name}: claim[{i}] ({c.get('id', '?')})"
        if c.get("study") not in known:
            raise InputError(f"{where}: study {c.get('study')!r} has no [[study]] sets")
        checks = []
        for j, k in enumerate(c.get("check", [])):
            if k.get("kind") not in KINDS:
                raise InputError(f"{where}: check[{j}].kind must be one of {', '.join(KINDS)}, got {k.get('kind')!r}")
            checks.append(Check(label=k.get("label", k["kind"]), kind=k["kind"], a=dict(k.get("a", {})),
                                b=dict(k.get("b", {})), c=dict(k.get("c", {})), order=tuple(k.get("order", ())),
                                upper=k.get("upper"), pair=tuple(k.get("pair", ["page"])),
                                published=k.get("published"), direction=k.get("direction"),
                                margin=float(k.get("margin", 10.0)), relation=k.get("relation", "about"),
                                x=k.get("x"), knobs=tuple(k.get("knobs", ())), knob=k.get("knob"),
                                metric=k.get("metric"), precision=float(k.get("precision", 0.0))))
        if not checks:
            raise InputError(f"{where}: no [[claim.check]]")
        claims.append(Claim(id=c["id"], study=c["study"], text=c["text"], published=c.get("published", ""),
                            metric=c.get("metric", "plt_ms"), where=dict(c.get("where", {})), checks=tuple(checks),
                            finding=c.get("finding")))
    return studies, claims
