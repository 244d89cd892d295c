"""scripts/setup's BoringSSL cache, with a stand-in cargo that records what it was asked and, asked to
export BoringSSL (BORING_BSSL_INSTALL_DIR), writes the files boring-sys would: built once per cache,
linked by every clone through .cargo/config.toml with an absolute path, an incomplete copy rebuilt, a
user's own config or an unwritable cache leaving BoringSSL to the clone's own build."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from satbench import prereq

REPO = prereq.REPO

CARGO = """#!/bin/bash
case "$1" in
  --version) echo "cargo 1.95.0 (stand-in)"; exit 0 ;;
  -vV) echo "host: x86_64-unknown-linux-gnu"; exit 0 ;;
esac
echo "$* | ${BORING_BSSL_INSTALL_DIR:-}" >> "$CARGO_LOG"
if [ -n "${BORING_BSSL_INSTALL_DIR:-}" ]; then
  [ -n "${FAIL_EXPORT:-}" ] && exit 1
  mkdir -p "$BORING_BSSL_INSTALL_DIR/lib" "$BORING_BSSL_INSTALL_DIR/include/openssl"
  touch "$BORING_BSSL_INSTALL_DIR/lib/libcrypto.a" "$BORING_BSSL_INSTALL_DIR/lib/libssl.a"
fi
"""

pytestmark = pytest.mark.skipif(not all(shutil.which(t) for t in ("cmake", "cc", "c++")),
                                 reason="the cache needs cmake and a C and C++ compiler")


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup", root / "scripts" / "setup")
    shutil.copy(REPO / "Cargo.lock", root / "Cargo.lock")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "cargo").write_text(CARGO)
    (tmp_path / "bin" / "cargo").chmod(0o755)
    return root


def _setup(root: Path, cache: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    log = root.parent / "cargo.log"
    log.unlink(missing_ok=True)
    p = subprocess.run(["bash", "scripts/setup", "--only", "rust"], cwd=root, capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PATH": f"{root.parent / 'bin'}:{os.environ['PATH']}",
                                        "HOME": str(root.parent), "CARGO_LOG": str(log),
                                        "SATBENCH_BUILD_CACHE": cache, **env})
    return p, log.read_text().splitlines() if log.exists() else []


def _linked(root: Path) -> Path | None:
    cfg = root / ".cargo" / "config.toml"
    if not cfg.exists():
        return None
    line = next(x for x in cfg.read_text().splitlines() if x.startswith("BORING_BSSL_PATH"))
    return Path(line.split('"')[1])


def test_built_once_then_linked_by_every_clone_with_an_absolute_path(clone: Path) -> None:
    p, calls = _setup(clone, "cache")  # relative: boring-sys's build script runs elsewhere
    assert p.returncode == 0, p.stderr
    assert len(calls) == 2 and "-p boring-sys" in calls[0] and calls[0].split(" | ")[1].startswith("/"), calls
    linked = _linked(clone)
    assert linked is not None and linked.is_absolute() and (linked / "lib" / "libssl.a").exists()
    assert linked.parent == (clone / "cache").resolve()
    assert not list(linked.parent.glob(".boringssl-*"))
    p, calls = _setup(clone, "cache")
    assert p.returncode == 0 and calls == ["build --release --locked --quiet | "], calls  # a cache hit
    assert _linked(clone) == linked


def test_an_incomplete_copy_is_built_again(clone: Path) -> None:
    _setup(clone, str(clone.parent / "c"))
    linked = _linked(clone)
    assert linked is not None
    (linked / "lib" / "libssl.a").unlink()
    p, calls = _setup(clone, str(clone.parent / "c"))
    assert p.returncode == 0 and "-p boring-sys" in calls[0], calls
    assert (linked / "lib" / "libssl.a").exists() and _linked(clone) == linked


def test_a_failed_export_leaves_no_temporary_folder_and_fails(clone: Path) -> None:
    p, _ = _setup(clone, str(clone.parent / "c"), FAIL_EXPORT="1")
    assert p.returncode != 0
    assert not list((clone.parent / "c").glob(".boringssl-*")) and _linked(clone) is None


def test_a_users_config_or_an_unwritable_cache_leaves_boringssl_to_the_clone(clone: Path) -> None:
    (clone.parent / "a-file").write_text("")
    p, calls = _setup(clone, str(clone.parent / "a-file" / "cache"))
    assert p.returncode == 0 and "not writable" in p.stdout and calls == ["build --release --locked --quiet | "]
    assert _linked(clone) is None
    (clone / ".cargo").mkdir()
    (clone / ".cargo" / "config.toml").write_text("[build]\njobs = 1\n")
    p, calls = _setup(clone, str(clone.parent / "c"))
    assert p.returncode == 0 and "is not setup's" in p.stdout and len(calls) == 1
    assert (clone / ".cargo" / "config.toml").read_text() == "[build]\njobs = 1\n"
