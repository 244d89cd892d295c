"""Workloads: what a trial's clients do over the path, one module each.

A trial is one workload: a page load (the default), one file downloaded
(``bulk:SIZE``), an upload (``upload:SIZE``), or a real-time scenario
(``realtime``). The runner, the planner, the store and the report name no
workload: they ask the trial's one (:func:`workload_of`) through
:class:`Workload`:

- :meth:`~Workload.problem`: why the trial's other factors cannot run it
  (checked when the experiment is parsed);
- :meth:`~Workload.request`: the load the client is asked for;
- :meth:`~Workload.judge`: its own verdict and metrics after the load, and
  its rows for the tables it declares (:attr:`~Workload.tables`);
- :meth:`~Workload.page_bytes`: the bytes the protocol overhead counts against;
- :meth:`~Workload.extra_s`: what it adds to a trial's estimated duration;
- :meth:`~Workload.report`: its section of the HTML report.

Adding a workload: one module with one :class:`Workload` subclass and one
line in :data:`WORKLOADS` (before the ones it refines: the first that
:meth:`~Workload.claims` a trial is its workload). A workload's tables are
created with the results database (:mod:`satbench.results.schema`), and
read with :meth:`satbench.results.read.Results.table`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar

from ..endpoints.base import Problem as Problem  # re-exported: a workload's problem is a client's
from ..model import ClientOutcome

if TYPE_CHECKING:
    from pathlib import Path

    from ..endpoints.base import LoadRequest, Origin
    from ..experiment.trialspec import TrialSpec
    from ..link.spec import LinkSpec
    from ..results.read import Results
    from ..results.report import Figures
    from ..results.store import TrialRecord
    from ..testbed.testbed import TestbedSpec

@dataclass(frozen=True)
class Table:
    """Rows a workload stores per trial: the table's name, its columns after ``trial_id`` (in the
    order :meth:`Workload.judge` gives them) and its CREATE TABLE statement."""

    name: str
    columns: tuple[str, ...]
    ddl: str


class Workload:
    """One kind of load. Its methods are class methods: a workload keeps nothing between trials."""

    name: ClassVar[str]
    meaning: ClassVar[str] = ""
    tables: ClassVar[tuple[Table, ...]] = ()
    #: Whether the trial's page is one of satbench's generated pages (a manifest under the pages
    #: folder, whose objects the bound counts); False: the bound counts the page's bytes only.
    generated: ClassVar[bool] = True
    #: Whether the trial's origins replay a recording (what ``server.replay_think`` acts on).
    replays: ClassVar[bool] = False

    @classmethod
    def claims(cls, trial: TrialSpec) -> bool:
        """Whether a trial is this workload's."""
        raise NotImplementedError

    @classmethod
    def problem(cls, trial: TrialSpec) -> Problem | None:
        """Why the trial's factors cannot run it, as (factor, why) (None if they can)."""
        return None

    @classmethod
    def prepare(cls, trial: TrialSpec, pages_root: Path) -> int | None:
        """Make the trial's page ready under ``pages_root`` and return its bytes (None: the page is a
        generated one, which :func:`satbench.endpoints.pages.prepare` makes)."""
        return None

    @classmethod
    def identity(cls, trial: TrialSpec) -> str | None:
        """What the trial's page is beyond its factor's value (a file's content), hashed: an edited
        file is another trial, never mixed under one key. None: the value says it all."""
        return None

    @classmethod
    def size(cls, trial: TrialSpec) -> tuple[int, int] | None:
        """The page's (bytes, objects) for the duration estimate (None: a generated page's)."""
        return None

    @classmethod
    def configure(cls, trial: TrialSpec, spec: TestbedSpec) -> None:
        """Shape the trial's testbed (server hosts and their names, say) before it is built."""

    @classmethod
    def origins(cls, trial: TrialSpec, pages_root: Path) -> list[Origin] | None:
        """What each server host serves, in order (None: the pages folder on the first host, and on
        each shard host, with the test CA's certificate)."""
        return None

    @classmethod
    def request(cls, trial: TrialSpec, req: LoadRequest, session: str, seed: int) -> LoadRequest:
        """The load the client is asked for: ``req`` (the page's URL over the trial's protocol) as the
        workload shapes it. ``session`` names the trial, ``seed`` is its emulator's seed."""
        return req

    @classmethod
    def server_options(cls, trial: TrialSpec) -> dict[str, Any]:
        """Options of the satbench server the workload needs (``satbench.endpoints.options``)."""
        return {}

    @classmethod
    def mixes_cleartext(cls, trial: TrialSpec) -> bool:
        """Whether the page has cleartext (``http://``) origins beside its TLS ones, as a recorded site
        may: the servers then see both, and that is no fault."""
        return False

    @classmethod
    def judge(cls, rec: TrialRecord, trial: TrialSpec, links: Mapping[str, LinkSpec], outcome: ClientOutcome
              ) -> None:
        """After the client's own verdict (in ``rec``), the workload's: metrics, rows of its tables
        (``rec.rows``), and the trial made invalid or failed where the workload says so."""

    @classmethod
    def wire_metrics(cls, metrics: Mapping[str, float | None]) -> dict[str, float | None]:
        """Metrics of its own from the trial's others once the link's counters are in (``wire_bytes``)."""
        return {}

    @classmethod
    def page_bytes(cls, trial: TrialSpec, loaded: int) -> int:
        """The bytes of the page the trial's clients loaded, given ``loaded`` (the page's bytes each
        client really fetched, summed): what the protocol overhead is counted against."""
        return loaded

    @classmethod
    def extra_s(cls, trial: TrialSpec, rtt_s: float) -> float:
        """Seconds the workload adds to a trial's estimated duration beyond its page's load."""
        return 0.0

    @classmethod
    def report(cls, r: Results, experiment: str, valid: Any, varied: list[str], figs: Figures) -> str:
        """The workload's section of the report (HTML; empty if its trials are not in ``valid``)."""
        return ""


#: name -> "module:Class", in the order they claim trials (the most particular first).
WORKLOADS: dict[str, str] = {
    "site": "satbench.workloads.site:ReplayedSite",
    "realtime": "satbench.workloads.realtime:Realtime",
    "upload": "satbench.workloads.transfer:Upload",
    "bulk": "satbench.workloads.transfer:Bulk",
    "page": "satbench.workloads.page:PageLoad",
}


#: The workloads satbench ships (a plug-in may not replace or remove one).
BUILTIN = frozenset(WORKLOADS)


@cache
def workload_class(name: str) -> type[Workload]:
    module, _, attr = WORKLOADS[name].partition(":")
    cls: type[Workload] = getattr(importlib.import_module(module), attr)
    return cls


def workloads() -> list[type[Workload]]:
    """Every workload, in the order they claim trials."""
    return [workload_class(n) for n in WORKLOADS]


def workload_of(trial: TrialSpec) -> type[Workload]:
    """The trial's workload: the first that claims it."""
    for cls in workloads():
        if cls.claims(trial):
            return cls
    raise LookupError(f"no workload claims the trial (page {trial.page})")


def tables() -> list[Table]:
    """Every table a workload declares."""
    return [t for cls in workloads() for t in cls.tables]


def register(name: str, target: str, before: str = "page") -> None:
    """Add a workload: ``target`` is ``"module:Class"``, a :class:`Workload` claiming trials before
    the workload ``before`` (the page load claims every trial no other workload does). Its tables
    are created with any results database opened after. It lives in this process: trials that run
    on workers (``--parallel``, a cluster) do not see it, and satbench refuses to send them there."""
    if name in WORKLOADS:
        raise ValueError(f"a workload {name!r} is registered already")
    if before not in WORKLOADS:
        raise ValueError(f"before: no workload {before!r} (registered: {', '.join(WORKLOADS)})")
    module, _, attr = target.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, Workload)):
        raise ValueError(f"{target} is not a Workload")
    items = list(WORKLOADS.items())
    at = next(i for i, (k, _) in enumerate(items) if k == before)
    items.insert(at, (name, target))
    WORKLOADS.clear()
    WORKLOADS.update(items)
    workload_class.cache_clear()


def unregister(name: str) -> None:
    """Remove a workload added by :func:`register` (the built-in ones stay)."""
    if name in BUILTIN:
        raise ValueError(f"{name!r} is one of satbench's workloads: it cannot be removed")
    WORKLOADS.pop(name, None)
    workload_class.cache_clear()


def plugins() -> list[str]:
    """The workloads registered in this process beyond satbench's own."""
    return [n for n in WORKLOADS if n not in BUILTIN]
