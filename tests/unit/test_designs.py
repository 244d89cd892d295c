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
    # Signed so that the default setting (every factor at its first level) is a run of the design.
    assert (-1,) * k in d.runs


def test_every_factor_count_has_a_design_of_the_highest_resolution() -> None:
    # The highest resolution a 2^(k-p) design can have (Box, Hunter and Hunter; Montgomery, table 8-14).
    best = {(8, 1): 8, (9, 2): 6, (10, 2): 6, (10, 3): 5, (11, 3): 6, (11, 4): 5, (10, 5): 4, (9, 4): 4}
    for (k, p), res in best.items():
        assert designs.fractional(k, p).resolution == res, (k, p)
    # So screening 9 factors at resolution V takes 2^(9-2) = 128 runs, not the full 512.
    assert len(designs.for_resolution(9, 5).runs) == 128
    assert len(designs.for_resolution(10, 5).runs) == 128 and len(designs.for_resolution(11, 5).runs) == 128
    for k in range(3, 12):
        assert designs.for_resolution(k, 3).p >= 1  # something smaller than the full factorial


def test_a_negated_generator_is_the_other_half() -> None:
    d, other = designs.fractional(4, 1, ["D=ABC"]), designs.fractional(4, 1, ["D=-ABC"])
    assert set(d.runs).isdisjoint(other.runs) and len(set(d.runs) | set(other.runs)) == 16
    assert other.defining_relation() == ["ABCD"] and other.aliases() == d.aliases()


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
               "server.quic_initcwnd": [10, 32], "server.pacing": [True, False], "server.sndbuf": [None, 262144],
               "server.rcvbuf": [None, 262144], "quic_stack": "quiche"}  # quiche's pacer can be switched off
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
    for net, a, b, c, rep in itertools.product(["lan", "geo"], [0, 1], [0, 1], [0, 1], range(1, 7)):
        plt = 1000 + 300 * a - (100 * c if net == "geo" else 0) + rng.normal(0, 30)
        rows.append({"link": net, "A": a, "B": b, "C": c, "plt_ms": plt, "protocol": "h2", "rep": rep})
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
    assert fac[("lan", "A")].ci_low <= 300 <= fac[("lan", "A")].ci_high and fac[("lan", "A")].p_adj < 0.001
    assert fac[("geo", "C")].ci_low <= -100 <= fac[("geo", "C")].ci_high
    assert fac[("lan", "B")].p_adj > 0.05 and fac[("lan", "A:B")].p_adj > 0.05


def test_multiple_comparison_corrections() -> None:
    ps = [0.01, 0.04, 0.03, 0.5]
    assert holm(ps) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert benjamini_hochberg(ps) == pytest.approx([0.04, 0.0533333, 0.0533333, 0.5])


def test_tuned_against_default() -> None:
    df = _synthetic()
    h3 = df[(df.A == 0) & (df.B == 0) & (df.C == 0)].assign(protocol="h3", plt_ms=lambda d: d.plt_ms - 50)
    t = {(x.network, x.protocol): x for x in tuned_against_default(pd.concat([df, h3]), ["A", "B", "C"],
                                                                    baseline={"A": 0, "B": 0, "C": 0})}
    geo = t[("geo", "h2")]
    assert "A=0" in geo.tuned_setting and "C=1" in geo.tuned_setting and geo.basis == "observed best cell"
    assert geo.tuned < geo.default_median and geo.beats["h3"].default_median < geo.default_median
    # Chosen on repetitions 1, 3, 5 and judged on 2, 4, 6: three trials of each side.
    assert geo.judged == "chosen on repetitions 1, 3, 5, judged on 2, 4, 6"
    assert geo.n_tuned == geo.n_default == 3
    assert geo.improves is not None and geo.improves.diff < 0


def _fractional(seed: int = 7) -> tuple[pd.DataFrame, dict[str, object]]:
    """A 2^(6-2) screening design (resolution IV) per network and protocol, 6
    repetitions, in a shuffled order whose first rows are not at the
    baseline. Planted: A (levels 10 -> 30) adds 300 ms; B ("on" -> "off")
    saves 400 ms; C saves 100 ms on geo only; D, E, F nothing. HTTP/3's
    default is 150 ms faster than HTTP/2's on geo and 600 ms on lan."""
    d = designs.fractional(6, 2)
    levels = {"A": [10, 30], "B": ["on", "off"], "C": [0, 1], "D": [0, 1], "E": [0, 1], "F": [0, 1]}
    rng = np.random.default_rng(seed)
    rows = []
    for net, proto, run, rep in itertools.product(["lan", "geo"], ["h2", "h3"], d.runs, range(1, 7)):
        f = {name: levels[name][0 if code < 0 else 1] for name, code in zip("ABCDEF", run)}
        if proto == "h3" and any(v != levels[k][0] for k, v in f.items()):
            continue  # HTTP/3 runs at its defaults only
        plt = 2000 + 300 * (f["A"] == 30) - 400 * (f["B"] == "off") - (100 * f["C"] if net == "geo" else 0)
        if proto == "h3":
            plt -= 150 if net == "geo" else 600
        rows.append({"link": net, "protocol": proto, **f, "plt_ms": plt + rng.normal(0, 40), "rep": rep})
    df = pd.DataFrame(rows).sample(frac=1, random_state=3).reset_index(drop=True)
    return df, {k: v[0] for k, v in levels.items()}


def test_main_effects_of_a_shuffled_fractional_design() -> None:
    df, base = _fractional()
    assert df.iloc[0]["A"] == 30 or df.iloc[0]["B"] == "off"  # the data do not start at the baseline
    h2 = df[df.protocol == "h2"]
    fac = {(e.network, e.term): e for e in factorial_effects(h2, list("ABCDEF"), baseline=base)}
    for net in ("lan", "geo"):
        a, b = fac[(net, "A")], fac[(net, "B")]
        assert (a.minus, a.plus, b.minus, b.plus) == ("10", "30", "on", "off")
        assert a.ci_low <= 300 <= a.ci_high and a.significant
        assert b.ci_low <= -400 <= b.ci_high and b.significant and b.rank == 1 and a.rank == 2
        for null in "DEF":
            assert not fac[(net, null)].significant, fac[(net, null)]
    assert fac[("geo", "C")].significant and fac[("geo", "C")].ci_low <= -100 <= fac[("geo", "C")].ci_high
    assert not fac[("lan", "C")].significant
    # Protocols are cells of their own, never pooled.
    both = factorial_effects(df, list("ABCDEF"), others=["protocol"], baseline=base)
    assert {e.within for e in both} == {"protocol=h2"}  # HTTP/3 varies nothing here


def test_tuned_against_default_from_a_fractional_design() -> None:
    df, base = _fractional()
    t = {(x.network, x.protocol): x for x in tuned_against_default(df, list("ABCDEF"), baseline=base,
                                                                    fractional=True)}
    geo, lan = t[("geo", "h2")], t[("lan", "h2")]
    for x in (geo, lan):
        assert "A=10" in x.tuned_setting and "B=off" in x.tuned_setting
        # The all-baseline run is in the design: its three judging repetitions (2, 4, 6).
        assert x.n_default == 3 and abs(x.default_median - 2000) < 100
    assert "C=1" in geo.tuned_setting and geo.basis == "main-effects model"
    # The model's mean, within its own error and the optimism of picking the better level of the null knobs.
    assert abs(geo.tuned - 1500) < 60 and abs(lan.tuned - 1600) < 60 and geo.tuned_low < geo.tuned < geo.tuned_high
    # Tuned HTTP/2 (about -500 / -400 ms) beats HTTP/3's default on geo (-150 ms), not on lan (-600 ms).
    g, la = geo.beats["h3"], lan.beats["h3"]
    assert g.beats and g.diff_high < 0 and abs(g.diff + 350) < 80
    assert not la.beats and la.diff > 100


def _nulls(seed: int, reps: int, fractional: bool) -> tuple[pd.DataFrame, list[str], dict[str, object]]:
    """Ten knobs that do nothing, HTTP/2 and HTTP/3 alike: PLT 1000 ms, sd 100.
    One factor at a time (the baseline and each knob changed alone), or a 2^(10-6)
    screening design; ``reps`` repetitions of every run."""
    rng = np.random.default_rng(seed)
    knobs = [f"k{i}" for i in range(10)]
    if fractional:
        runs = [[0 if c < 0 else 1 for c in run] for run in designs.fractional(10, 6).runs]
        if [0] * 10 not in runs:
            runs.append([0] * 10)
    else:
        runs = [[0] * 10] + [[int(i == j) for i in range(10)] for j in range(10)]
    rows = []
    for proto, run, rep in itertools.product(["h2", "h3"], runs, range(1, reps + 1)):
        if proto == "h3" and any(run):
            continue  # HTTP/3 at its defaults
        rows.append({"link": "geo", "protocol": proto, **dict(zip(knobs, run)), "rep": rep,
                     "plt_ms": 1000 + rng.normal(0, 100)})
    return pd.DataFrame(rows), knobs, dict.fromkeys(knobs, 0)


@pytest.mark.parametrize("fractional", [False, True])
def test_tuned_verdicts_keep_their_false_positive_rate_under_planted_nulls(fractional: bool) -> None:
    # Nothing is better than the default: every "tuned HTTP/2 beats HTTP/3's default" and every
    # "tuned beats its own default" is a false positive. Judged out of sample (8 repetitions:
    # chosen on 4, judged on 4), each verdict fires in at most its 5 % nominal share of 200
    # seeded studies; chosen and judged in the same trials, far more often.
    rates: dict[object, list[int]] = {}
    for seed in range(200):
        df, knobs, base = _nulls(seed, 8, fractional)
        for split in ("repetition", None):
            for t in tuned_against_default(df, knobs, baseline=base, fractional=fractional, split=split):
                if t.protocol != "h2":
                    continue
                for kind, b in [("other", x) for x in t.beats.values()] + [("own", t.improves)]:
                    if b is not None:
                        rates.setdefault((split, kind), []).append(int(b.beats))
    share = {k: sum(v) / len(v) for k, v in rates.items()}
    assert all(len(v) >= 150 for v in rates.values()), {k: len(v) for k, v in rates.items()}
    assert share[("repetition", "other")] <= 0.05 and share[("repetition", "own")] <= 0.05, share
    assert share[(None, "other")] > 0.10 and share[(None, "own")] > 0.10, share  # the bias the split removes
