"""What several commands share: the default database, the numeric argparse type,
output folders made up front, and the server's flags (``satbench serve`` and
``satbench shell``)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ..endpoints import options as server_options
from ..endpoints.options import ServerOptions
from ..errors import InputError
from ..model import CongestionControl, choices

DEFAULT_DB = "results/satbench.sqlite"


def ranged(lo: float, hi: float, kind: type[int] | type[float] = int) -> Callable[[str], float]:
    """An argparse type: a number of ``kind`` from ``lo`` to ``hi``; anything else is
    refused as one line (``--FLAG: must be ...``), exit 2."""
    def parse(text: str) -> float:
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a {'whole ' if kind is int else ''}number from {lo:g} to "
                                             f"{hi:g}, got {text!r}") from None
        if not (lo <= v <= hi) or v != v:
            raise argparse.ArgumentTypeError(f"must be from {lo:g} to {hi:g}, got {text}")
        return v
    parse.__name__ = "number"
    return parse


def _server_args(p: argparse.ArgumentParser) -> None:
    """The server's flags, derived from :class:`ServerOptions`."""
    p.add_argument("--cc", choices=choices(CongestionControl),
                   help="server congestion control: TCP_CONGESTION per socket, and quiche's (bbr = BBRv2 in quiche)")
    for f in server_options.fields():
        flag, help = server_options.flag_of(f), str(f.metadata["help"])
        if f.metadata["choices"]:
            p.add_argument(flag, dest=f.name, choices=f.metadata["choices"], default=f.default, help=help)
        elif server_options.is_bool(f):
            p.add_argument(flag, dest=f.name, action="store_false" if f.default else "store_true",
                           help=("no " + help) if f.default else help)
        else:
            p.add_argument(flag, dest=f.name, type=ranged(f.metadata["lo"], f.metadata["hi"]),
                           metavar=f.metadata["metavar"], help=help)


def _options_from(a: argparse.Namespace) -> ServerOptions:
    return ServerOptions(**{f.name: getattr(a, f.name) for f in server_options.fields()})


def _output_dir(flag: str, path: str | None) -> Path | None:
    """An output folder the user named, made now (or refused) before anything starts."""
    if path is None:
        return None
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{flag} {path}: cannot create the folder: {e.strerror}") from None
    return p

