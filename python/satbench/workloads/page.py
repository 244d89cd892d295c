"""A page load: the HTML and every object it names (the default workload)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import Workload

if TYPE_CHECKING:
    from ..experiment.trialspec import TrialSpec


class PageLoad(Workload):
    name = "page"
    meaning = "a page and its objects, loaded by a browser, the loader or curl"

    @classmethod
    def claims(cls, trial: TrialSpec) -> bool:
        return True
