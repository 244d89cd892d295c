"""Trials on a Dask cluster: the coordinator's side (:class:`DaskExecutor`,
an :class:`~satbench.experiment.runner.Executor`) and what it shares with
the workers' side (:mod:`.worker`).

The coordinator is ``satbench run FILE --scheduler ADDRESS`` (or
``--parallel N``: a scheduler and N ``satbench worker`` processes on this
machine, each testbed pinned to cores of its own). It keeps the results
database; the workers build testbeds and run trials. For each trial:

1. The coordinator picks an accepted worker with a free testbed slot and
   submits one Dask task, *an attempt*, restricted to that worker and
   requiring one ``testbed`` resource. A task restricted to one worker is
   never moved by Dask to another, so nothing is retried behind the
   coordinator's back.
2. The worker reconstructs the experiment from the file's text, finds the
   trial by key, runs :meth:`Runner.run_trial` in a thread of its own (never
   on the worker's event loop) and returns the record and its artefacts as a
   gzipped tar (or keeps them and returns where they are).
3. The coordinator takes a result only from the attempt it still wants (the
   one it submitted last for that trial, on the worker incarnation it
   submitted it to), stores it in one transaction, and unpacks the artefacts
   beside the database.

A worker joins only if its satbench version, commit and binaries
(``satbench-link``, ``satbench-server``, ``satbench-load``, ``satbench-pep``, ``satbench-tunnel``) are the
coordinator's; otherwise it is refused with one line saying which. A worker
that leaves (killed, crashed, cut off) loses only the attempts it was
running: each is submitted again elsewhere as a new attempt, up to
:data:`MAX_ATTEMPTS`, and a late result of a lost attempt is discarded.
Closing the executor (Ctrl-C in the run) cancels what is submitted and not
finished; what finished is stored already.

Scheduler addresses are ``tls://`` or loopback ``tcp://``: the workers run
as root and Dask moves pickled code (:func:`check_scheduler_address`). A
worker listens on one address, loopback or its interface towards the
scheduler (:func:`listen_host`), and its HTTP server on loopback. A local
cluster (``--parallel``) is on loopback with mutual TLS, with a CA made for
the run (:mod:`.cluster_tls`).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import InputError, TestbedError
from ..model import TrialStatus
from ..results.store import TrialRecord
from ..testbed.cleanup import cleanup
from ..testbed.proc import stop_process
from . import cluster_tls
from .cluster import (
    PLAIN_TCP_RISK,
    RESOURCE,
    Attempt,
    Done,
    Job,
    check_scheduler_address,
    check_tls_config,
    identity,
    identity_difference,
    listen_host,
    pack,
    parse_cores,
    split_cores,
    unpack,
)
from .design import Trial, trial_seed
from .runner import Runner, Waiting
from .spec import Experiment

#: How many attempts a trial gets before it is stored as failed (each lost with its worker).
MAX_ATTEMPTS = 3
#: How often the coordinator looks at the scheduler's workers (joins, losses).
POLL_S = 0.5


# -- attempts --------------------------------------------------------------------------------


@dataclass
class _Slots:
    incarnation: str
    size: int
    busy: set[Attempt] = field(default_factory=set)


class Book:
    """The coordinator's bookkeeping, without Dask: the accepted workers
    and their free testbed slots, the attempt it wants for each trial, and
    which results it takes (one per trial, only from a wanted attempt)."""

    def __init__(self, run: str, max_attempts: int = MAX_ATTEMPTS):
        self.run, self.max_attempts = run, max_attempts
        self.workers: dict[str, _Slots] = {}
        self._wanted: dict[str, Attempt] = {}
        self._tries: dict[str, int] = {}
        self._taken: set[str] = set()

    # workers
    def join(self, address: str, incarnation: str, slots: int) -> None:
        self.workers[address] = _Slots(incarnation, slots)

    def leave(self, address: str) -> list[Attempt]:
        """A worker is gone: the attempts it was running are lost (no longer wanted)."""
        gone = self.workers.pop(address, None)
        lost = sorted(gone.busy, key=lambda a: a.task) if gone else []
        for a in lost:
            if self._wanted.get(a.key) == a:
                del self._wanted[a.key]
        return lost

    def free_worker(self) -> str | None:
        """The accepted worker with the most free slots (None if all are full)."""
        free = [(w.size - len(w.busy), addr) for addr, w in self.workers.items() if len(w.busy) < w.size]
        return max(free)[1] if free else None

    @property
    def capacity(self) -> int:
        return sum(w.size for w in self.workers.values())

    # attempts
    def attempt(self, key: str, address: str) -> Attempt | None:
        """A new attempt at a trial on a worker with a free slot, now the one
        wanted; None once the trial had all its attempts (or is taken)."""
        if key in self._taken or self._tries.get(key, 0) >= self.max_attempts:
            return None
        w = self.workers[address]
        self._tries[key] = n = self._tries.get(key, 0) + 1
        a = Attempt(self.run, key, n, address, w.incarnation)
        self._wanted[key] = a
        w.busy.add(a)
        return a

    def tries(self, key: str) -> int:
        return self._tries.get(key, 0)

    def wants(self, a: Attempt) -> bool:
        return a.key not in self._taken and self._wanted.get(a.key) == a

    def _release(self, a: Attempt) -> None:
        w = self.workers.get(a.worker)
        if w is not None:
            w.busy.discard(a)

    def take(self, a: Attempt, incarnation: str | None = None) -> bool:
        """The attempt's result arrived: True if it is to be stored (the
        wanted attempt of a trial not taken yet, from the incarnation it was
        sent to); False if it is to be discarded. Frees its slot either way."""
        self._release(a)
        if not self.wants(a) or (incarnation is not None and incarnation != a.incarnation):
            return False
        self._taken.add(a.key)
        del self._wanted[a.key]
        return True

    def drop(self, a: Attempt) -> bool:
        """The attempt ended without a result (lost, or its task failed to
        run): frees its slot; True if it was the wanted one."""
        self._release(a)
        wanted = self.wants(a)
        if wanted:
            del self._wanted[a.key]
        return wanted

    def give_up(self, key: str) -> None:
        """The trial is settled without a result of an attempt (stored as failed here)."""
        self._taken.add(key)
        self._wanted.pop(key, None)

    def cancel_all(self) -> list[Attempt]:
        """Want nothing any more (Ctrl-C): every outstanding attempt, now unwanted."""
        out = sorted(self._wanted.values(), key=lambda a: a.task)
        self._wanted.clear()
        for w in self.workers.values():
            w.busy.clear()
        return out


# -- the coordinator ---------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerJoined:
    name: str
    address: str
    host: str
    testbeds: int


@dataclass(frozen=True)
class WorkerRefused:
    name: str
    address: str
    #: One line: which of version, commit or binaries differ (or why else).
    reason: str


@dataclass(frozen=True)
class WorkerLost:
    name: str
    address: str
    #: The trials it was running, each submitted again (or given up).
    trials: list[str]


ClusterEvent = WorkerJoined | WorkerRefused | WorkerLost | Waiting


class DaskExecutor:
    """Runs a sweep's trials on a Dask cluster (see the module's docs).

    Give ``scheduler`` (an address) or ``parallel`` (testbeds at once on
    this machine: a local scheduler and one ``satbench worker`` process per
    testbed, pinned to ``cores`` or to an equal share of this machine's).
    ``client`` is an already connected ``distributed.Client`` (tests)."""

    def __init__(self, runner: Runner, *, scheduler: str | None = None, parallel: int | None = None,
                 cores: list[list[int]] | None = None, fetch_artefacts: bool = True,
                 progress: Callable[[ClusterEvent], None] | None = None, client: Any = None,
                 worker_dir: Path | None = None, start_timeout_s: float = 90):
        from distributed import Client  # noqa: PLC0415 - Dask loads only for a cluster

        if (scheduler is None) == (parallel is None) and client is None:
            raise InputError("a cluster needs either a scheduler address or a number of parallel testbeds")
        self.runner, self.fetch, self.report = runner, fetch_artefacts, progress or (lambda e: None)
        self.run_id = secrets.token_hex(4)
        self.ours = identity()
        self.book = Book(self.run_id)
        self.names: dict[str, str] = {}
        self.refused: dict[str, str] = {}
        self._procs: list[subprocess.Popen[bytes]] = []
        self._logs: Path | None = None
        self._cluster: Any = None
        self._futures: dict[Any, Attempt] = {}
        self._waiting_said = ""
        self._own_client = client is None
        self.client: Any = client
        try:
            if scheduler is not None and client is None:
                check_scheduler_address(scheduler)
                check_tls_config(scheduler, "client")
                try:
                    self.client = Client(scheduler, timeout=start_timeout_s,  # type: ignore[no-untyped-call]
                                         set_as_default=False)
                except OSError as e:
                    raise TestbedError(f"scheduler {scheduler}: cannot connect: {e}") from None
            elif client is None:
                assert parallel is not None
                self._start_local(parallel, cores or split_cores(parallel), worker_dir, start_timeout_s)
            self._refresh()
        except BaseException:
            self.close()  # a local cluster half started (or a Ctrl-C now) leaves no worker behind
            raise

    # a local cluster
    def _start_local(self, n: int, cores: list[list[int]], worker_dir: Path | None, timeout_s: float) -> None:
        from distributed import Client, LocalCluster  # noqa: PLC0415 - Dask loads only for a cluster

        if len(cores) != n:
            raise InputError(f"--parallel {n}: {len(cores)} sets of cores given")
        # Loopback and mutual TLS, with a CA made for this run (its key never written): a local user
        # who reaches the ports cannot run code through them as root. The folder is mode 0700 and goes
        # with the run.
        self._logs = Path(tempfile.mkdtemp(prefix="satbench-parallel-"))
        tls = cluster_tls.make(self._logs / "tls", name="satbench --parallel")
        self._cluster = LocalCluster(n_workers=0, processes=False, protocol="tls://",  # type: ignore[no-untyped-call]
                                     host="127.0.0.1", scheduler_port=0, dashboard_address=None,
                                     security=tls.security())
        self.client = Client(self._cluster, set_as_default=False)  # type: ignore[no-untyped-call]
        addr = self._cluster.scheduler_address
        for i, cs in enumerate(cores):
            argv = [sys.executable, "-m", "satbench", "worker", "--scheduler", addr, "--name", f"local-{i + 1}",
                    "--cores", ",".join(map(str, cs))]
            if worker_dir is not None:
                argv += ["--dir", str(worker_dir)]
            with open(self._logs / f"worker-{i + 1}.log", "wb") as log:
                # A session of its own: a Ctrl-C at the terminal reaches the coordinator, which stops them.
                self._procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                                    start_new_session=True, env={**os.environ, **tls.env()}))
        deadline = time.monotonic() + timeout_s
        while len(self.client.scheduler_info(n_workers=-1)["workers"]) < n:
            for i, p in enumerate(self._procs):
                if p.poll() is not None:
                    raise TestbedError(f"local worker {i + 1} of {n} did not start: {self._log_tail(i)}")
            if time.monotonic() > deadline:
                raise TestbedError(f"{n} local workers did not all start within {timeout_s:g} s")
            time.sleep(0.1)

    def _log_tail(self, i: int) -> str:
        try:
            assert self._logs is not None
            lines = (self._logs / f"worker-{i + 1}.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            return "no log"
        return lines[-1] if lines else "no output"

    # workers joining and leaving
    def _refresh(self) -> list[tuple[Attempt, str]]:
        """Look at the scheduler's workers: check and accept (or refuse) the
        new ones, and note those gone. Returns the attempts lost with them."""
        from .worker import report_identity, tell_worker  # noqa: PLC0415 - imports Dask

        info = self.client.scheduler_info(n_workers=-1)["workers"]
        lost: list[tuple[Attempt, str]] = []
        for addr in list(self.book.workers):
            if addr not in info:
                gone = self.book.leave(addr)
                name = self.names.get(addr, addr)
                lost += [(a, name) for a in gone]
                self.report(WorkerLost(name, addr, [a.key for a in gone]))
        for addr in list(self.refused):
            if addr not in info:
                del self.refused[addr]
        for addr, w in info.items():
            if addr in self.book.workers or addr in self.refused:
                continue
            name = str(w.get("name", addr))
            self.names[addr] = name
            slots = int(w.get("resources", {}).get(RESOURCE, 0))
            reason, incarnation = None, ""
            if slots < 1:
                reason = f"it offers no '{RESOURCE}' resource (start workers with 'satbench worker')"
            else:
                try:
                    theirs = self.client.run(report_identity, workers=[addr])[addr]
                except Exception as e:  # noqa: BLE001 - a worker leaving now, or one without satbench
                    reason = f"its identity could not be read ({type(e).__name__}: {e})"
                else:
                    incarnation = str(theirs.pop("incarnation", ""))
                    reason = identity_difference(self.ours, theirs)
            if reason:
                self.refused[addr] = reason
                self.report(WorkerRefused(name, addr, reason))
                try:
                    self.client.run(tell_worker, f"refused by the coordinator: {reason}", workers=[addr])
                except Exception:  # noqa: BLE001 - telling it is a courtesy
                    pass
                continue
            self.book.join(addr, incarnation, slots)
            self.report(WorkerJoined(name, addr, str(w.get("host", "")), slots))
        return lost

    # the sweep
    def results(self, todo: list[tuple[Trial, int]]) -> Iterator[tuple[Trial, TrialRecord]]:
        from .worker import run_attempt  # noqa: PLC0415 - imports Dask

        trials = {t.key: (t, seq) for t, seq in todo}
        queue = deque(t.key for t, _ in todo)
        warmup = tuple(queue)[:self.runner.exp.warmup]
        exp: str | Experiment = self.runner.exp.text or self.runner.exp
        last_poll = time.monotonic()
        while queue or self._futures:
            if time.monotonic() - last_poll >= POLL_S:
                last_poll = time.monotonic()
                for lost, name in self._refresh():
                    for f in [f for f, x in self._futures.items() if x == lost]:
                        del self._futures[f]
                        f.cancel()
                    if self.book.tries(lost.key) < self.book.max_attempts:
                        queue.appendleft(lost.key)
                        continue
                    self.book.give_up(lost.key)
                    t, seq = trials[lost.key]
                    yield t, self._failed(t, seq, lost, f"lost {lost.n} times with its worker (last: {name})")
            while queue and (addr := self.book.free_worker()) is not None:
                key = queue.popleft()
                a = self.book.attempt(key, addr)
                if a is None:
                    continue  # taken, or given up already
                job = Job(a, exp, self.runner.exp.file, self.runner.order_seed, trials[key][1], warmup, self.fetch)
                fut = self.client.submit(run_attempt, job, key=a.task, workers=[addr], allow_other_workers=False,
                                         resources={RESOURCE: 1}, pure=False, retries=0)
                self._futures[fut] = a
            if queue and not self.book.workers:
                self._say_waiting()
            done = [f for f in self._futures if f.done()]
            if not done:
                time.sleep(0.05)
                continue
            for f in done:
                a = self._futures.pop(f)
                got = self._collect(f, a, trials)
                if got == "lost":
                    queue.appendleft(a.key)
                elif got is not None:
                    yield got

    def _collect(self, f: Any, a: Attempt, trials: dict[str, tuple[Trial, int]]
                 ) -> tuple[Trial, TrialRecord] | Literal["lost"] | None:
        """A finished task's trial and record to store; "lost" for an attempt
        whose result could not be fetched (to be tried again); None for one
        to discard."""
        t, seq = trials[a.key]
        if f.cancelled():
            self.book.drop(a)
            return None
        try:
            out = f.result(timeout=600)
        except (TimeoutError, OSError) as e:  # the worker went away with the result
            wanted = self.book.drop(a)
            if not wanted:
                return None
            if self.book.tries(a.key) < self.book.max_attempts:
                return "lost"
            self.book.give_up(a.key)
            return t, self._failed(t, seq, a, f"its result was lost ({type(e).__name__}: {e})")
        except Exception as e:  # noqa: BLE001 - the task itself failed on the worker: a failed trial
            if not self.book.drop(a):
                return None
            self.book.give_up(a.key)
            return t, self._failed(t, seq, a, f"on worker {self.names.get(a.worker, a.worker)}: "
                                              f"{type(e).__name__}: {e}")
        assert isinstance(out, Done)
        if self.book.wants(a) and out.incarnation != a.incarnation:
            # Run by a worker restarted on the same address: not the attempt it was sent as; run it again.
            self.book.drop(a)
            if self.book.tries(a.key) < self.book.max_attempts:
                return "lost"
            self.book.give_up(a.key)
            return t, self._failed(t, seq, a, "its workers kept restarting")
        if not self.book.take(a, out.incarnation):
            return None  # an attempt no longer wanted (lost, cancelled, or another's result stored)
        rec = out.record
        if out.artefacts is not None:
            dest = self.runner.art_root / a.key
            try:
                unpack(out.artefacts, dest)
                rec.artefacts = str(dest)
            except (OSError, tarfile.TarError) as e:
                rec.artefacts = None
                if rec.status is not TrialStatus.FAILED:
                    rec.status, rec.reason = TrialStatus.FAILED, f"artefacts in {dest}: {e}"
        return t, rec

    def _failed(self, t: Trial, seq: int, a: Attempt, reason: str) -> TrialRecord:
        env = {**self.runner.env, "worker": {"name": self.names.get(a.worker, a.worker), "address": a.worker,
                                             "attempt": a.n}}
        return TrialRecord(key=t.key, rep=t.rep, seq=seq, factors=t.factors, scenarios=t.scenarios,
                           status=TrialStatus.FAILED, reason=reason[:2000], started=time.time(), duration_s=0.0,
                           overhead_s=None, seed=trial_seed(self.runner.order_seed, t.key), env=env, links=t.links)

    def _say_waiting(self) -> None:
        why = (f"no worker accepted yet ({len(self.refused)} refused)" if self.refused else
               "no worker yet: start one with 'satbench worker --scheduler ADDRESS'")
        if why != self._waiting_said:
            self._waiting_said = why
            self.report(Waiting(why))

    def close(self) -> None:
        """Cancel what is submitted and not finished; stop the local cluster (and
        remove what its workers' testbeds left, if any was cut short)."""
        self.book.cancel_all()
        futures, self._futures = list(self._futures), {}
        try:
            if futures and self.client is not None:
                self.client.cancel(futures)
        except Exception:  # noqa: BLE001 - the scheduler may be gone already
            pass
        if self._own_client and self.client is not None:
            try:
                self.client.close(timeout=10)
            except Exception:  # noqa: BLE001
                pass
        if self._procs:
            for p in self._procs:
                if p.poll() is None:
                    p.terminate()
            for p in self._procs:
                stop_process(p, timeout=5)
            cleanup()  # testbeds of workers killed mid-trial; a live testbed is never touched
        if self._cluster is not None:
            try:
                self._cluster.close(timeout=10)
            except Exception:  # noqa: BLE001
                pass
        if self._logs is not None:
            shutil.rmtree(self._logs, ignore_errors=True)


def dask_executor(*, scheduler: str | None = None, parallel: int | None = None,
                  cores: list[list[int]] | None = None, fetch_artefacts: bool = True,
                  progress: Callable[[ClusterEvent], None] | None = None) -> Callable[[Runner], DaskExecutor]:
    """What :func:`satbench.experiment.runner.run` takes as its ``executor``. Refused while plug-ins
    (a workload or a path element registered in this process) are in use: a worker parses the study
    again without them, and would run their trials as something else."""
    from .. import path, workloads  # noqa: PLC0415

    extra = [*workloads.plugins(), *path.plugins()]
    if extra:
        raise InputError(f"plug-ins registered in this process ({', '.join(extra)}) do not reach workers: run "
                         "the study here, one trial at a time")

    def make(runner: Runner) -> DaskExecutor:
        return DaskExecutor(runner, scheduler=scheduler, parallel=parallel, cores=cores,
                            fetch_artefacts=fetch_artefacts, progress=progress)

    return make


__all__ = ["MAX_ATTEMPTS", "PLAIN_TCP_RISK", "RESOURCE", "Attempt", "Book", "ClusterEvent", "DaskExecutor", "Done",
           "Job", "WorkerJoined", "WorkerLost", "WorkerRefused", "check_scheduler_address", "check_tls_config",
           "dask_executor", "identity", "identity_difference", "listen_host", "pack", "parse_cores", "split_cores",
           "unpack"]
