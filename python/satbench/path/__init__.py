"""Elements on the path between the clients and the servers, besides the
satellite link: the access link behind the terminal, split-TCP PEPs, a
terrestrial link behind the gateway, a VPN tunnel, an HTTP proxy at the
gateway, and other users' traffic sharing the link.

An element is placed by one experiment factor (``access = "wifi"``). Its
class says which link profiles the value needs (resolved once, at plan time,
with the trial's other links, so that they are part of the trial's key),
shapes the testbed before it is built (:meth:`PathElement.configure`), and
may start processes once it stands (:meth:`PathElement.start`).

Adding an element: one module with one :class:`PathElement` subclass and one
line in :data:`ELEMENTS`.
"""

from __future__ import annotations

import importlib
from abc import ABC
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..link.profile import LinkProfile
from ..link.spec import LinkSpec

if TYPE_CHECKING:
    from ..experiment.trialspec import TrialSpec
    from ..testbed.testbed import Testbed, TestbedSpec


class PathElement(ABC):
    """One element on the path, for one trial."""

    #: The experiment factor that places it, its default (absent) and its meaning.
    factor: ClassVar[str]
    default: ClassVar[Any] = "none"
    meaning: ClassVar[str] = ""
    #: How many satellite terminals the element supports (None: any number); what it is, in the
    #: sentence that refuses more ("a proxy").
    max_terminals: ClassVar[int | None] = None
    noun: ClassVar[str] = "path element"
    #: Whether it carries IPv6 beside IPv4 (``ip = "v6"`` or ``"dual"``); otherwise refused there.
    ipv6: ClassVar[bool] = False
    #: Whether it puts traffic of its own on the satellite link (cross traffic): the link's counters
    #: are then not the trial's alone, and the trial's wire bytes and overhead are not taken from them.
    shares_link: ClassVar[bool] = False

    def __init__(self, value: Any, links: Mapping[str, LinkSpec], trial: "TrialSpec"):
        #: Its value, the links it needs, and the trial it is part of (a proxy
        #: sends with the trial's congestion control, say).
        self.value, self.links, self.trial = value, dict(links), trial

    @classmethod
    def check(cls, value: Any) -> str | None:
        """Why ``value`` is no level of the element's factor (None if it is)."""
        return None

    @classmethod
    def conflict(cls, value: Any, trial: "TrialSpec") -> str | None:
        """Why ``value`` cannot be part of this trial (None if it can): the element with the
        trial's other factors."""
        return None

    @classmethod
    def extra_s(cls, value: Any) -> float:
        """Seconds the element adds to a trial beyond its load (for the duration estimate)."""
        return 0.0

    @classmethod
    def label(cls, value: Any) -> Any:
        """The value as figures and tables show it (a table-valued one as text)."""
        return value

    @classmethod
    def profiles(cls, value: Any) -> dict[str, LinkProfile]:
        """The link profiles the value needs, by role (resolved at plan time)."""
        return {}

    def configure(self, spec: "TestbedSpec") -> None:
        """Shape the testbed before it is built."""

    @contextmanager
    def start(self, tb: "Testbed", artefacts: Path) -> Iterator[None]:
        """Run what the element needs while the trial runs."""
        yield

    def serving(self, tb: "Testbed") -> None:
        """The origin is up (called after the server started, before the
        load): do what needs it, such as warming a cache."""

    def load_starting(self, tb: "Testbed") -> None:
        """The trial's load starts now (an experiment's trial; ``satbench shell`` runs no load)."""

    def load_done(self, tb: "Testbed") -> None:
        """The trial's load is over (what it measures over the load's window ends here)."""

    def summary(self) -> dict[str, Any]:
        """What the element did, for the trial's record (``env.path.FACTOR``)."""
        return {}

    def metrics(self) -> dict[str, float | None]:
        """What the element measured, as trial metrics."""
        return {}

    def fault(self) -> str | None:
        """Why the element failed while the trial ran (a process that died), or None."""
        return None

    def describe(self) -> list[str]:
        """What it did, in lines for a person (``satbench shell`` prints them)."""
        return []


#: factor -> "module:Class"
ELEMENTS: dict[str, str] = {
    "access": "satbench.path.access:AccessLink",
    "pep": "satbench.path.pep:Pep",
    "terrestrial": "satbench.path.terrestrial:TerrestrialLink",
    "tunnel": "satbench.path.tunnel:Tunnel",
    "proxy": "satbench.path.proxy:Proxy",
    "cross": "satbench.path.cross:CrossTraffic",
}


#: The path elements satbench ships (a plug-in may not replace or remove one).
BUILTIN = frozenset(ELEMENTS)


def element_class(factor: str) -> type[PathElement]:
    module, _, name = ELEMENTS[factor].partition(":")
    cls: type[PathElement] = getattr(importlib.import_module(module), name)
    return cls


def terminals_problem(cls: type[PathElement], terminals: int) -> str | None:
    """Why ``cls`` cannot be on a path of ``terminals`` terminals (None if it can)."""
    if cls.max_terminals is not None and terminals > cls.max_terminals:
        return f"{cls.noun} with several terminals is not supported; use one terminal"
    return None


def elements(trial: "TrialSpec", links: Mapping[str, LinkSpec]) -> list[PathElement]:
    """The path elements a trial places (absent ones left out), in the registry's order."""
    out = []
    for factor in ELEMENTS:
        if factor in trial.path:
            cls, value = element_class(factor), trial.path[factor]
            out.append(cls(value, {r: links[r] for r in cls.profiles(value)}, trial))
    return out


#: What keeps a registry of factors in step with the path elements (the experiment's factors, which
#: import this module: it never imports them): whether a name is taken, and what to do when an
#: element is added or removed.
_WATCHERS: list[tuple[Callable[[str], bool], Callable[[str], None], Callable[[str], None]]] = []


def watch(taken: Callable[[str], bool], added: Callable[[str], None], removed: Callable[[str], None]) -> None:
    """Keep a registry in step with :func:`register` and :func:`unregister`."""
    _WATCHERS.append((taken, added, removed))


def register(factor: str, target: str) -> None:
    """Add a path element: ``target`` is ``"module:Class"``, a :class:`PathElement` whose
    ``factor`` is ``factor``; the factor joins the experiment's factors (its default keeps trials
    without it under their keys). What a plug-in outside this package calls; the elements here are
    listed in :data:`ELEMENTS`. It lives in this process: trials that run on workers do not see
    it, and satbench refuses to send them there."""
    if factor in ELEMENTS or any(taken(factor) for taken, _, _ in _WATCHERS):
        raise ValueError(f"a factor {factor!r} exists already")
    module, _, name = target.partition(":")
    cls = getattr(importlib.import_module(module), name)
    if not (isinstance(cls, type) and issubclass(cls, PathElement)) or cls.factor != factor:
        raise ValueError(f"{target} is not a PathElement with factor = {factor!r}")
    ELEMENTS[factor] = target
    for _, added, _ in _WATCHERS:
        added(factor)


def unregister(factor: str) -> None:
    """Remove a path element added by :func:`register` (the built-in ones stay)."""
    if factor in BUILTIN:
        raise ValueError(f"{factor!r} is one of satbench's path elements: it cannot be removed")
    ELEMENTS.pop(factor, None)
    for _, _, removed in _WATCHERS:
        removed(factor)


def plugins() -> list[str]:
    """The path elements registered in this process beyond satbench's own."""
    return [f for f in ELEMENTS if f not in BUILTIN]
