"""Experiment files: a study described in TOML, validated, and expanded into
trials in a recorded (randomised) order.

    [experiment]
    name = "demo"                      # required; the key in the results database
    description = "..."
    repetitions = 3                    # per combination of factors
    order = "random"                   # or "sequential"
    seed = 7                           # run-order seed (default: random, recorded)
    timeout_s = 180                    # per trial
    warmup = 1                         # trials run first and not stored
    artefacts = ["server"]             # any of server, har, netlog, pcap

    [factors]                          # a list is a factor's levels; a scalar is fixed
    link = ["geo", "lan"]
    protocol = ["h1", "h2", "h3"]
    cc = ["cubic", "bbr"]
    page = "uniform-500k"
    "link.ber" = [1e-7, 1e-5]          # any link-profile key (as --set), per direction with forward./return.
    "server.tfo" = [false, true]       # any server option

    [[scenario]]                       # optional: each scenario is a cross product of
    name = "cc"                        # [factors] overridden by its own entries;
    page = ["uniform-1m"]              # the union of the scenarios is the study
    repetitions = 5                    # (optional) its own number of repetitions

    [[trial]]                          # optional: explicit trials (scalars), instead of or
    protocol = "h2"                    # besides the cross product
    page = "shop"

Every problem names the file, line and field. Nothing runs before the
whole file is valid.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import math
import random
import re
import secrets
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from . import pages as pages_mod
from . import profiles
from .errors import ProfileError, SatbenchError

PROTOCOLS = ("h1", "h2", "h3")
CCS = ("cubic", "bbr", "reno")
CLIENTS = ("chromium", "firefox", "loader", "curl")
SERVERS = ("satbench", "nginx", "caddy")
ARTEFACTS = ("server", "har", "netlog", "pcap")
#: Server options an experiment may vary, with their types (see serve.ServerOptions).
SERVER_OPTIONS: dict[str, type] = {"tfo": bool, "resumption": bool, "zero_rtt": bool, "pacing": bool, "h3": bool,
                                   "sndbuf": int, "rcvbuf": int, "quic_initcwnd": int, "tcp_initcwnd": int}


class ExperimentError(ProfileError):
    """A problem in an experiment file, located by file, line and field."""


def _check_choice(choices: tuple[str, ...]) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}, got {v!r}"


def _check_int(lo: int, hi: int) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            return f"must be a whole number from {lo} to {hi}, got {v!r}"
        return None
    return check


def _check_page(v: Any) -> str | None:
    if not isinstance(v, str):
        return f"must be a page name, got {v!r}"
    if v.startswith("bulk:"):
        try:
            pages_mod.parse_size(v[5:])
        except SatbenchError:
            return f"bulk:SIZE needs a size such as bulk:1M or bulk:100M, got {v!r}"
        return None
    if v not in pages_mod.ALL_PAGES:
        return f"unknown page {v!r} (available: {', '.join(pages_mod.ALL_PAGES)}, bulk:SIZE)"
    return None


def _check_str(v: Any) -> str | None:
    return None if isinstance(v, str) and v else f"must be a non-empty string, got {v!r}"


#: The factors an experiment may vary: name -> (check, default, meaning). A new
#: factor (for example PEP placement) is one entry here and its use in the runner.
FACTORS: dict[str, tuple[Callable[[Any], str | None], Any, str]] = {
    "link": (_check_str, None, "link profile name or .toml file"),
    "access": (_check_str, "none", "access link profile between clients and terminal, or none"),
    "protocol": (_check_choice(PROTOCOLS), None, "HTTP version"),
    "cc": (_check_choice(CCS), "cubic", "the server's congestion control (TCP and QUIC)"),
    "page": (_check_page, None, "test page, or bulk:SIZE for one file"),
    "client": (_check_choice(CLIENTS), "chromium",
               "chromium or firefox (real browsers), loader (satbench-load), curl (timing)"),
    "clients": (_check_int(1, 200), 1, "concurrent clients (loader)"),
    "connections": (_check_int(1, 64), 6, "HTTP/1.1 connections per host (loader, firefox)"),
    "server": (_check_choice(SERVERS), "satbench", "the origin server"),
}
REQUIRED = ("link", "protocol", "page")
EXPERIMENT_KEYS = {"name", "description", "repetitions", "order", "seed", "timeout_s", "warmup", "artefacts"}


@dataclass
class Trial:
    factors: dict[str, Any]
    rep: int
    scenarios: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """Stable identity of the trial: its factors and repetition."""
        blob = json.dumps({"f": self.factors, "r": self.rep}, sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()[:16]

    def label(self, only: list[str] | None = None) -> str:
        keys = only if only else [k for k, v in self.factors.items() if k not in FACTORS or v != FACTORS[k][1]
                                  or k in REQUIRED]
        return " ".join(f"{k}={self.factors[k]}" for k in keys if k in self.factors)


@dataclass
class Experiment:
    name: str
    description: str
    file: str
    text: str
    repetitions: int
    order: str
    seed: int
    seed_given: bool
    timeout_s: float
    warmup: int
    artefacts: list[str]
    varied: list[str]
    trials: list[Trial]

    def spec_json(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "repetitions": self.repetitions,
                "order": self.order, "seed": self.seed, "timeout_s": self.timeout_s, "warmup": self.warmup,
                "artefacts": self.artefacts, "varied": self.varied, "trials": len(self.trials)}


class _Locator:
    """Lines of keys in the TOML text: top-level tables and the n-th [[array]] entry."""

    def __init__(self, text: str):
        self.lines = text.splitlines()

    def line(self, table: str | None, key: str | None = None, index: int | None = None) -> int | None:
        current, count = None, -1
        pat = re.compile(r'^\s*(?:"' + re.escape(key) + r'"|' + re.escape(key) + r")\s*=") if key else None
        for i, raw in enumerate(self.lines, 1):
            m = re.match(r"^\s*\[\[\s*([^\]]+?)\s*\]\]", raw) or re.match(r"^\s*\[\s*([^\]]+?)\s*\]", raw)
            if m:
                current = m.group(1).strip('"')
                if index is not None and current == table and raw.lstrip().startswith("[["):
                    count += 1
                if pat is None and current == table and (index is None or count == index):
                    return i
                continue
            if pat and current == table and (index is None or count == index) and pat.match(raw):
                return i
        return None


def load(path: str | Path) -> Experiment:
    """Read and validate an experiment file, and expand its trials."""
    p = Path(path)
    file = str(p)
    try:
        text = p.read_text()
    except OSError as e:
        raise ExperimentError(f"cannot read: {e.strerror}", file=file) from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise ExperimentError(f"not valid TOML: {e}", file=file, line=int(m.group(1)) if m else None) from None
    return parse(doc, text, file)


def parse(doc: dict[str, Any], text: str, file: str) -> Experiment:
    loc = _Locator(text)

    def err(msg: str, table: str | None, key: str | None = None, index: int | None = None,
            fld: str | None = None) -> ExperimentError:
        return ExperimentError(msg, file=file, line=loc.line(table, key, index), field=fld)

    for k in doc:
        if k not in ("experiment", "factors", "scenario", "trial"):
            raise err(f"unknown table or key (expected [experiment], [factors], [[scenario]], [[trial]])",
                      None, k, fld=k)
    ex = doc.get("experiment")
    if not isinstance(ex, dict):
        raise ExperimentError("missing [experiment] table (with at least name)", file=file, line=1)
    for k in ex:
        if k not in EXPERIMENT_KEYS:
            raise err(f"unknown key (known: {', '.join(sorted(EXPERIMENT_KEYS))})", "experiment", k,
                      fld=f"experiment.{k}")
    name = ex.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name or ""):
        raise err("must be a name of letters, digits, '-', '_' or '.'", "experiment", "name" if "name" in ex else None,
                  fld="experiment.name")

    def num(key: str, default: Any, check: Callable[[Any], bool], what: str) -> Any:
        v = ex.get(key, default)
        if isinstance(v, bool) or not check(v):
            raise err(f"{what}, got {v!r}", "experiment", key, fld=f"experiment.{key}")
        return v

    reps = num("repetitions", 1, lambda v: isinstance(v, int) and 1 <= v <= 100_000, "must be a whole number >= 1")
    order = ex.get("order", "random")
    if order not in ("random", "sequential"):
        raise err(f"must be random or sequential, got {order!r}", "experiment", "order", fld="experiment.order")
    seed_given = "seed" in ex
    seed = num("seed", 0, lambda v: isinstance(v, int) and v >= 0, "must be a whole number >= 0") if seed_given \
        else secrets.randbits(31)
    timeout = num("timeout_s", 180, lambda v: isinstance(v, (int, float)) and v > 0, "must be a positive number")
    warmup = num("warmup", 0, lambda v: isinstance(v, int) and 0 <= v <= 100, "must be a whole number from 0 to 100")
    artefacts = ex.get("artefacts", ["server"])
    if not isinstance(artefacts, list) or any(a not in ARTEFACTS for a in artefacts):
        raise err(f"must be a list of {', '.join(ARTEFACTS)}, got {artefacts!r}", "experiment", "artefacts",
                  fld="experiment.artefacts")
    description = ex.get("description", "")
    if not isinstance(description, str):
        raise err("must be a string", "experiment", "description", fld="experiment.description")

    def check_factors(table: dict[str, Any], where: str, index: int | None, scalars_only: bool) -> dict[str, list]:
        out: dict[str, list] = {}
        for k, v in table.items():
            if where == "scenario" and k in ("name", "repetitions"):
                continue
            fld = f"{where}.{k}" if index is None else f"{where}[{index}].{k}"
            levels = v if isinstance(v, list) else [v]
            if scalars_only and isinstance(v, list):
                raise err("a trial fixes each factor: give one value, not a list", where, k, index, fld)
            if not levels:
                raise err("needs at least one level", where, k, index, fld)
            check = _factor_check(k)
            if check is None:
                known = ", ".join([*FACTORS, "link.KEY", "server.OPTION"])
                raise err(f"unknown factor (known: {known})", where, k, index, fld)
            for lv in levels:
                problem = check(lv)
                if problem:
                    raise err(problem, where, k, index, fld)
            if len({json.dumps(x) for x in levels}) != len(levels):
                raise err(f"levels repeat: {levels!r}", where, k, index, fld)
            out[k] = levels
        return out

    base_raw = doc.get("factors", {})
    if not isinstance(base_raw, dict):
        raise err("must be a table", "factors", fld="factors")
    base = check_factors(base_raw, "factors", None, False)
    scen_raw = doc.get("scenario", [])
    trial_raw = doc.get("trial", [])
    if not isinstance(scen_raw, list) or not isinstance(trial_raw, list):
        raise ExperimentError("scenario and trial must be arrays of tables ([[scenario]], [[trial]])", file=file)
    # (scenario, factors, index, table, repetitions)
    combos: list[tuple[str, dict[str, Any], int | None, str, int]] = []
    if scen_raw:
        for i, s in enumerate(scen_raw):
            own = check_factors(s, "scenario", i, False)
            sname = s.get("name", f"scenario{i + 1}")
            s_reps = s.get("repetitions", reps)
            if isinstance(s_reps, bool) or not isinstance(s_reps, int) or s_reps < 1:
                raise err(f"must be a whole number >= 1, got {s_reps!r}", "scenario", "repetitions", i,
                          f"scenario[{i}].repetitions")
            merged = {**base, **own}
            keys = list(merged)
            for values in itertools.product(*(merged[k] for k in keys)):
                combos.append((str(sname), dict(zip(keys, values)), i, "scenario", s_reps))
    elif not trial_raw or any(len(v) > 1 for v in base.values()):
        # The cross product of [factors]; with explicit trials and only fixed
        # factors, [factors] just gives the trials their defaults.
        keys = list(base)
        for values in itertools.product(*(base[k] for k in keys)):
            combos.append(("main", dict(zip(keys, values)), None, "factors", reps))
    for i, t in enumerate(trial_raw):
        own = check_factors(t, "trial", i, True)
        fixed = {k: v[0] for k, v in base.items() if len(v) == 1}
        combos.append((f"trial{i + 1}", {**fixed, **{k: v[0] for k, v in own.items()}}, i, "trial", reps))
    if not combos:
        raise ExperimentError("no trials: give [factors], [[scenario]] or [[trial]]", file=file)

    # Complete each combination with defaults, check required factors, and
    # check the combination itself (link overrides load; client limits).
    by_key: dict[str, Trial] = {}
    checked_links: dict[str, None] = {}
    for sname, f, index, table, c_reps in combos:
        full: dict[str, Any] = {}
        for k, (_, default, _) in FACTORS.items():
            if k in f:
                full[k] = f[k]
            elif default is not None:
                full[k] = default
        for k in sorted(f):
            if k not in FACTORS:
                full[k] = f[k]
        for k in REQUIRED:
            if k not in full:
                raise ExperimentError(f"factor {k!r} is required ({FACTORS[k][2]})", file=file,
                                      line=loc.line(table, None, index), field=f"factors.{k}")

        def where(k: str) -> tuple[str, str | None, int | None]:
            if table != "factors" and loc.line(table, k, index):
                return table, k, index
            return "factors", k, None

        if full["client"] in ("chromium", "firefox") and full["clients"] != 1:
            t, k, i = where("clients")
            raise err("a browser trial runs one browser; use client = \"loader\" for many clients", t, k, i,
                      "clients")
        if full["client"] == "chromium" and full["connections"] != 6:
            t, k, i = where("connections")
            raise err("Chromium's HTTP/1.1 limit of 6 connections per host cannot be changed; "
                      "use client = \"firefox\" or \"loader\"", t, k, i, "connections")
        if full["client"] == "curl" and full["clients"] != 1:
            t, k, i = where("clients")
            raise err("curl fetches one URL per trial: clients must be 1", t, k, i, "clients")
        link_key = json.dumps([full["link"], sorted((k, v) for k, v in full.items() if k.startswith("link."))],
                              default=str)
        if link_key not in checked_links:
            try:
                link_profile(full)
            except ProfileError as e:
                # Blame the override that breaks the profile, or the profile itself.
                culprit = "link"
                for k in (k for k in full if k.startswith("link.")):
                    try:
                        link_profile({"link": full["link"], k: full[k]})
                    except ProfileError:
                        culprit = k
                        break
                t, k, i = where(culprit)
                raise err(f"{e}", t, k, i, culprit) from None
            if full["access"] != "none":
                try:
                    profiles.load(full["access"])
                except ProfileError as e:
                    t, k, i = where("access")
                    raise err(f"{e}", t, k, i, "access") from None
            checked_links[link_key] = None
        for rep in range(1, c_reps + 1):
            tr = Trial(factors=full, rep=rep, scenarios=[sname])
            if tr.key in by_key:
                if sname not in by_key[tr.key].scenarios:
                    by_key[tr.key].scenarios.append(sname)
            else:
                by_key[tr.key] = tr
    trials = list(by_key.values())
    if order == "random":
        trials.sort(key=lambda t: (json.dumps(t.factors, sort_keys=True, default=str), t.rep))
        random.Random(seed).shuffle(trials)
    all_keys: list[str] = []
    for t in trials:
        for k in t.factors:
            if k not in all_keys:
                all_keys.append(k)
    varied = [k for k in all_keys if len({json.dumps(t.factors.get(k), default=str) for t in trials}) > 1]
    return Experiment(name=name, description=description, file=file, text=text, repetitions=reps, order=order,
                      seed=seed, seed_given=seed_given, timeout_s=float(timeout), warmup=warmup, artefacts=artefacts,
                      varied=varied, trials=trials)


def reorder(exp: Experiment, seed: int) -> Experiment:
    """The same experiment in the run order of ``seed`` (a resumed run keeps its first order)."""
    trials = sorted(exp.trials, key=lambda t: (json.dumps(t.factors, sort_keys=True, default=str), t.rep))
    if exp.order == "random":
        random.Random(seed).shuffle(trials)
    else:
        trials = exp.trials
    return Experiment(**{**exp.__dict__, "seed": seed, "trials": trials})


def _factor_check(name: str) -> Callable[[Any], str | None] | None:
    if name in FACTORS:
        return FACTORS[name][0]
    if name.startswith("link.") and len(name) > 5:
        return lambda v: None if isinstance(v, (int, float, str)) and not isinstance(v, bool) \
            else f"must be a number or string, got {v!r}"
    if name.startswith("server."):
        t = SERVER_OPTIONS.get(name[7:])
        if t is None:
            return None
        if t is bool:
            return lambda v: None if isinstance(v, bool) else f"must be true or false, got {v!r}"
        return lambda v: None if isinstance(v, int) and not isinstance(v, bool) and v > 0 \
            else f"must be a whole number > 0, got {v!r}"
    return None


def link_profile(factors: dict[str, Any]) -> profiles.LinkProfile:
    """The trial's link profile with its ``link.KEY`` overrides applied."""
    sets = [f"{k[5:]}={v}" for k, v in factors.items() if k.startswith("link.")]
    return profiles.load(str(factors["link"]), sets)


# -- estimates -------------------------------------------------------------------

#: Harness overhead per trial (testbed build and teardown, server start, client
#: start), without the LCP wait, as measured on a 2-core machine: `satbench bench
#: harness` for the browsers (1.04-1.43 s and 2.7-3.05 s with the wait) and the
#: loader (0.23-0.27 s), stored trials' `overhead_s` for curl (0.20 s).
OVERHEAD_S = {"chromium": 0.85, "firefox": 2.6, "loader": 0.25, "curl": 0.2}
#: Chromium waits this long after the load for LCP to settle.
LCP_SETTLE_S = 0.3


#: Sizes of the pages that are not study A's exact ones, as the generator
#: makes them (seed 1): (total bytes with the HTML, objects). A test checks
#: them against freshly generated pages.
GENERATED_PAGES = {"blank": (115, 0), "flags": (72_342, 200), "images640": (672_841, 640), "shop": (2_464_106, 173)}


def page_bytes(page: str) -> tuple[int, int]:
    """(total bytes, objects after the HTML) of a page, from its definition."""
    if page.startswith("bulk:"):
        return pages_mod.parse_size(page[5:]), 0
    if page in pages_mod.STUDY_A:
        structure, label = page.split("-")
        total = {"100k": 100_000, "500k": 500_000, "1m": 1_000_000, "2m": 2_000_000}[label]
        return total, 1 if structure == "single" else 8
    return GENERATED_PAGES[page]


def mean_rate_mbps(p: dict[str, Any], base: Path | None = None) -> float | None:
    """A direction's long-run rate: constant, a schedule's time-weighted mean, or a trace's mean."""
    if "rate_mbps" in p:
        return float(p["rate_mbps"])
    if "rate_schedule" in p:
        pts = sorted(p["rate_schedule"])
        period = float(p.get("rate_period_s") or 0) or None
        if len(pts) == 1 or period is None:
            return float(pts[-1][1]) if period is None else float(pts[0][1])
        total = 0.0
        for (t, v), (t2, _) in zip(pts, pts[1:] + [[period + pts[0][0], pts[0][1]]]):
            total += v * (t2 - t)
        return total / period
    if "trace" in p:
        path = Path(p["trace"]) if base is None else base / p["trace"]
        try:
            ts = [int(x) for x in path.read_text().split()]
        except (OSError, ValueError):
            return None
        return len(ts) * 1500 * 8 / (max(ts[-1], 1) / 1000) / 1e6 if ts else None
    return None


def _packet_loss(p: dict[str, Any]) -> float:
    """Probability that a full-size (1500-byte) packet is lost: random loss and bit errors."""
    loss = float(p.get("loss") or 0)
    ber = float(p.get("ber") or 0)
    return 1 - (1 - loss) * (1 - ber) ** (1500 * 8)


#: Loss response per sender, as the constant C of the Mathis et al. rate
#: C * MSS / (RTT * sqrt(p)), fitted to trials over GEO with BER 1e-5
#: (`satbench bench harness` checks the plan against real trials). Linux BBR
#: (v1) does not slow down for random loss: None.
MATHIS_C = {("tcp", "cubic"): 1.22, ("tcp", "reno"): 1.22, ("tcp", "bbr"): None,
            ("quic", "cubic"): 2.5, ("quic", "reno"): 2.5, ("quic", "bbr"): 9.8}


@functools.lru_cache(maxsize=256)
def _link_numbers(link_key: tuple[str, tuple[tuple[str, str], ...]]) -> tuple[float, float | None, float]:
    """(base RTT in s, mean forward rate in Mbit/s, forward packet loss) of a link with its overrides."""
    link, sets = link_key
    try:
        prof = profiles.load(link, [f"{k[5:]}={v}" for k, v in sets])
    except Exception:  # noqa: BLE001 - an estimate never fails the plan
        return 0.0, None, 0.0
    base = prof.source.parent if prof.source else None
    return prof.base_rtt_ms / 1000, mean_rate_mbps(prof.forward.params, base), _packet_loss(prof.forward.params)


def estimate_trial_s(factors: dict[str, Any]) -> float:
    """A model of one trial's duration: harness overhead, handshakes and
    requests in round trips, slow start from an initial window of 10
    segments, the bottleneck rate, and for loss-based senders the
    Mathis rate under random loss. Good to tens of percent, which is what
    planning needs."""
    link_key = (str(factors["link"]), tuple(sorted((k, str(v)) for k, v in factors.items() if k.startswith("link."))))
    rtt, rate, p_loss = _link_numbers(link_key)
    total, n_objects = page_bytes(str(factors["page"]))
    client = factors.get("client", "chromium")
    proto = factors.get("protocol", "h2")
    clients = int(factors.get("clients", 1))
    handshake = 1 if proto == "h3" else 2
    rounds = handshake + 1  # + the HTML request
    conns = 1
    if n_objects:
        conns = 1 if proto != "h1" else min(n_objects, int(factors.get("connections", 6)))
        if proto == "h1":
            rounds += math.ceil(n_objects / conns)  # one request per object per connection
            if conns > 1:
                rounds += handshake
        else:
            rounds += 1
    cwnd_bytes = 10 * 1448 * conns
    bits = total * clients * 8
    # Slow start doubles the window each round trip up to the path's
    # bandwidth-delay product (shared by the clients); the rest goes at the rate.
    bdp = rate * 1e6 * rtt / 8 / clients if rate else float("inf")
    ss_bytes = min(total, bdp)
    ss_rounds = math.ceil(math.log2(ss_bytes / cwnd_bytes + 1)) if ss_bytes > cwnd_bytes else 0
    transfer = ss_rounds * rtt + (max(0.0, total - 2 * ss_bytes) * clients * 8 / (rate * 1e6) if rate else 0.0)
    if rate:
        transfer = max(transfer, bits / (rate * 1e6))
    c = MATHIS_C.get(("quic" if proto == "h3" else "tcp", str(factors.get("cc", "cubic"))))
    if p_loss > 0 and rtt > 0:
        if c is None:
            # Losses are repaired a round trip later; the last ones cost a tail-loss probe,
            # and with many losses recovery rounds add up.
            expected = total / 1448 * p_loss
            rounds += 2 + math.ceil(expected / 40) if expected >= 1 else 0
        else:
            # The Mathis rate is a steady state: it holds once losses are many.
            # With few, the window hardly shrinks; blend by the expected count.
            mathis = c * 1448 * 8 / (rtt * math.sqrt(p_loss)) * conns * clients
            after_first_window = max(0.0, bits - cwnd_bytes * 8 * clients)
            lossy = after_first_window / min(mathis, rate * 1e6 if rate else mathis)
            w = min(1.0, total / 1448 * p_loss / 10)
            transfer = max(transfer, (1 - w) * transfer + w * lossy)
    t = rounds * rtt + transfer + OVERHEAD_S.get(client, 0.5)
    if client in ("chromium", "firefox"):
        t += LCP_SETTLE_S
    return t


def estimate_s(exp: Experiment, done: dict[str, float] | None = None) -> float:
    """Seconds to run the experiment's trials (and warm-ups); trials already
    measured (``done``: key -> seconds) count as their measured time."""
    done = done or {}
    warm = sum(estimate_trial_s(t.factors) for t in exp.trials[:exp.warmup])
    return warm + sum(estimate_trial_s(t.factors) for t in exp.trials if t.key not in done)


def format_plan(exp: Experiment, done: set[str] | None = None, limit: int | None = None) -> str:
    done = done or set()
    todo = [t for t in exp.trials if t.key not in done]
    est = estimate_s(exp, {k: 0.0 for k in done})
    lines = [f"experiment {exp.name}: {len(exp.trials)} trials ({exp.repetitions} repetitions), "
             f"order {exp.order} (seed {exp.seed}), {exp.warmup} warm-up, timeout {exp.timeout_s:g} s",
             f"  varied: {', '.join(exp.varied) or 'nothing'}",
             f"  fixed: {' '.join(f'{k}={v}' for k, v in exp.trials[0].factors.items() if k not in exp.varied)}",
             f"  to run: {len(todo)} trials, estimated {_fmt_duration(est)}"]
    for i, t in enumerate(exp.trials[:limit] if limit else exp.trials, 1):
        mark = "done" if t.key in done else f"~{estimate_trial_s(t.factors):.1f} s"
        lines.append(f"  {i:4d}. [{t.key}] rep {t.rep}  {t.label(exp.varied)}  ({mark})")
    if limit and len(exp.trials) > limit:
        lines.append(f"  ... {len(exp.trials) - limit} more")
    return "\n".join(lines)


def _fmt_duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
