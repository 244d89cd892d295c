"""Knobs as factors: a kernel setting and an offload set inside the
testbed's namespaces, in effect during the trial (read back there), and the
host's own values unchanged."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from ..helpers import run_cli

KNOB = "net.ipv4.tcp_slow_start_after_idle"


def test_knobs_are_in_effect_and_the_host_is_untouched(tmp_path: Path) -> None:
    host_value = Path("/proc/sys/net/ipv4/tcp_slow_start_after_idle").read_text().strip()
    exp = tmp_path / "k.toml"
    exp.write_text('[experiment]\nname = "knobs"\nseed = 1\ntimeout_s = 30\n[factors]\nlink = "wire"\n'
                   'protocol = "h2"\npage = "blank"\nclient = "loader"\n'
                   f'"server.sysctl.{KNOB}" = [0, 1]\n"client.offload.gro" = ["on", "off"]\n'
                   '"server.offload.tso" = "off"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(db)
    rows = con.execute("SELECT factors, env, status FROM trials").fetchall()
    con.close()
    assert len(rows) == 4
    for factors, env, status in rows:
        f, knobs = json.loads(factors), json.loads(env)["knobs"]
        assert status == "valid"
        assert knobs[f"server.sysctl.{KNOB}"] == {"s1": str(f[f"server.sysctl.{KNOB}"])}
        assert knobs["client.offload.gro"] == {"c1": f["client.offload.gro"]}
        assert knobs["server.offload.tso"] == {"s1": "off"}
        assert json.loads(env)["knobs_after_load"] == knobs  # still in effect once the page had loaded
    assert Path("/proc/sys/net/ipv4/tcp_slow_start_after_idle").read_text().strip() == host_value


def test_a_setting_that_is_not_the_namespaces_own_is_refused(tmp_path: Path) -> None:
    exp = tmp_path / "k.toml"
    head = '[experiment]\nname = "k"\n[factors]\nlink = "wire"\nprotocol = "h2"\npage = "blank"\nclient = "loader"\n'
    for line, why in (('"server.sysctl.net.ipv4.ip_forward" = 1', "only net.ipv4.tcp_* and net.core.*"),
                      ('"server.sysctl.net.ipv4.tcp_nosuch" = 1', "no such setting in a network namespace"),
                      # On the host, but the host's only: a namespace cannot set it.
                      ('"client.sysctl.net.core.busy_poll" = 50', "no such setting in a network namespace")):
        exp.write_text(head + line + "\n")
        p = run_cli("plan", str(exp))
        assert p.returncode == 2, p.stderr
        field = line.split("=")[0].strip().strip('"')
        [msg] = p.stderr.strip().splitlines()
        assert f"{exp}:8: factors.{field}: " in msg and why in msg, msg
