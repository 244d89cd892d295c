"""Sequential repetitions with real trials: the loader over a 20 ms wire, HTTP/3
against HTTP/1.1 on a 100 KB page (28 % apart here, HTTP/3 the slower: a large
effect, whichever its direction) decided at the first look, HTTP/1.1's cells
stopped at 3 repetitions of the 5 the set plans; every check decided by the
cap, and fewer trials run than planned."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import satbench.validate
from satbench.experiment import runner, spec
from satbench.validate import StudySets, sequential
from satbench.validate.claims import Check, Claim


def test_a_large_effect_stops_at_the_first_look_with_real_trials(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "x.toml").write_text(
        '[experiment]\nname = "seq-real"\nrepetitions = 5\nseed = 1\ntimeout_s = 60\n'
        '[factors]\nlink = "wire"\n"link.delay_ms" = 20\npage = "uniform-100k"\nclient = "loader"\n'
        'protocol = ["h1", "h3"]\ncc = ["cubic", "bbr"]\n')
    monkeypatch.setattr(satbench.validate, "sets_of", lambda studies, quick: [tmp_path / "experiments" / "x.toml"])
    db = tmp_path / "r.sqlite"

    def run_one(f: Path, exp: spec.Experiment, db: Path) -> None:
        s = runner.run(exp, db, progress=lambda _: None, pages_root=tmp_path / "pages")
        assert s.invalid == 0 and s.failed == 0, s.reasons

    claim = Claim("X1", "X", "HTTP/3 and HTTP/1.1 differ", "", "plt_ms", {}, (
        Check("h3 against h1", "relative", a={"protocol": "h3"}, b={"protocol": "h1"}, pair=("cc",),
              direction="lower"),
        Check("bbr against cubic, h3", "relative", a={"protocol": "h3", "cc": "bbr"},
              b={"protocol": "h3", "cc": "cubic"}, pair=(), direction="lower"),
    ))
    v, history = sequential.run([StudySets("X", "a test study", ("x.toml",), ())], True, db, run_one, [claim])
    effect, other = v.results
    assert effect.verdict in ("reproduced", "differs") and effect.look == 1, effect
    assert effect.value is not None and abs(effect.value) > 10, effect
    assert other.verdict != "not measured" and other.look >= 1, other
    assert [h.n for _, h in history][0] == 3 and history[0][1].alpha == sequential.POCOCK[2]
    reps = dict(sqlite3.connect(db).execute(
        "SELECT json_extract(factors, '$.protocol'), max(rep) FROM trials GROUP BY 1").fetchall())
    assert reps["h1"] == 3, reps  # HTTP/1.1's cells serve the decided check alone: no more trials
    assert history[-1][1].asked < history[-1][1].planned == 20
    print([(r.check.label, r.verdict, r.look, r.measured) for r in v.results], history)
