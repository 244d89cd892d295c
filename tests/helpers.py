"""Helpers shared by the tests: the command line, the host's state, leftovers
of testbeds, fetching pages through a testbed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from satbench.experiment.trialspec import TrialSpec

REPO = Path(__file__).resolve().parents[1]
SATBENCH = [sys.executable, "-m", "satbench"]
FIXTURES = Path(__file__).with_name("fixtures")
#: For a loader-only run whose trials mostly wait on the satellite's round trips: two testbeds at
#: once, each on a core of its own, as the planner allows loader studies on two cores
#: (docs/benchmarks.md, "Testbeds at once"); one at a time on a single core.
PARALLEL: tuple[str, ...] = ("--parallel", "2") if len(os.sched_getaffinity(0)) >= 2 else ()


def host_state() -> dict[str, str]:
    """What the testbed must never change in the host namespace."""
    def out(argv: list[str]) -> str:
        p = subprocess.run(argv, capture_output=True, text=True)
        return p.stdout if p.returncode == 0 else f"<{argv[0]} failed: {p.stderr.strip()}>"

    sysctls = {}
    for f in ["net/ipv4/ip_forward", "net/ipv4/tcp_congestion_control", "net/ipv4/conf/all/rp_filter",
              "net/ipv4/conf/default/rp_filter", "net/ipv6/conf/all/disable_ipv6",
              "net/ipv6/conf/default/disable_ipv6", "net/ipv4/conf/all/forwarding", "net/core/rmem_max",
              "net/core/wmem_max", "net/ipv4/tcp_rmem", "net/ipv4/tcp_wmem", "net/ipv4/tcp_fastopen",
              "net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-arptables"]:
        try:
            sysctls[f] = Path("/proc/sys", f).read_text().strip()
        except OSError:
            sysctls[f] = "<absent>"
    return {
        "routes4": out(["ip", "-4", "route", "show", "table", "all"]),
        "routes6": out(["ip", "-6", "route", "show", "table", "all"]),
        "rules": out(["ip", "rule", "show"]),
        "addresses": out(["ip", "-o", "addr", "show"]),
        "links": out(["ip", "-o", "link", "show"]),
        "sysctls": json.dumps(sysctls, sort_keys=True),
        "nftables": out(["nft", "list", "ruleset"]),
        "iptables": "\n".join(l for l in out(["iptables-save"]).splitlines() if not l.startswith("#")),
        "netns": out(["ip", "netns", "list"]),
    }


def run_cli(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SATBENCH, *args], capture_output=True, text=True, timeout=timeout, **kw)


def netns_now() -> list[str]:
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return sorted(l.split()[0] for l in p.stdout.splitlines() if l.strip())


def _in_use_elsewhere(tid: str) -> bool:
    """A testbed another live process owns: a test running beside this one (the e2e layer's parallel
    part). One this process owns, or whose owner is gone, is this test's to answer for."""
    from satbench.testbed.proc import alive

    try:
        owner = json.loads((Path("/run/satbench") / tid / "owner.json").read_text())
    except (OSError, ValueError):
        return False
    return int(owner["pid"]) != os.getpid() and alive(int(owner["pid"]), owner.get("start"))


def satbench_leftovers() -> list[str]:
    """Anything of a testbed still present on the host, but the testbeds other live processes own
    (another test's, running beside this one) and the staging folder of one being made."""
    left = [ns for ns in netns_now() if ns.startswith("sb") and not _in_use_elsewhere(ns[2:8])]
    run = Path("/run/satbench")
    if run.is_dir():
        left += [f"/run/satbench/{d.name}" for d in run.iterdir()
                 if not d.name.startswith(".") and not _in_use_elsewhere(d.name)]
    etc = Path("/etc/netns")
    if etc.is_dir():
        left += [f"/etc/netns/{d.name}" for d in etc.iterdir()
                 if d.name.startswith("sb") and not _in_use_elsewhere(d.name[2:8])]
    # A testbed's emulator: its configuration lives in the testbed's run folder.
    p = subprocess.run(["pgrep", "-af", "satbench-link --config /run/satbench/"], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        pid, _, cmd = line.partition(" ")
        tid = cmd.split("/run/satbench/", 1)[1][:6] if "/run/satbench/" in cmd else ""
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and not _in_use_elsewhere(tid):  # (Z: exited, its reaper has not reaped it yet)
            left.append(f"pid {pid}")
    return left


def page_urls(out: Path, manifests: dict) -> list[tuple[str, str]]:
    """(path on the server, sha256) of every page's HTML and objects."""
    rows = []
    for name, m in sorted(manifests.items()):
        html = (out / name / "index.html").read_bytes()
        rows.append((f"/{name}/index.html", hashlib.sha256(html).hexdigest()))
        rows += [(f"/{name}/{o.path}", o.sha256) for o in m.objects]
    return rows


def curl_all(client, rows: list[tuple[str, str]], proto: str, tmp: Path, cacert: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Fetch every row with one curl process (connections reused) and check each
    body's SHA-256; returns the HTTP version curl reports per request."""
    scheme = "http" if proto == "http/1.1" else "https"
    cfg = tmp / "curl.cfg"
    lines = ['write-out = "%{http_version} %{http_code}\\n"', "silent", "show-error"]
    for i, (path, _) in enumerate(rows):
        lines += [f'url = "{scheme}://server.test{path}"', f'output = "{tmp / str(i)}"']
    cfg.write_text("\n".join(lines) + "\n")
    argv = ["curl", "-K", str(cfg), "--cacert", cacert, "--http2" if proto == "h2" else "--http1.1"]
    p = client.run(argv, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-500:]
    versions = []
    for i, ((path, sha), line) in enumerate(zip(rows, p.stdout.splitlines(), strict=True)):
        version, code = line.split()
        assert code == "200", (path, line)
        assert hashlib.sha256((tmp / str(i)).read_bytes()).hexdigest() == sha, path
        versions.append(version)
    return versions


def client_json(tb, command: str, url: str, protocol: str, *extra: str, timeout: float = 180) -> dict:  # type: ignore[no-untyped-def]
    """Run ``satbench COMMAND URL --protocol P --json`` on the testbed's client; its JSON output
    (exit code 0, or 3 for an invalid load)."""
    p = tb.client.run([sys.executable, "-m", "satbench", command, url, "--protocol", protocol, "--json", *extra],
                      capture_output=True, text=True, timeout=timeout)
    assert p.returncode in (0, 3), p.stderr[-2000:]
    return json.loads(p.stdout)


def trial(**factors: object) -> TrialSpec:
    """A trial for a path element used on its own (a page-less HTTP/2 trial over GEO unless told)."""
    from satbench.experiment.trialspec import TrialSpec  # noqa: PLC0415 - tests that need no trial skip the import

    return TrialSpec.of({"link": "geo", "protocol": "h2", "page": "blank", **factors})


def listening_sockets() -> set[tuple[str, str, int]]:
    """The host namespace's listening sockets, as (kind, address, port), from /proc/net: TCP in
    LISTEN, and UDP bound with no peer."""
    import ipaddress  # noqa: PLC0415

    out: set[tuple[str, str, int]] = set()
    for kind, state in (("tcp", "0A"), ("tcp6", "0A"), ("udp", "07"), ("udp6", "07")):
        try:
            lines = Path("/proc/net", kind).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            local, remote, st = f[1], f[2], f[3]
            if st != state or (kind.startswith("udp") and int(remote.split(":")[1], 16) != 0):
                continue
            hexaddr, hexport = local.split(":")
            raw = bytes.fromhex(hexaddr)
            # Each 32-bit word is in the host's (little-endian) order.
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            out.add((kind, str(ipaddress.ip_address(raw)), int(hexport, 16)))
    return out


def on_loopback(address: str) -> bool:
    import ipaddress  # noqa: PLC0415

    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


class ListenerWatch:
    """Samples the host namespace's listening sockets every ``every_s`` in a thread, from entering
    to leaving: :attr:`new` is every listener seen that was not there before, :attr:`outside`
    those of them not on loopback."""

    def __init__(self, every_s: float = 0.1):
        import threading  # noqa: PLC0415

        self.every_s = every_s
        self.before = listening_sockets()
        self.new: set[tuple[str, str, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.new |= listening_sockets() - self.before
            self._stop.wait(self.every_s)

    @property
    def outside(self) -> list[tuple[str, str, int]]:
        return sorted(s for s in self.new if not on_loopback(s[1]))

    def __enter__(self) -> ListenerWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.new |= listening_sockets() - self.before
