"""An experiment's capture decrypts with the TLS keys it kept
(``artefacts = ["pcap", "keylog"]``): tshark reads the HTTP requests inside
TLS over TCP and the STREAM frames inside QUIC, from both stacks; without
the keys it reads none of them."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.helpers import PARALLEL, run_cli

pytestmark = pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark (scripts/test installs it)")


def _tshark(pcap: Path, keys: Path | None, fields: list[str], filt: str) -> list[str]:
    argv = ["tshark", "-r", str(pcap), "-Y", filt, "-T", "fields", *[x for f in fields for x in ("-e", f)]]
    if keys is not None:
        argv[1:1] = ["-o", f"tls.keylog_file:{keys}"]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return [line for line in p.stdout.splitlines() if line.strip()]


def test_an_experiments_capture_decrypts_with_its_keys(tmp_path: Path) -> None:
    exp = tmp_path / "keylog.toml"
    exp.write_text('[experiment]\nname = "keylog"\nseed = 1\ntimeout_s = 60\nartefacts = ["pcap", "keylog"]\n'
                   '[factors]\nlink = "geo"\npage = "single-10k"\nclient = "loader"\n'
                   '[[scenario]]\nname = "tcp"\nprotocol = ["h1", "h2"]\n'
                   '[[scenario]]\nname = "quic"\nprotocol = "h3"\nquic_stack = ["quiche", "quinn"]\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), *PARALLEL, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    rows = sqlite3.connect(db).execute("SELECT key, json_extract(factors, '$.protocol'), status FROM trials").fetchall()
    assert len(rows) == 4 and all(r[2] == "valid" for r in rows), rows
    for key, proto, _ in rows:
        art = tmp_path / "artefacts" / "keylog" / key
        keys, pcap = art / "tls-keys.log", art / "pcap" / "link" / "terminal.pcap"
        assert keys.stat().st_size > 0 and pcap.exists(), key
        if proto == "h3":
            stream = "quic.stream.stream_id"
            assert len(_tshark(pcap, keys, [stream], stream)) >= 3, (key, proto)
            assert not _tshark(pcap, None, [stream], stream), (key, proto)
        else:
            field, filt = (("http.request.uri", "http.request") if proto == "h1"
                           else ("http2.header.value", "http2.type == 1"))
            seen = " ".join(_tshark(pcap, keys, [field], filt))
            assert "/single-10k/img1.jpg" in seen, (key, proto, seen)
            assert not _tshark(pcap, None, [field], filt), (key, proto)
