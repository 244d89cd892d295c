"""The resolved link: what the emulator will run, decided once.

:func:`resolve` hands a profile's configuration to ``satbench-link --check``,
the one place where link values are range-checked and traces are parsed. The
emulator answers with the canonical configuration (every default filled in,
a trace's delivery opportunities inline) and the numbers it derives (mean
rate, delays, per-packet loss, queue limits). That answer is a
:class:`LinkSpec`: a trial runs exactly it (a profile edited in the middle of
a study changes nothing already resolved), stores it, and its hash is part of
the trial's key.

A value the emulator refuses comes back naming the profile key, file and line
(or the ``--set`` override) that gave it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from ..errors import ProfileError
from .profile import LinkProfile, ask_emulator


@dataclass(frozen=True, kw_only=True)
class DirectionNumbers:
    """What the emulator derives of one direction."""

    mean_bps: float | None  # None: unlimited
    #: The highest rate it ever delivers at, and the bytes it may deliver at
    #: once beyond it (a trace's busiest millisecond, a frame): no interval
    #: of t s carries more than peak_burst_bytes + peak_bps x t / 8 bytes.
    #: None: unlimited (or a link stored before the emulator derived it).
    peak_bps: float | None = None
    peak_burst_bytes: int = 0
    min_delay_ms: float
    max_delay_ms: float
    packet_loss_1500: float  # probability that a 1500-byte packet is lost
    queue_limit_bytes: int | None
    queue_limit_packets: int | None
    trace_opportunity_bytes: int
    #: The access scheme's derived numbers (DVB-S2 ACM/CCM forward, DVB-RCS2
    #: DAMA return: rates per terminal, request-to-grant time...), if any.
    access: dict[str, Any] | None = None

    @classmethod
    def parse(cls, d: dict[str, Any]) -> "DirectionNumbers":
        return cls(mean_bps=None if d.get("mean_bps") is None else float(d["mean_bps"]),
                   peak_bps=None if d.get("peak_bps") is None else float(d["peak_bps"]),
                   peak_burst_bytes=int(d.get("peak_burst_bytes") or 0),
                   min_delay_ms=float(d["min_delay_ms"]), max_delay_ms=float(d["max_delay_ms"]),
                   packet_loss_1500=float(d["packet_loss_1500"]),
                   queue_limit_bytes=d.get("queue_limit_bytes"), queue_limit_packets=d.get("queue_limit_packets"),
                   trace_opportunity_bytes=int(d.get("trace_opportunity_bytes", 1504)), access=d.get("access"))

    @property
    def mean_mbps(self) -> float | None:
        return None if self.mean_bps is None else self.mean_bps / 1e6


@dataclass(frozen=True, kw_only=True)
class LinkSpec:
    """A resolved link, immutable. Equal specs are the same link."""

    name: str
    label: str
    description: str
    config: dict[str, Any] = field(compare=False, hash=False)
    forward: DirectionNumbers = field(compare=False)
    ret: DirectionNumbers = field(compare=False)
    base_rtt_ms: float = field(compare=False)
    #: sha256 of the canonical configuration (16 hex digits): the link's identity.
    hash: str

    def emulator_config(self, seed: int) -> dict[str, Any]:
        return {"seed": seed, **self.config}

    @property
    def terminals(self) -> int:
        """How many terminals the link serves (one unless it lists several)."""
        return max(1, len(self.config.get("terminals") or []))

    def to_json(self) -> dict[str, Any]:
        """The stored form (the results database keeps one per link)."""
        def numbers(n: DirectionNumbers) -> dict[str, Any]:
            return {k: v for k, v in n.__dict__.items() if not (k == "access" and v is None)}

        return {"name": self.name, "label": self.label, "description": self.description, "hash": self.hash,
                "config": self.config, "derived": {"base_rtt_ms": self.base_rtt_ms,
                                                   "forward": numbers(self.forward), "return": numbers(self.ret)}}

    @classmethod
    def from_check(cls, answer: dict[str, Any], *, name: str, label: str, description: str) -> "LinkSpec":
        config = answer["config"]
        d = answer["derived"]
        return cls(name=name, label=label, description=description, config=config,
                   forward=DirectionNumbers.parse(d["forward"]), ret=DirectionNumbers.parse(d["return"]),
                   base_rtt_ms=float(d["base_rtt_ms"]), hash=config_hash(config))

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "LinkSpec":
        spec = cls.from_check(d, name=d["name"], label=d.get("label", d["name"]), description=d.get("description", ""))
        if spec.hash != d.get("hash", spec.hash):
            raise ValueError(f"stored link {d.get('hash')} does not match its configuration ({spec.hash})")
        return spec


def config_hash(config: dict[str, Any]) -> str:
    """The identity of a canonical configuration (seed excluded)."""
    body = {k: v for k, v in config.items() if k != "seed"}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def check(config: dict[str, Any]) -> dict[str, Any]:
    """``satbench-link --check`` on a configuration: its answer as JSON
    (``ok`` with ``config`` and ``derived``, or ``ok: false`` with ``field``
    and ``message``)."""
    try:
        blob = json.dumps(config, allow_nan=False)
    except ValueError:
        raise ProfileError("a value is not a finite number", field="config") from None
    return ask_emulator(["--config", "-"], blob, field="config")


def resolve(profile: LinkProfile, subnets: list[list[str]] | None = None) -> LinkSpec:
    """The link a profile describes, checked and resolved by the emulator;
    with ``subnets``, for as many terminals (the profile's terminal settings
    in turn, each given its subnets). A value the emulator refuses raises a
    :class:`ProfileError` naming the profile's file, line and key."""
    answer = profile.resolved(subnets)
    return LinkSpec.from_check(answer, name=profile.name, label=profile.label, description=profile.description)
