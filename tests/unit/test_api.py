"""The public Python API, pinned: what ``satbench`` exports is a promise."""

from __future__ import annotations

import satbench

PUBLIC = {
    "__version__", "Experiment", "ExperimentError", "Host", "InputError", "LinkProfile", "LinkSpec",
    "PrerequisiteError", "ProfileError", "Results", "SatbenchError", "Testbed", "TestbedError", "TestbedSpec",
    "cleanup", "load_experiment", "load_profile", "open_results", "run_experiment", "write_report",
}


def test_all_is_pinned() -> None:
    assert set(satbench.__all__) == PUBLIC
    for name in satbench.__all__:
        assert getattr(satbench, name) is not None, name


def test_error_tree() -> None:
    assert issubclass(satbench.ExperimentError, satbench.ProfileError)
    assert issubclass(satbench.ProfileError, satbench.InputError)
    for e in (satbench.InputError, satbench.PrerequisiteError, satbench.TestbedError):
        assert issubclass(e, satbench.SatbenchError)
    assert satbench.InputError.exit_code == 2 and satbench.PrerequisiteError.exit_code == 2
    assert satbench.TestbedError.exit_code == 1
