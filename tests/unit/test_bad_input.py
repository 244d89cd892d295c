"""A corpus of bad input, one row each: the command, the files it is given,
the exit code and the words its one line of error must contain. Every row
also checks that nothing it was given changed and that nothing was started
(no testbed exists). Bad input is refused before anything runs."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ..helpers import FIXTURES, REPO, run_cli, satbench_leftovers

EXP = '[experiment]\nname = "x"\nseed = 1\n[factors]\nlink = "wire"\nprotocol = "h2"\npage = "blank"\nclient = "loader"\n'


def _other_sqlite(p: Path) -> None:
    con = sqlite3.connect(p)
    con.execute("CREATE TABLE notes (x TEXT)")
    con.execute("INSERT INTO notes VALUES ('mine')")
    con.commit()
    con.close()


@dataclass
class Case:
    name: str
    argv: list[str]
    words: list[str]
    files: dict[str, bytes | Callable[[Path], None]] = field(default_factory=dict)
    code: int = 2


CASES = [
    # Files that are not what they claim, or not text.
    Case("profile not UTF-8", ["shell", "--link", "{d}/p.toml", "--", "true"], ["p.toml:2:", "not UTF-8"],
         {"p.toml": b'name = "p"\n[forward]\xff\xfe\n'}),
    Case("experiment not UTF-8", ["plan", "{d}/e.toml"], ["e.toml:1:", "not UTF-8"], {"e.toml": b"\x80\x81"}),
    Case("experiment is a folder", ["plan", "{d}"], ["cannot read experiment file"]),
    Case("trace not numbers", ["shell", "--link", "{d}/p.toml", "--", "true"], ["t.trace:1:", "whole number"],
         {"p.toml": b'name = "p"\n[forward]\ntrace = "t.trace"\n', "t.trace": b"\x00\x01garbage\n"}),
    Case("report of a text file", ["report", "--db", "{d}/db.sqlite", "-o", "{d}/out"], ["not an SQLite file"],
         {"db.sqlite": b"hello, not a database\n"}),
    Case("export of a text file", ["export", "--db", "{d}/db.sqlite", "-o", "{d}/out"], ["not an SQLite file"],
         {"db.sqlite": b"hello, not a database\n"}),
    Case("report of another program's database", ["report", "--db", "{d}/db.sqlite", "-o", "{d}/out"],
         ["not satbench's"], {"db.sqlite": _other_sqlite}),
    Case("run into another program's database", ["run", "{d}/e.toml", "--db", "{d}/db.sqlite"], ["not satbench's"],
         {"e.toml": EXP.encode(), "db.sqlite": _other_sqlite}),
    Case("run a scenario the file lacks", ["run", "{d}/e.toml", "--db", "{d}/db.sqlite", "--scenario", "nosuch"],
         ["--scenario nosuch", "no such scenario in", "e.toml", "its scenarios: main"], {"e.toml": EXP.encode()}),
    Case("run into a text file", ["run", "{d}/e.toml", "--db", "{d}/db.sqlite"], ["not an SQLite file"],
         {"e.toml": EXP.encode(), "db.sqlite": b"not a database"}),
    Case("run into a database that cannot be made", ["run", "{d}/e.toml", "--db", "/proc/satbench/db.sqlite"],
         ["cannot create the database"], {"e.toml": EXP.encode()}),
    Case("report of a database from the future", ["report", "--db", "{d}/db.sqlite", "-o", "{d}/out"],
         ["schema 99", "upgrade"], {"db.sqlite": lambda p: _future(p)}),
    # Output folders that cannot be made.
    Case("pages under a file", ["pages", "--out", "{d}/f/pages", "--only", "blank"], ["--out", "cannot"],
         {"f": b"a file"}),
    Case("captures under a file", ["shell", "--link", "wire", "--pcap", "{d}/f/caps", "--", "true"],
         ["--pcap", "cannot create"], {"f": b"a file"}),
    Case("report under a file", ["report", "--db", str(FIXTURES / "v1-results.sqlite"), "-o", "{d}/f/r"],
         ["-o", "cannot create"], {"f": b"a file"}),
    # Values a link cannot have.
    Case("infinite rate", ["shell", "--link", "{d}/p.toml", "--", "true"], ["p.toml:3:", "forward.rate_mbps", "finite"],
         {"p.toml": b'name = "p"\n[forward]\nrate_mbps = inf\n'}),
    Case("absurd rate", ["shell", "--link", "wire", "--set", "rate_mbps=1e30", "--", "true"],
         ["--set rate_mbps=1e30", "Mbit/s", "got 1e+30"]),
    Case("thirty-year delay", ["shell", "--link", "wire", "--set", "delay_ms=9.5e11", "--", "true"],
         ["delay_ms", "within 0 and 3600000"]),
    Case("rate as a word", ["shell", "--link", "wire", "--set", "rate_mbps=fast", "--", "true"],
         ["rate_mbps", "finite number"]),
    Case("absurd repetitions", ["plan", "{d}/e.toml"], ["e.toml:3:", "experiment.repetitions"],
         {"e.toml": EXP.replace('name = "x"\n', 'name = "x"\nrepetitions = 1000000000\n').encode()}),
    Case("infinite timeout", ["plan", "{d}/e.toml"], ["experiment.timeout_s"],
         {"e.toml": EXP.replace('name = "x"\n', 'name = "x"\ntimeout_s = inf\n').encode()}),
    Case("server option of the wrong type", ["plan", "{d}/e.toml"], ["e.toml:9:", "server.tfo", "true or false"],
         {"e.toml": (EXP + '"server.tfo" = "yes"\n').encode()}),
    Case("a knob that needs a returning client", ["plan", "{d}/e.toml"],
         ["e.toml:9:", "server.tfo", "comes back", "Fast Open cookie", "measure nothing"],
         {"e.toml": (EXP + '"server.tfo" = [false, true]\n').encode()}),
    Case("... varied by a scenario", ["plan", "{d}/e.toml"], ["e.toml:11:", "server.zero_rtt", "session ticket"],
         {"e.toml": (EXP + '[[scenario]]\nname = "a"\n"server.zero_rtt" = [true, false]\n').encode()}),
    Case("keys nginx cannot log", ["plan", "{d}/e.toml"], ["e.toml:4:", "experiment.artefacts", "keylog"],
         {"e.toml": EXP.replace('seed = 1\n', 'seed = 1\nartefacts = ["keylog"]\n').replace(
             'client = "loader"\n', 'client = "loader"\nserver = "nginx"\n').encode()}),
    Case("a server option nginx lacks", ["plan", "{d}/e.toml"], ["server.sndbuf", "satbench server only"],
         {"e.toml": (EXP + 'server = "nginx"\n"server.sndbuf" = 100000\n').encode()}),
    # Command-line values.
    Case("no connections for Firefox", ["browse", "https://server.test/", "--protocol", "h1", "--browser", "firefox",
                                        "--connections", "0"], ["--connections", "from 1 to 64", "got 0"]),
    Case("no loader clients", ["load", "https://server.test/", "--protocol", "h2", "--clients", "0"],
         ["--clients", "got 0"]),
    Case("a timeout that is not a number", ["load", "https://server.test/", "--protocol", "h2", "--timeout", "nan"],
         ["--timeout", "got nan"]),
    Case("a port past 65535", ["serve", "{d}", "--https-port", "70000"], ["--https-port", "65535"]),
    Case("a server option out of its range", ["serve", "{d}", "--quic-initcwnd", "0"], ["--quic-initcwnd", "got 0"]),
    Case("a worker of no testbeds", ["worker", "--scheduler", "tls://127.0.0.1:1", "--testbeds", "0"],
         ["--testbeds", "got 0"]),
    Case("browse a malformed URL", ["browse", "http//server.test", "--protocol", "h2"], ["URL", "http://"]),
    Case("load a malformed URL", ["load", "https://[bad", "--protocol", "h2"], ["URL"]),
    Case("timing of a URL without host", ["timing", "https://", "--protocol", "h3"], ["URL"]),
    Case("timing zero times", ["timing", "https://server.test/", "--protocol", "h2", "--count", "0"], ["--count"]),
    Case("load no clients", ["load", "https://server.test/", "--protocol", "h2", "--clients", "0"], ["--clients"]),
    Case("negative seed", ["shell", "--link", "wire", "--seed", "-1", "--", "true"], ["--seed"]),
    Case("no client hosts", ["shell", "--link", "wire", "--clients", "0", "--", "true"], ["--clients"]),
    Case("unknown access link", ["shell", "--link", "wire", "--access", "nosuch", "--", "true"], ["nosuch"]),
    Case("port out of range", ["serve", "{d}", "--http-port", "70000"], ["--http-port", "from 0 to 65535"]),
    Case("serve a file", ["serve", "{d}/f"], ["not a directory"], {"f": b"x"}),
    Case("unknown command", ["frobnicate"], ["unknown command 'frobnicate'", "--help"]),
    Case("unknown benchmark", ["bench", "nosuch"], ["invalid choice"]),
    Case("no command", [], ["required"]),
    Case("export as xml", ["export", "--db", str(FIXTURES / "v1-results.sqlite"), "-o", "{d}/o", "--format", "xml"],
         ["--format"]),
    Case("report of an experiment not there", ["report", "--db", str(FIXTURES / "v1-results.sqlite"), "-o",
                                                "{d}/o", "--experiment", "nosuch"], ["nosuch", "found: v1"]),
    Case("report of a trial not there", ["report", "--db", str(FIXTURES / "v1-results.sqlite"), "-o", "{d}/o",
                                         "--trial", "zzzz"], ["--trial zzzz", "no valid trial"]),
    Case("report of a trial by too short a key", ["report", "--db", str(FIXTURES / "v1-results.sqlite"), "-o",
                                                  "{d}/o", "--trial", "a_"], ["--trial a_", "first 4 characters"]),
    Case("report side by side on a factor not varied", ["report", "--db", str(FIXTURES / "v1-results.sqlite"),
                                                        "-o", "{d}/o", "--side-by-side", "nosuch"],
         ["--side-by-side nosuch", "not a factor the experiment varies"]),
]


def _future(p: Path) -> None:
    p.write_bytes((FIXTURES / "v1-results.sqlite").read_bytes())
    con = sqlite3.connect(p)
    con.execute("PRAGMA user_version = 99")
    con.commit()
    con.close()


def _digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file()}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_refused_in_one_line(tmp_path: Path, case: Case) -> None:
    for name, content in case.files.items():
        p = tmp_path / name
        if callable(content):
            content(p)
        else:
            p.write_bytes(content)
    given = _digest(tmp_path)
    fixture = hashlib.sha256((FIXTURES / "v1-results.sqlite").read_bytes()).hexdigest()
    p = run_cli(*[a.replace("{d}", str(tmp_path)) for a in case.argv], cwd=REPO)
    assert p.returncode == case.code, (p.returncode, p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for w in case.words:
        assert w in lines[0], (w, lines[0])
    assert not lines[0].startswith("satbench: satbench"), lines[0]  # the program named once
    # Nothing it was given changed; nothing was started.
    now = _digest(tmp_path)
    assert {k: v for k, v in now.items() if k in given} == given
    assert hashlib.sha256((FIXTURES / "v1-results.sqlite").read_bytes()).hexdigest() == fixture
    assert satbench_leftovers() == []
