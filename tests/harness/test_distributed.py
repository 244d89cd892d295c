"""The Dask executor against the fake lab: an in-process cluster whose
workers run fake trials, without root. Every trial stored once with the
worker that ran it, the same results as a sequential run; a worker removed
mid-trial loses only that trial, stored once from a second attempt; a worker
reporting another commit is refused with one line; a resumed run submits only
what is missing."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from distributed import Client, LocalCluster

from satbench.endpoints.base import LoadRequest
from satbench.experiment import runner, spec
from satbench.experiment.distributed import DaskExecutor, WorkerLost, WorkerRefused
from satbench.experiment.worker import PLUGIN, SatbenchWorker
from satbench.model import ClientOutcome

from . import fakes

BODY = ('[factors]\nlink = "wire"\n"link.delay_ms" = 10\nprotocol = ["h1", "h2", "h3"]\npage = "uniform-100k"\n'
        'client = "loader"\n')


def write(tmp: Path, name: str, reps: int = 2) -> spec.Experiment:
    p = tmp / f"{name}.toml"
    p.write_text(f'[experiment]\nname = "{name}"\nseed = 3\nrepetitions = {reps}\n{BODY}')
    return spec.load(p)


#: When each slow load began (time.monotonic()), by its trial's key (its artefact folder's name).
STARTED: dict[str, float] = {}


class SlowLoader(fakes.FakeLoader):
    """The fake loader, taking a wall-clock second per load."""

    def load(self, req: LoadRequest) -> ClientOutcome:
        if req.artefacts is not None:
            STARTED[req.artefacts.name] = time.monotonic()
        time.sleep(1.0)
        return super().load(req)


def trial_key(task: str) -> str:
    """A trial's key from the name of the Dask task that runs it."""
    return task.rsplit("-a", 1)[0].rsplit("-", 1)[1]


def slow_lab() -> runner.Lab:
    lab = fakes.lab()
    lab.client = lambda kind: SlowLoader
    return lab


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    lab = slow_lab() if getattr(request, "param", "") == "slow" else fakes.lab()
    with LocalCluster(n_workers=2, processes=False, threads_per_worker=1, resources={"testbed": 1},
                      dashboard_address=None, protocol="tcp://", host="127.0.0.1") as c, Client(c) as client:
        client.register_plugin(SatbenchWorker(directory=tmp_path / "worker", cores=[None], lab=lab))
        yield c, client


def stored(db: Path) -> list[tuple[str, str, dict[str, Any], float]]:
    con = sqlite3.connect(db)
    try:
        out = []
        for key, status, env, tid in con.execute("SELECT key, status, env, id FROM trials ORDER BY id"):
            plt = con.execute("SELECT value FROM metrics WHERE trial_id = ? AND name = 'plt_ms'", (tid,)).fetchone()
            out.append((key, status, json.loads(env), plt[0]))
        return out
    finally:
        con.close()


def run_on(client: Client, exp: spec.Experiment, db: Path, events: list[Any]) -> runner.RunSummary:
    return runner.run(exp, db, lab=fakes.lab(), progress=events.append,
                      executor=lambda r: DaskExecutor(r, client=client, progress=events.append))


def test_two_workers_store_every_trial_once_with_its_worker_as_a_sequential_run_would(tmp_path: Path,
                                                                                     cluster: Any) -> None:
    c, client = cluster
    exp = write(tmp_path, "two", reps=3)
    events: list[Any] = []
    s = run_on(client, exp, tmp_path / "d.sqlite", events)
    assert (s.ran, s.valid, s.interrupted) == (9, 9, False)
    rows = stored(tmp_path / "d.sqlite")
    assert sorted(k for k, *_ in rows) == sorted(t.key for t in exp.trials)
    names = {str(w.name) for w in c.workers.values()}
    assert {env["worker"]["name"] for _, _, env, _ in rows} <= names
    assert all(env["worker"]["attempt"] == 1 and env["worker"]["artefacts"] == "coordinator" for _, _, env, _ in rows)
    # The artefacts came back, unpacked beside the database.
    art = tmp_path / "artefacts" / "two"
    assert all((art / k / "client.json").exists() for k, *_ in rows)
    assert not list((tmp_path / "worker" / "artefacts" / "two").glob("*/*"))  # fetched, so removed there
    # The same file run sequentially: the same trials and the same (fake, deterministic) results.
    seq = runner.run(exp, tmp_path / "s.sqlite", lab=fakes.lab())
    assert seq.ran == 9
    assert {k: plt for k, _, _, plt in rows} == {k: plt for k, _, _, plt in stored(tmp_path / "s.sqlite")}
    # Resumed: nothing is missing, nothing is submitted.
    again = run_on(client, exp, tmp_path / "d.sqlite", [])
    assert (again.already, again.ran) == (9, 0)


@pytest.mark.parametrize("cluster", ["slow"], indirect=True)
def test_a_worker_lost_mid_trial_loses_only_that_trial_stored_once_from_another_attempt(tmp_path: Path,
                                                                                        cluster: Any) -> None:
    c, client = cluster
    exp = write(tmp_path, "lose", reps=2)
    events: list[Any] = []
    victim: dict[str, str] = {}

    def kill_one() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            busy = {w: ks for w, ks in client.processing().items() if ks}
            if len(busy) == 2 and stored_count(tmp_path / "d.sqlite") >= 1:
                # Mid-trial: a worker whose load began less than 0.3 s ago (each takes a second), removed
                # 0.3 s after it began, so that the trial is surely still running (a busy machine can
                # otherwise let the chosen trial end first, and nothing is lost).
                began = {w: STARTED.get(trial_key(str(ks[0]))) for w, ks in busy.items()}
                fresh = [(b, w) for w, b in began.items() if b is not None and time.monotonic() - b < 0.3]
                if fresh:
                    b, addr = max(fresh)
                    time.sleep(max(0.0, b + 0.3 - time.monotonic()))
                    victim.update(address=addr, task=str(busy[addr][0]))
                    client.run_on_scheduler(remove_worker, addr)
                    return
            time.sleep(0.02)

    t = threading.Thread(target=kill_one)
    t.start()
    s = run_on(client, exp, tmp_path / "d.sqlite", events)
    t.join()
    assert victim, "no worker was removed"
    rows = stored(tmp_path / "d.sqlite")
    assert sorted(k for k, *_ in rows) == sorted(t.key for t in exp.trials)  # each stored once
    assert s.ran == 6 and s.valid == 6
    lost_key = trial_key(victim["task"])
    (env,) = [env for k, _, env, _ in rows if k == lost_key]
    assert env["worker"]["attempt"] == 2 and env["worker"]["address"] != victim["address"]
    lost = [e for e in events if isinstance(e, WorkerLost)]
    assert len(lost) == 1 and lost[0].trials == [lost_key]
    # No trial stored from the removed worker after it was removed.
    assert all(env["worker"]["attempt"] == 1 for k, _, env, _ in rows if k != lost_key)


def stored_count(db: Path) -> int:
    try:
        con = sqlite3.connect(db)
        try:
            return int(con.execute("SELECT COUNT(*) FROM trials").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


async def remove_worker(address: str, dask_scheduler: Any) -> None:
    """As if the worker had died: not an expected departure."""
    await dask_scheduler.remove_worker(address, stimulus_id="test-lost", close=True)


def test_a_worker_with_another_commit_is_refused_with_one_line(tmp_path: Path, cluster: Any) -> None:
    c, client = cluster
    bad = sorted(c.workers.values(), key=lambda w: str(w.name))[0]
    bad.plugins[PLUGIN].reports = {"commit": "0" * 40}
    exp = write(tmp_path, "refuse", reps=2)
    events: list[Any] = []
    s = run_on(client, exp, tmp_path / "d.sqlite", events)
    assert s.ran == 6
    refused = [e for e in events if isinstance(e, WorkerRefused)]
    assert len(refused) == 1 and refused[0].address == bad.address
    assert refused[0].reason.startswith("commit 000000000000000000 differs from the coordinator's ")
    assert "\n" not in refused[0].reason
    assert {env["worker"]["address"] for _, _, env, _ in stored(tmp_path / "d.sqlite")} == {
        w.address for w in c.workers.values() if w is not bad}


def test_warm_ups_run_on_the_workers_and_artefacts_may_stay_there(tmp_path: Path, cluster: Any) -> None:
    c, client = cluster
    p = tmp_path / "keep.toml"
    p.write_text(f'[experiment]\nname = "keep"\nseed = 3\nrepetitions = 2\nwarmup = 1\n{BODY}')
    exp = spec.load(p)
    fakes.FakeLoader.loads.clear()
    s = runner.run(exp, tmp_path / "d.sqlite", lab=fakes.lab(),
                   executor=lambda r: DaskExecutor(r, client=client, fetch_artefacts=False))
    assert s.ran == 6
    # Each worker's testbed slot ran the warm-up once before its first trial; the coordinator ran none.
    used = {env["worker"]["name"] for _, _, env, _ in stored(tmp_path / "d.sqlite")}
    assert len(fakes.FakeLoader.loads) == 6 + len(used)
    con = sqlite3.connect(tmp_path / "d.sqlite")
    arts = [a for (a,) in con.execute("SELECT artefacts FROM trials")]
    con.close()
    for a in arts:
        host, _, path = a.partition(":")
        assert host and Path(path, "client.json").exists() and Path(path).is_relative_to(tmp_path / "worker")
    assert not (tmp_path / "artefacts" / "keep").exists()
