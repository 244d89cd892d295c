"""scripts/setup: the Python environment from the lock, refused on a tampered hash; its arguments;
the optional parts a study needs.

Each test runs the repository's own setup script on a copy of the project's Python parts
(pyproject.toml, uv.lock, python/) in a temporary folder, with the pinned uv the
repository's set-up installed (its cache makes a second environment a matter of seconds)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from satbench import prereq

REPO = prereq.REPO
UV = REPO / "target" / "uv" / "bin" / "uv"

pytestmark = pytest.mark.skipif(not UV.exists(), reason="no target/uv: scripts/setup installs it")


def _project(root: Path) -> Path:
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup", root / "scripts" / "setup")
    for f in ("pyproject.toml", "uv.lock"):
        shutil.copy(REPO / f, root / f)
    shutil.copytree(REPO / "python", root / "python", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _setup(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(root / "scripts" / "setup"), *args], capture_output=True, text=True,
                          env={**os.environ, "SATBENCH_UV": str(UV), "UV_COMPILE_BYTECODE": "0"},
                          stdin=subprocess.DEVNULL, timeout=600)


def _installed(root: Path) -> dict[str, str]:
    out = subprocess.run([str(UV), "pip", "freeze", "--python", str(root / ".venv" / "bin" / "python")],
                         capture_output=True, text=True, check=True).stdout
    pins = {}
    for line in out.splitlines():
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.lower().replace("_", "-")] = version
    return pins


def test_setup_from_the_lock_installs_the_locks_versions(tmp_path):
    # Every package installed is at the lock's version and every locked one is installed: a second
    # environment from the same lock can only be the same.
    lock = {p["name"]: p["version"] for p in tomllib.loads((REPO / "uv.lock").read_text())["package"]}
    root = _project(tmp_path / "a")
    r = _setup(root, "--only", "python")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "setup: took" in r.stdout  # every step's duration is printed
    got = _installed(root)
    assert len(got) >= 50
    for name, version in got.items():
        assert lock.get(name) == version, (name, version, lock.get(name))
    assert set(lock) - set(got) <= {"colorama", "satbench"}  # colorama is Windows-only
    assert (root / ".venv" / "bin" / "caddy").is_file()  # the extra "caddy": the server's binary


def test_a_tampered_hash_makes_setup_exit_2_with_one_line(tmp_path):
    root = _project(tmp_path / "p")
    text = (root / "uv.lock").read_text()
    at = text.index('name = "packaging"\n')
    at = text.index('hash = "sha256:', text.index("wheels = [", at)) + len('hash = "sha256:')
    tampered = text[:at] + ("0" if text[at] != "0" else "1") + text[at + 1:]
    (root / "uv.lock").write_text(tampered)
    r = _setup(root, "--only", "python")
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("setup: uv.lock: packaging==") and "hash mismatch" in lines[0]
    # the lock given is left as it was: set-up never rewrites it
    assert (root / "uv.lock").read_text() == tampered


def test_pylock_is_the_export_of_uv_lock():
    r = subprocess.run([str(UV), "export", "--quiet", "--frozen", "--all-extras", "--format", "pylock.toml"],
                       cwd=REPO, capture_output=True, text=True, check=True)
    body = [line for line in r.stdout.splitlines() if not line.startswith("#")]
    have = [line for line in (REPO / "pylock.toml").read_text().splitlines() if not line.startswith("#")]
    assert body == have, "pylock.toml is not uv.lock's export: run bash scripts/lock"


@pytest.mark.parametrize("args, says", [
    (["--with", "netem"], "--with: unknown part 'netem'"),
    (["--only"], "--only needs a step"),
    (["--only", "rust,netem"], "--only: unknown step or part 'netem'"),
    (["--fast"], "unknown argument --fast"),
])
def test_bad_arguments_exit_2_with_one_line(args, says):
    r = subprocess.run(["bash", str(REPO / "scripts" / "setup"), *args], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [r.stderr.strip()] and says in r.stderr


def test_a_study_names_the_optional_parts_it_needs():
    assert prereq.parts_of({"server": "satbench", "client": "chromium", "proxy": "none"}) == set()
    assert prereq.parts_of({"server": "caddy", "client": "firefox", "proxy": "gateway"}) == {"caddy", "firefox",
                                                                                             "nginx"}
    assert prereq.parts_of({"proxy": {"kind": "nghttpx", "upstream": "h2"}, "server": "nginx"}) == {"nghttpx",
                                                                                                   "nginx"}
    assert prereq.parts_of({"proxy": {"upstream": "h1"}}) == {"nginx"}
    assert prereq.parts_of({"client": "loader", "clients": {"h1": {"n": 2, "client": "firefox"}, "h2": 3}}) == {
        "firefox"}
    # The main job's experiment needs none: set-up without --with is all it takes.
    from satbench.experiment.spec import load
    exp = load(REPO / "experiments" / "demo.toml")
    assert set().union(*(prereq.parts_of(t.factors) for t in exp.trials)) == set()


def test_provide_installs_nothing_when_every_part_is_there(monkeypatch):
    monkeypatch.setattr(prereq, "PARTS", {"x": lambda: True})
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: calls.append(a))
    prereq.provide(["x"])
    assert calls == []
