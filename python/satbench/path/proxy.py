"""An HTTP proxy at the gateway, as operators run them: clients' connections
to the origins' HTTPS and HTTP ports are redirected (nftables, inside the
gateway's namespace) to a proxy there, which terminates them (TLS with the
testbed CA's certificate for the origins' names, HTTP/2 or HTTP/1.1 as the
client asks) and fetches from the origin the request names (each server
host's names, a sharded page's shards among them) on kept-alive, verified
TLS connections. The client's TCP then ends at the gateway, and the proxy
sends over the satellite with the trial's congestion control (set on the
gateway's routes towards the clients). QUIC (UDP) is not redirected: HTTP/3
still reaches the origin, and the proxy's counters show it. With IPv6 (``ip``
= v6 or dual) the proxy listens and redirects on both families and fetches
from the origins over IPv6, as the trial's own connections would.

Two proxies from Debian, placed by ``proxy = { kind = ..., upstream = ...,
cache = ... }``:

- ``nginx`` (``"nginx"`` or ``"gateway"`` alone): fetches over HTTP/1.1 only
  (nginx has no HTTP/2 upstreams), with an optional cache that keeps every
  200 answer for a day, starting empty (``cold``) or holding the trial's page
  already (``warm``: the loader fetched it through the proxy from the
  gateway before the trial, its requests not counted);
- ``nghttpx`` (nghttp2-proxy): fetches over HTTP/1.1 or HTTP/2
  (``upstream = "h2"``: one multiplexed connection per origin), no cache.

Per trial: the proxy's access log (``proxy.jsonl``: one line per request,
with the client's protocol and the origin it went to; nginx adds the
upstream's status and time), ``env.path.proxy`` (requests by protocol, the
origins' addresses) and metrics ``proxy_requests``, ``proxy_h2_requests``,
``proxy_cache_hits`` and ``proxy_upstream_ms`` (nginx: the median time the
origin took, as the proxy saw it). The origins' access logs show what the
proxy sent them, from the gateway's address.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import prereq
from ..endpoints import ca as ca_mod
from ..endpoints import pages
from ..endpoints.loader import loader_binary
from ..errors import TestbedError
from ..model import PROXY_ALIASES, ServerKind
from ..testbed.host import bracketed
from . import PathElement
from .pep import placement

if TYPE_CHECKING:
    from ..experiment.trialspec import TrialSpec
    from ..testbed.host import Host
    from ..testbed.testbed import Testbed

HTTPS_PORT, HTTP_PORT = 8443, 8080
DEFAULTS: dict[str, Any] = {"kind": "nginx", "upstream": "h1", "cache": "none"}
CACHES = ("none", "cold", "warm")
#: The proxies, and the upstream protocols each can fetch over.
UPSTREAMS = {"nginx": ("h1",), "nghttpx": ("h1", "h2")}
#: The Debian package of each.
PACKAGES = {"nginx": "nginx", "nghttpx": "nghttp2-proxy"}
#: Other names of a kind (the issue's "gateway" is nginx).
ALIASES = PROXY_ALIASES
#: nghttpx's access log, as JSON lines like nginx's (its values need no escaping in the testbed).
NGHTTPX_LOG = ('{"type":"request","proto":"$protocol_version","alpn":"$alpn","method":"$method",'
               '"host":"$http_host","path":"$path","status":$status,"body_bytes":$body_bytes_sent,'
               '"request_time_s":$request_time,"upstream":"$backend_host:$backend_port"}')


def nghttpx_argv(logs: Path, cert: Path, key: Path, ca: Path, origins: dict[str, str], upstream: str,
                 ipv6: bool = False) -> list[str]:
    """nghttpx with one backend per origin name (a host pattern; server.test
    also the catch-all), over TLS verified against the test CA, HTTP/1.1 or
    HTTP/2; frontends as nginx's (TLS with HTTP/2 and HTTP/1.1, and cleartext), on both families
    with ``ipv6`` (``*``: every address)."""
    proto = "h2" if upstream == "h2" else "http/1.1"
    every = "*" if ipv6 else "0.0.0.0"
    argv = ["nghttpx", str(key), str(cert), f"--frontend={every},{HTTPS_PORT}",
            f"--frontend={every},{HTTP_PORT};no-tls", "--workers=1", f"--cacert={ca}",
            f"--accesslog-file={logs}/proxy.jsonl", f"--accesslog-format={NGHTTPX_LOG}",
            f"--errorlog-file={logs}/proxy-error.log", f"--pid-file={logs}/proxy.pid", "--no-ocsp",
            "--tls-min-proto-version=TLSv1.3", "--backend-keep-alive-timeout=60s"]
    for name, addr in origins.items():
        pattern = f"{name}:/" if name == "server.test" else name  # server.test's is also the catch-all ("/")
        argv.append(f"--backend={addr},443;{pattern};proto={proto};tls;sni={name}")
    return argv


def _upstreams(origins: dict[str, str]) -> str:
    """One upstream group per origin name (each server host's names), so that
    ``proxy_pass https://$host`` picks the origin a request names (a sharded
    page's shards among them) without a resolver."""
    return "\n".join(f"    upstream {name} {{\n        server {bracketed(addr)}:443;\n        keepalive 32;\n    }}"
                     for name, addr in origins.items())


def _conf(logs: Path, cert: Path, key: Path, ca: Path, origins: dict[str, str], cache: bool,
          ipv6: bool = False) -> str:
    six = f"\n        listen [::]:{HTTP_PORT};\n        listen [::]:{HTTPS_PORT} ssl http2;" if ipv6 else ""
    cache_path = (f"proxy_cache_path {logs}/proxy-cache levels=1:2 keys_zone=satbench:16m max_size=4g "
                  "inactive=1d use_temp_path=off;") if cache else ""
    cache_use = ("proxy_cache satbench; proxy_cache_valid 200 1d; proxy_cache_lock on; "
                 "proxy_ignore_headers Cache-Control Expires Set-Cookie;") if cache else ""
    return f"""# written by satbench: an HTTP proxy at the gateway
user root;
worker_processes 1;
daemon off;
pid {logs}/proxy.pid;
error_log {logs}/proxy-error.log warn;
events {{ worker_connections 4096; }}
http {{
    log_format satbench escape=json '{{"type":"request","proto":"$server_protocol","alpn":"$ssl_alpn_protocol",'
        '"conn":"$connection","method":"$request_method","host":"$host","path":"$request_uri",'
        '"status":$status,"body_bytes":$body_bytes_sent,"t_unix_s":$msec,"request_time_s":$request_time,'
        '"upstream":"$upstream_addr","upstream_status":"$upstream_status",'
        '"upstream_connect_s":"$upstream_connect_time","upstream_s":"$upstream_response_time",'
        '"cache":"$upstream_cache_status"}}';
    {cache_path}
    access_log {logs}/proxy.jsonl satbench;
    client_body_temp_path {logs}/proxy-tmp-body;
    proxy_temp_path {logs}/proxy-tmp;
    fastcgi_temp_path {logs}/proxy-tmp-fastcgi;
    uwsgi_temp_path {logs}/proxy-tmp-uwsgi;
    scgi_temp_path {logs}/proxy-tmp-scgi;
    keepalive_timeout 60s;
{_upstreams(origins)}
    server {{
        listen {HTTP_PORT};
        listen {HTTPS_PORT} ssl http2;{six}
        server_name _;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.3;
        location / {{
            proxy_pass https://$host;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_ssl_server_name on;
            proxy_ssl_name $host;
            proxy_ssl_verify on;
            proxy_ssl_protocols TLSv1.3;
            proxy_ssl_trusted_certificate {ca};
            proxy_ssl_session_reuse on;
            proxy_buffering on;
            proxy_request_buffering off;
            client_max_body_size 0;
            {cache_use}
        }}
    }}
}}
"""


class Proxy(PathElement):
    factor = "proxy"
    max_terminals = 1
    noun = "a proxy"
    ipv6 = True
    default = "none"
    meaning = ("an HTTP proxy at the gateway, HTTP/2 or HTTP/1.1 to clients: nginx (HTTP/1.1 to the origins, "
               "optional cache) or nghttpx (HTTP/1.1 or HTTP/2 to the origins), or none")

    @classmethod
    def check(cls, value: Any) -> str | None:
        if value == cls.default:
            return None
        v = {"kind": value} if isinstance(value, str) else value
        if not isinstance(v, dict):
            return (f"must be nginx (or gateway), nghttpx, none or a table {{ kind = \"nghttpx\", upstream = "
                    f"\"h2\", cache = \"none\" }}, got {value!r}")
        unknown = set(v) - set(DEFAULTS)
        if unknown:
            return f"unknown key {sorted(unknown)[0]!r} (known: {', '.join(DEFAULTS)})"
        kind = ALIASES.get(str(v.get("kind", "nginx")), v.get("kind"))
        if kind not in UPSTREAMS:
            return f"kind must be nginx (or gateway) or nghttpx, got {v.get('kind')!r}"
        if v.get("cache", "none") not in CACHES:
            return f"cache must be one of {', '.join(CACHES)}, got {v.get('cache')!r}"
        if v.get("cache", "none") != "none" and kind != "nginx":
            return f"{kind} has no cache: cache = \"none\", or kind = \"nginx\""
        if v.get("upstream", "h1") not in UPSTREAMS[kind]:
            why = " (nginx fetches from origins over HTTP/1.x only; nghttpx also over h2)" if kind == "nginx" else ""
            return f"upstream must be {' or '.join(UPSTREAMS[kind])}{why}, got {v.get('upstream')!r}"
        return None

    @classmethod
    def conflict(cls, value: Any, trial: "TrialSpec") -> str | None:
        if placement(trial.path.get("pep", "none")) not in ("none", "terminal"):
            return "a PEP at the gateway and the proxy there would both take the connections: use one"
        if "tunnel" in trial.path:
            return "behind the VPN tunnel the proxy sees no TCP: use one"
        if trial.server is not ServerKind.SATBENCH:
            return "the proxy's origin is satbench-server"
        return None

    @classmethod
    def label(cls, value: Any) -> Any:
        return value if isinstance(value, str) else " ".join(f"{k}={v}" for k, v in sorted(value.items()))

    def _options(self) -> dict[str, Any]:
        given = {"kind": self.value} if isinstance(self.value, str) else dict(self.value)
        return {**DEFAULTS, **given}

    @property
    def kind(self) -> str:
        k = str(self._options()["kind"])
        return ALIASES.get(k, k)

    def _command(self, tb: "Testbed", logs: Path) -> list[str]:
        c = ca_mod.ensure()
        # With IPv6, the proxy fetches over IPv6 as the trial's own connections would (``v6``: names
        # resolve to IPv6 alone; ``dual``: address selection prefers the global IPv6 address).
        six = tb.gateway.addr6 is not None
        origins = {name: (s.addr6 if six and s.addr6 else s.addr) for s in tb.servers for name in s.names}
        opts = self._options()
        prereq.provide([self.kind])
        if shutil.which(self.kind) is None:
            raise TestbedError(f"no {self.kind}: bash scripts/setup --with {self.kind} installs Debian's "
                               f"{PACKAGES[self.kind]}")
        if self.kind == "nghttpx":
            return nghttpx_argv(logs, c.server_cert, c.server_key, c.cert, origins, str(opts["upstream"]), six)
        conf = logs / "proxy-nginx.conf"
        conf.write_text(_conf(logs, c.server_cert, c.server_key, c.cert, origins, opts["cache"] != "none", six))
        return ["nginx", "-c", str(conf), "-e", str(logs / "proxy-error.log")]

    @contextmanager
    def start(self, tb: "Testbed", artefacts: Path) -> Iterator[None]:
        gw = tb.gateway
        artefacts.mkdir(parents=True, exist_ok=True)
        logs = artefacts.resolve()
        argv = self._command(tb, logs)
        self.log = logs / "proxy.jsonl"
        cc = self.trial.cc.value
        # The proxy is the sender over the satellite now: the trial's congestion control on its routes there.
        self.routes = gw.change_routes({"congctl": cc}, lambda f: f[f.index("dev") + 1] == "sat0")
        if gw.addr6 is not None:
            self.routes += gw.change_routes({"congctl": cc}, lambda f: f[f.index("dev") + 1] == "sat0", family=6)
        # (The inet family: IPv4 and IPv6 alike.)
        rules = ("table inet satbench_proxy {\n chain to_proxy { type nat hook prerouting priority -100;"
                 f" iifname \"sat0\" tcp dport 443 redirect to :{HTTPS_PORT};"
                 f" iifname \"sat0\" tcp dport 80 redirect to :{HTTP_PORT}; }}\n}}\n")
        p = gw.run(["nft", "-f", "-"], input=rules, capture_output=True, text=True)
        if p.returncode != 0:
            raise TestbedError(f"proxy rules in the gateway: {p.stderr.strip()}")
        stderr = open(logs / f"proxy-{self.kind}.stderr", "w")
        self.proc = subprocess.Popen(gw.cmd(argv), stdout=stderr, stderr=stderr, start_new_session=True)
        self.exit: int | None = None
        try:
            _wait_listening(gw, self.proc, (HTTP_PORT, HTTPS_PORT), self.kind)
            self.warmed = 0
            yield
        finally:
            self.proc.terminate()
            try:
                self.exit = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.exit = self.proc.wait()
            stderr.close()
            # Kept (the artefacts folder may go with the testbed), without the warm-up's requests.
            self.requests = _read_log(self.log)[getattr(self, "skip", 0):]

    def serving(self, tb: "Testbed") -> None:
        if self._options()["cache"] == "warm":
            self.warmed = self._warm(tb.gateway, ca_mod.ensure().cert)

    def _warm(self, gw: "Host", ca: Path) -> int:
        """Load the trial's page through the proxy from the gateway itself
        (the loader: the HTML and what it names), so that the cache holds it;
        these requests are logged apart (``warm``) and not counted."""
        page = self.trial.page
        if not page or self.trial.upload_bytes is not None:
            return 0
        shards = self.trial.shards
        argv = [str(loader_binary()), pages.url_of(page, shards=shards), "--protocol", "h1", "--cacert", str(ca),
                "--connect-to", f"127.0.0.1:{HTTPS_PORT}", "--timeout", "60"]
        if page.startswith("bulk:"):
            argv.append("--single")
        p = gw.run(argv, capture_output=True, text=True, timeout=90)
        if p.returncode != 0:
            raise TestbedError(f"warming the proxy's cache failed: {p.stderr.strip()[-300:]}")
        clients = json.loads(p.stdout)["clients"]
        bad = [c["invalid_reason"] for c in clients if not c["valid"]]
        if bad:
            raise TestbedError(f"warming the proxy's cache failed: {bad[0]}")
        fetched = sum(len(c["objects"]) for c in clients)
        # What the trial's load logs comes after these lines.
        self.skip = len(_read_log(self.log))
        return fetched

    def _requests(self) -> list[dict[str, Any]]:
        return list(getattr(self, "requests", []))

    def summary(self) -> dict[str, Any]:
        """Requests by the client's protocol, the upstream addresses and
        statuses, the congestion control on the satellite routes, its exit."""
        reqs = self._requests()
        by: dict[str, int] = {}
        for r in reqs:
            by[r.get("proto", "?")] = by.get(r.get("proto", "?"), 0) + 1
        hits = sum(r.get("cache") == "HIT" for r in reqs)
        return {"kind": self.kind, "upstream": self._options()["upstream"], "cache": self._options()["cache"],
                "warmed": getattr(self, "warmed", 0), "cache_hits": hits, "requests": len(reqs), "by_protocol": by,
                "upstreams": sorted({str(r.get("upstream")) for r in reqs}),
                "upstream_statuses": sorted({str(r["upstream_status"]) for r in reqs if "upstream_status" in r}),
                "routes": getattr(self, "routes", None), "exit": getattr(self, "exit", None)}

    def metrics(self) -> dict[str, float | None]:
        reqs = self._requests()
        up = [float(r["upstream_s"]) * 1e3 for r in reqs if _number(r.get("upstream_s"))]
        return {"proxy_requests": float(len(reqs)),
                "proxy_cache_hits": float(sum(r.get("cache") == "HIT" for r in reqs)),
                "proxy_h2_requests": float(sum(r.get("alpn") == "h2" for r in reqs)),
                "proxy_upstream_ms": statistics.median(up) if up else None}

    def describe(self) -> list[str]:
        d = self.summary()
        by = ", ".join(f"{k} {v}" for k, v in d["by_protocol"].items()) or "none"
        return [f"proxy ({d['kind']}, {d['upstream']} to the origins) at the gateway: {d['requests']} requests "
                f"({by}), {d['cache_hits']} from its cache"]

    def fault(self) -> str | None:
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is not None and getattr(self, "exit", None) is None:
            return f"the proxy ({self.kind}) at the gateway died (exit {proc.returncode})"
        return None


def _read_log(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _number(v: Any) -> bool:
    try:
        float(v)
        return True
    except (TypeError, ValueError):
        return False


def _wait_listening(host: "Host", proc: subprocess.Popen[Any], ports: tuple[int, ...], kind: str) -> None:
    end = time.monotonic() + 20
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise TestbedError(f"the proxy ({kind}) at the gateway exited ({proc.returncode}) at start")
        out = host.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
        if all(f":{port} " in out for port in ports):
            return
        time.sleep(0.05)
    raise TestbedError(f"the proxy ({kind}) at the gateway did not listen within 20 s")
