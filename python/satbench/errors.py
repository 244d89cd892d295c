"""Exceptions of satbench.

    SatbenchError                 base; str() is the one line shown to the user
    +-- InputError                bad user input (exit code 2)
    |   +-- ProfileError          a link profile file or override is wrong
    |       +-- ExperimentError   an experiment file is wrong (satbench.experiment.spec)
    +-- PrerequisiteError         the machine lacks something (exit code 2)
    +-- TestbedError              building or running the testbed failed (exit code 1)
"""

from __future__ import annotations


class SatbenchError(Exception):
    exit_code = 1


class InputError(SatbenchError):
    exit_code = 2


class ProfileError(InputError):
    """A profile problem, located by file, line and field when known."""

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None, field: str | None = None):
        self.file, self.line, self.field, self.message = file, line, field, message
        where = ""
        if file:
            where = f"{file}:{line}: " if line else f"{file}: "
        if field:
            where += f"{field}: "
        super().__init__(where + message)


class PrerequisiteError(SatbenchError):
    exit_code = 2

    def __init__(self, missing: list[str]):
        self.missing = missing
        super().__init__("\n".join(missing))


class TestbedError(SatbenchError):
    __test__ = False  # not a pytest test class
