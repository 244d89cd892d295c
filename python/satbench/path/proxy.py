"""An HTTP proxy at the gateway, as operators run them: clients' connections
to the origin's HTTPS and HTTP ports are redirected (nftables, inside the
gateway's namespace) to Debian's nginx there, which terminates them (TLS
with the testbed CA's certificate for the origin's names, HTTP/2 or
HTTP/1.1 as the client asks) and fetches from the origin over HTTP/1.1 on
kept-alive TLS connections. The client's TCP then ends at the gateway, and
the proxy sends over the satellite with the trial's congestion control (set
on the gateway's routes towards the clients). QUIC (UDP) is not redirected:
HTTP/3 still reaches the origin, and the proxy's counters show it.

Placed by ``proxy = "nginx"`` (``"gateway"`` is the same), or ``{ kind =
"nginx", upstream = "h1", cache = "none" | "cold" | "warm" }``: nginx fetches
from upstreams over HTTP/1.x only, so ``h1`` is the one upstream protocol; a
cache keeps every 200 answer for a day, starts empty (``cold``), or holds the
trial's page already (``warm``: the loader fetched it through the proxy from
the gateway before the trial, its requests not counted). Per trial: the proxy's access log (``proxy.jsonl``: one
line per request, with the client's protocol and the upstream's status and
time), ``env.path.proxy`` (requests by protocol, the upstream connections
it opened) and metrics ``proxy_requests``, ``proxy_upstream_ms`` (median
time the origin took, as the proxy saw it) and ``proxy_h2_requests``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..endpoints import ca as ca_mod
from ..endpoints import pages
from ..endpoints.loader import loader_binary
from ..errors import TestbedError
from . import PathElement

if TYPE_CHECKING:
    from ..testbed.host import Host
    from ..testbed.testbed import Testbed

HTTPS_PORT, HTTP_PORT = 8443, 8080
DEFAULTS: dict[str, Any] = {"kind": "nginx", "upstream": "h1", "cache": "none"}
CACHES = ("none", "cold", "warm")
#: Other names of the one kind (the issue's "gateway").
ALIASES = {"gateway": "nginx"}


def _conf(logs: Path, cert: Path, key: Path, ca: Path, origin: str, cache: bool) -> str:
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
    upstream origin {{
        server {origin}:443;
        keepalive 32;
    }}
    server {{
        listen {HTTP_PORT};
        listen {HTTPS_PORT} ssl http2;
        server_name _;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.3;
        location / {{
            proxy_pass https://origin;
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
    default = "none"
    meaning = "an HTTP proxy at the gateway (nginx: HTTP/2 or HTTP/1.1 to clients, HTTP/1.1 to the origin), or none"

    @classmethod
    def check(cls, value: Any, factors: Mapping[str, Any]) -> str | None:
        if value == cls.default:
            return None
        v = {"kind": value} if isinstance(value, str) else value
        if not isinstance(v, dict):
            return (f"must be nginx (or gateway), none or a table {{ kind = \"nginx\", upstream = \"h1\", "
                    f"cache = \"warm\" }}, got {value!r}")
        unknown = set(v) - set(DEFAULTS)
        if unknown:
            return f"unknown key {sorted(unknown)[0]!r} (known: {', '.join(DEFAULTS)})"
        if ALIASES.get(v.get("kind", "nginx"), v.get("kind")) != "nginx":
            return f"kind must be nginx (or gateway), got {v.get('kind')!r}"
        if v.get("cache", "none") not in CACHES:
            return f"cache must be one of {', '.join(CACHES)}, got {v.get('cache')!r}"
        if v.get("upstream", "h1") != "h1":
            return f"upstream must be h1 (nginx fetches from origins over HTTP/1.x only), got {v.get('upstream')!r}"
        if factors.get("pep", "none") not in ("none", "terminal"):
            return "a PEP at the gateway and the proxy there would both take the connections: use one"
        if factors.get("tunnel", "none") != "none":
            return "behind the VPN tunnel the proxy sees no TCP: use one"
        if str(factors.get("server", "satbench")) != "satbench":
            return "the proxy's origin is satbench-server"
        if int(factors.get("terminals", 1)) > 1:
            return "a proxy with several terminals is not supported; use one terminal"
        return None

    @classmethod
    def label(cls, value: Any) -> Any:
        return value if isinstance(value, str) else " ".join(f"{k}={v}" for k, v in sorted(value.items()))

    def _options(self) -> dict[str, Any]:
        given = {"kind": self.value} if isinstance(self.value, str) else dict(self.value)
        return {**DEFAULTS, **given}

    @contextmanager
    def start(self, tb: "Testbed", artefacts: Path) -> Iterator[None]:
        gw = tb.gateway
        cache = str(self._options()["cache"])
        c = ca_mod.ensure()
        logs = artefacts
        logs.mkdir(parents=True, exist_ok=True)
        conf = logs / "proxy-nginx.conf"
        conf.write_text(_conf(logs.resolve(), c.server_cert, c.server_key, c.cert, tb.server.addr, cache != "none"))
        self.log = logs / "proxy.jsonl"
        cc = str(self.factors.get("cc", "cubic"))
        # The proxy is the sender over the satellite now: the trial's congestion control on its routes there.
        self.routes = gw.change_routes({"congctl": cc}, lambda f: f[f.index("dev") + 1] == "sat0")
        rules = ("table ip satbench_proxy {\n chain to_proxy { type nat hook prerouting priority -100;"
                 f" iifname \"sat0\" tcp dport 443 redirect to :{HTTPS_PORT};"
                 f" iifname \"sat0\" tcp dport 80 redirect to :{HTTP_PORT}; }}\n}}\n")
        p = gw.run(["nft", "-f", "-"], input=rules, capture_output=True, text=True)
        if p.returncode != 0:
            raise TestbedError(f"proxy rules in the gateway: {p.stderr.strip()}")
        stderr = open(logs / "proxy-nginx.stderr", "w")
        self.proc = subprocess.Popen(gw.cmd(["nginx", "-c", str(conf.resolve()), "-e", str(logs.resolve()
                                                                                          / "proxy-error.log")]),
                                     stdout=stderr, stderr=stderr, start_new_session=True)
        self.exit: int | None = None
        try:
            _wait_listening(gw, self.proc, (HTTP_PORT, HTTPS_PORT))
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
        page = str(self.factors.get("page", ""))
        if not page or page.startswith("upload:"):
            return 0
        argv = [str(loader_binary()), pages.url_of(page), "--protocol", "h1", "--cacert", str(ca),
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
        return {"kind": "nginx", "upstream": "h1", "cache": self._options()["cache"],
                "warmed": getattr(self, "warmed", 0), "cache_hits": hits, "requests": len(reqs), "by_protocol": by,
                "upstream_statuses": sorted({str(r.get("upstream_status")) for r in reqs}),
                "routes": getattr(self, "routes", None), "exit": getattr(self, "exit", None)}

    def metrics(self) -> dict[str, float | None]:
        reqs = self._requests()
        up = [float(r["upstream_s"]) * 1e3 for r in reqs if _number(r.get("upstream_s"))]
        return {"proxy_requests": float(len(reqs)),
                "proxy_cache_hits": float(sum(r.get("cache") == "HIT" for r in reqs)),
                "proxy_h2_requests": float(sum(r.get("proto") == "HTTP/2.0" for r in reqs)),
                "proxy_upstream_ms": statistics.median(up) if up else None}

    def describe(self) -> list[str]:
        d = self.summary()
        by = ", ".join(f"{k} {v}" for k, v in d["by_protocol"].items()) or "none"
        return [f"proxy at the gateway: {d['requests']} requests ({by}), {d['cache_hits']} from its cache"]

    def fault(self) -> str | None:
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is not None and getattr(self, "exit", None) is None:
            return f"the proxy (nginx) at the gateway died (exit {proc.returncode})"
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


def _wait_listening(host: "Host", proc: subprocess.Popen[Any], ports: tuple[int, ...]) -> None:
    end = time.monotonic() + 20
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise TestbedError(f"the proxy (nginx) at the gateway exited ({proc.returncode}) at start")
        out = host.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
        if all(f":{port} " in out for port in ports):
            return
        time.sleep(0.05)
    raise TestbedError("the proxy (nginx) at the gateway did not listen within 20 s")
