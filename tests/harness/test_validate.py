"""The validation's judgement on trials of the fake lab: claims evaluated
from a results database, a verdict per check, and a physical check that
fails when a load beat its lower bound (the command then exits non-zero)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from satbench.experiment import runner, spec
from satbench.validate import StudySets, judge, load, write_html
from satbench.validate.claims import Check, Claim

from . import fakes


def _run(db: Path, too_fast: bool = False) -> None:
    links = ["geo"] if too_fast else ["lan", "geo"]  # the fake's too-fast load is one RTT: below GEO's bound
    e = spec.build("validate-x", {"link": links, "protocol": ["h1", "h2"], "page": "blank",
                                  "client": "loader"}, repetitions=3, seed=1)
    fakes.FakeLoader.too_fast_next = too_fast
    try:
        runner.run(e, db, progress=lambda _: None, lab=fakes.lab(), pages_root=db.parent / "pages")
    finally:
        fakes.FakeLoader.too_fast_next = False


STUDY = StudySets("X", "a test study", ("x.toml",), ())
def _sets(db: Path) -> list[tuple[str, str, frozenset[str]]]:
    import sqlite3

    keys = frozenset(k for (k,) in sqlite3.connect(db).execute("SELECT key FROM trials"))
    return [("validate-x", "experiments/x.toml", keys)]


def test_claims_are_judged_from_the_stored_trials(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    _run(db)
    # The fake loader takes 20 ms longer over HTTP/1.1: HTTP/2 is lower, by 20 ms of 6 RTTs (most of
    # the LAN's time, under 1 % of GEO's).
    claim = Claim("X1", "X", "HTTP/2 faster than HTTP/1.1", "lower", "plt_ms", {}, (
        Check("h2 against h1, LAN", "relative", a={"protocol": "h2", "link": "lan"},
              b={"protocol": "h1", "link": "lan"}, direction="lower"),
        Check("h2 against h1, LAN, -10 %", "relative", a={"protocol": "h2", "link": "lan"},
              b={"protocol": "h1", "link": "lan"}, published=-10),
        Check("h2 slower", "relative", a={"protocol": "h2"}, b={"protocol": "h1"}, pair=("link",),
              direction="higher"),
        Check("h2 against h1, GEO: as good as none", "relative", a={"protocol": "h2", "link": "geo"},
              b={"protocol": "h1", "link": "geo"}, direction="lower"),
        Check("nothing of HTTP/3", "relative", a={"protocol": "h3"}, b={"protocol": "h1"}, direction="lower"),
    ))
    _, claims = load()
    physical = [c for c in claims if c.study == "P"]
    v = judge(db, [STUDY, StudySets("P", "physics", (), ())], [claim, *physical], _sets(db))
    verdicts = [r.verdict for r in v.results]
    assert verdicts == ["reproduced", "direction reproduced, size differs", "differs", "differs", "not measured",
                        "holds", "holds"], [(r.check.label, r.measured, r.verdict) for r in v.results]
    assert "-0.6 %" in v.results[3].measured  # excludes 0, within ±5 %: a difference measured as none
    assert v.results[0].n == 6 and not v.failed
    page = write_html(v, tmp_path / "out", "satbench validate X")
    assert "HTTP/2 faster than HTTP/1.1" in page.read_text() and "direction reproduced" in page.read_text()


def test_a_load_below_its_bound_fails_the_physical_check(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    _run(db, too_fast=True)
    _, claims = load()
    p1 = next(c for c in claims if c.id == "P1")
    v = judge(db, [replace(STUDY), StudySets("P", "physics", (), ())], [p1], _sets(db))
    (r,) = v.results
    assert r.verdict == "fails" and r.measured == "1 of 6 loads below their lower bound" and v.failed


def test_sequential_repetitions_stop_early_on_a_large_effect_and_run_to_the_cap_on_a_null(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP/1.1 takes 20 ms more than HTTP/2 here (a large effect: decided at the first look, its
    HTTP/1.1 cells stop at 3 repetitions); congestion control changes nothing in the fake lab (a null:
    its HTTP/2 cells run to the cap of 10, still undecided there)."""
    import sqlite3

    import satbench.validate
    from satbench.validate import sequential

    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "x.toml").write_text(
        '[experiment]\nname = "seq-x"\nrepetitions = 10\nseed = 1\n'
        '[factors]\nlink = "lan"\npage = "blank"\nclient = "loader"\nprotocol = ["h1", "h2"]\ncc = ["cubic", "bbr"]\n')
    monkeypatch.setattr(satbench.validate, "sets_of", lambda studies, quick: [tmp_path / "experiments" / "x.toml"])
    monkeypatch.setattr(fakes.FakeLoader, "noise_cv", 0.15)
    db = tmp_path / "r.sqlite"

    def run_one(f: Path, exp: spec.Experiment, db: Path) -> None:
        runner.run(exp, db, progress=lambda _: None, lab=fakes.lab(), pages_root=tmp_path / "pages")

    claim = Claim("X1", "X", "HTTP/2 faster; congestion control no matter", "", "plt_ms", {}, (
        Check("h2 against h1", "relative", a={"protocol": "h2"}, b={"protocol": "h1"}, pair=("cc",),
              direction="lower"),
        Check("bbr against cubic", "relative", a={"protocol": "h2", "cc": "bbr"},
              b={"protocol": "h2", "cc": "cubic"}, pair=(), direction="lower"),
    ))
    v, history = sequential.run([STUDY], True, db, run_one, [claim])
    effect, null = v.results
    assert (effect.verdict, effect.look) == ("reproduced", 1), effect
    assert null.verdict == "inconclusive" and null.look == 3, null  # looks at 3, 5 and 10 (the cap)
    assert [h.n for _, h in history] == [3, 5, 10] and history[0][1].alpha == sequential.POCOCK[3]
    reps = dict(sqlite3.connect(db).execute(
        "SELECT json_extract(factors, '$.protocol'), max(rep) FROM trials GROUP BY 1").fetchall())
    assert reps == {"h1": 3, "h2": 10}, reps
    assert history[-1][1].asked == 2 * 3 + 2 * 10 < history[-1][1].planned == 40
