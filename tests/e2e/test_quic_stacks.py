"""Both QUIC stacks (quiche, quinn) through real namespaces and the emulated
link: each serves HTTP/3 to the loader and to Chromium and every trial
records which stack and congestion control served it; the windows each
side advertises are the ones asked for (read from the wire: the server's
qlog, the loader's received transport parameters); a tiny flow-control
window makes a transfer flow-control limited, a large one leaves it to
congestion control; no stored load is faster than its physical bound."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.endpoints.options import ServerOptions
from satbench.endpoints.satbench_server import SatbenchServer
from satbench.results import qlog

from ..helpers import PARALLEL, client_json, run_cli


def trials(db: Path) -> list[dict[str, Any]]:
    con = sqlite3.connect(db)
    rows = con.execute("SELECT id, factors, status, reason, env, server_summary FROM trials ORDER BY id").fetchall()
    out = []
    for tid, factors, status, reason, env, summary in rows:
        m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
        protos = {p for (p,) in con.execute("SELECT DISTINCT protocol FROM objects WHERE trial_id = ? AND url LIKE "
                                            "'%server.test/%' AND url NOT LIKE '%favicon%'", (tid,))}
        out.append({"f": json.loads(factors), "status": status, "reason": reason, "env": json.loads(env),
                    "server": json.loads(summary or "{}"), "m": m, "protocols": protos})
    con.close()
    return out


def assert_within_bounds(ts: list[dict[str, Any]]) -> None:
    """No stored load beats its trial's physical lower bound."""
    for t in ts:
        assert t["m"].get("lower_bound_ms", 0) > 0, t
        for name in ("plt_ms", "last_object_ms"):
            if t["m"].get(name) is not None:
                assert t["m"][name] >= t["m"]["lower_bound_ms"], (name, t["f"], t["m"])


def test_both_stacks_serve_h3_to_the_loader_and_chromium(tmp_path: Path) -> None:
    exp = tmp_path / "stacks.toml"
    # The LAN: what is asserted is which stack and congestion control served, not how long it took.
    exp.write_text('[experiment]\nname = "stacks"\nseed = 1\ntimeout_s = 60\n[factors]\nlink = "lan"\n'
                   'protocol = "h3"\npage = "uniform-100k"\nclient = ["loader", "chromium"]\n'
                   'cc = ["cubic", "bbr"]\nquic_stack = ["quiche", "quinn"]\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    ts = trials(db)
    assert len(ts) == 8
    for t in ts:
        f, srv = t["f"], t["server"]
        assert t["status"] == "valid", (f, t["reason"])
        assert srv["quic_stacks"] == [f["quic_stack"]] and srv["cc"] == [f["cc"]], (f, srv)
        assert t["protocols"] == {"h3"}, (f, t["protocols"])
        impl = " ".join(srv["cc_impl"])
        if f["quic_stack"] == "quinn":
            assert "quinn" in impl and (("experimental" in impl) == (f["cc"] == "bbr")), impl
        if f["client"] == "loader":
            assert t["env"]["client"]["quic_stack"] == f["quic_stack"]
    assert_within_bounds(ts)


@pytest.mark.parametrize("server_stack, loader_stack", [("quiche", "quinn"), ("quinn", "quiche"),
                                                       ("quiche", "quiche")])
def test_the_windows_advertised_are_the_ones_asked_for(generated_pages, tmp_path: Path, server_stack: str,
                                                       loader_stack: str) -> None:
    out, _ = generated_pages
    server_w, stream_w, loader_w = 3_000_000, 1_500_000, 200_000
    opts = ServerOptions(quic_stack=server_stack, quic_max_data=server_w, quic_max_stream_data=stream_w)
    with Testbed(TestbedSpec(link=load_profile("wire", ["delay_ms=10"]), seed=1)) as tb:
        with SatbenchServer(out, tmp_path / "logs", opts, cc="cubic", host=tb.server, telemetry=True):
            d = client_json(tb, "load", "https://server.test/uniform-100k/", "h3", "--quic-stack", loader_stack,
                            "--quic-window", str(loader_w))
    assert d["valid_n"] == 1 and d["quic_stack"] == loader_stack
    assert (d["quic_max_data"], d["quic_max_stream_data"], d["quic_fc_fixed"]) == (loader_w, loader_w, True)
    if server_stack == "quiche":
        # The server's qlog: what it advertised, and what the loader's stack advertised to it.
        [q] = qlog.read_dir(tmp_path / "logs" / "qlog")
        local, remote = q.parameters("local"), q.parameters("remote")
        assert local is not None and remote is not None
        assert (local["initial_max_data"], local["initial_max_stream_data_bidi_local"]) == (server_w, stream_w)
        assert (remote["initial_max_data"], remote["initial_max_stream_data_bidi_local"]) == (loader_w, loader_w)
    if loader_stack == "quiche":
        # The loader's received transport parameters: the server's windows, whichever stack sent them.
        [conn] = d["clients"][0]["connections"]
        pp = conn["peer_params"]
        assert (pp["initial_max_data"], pp["initial_max_stream_data_bidi_local"]) == (server_w, stream_w), pp


def test_a_tiny_window_limits_by_flow_control_a_large_one_by_congestion_control(tmp_path: Path) -> None:
    # 20 Mbit/s, 50 ms RTT: 16 KB per round trip is 2.6 Mbit/s; the stacks' own windows do not limit.
    link = tmp_path / "bottleneck.toml"
    link.write_text('name = "bottleneck"\ndescription = "20 Mbit/s, 50 ms RTT"\n'
                    '[forward]\nrate_mbps = 20\ndelay_ms = 25\nqueue_ms = 50\n'
                    '[return]\nrate_mbps = 20\ndelay_ms = 25\nqueue_ms = 50\n')
    exp = tmp_path / "fc.toml"
    exp.write_text(f'[experiment]\nname = "fc"\nseed = 1\ntimeout_s = 60\nartefacts = ["server"]\n[factors]\n'
                   f'link = "{link}"\nprotocol = "h3"\npage = "bulk:1MB"\nclient = "loader"\ncc = "cubic"\n'
                   'quic_stack = ["quiche", "quinn"]\nquic_window = [16384, "stack"]\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), *PARALLEL, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    ts = trials(db)
    assert len(ts) == 4
    for t in ts:
        f, m = t["f"], t["m"]
        assert t["status"] == "valid", (f, t["reason"])
        shares = {k[8:-4]: v for k, v in m.items() if k.startswith("limited_") and k.endswith("_pct")}
        if f["quic_window"] == 16384:
            assert t["env"]["client"]["quic_max_data"] == 16384
            assert shares["receive_window"] > 50, (f, shares)
        else:
            # The congestion controller decides (quinn paces at 5/4 of its window per RTT: its pacer
            # is the window spread out), never flow control.
            assert shares["receive_window"] < 5, (f, shares)
            assert shares["cwnd"] + shares["pacing"] > 40, (f, shares)
        assert t["server"]["connections_limited"], t["server"]
    tiny = [t["m"]["plt_ms"] for t in ts if t["f"]["quic_window"] == 16384]
    large = [t["m"]["plt_ms"] for t in ts if t["f"]["quic_window"] == "stack"]
    assert min(tiny) > 2 * max(large)
    assert_within_bounds(ts)
