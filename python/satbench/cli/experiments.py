"""Experiment commands: ``plan``, ``run`` (with its progress lines and the
choice of where trials run), ``validate``, and a cluster's ``worker`` and
``scheduler``."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from .. import prereq
from ..errors import InputError
from ..experiment import plan as plan_mod
from ..experiment import runner
from ..experiment import spec as experiment_spec
from ..experiment.plan import Plan
from ..model import TrialStatus
from .common import DEFAULT_DB, ranged

# -- experiments -----------------------------------------------------------------------------


def _plan_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    p.add_argument("--db", help="results database: mark trials already done")
    p.add_argument("--all", action="store_true", help="list every trial (default: the first 50)")
    p.add_argument("--json", action="store_true")
    _scenario_arg(p)


def _scenario_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", action="append", metavar="NAME",
                   help="only the trials of this scenario: a [[scenario]] table's name, 'main' for [factors], "
                        "'trialN' for the N-th [[trial]] (repeatable; a later run of the whole file adds the rest)")


def _plan(a: argparse.Namespace, _: list[str]) -> int:
    exp = experiment_spec.load(a.file)
    if a.scenario:
        exp = exp.only_scenarios(a.scenario)
    stored_seed, done = None, frozenset[str]()
    if a.db and Path(a.db).exists():
        from ..results.read import Results  # noqa: PLC0415 - pandas loads on use (a plan without --db needs none)

        # Read-only: planning never migrates or writes a database.
        with Results(a.db) as r:
            row = r.db.execute("SELECT id, seed FROM experiments WHERE name = ?", (exp.name,)).fetchone()
            if row:
                stored_seed = int(row[1])
                done = runner.done_keys(r.db, r.version, int(row[0]))
    plan = Plan(exp, exp.run_order(stored_seed), done)
    print(json.dumps(plan.to_json()) if a.json else plan.format(limit=None if a.all else 50))
    return 0


def _run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("file")
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the trials on a Dask cluster: tls://HOST:PORT (tcp:// on loopback only); "
                        "workers are 'satbench worker' (default: the file's scheduler, if any)")
    g.add_argument("--parallel", type=ranged(1, 256), metavar="N",
                   help="N testbeds at once on this machine, each pinned to cores of its own (default: the file's)")
    p.add_argument("--artefacts-on-workers", action="store_true",
                   help="with a cluster: keep each trial's artefacts on its worker (stored as HOST:PATH) "
                        "instead of fetching them")
    _scenario_arg(p)


def _fmt_clock(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _progress(e: runner.Event) -> None:
    out = sys.stderr
    if isinstance(e, runner.Started):
        if e.migrated_from == 1:
            print(f"satbench: {e.db}: migrated from schema 1 (satbench 0.1): trials now keyed by their links",
                  file=out, flush=True)
        print(f"satbench run {e.experiment}: {e.planned} trials, {e.already} already stored in {e.db}, "
              f"{e.todo} to run (order seed {e.seed})", file=out, flush=True)
    elif isinstance(e, runner.WarmUp):
        print(f"  warm-up {e.index}/{e.count}: {e.trial.label()}", file=out, flush=True)
    elif isinstance(e, runner.TrialDone):
        rec = e.record
        plt = rec.metrics.get("plt_ms")
        result = f"PLT {plt:.0f} ms" if plt is not None else "no PLT"
        state = "valid" if rec.status is TrialStatus.VALID else f"{rec.status.value.upper()} ({rec.reason})"
        bar = "#" * round(20 * e.done / e.planned)
        med = f" | cell median {e.cell_median_ms:.0f} ms" if e.cell_median_ms is not None else ""
        print(f"  [{bar:.<20}] {e.done}/{e.planned} {_fmt_clock(e.elapsed_s)} elapsed, ETA {_fmt_clock(e.eta_s)} "
              f"| {e.cell} rep {e.trial.rep}: {state}, {result}{med}", file=out, flush=True)
    elif isinstance(e, runner.Interrupted):
        name = signal.Signals(e.signal).name
        print(f"\ninterrupted ({name}): {e.ran} trials stored by this run; run the same command again to resume",
              file=out, flush=True)
    elif isinstance(e, runner.Waiting):
        print(f"  waiting: {e.reason}", file=out, flush=True)


def _cluster_progress(e: Any) -> None:
    from ..experiment import distributed  # noqa: PLC0415 - Dask loads only for a cluster

    out = sys.stderr
    if isinstance(e, distributed.WorkerJoined):
        print(f"  worker {e.name} joined ({e.address}, {e.host}): {e.testbeds} testbed(s)", file=out, flush=True)
    elif isinstance(e, distributed.WorkerRefused):
        print(f"  worker {e.name} refused ({e.address}): {e.reason}", file=out, flush=True)
    elif isinstance(e, distributed.WorkerLost):
        print(f"  worker {e.name} lost ({e.address})" + (f"; running again elsewhere: {', '.join(e.trials)}"
                                                         if e.trials else ""), file=out, flush=True)
    else:
        _progress(e)


def _executor(a: argparse.Namespace, exp: experiment_spec.Experiment) -> Any:
    """Where the trials run: here one after another (None), on a cluster, or N at once here."""
    scheduler = a.scheduler or (exp.scheduler if a.parallel is None else None)
    parallel = a.parallel or (exp.parallel if a.scheduler is None else None)
    if scheduler is None and parallel is None:
        if a.artefacts_on_workers:
            raise InputError("--artefacts-on-workers: only with --scheduler or --parallel")
        return None
    from ..experiment import distributed  # noqa: PLC0415 - Dask loads only for a cluster

    logging.getLogger("distributed").setLevel(logging.ERROR)  # the coordinator says what matters itself
    if scheduler is not None:
        distributed.check_scheduler_address(scheduler)
        if scheduler.startswith("tcp://"):
            print(f"satbench: warning: {distributed.PLAIN_TCP_RISK}", file=sys.stderr)
    cores = distributed.split_cores(parallel) if parallel is not None else None
    if parallel is not None and parallel > 1:
        # N testbeds on this machine: refused where they would not measure as one at a time does.
        problems = plan_mod.parallel_problems(exp.trials, parallel, len(os.sched_getaffinity(0)))
        if problems:
            raise InputError(f"--parallel {parallel}: {problems[0]}")
    return distributed.dask_executor(scheduler=scheduler, parallel=parallel, cores=cores,
                                     fetch_artefacts=not a.artefacts_on_workers, progress=_cluster_progress)


def _run(a: argparse.Namespace, _: list[str]) -> int:
    exp = experiment_spec.load(a.file)
    if a.scenario:
        exp = exp.only_scenarios(a.scenario)
    s = runner.run(exp, Path(a.db), progress=_progress, executor=_executor(a, exp))
    print(f"{s.experiment}: {s.ran} trials run in {s.seconds:.0f} s ({s.valid} valid, {s.invalid} invalid, "
          f"{s.failed} failed); {s.already + s.ran - s.failed} of {s.planned} done; results in {s.db}")
    for reason, n in sorted(s.reasons.items(), key=lambda x: -x[1]):
        print(f"  {n} x {reason}")
    if s.interrupted:
        return 128 + (s.signal or signal.SIGINT)
    return 0 if s.failed == 0 else 1


VALIDATION_DB = "reports/validation/results.sqlite"


def _validate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("studies", nargs="*", metavar="STUDY",
                   help="studies to check: A, B, C, D, E (default: all); the physical checks come with any")
    p.add_argument("--quick", action="store_true",
                   help="the reduced sets (every study in under 20 minutes here) instead of the presets as the "
                        "studies ran them")
    p.add_argument("--db", default=VALIDATION_DB, help=f"results database (default {VALIDATION_DB}; resumes)")
    p.add_argument("-o", "--out", default="reports/validation", help="folder of validation.html")
    p.add_argument("--judge-only", action="store_true", help="run nothing: judge what the database holds")
    p.add_argument("--repetitions", type=ranged(1, 1000), metavar="N",
                   help="a smoke run: each set's first N repetitions of every cell (the verdicts say less; the same "
                        "set run later without it resumes and adds the rest)")
    p.add_argument("--sequential", action="store_true",
                   help="add repetitions only to the cells an undecided check reads, judging after 3, 5, 10, 20, 30 "
                        "and 50 repetitions and at each set's own (the cap), each look at Pocock's level; with "
                        "--judge-only, what such a run would have decided on the stored trials")
    p.add_argument("--committed-only", action="store_true",
                   help="judge only trials run from committed code (a trial whose commit ends in -dirty is left "
                        "out, and counted)")
    p.add_argument("--tally", metavar="QUICK_DB",
                   help="run nothing: every check's verdict from the full presets (--db) beside the quick sets' "
                        "(QUICK_DB), study by study, as Markdown, from committed code only")
    p.add_argument("--calibrate", action="store_true",
                   help="run nothing: how often the judge's intervals are wrong, on planted nulls and effects drawn "
                        "from the stored trials' spread (--db), at 3, 5, 10 and 30 trials a side")
    p.add_argument("--sims", type=ranged(100, 1_000_000), default=2000, metavar="N",
                   help="--calibrate: planted nulls and effects per n (default 2000)")


def _validate(a: argparse.Namespace, _: list[str]) -> int:
    from .. import validate  # noqa: PLC0415 - pandas and numpy load on use

    if a.calibrate:
        from ..validate import calibrate  # noqa: PLC0415

        pops = calibrate.populations(Path(a.db)) if Path(a.db).is_file() else []
        if not pops:
            raise InputError(f"--db {a.db}: no cell of {calibrate.MIN_CELL} valid trials to draw planted data from")
        print(calibrate.format_table(calibrate.calibrate(pops, sims=a.sims), len(pops), 10.0), end="")
        seq = [calibrate.sequential(pops, looks, sims=a.sims) for looks in ((3, 5), (3, 5, 10), (3, 5, 10, 20, 30))]
        print(calibrate.format_sequential(seq, 10.0), end="")
        return 0

    studies, claims = validate.load()
    known = [s.study for s in studies if s.study != validate.PHYSICAL]
    if a.tally:
        from ..validate import tally  # noqa: PLC0415

        for f in (a.db, a.tally):
            if not Path(f).is_file():
                raise InputError(f"{f}: no such results database")
        asked = [s for s in studies if s.study in ([x.upper() for x in a.studies] or known)]
        judged = []
        for quick, path in ((False, Path(a.db)), (True, Path(a.tally))):
            ran = validate.run_sets(validate.sets_of(asked, quick), path, lambda *_: None)
            judged.append(validate.judge(path, asked, claims, ran, committed_only=True))
        full, quick_v = judged
        print(tally.markdown(full.results, quick_v.results, full.dirty, quick_v.dirty,
                             [s.study for s in asked]), end="")
        return 0
    want = [x.upper() for x in a.studies] or known
    bad = [x for x in want if x not in known]
    if bad:
        raise InputError(f"STUDY: {bad[0]!r} is no study (known: {', '.join(known)})")
    chosen = [s for s in studies if s.study in want]
    files = validate.sets_of(chosen, a.quick)
    db = Path(a.db)
    db.parent.mkdir(parents=True, exist_ok=True)

    def run_one(f: Path, exp: experiment_spec.Experiment, db: Path) -> None:
        if a.judge_only:
            return
        print(f"== {exp.name} ({f}): {len(exp.trials)} trials", flush=True)
        # As the set's file says: one testbed at a time, or its parallel ones.
        here = argparse.Namespace(scheduler=None, parallel=None, artefacts_on_workers=False)
        s = runner.run(exp, db, progress=_progress, executor=_executor(here, exp))
        if s.interrupted:
            raise KeyboardInterrupt
        print(f"{s.experiment}: {s.ran} trials run in {s.seconds:.0f} s ({s.valid} valid, {s.invalid} invalid, "
              f"{s.failed} failed)", flush=True)

    if not a.judge_only:
        prereq.require_testbed()
    if a.repetitions is not None and a.judge_only:
        raise InputError("--repetitions: a smoke run's, not --judge-only's (which judges what is stored)")
    if a.repetitions is not None and a.sequential:
        raise InputError("--repetitions: a smoke run's; --sequential chooses the repetitions itself")
    if a.judge_only and not db.exists():
        raise InputError(f"--db {db}: no results yet (run without --judge-only)")
    looks = ""
    if a.sequential:
        from ..validate import sequential  # noqa: PLC0415

        v, history = sequential.run(chosen, a.quick, db, run_one, claims)
        looks = sequential.format_looks(history) + "\n"
    else:
        sets = validate.run_sets(files, db, run_one, a.repetitions)
        if not db.exists():
            raise InputError(f"--db {db}: no results yet (run without --judge-only)")
        v = validate.judge(db, chosen, claims, sets, committed_only=a.committed_only)
    command = "satbench validate " + " ".join([*a.studies, *(["--quick"] if a.quick else []),
                                               *(["--sequential"] if a.sequential else []),
                                               *([f"--repetitions {a.repetitions}"] if a.repetitions else [])])
    print(f"\n{looks}{command.strip()}: claim by claim (measured: interval; n: trials)")
    print(v.table())
    page = validate.write_html(v, Path(a.out), command.strip())
    counts: dict[str, int] = {}
    for r in v.results:
        counts[r.verdict] = counts.get(r.verdict, 0) + 1
    print("\n" + ", ".join(f"{n} {k}" for k, n in counts.items()) + f"; page: {page}")
    if v.failed:
        print("a physical check failed: the testbed measured something physics does not allow", file=sys.stderr)
        return 1
    return 0


def _worker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scheduler", required=True, metavar="ADDRESS",
                   help="the Dask scheduler: tls://HOST:PORT (tcp:// on loopback only)")
    p.add_argument("--testbeds", type=ranged(1, 256), default=1, metavar="N",
                   help="testbeds at once (default 1); several are pinned to equal shares of the cores")
    p.add_argument("--cores", metavar="LIST", help="only these cores, e.g. 0-3 (default: all this process may use)")
    p.add_argument("--name", help="the worker's name (default HOST-PID)")
    p.add_argument("--dir", help="pages and artefacts in flight (default ~/.cache/satbench/worker)")


def _worker(a: argparse.Namespace, _: list[str]) -> int:
    from ..experiment import distributed, worker  # noqa: PLC0415 - Dask loads only for a cluster

    cores = distributed.parse_cores(a.cores) if a.cores else None
    if a.scheduler.startswith("tcp://"):
        print(f"satbench: warning: {distributed.PLAIN_TCP_RISK}", file=sys.stderr)
    worker.serve_worker(a.scheduler, testbeds=a.testbeds, name=a.name, cores=cores,
                        directory=Path(a.dir) if a.dir else None,
                        on_ready=lambda line: print(line, file=sys.stderr, flush=True))
    return 0


def _scheduler_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", required=True, metavar="ADDRESS",
                   help="where: tls://HOST:PORT (Dask's TLS configuration gives the certificates: satbench ca "
                        "--cluster), or tcp://127.0.0.1:PORT")


def _scheduler(a: argparse.Namespace, _: list[str]) -> int:
    from ..experiment import distributed  # noqa: PLC0415 - Dask loads only for a cluster
    from ..experiment.scheduler import serve_scheduler  # noqa: PLC0415

    if a.listen.startswith("tcp://"):
        print(f"satbench: warning: {distributed.PLAIN_TCP_RISK}", file=sys.stderr)
    serve_scheduler(a.listen, on_ready=lambda line: print(line, file=sys.stderr, flush=True))
    return 0
