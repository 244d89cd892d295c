"""Protocol overhead as the emulator splits it, over real traffic: one object
fetched in cleartext HTTP/1.1, over TLS (HTTP/2) and over QUIC (HTTP/3), each
on a fresh testbed; the parts of each direction add up to the bytes offered,
the handshake bytes are where the protocol has a handshake and nowhere else,
and the payload is at least the object. Then a study: the trial's metrics and
the report's "Where the bytes went"."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.endpoints import ca
from satbench.endpoints.loader import loader_binary
from satbench.endpoints.options import ServerOptions
from satbench.endpoints.satbench_server import SatbenchServer as Server
from satbench.model import OVERHEAD_PARTS

from ..helpers import run_cli

OBJECT = "/single-500k/img1.jpg"


def fetch(generated_pages: Any, tmp_path: Path, how: str) -> tuple[dict[str, Any], int]:
    out, manifests = generated_pages
    size = (out / OBJECT.lstrip("/")).stat().st_size
    cert = str(ca.ensure().cert)
    argv = {"cleartext": ["curl", "-sS", "-o", "/dev/null", f"http://server.test{OBJECT}"],
            "tls": ["curl", "-sS", "-o", "/dev/null", "--cacert", cert, "--http2", f"https://server.test{OBJECT}"],
            "quic": [str(loader_binary()), f"https://server.test{OBJECT}", "--protocol", "h3", "--single",
                     "--cacert", cert]}[how]
    with Testbed(TestbedSpec(link=load_profile("wire", ["delay_ms=5"]), seed=1)) as tb:
        with Server(out, tmp_path, ServerOptions(), cc="cubic", host=tb.server):
            p = tb.client.run(argv, capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr[-2000:]
    assert tb.link_stats is not None
    return tb.link_stats, size


@pytest.mark.parametrize("how", ["cleartext", "tls", "quic"])
def test_the_parts_add_up_and_handshakes_are_where_the_protocol_has_one(generated_pages: Any, tmp_path: Path,
                                                                        how: str) -> None:
    stats, size = fetch(generated_pages, tmp_path, how)
    fwd, ret = stats["forward"]["overhead"], stats["return"]["overhead"]
    for name in ("forward", "return"):
        d = stats[name]
        o = d["overhead"]
        assert sum(o[k] for k in OVERHEAD_PARTS) == d["offered"]["bytes"], (name, o, d["offered"])
        # Only what is neither TCP nor UDP: an ICMP port-unreachable at most, when a packet reaches a
        # socket already closed.
        assert o["other"] <= 2 * 576, o
        # Every packet has an IP header of 20 bytes (IPv4, no options).
        assert o["ip_header"] == 20 * d["offered"]["packets"], (name, o, d["offered"])
    # P2 (../shared/STUDIES.md): what the link carries beyond the object is at least the TCP/IP header
    # floor, 40 bytes per 1460 of payload (about 2.7 %), whatever the protocol.
    both = stats["forward"]["offered"]["bytes"] + stats["return"]["offered"]["bytes"]
    assert (both - size) / size >= 40 / 1460, (both, size)
    if how == "cleartext":
        assert fwd["tls_handshake"] == ret["tls_handshake"] == fwd["tls_record_overhead"] == 0
        assert fwd["quic_handshake"] == fwd["quic_application"] == 0
        # Nothing lost on this link: the payload is the object and one HTTP/1.1 response head
        # (status line and satbench-server's headers, a few hundred bytes), sent once.
        assert fwd["tcp_retransmitted"] == 0 and 100 <= fwd["tcp_payload"] - size <= 600, (fwd, size)
        # Every segment carries the TCP header with the timestamp option (32 bytes); the SYN-ACK has
        # MSS, SACK-permitted and window scale too (40): nothing else.
        n = stats["forward"]["offered"]["packets"]
        assert fwd["transport_header"] == 32 * n + 8, (fwd, n)
        # Full-sized segments carry 1448 bytes: the data needs at least size / 1448 of them.
        assert n - fwd["pure_acks"] >= size / 1448
    elif how == "tls":
        # TLS 1.3 encrypts its handshake after the ServerHello: from the link, the handshake is the
        # ServerHello (and ChangeCipherSpec) forward and the ClientHello back; the rest, certificate
        # chain included, is in encrypted records like the application's.
        assert 90 <= fwd["tls_handshake"] < 1000 and ret["tls_handshake"] > 200, (fwd, ret)
        assert fwd["tls_application"] + fwd["tcp_retransmitted"] >= size
        # At least one AEAD tag and header per 16 KiB record.
        assert fwd["tls_record_overhead"] >= (size // 16384) * 22, fwd
        assert fwd["quic_handshake"] == fwd["quic_application"] == 0
    else:
        assert fwd["quic_handshake"] > 1000 and ret["quic_handshake"] >= 1200, (fwd, ret)  # padded Initial
        assert fwd["quic_application"] >= size
        assert fwd["tls_handshake"] == fwd["tcp_payload"] == fwd["transport_header"] % 8 == 0
        assert fwd["pure_acks"] == ret["pure_acks"] == 0
    if how != "quic":
        assert ret["pure_acks"] > 0 and fwd["syn_fin_rst"] >= 1 and ret["syn_fin_rst"] >= 1, (fwd, ret)


def test_a_study_stores_the_parts_and_the_report_draws_them(tmp_path: Path) -> None:
    exp = tmp_path / "oh.toml"
    exp.write_text('[experiment]\nname = "oh"\nseed = 1\ntimeout_s = 60\n[factors]\nlink = "lan"\n'
                   'protocol = ["h1", "h3"]\npage = "uniform-100k"\nclient = "loader"\n')
    db = tmp_path / "oh.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    con = sqlite3.connect(db)
    try:
        trials = con.execute("SELECT id, status, reason, factors FROM trials").fetchall()
        assert [t[1] for t in trials] == ["valid", "valid"], trials
        for tid, _, _, factors in trials:
            m = dict(con.execute("SELECT name, value FROM metrics WHERE trial_id = ?", (tid,)).fetchall())
            page = m["page_bytes"]
            if '"h1"' in factors:
                assert m["oh_fwd_tls_handshake"] > 0 and m["oh_fwd_quic_handshake"] == 0
                assert m["oh_fwd_tls_application"] >= page
            else:
                assert m["oh_fwd_quic_handshake"] > 0 and m["oh_fwd_tls_handshake"] == 0
                assert m["oh_fwd_quic_application"] >= page
            # Bytes offered are at least those delivered (the LAN profile loses nothing: equal).
            offered = sum(m[f"oh_fwd_{k}"] for k in OVERHEAD_PARTS)
            assert offered == m["wire_bytes_forward"], (offered, m["wire_bytes_forward"])
            # P2: the stored overhead is above the TCP/IP header floor (40 bytes per 1460).
            assert m["overhead_pct"] >= 100 * 40 / 1460, m["overhead_pct"]
    finally:
        con.close()
    out = tmp_path / "report"
    p = run_cli("report", "--db", str(db), "--out", str(out), timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    page = (out / "index.html").read_text()
    assert "Where the bytes went" in page and "TLS and QUIC handshakes" in page
    assert list((out / "figures").glob("*overhead-parts-*.svg"))
