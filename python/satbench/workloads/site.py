"""A recorded site replayed (``page = "site:DIR"``, DIR an imported site:
:mod:`satbench.endpoints.sites`). The hosts are grouped as the recording
grouped them (:func:`~satbench.endpoints.sites.server_groups`): one server
host behind the link for each address the recorded hosts had (one per host
where the archive has none), resolved by the testbed's names (hosts files,
or its DNS across the link), with one certificate from the test CA naming
all of its hosts, serving their origins (scheme, host and port as recorded:
``http://`` in the clear, ``https://`` over HTTP/1.1, HTTP/2 and HTTP/3) from
one satbench-server, and another for each other port; the browser told to
use QUIC for every HTTPS origin. So a browser opens the connections, and
coalesces them, where it did on the real site, and per-origin handshakes are
the site's own.

Each origin answers as its recorded host did (satbench-server ``--replay``):
the recorded status, headers, content type and body, the request matched as
Web Page Replay matches it (the same path and query, or else the recorded
query of that path with the most parameters in common; parameters marked
volatile at import ignored), the recorded server think time with
``server.replay_think = true``. Requests the recording lacks are answered 404
and counted per trial by the origins (``site_not_found``), and those matched
by a closest query too (``site_fuzzy_matched``).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from ..endpoints import ca, sites
from ..endpoints.base import Origin
from ..errors import InputError, SatbenchError
from ..model import ClientKind, ClientOutcome, Protocol, ServerKind, TrialStatus
from . import Problem, Workload

if TYPE_CHECKING:
    from ..endpoints.base import LoadRequest
    from ..experiment.trialspec import TrialSpec
    from ..link.spec import LinkSpec
    from ..results.read import Results
    from ..results.report import Figures
    from ..results.store import TrialRecord
    from ..testbed.testbed import TestbedSpec

PREFIX = "site:"
#: A recorded archive given as it is (a HAR or a Web Page Replay archive), imported on first use.
ARCHIVE = "har:"
#: A folder of one's own files, served as a page of one origin (its index.html), imported on first use.
FOLDER = "dir:"
#: A site shaped like the web's real pages (satbench.endpoints.websites), generated and imported on first use.
WEB = "web:"
#: Server hosts (recorded addresses, or hosts where none are recorded) a testbed gives one site at most.
MAX_SERVER_HOSTS = 200


def cache_dir() -> Path:
    """Where archives given as ``har:FILE`` are imported (once per archive's content)."""
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "satbench" / "sites"


def folder(trial: TrialSpec) -> Path:
    """The imported site a trial replays: ``site:DIR`` itself, or ``har:FILE`` and ``dir:DIR`` imported
    into the cache (once per process: the archive is hashed and the folder walked once)."""
    return _folder(trial.page)


@cache
def _doc(page: str) -> dict[str, Any]:
    """The imported site's manifest, read once per process."""
    return sites.load_site(_folder(page))


@cache
def _identity(page: str) -> str:
    """The imported site's manifest hashed (every entry with its status, headers and body's sha256),
    but not where it was imported from: the same archive anywhere is the same site. (A site not
    there raises, and is looked for again the next time.)"""
    doc = {k: v for k, v in _doc(page).items() if k != "source"}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]


@cache
def _folder(page: str) -> Path:
    if page.startswith(ARCHIVE):
        archive = Path(page[len(ARCHIVE):]).expanduser()
        try:
            tag = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
        except OSError as e:
            raise InputError(f"{archive}: cannot read the archive: {e.strerror}") from None
        out = cache_dir() / tag
        if not (out / "site.json").exists():
            sites.import_archive(archive, out)
        return out
    if page.startswith(WEB):
        from ..endpoints import websites  # noqa: PLC0415 - one page kind's module

        try:
            name, seed = websites.parse(page)
        except ValueError as e:
            raise InputError(f"page {page}: {e}") from None
        text = websites.to_json(name, seed)
        out = cache_dir() / ("web-" + hashlib.sha256(text.encode()).hexdigest()[:16])
        if not (out / "site.json").exists():
            out.mkdir(parents=True, exist_ok=True)
            har = out.parent / f".{out.name}.har"
            har.write_text(text)
            try:
                sites.import_archive(har, out)
            finally:
                har.unlink(missing_ok=True)
        return out
    if page.startswith(FOLDER):
        given = Path(page[len(FOLDER):]).expanduser()
        if not given.is_dir():
            raise InputError(f"{given}: no such folder")
        # Its content's identity: every file's path, size and time of change (an edited folder is new).
        sig = "\n".join(f"{p.relative_to(given)}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
                        for p in sorted(given.rglob("*")) if p.is_file())
        out = cache_dir() / ("dir-" + hashlib.sha256(f"{given.resolve()}\n{sig}".encode()).hexdigest()[:16])
        if not (out / "site.json").exists():
            sites.import_folder(given, out)
        return out
    return Path(page[len(PREFIX):]).expanduser()


def _as_recorded(trial: TrialSpec) -> bool:
    return bool(trial.get("replay_protocols") == "recorded")


#: The server options that make an origin speak no newer version than it did in the recording.
_UP_TO = {"h1": (("h2", False), ("h3", False)), "h2": (("h3", False),), "h3": ()}


def _served_as_recorded(g: sites.ServerGroup) -> tuple[tuple[str, Any], ...]:
    """A group's server options for its origins' recorded versions: the newest any of them spoke (one
    server answers all of an address's names; a recording whose names of one address spoke different
    versions is served at the newest, and its trials say where a response differs)."""
    return _UP_TO[g.newest] if g.newest else ()


def _judge_as_recorded(rec: TrialRecord, groups: list[sites.ServerGroup]) -> None:
    """Each response over the version its origin spoke in the recording (cleartext ones over HTTP/1.1),
    or the trial is invalid, saying where."""
    want: dict[tuple[str, int], str] = {}
    for g in groups:
        for (s, h, p), v in g.versions.items():
            if s == "https" and v:
                want[(h, p)] = Protocol(v).alpn
    wrong = []
    for o in rec.objects:
        u = urlsplit(o.url)
        if u.scheme != "https" or o.protocol is None:
            continue
        expect = want.get((u.hostname or "", u.port or 443))
        if expect is not None and o.protocol != expect:
            wrong.append(f"{o.url[:120]} over {o.protocol}, recorded {expect}")
    rec.metrics["site_versions_differing"] = float(len(wrong))
    if wrong and rec.status is TrialStatus.VALID:
        rec.status, rec.reason = TrialStatus.INVALID, (f"{len(wrong)} responses not over the version their origin "
                                                       f"spoke when recorded; first: {wrong[0]}")


#: The layouts made in this process, by (site folder, pages folder).
_LAYOUTS: dict[tuple[Path, Path], sites.Replay] = {}


def _replay(site: Path, pages_root: Path) -> sites.Replay:
    if (site, pages_root) not in _LAYOUTS:
        _LAYOUTS[(site, pages_root)] = sites.materialize(site, pages_root / "sites")
    return _LAYOUTS[(site, pages_root)]


def _layout_notes(page: str) -> list[str]:
    """What the site's replay could not serve as recorded (its layout's notes; none before it is made)."""
    here = _folder(page).resolve()
    return next((list(r.notes) for (f, _), r in _LAYOUTS.items() if f == here), [])


class ReplayedSite(Workload):
    name = "site"
    meaning = "a recorded site (satbench pages import) replayed: its hosts grouped by recorded address"
    generated = False
    replays = True

    @classmethod
    def identity(cls, trial: TrialSpec) -> str | None:
        try:
            return _identity(trial.page)
        except SatbenchError:
            return None  # no site there: refused with its reason where the trial is checked (problem)

    @classmethod
    def claims(cls, trial: TrialSpec) -> bool:
        return trial.page.startswith((PREFIX, ARCHIVE, FOLDER, WEB))

    @classmethod
    def problem(cls, trial: TrialSpec) -> Problem | None:
        try:
            doc = _doc(trial.page)
        except SatbenchError as e:
            return "page", str(e)
        groups = sites.server_groups(doc)
        if len(groups) > MAX_SERVER_HOSTS:
            return "page", (f"the site's {len(doc['hosts'])} hosts need {len(groups)} server addresses; a testbed "
                            f"gives one at most {MAX_SERVER_HOSTS} (a HAR with serverIPAddress groups hosts as the "
                            "real site did)")
        if any(g.protocol is Protocol.H1C for g in trial.groups):
            return "protocol", "a replayed site is served over TLS: h1, h2 or h3"
        if _as_recorded(trial):
            if trial.population is not None or trial.client is not ClientKind.CHROMIUM:
                return "replay_protocols", "each origin's version as recorded: one Chromium client"
            if not any(g.newest for g in groups):
                return "replay_protocols", "the recording names no origin's HTTP version (HAR httpVersion)"
        if trial.shards > 1:
            return "shards", "a replayed site has the origins it was recorded with"
        if trial.server is not ServerKind.SATBENCH:
            return "server", "a replayed site's origins are satbench servers"
        if "proxy" in trial.path:
            return "proxy", "a replayed site's origins are many; the gateway proxy knows the satbench page origin only"
        return None

    @classmethod
    def prepare(cls, trial: TrialSpec, pages_root: Path) -> int | None:
        return _replay(folder(trial).resolve(), pages_root.resolve()).bytes

    @classmethod
    def size(cls, trial: TrialSpec) -> tuple[int, int] | None:
        doc = _doc(trial.page)
        return sum(int(e["bytes"]) for e in doc["entries"]), max(0, len(doc["entries"]) - 1)

    @classmethod
    def configure(cls, trial: TrialSpec, spec: TestbedSpec) -> None:
        groups = sites.server_groups(_doc(trial.page))
        spec.servers = len(groups)
        spec.server_names = [g.names for g in groups]

    @classmethod
    def origins(cls, trial: TrialSpec, pages_root: Path) -> list[Origin] | None:
        r = _replay(folder(trial).resolve(), pages_root.resolve())
        return [Origin(root, ca.issue(g.names), manifest, tuple(g.listeners),
                       _served_as_recorded(g) if _as_recorded(trial) else ())
                for g, root, manifest in zip(r.groups, r.roots, r.manifests)]

    @classmethod
    def request(cls, trial: TrialSpec, req: LoadRequest, session: str, seed: int) -> LoadRequest:
        doc = _doc(trial.page)
        # Every HTTPS origin (HOST:PORT) but the page's own, for a browser told which speak QUIC.
        u = urlsplit(doc["page"])
        page = f"{u.hostname}:{u.port or (80 if u.scheme == 'http' else 443)}"
        groups = sites.server_groups(doc)
        if _as_recorded(trial):
            # QUIC asked of the origins recorded over HTTP/3 alone; the rest negotiate as they did.
            quic = dict.fromkeys(f"{h}:{p}" for g in groups for (s, h, p), v in g.versions.items()
                                 if s == "https" and v == "h3")
            return replace(req, url=doc["page"], origins=tuple(quic), negotiate=True)
        https = dict.fromkeys(f"{h}:{p}" for g in groups for s, h, p in g.origins if s == "https")
        return replace(req, url=doc["page"], origins=tuple(o for o in https if o != page))

    @classmethod
    def mixes_cleartext(cls, trial: TrialSpec) -> bool:
        return any(e.get("scheme") == "http" for e in _doc(trial.page)["entries"])

    @classmethod
    def page_bytes(cls, trial: TrialSpec, loaded: int) -> int:
        # Which of the recorded bodies a load fetched is not known by path here (many origins; a
        # browser may fetch fewer than were recorded): no overhead is claimed rather than a wrong one.
        return 0

    @classmethod
    def judge(cls, rec: TrialRecord, trial: TrialSpec, links: Mapping[str, LinkSpec], outcome: ClientOutcome
              ) -> None:
        # Requests the recording lacked, as the origins counted them (a browser's own favicon request
        # aside), and those answered by the recorded request of the closest query.
        replay = (rec.server_summary.replay if rec.server_summary else None) or {}
        rec.metrics["site_not_found"] = float(replay.get("miss", 0))
        rec.metrics["site_fuzzy_matched"] = float(replay.get("fuzzy", 0))
        hosts = {urlsplit(o.url).hostname for o in rec.objects}
        rec.metrics["site_origins_contacted"] = float(len(hosts))
        doc = _doc(trial.page)
        rec.metrics["site_filled"] = float(doc.get("filled", 0))  # bodies the import made up (recorded sizes)
        if _as_recorded(trial):
            _judge_as_recorded(rec, sites.server_groups(doc))
        groups = sites.server_groups(doc)
        site: dict[str, Any] = {"folder": str(folder(trial)), "page": doc["page"], "hosts": doc["hosts"],
                                "filled": doc.get("filled", 0), "volatile": doc.get("volatile", []),
                                # What the replay used: one address and one certificate per group, a server
                                # per listener.
                                "replay": {"addresses": len(groups), "certificates": len(groups),
                                           "servers": sum(len(g.listeners) for g in groups),
                                           "recorded_addresses": sum(g.recorded is not None for g in groups),
                                           "origins": sum(len(g.origins) for g in groups)}}
        notes = _layout_notes(trial.page)
        if notes:  # what the replay could not serve as recorded
            site["notes"] = notes[:50] + ([f"... and {len(notes) - 50} more"] if len(notes) > 50 else [])
        rec.env["site"] = site

    @classmethod
    def report(cls, r: Results, experiment: str, valid: Any, varied: list[str], figs: Figures) -> str:
        """Replayed sites: per combination, the origins contacted, the connections (in all, and to the
        busiest origin), and requests the recording lacked."""
        import statistics  # noqa: PLC0415

        from ..results.report import table_html  # noqa: PLC0415 - the report imports the workloads

        if "page" not in valid.columns or "site_origins_contacted" not in valid.columns:
            return ""
        mine = valid[valid["site_origins_contacted"].notna()]
        if mine.empty:
            return ""
        objects = r.objects_of([int(x) for x in mine["trial_id"]])
        per_trial: dict[int, tuple[int, int]] = {}
        for tid, g in objects.groupby("trial_id"):
            hosts = g.assign(host=g["url"].map(lambda u: urlsplit(str(u)).hostname))
            conns = hosts.dropna(subset=["connection"]).groupby(["client", "host"])["connection"].nunique()
            per_trial[int(str(tid))] = (int(conns.sum()), int(conns.max()) if len(conns) else 0)
        rows = []
        groups = mine.groupby([v for v in varied if v in mine.columns], dropna=False) if varied else [((), mine)]
        for cell, g in groups:
            cell = cell if isinstance(cell, tuple) else (cell,)
            got = [per_trial[int(t)] for t in g["trial_id"] if int(t) in per_trial]
            fuzzy = int(g["site_fuzzy_matched"].sum()) if "site_fuzzy_matched" in g.columns else "-"
            rows.append([" ".join(f"{k}={v}" for k, v in zip(varied, cell)) or "all",
                         ", ".join(sorted({str(p).split(":", 1)[-1].rstrip("/").rsplit("/", 1)[-1]
                                           for p in g["page"]})), len(g),
                         int(g["site_filled"].max()) if "site_filled" in g.columns and g["site_filled"].notna().any()
                         else "-",
                         statistics.median(g["site_origins_contacted"]),
                         statistics.median(c for c, _ in got) if got else "-",
                         statistics.median(m for _, m in got) if got else "-",
                         int(g["site_not_found"].sum()), fuzzy])
        origin_rows = _per_origin(objects, groups if varied else [((), mine)], varied)
        per_origin = ("<p class='note'>Per origin, medians over the trials of each combination: requests, "
                      "bytes, connections opened, their set-up (TCP or QUIC and TLS, as Resource Timing gives "
                      "it), time to first byte per request, and the origins that shared a connection with it "
                      "(coalescing, in any trial).</p>"
                      + table_html(origin_rows, ["combination", "origin", "requests", "bytes", "connections",
                                                 "set-up (ms)", "first byte (ms)", "shared a connection with"])
                      if origin_rows else "")
        return ("<h3>Replayed sites</h3><p class='note'>Each recorded server address on a server host of its own: the "
                "origins a load contacted, the connections it opened (in all, and to its busiest origin; "
                "medians over the trials), the requests the recording lacked (404s, the browser's favicon "
                "aside) and those answered by the recorded request of the closest query (summed over the "
                "trials), and the bodies the import filled with the recorded number of incompressible bytes "
                "(the archive had none). Which entries were filled and what the replay could not serve as "
                "recorded is in each trial's <code>env.site</code>.</p>"
                + table_html(rows, ["combination", "site", "trials", "filled", "origins", "connections",
                                    "to the busiest origin", "not recorded", "closest query"]) + per_origin)


def _median(xs: list[float]) -> float | str:
    import statistics  # noqa: PLC0415

    return round(statistics.median(xs), 1) if xs else "-"


def _per_origin(objects: Any, groups: Any, varied: list[str]) -> list[list[Any]]:
    """The report's per-origin rows (see :meth:`ReplayedSite.report`)."""
    if objects.empty:
        return []
    o = objects.assign(host=objects["url"].map(lambda u: urlsplit(str(u)).hostname))
    has_setup = "connect_ms" in o.columns
    rows = []
    for cell, g in groups:
        cell = cell if isinstance(cell, tuple) else (cell,)
        name = " ".join(f"{k}={v}" for k, v in zip(varied, cell)) or "all"
        mine = o[o["trial_id"].isin({int(t) for t in g["trial_id"]})]
        conns = mine.dropna(subset=["connection"])
        hosts_of = conns.groupby(["trial_id", "client", "connection"])["host"].agg(lambda h: set(h))
        for host in sorted({h for h in mine["host"] if h}):
            by_trial = mine[mine["host"] == host].groupby("trial_id")
            shared = sorted({other for hs in hosts_of if host in hs for other in hs} - {host})
            setup = ([float(x) for x in mine[(mine["host"] == host)]["connect_ms"].dropna()] if has_setup else [])
            first = [float(t - st) for t, st in zip(mine[mine["host"] == host]["ttfb_ms"],
                                                    mine[mine["host"] == host]["start_ms"])
                     if t == t and st == st and t is not None and st is not None]
            rows.append([name, host, _median([float(len(x)) for _, x in by_trial]),
                         _median([float(x["bytes"].fillna(0).sum()) for _, x in by_trial]),
                         _median([float(x["connection"].nunique()) for _, x in by_trial]),
                         _median(setup), _median(first),
                         ", ".join(shared[:8]) + (f" and {len(shared) - 8} more" if len(shared) > 8 else "")
                         or "-"])
    return rows
