"""Link profiles: TOML files describing both directions of an emulated link.

A profile has a ``name``, a ``description`` and two tables, ``[forward]``
(gateway to terminal, the downlink) and ``[return]`` (terminal to gateway).
Each direction takes these keys (all optional; an empty direction is an
ideal wire):

    rate_mbps = 10                         constant capacity
    rate_schedule = [[0, 100], [12, 80]]   (seconds, Mbit/s); rate_period_s repeats it
    trace = "file.trace"                   Mahimahi trace, relative to the profile
    delay_ms = 265                         one-way propagation delay
    delay_schedule = [[0, 20], [12, 35]]   (seconds, ms); delay_period_s repeats it
    jitter_ms = 2, jitter = "uniform"|"normal", reorder = false
    queue_packets | queue_bytes | queue_ms  drop-tail limit (ms at the link rate)
    aqm = "droptail"|"codel", codel_target_ms = 5, codel_interval_ms = 100
    loss = 0.01                            Bernoulli packet loss
    ber = 1e-6                             bit error rate (per-packet loss from size)
    gilbert = { p = 0.01, r = 0.3, loss_good = 0, loss_bad = 1 }
    loss_schedule = [[0, 0], [12, 0.2], [12.3, 0]]; loss_period_s repeats it

Top level: ``align_minute = true`` makes schedule time 0 the start of the
current UTC minute (Starlink reconfigures at fixed seconds of every minute).

Overrides (``--set``): ``forward.KEY=VALUE``, ``return.KEY=VALUE``, or
``KEY=VALUE`` for both directions.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ProfileError

BUILTIN_DIR = Path(__file__).parent / "links"
DIRECTIONS = ("forward", "return")

_NUMBER_KEYS = {
    "rate_mbps", "rate_period_s", "delay_ms", "delay_period_s", "jitter_ms", "queue_packets",
    "queue_bytes", "queue_ms", "codel_target_ms", "codel_interval_ms", "loss", "ber", "loss_period_s",
}
_SCHEDULE_KEYS = {"rate_schedule", "delay_schedule", "loss_schedule"}
_KEYS = _NUMBER_KEYS | _SCHEDULE_KEYS | {"trace", "jitter", "reorder", "aqm", "gilbert"}
_TOP_KEYS = {"name", "description", "align_minute", "forward", "return"}


def search_path() -> list[Path]:
    """Directories searched for profiles, later ones overriding earlier ones."""
    dirs = [BUILTIN_DIR]
    home = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "satbench" / "links"
    dirs.append(home)
    for d in os.environ.get("SATBENCH_LINKS", "").split(os.pathsep):
        if d:
            dirs.append(Path(d))
    return dirs


def _line_of(text: str, table: str | None, key: str) -> int | None:
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


@dataclass
class Direction:
    """One direction of a link, validated."""

    params: dict[str, Any] = field(default_factory=dict)

    def emulator_config(self, base: Path | None) -> dict[str, Any]:
        """The normalised JSON the emulator reads (see satlink::config)."""
        p = self.params
        d: dict[str, Any] = {}
        if "rate_mbps" in p:
            d["rate"] = {"kind": "constant", "bps": p["rate_mbps"] * 1e6}
        elif "rate_schedule" in p:
            d["rate"] = {"kind": "schedule", "points": [[t, v * 1e6] for t, v in p["rate_schedule"]],
                         "period_s": p.get("rate_period_s", 0.0)}
        elif "trace" in p:
            d["rate"] = {"kind": "trace", "path": str(_resolve(base, p["trace"]))}
        if "delay_schedule" in p:
            d["delay"] = {"kind": "schedule", "points": p["delay_schedule"], "period_s": p.get("delay_period_s", 0.0)}
        else:
            d["delay"] = {"kind": "constant", "ms": p.get("delay_ms", 0.0)}
        if p.get("jitter_ms", 0) > 0:
            d["jitter"] = {"kind": p.get("jitter", "uniform"), "ms": p["jitter_ms"]}
        d["reorder"] = bool(p.get("reorder", False))
        limit: dict[str, Any] = {"kind": "unlimited"}
        if "queue_packets" in p:
            limit = {"kind": "packets", "n": int(p["queue_packets"])}
        elif "queue_bytes" in p:
            limit = {"kind": "bytes", "n": int(p["queue_bytes"])}
        elif "queue_ms" in p:
            limit = {"kind": "ms", "ms": p["queue_ms"]}
        aqm: dict[str, Any] = {"kind": "drop_tail"}
        if p.get("aqm") == "codel":
            aqm = {"kind": "codel", "target_ms": p.get("codel_target_ms", 5.0),
                   "interval_ms": p.get("codel_interval_ms", 100.0)}
        d["queue"] = {"limit": limit, "aqm": aqm}
        loss: list[dict[str, Any]] = []
        if p.get("loss", 0) > 0:
            loss.append({"kind": "bernoulli", "p": p["loss"]})
        if p.get("ber", 0) > 0:
            loss.append({"kind": "ber", "ber": p["ber"]})
        if "gilbert" in p:
            g = p["gilbert"]
            loss.append({"kind": "gilbert", "p": g["p"], "r": g["r"], "loss_good": g.get("loss_good", 0.0),
                         "loss_bad": g.get("loss_bad", 1.0)})
        if "loss_schedule" in p:
            loss.append({"kind": "schedule", "points": p["loss_schedule"], "period_s": p.get("loss_period_s", 0.0)})
        d["loss"] = loss
        return d

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
        else:
            parts.append("unlimited")
        if "delay_schedule" in p:
            ds = [v for _, v in p["delay_schedule"]]
            parts.append(f"{_num(min(ds))}-{_num(max(ds))} ms")
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
        if p.get("aqm") == "codel":
            parts.append("CoDel")
        return ", ".join(parts)

    def min_delay_ms(self) -> float:
        if "delay_schedule" in self.params:
            return min(v for _, v in self.params["delay_schedule"])
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
    name: str
    description: str
    forward: Direction
    ret: Direction
    align_minute: bool = False
    source: Path | None = None

    @property
    def base_rtt_ms(self) -> float:
        """Round-trip propagation delay (minimum, before queueing and serialisation)."""
        return self.forward.min_delay_ms() + self.ret.min_delay_ms()

    def emulator_config(self, seed: int) -> dict[str, Any]:
        base = self.source.parent if self.source else None
        return {
            "seed": seed,
            "align_minute": self.align_minute,
            "forward": self.forward.emulator_config(base),
            "return": self.ret.emulator_config(base),
        }


def _check_direction(raw: Any, where: str, file: str, text: str, base: Path | None,
                     located: dict[str, str] | None = None) -> Direction:
    """Validate one direction table; errors name the file, line and field."""

    def fail(key: str, msg: str) -> ProfileError:
        if located and key in located:
            return ProfileError(msg, file=located[key], field=f"{where}.{key}")
        return ProfileError(msg, file=file, line=_line_of(text, where, key), field=f"{where}.{key}")

    if not isinstance(raw, dict):
        raise ProfileError("must be a table", file=file, field=where)
    for k in raw:
        if k not in _KEYS:
            raise fail(k, f"unknown key (known: {', '.join(sorted(_KEYS))})")
    p = dict(raw)
    for k in _NUMBER_KEYS & p.keys():
        v = p[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            raise fail(k, f"must be a number, got {v!r}")
        p[k] = float(v)
    positive = ("rate_mbps", "queue_packets", "queue_bytes", "queue_ms", "codel_target_ms", "codel_interval_ms")
    for k in positive:
        if k in p and p[k] <= 0:
            raise fail(k, f"must be positive, got {_num(p[k])}")
    for k in ("delay_ms", "jitter_ms", "rate_period_s", "delay_period_s", "loss_period_s"):
        if k in p and p[k] < 0:
            raise fail(k, f"must be zero or positive, got {_num(p[k])}")
    for k in ("loss", "ber"):
        if k in p and not 0 <= p[k] <= 1:
            raise fail(k, f"probability must be within [0, 1], got {p[k]:g}")
    for k in ("queue_packets", "queue_bytes"):
        if k in p and p[k] != int(p[k]):
            raise fail(k, f"must be a whole number, got {p[k]:g}")
    groups = [("rate_mbps", "rate_schedule", "trace"), ("delay_ms", "delay_schedule"),
              ("queue_packets", "queue_bytes", "queue_ms")]
    for g in groups:
        present = [k for k in g if k in p]
        if len(present) > 1:
            raise fail(present[1], f"conflicts with {present[0]}; give only one of {', '.join(g)}")
    if "queue_ms" in p and not any(k in p for k in ("rate_mbps", "rate_schedule", "trace")):
        raise fail("queue_ms", "a queue in milliseconds needs a rate, a rate schedule or a trace")
    if "jitter" in p and p["jitter"] not in ("uniform", "normal"):
        raise fail("jitter", f"must be \"uniform\" or \"normal\", got {p['jitter']!r}")
    if "aqm" in p and p["aqm"] not in ("droptail", "codel"):
        raise fail("aqm", f"must be \"droptail\" or \"codel\", got {p['aqm']!r}")
    if "reorder" in p and not isinstance(p["reorder"], bool):
        raise fail("reorder", f"must be true or false, got {p['reorder']!r}")
    for k in _SCHEDULE_KEYS & p.keys():
        pts = p[k]
        if not isinstance(pts, list) or not pts:
            raise fail(k, "must be a non-empty list of [seconds, value] pairs")
        clean = []
        for i, pt in enumerate(pts):
            if (not isinstance(pt, list) or len(pt) != 2
                    or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in pt)):
                raise fail(k, f"point {i} must be [seconds, value], got {pt!r}")
            t, v = float(pt[0]), float(pt[1])
            if t < 0:
                raise fail(k, f"point {i}: time must be zero or positive, got {t:g}")
            if clean and t <= clean[-1][0]:
                raise fail(k, f"point {i}: times must increase ({t:g} s after {clean[-1][0]:g} s)")
            if k == "loss_schedule" and not 0 <= v <= 1:
                raise fail(k, f"point {i}: probability must be within [0, 1], got {v:g}")
            if k == "delay_schedule" and v < 0:
                raise fail(k, f"point {i}: delay must be zero or positive, got {v:g}")
            if k == "rate_schedule" and v < 0:
                raise fail(k, f"point {i}: rate must be zero or positive, got {v:g}")
            clean.append([t, v])
        period_key = k.replace("_schedule", "_period_s")
        period = p.get(period_key, 0.0)
        if period and clean[-1][0] >= period:
            raise fail(k, f"last point at {clean[-1][0]:g} s is not before {period_key} = {period:g}")
        p[k] = clean
    if "gilbert" in p:
        g = p["gilbert"]
        if not isinstance(g, dict) or not {"p", "r"} <= g.keys():
            raise fail("gilbert", "must be a table with p and r (and optional loss_good, loss_bad)")
        for gk, gv in g.items():
            if gk not in ("p", "r", "loss_good", "loss_bad"):
                raise fail("gilbert", f"unknown key {gk!r}")
            if isinstance(gv, bool) or not isinstance(gv, (int, float)) or not 0 <= gv <= 1:
                raise fail("gilbert", f"{gk} must be a probability within [0, 1], got {gv!r}")
    if "trace" in p:
        if not isinstance(p["trace"], str):
            raise fail("trace", f"must be a file name, got {p['trace']!r}")
        path = _resolve(base, p["trace"])
        check_trace(path)
    return Direction(p)


def check_trace(path: Path) -> None:
    """Validate a Mahimahi trace, naming the file and line of the first problem."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ProfileError(f"cannot read trace: {e.strerror}", file=str(path)) from None
    prev = None
    count = 0
    for i, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not s:
            continue
        if not s.isdigit():
            raise ProfileError(f"expected a whole number of milliseconds, found {s!r}", file=str(path), line=i)
        v = int(s)
        if prev is not None and v < prev:
            raise ProfileError(f"{v} ms comes before the previous line's {prev} ms", file=str(path), line=i)
        prev = v
        count += 1
    if count == 0:
        raise ProfileError("trace has no delivery opportunities", file=str(path))
    if prev == 0:
        raise ProfileError("trace must end after 0 ms", file=str(path))


def parse_profile(text: str, *, file: str = "<profile>", base: Path | None = None,
                  overrides: list[str] | None = None) -> LinkProfile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        raise ProfileError(f"not valid TOML: {e}", file=file, line=int(m.group(1)) if m else None) from None
    for k in data:
        if k not in _TOP_KEYS:
            raise ProfileError(f"unknown key (known: {', '.join(sorted(_TOP_KEYS))})", file=file,
                               line=_line_of(text, None, k), field=k)
    name = data.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ProfileError("must be a name of letters, digits, '.', '_' or '-'", file=file,
                           line=_line_of(text, None, "name"), field="name")
    align = data.get("align_minute", False)
    if not isinstance(align, bool):
        raise ProfileError("must be true or false", file=file, line=_line_of(text, None, "align_minute"),
                           field="align_minute")
    located: dict[str, dict[str, str]] = {d: {} for d in DIRECTIONS}
    for ov in overrides or []:
        _apply_override(data, ov, located)
    dirs = [_check_direction(data.get(d, {}), d, file, text, base, located[d]) for d in DIRECTIONS]
    return LinkProfile(name=name, description=str(data.get("description", "")), forward=dirs[0], ret=dirs[1],
                       align_minute=align, source=Path(file) if file != "<profile>" else None)


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
        if leaf not in _KEYS:
            raise ProfileError(f"unknown key (known: {', '.join(sorted(_KEYS))})", file="--set", field=key)
        table = data.setdefault(d, {})
        # A new value replaces any key it conflicts with.
        for group in (("rate_mbps", "rate_schedule", "trace"), ("delay_ms", "delay_schedule"),
                      ("queue_packets", "queue_bytes", "queue_ms")):
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


def load(name_or_path: str, overrides: list[str] | None = None) -> LinkProfile:
    """Load a profile by name (see :func:`search_path`) or by file path."""
    p = Path(name_or_path)
    if name_or_path.endswith(".toml") or os.sep in name_or_path:
        path = p
    else:
        profiles = available()
        if name_or_path not in profiles:
            raise ProfileError(f"unknown link profile (available: {', '.join(sorted(profiles))})",
                               field=f"--link {name_or_path}")
        path = profiles[name_or_path]
    try:
        text = path.read_text()
    except OSError as e:
        raise ProfileError(f"cannot read profile: {e.strerror}", file=str(path)) from None
    return parse_profile(text, file=str(path), base=path.parent, overrides=overrides)
