"""The ``satbench`` command: a thin layer over the library.

Each subcommand is one row of :data:`COMMANDS`: its arguments and a handler
that builds library objects, calls the library and prints what it returns.
All printing is in this package; the library reports progress through
callbacks. A library error becomes one line on stderr and its exit code (2 for
bad input or a missing prerequisite, 1 for a testbed failure).

The handlers live by concern: :mod:`.lab` (a testbed by hand: links, series,
shell, cleanup, check), :mod:`.endpoints` (one server or client by hand: serve,
record, browse, load, timing, ca, pages), :mod:`.experiments` (plan, run,
validate, worker, scheduler) and :mod:`.results` (report, compare, export,
trace, bench); :mod:`.common` holds what several of them share. This module
holds the table, the parser and :func:`main`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..bench import BENCHES
from ..errors import InputError, SatbenchError
from .endpoints import (
    _browse,
    _browse_args,
    _ca,
    _ca_args,
    _load,
    _load_args,
    _pages,
    _pages_args,
    _record,
    _record_args,
    _serve,
    _serve_args,
    _timing,
    _timing_args,
)
from .experiments import (
    _plan,
    _plan_args,
    _run,
    _run_args,
    _scheduler,
    _scheduler_args,
    _validate,
    _validate_args,
    _worker,
    _worker_args,
)
from .lab import _check, _cleanup, _cleanup_args, _links, _links_args, _series, _series_args, _shell, _shell_args
from .results import (
    _bench,
    _bench_args,
    _compare,
    _compare_args,
    _export,
    _export_args,
    _report,
    _report_args,
    _trace,
    _trace_args,
)

__all__ = ["COMMANDS", "Command", "Handler", "build_parser", "main"]

Handler = Callable[[argparse.Namespace, list[str]], int]


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    args: Callable[[argparse.ArgumentParser], None]
    run: Handler
    usage: str | None = None
    #: Takes a command after ``--`` (only ``shell``).
    takes_command: bool = False


COMMANDS: tuple[Command, ...] = (
    Command("links", "list link profiles with their parameters", _links_args, _links),
    Command("series", "a link profile from a measured RTT and loss series (ping, IRTT)", _series_args, _series),
    Command("shell", "run a command (or a shell) on a client behind the emulated link", _shell_args, _shell,
            usage="satbench shell --link PROFILE [options] [-- CMD ...]", takes_command=True),
    Command("cleanup", "remove what dead runs left behind", _cleanup_args, _cleanup),
    Command("check", "check the prerequisites", lambda p: None, _check),
    Command("serve", "serve a directory over HTTP/1.1, HTTP/2 and HTTP/3 in this namespace", _serve_args, _serve),
    Command("record", "record a page in Chromium (a HAR with its bodies) and import it as a site", _record_args,
            _record),
    Command("browse", "load a page in a fresh browser with the protocol forced; print the metrics", _browse_args,
            _browse),
    Command("load", "synthetic page loads (Rust): C clients at once, HTTP/1.1 on K connections", _load_args, _load),
    Command("plan", "print an experiment's trials and estimated duration; run nothing", _plan_args, _plan),
    Command("run", "run an experiment file: a fresh testbed per trial, results in SQLite (resumes)", _run_args, _run),
    Command("validate", "check the testbed against the literature, claim by claim (runs the validation sets)",
            _validate_args, _validate),
    Command("worker", "serve testbeds to a Dask scheduler: run the trials a 'satbench run --scheduler' sends",
            _worker_args, _worker),
    Command("scheduler", "a Dask scheduler for satbench workers: mutual TLS, or plain TCP on loopback",
            _scheduler_args, _scheduler),
    Command("compare", "did my change help? two runs side by side: each combination's median and the change "
                       "with its interval", _compare_args, _compare),
    Command("report", "write an HTML report (with SVG figures and statistics) of a results database", _report_args,
            _report),
    Command("export", "export a results database as CSV or Parquet", _export_args, _export),
    Command("trace", "draw one trial over time: cwnd, in flight, pacing, delivery, RTT, objects", _trace_args,
            _trace),
    Command("timing", "curl-style timing (DNS, connect, TLS, first byte, total) over fresh connections",
            _timing_args, _timing),
    Command("ca", "make (once) and show the test CA and server certificate", _ca_args, _ca),
    Command("pages", "generate the test pages (and bulk files) of the literature", _pages_args, _pages),
    Command("bench", "benchmarks: " + ", ".join(BENCHES), _bench_args, _bench),
)


class _Parser(argparse.ArgumentParser):
    """argparse, with bad usage as one line and exit code 2."""

    def error(self, message: str) -> Any:
        if message.startswith("argument command: invalid choice:"):
            given = message.split("invalid choice:", 1)[1].split("(", 1)[0].strip()
            raise InputError(f"unknown command {given}; satbench --help lists them")
        where = self.prog.removeprefix("satbench").strip()
        raise InputError(f"{where}: {message}" if where else message)


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="satbench", description="Web performance over emulated satellite links.")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for c in COMMANDS:
        c.args(sub.add_parser(c.name, help=c.help, usage=c.usage))
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    rest: list[str] = []
    if "--" in args:
        i = args.index("--")
        args, rest = args[:i], args[i + 1:]
    try:
        a = build_parser().parse_args(args)
        cmd = {c.name: c for c in COMMANDS}[a.command]
        if rest and not cmd.takes_command:
            raise InputError(f"'{a.command}' takes no command after --")
        return cmd.run(a, rest)
    except SatbenchError as e:
        print(f"satbench: {e}", file=sys.stderr)
        return e.exit_code
    except BrokenPipeError:
        # The reader went away (e.g. `satbench links | head`): not an error.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
