"""A terrestrial link between the gateway and the servers: its delay adds to
the satellite's for the servers but not for the gateway; its loss drops
packets there only; with PEPs, the server's TCP sees the terrestrial round
trip; a study stores its counters."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.endpoints.options import ServerOptions
from satbench.endpoints.satbench_server import SatbenchServer
from satbench.path.pep import Pep

from ..helpers import run_cli, satbench_leftovers, trial


def _avg_rtt(out: str) -> float:
    m = re.search(r"= [\d.]+/([\d.]+)/", out)
    assert m, out
    return float(m.group(1))


@pytest.mark.serial
def test_the_terrestrial_delay_is_behind_the_gateway_only() -> None:
    with Testbed(TestbedSpec(link=load_profile("geo"), terrestrial=load_profile("terrestrial"), seed=1)) as tb:
        assert tb.edge is not None
        to_server = tb.client.run(["ping", "-c", "4", "-i", "0.3", "server.test"], capture_output=True, text=True)
        to_gateway = tb.client.run(["ping", "-c", "4", "-i", "0.3", "gateway.test"], capture_output=True, text=True)
        gw_to_server = tb.gateway.run(["ping", "-c", "4", "-i", "0.2", "server.test"], capture_output=True, text=True)
    assert 548 <= _avg_rtt(to_server.stdout) <= 560, to_server.stdout   # 530 + 20
    assert 528 <= _avg_rtt(to_gateway.stdout) <= 540, to_gateway.stdout
    assert 19 <= _avg_rtt(gw_to_server.stdout) <= 25, gw_to_server.stdout
    assert tb.terrestrial_stats is not None and tb.terrestrial_stats["forward"]["delivered"]["packets"] >= 8
    assert satbench_leftovers() == []


def test_behind_peps_the_server_sees_the_terrestrial_round_trip(generated_pages: Any, tmp_path: Path) -> None:
    out, _ = generated_pages
    pep = Pep("both", {}, trial(pep="both", terrestrial="terrestrial"))
    with Testbed(TestbedSpec(link=load_profile("geo"), terrestrial=load_profile("terrestrial"), seed=1)) as tb:
        with SatbenchServer(out, tmp_path / "server", ServerOptions(), cc="cubic", host=tb.server) as srv:
            with pep.start(tb, tmp_path):
                p = tb.client.run(["curl", "-sS", "-o", "/dev/null", "http://server.test/single-500k/img1.jpg"],
                                  capture_output=True, text=True, timeout=60)
                assert p.returncode == 0, p.stderr
            rtts = [s["srtt_us"] / 1e3 for s in srv.tcp_info() if s.get("srtt_us")]
    assert rtts and 18 <= min(rtts) <= 40, rtts  # the gateway PEP is 20 ms away, the client 550 ms
    assert pep.summary()["gateway"]["summary"]["accepted"] == 1


def test_loss_on_the_terrestrial_part_only(tmp_path: Path) -> None:
    exp = tmp_path / "terr.toml"
    exp.write_text('[experiment]\nname = "terr"\nseed = 1\ntimeout_s = 60\n[factors]\nlink = "wire"\n'
                   '"link.delay_ms" = 20\nterrestrial = "terrestrial-lossy"\nprotocol = "h2"\n'
                   'page = "uniform-2m"\nclient = "loader"\n')
    db = tmp_path / "terr.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(db)
    try:
        [(tid, status, reason, env)] = con.execute("SELECT id, status, reason, env FROM trials").fetchall()
        m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
    finally:
        con.close()
    assert status == "valid", reason
    # About 1 % of some 1,400 data packets: a loss-free draw has probability under 1e-6.
    assert m["terrestrial_dropped_fwd"] >= 1 and m["link_drops"] == 0, m
    t = json.loads(env)["path"]["terrestrial"]
    assert t["link"] == "terrestrial-lossy" and t["forward"]["dropped"]["loss"]["packets"] >= 1
