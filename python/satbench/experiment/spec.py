"""Experiment files: a study described in TOML, validated, and expanded into
trials.

    [experiment]
    name = "demo"                      # required; the key in the results database
    description = "..."
    repetitions = 3                    # per combination of factors
    order = "random"                   # or "sequential"
    seed = 7                           # run-order seed (default: random, recorded)
    timeout_s = 180                    # per trial
    warmup = 1                         # trials run first and not stored
    artefacts = ["server"]             # any of server, har, netlog, pcap
    scheduler = "tls://host:8786"      # run the trials on a Dask cluster (experiment/distributed.py)
    parallel = 2                       # or: this many testbeds at once on this machine

    [factors]                          # a list is a factor's levels; a scalar is fixed
    link = ["geo", "lan"]
    protocol = ["h1", "h2", "h3"]
    cc = ["cubic", "bbr"]
    page = "uniform-500k"
    "link.ber" = [1e-7, 1e-5]          # any link-profile key (as --set), per direction with forward./return.
    "server.pacing" = [true, false]    # any server option

    [[scenario]]                       # optional: each scenario is a cross product of
    name = "cc"                        # [factors] overridden by its own entries;
    page = ["uniform-1m"]              # the union of the scenarios is the study
    repetitions = 5                    # (optional) its own number of repetitions

    [[trial]]                          # optional: explicit trials (scalars), instead of or
    protocol = "h2"                    # besides the cross product
    page = "shop"

Every problem names the file, line and field. Nothing runs before the
whole file is valid, and every link of every trial is resolved by the
emulator here, once (:mod:`satbench.link.spec`).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from ..endpoints import client_class, server_class
from ..endpoints.options import needs_returning_client
from ..errors import InputError, ProfileError
from ..link import profile as link_profile
from ..link.spec import LinkSpec, check, resolve
from ..model import ClientKind, Protocol, ServerKind
from ..path import element_class, terminals_problem
from ..testbed.testbed import terminal_subnets
from ..workloads import workload_of
from . import designs
from .design import RunOrder, Trial, run_order
from .factors import FACTORS, REQUIRED, check_of, known
from .trialspec import TrialSpec, complete, emulation_problem, schedule_problem, shards_problem, view_problem

ARTEFACTS = ("server", "har", "netlog", "pcap", "keylog", "frames", "video")
EXPERIMENT_KEYS = {"name", "description", "repetitions", "order", "seed", "timeout_s", "warmup", "artefacts",
                   "scheduler", "parallel"}
#: A Dask scheduler's address: tcp:// or tls://, a host (a name, IPv4, or IPv6 in brackets), an optional port.
SCHEDULER_RE = r"(tcp|tls)://(\[[0-9A-Fa-f:.%a-z]+\]|[A-Za-z0-9._-]+)(?::(\d{1,5}))?"


class ExperimentError(ProfileError):
    """A problem in an experiment file, located by file, line and field."""


@dataclass
class Experiment:
    name: str
    description: str
    file: str
    text: str
    repetitions: int
    order: str
    #: The run-order seed the file gives (None: the stored one, or a fresh one).
    seed: int | None
    timeout_s: float
    warmup: int
    artefacts: list[str]
    varied: list[str]
    #: The trials, in the order the file lists them.
    trials: list[Trial]
    #: The design of [factors] (None: the full cross product).
    design: Design | None = None
    #: Run the trials block by block of this factor (each block in its own random order).
    block: str | None = None
    #: Where the trials run (not part of the study): a Dask scheduler's address, or testbeds at once here.
    scheduler: str | None = None
    parallel: int | None = None
    #: Each factor's levels as [factors] lists them (the first is its baseline, unless the design says another).
    levels: dict[str, list[Any]] = field(default_factory=dict)
    #: The whole file's trial count, where ``trials`` is a part of it (some repetitions or scenarios).
    planned: int | None = None

    def first_repetitions(self, n: int, name: str | None = None) -> Experiment:
        """The study with only its first ``n`` repetitions of every cell (repetitions count from 1), the
        same keys (a full run later resumes and adds the rest); under another ``name`` if given."""
        return dataclasses.replace(self, name=name or self.name, trials=[t for t in self.trials if t.rep <= n],
                                   planned=self.planned or len(self.trials))

    def only_scenarios(self, names: list[str]) -> Experiment:
        """The study's trials of the named scenarios only (a ``[[scenario]]`` table's name; ``main`` for
        [factors], ``trialN`` for the N-th ``[[trial]]``), the same keys (a run of the whole file later
        resumes and adds the rest). An unknown name is an :class:`InputError` naming the file's."""
        have = list(dict.fromkeys(s for t in self.trials for s in t.scenarios if s))
        unknown = [n for n in names if n not in have]
        if unknown:
            listed = ", ".join(have[:8]) + (f" and {len(have) - 8} more" if len(have) > 8 else "")
            raise InputError(f"--scenario {unknown[0]}: no such scenario in {self.file} (its scenarios: {listed})")
        return dataclasses.replace(self, trials=[t for t in self.trials if set(t.scenarios) & set(names)],
                                   planned=self.planned or len(self.trials))

    @property
    def baseline(self) -> dict[str, Any]:
        """The level every varied factor of [factors] is compared against: the
        design's baseline (OFAT), else its first level in the file."""
        out = {k: v[0] for k, v in self.levels.items() if len(v) > 1}
        if self.design is not None:
            out.update(self.design.baseline)
        return out

    @property
    def links(self) -> dict[str, LinkSpec]:
        """Every link the trials use, by hash."""
        return {s.hash: s for t in self.trials for s in t.links.values()}

    def run_order(self, stored_seed: int | None = None) -> RunOrder:
        return run_order(self.trials, self.order, self.seed, stored_seed, self.block)

    def spec_json(self, seed: int) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "repetitions": self.repetitions,
                "order": self.order, "seed": seed, "timeout_s": self.timeout_s, "warmup": self.warmup,
                "artefacts": self.artefacts, "varied": self.varied, "trials": self.planned or len(self.trials),
                "design": self.design.to_json() if self.design else None, "block": self.block,
                "levels": {k: v for k, v in self.levels.items() if len(v) > 1}, "baseline": self.baseline}


class Locator:
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
    """Read and validate an experiment file, resolve its links, and expand its trials."""
    p = Path(path)
    text = link_profile.read_text(p, "experiment file")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise ExperimentError(f"not valid TOML: {e}", file=str(p), line=int(m.group(1)) if m else None) from None
    return parse(doc, text, str(p))


class _Links:
    """Links resolved once per experiment, by profile and overrides."""

    def __init__(self) -> None:
        self.cache: dict[str, LinkSpec] = {}

    def resolve(self, name: str, overrides: list[str], terminals: int = 1, ipv6: bool = False) -> LinkSpec:
        """The link for ``terminals`` terminals (each given its IPv6 subnets too with ``ipv6``)."""
        ipv6 = ipv6 and terminals > 1  # one terminal's link routes nothing: the same link either way
        k = json.dumps([name, sorted(overrides), terminals] + ([True] if ipv6 else []))
        if k not in self.cache:
            self.cache[k] = resolve(link_profile.load(name, overrides),
                                    terminal_subnets(terminals, ipv6) if terminals > 1 else None)
        return self.cache[k]


def parse(doc: dict[str, Any], text: str, file: str) -> Experiment:
    """An experiment from its parsed TOML (``text`` locates problems by line)."""
    return _Parser(doc, text, file).experiment()


@dataclass(frozen=True)
class _Settings:
    """The [experiment] table, checked."""

    name: str
    description: str
    repetitions: int
    order: str
    seed: int | None
    timeout_s: float
    warmup: int
    artefacts: list[str]
    scheduler: str | None
    parallel: int | None


@dataclass(frozen=True)
class _Combo:
    """One combination of factor levels, from a scenario, the design, [factors] or a [[trial]]."""

    scenario: str
    factors: dict[str, Any]
    index: int | None
    table: str
    repetitions: int


class _Parser:
    """An experiment file, parsed in steps: the [experiment] table, the factors of each table, their
    combinations, the trials with their links, and what the trials vary. Every problem is an
    :class:`ExperimentError` at the file's line and field."""

    def __init__(self, doc: dict[str, Any], text: str, file: str):
        self.doc, self.text, self.file, self.loc = doc, text, file, Locator(text)

    def err(self, msg: str, table: str | None, key: str | None = None, index: int | None = None,
            fld: str | None = None) -> ExperimentError:
        return ExperimentError(msg, file=self.file, line=self.loc.line(table, key, index), field=fld)

    def experiment(self) -> Experiment:
        doc = self.doc
        for k in doc:
            if k not in ("experiment", "factors", "scenario", "trial", "design"):
                raise self.err("unknown table or key (expected [experiment], [factors], [design], [[scenario]], "
                               "[[trial]])", None, k, fld=k)
        st = self.settings()
        base_raw = doc.get("factors", {})
        if not isinstance(base_raw, dict):
            raise self.err("must be a table", "factors", fld="factors")
        base = self.factors(base_raw, "factors", None, False)
        trials = self.trials(self.combinations(base, st.repetitions))
        varied = self.varied(trials, st.artefacts)
        design = doc.get("design")
        return Experiment(name=st.name, description=st.description, file=self.file, text=self.text,
                          repetitions=st.repetitions, order=st.order, seed=st.seed, timeout_s=st.timeout_s,
                          warmup=st.warmup, artefacts=st.artefacts, varied=varied, trials=trials,
                          design=_design(design, base, self.err) if design is not None else None,
                          block=design.get("block") if isinstance(design, dict) else None,
                          scheduler=st.scheduler, parallel=st.parallel, levels=dict(base))

    def settings(self) -> _Settings:
        ex = self.doc.get("experiment")
        if not isinstance(ex, dict):
            raise ExperimentError("missing [experiment] table (with at least name)", file=self.file, line=1)
        for k in ex:
            if k not in EXPERIMENT_KEYS:
                raise self.err(f"unknown key (known: {', '.join(sorted(EXPERIMENT_KEYS))})", "experiment", k,
                               fld=f"experiment.{k}")

        def bad(key: str, what: str) -> ExperimentError:
            return self.err(what, "experiment", key, fld=f"experiment.{key}")

        name = ex.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name or ""):
            raise self.err("must be a name of letters, digits, '-', '_' or '.'", "experiment",
                           "name" if "name" in ex else None, fld="experiment.name")

        def num(key: str, default: Any, check: Callable[[Any], bool], what: str) -> Any:
            v = ex.get(key, default)
            if isinstance(v, bool) or not check(v):
                raise bad(key, f"{what}, got {v!r}")
            return v

        reps = num("repetitions", 1, lambda v: isinstance(v, int) and 1 <= v <= 100_000,
                   "must be a whole number from 1 to 100000")
        order = ex.get("order", "random")
        if order not in ("random", "sequential"):
            raise bad("order", f"must be random or sequential, got {order!r}")
        seed = num("seed", 0, lambda v: isinstance(v, int) and 0 <= v < 2**63,
                   "must be a whole number from 0 to 2^63-1") if "seed" in ex else None
        timeout = num("timeout_s", 180, lambda v: isinstance(v, (int, float)) and math.isfinite(v) and
                      0 < v <= 86_400, "must be a number of seconds from 0 to 86400")
        warmup = num("warmup", 0, lambda v: isinstance(v, int) and 0 <= v <= 100,
                     "must be a whole number from 0 to 100")
        artefacts = ex.get("artefacts", ["server"])
        if not isinstance(artefacts, list) or any(a not in ARTEFACTS for a in artefacts):
            raise bad("artefacts", f"must be a list of {', '.join(ARTEFACTS)}, got {artefacts!r}")
        description = ex.get("description", "")
        if not isinstance(description, str):
            raise bad("description", "must be a string")
        scheduler = ex.get("scheduler")
        if scheduler is not None and (not isinstance(scheduler, str) or not re.fullmatch(SCHEDULER_RE, scheduler)):
            raise bad("scheduler", f"must be a Dask scheduler address, tls://HOST:PORT (or tcp:// on loopback), "
                                   f"got {scheduler!r}")
        parallel = num("parallel", 1, lambda v: isinstance(v, int) and 1 <= v <= 256,
                       "must be a whole number of testbeds from 1 to 256") if "parallel" in ex else None
        if scheduler is not None and parallel is not None:
            raise bad("parallel", "give scheduler (a cluster) or parallel (testbeds on this machine), not both")
        return _Settings(name=name, description=description, repetitions=reps, order=order, seed=seed,
                         timeout_s=float(timeout), warmup=warmup, artefacts=artefacts, scheduler=scheduler,
                         parallel=parallel)

    def factors(self, table: dict[str, Any], where: str, index: int | None, scalars_only: bool
                ) -> dict[str, list[Any]]:
        """A table's factors, each value checked as a level of its factor: factor -> levels."""
        out: dict[str, list[Any]] = {}
        for k, v in table.items():
            if where == "scenario" and k in ("name", "repetitions"):
                continue
            fld = f"{where}.{k}" if index is None else f"{where}[{index}].{k}"
            levels = v if isinstance(v, list) else [v]
            if scalars_only and isinstance(v, list):
                raise self.err("a trial fixes each factor: give one value, not a list", where, k, index, fld)
            if not levels:
                raise self.err("needs at least one level", where, k, index, fld)
            check = check_of(k)
            if check is None:
                raise self.err(f"unknown factor (known: {known()})", where, k, index, fld)
            for lv in levels:
                problem = check(lv)
                if problem:
                    raise self.err(problem, where, k, index, fld)
            if len({json.dumps(x) for x in levels}) != len(levels):
                raise self.err(f"levels repeat: {levels!r}", where, k, index, fld)
            out[k] = levels
        return out

    def combinations(self, base: dict[str, list[Any]], reps: int) -> list[_Combo]:
        """The combinations of levels the study runs: each scenario's cross product, the design's rows,
        or [factors]' cross product; and the explicit [[trial]]s."""
        doc = self.doc
        scen_raw, trial_raw = doc.get("scenario", []), doc.get("trial", [])
        if not isinstance(scen_raw, list) or not isinstance(trial_raw, list):
            raise ExperimentError("scenario and trial must be arrays of tables ([[scenario]], [[trial]])",
                                  file=self.file)
        if "design" in doc and (scen_raw or trial_raw):
            raise self.err("a [design] applies to [factors]; it cannot be combined with [[scenario]] or [[trial]]",
                           "design", fld="design")
        combos: list[_Combo] = []
        if scen_raw:
            combos += self._scenarios(scen_raw, base, reps)
        elif "design" in doc:
            design = _design(doc["design"], base, self.err)
            rest = [k for k in base if k not in design.factors]
            for values in itertools.product(*(base[k] for k in rest)):
                for row in design.rows:
                    combos.append(_Combo("main", {**dict(zip(rest, values)), **row}, None, "factors", reps))
        elif not trial_raw or any(len(v) > 1 for v in base.values()):
            # The cross product of [factors]; with explicit trials and only fixed
            # factors, [factors] just gives the trials their defaults.
            keys = list(base)
            for values in itertools.product(*(base[k] for k in keys)):
                combos.append(_Combo("main", dict(zip(keys, values)), None, "factors", reps))
        fixed = {k: v[0] for k, v in base.items() if len(v) == 1}
        for i, t in enumerate(trial_raw):
            if not isinstance(t, dict):
                raise self.err("must be a table", "trial", None, i, f"trial[{i}]")
            own = self.factors(t, "trial", i, True)
            combos.append(_Combo(f"trial{i + 1}", {**fixed, **{k: v[0] for k, v in own.items()}}, i, "trial", reps))
        if not combos:
            raise ExperimentError("no trials: give [factors], [[scenario]] or [[trial]]", file=self.file)
        return combos

    def _scenarios(self, scen_raw: list[Any], base: dict[str, list[Any]], reps: int) -> list[_Combo]:
        combos = []
        for i, s in enumerate(scen_raw):
            if not isinstance(s, dict):
                raise self.err("must be a table", "scenario", None, i, f"scenario[{i}]")
            own = self.factors(s, "scenario", i, False)
            s_reps = s.get("repetitions", reps)
            if isinstance(s_reps, bool) or not isinstance(s_reps, int) or not 1 <= s_reps <= 100_000:
                raise self.err(f"must be a whole number from 1 to 100000, got {s_reps!r}", "scenario", "repetitions",
                               i, f"scenario[{i}].repetitions")
            merged = {**base, **own}
            keys = list(merged)
            for values in itertools.product(*(merged[k] for k in keys)):
                combos.append(_Combo(str(s.get("name", f"scenario{i + 1}")), dict(zip(keys, values)), i, "scenario",
                                     s_reps))
        return combos

    def trials(self, combos: list[_Combo]) -> list[Trial]:
        """Each combination as a typed trial, checked as a whole, its links resolved; repeated; a trial
        two scenarios share run once, in both."""
        links = _Links()
        by_key: dict[str, Trial] = {}
        for c in combos:
            ts = self.trial_spec(c)

            def blame(culprit: str, message: str, c: _Combo = c) -> ExperimentError:
                """An error at the culprit's line: in this scenario or trial if set there, else in [factors]."""
                if c.table != "factors" and self.loc.line(c.table, culprit, c.index):
                    return self.err(message, c.table, culprit, c.index, culprit)
                return self.err(message, "factors", culprit, None, culprit)

            problem = _combination_problem(ts)
            if problem:
                raise blame(*problem)
            trial_links = _resolve_links(ts, links, blame)
            for rep in range(1, c.repetitions + 1):
                tr = Trial(spec=ts, rep=rep, links=trial_links, scenarios=[c.scenario])
                if tr.key in by_key:
                    if c.scenario not in by_key[tr.key].scenarios:
                        by_key[tr.key].scenarios.append(c.scenario)
                else:
                    by_key[tr.key] = tr
        return list(by_key.values())

    def trial_spec(self, c: _Combo) -> TrialSpec:
        """A combination's trial: every default filled, a population's protocol ``mix``."""
        full = complete(c.factors)
        if isinstance(full.get("clients"), dict):
            if "protocol" in full and full["protocol"] != "mix":
                t_, k_, i_ = ((c.table, "protocol", c.index) if self.loc.line(c.table, "protocol", c.index)
                              else ("factors", "protocol", None))
                raise self.err("a population's protocols come from its clients table: leave protocol out", t_, k_,
                               i_, "protocol")
            full["protocol"] = "mix"
        missing = [k for k in REQUIRED if k not in full]
        if missing:
            k = missing[0]
            raise ExperimentError(f"factor {k!r} is required ({FACTORS[k].meaning})", file=self.file,
                                  line=self.loc.line(c.table, None, c.index), field=f"factors.{k}")
        return TrialSpec.of(full)

    def varied(self, trials: list[Trial], artefacts: list[str]) -> list[str]:
        """The factors whose value differs between trials; refused where varying one measures nothing."""
        all_keys: list[str] = []
        for t in trials:
            for k in t.spec.factors:
                if k not in all_keys:
                    all_keys.append(k)
        varied = [k for k in all_keys if len({json.dumps(t.spec.get(k), default=str) for t in trials}) > 1]
        if "keylog" in artefacts and any(t.spec.server is not ServerKind.SATBENCH for t in trials):
            raise self.err("keylog: only the satbench server writes its TLS keys (nginx and caddy have no "
                           "SSLKEYLOGFILE)", "experiment", "artefacts", fld="experiment.artefacts")
        scenarios = len(self.doc.get("scenario", []))
        for k in varied:
            acts_on = needs_returning_client(k[7:]) if k.startswith("server.") else None
            if acts_on and all(t.spec.view == "repeat" for t in trials):
                continue  # every trial's browser comes back: what it carries is measured
            if acts_on:
                # No client returns yet: every load is a first view in a fresh profile or process.
                where = next(((table, i) for table, i in [("factors", None), *[("scenario", j)
                                                                              for j in range(scenarios)]]
                              if self.loc.line(table, k, i)), ("factors", None))
                raise self.err(f"acts only on a client that comes back ({acts_on}), and some trials' clients load "
                               "the page once, in a fresh profile: varying it would measure nothing there (set "
                               "view = \"repeat\" for every trial)", where[0], k, where[1], k)
        return varied


@dataclass(frozen=True)
class Design:
    """How [factors]' design factors combine (the others are crossed with every row)."""

    kind: str
    factors: list[str]
    rows: list[dict[str, Any]]
    fractional: designs.Fractional | None = None
    #: Each design factor's baseline level (coded -1 in a factorial design).
    baseline: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "factors": self.factors, "rows": len(self.rows),
                               "baseline": self.baseline}
        if self.fractional is not None:
            f = self.fractional
            out.update({"k": f.k, "p": f.p, "generators": list(f.generators), "resolution": f.resolution,
                        "letters": dict(zip(f.letters, self.factors)),
                        "defining_relation": f.defining_relation(), "aliases": f.aliases()})
        return out

    def describe(self) -> list[str]:
        """The design in words, for the plan."""
        if self.kind == "ofat":
            return [f"design: one factor at a time over {', '.join(self.factors)}: {len(self.rows)} runs "
                    f"(the baseline, then each other level alone)"]
        if self.fractional is None:
            return [f"design: full factorial over {', '.join(self.factors)}: {len(self.rows)} runs"]
        f = self.fractional
        res = "full factorial" if f.p == 0 else f"resolution {f.resolution}"
        lines = [f"design: 2^({f.k}-{f.p}) fractional factorial, {len(self.rows)} runs, {res}"
                 + (f", generators {' '.join(f.generators)}" if f.generators else ""),
                 "  letters: " + ", ".join(f"{c}={n}" for c, n in zip(f.letters, self.factors))]
        if f.p:
            lines.append("  defining relation: I = " + " = ".join(f.defining_relation()))
            clash = {e: a for e, a in f.aliases().items() if a}
            lines.append("  aliases (to two-factor interactions): "
                         + ("; ".join(f"{e} = {' = '.join(a)}" for e, a in clash.items()) or "none"))
        return lines


DESIGN_KEYS = {"kind", "factors", "resolution", "generators", "baseline", "block"}


def _design(raw: Any, base: dict[str, list[Any]], err: Callable[..., ExperimentError]) -> Design:
    """The [design] table, checked against [factors]."""
    def bad(key: str | None, msg: str) -> ExperimentError:
        return err(msg, "design", key, fld=f"design.{key}" if key else "design")

    if not isinstance(raw, dict):
        raise bad(None, "must be a table")
    for k in raw:
        if k not in DESIGN_KEYS:
            raise bad(k, f"unknown key (known: {', '.join(sorted(DESIGN_KEYS))})")
    kind = raw.get("kind", "full")
    if kind not in ("full", "ofat", "fractional"):
        raise bad("kind", f"must be full, ofat or fractional, got {kind!r}")
    names = raw.get("factors", [k for k, v in base.items() if len(v) > 1 and k != raw.get("block")])
    if not isinstance(names, list) or not names or any(not isinstance(n, str) for n in names):
        raise bad("factors", "must be a list of factor names from [factors]")
    for n in names:
        if n not in base or len(base[n]) < 2:
            raise bad("factors", f"{n!r} is not a factor with levels in [factors]")
    block = raw.get("block")
    if block is not None and (block not in base or block in names):
        raise bad("block", f"must be a factor of [factors] outside the design, got {block!r}")
    if kind == "full":
        rows = [dict(zip(names, v)) for v in itertools.product(*(base[n] for n in names))]
        return Design(kind, names, rows, baseline={n: base[n][0] for n in names})
    if kind == "ofat":
        baseline = raw.get("baseline", {})
        if not isinstance(baseline, dict) or any(k not in names or v not in base[k] for k, v in baseline.items()):
            raise bad("baseline", "must give a level of [factors] for design factors only")
        full_base = {n: baseline.get(n, base[n][0]) for n in names}
        return Design(kind, names, designs.ofat({n: base[n] for n in names}, full_base), baseline=full_base)
    two = [n for n in names if len(base[n]) != 2]
    if two:
        raise bad("factors", f"a fractional factorial needs two levels per factor; {two[0]!r} has {len(base[two[0]])}")
    try:
        if "generators" in raw:
            gens = raw["generators"]
            if not isinstance(gens, list):
                raise bad("generators", "must be a list such as [\"E=ABCD\"]")
            frac = designs.fractional(len(names), len(gens), [str(g) for g in gens])
        else:
            res = raw.get("resolution", 4)
            if isinstance(res, bool) or not isinstance(res, int) or not 3 <= res <= 8:
                raise bad("resolution", f"must be a whole number from 3 to 8, got {res!r}")
            frac = designs.for_resolution(len(names), res)
    except designs.DesignError as e:
        raise bad("generators" if "generators" in raw else "factors", str(e)) from None
    rows = [{n: base[n][0 if code < 0 else 1] for n, code in zip(names, run)} for run in frac.runs]
    return Design(kind, names, rows, frac, baseline={n: base[n][0] for n in names})


def resolve_trial_links(factors: dict[str, Any], ran: dict[str, Any] | None = None) -> dict[str, LinkSpec]:
    """The links of a stored trial: the satellite link it ``ran`` (the
    configuration the emulator reported), or else as its factors resolve
    today, and the links of its path elements."""
    def blame(culprit: str, message: str) -> ExperimentError:
        return ExperimentError(message, field=culprit)

    link = None
    if ran is not None:
        answer = check({k: v for k, v in ran.items() if k != "seed"})
        if not answer["ok"]:
            raise ExperimentError(f"{answer.get('field')}: {answer.get('message')}", field="link")
        name = str(factors["link"])
        link = LinkSpec.from_check(answer, name=name, label=name, description="")
    return _resolve_links(TrialSpec.of(factors), _Links(), blame, link)


def _combination_problem(ts: TrialSpec) -> tuple[str, str] | None:
    """Why a trial's factors, each a valid level, cannot run together, as (factor, why)."""
    if ts.population is None:
        problem = client_class(ts.client).check(ts.groups[0])
    else:  # each of a population's clients loads alone on its host
        problem = next((("clients", f"{g.protocol}: {p[1]}") for g in ts.population
                        if (p := client_class(g.kind).check(replace(g, n=1)))), None)
    problem = (problem or workload_of(ts).problem(ts) or server_class(ts.server).check(ts) or shards_problem(ts)
               or emulation_problem(ts) or view_problem(ts) or schedule_problem(ts))
    if not problem and ts.ip != "v4":
        problem = ip_problem(ts)
    if not problem and ts.ip_drop is not None:
        if ts.ip != "dual":
            problem = ("ip_drop", f"dropping {ts.ip_drop} leaves another family only with ip = \"dual\"")
        elif not all(k.browser for k in ts.kinds):
            problem = ("ip_drop", "the loader and curl take the first address a name resolves to (no Happy "
                                  "Eyeballs): a dropped family stalls them; ip_drop shows a browser's fallback")
    if not problem and ts.h3_discovery == "alt-svc":
        if ts.protocol is not Protocol.H3 or ts.client is not ClientKind.CHROMIUM or ts.population is not None:
            problem = ("h3_discovery", "HTTP/3 from Alt-Svc: one Chromium client with protocol = \"h3\"")
        elif ts.shards > 1 or workload_of(ts).replays:
            problem = ("h3_discovery", "HTTP/3 from Alt-Svc: a generated page of one origin")
    if not problem and ts.terminals > 1 and (ts.population is None or ts.hosts != "each"):
        problem = ("terminals", "several terminals need a population of clients on hosts of their own "
                                "(clients = { h2 = 4 }, hosts = \"each\"): clients are dealt to terminals")
    return problem


def ip_problem(ts: TrialSpec) -> tuple[str, str] | None:
    """Why a trial cannot run over IPv6 (ip = v6 or dual): only the path elements that say so carry
    IPv6 (``PathElement.ipv6``; every built-in one does, a plug-in may not). Every server listens on
    both families, and every host of the testbed gets an IPv6 address."""
    from ..path import element_class  # noqa: PLC0415 - the elements import the experiment's types

    if v4_only := [e for e in ts.path if not element_class(e).ipv6]:
        return "ip", f"ip = {ts.ip} is not supported with the {v4_only[0]} element yet: it carries IPv4 only"
    return None


def _resolve_links(ts: TrialSpec, links: _Links, blame: Callable[[str, str], ExperimentError],
                   link: LinkSpec | None = None) -> dict[str, LinkSpec]:
    """The trial's links, resolved by the emulator (the satellite link given
    as ``link``, if it is); a refused value is blamed on the factor that gave
    it (an override, or the profile itself)."""
    overrides = {f"{k}={v}": f"link.{k}" for k, v in ts.link_overrides.items()}
    out: dict[str, LinkSpec] = {}
    terminals = ts.terminals
    try:
        out["link"] = link or links.resolve(ts.link, list(overrides), terminals, ts.ip != "v4")
    except ProfileError as e:
        culprit = overrides.get((e.file or "").removeprefix("--set "), "link")
        if terminals > 1 and (e.field or "").startswith("terminals"):
            culprit = "terminals"
        raise blame(culprit, str(e)) from None
    for factor, value in ts.path.items():
        cls = element_class(factor)
        problem = terminals_problem(cls, ts.terminals) or cls.conflict(value, ts)
        if problem:
            raise blame(factor, problem)
        try:
            for role, prof in cls.profiles(value).items():
                out[role] = links.resolve(str(prof.source or prof.name), list(prof.overrides))
        except ProfileError as e:
            raise blame(factor, str(e)) from None
    return out


def build(name: str, factors: dict[str, Any], *, repetitions: int = 1, seed: int | None = None,
          timeout_s: float = 180, order: str = "random", warmup: int = 0, artefacts: list[str] | None = None,
          description: str = "", scenarios: list[dict[str, Any]] | None = None,
          trials: list[dict[str, Any]] | None = None, design: dict[str, Any] | None = None) -> Experiment:
    """An experiment from Python values, validated as a file would be (errors
    name the field; the file is ``<api>``)."""
    ex: dict[str, Any] = {"name": name, "description": description, "repetitions": repetitions, "order": order,
                          "timeout_s": timeout_s, "warmup": warmup, "artefacts": artefacts or ["server"]}
    if seed is not None:
        ex["seed"] = seed
    doc: dict[str, Any] = {"experiment": ex, "factors": factors}
    if scenarios:
        doc["scenario"] = scenarios
    if trials:
        doc["trial"] = trials
    if design:
        doc["design"] = design
    return parse(doc, "", "<api>")
