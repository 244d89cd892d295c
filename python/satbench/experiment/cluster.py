"""What a coordinator and its workers share (:mod:`.distributed` is the
coordinator's side, :mod:`.worker` the workers'): which scheduler addresses
are allowed and where a worker listens, what a worker must match to join,
an attempt, the job a worker receives and what it sends back, and cores for
parallel testbeds. Neither side imports the other for these.
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import os
import re
import shutil
import socket
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import prereq
from ..endpoints.loader import loader_binary
from ..endpoints.satbench_server import server_binary
from ..errors import InputError, TestbedError
from ..path.pep import pep_binary
from ..path.tunnel import tunnel_binary
from ..results.store import TrialRecord
from ..version import __version__
from .runner import _git_commit
from .spec import SCHEDULER_RE, Experiment

#: The Dask resource a worker offers per testbed it can hold at once.
RESOURCE = "testbed"

# -- scheduler addresses ---------------------------------------------------------------------


def _resolve(host: str) -> list[str]:
    return sorted({str(ai[4][0]) for ai in socket.getaddrinfo(host, None)})


#: What a plain ``tcp://`` scheduler on loopback allows (said when one is used).
PLAIN_TCP_RISK = ("plain tcp:// on loopback: every user of this machine can reach the cluster and run code "
                  "through its workers as root; use tls:// (satbench ca --cluster DIR, docs/security.md)")


def check_scheduler_address(address: str, *, resolve: Callable[[str], list[str]] = _resolve) -> str:
    """The address, if satbench may use it: ``tls://HOST:PORT`` anywhere, or
    ``tcp://HOST:PORT`` on loopback only (every address HOST resolves to is
    a loopback one). Anything else is refused with one line: workers run as
    root, and Dask sends pickled code between scheduler, workers and
    coordinator."""
    m = re.fullmatch(SCHEDULER_RE, address)
    if not m:
        raise InputError(f"scheduler {address!r}: expected tls://HOST:PORT (or tcp://HOST:PORT on loopback)")
    if m.group(1) == "tls":
        return address
    host = m.group(2).strip("[]")
    try:
        addrs = resolve(host)
    except (OSError, UnicodeError) as e:
        raise InputError(f"scheduler {address}: cannot resolve {host}: {e}") from None
    if addrs and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addrs):
        return address
    raise InputError(f"scheduler {address}: plain tcp:// is only allowed on loopback; workers run as root and Dask "
                     "sends pickled code, so use tls:// with certificates "
                     "(docs/manual.md: 'Studies on several machines')")


def listen_host(address: str, *, resolve: Callable[[str], list[str]] = _resolve,
                route: Callable[[str], str] | None = None) -> str:
    """The one address a worker for scheduler ``address`` listens on, as Dask
    takes a host (IPv6 in brackets): loopback for a scheduler on loopback, else
    the address of this machine's interface towards the scheduler (never every
    interface). ``route`` gives that interface's address for a scheduler's
    address (tests)."""
    m = re.fullmatch(SCHEDULER_RE, address)
    if not m:
        raise InputError(f"scheduler {address!r}: expected tls://HOST:PORT (or tcp://HOST:PORT on loopback)")
    host = m.group(2).strip("[]")
    try:
        addrs = resolve(host)
    except (OSError, UnicodeError) as e:
        raise InputError(f"scheduler {address}: cannot resolve {host}: {e}") from None
    ips = [ipaddress.ip_address(a.split("%")[0]) for a in addrs]
    if not ips:
        raise InputError(f"scheduler {address}: {host} has no address")
    if all(ip.is_loopback for ip in ips):
        return "[::1]" if all(ip.version == 6 for ip in ips) else "127.0.0.1"
    mine = (route or _route_to)(str(next(ip for ip in ips if not ip.is_loopback)))
    return f"[{mine}]" if ":" in mine else mine


def _route_to(addr: str) -> str:
    """This machine's address on the route to ``addr`` (a UDP socket connected, nothing sent)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((addr, 9))
        except OSError as e:
            raise TestbedError(f"no route to the scheduler at {addr}: {e}") from None
        return str(s.getsockname()[0])


def check_tls_config(address: str, role: str) -> None:
    """For a ``tls://`` address, Dask's configuration must give the CA and
    this role's certificate and key (``distributed.comm.tls.*``)."""
    if not address.startswith("tls://"):
        return
    import dask.config  # noqa: PLC0415 - dask loads with the cluster, not with satbench

    missing = [k for k in ("distributed.comm.tls.ca-file", f"distributed.comm.tls.{role}.cert",
                           f"distributed.comm.tls.{role}.key") if not dask.config.get(k, None)]
    if missing:
        raise InputError(f"scheduler {address}: TLS needs {', '.join(missing)} in Dask's configuration "
                         "(docs/manual.md: 'Studies on several machines')")


# -- what a worker must share with its coordinator --------------------------------------------

BINARIES: dict[str, Callable[[], Path]] = {"satbench-link": prereq.link_binary, "satbench-server": server_binary,
                                           "satbench-load": loader_binary, "satbench-pep": pep_binary,
                                           "satbench-tunnel": tunnel_binary}
_HASHES: dict[tuple[str, int, int, int], str] = {}


def file_sha256(path: Path) -> str | None:
    """The file's SHA-256 (remembered while its inode, size and mtime stay), or None if it is missing."""
    try:
        st = path.stat()
    except OSError:
        return None
    k = (str(path), st.st_ino, st.st_size, st.st_mtime_ns)
    if k not in _HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _HASHES[k] = h.hexdigest()
    return _HASHES[k]


def identity() -> dict[str, Any]:
    """What must match between a coordinator and its workers: satbench's
    version, the git commit (``-dirty`` when the tree has changes) and the
    SHA-256 of each binary a trial runs."""
    return {"satbench": __version__, "commit": _git_commit(),
            "binaries": {name: file_sha256(where()) for name, where in BINARIES.items()}}


def identity_difference(ours: dict[str, Any], theirs: dict[str, Any]) -> str | None:
    """How a worker's identity differs from the coordinator's, in words (None: it does not)."""
    def short(v: Any, n: int) -> str:
        return "none" if v is None else str(v)[:n]

    out = []
    if theirs.get("satbench") != ours.get("satbench"):
        out.append(f"satbench {short(theirs.get('satbench'), 20)} differs from the coordinator's "
                   f"{short(ours.get('satbench'), 20)}")
    if theirs.get("commit") != ours.get("commit"):
        out.append(f"commit {short(theirs.get('commit'), 18)} differs from the coordinator's "
                   f"{short(ours.get('commit'), 18)}")
    mine, yours = ours.get("binaries", {}), theirs.get("binaries", {})
    for name in BINARIES:
        if mine.get(name) != yours.get(name):
            out.append(f"{name} {short(yours.get(name), 12)} differs from the coordinator's "
                       f"{short(mine.get(name), 12)}")
    return "; ".join(out) or None


# -- attempts


@dataclass(frozen=True)
class Attempt:
    """One submission of a trial: its number, and the worker (address and
    incarnation: a worker restarted on the same address is another) it was
    sent to."""

    run: str
    key: str
    n: int
    worker: str
    incarnation: str

    @property
    def task(self) -> str:
        """The Dask task's key: unique per attempt, so no result is ever shared between attempts."""
        return f"satbench-{self.run}-{self.key}-a{self.n}"


# -- what travels --------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """One attempt, as the worker receives it."""

    attempt: Attempt
    #: The experiment file's text (parsed again on the worker), or the
    #: experiment itself for one built in Python (spec.build has no text).
    experiment: str | Experiment
    file: str
    order_seed: int
    seq: int
    #: Trials (keys) a worker's testbed slot runs first, unstored, the first time it runs this experiment.
    warmup: tuple[str, ...] = ()
    #: Return the artefacts (a gzipped tar) rather than keeping them on the worker.
    fetch_artefacts: bool = True


@dataclass(frozen=True)
class Done:
    attempt: Attempt
    incarnation: str
    record: TrialRecord
    #: The artefact folder as a gzipped tar (None: kept on the worker, see record.artefacts).
    artefacts: bytes | None


def pack(folder: Path) -> bytes:
    """A folder as a gzipped tar, its contents at the top."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        if folder.is_dir():
            tar.add(folder, arcname=".")
    return buf.getvalue()


def unpack(data: bytes, folder: Path) -> None:
    """Replace ``folder`` with the tar's contents (no path may leave it)."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        tar.extractall(folder, filter="data")


# -- cores for parallel testbeds ---------------------------------------------------------------


def split_cores(n: int, cores: Sequence[int] | None = None) -> list[list[int]]:
    """``n`` disjoint sets of cores out of ``cores`` (default: those this
    process may use), as equal as they come; the remainder stays unpinned to
    anyone (the coordinator and the scheduler run there too)."""
    avail = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if n < 1:
        raise InputError(f"testbeds: must be at least 1, got {n}")
    if n > len(avail):
        raise InputError(f"{n} testbeds at once need a core each, and only {len(avail)} "
                         f"({', '.join(map(str, avail))}) are available")
    k = len(avail) // n
    return [avail[i * k:(i + 1) * k] for i in range(n)]


def parse_cores(text: str) -> list[int]:
    """A CPU list as taskset takes it: ``0-3,6``."""
    out: list[int] = []
    try:
        for part in text.split(","):
            lo, _, hi = part.strip().partition("-")
            out += range(int(lo), int(hi or lo) + 1)
    except ValueError:
        raise InputError(f"--cores {text!r}: expected a CPU list such as 0-3,6") from None
    allowed = os.sched_getaffinity(0)
    if not out or not set(out) <= allowed:
        raise InputError(f"--cores {text!r}: this process may only use cores {sorted(allowed)}")
    return sorted(set(out))


__all__ = ["BINARIES", "PLAIN_TCP_RISK", "RESOURCE", "Attempt", "Done", "Job", "check_scheduler_address",
           "check_tls_config", "file_sha256", "identity", "identity_difference", "listen_host", "pack",
           "parse_cores", "split_cores", "unpack"]
