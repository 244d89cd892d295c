"""docs/reference.md's factor, option and command lists are what the code defines: a factor,
option or command added, renamed or re-described without running `python -m satbench.reference`
fails here."""

from __future__ import annotations

from satbench import reference
from satbench.endpoints import options
from satbench.experiment.factors import FACTORS


def test_the_reference_is_current() -> None:
    text = reference.PATH.read_text()
    assert reference.render(text) == text, "docs/reference.md is stale: python -m satbench.reference"


def test_the_reference_names_every_factor_option_and_command() -> None:
    from satbench.cli import COMMANDS

    text = reference.PATH.read_text()
    for name in FACTORS:
        assert f"| `{name}` |" in text
    for f in options.fields():
        assert f"`{options.flag_of(f)}`" in text
    for c in COMMANDS:
        assert f"**`satbench {c.name}`**" in text
