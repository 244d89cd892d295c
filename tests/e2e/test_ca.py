"""The test CA: private keys 0600 outside the repository, certificates for the
testbed's names, trusted by curl and by Chromium (through an NSS database)
over real TLS across the emulated link."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from satbench import Testbed, TestbedSpec, load_profile
from satbench.endpoints import ca
from satbench.prereq import REPO

from ..helpers import run_cli


@pytest.fixture(scope="module")
def the_ca(tmp_path_factory: pytest.TempPathFactory) -> ca.CA:
    return ca.ensure(tmp_path_factory.mktemp("ca"))


def test_keys_are_private_and_reused(the_ca: ca.CA) -> None:
    for k in (the_ca.key, the_ca.server_key):
        assert stat.S_IMODE(k.stat().st_mode) == 0o600
    before = the_ca.cert.read_bytes()
    assert ca.ensure(the_ca.dir).cert.read_bytes() == before


def test_default_location_is_outside_the_repository() -> None:
    assert REPO not in ca.ca_dir().resolve().parents


def test_chain_and_names(the_ca: ca.CA) -> None:
    v = subprocess.run(["openssl", "verify", "-CAfile", str(the_ca.cert), "-purpose", "sslserver",
                        str(the_ca.server_cert)], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
    text = subprocess.run(["openssl", "x509", "-noout", "-ext", "subjectAltName", "-in", str(the_ca.server_cert)],
                          capture_output=True, text=True).stdout
    for name in ("DNS:server.test", "DNS:s1.test", "DNS:s32.test", "IP Address:198.18.3.10"):
        assert name in text


def test_cli_shows_paths(tmp_path: Path) -> None:
    env = {**os.environ, "SATBENCH_CA_DIR": str(tmp_path / "ca")}
    p = run_cli("ca", "--nss-home", str(tmp_path / "home"), env=env)
    assert p.returncode == 0, p.stderr
    assert str(tmp_path / "ca" / "ca.key") in p.stdout
    assert "warning" in p.stderr and "accepts any certificate this CA signs" in p.stderr
    listed = subprocess.run(["certutil", "-L", "-d", f"sql:{tmp_path / 'home' / '.pki' / 'nssdb'}"],
                            capture_output=True, text=True).stdout
    assert "satbench test CA" in listed


@pytest.mark.e2e
def test_tls_through_the_link_is_trusted_by_curl_and_chromium(the_ca: ca.CA, tmp_path: Path) -> None:
    www = tmp_path / "www"
    www.mkdir()
    (www / "hello.html").write_text("<html><body><p id=x>hello from server.test</p></body></html>\n")
    home = ca.nss_home(tmp_path / "home", the_ca)
    with Testbed(TestbedSpec(link=load_profile("lan"), seed=1)) as tb:
        srv = tb.server.popen(["openssl", "s_server", "-quiet", "-accept", "443", "-tls1_3",
                               "-cert", str(the_ca.server_cert), "-key", str(the_ca.server_key), "-WWW"],
                              cwd=www, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                if tb.server.run(["ss", "-ltnH", "sport = :443"], capture_output=True, text=True).stdout.strip():
                    break
                time.sleep(0.05)
            ok = tb.client.run(["curl", "-sS", "--cacert", str(the_ca.cert), "https://server.test/hello.html"],
                               capture_output=True, text=True, timeout=30)
            assert ok.returncode == 0 and "hello from server.test" in ok.stdout, ok.stderr
            untrusted = tb.client.run(["curl", "-sS", "https://server.test/hello.html"], capture_output=True,
                                      text=True, timeout=30)
            assert untrusted.returncode == 60  # certificate problem: the system does not trust our CA
            chromium = shutil.which("chromium")
            assert chromium, "chromium is not installed (scripts/setup installs it)"
            argv = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", "https://server.test/hello.html"]
            trusted = tb.client.run(argv, capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(home)})
            assert "hello from server.test" in trusted.stdout, trusted.stderr[-500:]
            bare = tmp_path / "bare"
            bare.mkdir()
            refused = tb.client.run(argv[:-2] + [f"--user-data-dir={tmp_path / 'profile2'}", "--dump-dom",
                                                  "https://server.test/hello.html"],
                                    capture_output=True, text=True, timeout=60, env={**os.environ, "HOME": str(bare)})
            assert "hello from server.test" not in refused.stdout
        finally:
            srv.kill()
            srv.wait()


def test_renew_replaces_the_ca_and_what_it_signed_and_keys_stay_private(tmp_path: Path) -> None:
    env = {**os.environ, "SATBENCH_CA_DIR": str(tmp_path / "ca")}
    old = ca.ensure(tmp_path / "ca")
    before = old.cert.read_bytes()
    site_cert, site_key = ca.issue(["www.example.org"], old)
    os.chmod(old.key, 0o644)  # loosened by hand: the next use tightens it
    os.chmod(old.dir, 0o755)
    ca.ensure(old.dir)
    assert stat.S_IMODE(old.key.stat().st_mode) == 0o600 and stat.S_IMODE(old.dir.stat().st_mode) == 0o700
    p = run_cli("ca", "--renew", env=env)
    assert p.returncode == 0, p.stderr
    assert "renewed" in p.stdout
    assert old.cert.read_bytes() != before and not site_cert.exists() and not site_key.exists()
    v = subprocess.run(["openssl", "verify", "-CAfile", str(old.cert), str(old.server_cert)], capture_output=True,
                       text=True)
    assert v.returncode == 0, v.stdout + v.stderr
    for k in (old.key, old.server_key):
        assert stat.S_IMODE(k.stat().st_mode) == 0o600


def test_cluster_credentials_from_the_cli(tmp_path: Path) -> None:
    p = run_cli("ca", "--cluster", str(tmp_path / "cluster"), "--days", "30")
    assert p.returncode == 0, p.stderr
    for name in ("ca.pem", "scheduler.pem", "worker.pem", "client.pem"):
        assert (tmp_path / "cluster" / name).exists()
    for name in ("ca.key", "scheduler.key", "worker.key", "client.key"):
        assert stat.S_IMODE((tmp_path / "cluster" / name).stat().st_mode) == 0o600
    assert "distributed.comm.tls.worker.cert" in p.stdout
    again = run_cli("ca", "--cluster", str(tmp_path / "cluster"))
    assert again.returncode == 2 and again.stderr.count("\n") == 1 and "not an empty folder" in again.stderr
