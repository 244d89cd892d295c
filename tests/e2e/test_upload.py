"""Uploads (page = "upload:SIZE"): the loader POSTs incompressible bytes to
satbench-server's sink over the satellite's return link. Every byte reaches
the server (its access log counts them, the link's return direction carries
them); constant return capacity (CRA) beats volume-based bandwidth on
demand (VBDC), whose every window waits for a request and a grant; an upload
from a browser or to a third-party server is refused before anything runs."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from ..helpers import PARALLEL, run_cli

SIZE = 200_000


def test_an_upload_reaches_the_sink_and_vbdc_is_slower_than_cra(tmp_path: Path) -> None:
    exp = tmp_path / "up.toml"
    exp.write_text('[experiment]\nname = "up"\nseed = 1\ntimeout_s = 90\norder = "sequential"\n'
                   'artefacts = ["server"]\n[factors]\nlink = ["geo-cra", "geo-vbdc"]\nprotocol = ["h2", "h3"]\n'
                   f'page = "upload:{SIZE}"\nclient = "loader"\n')
    db = tmp_path / "up.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), *PARALLEL, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(db)
    try:
        rows = con.execute("SELECT id, factors, status, reason, artefacts FROM trials").fetchall()
        metrics = {tid: dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
                   for tid, *_ in rows}
    finally:
        con.close()
    assert len(rows) == 4
    upload_ms: dict[tuple[str, str], float] = {}
    for tid, factors, status, reason, art in rows:
        f = json.loads(factors)
        m = metrics[tid]
        assert status == "valid", reason
        assert m["bytes_sent"] == SIZE, m
        # The server's own count, from its access log: one POST with every byte.
        log = [json.loads(line) for line in (Path(art) / "server" / "access.jsonl").read_text().splitlines()]
        posts = [r for r in log if r.get("type") == "request"]
        assert [(r["method"], r["path"], r["status"], r["request_bytes"]) for r in posts] == \
            [("POST", "/upload", 200, SIZE)], posts
        # The link's return direction carried the payload (TLS records or QUIC packets).
        carried = m["oh_ret_tls_application"] + m["oh_ret_quic_application"]
        assert SIZE <= carried <= SIZE * 1.1, m
        # Physics: no faster than the handshakes plus a round trip of the 530 ms path.
        assert m["upload_ms"] >= 530 and m["plt_ms"] >= m["lower_bound_ms"], m
        upload_ms[(f["link"], f["protocol"])] = m["upload_ms"]
    for proto in ("h2", "h3"):
        # VBDC asks for every window and waits about a second for the grant; CRA does not ask.
        assert upload_ms[("geo-vbdc", proto)] > upload_ms[("geo-cra", proto)] + 1000, upload_ms


def test_an_upload_needs_the_loader_and_satbench_server(tmp_path: Path) -> None:
    for extra, culprit in (('client = "chromium"\n', "page"), ('client = "loader"\nserver = "nginx"\n', "page")):
        exp = tmp_path / "bad.toml"
        exp.write_text('[experiment]\nname = "bad"\n[factors]\nlink = "geo-cra"\nprotocol = "h2"\n'
                       'page = "upload:1M"\n' + extra)
        p = run_cli("plan", str(exp), timeout=60)
        assert p.returncode == 2, p.stdout + p.stderr
        [line] = p.stderr.strip().splitlines()
        assert f"{exp}:6: {culprit}:" in line, line
