"""Link profiles: TOML files describing both directions of an emulated link.

The schema is the emulator's: ``satbench-link --check --profile FILE`` reads
a profile, checks its form and its values, resolves the link and names the
file, line and key of anything it refuses (``crates/satlink/src/profile.rs``
documents every key, and ``docs/reference.md`` lists them). This module keeps
what is Python's: the search path (built-ins, ``~/.config/satbench/links``,
``$SATBENCH_LINKS``), reading the file a user named, the call, and the
profile as the emulator answered it.

A profile has a ``name``, a ``description``, ``[forward]`` (gateway to
terminal) and ``[return]`` (terminal to gateway) tables, optional
``[[terminals]]``; overrides (``--set``) are ``forward.KEY=VALUE``,
``return.KEY=VALUE`` or ``KEY=VALUE`` for both directions.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import prereq
from ..errors import PrerequisiteError, ProfileError

BUILTIN_DIR = Path(__file__).parent / "profiles"
#: A profile's name: letters, digits, '.', '_' and '-', not starting with a sign.
NAME_RE = r"[A-Za-z0-9][A-Za-z0-9._-]*"
DIRECTIONS = ("forward", "return")

#: Every key a direction takes: the emulator's list (``satlink::profile::keys``), written to this file by
#: its test ``the_key_list_python_reads_is_current``.
KEYS: frozenset[str] = frozenset(json.loads((Path(__file__).parent / "profile-keys.json").read_text()))


def search_path() -> list[Path]:
    """Directories searched for profiles, later ones overriding earlier ones."""
    dirs = [BUILTIN_DIR]
    home = Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "satbench" / "links"
    dirs.append(home)
    for d in os.environ.get("SATBENCH_LINKS", "").split(os.pathsep):
        if d:
            dirs.append(Path(d))
    return dirs


@dataclass
class Direction:
    """One direction of a profile: its keys, as the emulator checked them."""

    name: str
    params: dict[str, Any] = field(default_factory=dict)

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


@dataclass
class LinkProfile:
    """A profile as the emulator checked it (with its overrides applied):
    :func:`~satbench.link.spec.resolve` gives the
    :class:`~satbench.link.spec.LinkSpec`."""

    name: str
    description: str
    forward: Direction
    ret: Direction
    align_minute: bool = False
    source: Path | None = None
    overrides: tuple[str, ...] = ()
    #: Per-terminal settings as given ([[terminals]]).
    terminals: tuple[dict[str, dict[str, Any]], ...] = ()
    #: The profile's text and the name errors give it: the emulator reads it again for other terminals.
    text: str = ""
    file: str = "<profile>"
    #: The emulator's answer for one terminal: ``ok`` with ``config`` and ``derived``, or the refusal of a
    #: value (``stage`` = ``values``), raised when the link is resolved.
    answer: dict[str, Any] = field(default_factory=dict, repr=False)

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
        config = dict(self.resolved()["config"])
        return config if seed is None else {"seed": seed, **config}

    def resolved(self, subnets: list[list[str]] | None = None) -> dict[str, Any]:
        """The emulator's answer (``config`` and ``derived``) for one terminal, or with ``subnets`` for
        as many (the profile's terminal settings in turn, each with its subnets)."""
        answer = self.answer if subnets is None or len(subnets) <= 1 else _ask(
            self.text, self.file, list(self.overrides), self.source, subnets)
        if not answer.get("ok"):
            raise _refusal(answer)
        return answer


def parse_profile(text: str, *, file: str = "<profile>", overrides: list[str] | None = None,
                  source: Path | None = None) -> LinkProfile:
    """Check a profile's text, with ``--set`` overrides: a profile whose form
    is wrong is refused here; one whose values the emulator refuses, when
    its link is resolved."""
    answer = _ask(text, file, list(overrides or ()), source, None)
    if answer.get("stage") == "form" or "profile" not in answer:
        raise _refusal(answer)
    p = answer["profile"]
    return LinkProfile(name=p["name"], description=p["description"], forward=Direction("forward", p["forward"]),
                       ret=Direction("return", p["return"]), align_minute=bool(p["align_minute"]), source=source,
                       overrides=tuple(overrides or ()), terminals=tuple(p["terminals"]), text=text, file=file,
                       answer=answer)


def _ask(text: str, file: str, overrides: list[str], source: Path | None,
         subnets: list[list[str]] | None) -> dict[str, Any]:
    """``satbench-link --check --profile -``'s answer for a profile's text."""
    args = ["--profile", "-", "--profile-name", file]
    if source is not None:
        args += ["--base", str(source.parent)]
    if overrides:
        args += ["--sets", json.dumps(overrides)]  # JSON: an override may hold what no argument can (NUL)
    if subnets is not None:
        args += ["--subnets", json.dumps(subnets)]
    return ask_emulator(args, text, file=file)


def ask_emulator(args: list[str], text: str, *, file: str | None = None, field: str | None = None) -> dict[str, Any]:
    """``satbench-link --check ARGS`` with ``text`` on its standard input: its one-line JSON answer
    (``ok`` and what it says); a missing binary or no answer is raised, naming ``file`` or ``field``."""
    binary = prereq.link_binary()
    if not binary.is_file():
        raise PrerequisiteError([f"no emulator binary at {binary}: run 'cargo build --release' (scripts/setup does)"])
    p = subprocess.run([str(binary), "--check", *args], input=text, capture_output=True, text=True, timeout=60)
    try:
        answer = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise ProfileError(f"the emulator's check failed ({p.returncode}): {p.stderr.strip()[-300:]}",
                           file=file, field=field) from None
    if not isinstance(answer, dict) or "ok" not in answer:
        raise ProfileError(f"the emulator's check gave no answer: {p.stdout[-300:]!r}", file=file, field=field)
    return answer


def _refusal(answer: dict[str, Any]) -> ProfileError:
    return ProfileError(str(answer.get("message", "")), file=answer.get("file"), line=answer.get("line"),
                        field=answer.get("field"))


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
