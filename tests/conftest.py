"""Fixtures and hooks of the three layers of tests:

- ``unit/``: no root, no network: the link model's Python side, experiment
  files, the store and its migrations, statistics, pages;
- ``harness/``: the runner, the store and the report driven against a fake
  lab and fake endpoints, in seconds, without root;
- ``e2e/``: real traffic through real namespaces (root and /dev/net/tun; CI
  has both), marked ``e2e``.

The host namespace's state is captured when the session starts, before any
test runs (with ``$SATBENCH_HOST_STATE_FILE``, when the first of several
sessions starts), and compared with its state at the end (the last test). What a
killed earlier run left (testbeds whose owner process is gone) is removed
first, as every new testbed would remove it, so that the comparison is about
this session's testbeds only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.endpoints import pages
from satbench.endpoints.options import ServerOptions
from satbench.endpoints.satbench_server import SatbenchServer

from .helpers import host_state

_INITIAL: dict[str, str] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: builds real testbeds (root, /dev/net/tun)")
    config.addinivalue_line("markers", "serial: must run alone (host-wide state, tight timing, heavy): the test "
                                       "command runs the e2e layer's others on two workers, then these one at a time")


def pytest_sessionstart(session: pytest.Session) -> None:
    # Under pytest-xdist only the controller does this (its workers would race on stale testbeds).
    if os.geteuid() == 0 and not os.environ.get("PYTEST_XDIST_WORKER"):
        # The test CA, made once before any worker could make it at the same time as another.
        from satbench.endpoints import ca
        from satbench.testbed.cleanup import cleanup

        ca.ensure()
        stale = cleanup()
        if stale:
            print(f"removed what {len(stale)} testbed(s) of a killed earlier run left: {', '.join(stale)}")
        # The test command runs pytest twice (unit and harness, then e2e): the state before the first
        # run is the one the last test compares with ($SATBENCH_HOST_STATE_FILE carries it across).
        carried = Path(os.environ.get("SATBENCH_HOST_STATE_FILE", ""))
        if carried.name and carried.is_file():
            _INITIAL.update(json.loads(carried.read_text()))
        else:
            _INITIAL.update(host_state())
            if carried.name:
                carried.write_text(json.dumps(_INITIAL))


def initial_host_state() -> dict[str, str]:
    """The host namespace's state when the session started."""
    return dict(_INITIAL)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if "serial" in item.keywords and os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.fail("a serial test must run alone: run the e2e layer with -m 'not serial' on workers, then "
                    "-m serial without them (scripts/test)")


def _needs_root() -> str | None:
    if os.geteuid() != 0:
        return "needs root"
    if not Path("/dev/net/tun").exists():
        return "needs /dev/net/tun"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for it in items:
        if "/e2e/" in str(it.path):
            it.add_marker(pytest.mark.e2e)
    why = _needs_root()
    if why and not os.environ.get("CI"):
        for it in items:
            if "e2e" in it.keywords:
                it.add_marker(pytest.mark.skip(reason=why))
    # The host-state check runs last, after every other test.
    last = [it for it in items if it.path.name == "test_zz_host_state.py"]
    items[:] = [it for it in items if it not in last] + last


@pytest.fixture(scope="session")
def generated_pages(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Every test page, generated once per session (or copied from the page cache, which holds
    what this generator makes): (folder, {name: manifest})."""
    out = tmp_path_factory.mktemp("pages")
    pages.prepare(out, pages.ALL_PAGES)
    return out, {p: pages.Manifest.load(out, p) for p in pages.ALL_PAGES}


@pytest.fixture(scope="module")
def wire_100ms(generated_pages, tmp_path_factory):  # type: ignore[no-untyped-def]
    """A testbed with a 100 ms RTT unlimited link and satbench-server (CUBIC)
    serving every test page: (testbed, server, {name: manifest})."""
    out, manifests = generated_pages
    with Testbed(TestbedSpec(link=load_profile("wire", ["delay_ms=50"]), seed=1)) as tb:
        with SatbenchServer(out, tmp_path_factory.mktemp("logs"), ServerOptions(), cc="cubic",
                            host=tb.server) as srv:
            yield tb, srv, manifests


