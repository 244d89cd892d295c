"""The testbed: namespaces, hosts, emulators and their cleanup (:mod:`.testbed`,
:mod:`.host`, :mod:`.cleanup`), the process toolkit (:mod:`.proc`), the shell
behind the link (:mod:`.shell`) and measurements across it (:mod:`.measure`)."""

from .cleanup import cleanup
from .host import Host
from .testbed import Testbed, TestbedSpec

__all__ = ["Host", "Testbed", "TestbedSpec", "cleanup"]
