"""Designs and the analysis of parameter studies: a fractional factorial's
columns are balanced and orthogonal and its aliasing is the textbook's; the
analysis recovers planted effects from synthetic data and does not call a
null knob significant after correction."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

from satbench.experiment import designs, spec
from satbench.experiment.spec import ExperimentError
from satbench.results.analysis import benjamini_hochberg, factorial_effects, holm, knob_effects, tuned_against_default


@pytest.mark.parametrize("k, p", sorted(designs.TABLE))
def test_tabled_designs_are_balanced_and_orthogonal(k: int, p: int) -> None:
    d = designs.fractional(k, p)
    x = np.array(d.runs)
    assert x.shape == (2 ** (k - p), k)
    assert (x.sum(axis=0) == 0).all()  # balanced: as many + as - in every column
    assert (x.T @ x == len(x) * np.eye(k)).all()  # orthogonal main-effect columns
    assert len({tuple(r) for r in d.runs}) == len(d.runs)


def test_the_aliasing_of_a_known_design() -> None:
    # 2^(4-1) with D = ABC: I = ABCD, resolution IV; main effects clear of two-factor interactions,
    # which are aliased in pairs.
    d = designs.fractional(4, 1, ["D=ABC"])
    assert d.defining_relation() == ["ABCD"] and d.resolution == 4
    a = d.aliases()
    assert a["A"] == [] and a["AB"] == ["CD"] and a["AC"] == ["BD"] and a["AD"] == ["BC"]
    # 2^(5-2) with D = AB, E = AC: I = ABD = ACE = BCDE, resolution III.
    d = designs.fractional(5, 2, ["D=AB", "E=AC"])
    assert d.defining_relation() == ["ABD", "ACE", "BCDE"] and d.resolution == 3
    assert "BD" in d.aliases()["A"] and "CE" in d.aliases()["A"]
    x = np.array(d.runs)
    assert (x[:, 3] == x[:, 0] * x[:, 1]).all() and (x[:, 4] == x[:, 0] * x[:, 2]).all()


def test_bad_generators_are_refused() -> None:
    with pytest.raises(designs.DesignError):
        designs.fractional(4, 1, ["D=D"])
    with pytest.raises(designs.DesignError):
        designs.fractional(4, 1, ["A=BC"])
    assert designs.for_resolution(6, 4).runs and designs.for_resolution(6, 4).resolution == 4


def test_a_design_in_an_experiment_file() -> None:
    factors = {"link": ["wire", "lan"], "protocol": "h2", "page": "blank", "client": "loader",
               "server.tfo": [False, True], "server.pacing": [True, False], "server.resumption": [True, False],
               "server.zero_rtt": [True, False]}
    e = spec.build("frac", factors, seed=1, design={"kind": "fractional", "resolution": 4, "block": "link"})
    assert e.design is not None and e.design.fractional is not None
    assert e.design.fractional.k == 4 and e.design.fractional.p == 1
    assert len(e.trials) == 2 * 8  # two networks, each the half fraction
    order = [t.factors["link"] for t in e.run_order().trials]
    assert order == sorted(order, key=order.index)  # block by block
    assert any("defining relation: I = ABCD" in line for line in e.design.describe())
    with pytest.raises(ExperimentError, match="two levels"):
        spec.build("bad", {**factors, "server.sndbuf": [1, 2, 3]}, design={"kind": "fractional",
                                                                           "factors": ["server.sndbuf"]})
    o = spec.build("ofat", factors, design={"kind": "ofat", "baseline": {"server.pacing": False}, "block": "link"})
    assert len(o.trials) == 2 * 5  # the baseline and one change of each of the four knobs, per network
    assert sum(t.factors["server.pacing"] is False for t in o.trials) == 2 * 4


def _synthetic(seed: int = 4) -> pd.DataFrame:
    """Two networks, three knobs, 6 repetitions: knob A adds 300 ms everywhere, B nothing,
    C subtracts 100 ms on 'geo' only."""
    rng = np.random.default_rng(seed)
    rows = []
    for net, a, b, c, _rep in itertools.product(["lan", "geo"], [0, 1], [0, 1], [0, 1], range(6)):
        plt = 1000 + 300 * a - (100 * c if net == "geo" else 0) + rng.normal(0, 30)
        rows.append({"link": net, "A": a, "B": b, "C": c, "plt_ms": plt, "protocol": "h2"})
    return pd.DataFrame(rows)


def test_the_analysis_recovers_planted_effects() -> None:
    df = _synthetic()
    eff = {(e.network, e.knob): e for e in knob_effects(df, ["A", "B", "C"])}
    for net in ("lan", "geo"):
        a = eff[(net, "A")]
        assert a.ci_low <= 300 <= a.ci_high and a.significant
        assert not eff[(net, "B")].significant  # the null knob, after Holm's correction
    assert eff[("geo", "C")].significant and eff[("geo", "C")].ci_low <= -100 <= eff[("geo", "C")].ci_high
    assert not eff[("lan", "C")].significant
    ranked = knob_effects(df, ["A", "B", "C"])
    assert ranked[0].knob == "A"
    fac = {(e.network, e.term): e for e in factorial_effects(df, ["A", "B", "C"])}
    assert fac[("lan", "A")].ci_low <= 300 <= fac[("lan", "A")].ci_high and fac[("lan", "A")].p_holm < 0.001
    assert fac[("geo", "C")].ci_low <= -100 <= fac[("geo", "C")].ci_high
    assert fac[("lan", "B")].p_holm > 0.05 and fac[("lan", "A:B")].p_holm > 0.05


def test_multiple_comparison_corrections() -> None:
    ps = [0.01, 0.04, 0.03, 0.5]
    assert holm(ps) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert benjamini_hochberg(ps) == pytest.approx([0.04, 0.0533333, 0.0533333, 0.5])


def test_tuned_against_default() -> None:
    df = _synthetic()
    h3 = df[(df.A == 0) & (df.B == 0) & (df.C == 0)].assign(protocol="h3", plt_ms=lambda d: d.plt_ms - 50)
    t = {(x.network, x.protocol): x for x in tuned_against_default(pd.concat([df, h3]), ["A", "B", "C"])}
    geo = t[("geo", "h2")]
    assert "A=0" in geo.tuned_setting and "C=1" in geo.tuned_setting
    assert geo.tuned_median < geo.default_median and geo.beats["h3"][0] < geo.default_median
