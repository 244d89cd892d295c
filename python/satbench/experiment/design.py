"""Trials, their identity and their run order, each decided here and only here.

- A trial is its factors, its repetition and its resolved links (the
  satellite link and any link a path element needs). Its **key** is a hash of
  the factors that identify it (:func:`satbench.experiment.factors.keyed`),
  the repetition and the links' canonical hashes: a profile edited between
  two runs is a different trial, never mixed under one key.
- The **run order** is a seeded shuffle of the trials in a canonical order
  (or the order the file lists them, for ``order = "sequential"``). The seed is the file's, or
  the one stored by the first run of the study, or a fresh one: see
  :func:`run_order`.
"""

from __future__ import annotations

import hashlib
import json
import random
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..link.spec import LinkSpec
from .factors import FACTORS, REQUIRED, keyed
from .trialspec import TrialSpec


def trial_key(factors: dict[str, Any], rep: int, links: dict[str, LinkSpec] | dict[str, str],
              content: dict[str, str] | None = None) -> str:
    """The stable identity of a trial (16 hex digits); ``content``: the hashes of files its factors
    name (:func:`content_of`), in the key only when there are any (other trials keep their keys)."""
    hashes = {role: (s.hash if isinstance(s, LinkSpec) else s) for role, s in links.items()}
    doc: dict[str, Any] = {"f": keyed(factors), "r": rep, "l": hashes}
    if content:
        doc["c"] = content
    blob = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


def content_of(spec: TrialSpec) -> dict[str, str]:
    """The content of the files a trial's factors name, hashed (16 hex digits each): a replayed
    site's manifest (its workload's identity) and a loader's request schedule. An edited file is a
    different trial, as an edited link profile is."""
    from ..workloads import workload_of  # noqa: PLC0415 - the workloads import the experiment's types

    out: dict[str, str] = {}
    if (page := workload_of(spec).identity(spec)) is not None:
        out["page"] = page
    if spec.schedule is not None:
        try:
            out["schedule"] = hashlib.sha256(Path(spec.schedule).read_bytes()).hexdigest()[:16]
        except OSError:
            pass  # refused with its reason where the trial is checked (schedule_problem)
    return out


def trial_key_v1(factors: dict[str, Any], rep: int) -> str:
    """The key satbench 0.1 gave a trial (factors and repetition only)."""
    blob = json.dumps({"f": factors, "r": rep}, sort_keys=True, default=str)
    return hashlib.sha1(blob.encode()).hexdigest()[:16]


@dataclass
class Trial:
    #: What the trial is, typed once (its factor values are ``spec.factors``).
    spec: TrialSpec
    rep: int
    links: dict[str, LinkSpec]
    scenarios: list[str] = field(default_factory=list)
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            self.key = trial_key(dict(self.spec.factors), self.rep, self.links, content_of(self.spec))

    @property
    def factors(self) -> dict[str, Any]:
        """The factor values as stored (a copy): for storage and display only; code reads ``spec``."""
        return dict(self.spec.factors)

    @property
    def link(self) -> LinkSpec:
        return self.links["link"]

    def label(self, only: list[str] | None = None) -> str:
        f = self.spec.factors
        keys = only if only else [k for k, v in f.items()
                                  if k not in FACTORS or v != FACTORS[k].default or k in REQUIRED]
        return " ".join(f"{k}={f[k]}" for k in keys if k in f)


def canonical_order(trials: list[Trial]) -> list[Trial]:
    """Trials sorted by their identifying factors and repetition."""
    return sorted(trials, key=lambda t: (json.dumps(keyed(dict(t.spec.factors)), sort_keys=True, default=str), t.rep))


@dataclass(frozen=True)
class RunOrder:
    seed: int
    trials: list[Trial]


def run_order(trials: list[Trial], order: str, file_seed: int | None, stored_seed: int | None = None,
              block: str | None = None) -> RunOrder:
    """The order the trials (listed as the file gives them) run in, and its
    seed: the file's seed if it gives one, else the seed the study's first
    run stored (a resumed run keeps its order), else a fresh one (recorded
    by the run). With a ``block`` factor, the trials run block by block (the
    blocks in random order, each block's trials in random order)."""
    seed = file_seed if file_seed is not None else stored_seed if stored_seed is not None else secrets.randbits(31)
    ordered = list(trials)
    if order == "random":
        ordered = canonical_order(trials)
        rnd = random.Random(seed)
        rnd.shuffle(ordered)
        if block is not None:
            keys = list(dict.fromkeys(json.dumps(t.spec.get(block), default=str) for t in ordered))
            rnd.shuffle(keys)
            ordered = [t for k in keys for t in ordered if json.dumps(t.spec.get(block), default=str) == k]
    return RunOrder(seed=seed, trials=ordered)


def trial_seed(order_seed: int, key: str) -> int:
    """The emulator's seed for a trial, from the order seed and the trial's key."""
    return int(hashlib.sha1(f"{order_seed}:{key}".encode()).hexdigest()[:15], 16)
