"""satbench: web performance over emulated satellite and other long, lossy links.

Library first; the ``satbench`` command is a thin layer over this API:

    exp = satbench.load_experiment("experiments/demo.toml")
    satbench.run_experiment(exp, "results/demo.sqlite")
    df = satbench.open_results("results/demo.sqlite").trials("demo")
    satbench.write_report("results/demo.sqlite", "report/")

    with satbench.Testbed(satbench.TestbedSpec(link=satbench.load_profile("geo"))) as tb:
        tb.client.run(["ping", "-c", "3", "server.test"])

The exceptions are drawn in :mod:`satbench.errors`.
"""

import importlib
from typing import TYPE_CHECKING, Any

from .errors import InputError, PrerequisiteError, ProfileError, SatbenchError, TestbedError
from .experiment.spec import Experiment, ExperimentError
from .experiment.spec import load as load_experiment
from .link.profile import LinkProfile
from .link.profile import load as load_profile
from .link.spec import LinkSpec
from .testbed import Host, Testbed, TestbedSpec, cleanup
from .version import __version__

if TYPE_CHECKING:
    from .experiment.runner import run as run_experiment
    from .results.read import Results, open_results
    from .results.report import write_report

#: Names whose modules pull in pandas or matplotlib: imported on first use,
#: so that ``import satbench`` (and the command line) stays quick.
_LAZY = {"run_experiment": ("experiment.runner", "run"), "Results": ("results.read", "Results"),
         "open_results": ("results.read", "open_results"), "write_report": ("results.report", "write_report")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'satbench' has no attribute {name!r}")

__all__ = [
    "__version__",
    "Experiment",
    "ExperimentError",
    "Host",
    "InputError",
    "LinkProfile",
    "LinkSpec",
    "PrerequisiteError",
    "ProfileError",
    "Results",
    "SatbenchError",
    "Testbed",
    "TestbedError",
    "TestbedSpec",
    "cleanup",
    "load_experiment",
    "load_profile",
    "open_results",
    "run_experiment",
    "write_report",
]
