"""Server options, defined once: satbench-server's flags come from the same
definition as the CLI's flags and the experiment keys, and every flag passed
is one the binary documents."""

from __future__ import annotations

from satbench import prereq
from satbench.endpoints.options import ServerOptions, experiment_keys, server_argv


def test_the_binary_flags_follow_the_definition() -> None:
    assert server_argv(ServerOptions()) == ["--quic-stack", "quinn"]
    o = ServerOptions(h3=False, tfo=True, resumption=False, zero_rtt=False, pacing=False, sndbuf=5000,
                      quic_max_data=99_999, tcp_initcwnd=30, keylog=True, quic_stack="quiche")
    argv = server_argv(o)
    assert argv == ["--no-h3", "--tfo", "--no-resumption", "--no-0rtt", "--no-pacing", "--sndbuf", "5000",
                    "--quic-stack", "quiche", "--quic-max-data", "99999"]
    # The route's initial window and the key log are not the binary's flags.
    assert "--tcp-initcwnd" not in argv and "--keylog" not in argv
    usage = (prereq.REPO / "crates" / "server" / "src" / "main.rs").read_text()
    for flag in (a for a in argv if a.startswith("--")):
        assert f"[{flag}" in usage, flag
    assert "tfo" in experiment_keys() and "keylog" not in experiment_keys()
