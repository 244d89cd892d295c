"""Bad input: one line naming the problem, exit code 2, nothing left behind."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ..helpers import SATBENCH, netns_now, run_cli, satbench_leftovers


def assert_one_line_error(p: subprocess.CompletedProcess[str], *words: str) -> None:
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.mark.serial
def test_unknown_profile() -> None:
    before = netns_now()
    p = run_cli("shell", "--link", "nosuch", "--", "true")
    assert_one_line_error(p, "nosuch", "unknown link profile")
    assert netns_now() == before and satbench_leftovers() == []


@pytest.mark.parametrize("override, words", [
    ("delay_ms=-3", ["--set delay_ms=-3", "delay_ms", "within 0 and 3600000, got -3"]),
    ("forward.rate_mbps=0", ["forward.rate_mbps", "from 0.001 to 1e+06 Mbit/s, got 0"]),
    ("return.rate_mbps=-1", ["return.rate_mbps", "got -1"]),
    ("loss=1.2", ["loss", "within 0 and 1"]),
    ("forward.loss=-0.5", ["forward.loss", "within 0 and 1"]),
])
def test_bad_values(override: str, words: list[str]) -> None:
    p = run_cli("shell", "--link", "geo", "--set", override, "--", "true")
    assert_one_line_error(p, *words)
    assert satbench_leftovers() == []


def test_bad_profile_file(tmp_path: Path) -> None:
    f = tmp_path / "bad.toml"
    f.write_text('name = "bad"\n[forward]\nrate_mbps = 10\n[return]\ndelay_ms = -1\n')
    p = run_cli("shell", "--link", str(f), "--", "true")
    assert_one_line_error(p, f"{f}:5:", "return.delay_ms")
    assert satbench_leftovers() == []


def test_malformed_trace(tmp_path: Path) -> None:
    (tmp_path / "x.trace").write_text("1\n2\nfoo\n")
    f = tmp_path / "t.toml"
    f.write_text('name = "t"\n[forward]\ntrace = "x.trace"\n')
    p = run_cli("shell", "--link", str(f), "--", "true")
    assert_one_line_error(p, f"{tmp_path / 'x.trace'}:3:", "foo")
    assert satbench_leftovers() == []


def test_not_root() -> None:
    # A user namespace without a mapping: uid 65534 with no privileges on the host, while
    # files stay readable as their owner (a checkout in a 0700 folder still imports).
    env = {**os.environ, "HOME": "/tmp"}
    p = subprocess.run(["unshare", "--user", *SATBENCH, "shell", "--link", "geo", "--", "true"],
                       capture_output=True, text=True, env=env)
    assert_one_line_error(p, "not root")
    assert satbench_leftovers() == []


def test_no_tun_device() -> None:
    # A private mount namespace in which /dev/net is empty: the TUN driver is absent there.
    p = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        'mount -t tmpfs none /dev/net && exec "$@"', "sh", *SATBENCH, "shell", "--link", "geo",
                        "--", "true"], capture_output=True, text=True)
    assert_one_line_error(p, "/dev/net/tun")
    assert satbench_leftovers() == []
