"""A terrestrial link between the gateway and the servers (the operator's
backbone and the Internet behind the gateway), emulated like the satellite
link from a profile, so that delay or loss can sit on the terrestrial part of
the path only. The servers then sit behind an edge router (``edge``,
198.18.5.2) at the far end of the link.

Placed by the factor ``terrestrial = "PROFILE"`` (a profile name or file;
``"link.KEY"``-style overrides are the profile's own). Its counters (what the
terrestrial emulator offered, delivered and dropped each way) go into the
trial's ``env.path.terrestrial`` and metrics ``terrestrial_dropped_fwd`` and
``terrestrial_dropped_ret`` (packets)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..link import profile
from ..link.profile import LinkProfile
from ..model import DirectionCounters
from . import PathElement

if TYPE_CHECKING:
    from ..testbed.testbed import Testbed, TestbedSpec


class TerrestrialLink(PathElement):
    factor = "terrestrial"
    max_terminals = 1
    noun = "a terrestrial link"
    ipv6 = True
    default = "none"
    meaning = "terrestrial link profile between the gateway and the servers, or none"

    @classmethod
    def check(cls, value: Any) -> str | None:
        if not isinstance(value, str) or not value:
            return f"must be a link profile name or none, got {value!r}"
        return None

    @classmethod
    def profiles(cls, value: Any) -> dict[str, LinkProfile]:
        return {"terrestrial": profile.load(str(value))}

    def configure(self, spec: "TestbedSpec") -> None:
        spec.terrestrial = self.links["terrestrial"]

    @contextmanager
    def start(self, tb: "Testbed", artefacts: Path) -> Iterator[None]:
        self.tb = tb  # its counters come when the testbed is torn down
        yield

    def _stats(self) -> dict[str, Any] | None:
        tb = getattr(self, "tb", None)
        return getattr(tb, "terrestrial_stats", None)

    def summary(self) -> dict[str, Any]:
        s = self._stats()
        if not s:
            return {}
        return {"link": self.links["terrestrial"].name, "seed": s.get("seed"),
                **{d: {k: s[d][k] for k in ("offered", "delivered", "dropped")} for d in ("forward", "return")}}

    def metrics(self) -> dict[str, float | None]:
        s = self._stats()
        if not s:
            return {}
        return {f"terrestrial_dropped_{short}": DirectionCounters.parse(s[d]).dropped_packets
                for d, short in (("forward", "fwd"), ("return", "ret"))}
