"""Other users' traffic on the trial's link, from hosts of their own: a bulk
TCP download (iperf3) takes its share of a 10 Mbit/s link and the trial's
page takes longer for it; video-like and web-like downloads (curl against
satbench-server; the video adapts over a bitrate ladder) run through the load; what they carried is stored, and the
link's counters, which hold their bytes too, are not taken as the trial's."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

from ..helpers import PARALLEL, run_cli


def test_cross_traffic_shares_the_link_with_the_trial(tmp_path: Path) -> None:
    exp = tmp_path / "cross.toml"
    exp.write_text(
        '[experiment]\nname = "cross"\nseed = 1\ntimeout_s = 60\n[factors]\nlink = "lan"\nclient = "loader"\n'
        'protocol = "h2"\npage = "uniform-2m"\n'
        'cross = ["none", { kind = "bulk", lead_s = 2 }, { kind = "video", bitrate_mbps = [1, 2, 4, 20], '
        'segment_s = 1, lead_s = 2 }, { kind = "web", rate_per_s = 4, size_kb = 200, lead_s = 2 }]\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), *PARALLEL, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    con = sqlite3.connect(db)
    by: dict[str, dict] = {}
    for tid, factors, status, reason, env in con.execute("SELECT id, factors, status, reason, env FROM trials"):
        f = json.loads(factors)
        m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
        assert status == "valid", (f, reason)
        kind = f.get("cross", "none")
        by[kind if isinstance(kind, str) else kind["kind"]] = {"m": m, "env": json.loads(env)}
    con.close()
    alone, bulk = by["none"]["m"], by["bulk"]["m"]
    # 2 MB alone on 10 Mbit/s: about 1.7 s; beside a bulk download it gets about half the link.
    assert bulk["plt_ms"] > 1.3 * alone["plt_ms"], (bulk["plt_ms"], alone["plt_ms"])
    assert 2 < bulk["cross_mbps"] < 10, bulk["cross_mbps"]
    # The link's counters hold the cross traffic's bytes too: no wire bytes or overhead are the trial's.
    assert "overhead_pct" in alone and "overhead_pct" not in bulk and "wire_bytes" not in bulk
    for kind in ("video", "web"):
        m = by[kind]["m"]
        assert m["cross_bytes"] > 100_000 and m["plt_ms"] > alone["plt_ms"], (kind, m)
        assert by[kind]["env"]["path"]["cross"]["fetches"] >= 1
    # The video's ladder: its first segment at the lowest rung, then up as the link affords, never to
    # 20 Mbit/s on a 10 Mbit/s link.
    rungs = by["video"]["env"]["path"]["cross"]["rungs"]
    assert rungs[0] == 1 and max(rungs) > 1 and 20 not in rungs, rungs


def test_the_shell_runs_a_command_beside_cross_traffic() -> None:
    p = run_cli("shell", "--link", "lan", "--cross", "bulk", "--", "sleep", "2", timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    m = re.search(r"cross traffic bulk: ([\d.]+) Mbit/s", p.stderr)
    assert m and float(m.group(1)) > 5, p.stderr[-1000:]  # alone on the link, the download fills it


def test_over_geo_a_bulk_flow_slows_the_load_and_fq_codel_protects_it(tmp_path: Path) -> None:
    # GEO's drop-tail buffer is one bandwidth-delay product (530 ms): a CUBIC bulk download that has
    # had 6 s to fill it makes every round trip of the page's load that much longer; FQ-CoDel serves
    # the page's connection from a queue of its own and keeps the bulk flow's short.
    exp = tmp_path / "geo.toml"
    exp.write_text('[experiment]\nname = "geo"\nseed = 1\ntimeout_s = 90\n[factors]\nlink = "geo"\n'
                   'client = "loader"\nprotocol = "h2"\npage = "uniform-500k"\ncc = "cubic"\n'
                   '[[trial]]\n"link.aqm" = "droptail"\n'
                   '[[trial]]\n"link.aqm" = "droptail"\ncross = { kind = "bulk", cc = "cubic", lead_s = 6 }\n'
                   '[[trial]]\n"link.aqm" = "fq_codel"\ncross = { kind = "bulk", cc = "cubic", lead_s = 6 }\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), *PARALLEL, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    con = sqlite3.connect(db)
    plt: dict[tuple[str, str], float] = {}
    for tid, factors, status, reason in con.execute("SELECT id, factors, status, reason FROM trials"):
        f = json.loads(factors)
        assert status == "valid", (f, reason)
        m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
        cross = "none" if f.get("cross", "none") == "none" else "bulk"
        plt[(cross, f["link.aqm"])] = m["plt_ms"]
        if cross == "bulk":
            assert m["cross_mbps"] > 1 and 0 < m["load_share"] < 1, m
    con.close()
    assert plt[("bulk", "droptail")] > 1.3 * plt[("none", "droptail")], plt
    assert plt[("bulk", "fq_codel")] < plt[("bulk", "droptail")], plt
