"""Link profiles: TOML files describing both directions of an emulated link.

A profile has a ``name``, a ``description`` and two tables, ``[forward]``
(gateway to terminal, the downlink) and ``[return]`` (terminal to gateway).
Each direction takes these keys (all optional; an empty direction is an
ideal wire). The ranges are the emulator's (``satbench-link --check`` is the
one place they are checked):

    rate_mbps = 10                         constant capacity, 0.001 to 1,000,000 Mbit/s
    rate_schedule = [[0, 100], [12, 80]]   (seconds, Mbit/s; 0 = outage); rate_period_s repeats it
    trace = "file.trace"                   Mahimahi trace, relative to the profile
    delay_ms = 265                         one-way propagation delay, 0 to 3,600,000 ms
    delay_schedule = [[0, 20], [12, 35]]   (seconds, ms); delay_period_s repeats it
    jitter_ms = 2, jitter = "uniform"|"normal", reorder = false    (jitter 0 to 60,000 ms)
    queue_packets | queue_bytes | queue_ms  drop-tail limit (ms at the link rate)
    aqm = "droptail"|"codel"|"fq_codel", codel_target_ms = 5, codel_interval_ms = 100
    fq_flows = 1024, fq_quantum = 1514     FQ-CoDel's flow queues and DRR quantum (bytes); not with an access
    ecn = true                             CoDel marks ECN-capable packets CE instead of dropping them
    ce_threshold_ms = 1, ce_threshold_selector = "ect1"|"all"   also mark every capable (or ECT(1),
                                           L4S-style) packet that waited longer than this
    loss = 0.01                            Bernoulli packet loss, 0 to 1
    ber = 1e-6                             bit error rate (per-packet loss from size), 0 to 1
    gilbert = { p = 0.01, r = 0.3, loss_good = 0, loss_bad = 1 }
    loss_schedule = [[0, 0], [12, 0.2], [12.3, 0]]; loss_period_s repeats it
    leo_trace = "bw.txt", leo_unit_mbps = 12   recorded LEO rate: k lines in a ms give k x unit
                                               in that ms (repeating); relative to the profile
    delay_trace = "delay.txt", delay_trace_interval_ms = 10   one-way delay per interval, repeating
    reconfiguration = { period_s = 15, offset_s = 12, delay_ms = 40, delay_duration_ms = 300,
                        loss_p = 1, loss_duration_ms = 50, outage = false }   a periodic event
    [forward.access]   DVB-S2 link adaptation: kind = "acm" or "ccm", symbol_rate_baud, roll_off,
                       pilots, margin_db, hysteresis_db, refresh_ms, modcods (acm) or modcod
                       (ccm), encapsulation = { kind = "gse", label_bytes = 6 }; the rate follows
                       the MODCOD in use (forward rate_mbps must then be absent)
    [return.access]    DVB-RCS2 bandwidth on demand: kind = "dama", preset = "opensand" or "ns3",
                       superframe_ms, sync_period_ms, msl_frames, rtt_estimate_ms,
                       overestimation, rbdc_timeout_ms, slot_bytes, encapsulation = { kind = "rle" }

Schedule times run from 0 to 1,000,000 s, strictly increasing. Top level:
``align_minute = true`` makes schedule time 0 the start of the current UTC
minute (Starlink reconfigures at fixed seconds of every minute).

Terminals (top level, optional): one table per satellite terminal, as

    [[terminals]]
    forward = { clear_sky_cn_db = 14, fade = "fades/moderate-rain.txt", fade_loop = false }
    return = { cra_mbps = 2, rbdc_max_mbps = 0, vbdc_max_bytes = 0, fca_max_mbps = 0 }

``fade`` is an attenuation series (lines of ``seconds dB``, linearly
interpolated; see ``profiles/fades/``), relative to the profile. A testbed
of N terminals (the ``terminals`` factor) uses these in turn, cycling; each
terminal's addresses are the testbed's to give.

Overrides (``--set``): ``forward.KEY=VALUE``, ``return.KEY=VALUE``, or
``KEY=VALUE`` for both directions.

This module checks a profile's form (known keys, types, one of each group)
and turns it into the emulator's configuration, remembering which key made
each part of it; :mod:`satbench.link.spec` has the emulator check the values
and resolve the link, and names the key of any value it refuses.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ProfileError

BUILTIN_DIR = Path(__file__).parent / "profiles"
#: A profile's name: letters, digits, '.', '_' and '-', not starting with a sign.
NAME_RE = r"[A-Za-z0-9][A-Za-z0-9._-]*"
DIRECTIONS = ("forward", "return")

_NUMBER_KEYS = {
    "rate_mbps", "rate_period_s", "delay_ms", "delay_period_s", "jitter_ms", "queue_packets",
    "queue_bytes", "queue_ms", "codel_target_ms", "codel_interval_ms", "loss", "ber", "loss_period_s",
    "leo_unit_mbps", "delay_trace_interval_ms", "fq_flows", "fq_quantum", "ce_threshold_ms",
}
#: Keys that shape a CoDel queue (aqm = "codel" or "fq_codel"), and the emulator's names of them.
_AQM_KEYS = {"codel_target_ms": "target_ms", "codel_interval_ms": "interval_ms", "fq_flows": "flows",
             "fq_quantum": "quantum", "ecn": "ecn", "ce_threshold_ms": "ce_threshold_ms",
             "ce_threshold_selector": "ce_threshold_selector"}
_SCHEDULE_KEYS = {"rate_schedule", "delay_schedule", "loss_schedule"}
#: Tables passed to the emulator as they are (it checks and names their fields).
_TABLE_KEYS = {"access", "reconfiguration"}
_FILE_KEYS = {"trace", "leo_trace", "delay_trace"}
KEYS = _NUMBER_KEYS | _SCHEDULE_KEYS | _TABLE_KEYS | _FILE_KEYS | {"jitter", "reorder", "aqm", "gilbert", "ecn",
                                                                   "ce_threshold_selector"}
_TOP_KEYS = {"name", "description", "align_minute", "forward", "return", "terminals"}
#: Keys of which a direction takes at most one.
GROUPS = (("rate_mbps", "rate_schedule", "trace", "leo_trace"), ("delay_ms", "delay_schedule", "delay_trace"),
          ("queue_packets", "queue_bytes", "queue_ms"))
#: A terminal's keys per direction, and how each scales into the emulator's (name, factor).
TERMINAL_KEYS = {
    "forward": {"clear_sky_cn_db": ("clear_sky_cn_db", 1.0), "fade": ("fade", 1.0), "fade_loop": ("fade_loop", 1.0)},
    "return": {"cra_mbps": ("cra_bps", 1e6), "rbdc_max_mbps": ("rbdc_max_bps", 1e6),
               "vbdc_max_bytes": ("vbdc_max_bytes", 1.0), "fca_max_mbps": ("fca_max_bps", 1e6)},
}
#: How a value of a profile key scales into the emulator's unit (Mbit/s -> bit/s).
SCALE = {"rate_mbps": 1e6, "rate_schedule": 1e6}


def search_path() -> list[Path]:
    """Directories searched for profiles, later ones overriding earlier ones."""
    dirs = [BUILTIN_DIR]
    home = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "satbench" / "links"
    dirs.append(home)
    for d in os.environ.get("SATBENCH_LINKS", "").split(os.pathsep):
        if d:
            dirs.append(Path(d))
    return dirs


def line_of(text: str, table: str | None, key: str) -> int | None:
    """Line (1-based) where ``key`` is set inside ``[table]`` (or at top level)."""
    current: str | None = None
    pat = re.compile(r"^\s*" + re.escape(key) + r"\s*=")
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*\[([^\]]+)\]", line)
        if m:
            current = m.group(1).strip()
            continue
        if current == table and pat.match(line):
            return i
    return None


@dataclass(frozen=True)
class Origin:
    """Where a profile key was given: a file and line, or a ``--set`` override."""

    file: str
    line: int | None = None

    def error(self, field: str, message: str) -> ProfileError:
        return ProfileError(message, file=self.file, line=self.line, field=field)


@dataclass
class Direction:
    """One direction of a profile: its keys, as given, and where each was given."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, Origin] = field(default_factory=dict)

    def emulator_config(self, base: Path | None) -> tuple[dict[str, Any], dict[str, str]]:
        """The emulator's configuration of this direction (see satlink::config),
        and for each part of it the profile key that made it (``rate`` ->
        ``rate_mbps``). Values pass unchecked: the emulator checks them."""
        p = self.params
        d: dict[str, Any] = {}
        made: dict[str, str] = {}
        if "rate_mbps" in p:
            d["rate"] = {"kind": "constant", "bps": p["rate_mbps"] * 1e6}
            made["rate"] = "rate_mbps"
        elif "rate_schedule" in p:
            d["rate"] = {"kind": "schedule", "points": [[t, v * 1e6] for t, v in p["rate_schedule"]],
                         "period_s": p.get("rate_period_s", 0.0)}
            made["rate"] = "rate_schedule"
            made["rate.period_s"] = "rate_period_s"
        elif "trace" in p:
            d["rate"] = {"kind": "trace", "path": str(_resolve(base, p["trace"]))}
            made["rate"] = "trace"
        elif "leo_trace" in p:
            d["rate"] = {"kind": "leo_trace", "unit_bps": p.get("leo_unit_mbps", 12.0) * 1e6,
                         "path": str(_resolve(base, p["leo_trace"]))}
            made["rate"] = "leo_trace"
            made["rate.unit_bps"] = "leo_unit_mbps"
        if "delay_schedule" in p:
            d["delay"] = {"kind": "schedule", "points": p["delay_schedule"], "period_s": p.get("delay_period_s", 0.0)}
            made["delay"] = "delay_schedule"
            made["delay.period_s"] = "delay_period_s"
        elif "delay_trace" in p:
            d["delay"] = {"kind": "leo_trace", "interval_ms": p.get("delay_trace_interval_ms", 10.0),
                          "path": str(_resolve(base, p["delay_trace"]))}
            made["delay"] = "delay_trace"
            made["delay.interval_ms"] = "delay_trace_interval_ms"
        else:
            d["delay"] = {"kind": "constant", "ms": p.get("delay_ms", 0.0)}
            made["delay"] = "delay_ms"
        if p.get("jitter_ms", 0) != 0:
            d["jitter"] = {"kind": p.get("jitter", "uniform"), "ms": p["jitter_ms"]}
            made["jitter"] = "jitter_ms"
        d["reorder"] = bool(p.get("reorder", False))
        limit: dict[str, Any] = {"kind": "unlimited"}
        for key, lim in (("queue_packets", {"kind": "packets", "n": p.get("queue_packets")}),
                         ("queue_bytes", {"kind": "bytes", "n": p.get("queue_bytes")}),
                         ("queue_ms", {"kind": "ms", "ms": p.get("queue_ms")})):
            if key in p:
                limit = lim
                made["queue.limit"] = key
        aqm: dict[str, Any] = {"kind": "drop_tail"}
        if p.get("aqm") in ("codel", "fq_codel"):
            aqm = {"kind": p["aqm"], "target_ms": p.get("codel_target_ms", 5.0),
                   "interval_ms": p.get("codel_interval_ms", 100.0)}
            made["queue.aqm"] = "aqm"
            made["queue.aqm.kind"] = "aqm"
            for key, name in _AQM_KEYS.items():
                if key in p:
                    aqm[name] = int(p[key]) if key in ("fq_flows", "fq_quantum") else p[key]
                made[f"queue.aqm.{name}"] = key if key in p else "aqm"
        d["queue"] = {"limit": limit, "aqm": aqm}
        loss: list[dict[str, Any]] = []

        def add_loss(key: str, entry: dict[str, Any]) -> None:
            made[f"loss[{len(loss)}]"] = key
            if key == "loss_schedule":
                made[f"loss[{len(loss)}].period_s"] = "loss_period_s"
            loss.append(entry)

        # A zero loss adds no model (so a profile that says `ber = 0` is the
        # same link as one that says nothing).
        if p.get("loss", 0) != 0:
            add_loss("loss", {"kind": "bernoulli", "p": p["loss"]})
        if p.get("ber", 0) != 0:
            add_loss("ber", {"kind": "ber", "ber": p["ber"]})
        if "gilbert" in p:
            g = p["gilbert"]
            add_loss("gilbert", {"kind": "gilbert", "p": g["p"], "r": g["r"], "loss_good": g.get("loss_good", 0.0),
                                 "loss_bad": g.get("loss_bad", 1.0)})
        if "loss_schedule" in p:
            add_loss("loss_schedule", {"kind": "schedule", "points": p["loss_schedule"],
                                       "period_s": p.get("loss_period_s", 0.0)})
        d["loss"] = loss
        for key in sorted(_TABLE_KEYS & p.keys()):
            d[key] = p[key]
            made[key] = key
        return d, made

    def summary(self) -> str:
        p = self.params
        parts = []
        if "rate_mbps" in p:
            parts.append(f"{_num(p['rate_mbps'])} Mbit/s")
        elif "rate_schedule" in p:
            rates = [v for _, v in p["rate_schedule"]]
            parts.append(f"{_num(min(rates))}-{_num(max(rates))} Mbit/s")
        elif "trace" in p:
            parts.append(f"trace {p['trace']}")
        elif "leo_trace" in p:
            parts.append(f"LEO trace {p['leo_trace']}")
        elif "access" in p and p["access"].get("kind") in ("acm", "ccm"):
            baud = float(p["access"].get("symbol_rate_baud", 0))
            parts.append(f"DVB-S2 {str(p['access']['kind']).upper()} at {_num(baud / 1e6)} Mbaud")
        else:
            parts.append("unlimited")
        if p.get("access", {}).get("kind") == "dama":
            parts.append(f"DAMA ({p['access'].get('preset', 'opensand')})")
        if "delay_schedule" in p:
            ds = [v for _, v in p["delay_schedule"]]
            parts.append(f"{_num(min(ds))}-{_num(max(ds))} ms")
        elif "delay_trace" in p:
            parts.append(f"delay trace {p['delay_trace']}")
        else:
            parts.append(f"{_num(p.get('delay_ms', 0))} ms")
        if p.get("loss"):
            parts.append(f"loss {_num(p['loss'] * 100)} %")
        if p.get("ber"):
            parts.append(f"BER {p['ber']:g}")
        if "gilbert" in p:
            parts.append("GE bursts")
        if "loss_schedule" in p:
            parts.append("scheduled loss")
        for k, unit in (("queue_packets", "pkt"), ("queue_bytes", "B"), ("queue_ms", "ms")):
            if k in p:
                parts.append(f"queue {_num(p[k])} {unit}")
        if p.get("aqm") in ("codel", "fq_codel"):
            parts.append({"codel": "CoDel", "fq_codel": "FQ-CoDel"}[p["aqm"]] + (" with ECN" if p.get("ecn") else ""))
        return ", ".join(parts)

    def min_delay_ms(self) -> float:
        if "delay_schedule" in self.params:
            return float(min(v for _, v in self.params["delay_schedule"]))
        if "delay_trace" in self.params:
            return 0.0  # the emulator's check reads the file (the resolved link's base RTT is exact)
        return float(self.params.get("delay_ms", 0.0))


def _num(x: float) -> str:
    return f"{x:g}"


def _resolve(base: Path | None, name: str) -> Path:
    p = Path(name)
    if not p.is_absolute() and base is not None:
        p = base / p
    return p


@dataclass
class LinkProfile:
    """A profile as written (with its overrides applied), not yet checked by
    the emulator: :meth:`resolve` gives the :class:`~satbench.link.spec.LinkSpec`."""

    name: str
    description: str
    forward: Direction
    ret: Direction
    align_minute: bool = False
    source: Path | None = None
    overrides: tuple[str, ...] = ()
    origin: Origin = Origin("<profile>")
    #: Per-terminal settings as given ([[terminals]]), with where each was given.
    terminals: tuple[dict[str, dict[str, Any]], ...] = ()
    terminal_origins: tuple[Origin, ...] = ()

    @property
    def base_rtt_ms(self) -> float:
        """Round-trip propagation delay (minimum, before queueing and serialisation)."""
        return self.forward.min_delay_ms() + self.ret.min_delay_ms()

    @property
    def label(self) -> str:
        """The name with its overrides, as a user would write them."""
        return self.name + "".join(f" --set {o}" for o in self.overrides)

    def emulator_config(self, seed: int | None = None) -> dict[str, Any]:
        """The emulator's configuration (``seed`` left out when None)."""
        return self.config_with_origins(seed)[0]

    def config_with_origins(self, seed: int | None = None) -> tuple[dict[str, Any], dict[str, tuple[str, Origin]]]:
        """The emulator's configuration, and for each part of it (a path such
        as ``forward.loss[0]``) the profile field and where it was given."""
        base = self.source.parent if self.source else None
        cfg: dict[str, Any] = {} if seed is None else {"seed": seed}
        cfg["align_minute"] = self.align_minute
        made: dict[str, tuple[str, Origin]] = {}
        for name, d in (("forward", self.forward), ("return", self.ret)):
            cfg[name], parts = d.emulator_config(base)
            for path, key in parts.items():
                made[f"{name}.{path}"] = (f"{name}.{key}", d.origins.get(key, self.origin))
        if self.terminals:
            made["terminals"] = ("terminals", self.terminal_origins[0])
            cfg["terminals"] = []
            for i, (t, o) in enumerate(zip(self.terminals, self.terminal_origins)):
                cfg["terminals"].append(_terminal_config(t, base))
                made[f"terminals[{i}]"] = (f"terminals[{i}]", o)
        return cfg, made


def _terminal_config(t: dict[str, dict[str, Any]], base: Path | None) -> dict[str, Any]:
    """One terminal's emulator configuration from its profile table."""
    out: dict[str, Any] = {}
    for direction, keys in TERMINAL_KEYS.items():
        given = t.get(direction, {})
        if not given:
            continue
        d: dict[str, Any] = {}
        for k, v in given.items():
            name, scale = keys[k]
            if k == "fade":
                d["fade"] = ({"path": str(_resolve(base, v))} if isinstance(v, str)
                             else {"points": [[float(a), float(b)] for a, b in v]})
            elif k == "fade_loop":
                continue
            else:
                d[name] = v * scale if scale != 1.0 else v
        if "fade" in d and "fade_loop" in given:
            d["fade"]["loop"] = bool(given["fade_loop"])
        out[direction] = d
    return out


def with_terminals(config: dict[str, Any], subnets: list[list[str]]) -> dict[str, Any]:
    """The configuration for a testbed of ``len(subnets)`` terminals: the
    profile's terminal settings used in turn (cycling; none given: defaults),
    each terminal given its subnets. One terminal needs no subnets (every
    packet goes to it), and a configuration for one is returned unchanged."""
    if len(subnets) == 1:
        return config
    given = config.get("terminals") or [{}]
    out = dict(config)
    out["terminals"] = [{**given[i % len(given)], "subnets": list(s)} for i, s in enumerate(subnets)]
    return out


def _check_direction(raw: Any, where: str, file: str, text: str, located: dict[str, str]) -> Direction:
    """Check one direction table's form; errors name the file, line and field."""
    origins: dict[str, Origin] = {}

    def origin(key: str) -> Origin:
        if key in located:
            return Origin(located[key])
        line = line_of(text, where, key)
        if line is None:  # a table of its own: [forward.access]
            line = next((i for i, t in enumerate(text.splitlines(), 1)
                         if re.match(r"^\s*\[\s*" + re.escape(f"{where}.{key}") + r"\s*\]", t)), None)
        return Origin(file, line)

    def fail(key: str, msg: str) -> ProfileError:
        return origin(key).error(f"{where}.{key}", msg)

    if not isinstance(raw, dict):
        raise ProfileError("must be a table", file=file, field=where)
    for k in raw:
        if k not in KEYS:
            raise fail(k, f"unknown key (known: {', '.join(sorted(KEYS))})")
        origins[k] = origin(k)
    p = dict(raw)
    for k in _NUMBER_KEYS & p.keys():
        v = p[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise fail(k, f"must be a finite number, got {v!r}")
        p[k] = float(v)
    for k in ("queue_packets", "queue_bytes"):
        if k in p and p[k] != int(p[k]):
            raise fail(k, f"must be a whole number, got {p[k]:g}")
        if k in p:
            p[k] = int(p[k])
    for g in GROUPS:
        present = [k for k in g if k in p]
        if len(present) > 1:
            raise fail(present[1], f"conflicts with {present[0]}; give only one of {', '.join(g)}")
    if "queue_ms" in p and not any(k in p for k in ("rate_mbps", "rate_schedule", "trace", "leo_trace", "access")):
        raise fail("queue_ms", "a queue in milliseconds needs a rate, a rate schedule, a trace or an access")
    for k in _TABLE_KEYS & p.keys():
        if not isinstance(p[k], dict):
            raise fail(k, f"must be a table, got {p[k]!r}")
    if "jitter" in p and p["jitter"] not in ("uniform", "normal"):
        raise fail("jitter", f"must be \"uniform\" or \"normal\", got {p['jitter']!r}")
    if "aqm" in p and p["aqm"] not in ("droptail", "codel", "fq_codel"):
        raise fail("aqm", f"must be \"droptail\", \"codel\" or \"fq_codel\", got {p['aqm']!r}")
    for k in _AQM_KEYS.keys() & p.keys():
        if p.get("aqm") not in ("codel", "fq_codel"):
            raise fail(k, "shapes a CoDel queue: set aqm = \"codel\" or \"fq_codel\"")
        if k in ("fq_flows", "fq_quantum") and p["aqm"] != "fq_codel":
            raise fail(k, "is FQ-CoDel's: set aqm = \"fq_codel\"")
    if "ecn" in p and not isinstance(p["ecn"], bool):
        raise fail("ecn", f"must be true or false, got {p['ecn']!r}")
    if "ce_threshold_selector" in p and p["ce_threshold_selector"] not in ("all", "ect1"):
        raise fail("ce_threshold_selector", f"must be \"all\" or \"ect1\", got {p['ce_threshold_selector']!r}")
    for k in ("fq_flows", "fq_quantum"):
        # A whole number the emulator can read (its range is its own to check and name).
        if k in p and (p[k] != int(p[k]) or not 0 <= p[k] < 2**32):
            raise fail(k, f"must be a whole number from 0 to 4294967295, got {p[k]:g}")
    if "reorder" in p and not isinstance(p["reorder"], bool):
        raise fail("reorder", f"must be true or false, got {p['reorder']!r}")
    for k in _SCHEDULE_KEYS & p.keys():
        pts = p[k]
        if not isinstance(pts, list) or not pts:
            raise fail(k, "must be a non-empty list of [seconds, value] pairs")
        clean = []
        for i, pt in enumerate(pts):
            if (not isinstance(pt, list) or len(pt) != 2
                    or not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                               for x in pt)):
                raise fail(k, f"point {i} must be [seconds, value] with finite numbers, got {pt!r}")
            clean.append([float(pt[0]), float(pt[1])])
        p[k] = clean
    if "gilbert" in p:
        g = p["gilbert"]
        if not isinstance(g, dict) or not {"p", "r"} <= g.keys():
            raise fail("gilbert", "must be a table with p and r (and optional loss_good, loss_bad)")
        for gk, gv in g.items():
            if gk not in ("p", "r", "loss_good", "loss_bad"):
                raise fail("gilbert", f"unknown key {gk!r}")
            if isinstance(gv, bool) or not isinstance(gv, (int, float)) or not math.isfinite(gv):
                raise fail("gilbert", f"{gk} must be a finite number, got {gv!r}")
    for k in _FILE_KEYS & p.keys():
        if not isinstance(p[k], str):
            raise fail(k, f"must be a file name, got {p[k]!r}")
    return Direction(where, p, origins)


def parse_profile(text: str, *, file: str = "<profile>", overrides: list[str] | None = None,
                  source: Path | None = None) -> LinkProfile:
    """Parse a profile's text; ``overrides`` are ``--set`` values."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise ProfileError(f"not valid TOML: {e}", file=file, line=int(m.group(1)) if m else None) from None
    for k in data:
        if k not in _TOP_KEYS:
            raise ProfileError(f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})", file=file,
                               line=line_of(text, None, k), field=k)
    name = data.get("name")
    if not isinstance(name, str) or not re.fullmatch(NAME_RE, name):
        raise ProfileError("must be a name of letters, digits, '.', '_' or '-'", file=file,
                           line=line_of(text, None, "name"), field="name")
    align = data.get("align_minute", False)
    if not isinstance(align, bool):
        raise ProfileError("must be true or false", file=file, line=line_of(text, None, "align_minute"),
                           field="align_minute")
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ProfileError("must be a string", file=file, line=line_of(text, None, "description"),
                           field="description")
    located: dict[str, dict[str, str]] = {d: {} for d in DIRECTIONS}
    for ov in overrides or []:
        _apply_override(data, ov, located)
    dirs = [_check_direction(data.get(d, {}), d, file, text, located[d]) for d in DIRECTIONS]
    terminals, origins = _check_terminals(data.get("terminals", []), file, text)
    return LinkProfile(name=name, description=description, forward=dirs[0], ret=dirs[1], align_minute=align,
                       source=source, overrides=tuple(overrides or ()), origin=Origin(file),
                       terminals=terminals, terminal_origins=origins)


def _check_terminals(raw: Any, file: str, text: str) -> tuple[tuple[dict[str, dict[str, Any]], ...],
                                                              tuple[Origin, ...]]:
    """The [[terminals]] tables' form: known keys, numbers where numbers go."""
    heads = [i for i, line in enumerate(text.splitlines(), 1) if re.match(r"^\s*\[\[\s*terminals\s*\]\]", line)]
    if not isinstance(raw, list) or not all(isinstance(t, dict) for t in raw):
        raise ProfileError("must be tables ([[terminals]])", file=file, line=line_of(text, None, "terminals"),
                           field="terminals")
    out, origins = [], []
    for i, t in enumerate(raw):
        o = Origin(file, heads[i] if i < len(heads) else None)
        origins.append(o)
        for direction, v in t.items():
            if direction not in TERMINAL_KEYS:
                raise o.error(f"terminals[{i}].{direction}", "unknown key (known: forward, return)")
            if not isinstance(v, dict):
                raise o.error(f"terminals[{i}].{direction}", "must be a table")
            for k, x in v.items():
                where = f"terminals[{i}].{direction}.{k}"
                if k not in TERMINAL_KEYS[direction]:
                    raise o.error(where, f"unknown key (known: {', '.join(TERMINAL_KEYS[direction])})")
                if k == "fade":
                    ok = isinstance(x, str) or (isinstance(x, list) and all(
                        isinstance(pt, list) and len(pt) == 2 and all(isinstance(n, (int, float))
                                                                      and not isinstance(n, bool) for n in pt)
                        for pt in x))
                    if not ok:
                        raise o.error(where, "must be a file name or a list of [seconds, dB] points")
                elif k == "fade_loop":
                    if not isinstance(x, bool):
                        raise o.error(where, f"must be true or false, got {x!r}")
                elif isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                    raise o.error(where, f"must be a finite number, got {x!r}")
                elif k.endswith("_bytes") and x != int(x):
                    raise o.error(where, f"must be a whole number, got {x!r}")
        out.append({d: {k: int(x) if k.endswith("_bytes") else x for k, x in v.items()} for d, v in t.items()})
    return tuple(out), tuple(origins)


def _apply_override(data: dict[str, Any], ov: str, located: dict[str, dict[str, str]]) -> None:
    key, sep, value = ov.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ProfileError(f"expected KEY=VALUE, got {ov!r}", file="--set")
    try:
        parsed = tomllib.loads(f"v = {value.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        parsed = value.strip()
    dirs, _, leaf = key.rpartition(".")
    targets = [dirs] if dirs else list(DIRECTIONS)
    for d in targets:
        if d not in DIRECTIONS:
            raise ProfileError(f"unknown direction {d!r} (use forward or return)", file="--set", field=key)
        if leaf not in KEYS:
            raise ProfileError(f"unknown key (known: {', '.join(sorted(KEYS))})", file="--set", field=key)
        table = data.setdefault(d, {})
        if not isinstance(table, dict):
            raise ProfileError("must be a table", file="--set", field=d)
        # A new value replaces any key it conflicts with.
        for group in GROUPS:
            if leaf in group:
                for other in group:
                    table.pop(other, None)
        table[leaf] = parsed
        located[d][leaf] = f"--set {ov}"


def available() -> dict[str, Path]:
    """Every profile name found on the search path, with its file."""
    found: dict[str, Path] = {}
    for d in search_path():
        if d.is_dir():
            for f in sorted(d.glob("*.toml")):
                found[f.stem] = f
    return found


def read_text(path: Path, what: str) -> str:
    """A user's file as text, or a ProfileError naming it (unreadable, not UTF-8)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ProfileError(f"cannot read {what}: {e.strerror}", file=str(path)) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ProfileError(f"not UTF-8 text (byte {e.start} is 0x{raw[e.start]:02x})", file=str(path),
                           line=line) from None


def find(name_or_path: str) -> Path:
    """The file of a profile given by name (see :func:`search_path`) or path."""
    if name_or_path.endswith(".toml") or os.sep in name_or_path:
        return Path(name_or_path)
    profiles = available()
    if name_or_path not in profiles:
        raise ProfileError(f"unknown link profile (available: {', '.join(sorted(profiles))})",
                           field=f"--link {name_or_path}")
    return profiles[name_or_path]


def load(name_or_path: str, overrides: list[str] | None = None) -> LinkProfile:
    """Load a profile by name or by file path, with ``--set`` overrides."""
    path = find(name_or_path)
    text = read_text(path, "profile")
    return parse_profile(text, file=str(path), overrides=overrides, source=path)
