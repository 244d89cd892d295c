"""Facts the Rust binaries own, read on the Python side: each test holds the
Python copy equal to what the owner says (``--describe``), so a change on
one side fails here instead of drifting. No root needed."""

from __future__ import annotations

import json
import subprocess

from satbench.endpoints.satbench_server import server_binary
from satbench.results.report import LIMITS


def test_the_report_shows_exactly_the_servers_classes_of_what_limited_a_sender() -> None:
    out = subprocess.run([str(server_binary()), "--describe"], capture_output=True, text=True, timeout=30, check=True)
    described = json.loads(out.stdout)
    assert tuple(described["limited_by"]) == LIMITS
