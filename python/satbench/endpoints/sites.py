"""Recorded sites: a browser's HAR (HTTP Archive 1.2, as the developer tools,
WebPageTest and Browsertime save it) or a Web Page Replay archive (the
gzipped JSON of recorded requests and responses Chromium's performance
tooling keeps its page sets in), imported into a folder satbench can replay.

``import_archive(FILE, OUT)`` writes

    OUT/site.json        the manifest: the page, every recorded host, every entry
    OUT/bodies/SHA256    each distinct response body, decoded, once

and refuses a malformed archive with one line naming the file and the entry.
Each entry keeps the request's method, URL, origin (scheme, host, port),
path and query; the address of the server that answered and the HTTP
version it spoke, where the archive says (HAR ``serverIPAddress`` and
``httpVersion``); the response's status, headers and content type; the
body's hash and size; the server's think time as recorded (HAR
``timings.wait``); and what the import changed, so that the manifest says it:

- **filled**: the archive had no body (HARs often leave them out): the body
  is the recorded size of incompressible bytes (seeded by the URL);
- **decoded**: the body is stored decoded, and the recorded
  ``Content-Encoding`` (gzip, br, deflate) is kept apart (``encoding``), out
  of the headers, so that whatever serves it sends the encoding it really
  applies, or none, consistently with its headers;
- **dropped**: hop-by-hop headers (Connection, Keep-Alive, Transfer-Encoding,
  Upgrade, TE, Trailer, Proxy-*), HTTP/2 and HTTP/3 pseudo-headers
  (``:status``) and Content-Length (the server computes it) are left out.

Nothing given is modified, and a recording is treated as hostile
(:mod:`.safeio`): every host must be a host name (so that no recorded name
can become a path outside the folder: ``..``, ``/etc/x``, a NUL), a body is
decompressed or filled to at most ``MAX_BODY_BYTES`` and a site's bodies to
``MAX_SITE_BYTES`` in all (a gzip bomb is inflated only up to its cap, then
refused with exit code 2), and every file is written whole under ``OUT``, never through a
symlink. ``materialize`` lays the folder out for replay, as the recording
grouped it (:func:`server_groups`): one server address for each address the
recorded hosts had, serving every origin of those hosts (one certificate
naming them all, so that a browser coalesces connections where it did on the
real site), or one per host where the archive has no addresses. Each group's
manifest is what its satbench-server answers from (``--replay``: a request
finds its origin by scheme, host and port, then its recorded status, headers
and body as Web Page Replay matches it, so a query that changes between runs
still finds its response; parameters named ``volatile`` at import are
ignored).
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import os
import random
import re
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from ..errors import InputError
from ..model import HOST_NAME_RE
from .safeio import MAX_ARCHIVE_BYTES, MAX_BODY_BYTES, MAX_SITE_BYTES, TooLarge, inflate, real_folder, write_new

HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection", "te",
              "trailer", "trailers", "transfer-encoding", "upgrade"}
#: Headers the server computes itself.
COMPUTED = {"content-length"}
ENCODINGS = {"gzip", "br", "deflate", "identity"}
#: 2: entries have their origin's scheme and port, the recorded server address and HTTP version.
SITE_VERSION = 2
#: The most hosts one site may have (HTTP Archive's heaviest pages reach a few hundred).
MAX_HOSTS = 1000
#: A recorded HTTP version, as archives write it, in satbench's names.
VERSIONS = {"http/1.0": "h1", "http/1.1": "h1", "http/2": "h2", "http/2.0": "h2", "h2": "h2", "h2c": "h2",
            "http/3": "h3", "h3": "h3", "h3-29": "h3"}


@dataclass
class Entry:
    method: str
    url: str
    host: str
    path: str
    query: str
    status: int
    headers: list[tuple[str, str]]
    mime: str
    #: The body's sha256 (its file under bodies/), and its decoded size.
    body: str
    bytes: int
    #: The recorded Content-Encoding, kept out of the headers (None: none recorded).
    encoding: str | None = None
    #: The server's think time as recorded (ms; HAR timings.wait), if the archive has it.
    server_ms: float | None = None
    filled: bool = False
    #: What the import changed: "decoded", "dropped HEADER", ...
    changed: list[str] = field(default_factory=list)
    #: The origin's scheme and port.
    scheme: str = "https"
    port: int = 443
    #: The address of the server that answered, and the HTTP version it spoke, where recorded.
    ip: str | None = None
    version: str | None = None


@dataclass
class Site:
    source: str
    kind: str
    #: The page: the first document's URL.
    page: str
    hosts: list[str]
    entries: list[Entry]
    version: int = SITE_VERSION
    #: Query parameters replay ignores when it matches a request (cache-busters, session ids).
    volatile: list[str] = field(default_factory=list)
    #: When the page was recorded (unix ms; HAR startedDateTime), for deterministic replay.
    recorded_at_ms: int | None = None

    @property
    def failed(self) -> list[str]:
        """The URLs of entries that got no response (a status below 100: the request failed when
        recorded; kept, not replayed)."""
        return [e.url for e in self.entries if e.status < 100]

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["filled"] = sum(e.filled for e in self.entries)
        d["failed"] = len(self.failed)
        d["decoded"] = sum("decoded" in e.changed for e in self.entries)
        return d


class _Bodies:
    """Bodies by content, written once each (whole, never through a symlink), at most
    ``MAX_SITE_BYTES`` in all."""

    def __init__(self, folder: Path, source: Path):
        self.folder, self.source, self.total, self.seen = folder, source, 0, set[str]()
        try:
            real_folder(folder)
        except OSError as e:
            raise InputError(f"--out: {e}") from None

    def put(self, data: bytes) -> str:
        h = hashlib.sha256(data).hexdigest()
        if h not in self.seen:
            self.seen.add(h)
            self.total += len(data)
            if self.total > MAX_SITE_BYTES:
                raise InputError(f"{self.source}: its bodies hold over {MAX_SITE_BYTES >> 30} GiB in all; refused")
        p = self.folder / h
        try:
            if p.is_symlink() or not p.is_file() or p.stat().st_size != len(data):
                write_new(p, data)
        except OSError as e:
            raise InputError(f"--out: cannot write {p}: {e.strerror or e}") from None
        return h


def _fill(url: str, n: int, where: str) -> bytes:
    """``n`` incompressible bytes, the same for the same URL."""
    if n > MAX_BODY_BYTES:
        raise InputError(f"{where}: response.content.size {n} is over {MAX_BODY_BYTES >> 20} MiB; refused")
    return random.Random(hashlib.sha256(url.encode()).digest()).randbytes(n)


def _host(url: str, where: str, field: str) -> tuple[str, str, str]:
    """An http(s) URL's host (a host name, lowercased), path and query; refused with one line
    otherwise."""
    _, host, _, path, query = _url(url, where, field)
    return host, path, query


def _url(url: str, where: str, field: str) -> tuple[str, str, int, str, str]:
    """An http(s) URL's scheme, host (a host name, lowercased), port (the scheme's default if none),
    path and query; refused with one line otherwise."""
    try:
        u = urlsplit(url)
        host = u.hostname
    except ValueError:
        raise InputError(f"{where}: {field} is not a URL: {url[:200]!r}") from None
    try:
        port = u.port or (80 if u.scheme == "http" else 443)
    except ValueError:
        raise InputError(f"{where}: {field}'s port is out of range (1 to 65535): {url[:200]!r}") from None
    if u.scheme not in ("http", "https") or not host:
        raise InputError(f"{where}: {field} is not an http(s) URL: {url[:200]!r}")
    if not is_host_name(host):
        raise InputError(f"{where}: {field}'s host is no host name (an IP literal, or a name no browser "
                         f"sends): {host[:200]!r}")
    return u.scheme, host, port, u.path or "/", u.query


def is_host_name(host: str) -> bool:
    """A name a testbed can give a server: a host name whose last label is no number (a browser takes
    such a name for an IPv4 address, WHATWG URL's "ends in a number", and goes there)."""
    last = host.rstrip(".").rsplit(".", 1)[-1]
    return bool(re.fullmatch(HOST_NAME_RE, host)) and not last.isdigit() and not re.fullmatch(r"0x[0-9a-f]*", last)


def _address(value: Any) -> str | None:
    """A recorded server address (HAR ``serverIPAddress``, IPv6 with or without brackets), or None."""
    try:
        return str(ipaddress.ip_address(str(value).strip().strip("[]"))) if value else None
    except ValueError:
        return None


def _redirects_to_itself(url: str, status: int, headers: list[tuple[str, str]]) -> bool:
    location = next((v for k, v in headers if k.lower() == "location"), None)
    if not 300 <= status <= 399 or location is None:
        return False
    target = urljoin(url, location.strip()).split("#")[0]
    return _normal(target) == _normal(url.split("#")[0])


def _normal(url: str) -> str:
    try:
        u = urlsplit(url)
        port = u.port or (80 if u.scheme == "http" else 443)
    except ValueError:
        return url
    return f"{u.scheme}://{(u.hostname or '').rstrip('.')}:{port}{u.path or '/'}?{u.query}"


def _headers(raw: list[tuple[str, str]], changed: list[str]) -> tuple[list[tuple[str, str]], str | None]:
    """The headers kept, and the recorded content encoding (taken out)."""
    out, encoding = [], None
    for k, v in raw:
        lk = k.lower()
        if lk.startswith(":") or lk in HOP_BY_HOP or lk in COMPUTED:
            changed.append(f"dropped {lk}")
        elif lk == "content-encoding":
            encoding = v.strip().lower() or None
        else:
            out.append((k, v))
    return out, encoding


def _decode(data: bytes, encoding: str | None, where: str) -> bytes:
    """A body as recorded on the wire, decoded, at most ``MAX_BODY_BYTES`` (refused with one line
    if it is more, or not what it says)."""
    if encoding in (None, "identity"):
        return data
    try:
        return inflate(data, encoding, MAX_BODY_BYTES)
    except TooLarge:
        raise InputError(f"{where}: the body is over {MAX_BODY_BYTES >> 20} MiB once decoded ({encoding}); "
                         "refused") from None
    except ValueError as e:
        raise InputError(f"{where}: {e}") from None


def import_har(path: Path, out: Path, volatile: Sequence[str] = ()) -> Site:
    """Import a HAR 1.2 file (see the module)."""
    doc = _json(path, gz=path.suffix == ".gz")
    log = doc.get("log") if isinstance(doc, dict) else None
    if not isinstance(log, dict) or not isinstance(log.get("entries"), list):
        raise InputError(f"{path}: not a HAR (no log.entries)")
    bodies = _Bodies(out / "bodies", path)
    entries: list[Entry] = []
    for i, e in enumerate(log["entries"]):
        where = f"{path}: entry {i}"
        try:
            req, resp = e["request"], e["response"]
            method, url, status = str(req["method"]).upper(), str(req["url"]), int(resp["status"])
            content = resp.get("content") or {}
            raw = [(str(h["name"]), str(h["value"])) for h in resp.get("headers") or []]
            if not isinstance(content, dict):
                raise TypeError("response.content is not an object")
            size = content.get("size")
            size = size if isinstance(size, int) and size >= 0 else max(0, int(resp.get("bodySize") or 0))
            wait = (e.get("timings") or {}).get("wait")
            version = VERSIONS.get(str(resp.get("httpVersion") or "").strip().lower())
            ip = _address(e.get("serverIPAddress"))
        except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as err:
            raise InputError(f"{where}: missing or malformed field {err}") from None
        scheme, host, port, url_path, query = _url(url, where, "request.url")
        if _redirects_to_itself(url, status, raw):
            raise InputError(f"{where}: response.headers: a {status} redirect to its own URL (a loop)")
        changed: list[str] = []
        headers, encoding = _headers(raw, changed)
        text, filled = content.get("text"), False
        if text is None:
            data, filled = _fill(url, size, where), size > 0
        elif content.get("encoding") == "base64":
            try:
                data = base64.b64decode(text, validate=True)
            except (ValueError, TypeError):
                raise InputError(f"{where}: response.content.text is not base64") from None
        else:
            data = str(text).encode()
        if encoding not in (None, "identity"):
            changed.append("decoded")  # a HAR's content.text is the decoded body
        entries.append(Entry(method=method, url=url, host=host, path=url_path, query=query,
                             status=status, headers=headers, mime=str(content.get("mimeType") or ""),
                             body=bodies.put(data), bytes=len(data), encoding=encoding,
                             server_ms=float(wait) if isinstance(wait, (int, float)) and wait >= 0 else None,
                             filled=filled, changed=changed, scheme=scheme, port=port, ip=ip, version=version))
    pages = log.get("pages") or []
    if not isinstance(pages, list):
        raise InputError(f"{path}: log.pages is not a list")
    first = log["entries"][0] if log["entries"] and isinstance(log["entries"][0], dict) else {}
    return _site(path, "har", entries, out, pages, volatile, first.get("startedDateTime"))


def import_wpr(path: Path, out: Path, volatile: Sequence[str] = ()) -> Site:
    """Import a Web Page Replay archive (gzipped JSON: ``Requests`` by host and URL, each a list of
    recorded exchanges with the request and the response serialized as HTTP/1.1 messages,
    base64-encoded)."""
    doc = _json(path, gz=True)
    reqs = doc.get("Requests") if isinstance(doc, dict) else None
    if not isinstance(reqs, dict):
        raise InputError(f"{path}: not a Web Page Replay archive (no Requests)")
    bodies = _Bodies(out / "bodies", path)
    entries: list[Entry] = []
    # The protocol each host negotiated, where the archive kept it (WPR's NegotiatedProtocol).
    negotiated = doc.get("NegotiatedProtocol") if isinstance(doc.get("NegotiatedProtocol"), dict) else {}
    i = 0
    for _recorded_host, by_url in reqs.items():
        if not isinstance(by_url, dict):
            raise InputError(f"{path}: Requests[{str(_recorded_host)[:100]!r}] is not an object")
        for url, exchanges in by_url.items():
            for x in exchanges if isinstance(exchanges, list) else []:
                where = f"{path}: entry {i} ({str(url)[:200]})"
                i += 1
                try:
                    request = base64.b64decode(x["SerializedRequest"])
                    response = base64.b64decode(x["SerializedResponse"])
                except (KeyError, TypeError, ValueError):
                    raise InputError(f"{where}: SerializedRequest and SerializedResponse must be base64") from None
                method = request.split(b" ", 1)[0].decode(errors="replace").upper() or "GET"
                status, raw, body = _http1_response(response, where)
                scheme, host, port, url_path, query = _url(str(url), where, "the URL")
                if _redirects_to_itself(str(url), status, raw):
                    raise InputError(f"{where}: a {status} redirect to its own URL (a loop)")
                changed: list[str] = []
                headers, encoding = _headers(raw, changed)
                if any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in raw):
                    body = _dechunk(body, where)
                data = _decode(body, encoding, where)
                if encoding not in (None, "identity"):
                    changed.append("decoded")
                mime = next((v.split(";")[0].strip() for k, v in raw if k.lower() == "content-type"), "")
                entries.append(Entry(method=method, url=str(url), host=host, path=url_path, query=query,
                                     status=status, headers=headers, mime=mime, body=bodies.put(data),
                                     bytes=len(data), encoding=encoding, changed=changed, scheme=scheme,
                                     port=port, version=VERSIONS.get(str(negotiated.get(host) or "").lower())))
    return _site(path, "wpr", entries, out, [], volatile)


def _http1_response(raw: bytes, where: str) -> tuple[int, list[tuple[str, str]], bytes]:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        raise InputError(f"{where}: the response is no HTTP/1.1 message (no blank line after its headers)")
    lines = head.decode("iso-8859-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    try:
        status = int(parts[1])
        if not 100 <= status <= 999:
            raise ValueError(status)
    except (IndexError, ValueError):
        raise InputError(f"{where}: bad status line {lines[0]!r}") from None
    headers = []
    for line in lines[1:]:
        k, colon, v = line.partition(":")
        if colon:
            headers.append((k.strip(), v.strip()))
    return status, headers, body


def _dechunk(body: bytes, where: str) -> bytes:
    out, at = bytearray(), 0
    while True:
        end = body.find(b"\r\n", at)
        try:
            n = int(body[at:end if end >= 0 else len(body)].split(b";")[0], 16)
        except ValueError:
            raise InputError(f"{where}: bad chunked body") from None
        if n <= 0 or end < 0:
            return bytes(out)
        out += body[end + 2:end + 2 + n]
        at = end + 4 + n


def _json(path: Path, gz: bool) -> Any:
    try:
        if path.stat().st_size > MAX_ARCHIVE_BYTES:
            raise InputError(f"{path}: over {MAX_ARCHIVE_BYTES >> 30} GiB; refused")
        data = path.read_bytes()
        if gz or data[:2] == b"\x1f\x8b":
            data = inflate(data, "gzip", MAX_ARCHIVE_BYTES)
        return json.loads(data)
    except OSError as e:
        raise InputError(f"{path}: cannot read it: {e.strerror or e}") from None
    except TooLarge:
        raise InputError(f"{path}: over {MAX_ARCHIVE_BYTES >> 30} GiB once decompressed; refused") from None
    except RecursionError:
        raise InputError(f"{path}: not JSON (nested too deeply)") from None
    except ValueError as e:
        raise InputError(f"{path}: not JSON ({(str(e).splitlines() or [''])[0][:120]})") from None


def _started_ms(value: Any) -> int | None:
    """A HAR ``startedDateTime`` (ISO 8601) in unix ms, or None."""
    import datetime  # noqa: PLC0415

    try:
        t = datetime.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    ms = int(t.timestamp() * 1000)
    return ms if 0 <= ms < 1 << 53 else None


def _site(path: Path, kind: str, entries: list[Entry], out: Path, pages: list[Any], volatile: Sequence[str] = (),
          started: Any = None) -> Site:
    if not entries:
        raise InputError(f"{path}: no entries to import")
    hosts = {e.host for e in entries}
    if len(hosts) > MAX_HOSTS:
        raise InputError(f"{path}: {len(hosts)} hosts; a site replays at most {MAX_HOSTS}")
    first_page = next((str(p.get("title")) for p in pages if isinstance(p, dict) and p.get("title")), None)
    docs = [e for e in entries if e.mime.startswith("text/html") and e.status == 200]
    page = first_page if first_page and first_page.startswith(("http://", "https://")) else (
        docs[0].url if docs else entries[0].url)
    # A recording that began with a redirect (typing a domain: http:// to https://, or to www.) starts
    # there, so that replay follows it as the browser did.
    if page != entries[0].url and _redirects_to(entries, entries[0], page):
        page = entries[0].url
    first = next((p.get("startedDateTime") for p in pages if isinstance(p, dict) and p.get("startedDateTime")),
                 started)
    site = Site(source=str(path), kind=kind, page=page, hosts=sorted({e.host for e in entries}), entries=entries,
                volatile=list(volatile), recorded_at_ms=_started_ms(first) if first else None)
    try:
        write_new(out / "site.json", (json.dumps(site.to_json(), indent=1) + "\n").encode())
    except OSError as e:
        raise InputError(f"--out: {e}") from None
    return site


def _redirects_to(entries: list[Entry], first: Entry, page: str, hops: int = 10) -> bool:
    """Whether ``first`` is a redirect whose chain, through the recording's own redirects, reaches
    ``page``."""
    by_url = {_normal(e.url): e for e in reversed(entries)}
    e: Entry | None = first
    for _ in range(hops):
        if e is None or not 300 <= e.status <= 399:
            return False
        loc = next((v for k, v in e.headers if k.lower() == "location"), None)
        if loc is None:
            return False
        nxt = _normal(urljoin(e.url, loc.strip()))
        if nxt == _normal(page):
            return True
        e = by_url.get(nxt)
    return False


def import_folder(path: Path, out: Path, host: str = "server.test") -> Site:
    """A folder of one's own files as a site of one origin (``host``): every file an entry at its path,
    typed by its extension; the page is its ``index.html``."""
    import mimetypes  # noqa: PLC0415

    if not (path / "index.html").is_file():
        raise InputError(f"{path}: a folder served as a page needs an index.html")
    bodies = _Bodies(out / "bodies", path)
    entries = []
    files = []
    for top, dirs, names in os.walk(path):  # symlinks are not followed, and refused
        for n in sorted(dirs + names):
            f = Path(top, n)
            if f.is_symlink():
                raise InputError(f"{f}: a symlink; a folder served as a page holds its own files (refused)")
        files += [Path(top, n) for n in names]
    for f in sorted(files):
        if not f.is_file():
            raise InputError(f"{f}: not a regular file (refused)")
        if f.stat().st_size > MAX_BODY_BYTES:
            raise InputError(f"{f}: over {MAX_BODY_BYTES >> 20} MiB; refused")
        rel = f.relative_to(path).as_posix()
        data = f.read_bytes()
        url_path = "/" if rel == "index.html" else "/" + rel
        mime = mimetypes.guess_type(rel)[0] or "application/octet-stream"
        entries.append(Entry(method="GET", url=f"https://{host}{url_path}", host=host, path=url_path, query="",
                             status=200, headers=[("Content-Type", mime)], mime=mime, body=bodies.put(data),
                             bytes=len(data)))
    entries.sort(key=lambda e: e.path != "/")  # the page first
    return _site(path, "folder", entries, out, [])


def annotate_connections(har: Path, resources: Sequence[dict[str, Any]]) -> int:
    """Name each entry's connection in a HAR a load wrote (HAR 1.2's optional ``connection``), from
    the load's resources (``LoadResult.resources``: each URL with the browser's connection id),
    matched by URL in order, so that a recording says how many connections each origin took.
    Returns the entries named."""
    doc = json.loads(har.read_text())
    pending: dict[str, list[str]] = {}
    for r in resources:
        if r.get("connection") is not None:
            pending.setdefault(str(r["url"]), []).append(str(r["connection"]))
    named = 0
    for e in doc["log"]["entries"]:
        ids = pending.get(e["request"]["url"])
        if ids and "connection" not in e:
            e["connection"] = ids.pop(0)
            named += 1
    write_new(har, json.dumps(doc).encode())
    return named


def import_archive(path: Path, out: Path, volatile: Sequence[str] = ()) -> Site:
    """Import a HAR (``.har``, ``.har.gz``, or JSON with ``log``) or a Web Page Replay archive
    (``.wprgo``: gzipped JSON with ``Requests``) into ``out``; replay ignores the query parameters
    named in ``volatile`` when it matches a request."""
    for v in volatile:
        if not v or any(c in v for c in "&=?#"):
            raise InputError(f"--volatile: not a query parameter's name: {v!r}")
    # Into a folder of its own inside ``out`` first, moved into place only once the whole archive
    # imported: a refused archive leaves nothing behind.
    stage = out / f".import-{secrets.token_hex(4)}"
    try:
        real_folder(out)
        real_folder(stage)
    except OSError as e:
        raise InputError(f"--out {out}: cannot write there: {e.strerror or e}") from None
    try:
        site = (import_wpr if path.name.endswith(".wprgo") else import_har)(path, stage, volatile)
        try:
            real_folder(out / "bodies")
            for f in sorted((stage / "bodies").iterdir()):
                os.replace(f, out / "bodies" / f.name)  # (a symlink in its place is replaced, not followed)
            os.replace(stage / "site.json", out / "site.json")
        except OSError as e:
            raise InputError(f"--out {out}: cannot write there: {e.strerror or e}") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return site


@dataclass(frozen=True)
class Replay:
    """An imported site laid out for its origins: one replay manifest per server group (what
    satbench-server's ``--replay`` reads), in ``groups`` order, each with an (empty) root folder."""

    page: str
    groups: list[ServerGroup]
    roots: list[Path]
    manifests: list[Path]
    #: The bytes of every distinct body served, and how many entries are served.
    bytes: int
    served: int
    #: What cannot be replayed as recorded: a status the server does not send (1xx), a header
    #: HTTP cannot carry (left out).
    notes: list[str]

    @property
    def hosts(self) -> list[str]:
        return [h for g in self.groups for h in g.names]


#: Headers a replaying server sets itself: left out of what it sends as recorded (satbench-server's
#: replay.rs refuses a manifest with these or the hop-by-hop ones: ``SERVER_SETS``).
SERVER_SET = COMPUTED | {"content-type", "content-encoding", "server", "timing-allow-origin", "alt-svc"}
REPLAY_VERSION = 2
#: The longest recorded think time replayed (ms; replay.rs's limit).
MAX_THINK_MS = 600_000
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _sendable(name: str, value: str) -> bool:
    """A header HTTP/1.1, HTTP/2 and HTTP/3 can all carry (an RFC 9110 token; visible ASCII)."""
    return bool(_TOKEN.fullmatch(name)) and all(c == "\t" or " " <= c <= "~" for c in value)


def replay_manifest(doc: dict[str, Any], folder: Path, group: ServerGroup, notes: list[str] | None = None
                    ) -> dict[str, Any]:
    """The replay manifest of one server group (the format's one owner; satbench-server's
    ``replay.rs`` reads it, and tests it against tests/fixtures/golden/replay.json): each origin of
    the group with every entry of it with a status the server can send, its recorded headers but
    those the server sets, its content type as recorded, its body by hash under ``folder/bodies``,
    its think time."""
    notes = [] if notes is None else notes
    by_origin: dict[OriginKey, list[dict[str, Any]]] = {o: [] for o in group.origins}
    for e in doc["entries"]:
        entries = by_origin.get(_origin(e))
        if entries is None:
            continue
        if not 200 <= int(e["status"]) <= 599:
            notes.append(f"{e['method']} {e['url']}: status {e['status']} not replayed")
            continue
        if not re.fullmatch(r"[A-Z]+", e["method"]):
            notes.append(f"{e['method']!r} {e['url']}: not a method; not replayed")
            continue
        if int(e["status"]) == 304:
            notes.append(f"{e['url']}: recorded as 304 (a revalidation from a warm cache): replayed as 304")
        think = e.get("server_ms")
        if think is not None and not 0 <= float(think) <= MAX_THINK_MS:
            notes.append(f"{e['url']}: recorded think time {think} ms left out (0 to {MAX_THINK_MS} ms)")
            think = None
        headers = []
        for k, v in e["headers"]:
            if k.lower() in SERVER_SET or k.lower() in HOP_BY_HOP:
                continue
            if _sendable(k, v):
                headers.append([k.lower(), v])
            else:
                notes.append(f"{e['url']}: header {k!r} cannot be sent as recorded (left out)")
        ctype = next((v for k, v in e["headers"] if k.lower() == "content-type" and _sendable(k, v)), None)
        if ctype is None and e["mime"] and _sendable("content-type", e["mime"]):
            ctype = e["mime"]
        entries.append({"method": e["method"], "path": e["path"], "query": e["query"], "status": int(e["status"]),
                        "content_type": ctype or "application/octet-stream", "headers": headers,
                        "body": e["body"], "bytes": int(e["bytes"]), "server_ms": think})
    at = doc.get("recorded_at_ms")
    return {"version": REPLAY_VERSION, "bodies": str((folder / "bodies").resolve()),
            "volatile": list(doc.get("volatile") or []),
            "recorded_at_ms": at if isinstance(at, int) and not isinstance(at, bool) and 0 <= at < 1 << 53 else None,
            "origins": [{"scheme": s, "host": h, "port": p, "entries": es} for (s, h, p), es in by_origin.items()]}


def load_site(folder: Path) -> dict[str, Any]:
    """An imported site's manifest (``site.json``)."""
    try:
        doc = json.loads((folder / "site.json").read_text())
    except OSError as e:
        raise InputError(f"{folder}: no imported site here (site.json: {e.strerror}); satbench pages import "
                         "makes one") from None
    except ValueError:
        raise InputError(f"{folder / 'site.json'}: not JSON") from None
    where = folder / "site.json"
    if not isinstance(doc, dict) or doc.get("version") not in (1, SITE_VERSION) or not doc.get("entries"):
        raise InputError(f"{where}: not an imported site of version 1 or {SITE_VERSION}")
    # A manifest may come from elsewhere: every name that becomes a path or a server's name is checked.
    if not isinstance(doc.get("hosts"), list) or not isinstance(doc["entries"], list):
        raise InputError(f"{where}: hosts and entries must be lists")
    for i, h in enumerate(doc["hosts"]):
        if not isinstance(h, str) or not is_host_name(h):
            raise InputError(f"{where}: hosts[{i}] is no host name: {str(h)[:200]!r}")
    for i, x in enumerate(doc["entries"]):
        if not isinstance(x, dict) or x.get("host") not in doc["hosts"]:
            raise InputError(f"{where}: entries[{i}].host is not one of hosts")
        if not isinstance(x.get("body"), str) or not re.fullmatch(r"[0-9a-f]{64}", x["body"]):
            raise InputError(f"{where}: entries[{i}].body is not a SHA-256 in hex")
        if "scheme" not in x:  # version 1: the origin from the URL
            x["scheme"], _, x["port"], _, _ = _url(str(x.get("url", f"https://{x['host']}/")), str(where),
                                                   f"entries[{i}].url")
        if x["scheme"] not in ("http", "https") or not isinstance(x.get("port"), int) or not 1 <= x["port"] <= 65535:
            raise InputError(f"{where}: entries[{i}]: scheme must be http or https, port 1 to 65535")
        if x.get("ip") is not None and _address(x["ip"]) is None:
            raise InputError(f"{where}: entries[{i}].ip is not an address")
        bad = _entry_problem(x)
        if bad:
            raise InputError(f"{where}: entries[{i}].{bad}")
    if not isinstance(doc.get("page"), str):
        raise InputError(f"{where}: page is not a URL")
    _host(doc["page"], str(where), "page")
    return doc


def _entry_problem(x: dict[str, Any]) -> str | None:
    """What is wrong with a manifest entry's fields replay reads (None: nothing)."""
    def num(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    if not isinstance(x.get("method"), str) or not re.fullmatch(r"[A-Z]{1,20}", x["method"]):
        return "method is not a method"
    if not isinstance(x.get("path"), str) or not x["path"].startswith("/") or any(c in x["path"] for c in "?#"):
        return "path must start with / and hold no query"
    if not isinstance(x.get("query"), str):
        return "query is not a text"
    if not isinstance(x.get("status"), int) or isinstance(x["status"], bool) or not -1 <= x["status"] <= 999:
        return "status is not a status"
    if not isinstance(x.get("bytes"), int) or isinstance(x["bytes"], bool) or not 0 <= x["bytes"] <= MAX_BODY_BYTES:
        return "bytes is not a size"
    if not isinstance(x.get("mime", ""), str):
        return "mime is not a text"
    h = x.get("headers")
    if not isinstance(h, list) or not all(isinstance(p, list) and len(p) == 2 and all(isinstance(v, str) for v in p)
                                          for p in h):
        return "headers is not a list of [name, value]"
    if x.get("server_ms") is not None and not (num(x["server_ms"]) and 0 <= x["server_ms"] < 1e9):
        return "server_ms is not a time"
    return None


#: An origin: scheme, host, port.
OriginKey = tuple[str, str, int]


@dataclass(frozen=True)
class ServerGroup:
    """The hosts one server address answers for in replay: those the recording saw at one address
    (or one host, where it saw none), with every origin of theirs."""

    names: list[str]
    #: The address they had in the recording (None: not recorded).
    recorded: str | None
    origins: list[OriginKey]
    #: The HTTP version each origin spoke in the recording, as most of its responses did (None: not
    #: recorded).
    versions: dict[OriginKey, str | None] = field(default_factory=dict)

    @property
    def newest(self) -> str | None:
        """The newest version any of its HTTPS origins spoke in the recording (None: none recorded)."""
        got = [v for (s, _, _), v in self.versions.items() if s == "https" and v]
        return max(got, key=("h1", "h2", "h3").index) if got else None

    @property
    def listeners(self) -> list[tuple[int, int]]:
        """The (HTTPS port, cleartext port) pairs its servers listen on, one server each (0: none of
        that kind): 443 and 80 together, any other port on a server of its own."""
        https = sorted({p for s, _, p in self.origins if s == "https"}, key=lambda p: p != 443) or [443]
        http = sorted({p for s, _, p in self.origins if s == "http"}, key=lambda p: p != 80)
        out = [(https[0], http[0] if http and http[0] == 80 else 0)]
        out += [(p, 0) for p in https[1:]]
        out += [(0, p) for p in http if p != out[0][1]]
        return out


def _origin(e: dict[str, Any]) -> OriginKey:
    return str(e["scheme"]), str(e["host"]), int(e["port"])


def server_groups(doc: dict[str, Any]) -> list[ServerGroup]:
    """An imported site's hosts grouped as the recording grouped them: each host at the address it
    was answered from most often (the first recorded of a tie), hosts of one address together; a host
    with no recorded address alone. The page's group first (the testbed's first server host), then in
    recorded order; within a group, the page's host first, then in recorded order."""
    page = urlsplit(doc["page"]).hostname
    seen: dict[str, dict[str | None, int]] = {}
    origins: dict[str, list[OriginKey]] = {}
    spoke: dict[OriginKey, dict[str, int]] = {}
    for e in doc["entries"]:
        if e.get("version") in ("h1", "h2", "h3"):
            spoke.setdefault(_origin(e), {})
            spoke[_origin(e)][e["version"]] = spoke[_origin(e)].get(e["version"], 0) + 1
        counts = seen.setdefault(e["host"], {})
        counts[e.get("ip")] = counts.get(e.get("ip"), 0) + 1
        o = _origin(e)
        if o not in origins.setdefault(e["host"], []):
            origins[e["host"]].append(o)
    hosts = sorted(seen, key=lambda h: h != page)  # (stable: recorded order otherwise)
    groups: dict[str, list[str]] = {}
    for h in hosts:
        ips = [ip for ip in seen[h] if ip is not None]
        addr = max(ips, key=lambda ip: seen[h][ip]) if ips else None
        groups.setdefault(addr if addr is not None else f"host:{h}", []).append(h)
    out = []
    for key, names in groups.items():
        mine = [o for h in names for o in origins[h]]
        out.append(ServerGroup(names=names, recorded=None if key.startswith("host:") else key, origins=mine,
                               versions={o: max(spoke[o], key=lambda v: spoke[o][v]) if o in spoke else None
                                         for o in mine}))
    return out


def origin_hosts(doc: dict[str, Any]) -> list[str]:
    """An imported site's hosts, the page's first, in the order of their server groups."""
    return [h for g in server_groups(doc) for h in g.names]


def materialize(folder: Path, out: Path) -> Replay:
    """Lay an imported site out under ``out`` for its server groups, once (an existing layout made
    from the same manifest is kept): ``out/TAG/gK.replay.json`` per group, and an empty root folder."""
    doc = load_site(folder)
    # The layout depends on the manifest, on where the bodies are (the manifests name their folder)
    # and on this code's version of the format.
    key = (folder / "site.json").read_bytes() + f"\n{folder.resolve()}\n{REPLAY_VERSION}".encode()
    tag = hashlib.sha256(key).hexdigest()[:16]
    groups = server_groups(doc)
    notes: list[str] = []
    roots, manifests, served, seen = [], [], 0, set()
    total = 0
    try:
        real_folder(out / tag)
        real_folder(out / tag / "roots")
    except OSError as err:
        raise InputError(f"{out}: cannot lay the site out there: {err.strerror or err}") from None
    for k, g in enumerate(groups, 1):
        m = replay_manifest(doc, folder, g, notes)
        path = out / tag / f"g{k}.replay.json"
        text = json.dumps(m) + "\n"
        try:
            root = real_folder(out / tag / "roots" / f"g{k}")
            if path.is_symlink() or not path.is_file() or path.read_text() != text:
                write_new(path, text.encode())
        except OSError as err:
            raise InputError(f"{path}: cannot write it: {err.strerror or err}") from None
        roots.append(root)
        manifests.append(path)
        for o in m["origins"]:
            served += len(o["entries"])
            for e in o["entries"]:
                if e["body"] not in seen:
                    seen.add(e["body"])
                    total += e["bytes"]
    return Replay(page=doc["page"], groups=groups, roots=roots, manifests=manifests, bytes=total, served=served,
                  notes=notes)
