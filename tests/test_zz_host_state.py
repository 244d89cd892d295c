"""Runs last: after every test above, the host namespace is as it was."""

from __future__ import annotations

import pytest

from .conftest import host_state, satbench_leftovers

pytestmark = pytest.mark.e2e


def test_host_state_unchanged(initial_host_state: dict[str, str]) -> None:
    now = host_state()
    for k, v in initial_host_state.items():
        assert now[k] == v, f"host {k} changed"
    assert satbench_leftovers() == []
