"""The judge's verdicts on planted data: its intervals hold their level at small n (where the
percentile bootstrap they replaced did not), each verdict of a directional check is reachable, a
difference measured as none differs even when its interval excludes 0, and a size is judged only by
an interval narrow enough to tell it apart."""

from __future__ import annotations

import numpy as np
import pytest

from satbench.validate import calibrate, intervals
from satbench.validate.judge import VERDICTS, _directional


def populations(seed: int = 7) -> list[np.ndarray]:
    """Cells shaped like page load times: a skewed spread of 2 to 15 %."""
    rng = np.random.default_rng(seed)
    return [rng.lognormal(0, cv, 50) / np.exp(cv * cv / 2) for cv in (0.02, 0.05, 0.1, 0.15)]


@pytest.mark.parametrize("n", [3, 10])
def test_the_intervals_hold_their_level_on_planted_nulls_and_effects(n: int) -> None:
    """A generous bound that cannot flake (the full table is ``satbench validate --calibrate``)."""
    rows = {r.method: r for r in calibrate.calibrate(populations(), ns=(n,), sims=1500, seed=3)}
    judge, boot = rows["t (judge)"], rows["percentile bootstrap"]
    assert judge.false_positive_pct <= 9.0, judge
    assert judge.coverage_pct >= 88.0, judge
    if n == 3:  # what the old interval did: several times the nominal rate
        assert boot.false_positive_pct >= 12.0, boot


def test_relative_and_mean_intervals() -> None:
    a, b = np.array([90.0, 91, 89, 90]), np.array([100.0, 101, 99, 100])
    v, lo, hi, cells, p = intervals.relative([a], [b])
    assert cells == 1 and lo < v < hi < 0 and abs(v + 10) < 0.2 and p < 1e-4
    assert intervals.relative([np.array([1.0])], [b]) is None  # one trial a side: no interval
    v, lo, hi, _, _ = intervals.relative([a], [b], paired=True)
    assert abs(v + 10) < 0.2 and lo < v < hi
    m, lo, hi = intervals.mean([a, b])
    assert m == 95.0 and lo < 95 < hi
    same = np.array([5.0, 5.0, 5.0])
    assert intervals.relative([same], [same])[1:3] == (0.0, 0.0)


@pytest.mark.parametrize("interval, published, verdict", [
    ((-30, -40, -20), -30, "reproduced"),
    ((-30, -40, -20), -10, "direction reproduced, size differs"),
    ((-30, -60, -2), -30, "direction reproduced, size undecided"),  # wider than the size itself
    ((-0.26, -0.5, -0.1), -20, "differs"),  # excludes 0 but lies within ±5 %: no difference
    ((1, -3, 4), -20, "differs"),
    ((-10, -30, 8), -20, "inconclusive"),
    ((15, 10, 20), -20, "differs"),  # the other direction
    ((-30, -40, -20), None, "reproduced"),
])
def test_each_directional_verdict_is_reachable(interval: tuple[float, float, float], published: float | None,
                                               verdict: str) -> None:
    v, lo, hi = interval
    assert verdict in VERDICTS
    assert _directional(v, lo, hi, -1, published) == verdict


def test_a_pooled_direction_with_a_decisively_reversed_cell_is_not_reproduced() -> None:
    import pandas as pd

    from satbench.validate.claims import Check, Claim
    from satbench.validate.judge import evaluate

    rows = []
    for page, ha, hb in (("a", 100, 150), ("b", 100, 150), ("c", 100, 150), ("d", 130, 100)):  # d reversed
        for i in range(5):
            rows += [{"page": page, "protocol": "h2", "plt_ms": ha + i}, {"page": page, "protocol": "h1",
                                                                          "plt_ms": hb + i}]
    df = pd.DataFrame(rows)
    claim = Claim("X", "X", "HTTP/2 faster", "lower", "plt_ms", {}, ())
    check = Check("h2 against h1", "relative", a={"protocol": "h2"}, b={"protocol": "h1"}, pair=("page",),
                  direction="lower")
    r = evaluate(df, claim, check)
    assert r.value is not None and r.value < 0 and r.high is not None and r.high < 0  # pooled: HTTP/2 lower
    assert r.verdict == "inconclusive" and r.split.startswith("cells reversed: d +") and r.p is not None


def test_holm_turns_a_weak_direction_among_many_checks_inconclusive() -> None:
    from dataclasses import replace

    from satbench.validate import holm_by_study
    from satbench.validate.claims import Check, Claim
    from satbench.validate.judge import Result

    claim = Claim("X", "X", "t", "lower", "plt_ms", {}, ())
    base = Result(claim, Check("c", "relative"), "reproduced", "m", -10, -20, -1, 10, 1, "", 0.04)
    strong = replace(base, p=1e-6)
    out = holm_by_study([base, strong, replace(base, p=0.5, verdict="inconclusive")])
    assert out[0].verdict == "inconclusive" and "Holm across 3 checks" in out[0].split
    assert out[1].verdict == "reproduced" and out[1].p_holm is not None and out[1].p_holm < 0.05


def test_a_published_range_is_judged_at_both_ends() -> None:
    import pandas as pd

    from satbench.validate.claims import Check, Claim
    from satbench.validate.judge import evaluate

    claim = Claim("C1", "C", "10-20 connections", "10-20", "connections_opened", {}, ())
    check = Check("h1, 10 to 20", "value", pair=(), relation="between", published=10, upper=20)
    for values, verdict in (([14, 15, 16], "reproduced"), ([25, 25, 25], "differs"), ([5, 6, 5], "differs"),
                            ([8, 14, 20], "inconclusive")):
        r = evaluate(pd.DataFrame({"connections_opened": values}), claim, check)
        assert r.verdict == verdict, (values, r)


def test_a_trend_over_levels_ranked_by_the_check() -> None:
    import pandas as pd

    from satbench.validate.claims import Check, Claim
    from satbench.validate.judge import evaluate

    rtt = {"fair-lan": 0.95, "fair-lte": 0.9, "fair-wifi": 0.85, "fair-3g": 0.8}
    rows = [{"link": k, "jain": v + 0.005 * i} for k, v in rtt.items() for i in range(5)]
    claim = Claim("B2", "B", "longer RTT, less fair", "", "jain", {}, ())
    falls = Check("falls with RTT", "trend", x="link", order=("fair-lan", "fair-lte", "fair-wifi", "fair-3g"),
                  direction="falls")
    assert evaluate(pd.DataFrame(rows), claim, falls).verdict == "reproduced"
    # Alphabetical order would say nothing of RTT: the check's order is what ranks the links.
    backwards = Check("falls with RTT", "trend", x="link", order=tuple(reversed(falls.order)), direction="falls")
    assert evaluate(pd.DataFrame(rows), claim, backwards).verdict == "differs"
    assert evaluate(pd.DataFrame(rows[:5]), claim, falls).verdict == "not measured"  # one level


def test_a_share_of_a_gain_given_back() -> None:
    a, b, c = np.array([180.0, 182, 178]), np.array([100.0, 101, 99]), np.array([200.0, 202, 198])
    f, lo, hi, cells = intervals.share([a], [b], [c])  # 80 of the 100 gained given back
    assert cells == 1 and abs(f - 0.8) < 1e-9 and lo < 0.8 < hi and hi - lo < 0.2
    assert intervals.share([a], [b], [b]) is None  # no change to give back
    # Two cells, one with almost no change of its own: a ratio of sums is not swung by it.
    f2, lo2, hi2, _ = intervals.share([a, np.array([100.5, 100.4, 100.6])], [b, np.array([100.0, 100.1, 99.9])],
                                      [c, np.array([100.2, 100.1, 100.3])])
    assert 0.75 < f2 < 0.85 and hi2 - lo2 < 0.3


def test_the_tally_sets_full_and_quick_verdicts_side_by_side_and_says_why_they_differ() -> None:
    from satbench.validate.claims import Check, Claim
    from satbench.validate.judge import Result
    from satbench.validate.tally import markdown, why

    claim = Claim("A1", "A", "t", "", "plt_ms", {}, ())
    c1, c2, c3 = Check("one", "relative"), Check("two", "relative"), Check("three", "relative")
    full = [Result(claim, c1, "reproduced", "-30.0 % [-35.0, -25.0]", n=24),
            Result(claim, c2, "reproduced", "-20.0 % [-30.0, -10.0]", n=24),
            Result(claim, c3, "differs", "+5.0 % [+2.0, +8.0]", n=24)]
    quick = [Result(claim, c1, "reproduced", "-31.0 % [-36.0, -26.0]", n=10),
             Result(claim, c2, "inconclusive", "-20.0 % [-45.0, +5.0]", n=10),
             Result(claim, c3, "not measured", "no trials of these cells")]
    assert why(full[0], quick[0]) == ""
    assert why(full[1], quick[1]) == "the quick sets' 10 trials decide less than the full sets' 24"
    assert why(full[2], quick[2]) == "not in the quick sets"
    text = markdown(full, quick, {"A": 3}, {}, ["A"])
    assert "### Study A" in text and "3 full and 0 quick trials left out" in text
    assert "| A1 | one | reproduced: -30.0 % [-35.0, -25.0] (n = 24) | reproduced: -31.0 % [-36.0, -26.0] (n = 10) |  |" \
        in text
    assert "Full presets: 2 reproduced, 1 differs." in text


def test_a_tally_cell_never_breaks_its_table() -> None:
    from satbench.validate.claims import Check, Claim
    from satbench.validate.judge import Result
    from satbench.validate.tally import markdown

    claim = Claim("D1", "D", "t", "", "plt_ms", {}, ())
    check = Check("largest effect", "largest_effect")
    r = Result(claim, check, "inconclusive", "|effect| on the mean [95 % interval]: " + "cc 23.8 % [0.0, 50.6], " * 9,
               n=24)
    row = next(line for line in markdown([r], [r], {}, {}, ["D"]).splitlines() if line.startswith("| D1"))
    assert row.replace("\\|", "").count("|") == 6 and "…" in row, row
