"""Runs last (the collection hook puts it there): after every other test,
the host namespace is as it was when the session started, and no testbed
left anything behind."""

from __future__ import annotations

import pytest

from ..conftest import initial_host_state
from ..helpers import host_state, satbench_leftovers

#: Runs alone, after the parallel part of the e2e layer (tests/conftest.py: serial).
pytestmark = pytest.mark.serial


def test_host_state_unchanged() -> None:
    before = initial_host_state()
    assert before, "the host's state was not captured at session start"
    now = host_state()
    for k, v in before.items():
        assert now[k] == v, f"host {k} changed"
    assert satbench_leftovers() == []
