"""The emulated link: profiles as users write them (:mod:`.profile`), the
link resolved by the emulator (:mod:`.spec`), and the emulator process
(:mod:`.emulator`)."""

from .profile import LinkProfile, available, load
from .spec import LinkSpec, resolve

__all__ = ["LinkProfile", "LinkSpec", "available", "load", "resolve"]
