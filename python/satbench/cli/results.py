"""Commands over stored results: ``report``, ``compare``, ``export``, ``trace``;
and the benchmarks (``bench``)."""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path
from typing import Any

from .. import prereq
from ..bench import BENCHES
from ..errors import InputError
from .common import DEFAULT_DB, ranged


def _report_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    p.add_argument("-o", "--out", default="report", help="output folder (default report/)")
    p.add_argument("--experiment", help="only this experiment (default: all in the database)")
    p.add_argument("--trial", action="append", default=[], metavar="KEY",
                   help="filmstrips and waterfalls of this trial (its key, its first 4 characters or more, or its id; "
                        "repeatable, shown side by side in the order given) instead of each combination's median one")
    p.add_argument("--side-by-side", metavar="FACTOR",
                   help="the filmstrips' and waterfalls' rows with this factor's levels next to each other")


def _report(a: argparse.Namespace, _: list[str]) -> int:
    from ..results.report import ViewChoice, write_report  # noqa: PLC0415 - matplotlib and pandas load on use

    views = ViewChoice(trials=tuple(a.trial), side_by_side=a.side_by_side)
    print(f"report: {write_report(Path(a.db), Path(a.out), experiment=a.experiment, views=views)}")
    return 0


def _compare_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("first", metavar="A", help="the run before: a results database, or DB:EXPERIMENT")
    p.add_argument("second", metavar="B", help="the run after: another database, or DB:EXPERIMENT (the same DB)")
    p.add_argument("--metric", default="plt_ms", help="the metric to compare (default plt_ms; fcp_ms, lcp_ms, ...)")


def _compare(a: argparse.Namespace, _: list[str]) -> int:
    from ..results import compare  # noqa: PLC0415 - pandas loads on use

    text = compare.run(compare.Run.parse(a.first), compare.Run.parse(a.second), a.metric)[1]
    print(text, end="")
    return 0


def _export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    p.add_argument("-o", "--out", required=True, help="output folder")
    p.add_argument("--format", choices=["csv", "parquet"], default="csv")
    p.add_argument("--experiment", help="only this experiment")


def _export(a: argparse.Namespace, _: list[str]) -> int:
    from ..results.read import export  # noqa: PLC0415 - pandas loads on use

    for p in export(a.db, a.out, a.format, a.experiment):
        print(p)
    return 0


def _trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trial", help="a trial's id or key (a unique prefix of the key will do)")
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    p.add_argument("-o", "--out", help="write the figure here (SVG; default trace-KEY.svg)")
    p.add_argument("--json", action="store_true", help="print the time series as JSON instead")


def _trace(a: argparse.Namespace, _: list[str]) -> int:
    from ..results import timeseries  # noqa: PLC0415 - matplotlib loads on use

    ts = timeseries.load(Path(a.db), a.trial)
    if a.json:
        print(json.dumps(ts.to_json()))
        return 0
    out = timeseries.write_svg(ts, Path(a.out or f"trace-{ts.key}.svg"))
    print(f"trace of trial {ts.key} ({ts.label}): {len(ts.connections)} connections, {len(ts.objects)} objects "
          f"-> {out}")
    return 0


def _bench_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("what", choices=BENCHES)
    p.add_argument("--json", action="store_true")
    p.add_argument("--quick", action="store_true", help="shorter runs (less precise)")
    p.add_argument("--trials", type=ranged(1, 1_000_000), metavar="N", help="soak: how many trials (default 1000)")
    p.add_argument("--client", choices=("chromium", "firefox"), help="capture: the browser (default chromium)")
    p.add_argument("--db", type=Path, metavar="DB",
                   help="capture, returning: the database their trials go to (resumed; default: a temporary one)")


def _bench(a: argparse.Namespace, _: list[str]) -> int:
    if a.trials is not None and (a.what != "soak" or not 1 <= a.trials <= 1_000_000):
        raise InputError("--trials: the soak's number of trials, from 1 to 1000000")
    if a.client is not None and a.what != "capture":
        raise InputError("--client is the capture benchmark's: satbench bench capture --client firefox")
    if a.db is not None and a.what not in ("capture", "returning"):
        raise InputError("--db is the capture and returning benchmarks': satbench bench returning --db DB")
    prereq.require_testbed()
    mod = importlib.import_module(f"satbench.bench.{a.what}")
    extra: dict[str, Any] = ({"trials": a.trials} if a.what == "soak"
                             else {"client": a.client or "chromium", "db": a.db}
                             if a.what == "capture" else {"db": a.db} if a.what == "returning" else {})
    r = mod.run(quick=a.quick, **extra)
    print(json.dumps(r, indent=1) if a.json else mod.format_report(r))
    return 0
