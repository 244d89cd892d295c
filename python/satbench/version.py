"""The version of satbench (also in pyproject.toml)."""

__version__ = "0.3.0"
