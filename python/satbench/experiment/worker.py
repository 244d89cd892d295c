"""The workers' side of a Dask cluster (``satbench worker``): a Dask worker
that offers ``testbed`` resources, one per testbed it holds at once, and
runs the trials a coordinator sends (:mod:`.distributed`).

Each testbed slot has a thread of its own, which keeps the slot's
:class:`Runner` (and so its browser driver) from trial to trial, and is
pinned to the slot's cores: everything a trial starts (the emulator, the
server, the client) inherits them. Trials never run on the worker's event
loop, and a trial's processes release the GIL while it waits for them. The
Dask task (:func:`run_attempt`) only hands its job to a free slot and waits.

On the worker, the experiment is parsed again from the file's text (its link
profiles resolved by this machine's emulator) and the trial found by its
key; a trial the worker does not find is its error, not a silent mismatch.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import functools
import os
import platform
import queue
import shutil
import signal
import sys
import threading
import tomllib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from distributed import Worker, WorkerPlugin, get_worker

from .. import prereq
from ..endpoints import ca
from ..errors import PrerequisiteError, TestbedError
from ..testbed.cleanup import cleanup
from .cluster import (
    BINARIES,
    RESOURCE,
    Done,
    Job,
    check_scheduler_address,
    check_tls_config,
    identity,
    listen_host,
    pack,
    split_cores,
)
from .design import Trial
from .runner import Lab, Runner
from .spec import Experiment, parse

PLUGIN = "satbench"


def default_dir() -> Path:
    """Where a worker keeps its pages and, while a trial runs, its artefacts."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "satbench" / "worker"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on a file, across the processes of this machine (pages made once)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@functools.lru_cache(maxsize=8)
def _parsed(text: str, file: str) -> Experiment:
    return parse(tomllib.loads(text), text, file)


class _Slot:
    """One testbed at a time: a thread with its cores and its runner."""

    def __init__(self, index: int, cores: list[int] | None, directory: Path, lab: Lab):
        self.index, self.cores, self.directory, self.lab = index, cores, directory, lab
        self.inbox: queue.Queue[tuple[Job, dict[str, str], concurrent.futures.Future[Done]] | None] = queue.Queue()
        self.runner: Runner | None = None
        self.runner_for: tuple[str, str, int] | None = None
        self.thread = threading.Thread(target=self._loop, name=f"satbench-testbed-{index}", daemon=True)
        self.thread.start()

    def call(self, job: Job, who: dict[str, str]) -> Done:
        fut: concurrent.futures.Future[Done] = concurrent.futures.Future()
        self.inbox.put((job, who, fut))
        return fut.result()

    def stop(self) -> None:
        self.inbox.put(None)

    def _loop(self) -> None:
        if self.cores:
            os.sched_setaffinity(0, self.cores)  # this thread; every process a trial starts inherits it
        try:
            while (item := self.inbox.get()) is not None:
                job, who, fut = item
                if not fut.set_running_or_notify_cancel():
                    continue
                try:
                    fut.set_result(self._run(job, who))
                except BaseException as e:  # noqa: BLE001 - handed to the waiting task
                    fut.set_exception(e)
        finally:
            self._close_runner()

    def _close_runner(self) -> None:
        if self.runner is not None:
            self.runner.close()
        self.runner, self.runner_for = None, None

    def _experiment(self, job: Job) -> Experiment:
        return job.experiment if isinstance(job.experiment, Experiment) else _parsed(job.experiment, job.file)

    def _runner_for(self, exp: Experiment, job: Job, trials: dict[str, Trial]) -> Runner:
        which = (exp.name, exp.text or ",".join(sorted(trials)), job.order_seed)
        if self.runner is not None and self.runner_for == which:
            return self.runner
        self._close_runner()
        with _locked(self.directory / ".pages.lock"):
            self.runner = Runner(exp, job.order_seed, self.directory / "pages", self.directory / "artefacts" / exp.name,
                                 self.lab)
        self.runner_for = which
        warm = self.directory / "artefacts" / exp.name / f"_warmup-{os.getpid()}-{self.index}"
        for key in job.warmup:
            if key in trials:
                self.runner.run_trial(trials[key], 0, warm)
        shutil.rmtree(warm, ignore_errors=True)
        return self.runner

    def _run(self, job: Job, who: dict[str, str]) -> Done:
        a = job.attempt
        exp = self._experiment(job)
        trials = {t.key: t for t in exp.trials}
        if a.key not in trials:
            raise TestbedError(f"trial {a.key} is not in {job.file} as this worker reads it "
                               "(a link profile, or satbench, differs here)")
        runner = self._runner_for(exp, job, trials)
        self.lab.cleanup()  # what a killed sibling's testbed left here; live testbeds are never touched
        root = self.directory / "artefacts" / exp.name / a.task  # one folder per attempt
        rec = runner.run_trial(trials[a.key], job.seq, root)
        art = root / a.key
        rec.env["worker"] = {"name": who["name"], "address": who["address"], "host": platform.node(),
                             "pid": os.getpid(), "attempt": a.n, "slot": self.index, "cores": self.cores,
                             "artefacts": "coordinator" if job.fetch_artefacts else "worker"}
        data = None
        if job.fetch_artefacts:
            data = pack(art)
            shutil.rmtree(root, ignore_errors=True)
            rec.artefacts = None
        else:
            rec.artefacts = f"{platform.node()}:{art}"
        return Done(a, who["incarnation"], rec, data)


class SatbenchWorker(WorkerPlugin):
    """The worker's testbed slots (each with its cores), its folder and what it
    reports of itself. ``lab`` is where trials run (tests give a fake one)."""

    name = PLUGIN

    def __init__(self, *, directory: Path, cores: list[list[int]] | list[None],
                 reports: Mapping[str, Any] | None = None, lab: Lab | None = None):
        self.directory, self.cores, self.reports = directory, cores, dict(reports or {})
        self.lab = lab or Lab()
        self.slots: list[_Slot] = []  # made by setup, on the worker (the plugin travels pickled until then)

    def setup(self, worker: Worker) -> None:
        self.slots = [_Slot(i, c, self.directory, self.lab) for i, c in enumerate(self.cores)]
        self.free: queue.Queue[_Slot] = queue.Queue()
        for s in self.slots:
            self.free.put(s)

    def teardown(self, worker: Worker) -> None:
        for s in self.slots:
            s.stop()

    def identity(self) -> dict[str, Any]:
        """satbench's version, commit and binaries here (or what this worker was told to report instead)."""
        return {**identity(), **self.reports}

    def run(self, job: Job, who: dict[str, str]) -> Done:
        slot = self.free.get()
        try:
            return slot.call(job, who)
        finally:
            self.free.put(slot)


_DEFAULT_LOCK = threading.Lock()


def plugin_of(worker: Worker) -> SatbenchWorker:
    """The worker's satbench plugin; a plain ``dask worker --resources testbed=N`` gets one here."""
    p = worker.plugins.get(PLUGIN)
    if isinstance(p, SatbenchWorker):
        return p
    with _DEFAULT_LOCK:
        p = worker.plugins.get(PLUGIN)
        if not isinstance(p, SatbenchWorker):
            n = max(1, int(worker.state.total_resources.get(RESOURCE, 1)))
            p = SatbenchWorker(directory=default_dir(), cores=[None] * n)
            p.setup(worker)
            worker.plugins[PLUGIN] = p
        return p


def run_attempt(job: Job) -> Done:
    """The Dask task: run one attempt in a free testbed slot of this worker (in the slot's thread)."""
    w = get_worker()
    return plugin_of(w).run(job, {"name": str(w.name), "address": w.address, "incarnation": str(w.id)})


async def report_identity(dask_worker: Worker) -> dict[str, Any]:
    """What the coordinator compares (hashing binaries off the event loop), and
    the worker's incarnation (its unique id: a worker restarted on the same
    address is another)."""
    plugin = plugin_of(dask_worker)
    me = await asyncio.get_running_loop().run_in_executor(None, plugin.identity)
    return {**me, "incarnation": str(dask_worker.id)}


def tell_worker(line: str, dask_worker: Worker) -> None:
    """A line from the coordinator, on the worker's stderr."""
    print(f"satbench worker {dask_worker.name}: {line}", file=sys.stderr, flush=True)


def serve_worker(scheduler: str, *, testbeds: int = 1, name: str | None = None, cores: list[int] | None = None,
                 directory: Path | None = None, reports: Mapping[str, Any] | None = None,
                 on_ready: Callable[[str], None] | None = None) -> None:
    """Run a satbench worker until SIGINT or SIGTERM (after which the trials
    running finish, and their results are discarded by the coordinator, which
    has run them elsewhere). ``testbeds`` at once, each pinned to an equal share
    of ``cores`` when there are several or ``cores`` are given. ``reports``
    replaces parts of what the worker reports of itself (tests)."""
    check_scheduler_address(scheduler)
    check_tls_config(scheduler, "worker")
    if not 1 <= testbeds <= 256:
        raise PrerequisiteError([f"--testbeds: from 1 to 256, got {testbeds}"])
    prereq.require_testbed()
    # A worker runs whatever trials come: every optional part a trial may need, before it joins.
    prereq.provide(p for p in prereq.PARTS if p != "tshark")
    missing = [f"no {n} at {where()}: run 'cargo build --release' (scripts/setup does)"
               for n, where in BINARIES.items() if not where().is_file()]
    if missing:
        raise PrerequisiteError(missing)
    directory = directory or default_dir()
    directory.mkdir(parents=True, exist_ok=True)
    slots: list[list[int]] | list[None] = (split_cores(testbeds, cores) if cores is not None or testbeds > 1
                                           else [None])
    if cores is not None:
        os.sched_setaffinity(0, cores)
    cleanup()
    with _locked(directory / ".pages.lock"):
        ca.ensure()
    plugin = SatbenchWorker(directory=directory, cores=slots, reports=reports)
    asyncio.run(_serve(scheduler, testbeds, name or f"{platform.node()}-{os.getpid()}", plugin, directory,
                       on_ready or (lambda line: None)))


async def _serve(scheduler: str, testbeds: int, name: str, plugin: SatbenchWorker, directory: Path,
                 on_ready: Callable[[str], None]) -> None:
    # One address for Dask's comm (loopback, or the interface towards the scheduler, with TLS there),
    # and the HTTP server (health and metrics) on loopback: never every interface.
    w = Worker(scheduler, nthreads=testbeds, resources={RESOURCE: testbeds}, name=name, plugins=(plugin,),
               memory_limit=0, local_directory=str(directory / "dask"), host=listen_host(scheduler),
               protocol=scheduler.split("://", 1)[0], dashboard_address="127.0.0.1:0", dashboard=False)
    try:
        await w
    except (OSError, asyncio.TimeoutError, RuntimeError) as e:
        # (Dask wraps what stopped a start, a port in use or a bad certificate, in a RuntimeError.)
        cause = e.__cause__ if isinstance(e, RuntimeError) and e.__cause__ is not None else e
        await w.close(timeout=5)
        raise TestbedError(f"scheduler {scheduler}: cannot join: {type(cause).__name__}: {cause}") from None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(s, stop.set)
    on_ready(f"satbench worker {name} at {w.address}: {testbeds} testbed(s)"
             + "".join(f", slot {i + 1} on cores {','.join(map(str, c))}" for i, c in enumerate(plugin.cores) if c)
             + f", joined {scheduler}")
    stopping = asyncio.ensure_future(stop.wait())
    finished = asyncio.ensure_future(w.finished())  # type: ignore[no-untyped-call]
    await asyncio.wait([stopping, finished], return_when=asyncio.FIRST_COMPLETED)
    for s in (signal.SIGINT, signal.SIGTERM):
        loop.remove_signal_handler(s)
    if not finished.done():
        await w.close(timeout=30)
    stopping.cancel()


__all__ = ["SatbenchWorker", "default_dir", "plugin_of", "report_identity", "run_attempt", "serve_worker",
           "tell_worker"]
