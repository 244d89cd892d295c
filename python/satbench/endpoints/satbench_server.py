"""The test server (``satbench-server``) as a library object.

Runs on a testbed host, or in the current namespace for ``satbench serve``.
Its logs go to ``log_dir``: ``access.jsonl`` (one line per request and per
connection: protocol, congestion control in effect, bytes, timestamps),
``tcp_info.jsonl`` (TCP_INFO every 10 ms and at close) and ``qlog/`` (one
qlog per QUIC connection).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from . import ca as ca_mod
from .errors import InputError, PrerequisiteError, TestbedError
from .prereq import REPO
from .testbed import CONGESTION_CONTROLS, Host, read_ready_line, stop_process


def server_binary() -> Path:
    env = os.environ.get("SATBENCH_SERVER_BIN")
    return Path(env) if env else REPO / "target" / "release" / "satbench-server"


@dataclass(kw_only=True)
class ServerOptions:
    """How the server runs. ``cc`` is per socket (TCP_CONGESTION) and in quiche."""

    cc: str | None = None
    http_port: int = 80
    https_port: int = 443
    h3: bool = True
    tls: bool = True
    tfo: bool = False
    resumption: bool = True
    zero_rtt: bool = True
    sndbuf: int | None = None
    rcvbuf: int | None = None
    quic_initcwnd: int | None = None
    #: TCP initial congestion window (segments), set on the server host's route
    #: to the clients; needs ``host``.
    tcp_initcwnd: int | None = None
    #: QUIC pacing (quiche's pacer, honoured by waiting for each packet's send time).
    pacing: bool = True
    idle_timeout_s: int = 30
    qlog: bool = True
    tcp_info: bool = True
    keylog: bool = False
    extra: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if self.cc is not None and self.cc not in CONGESTION_CONTROLS:
            raise InputError(f"--cc: must be one of {', '.join(CONGESTION_CONTROLS)}, got {self.cc!r}")
        for name in ("http_port", "https_port"):
            v = getattr(self, name)
            if not 0 <= v <= 65535:
                raise InputError(f"--{name.replace('_', '-')}: not a port: {v}")


class Server:
    """A running ``satbench-server``; stop it with :meth:`stop` or a ``with`` block."""

    def __init__(self, root: Path, log_dir: Path, options: ServerOptions | None = None, *, host: Host | None = None,
                 bind: str = "0.0.0.0"):
        self.root, self.log_dir, self.opts, self.host = Path(root), Path(log_dir), options or ServerOptions(), host
        self.opts.validate()
        if not self.root.is_dir():
            raise InputError(f"serve: {root}: not a directory")
        b = server_binary()
        if not b.exists():
            raise PrerequisiteError([f"no server binary at {b}: run 'cargo build --release' (scripts/setup does)"])
        self.log_dir.mkdir(parents=True, exist_ok=True)
        o = self.opts
        if o.tfo and host is not None:
            # Server-side Fast Open is enabled per namespace (bit 2), inside the testbed only.
            subprocess.run(host.cmd(["sysctl", "-q", "-w", "net.ipv4.tcp_fastopen=3"]), check=True)
        if o.tcp_initcwnd is not None:
            if host is None:
                raise InputError("--tcp-initcwnd needs a testbed server host (satbench changes no host route)")
            if not 1 <= o.tcp_initcwnd <= 1000:
                raise InputError(f"--tcp-initcwnd: must be 1 to 1000 segments, got {o.tcp_initcwnd}")
            host.set_route_metrics(initcwnd=o.tcp_initcwnd)
        argv = [str(b), "--root", str(self.root.resolve()), "--bind", bind, "--http-port", str(o.http_port),
                "--https-port", str(o.https_port), "--access-log", str(self.log_dir / "access.jsonl"),
                "--idle-timeout-s", str(o.idle_timeout_s)]
        if o.tls:
            c = ca_mod.ensure()
            argv += ["--cert", str(c.server_cert), "--key", str(c.server_key)]
        if o.cc:
            argv += ["--cc", o.cc]
        if not o.h3:
            argv.append("--no-h3")
        if o.tcp_info:
            argv += ["--tcp-info", str(self.log_dir / "tcp_info.jsonl")]
        if o.qlog and o.h3:
            argv += ["--qlog-dir", str(self.log_dir / "qlog")]
        for flag, on in (("--tfo", o.tfo), ("--no-resumption", not o.resumption), ("--no-0rtt", not o.zero_rtt),
                         ("--no-pacing", not o.pacing)):
            if on:
                argv.append(flag)
        for flag, v in (("--sndbuf", o.sndbuf), ("--rcvbuf", o.rcvbuf), ("--quic-initcwnd", o.quic_initcwnd)):
            if v is not None:
                argv += [flag, str(v)]
        argv += o.extra
        env = dict(os.environ)
        env.pop("SSLKEYLOGFILE", None)
        if o.keylog:
            env["SSLKEYLOGFILE"] = str(self.log_dir / "keys.log")
        self.argv = argv
        full = host.cmd(argv) if host else argv
        self.proc = subprocess.Popen(full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.ready: dict[str, Any] = read_ready_line(self.proc, "satbench-server", 15.0)

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> int | None:
        return stop_process(self.proc)

    def access_log(self) -> list[dict[str, Any]]:
        p = self.log_dir / "access.jsonl"
        return [json.loads(l) for l in p.read_text().splitlines() if l.strip()] if p.exists() else []

    def tcp_info(self) -> list[dict[str, Any]]:
        p = self.log_dir / "tcp_info.jsonl"
        return [json.loads(l) for l in p.read_text().splitlines() if l.strip()] if p.exists() else []

    def qlogs(self) -> list[Path]:
        return sorted((self.log_dir / "qlog").glob("*.sqlog"))


def serve_forever(root: Path, log_dir: Path, options: ServerOptions, bind: str, argv_echo: Sequence[str] = ()) -> int:
    """``satbench serve``: run in the current namespace until Ctrl-C or SIGTERM."""
    srv = Server(root, log_dir, options, bind=bind)
    print(json.dumps({**srv.ready, "log_dir": str(log_dir)}), flush=True)
    stopping: list[int] = []
    old = {s: signal.signal(s, lambda n, _f: stopping.append(n)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        while srv.proc.poll() is None and not stopping:
            try:
                srv.proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                pass
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        rc = srv.stop()
    return 0 if stopping else (rc or 0)
