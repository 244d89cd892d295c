"""Every experiment file the project ships plans, and its trial count is the
one the manual's table of presets gives. No root needed (each link is
resolved by the emulator's --check)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from satbench import load_experiment

from ..helpers import REPO

PRESETS = sorted((REPO / "experiments").rglob("*.toml"))


def _readme_counts() -> dict[str, int]:
    """The manual's table of presets (docs/manual.md): file name to trial count."""
    text = (REPO / "docs" / "manual.md").read_text()
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^\| `([\w./-]+\.toml)` \| (\d+) \|", text, re.M)}


@pytest.mark.parametrize("path", PRESETS, ids=[str(p.relative_to(REPO / "experiments")) for p in PRESETS])
def test_every_preset_plans(path: Path) -> None:
    exp = load_experiment(path)
    assert exp.trials, path
    counts = _readme_counts()
    name = str(path.relative_to(REPO / "experiments"))
    assert name in counts, f"{name} is not in the manual's table of presets"
    assert len(exp.trials) == counts[name], (name, len(exp.trials), counts[name])


def test_the_readme_lists_no_preset_that_is_not_there() -> None:
    shipped = {str(p.relative_to(REPO / "experiments")) for p in PRESETS}
    assert set(_readme_counts()) <= shipped, set(_readme_counts()) - shipped
