"""Sequential repetitions with real trials: the loader on a 100 KB page over a
wire of 5 ms and one of 50 ms. The longer wire's loads are several times
slower: a large effect, set by physics rather than by the machine's load,
decided at the first look; the short wire's cells stopped at 3 repetitions
of the 5 the set plans; every check decided by the cap, and fewer trials run
than planned. (HTTP/3 against HTTP/1.1 over 20 ms, 28 % apart on a quiet
machine, was once this test's effect: on a busy one it came out undecided.)"""

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
        '[factors]\nlink = "wire"\n"link.delay_ms" = [5, 50]\npage = "uniform-100k"\nclient = "loader"\n'
        'protocol = "h1"\ncc = ["cubic", "bbr"]\n')
    monkeypatch.setattr(satbench.validate, "sets_of", lambda studies, quick: [tmp_path / "experiments" / "x.toml"])
    db = tmp_path / "r.sqlite"

    def run_one(f: Path, exp: spec.Experiment, db: Path) -> None:
        s = runner.run(exp, db, progress=lambda _: None, pages_root=tmp_path / "pages")
        assert s.invalid == 0 and s.failed == 0, s.reasons

    claim = Claim("X1", "X", "a longer wire is slower", "", "plt_ms", {}, (
        Check("50 ms against 5 ms", "relative", a={"link.delay_ms": 50}, b={"link.delay_ms": 5}, pair=("cc",),
              direction="higher"),
        Check("bbr against cubic, 50 ms", "relative", a={"link.delay_ms": 50, "cc": "bbr"},
              b={"link.delay_ms": 50, "cc": "cubic"}, pair=(), direction="lower"),
    ))
    v, history = sequential.run([StudySets("X", "a test study", ("x.toml",), ())], True, db, run_one, [claim])
    effect, other = v.results
    assert effect.verdict in ("reproduced", "differs") and effect.look == 1, effect
    assert effect.value is not None and effect.value > 100, effect
    assert other.verdict != "not measured" and other.look >= 1, other
    assert [h.n for _, h in history][0] == 3 and history[0][1].alpha == sequential.POCOCK[2]
    reps = dict(sqlite3.connect(db).execute(
        "SELECT json_extract(factors, '$.\"link.delay_ms\"'), max(rep) FROM trials GROUP BY 1").fetchall())
    assert reps[5] == 3, reps  # the short wire's cells serve the decided check alone: no more trials
    assert history[-1][1].asked < history[-1][1].planned == 20
    print([(r.check.label, r.verdict, r.look, r.measured) for r in v.results], history)
