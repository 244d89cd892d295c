"""An access link between the clients and the satellite terminal (the WiFi
behind a terminal, say): emulated like the satellite link, from a profile."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ProfileError
from ..link import profile
from ..link.profile import LinkProfile
from . import PathElement

if TYPE_CHECKING:
    from ..testbed.testbed import TestbedSpec


class AccessLink(PathElement):
    factor = "access"
    max_terminals = 1
    noun = "an access link"
    ipv6 = True
    default = "none"
    meaning = "access link profile between clients and terminal, or none"

    @classmethod
    def check(cls, value: Any) -> str | None:
        return None if isinstance(value, str) and value else f"must be a link profile name or none, got {value!r}"

    @classmethod
    def profiles(cls, value: Any) -> dict[str, LinkProfile]:
        try:
            return {"access": profile.load(str(value))}
        except ProfileError:
            raise

    def configure(self, spec: "TestbedSpec") -> None:
        spec.access = self.links["access"]
