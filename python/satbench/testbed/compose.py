"""A trial's path composed once: the testbed its path elements shape, the
elements running, the origins serving. ``satbench run`` (the runner) and
``satbench shell`` both build their path through :func:`composed`, so the
order is one: each element configures the testbed's specification, the
testbed is built, ``setup`` runs on it (the runner's knobs), each element
starts, each server starts (one at a time: a server that fails to start stops
the ones before it), each element is told the origin serves (a proxy warms
its cache; only where there are servers), and the body runs. Everything stops in reverse order, also on an
exception; the testbed goes last."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .testbed import TestbedSpec

if TYPE_CHECKING:
    from ..endpoints.base import Server
    from ..path import PathElement


@contextmanager
def composed(spec: TestbedSpec, path: Sequence[PathElement], artefacts: Path | Callable[[Any], Path], *,
             testbed: Callable[[TestbedSpec], AbstractContextManager[Any]],
             serve: Callable[[Any], Iterable[Server]] | None = None,
             setup: Callable[[Any], None] | None = None) -> Iterator[tuple[Any, list[Server]]]:
    """The running path: ``(testbed, servers)``. ``artefacts`` is where the elements write (or a
    function of the built testbed giving it: the shell's run folder); ``serve`` yields the started
    servers."""
    for e in path:
        e.configure(spec)
    with testbed(spec) as tb:
        if setup is not None:
            setup(tb)
        folder = artefacts(tb) if callable(artefacts) else artefacts
        with ExitStack() as running:
            for e in path:
                running.enter_context(e.start(tb, folder))
            servers: list[Server] = []
            for s in serve(tb) if serve is not None else ():
                servers.append(running.enter_context(s))
            # Stopping: every server asked first, then each waited for (a replayed site's dozens of
            # servers stop in the time of one).
            def ask_all() -> None:
                for s in servers:
                    s.begin_stop()

            running.callback(ask_all)
            if serve is not None:  # the origin is up: what needs it (a proxy warming its cache) may run
                for e in path:
                    e.serving(tb)
            yield tb, servers
