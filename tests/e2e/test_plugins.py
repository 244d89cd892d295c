"""A workload and a path element added from outside the package: each is
defined here and registered here, and runs through a fake-lab trial and a
real one (the loader over the LAN) without a line changed elsewhere: the
experiment file takes the element's factor, the trial is the workload's, the
store keeps the workload's own table, the report shows its section."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from satbench import path, workloads
from satbench.experiment import runner, spec
from satbench.experiment.trialspec import TrialSpec
from satbench.model import ClientOutcome
from satbench.path import PathElement
from satbench.results.read import Results
from satbench.results.report import write_report
from satbench.workloads import Problem, Table, Workload

from ..harness import fakes

if TYPE_CHECKING:
    from satbench.link.spec import LinkSpec
    from satbench.results.read import Results as ResultsT
    from satbench.results.report import Figures
    from satbench.results.store import TrialRecord
    from satbench.testbed.testbed import Testbed

NOTES = Table("toy_notes", ("client", "rounds"), """
CREATE TABLE IF NOT EXISTS toy_notes (
    trial_id INTEGER NOT NULL REFERENCES trials(id) ON DELETE CASCADE,
    client INTEGER NOT NULL, rounds REAL
);
""")


class Rounds(Workload):
    """The blank page, judged in round trips of the path: one row per client."""

    name = "toy-rounds"
    tables = (NOTES,)

    @classmethod
    def claims(cls, trial: TrialSpec) -> bool:
        return trial.page == "blank"

    @classmethod
    def problem(cls, trial: TrialSpec) -> Problem | None:
        return None if trial.clients <= 2 else ("clients", "the toy counts rounds for two clients at most")

    @classmethod
    def judge(cls, rec: TrialRecord, trial: TrialSpec, links: Mapping[str, LinkSpec], outcome: ClientOutcome
              ) -> None:
        rtt = links["link"].base_rtt_ms
        rows = [(c.client, c.plt_ms / rtt) for c in rec.clients if c.plt_ms is not None]
        rec.rows["toy_notes"] = rows
        rec.metrics["toy_rounds"] = max(r for _, r in rows) if rows else None

    @classmethod
    def report(cls, r: ResultsT, experiment: str, valid: Any, varied: list[str], figs: Figures) -> str:
        notes = r.table("toy_notes", experiment)
        return f"<h3>Toy rounds</h3><p>{len(notes)} notes</p>" if len(notes) else ""


class Marker(PathElement):
    """Leaves a file with its value in the trial's artefacts while the trial runs."""

    factor = "toy_marker"
    default = "none"
    meaning = "a toy element that marks the trial"

    @classmethod
    def check(cls, value: Any) -> str | None:
        return None if isinstance(value, str) and value.isalpha() else f"must be a word, got {value!r}"

    @classmethod
    def conflict(cls, value: Any, trial: TrialSpec) -> str | None:
        return "the marker needs HTTP/2" if trial.protocol is not None and trial.protocol.value != "h2" else None

    @contextmanager
    def start(self, tb: Testbed, artefacts: Path) -> Iterator[None]:
        artefacts.mkdir(parents=True, exist_ok=True)
        (artefacts / "marker.txt").write_text(f"{self.value} {tb.client.name}\n")
        self.ran = True
        yield

    def summary(self) -> dict[str, Any]:
        return {"value": self.value}

    def metrics(self) -> dict[str, float | None]:
        return {"toy_marker_ran": 1.0 if getattr(self, "ran", False) else 0.0}


@pytest.fixture
def plugins() -> Iterator[None]:
    workloads.register("toy-rounds", f"{__name__}:Rounds")
    path.register("toy_marker", f"{__name__}:Marker")
    try:
        yield
    finally:
        workloads.unregister("toy-rounds")
        path.unregister("toy_marker")


def _file(tmp_path: Path, protocol: str = "h2") -> Path:
    f = tmp_path / "toy.toml"
    f.write_text('[experiment]\nname = "toy"\nseed = 1\nrepetitions = 2\n[factors]\nlink = "lan"\n'
                 f'protocol = "{protocol}"\npage = "blank"\nclient = "loader"\ntoy_marker = "hello"\n')
    return f


def _check(db: Path, art: Path, out: Path) -> None:
    con = sqlite3.connect(db)
    rows = con.execute("SELECT t.status, t.factors, t.env, n.rounds, m.value FROM trials t "
                       "JOIN toy_notes n ON n.trial_id = t.id "
                       "JOIN metrics m ON m.trial_id = t.id AND m.name = 'toy_marker_ran'").fetchall()
    con.close()
    assert len(rows) == 2, rows
    for status, factors, env, rounds, ran in rows:
        assert status == "valid" and json.loads(factors)["toy_marker"] == "hello"
        assert json.loads(env)["path"]["toy_marker"] == {"value": "hello"}
        assert rounds >= 1 and ran == 1.0  # the page is at least one round trip, and the element ran
    marks = sorted(art.rglob("marker.txt"))
    assert len(marks) == 2 and all(m.read_text().startswith("hello ") for m in marks), marks
    assert "<h3>Toy rounds</h3><p>2 notes</p>" in write_report(db, out).read_text()


def test_a_plugin_workload_and_element_in_a_fake_lab(plugins: None, tmp_path: Path) -> None:
    e = spec.load(_file(tmp_path))
    assert all(t.spec.path == {"toy_marker": "hello"} for t in e.trials)
    db = tmp_path / "r.sqlite"
    s = runner.run(e, db, lab=fakes.lab(), pages_root=tmp_path / "pages", art_root=tmp_path / "art")
    assert (s.ran, s.valid) == (2, 2)
    _check(db, tmp_path / "art", tmp_path / "report")
    # Their checks are the experiment's: a value refused alone, and with the trial, at the file's line.
    bad = tmp_path / "bad.toml"
    bad.write_text(_file(tmp_path).read_text().replace('"hello"', '"hello world"'))
    with pytest.raises(spec.ExperimentError, match="must be a word") as info:
        spec.load(bad)
    assert info.value.line == 10
    with pytest.raises(spec.ExperimentError, match="the marker needs HTTP/2"):
        spec.load(_file(tmp_path, "h1"))
    bad.write_text(_file(tmp_path).read_text() + "clients = 3\n")
    with pytest.raises(spec.ExperimentError, match="two clients at most"):
        spec.load(bad)
    # The registries keep satbench's own, and say what cannot be done.
    with pytest.raises(ValueError, match="registered already"):
        workloads.register("page", f"{__name__}:Rounds")
    with pytest.raises(ValueError, match="no workload 'typo'"):
        workloads.register("other", f"{__name__}:Rounds", before="typo")
    with pytest.raises(ValueError, match="cannot be removed"):
        workloads.unregister("page")
    with pytest.raises(ValueError, match="exists already"):
        path.register("pep", f"{__name__}:Marker")
    with pytest.raises(ValueError, match="not a PathElement"):
        path.register("toy_other", f"{__name__}:Marker")  # its factor is toy_marker
    assert "toy_other" not in path.ELEMENTS
    # Workers parse the study again without the plug-ins: sending trials there is refused.
    from satbench.errors import InputError
    from satbench.experiment import distributed

    with pytest.raises(InputError, match="do not reach workers"):
        distributed.dask_executor(parallel=2)


def test_a_plugin_workload_and_element_in_a_real_trial(plugins: None, tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    s = runner.run(spec.load(_file(tmp_path)), db, pages_root=tmp_path / "pages", art_root=tmp_path / "art")
    assert (s.ran, s.valid) == (2, 2)
    _check(db, tmp_path / "art", tmp_path / "report")
    with Results(db) as r:
        assert r.trials("toy")["toy_rounds"].min() >= 1
    # Unregistered, the element's factor is unknown again, and the page a plain page load.
    path.unregister("toy_marker")
    workloads.unregister("toy-rounds")
    with pytest.raises(spec.ExperimentError, match="unknown factor"):
        spec.load(_file(tmp_path))
    assert workloads.workload_of(TrialSpec.of({"link": "lan", "protocol": "h2", "page": "blank"})).name == "page"
