"""satbench: web performance over emulated satellite and other long, lossy links.

Library first; the ``satbench`` command is a thin layer over this API.
"""

from .errors import InputError, PrerequisiteError, ProfileError, SatbenchError, TestbedError
from .profiles import LinkProfile, load as load_profile
from .testbed import Host, Testbed, TestbedSpec, cleanup

__all__ = [
    "Host",
    "InputError",
    "LinkProfile",
    "PrerequisiteError",
    "ProfileError",
    "SatbenchError",
    "Testbed",
    "TestbedSpec",
    "cleanup",
    "load_profile",
]
__version__ = "0.1.0"
