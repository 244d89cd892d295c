"""One file each way: a download of ``bulk:SIZE`` and an upload of ``upload:SIZE``
(a POST of that many incompressible bytes to the server's sink)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..endpoints import client_class
from . import Problem, Workload

if TYPE_CHECKING:
    from ..endpoints.base import LoadRequest
    from ..experiment.trialspec import TrialSpec


class Bulk(Workload):
    name = "bulk"
    meaning = "one file of SIZE bytes downloaded (bulk:SIZE), with a curl-style breakdown"

    @classmethod
    def claims(cls, trial: TrialSpec) -> bool:
        return trial.page.startswith("bulk:")

    @classmethod
    def request(cls, trial: TrialSpec, req: LoadRequest, session: str, seed: int) -> LoadRequest:
        return replace(req, single=True)


class Upload(Workload):
    name = "upload"
    meaning = "SIZE incompressible bytes POSTed to the server's sink (upload:SIZE), over the return link"

    @classmethod
    def claims(cls, trial: TrialSpec) -> bool:
        return trial.upload_bytes is not None

    @classmethod
    def problem(cls, trial: TrialSpec) -> Problem | None:
        if not all(client_class(k).uploads for k in trial.kinds):
            return "page", "an upload runs in the loader: client = \"loader\" (or a population of loaders)"
        return None

    @classmethod
    def request(cls, trial: TrialSpec, req: LoadRequest, session: str, seed: int) -> LoadRequest:
        return replace(req, single=True, upload=trial.upload_bytes)
