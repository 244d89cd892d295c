"""The claims satbench validates against (python/satbench/validate/claims.toml)
are the published ones: every claim of STUDIES.md, its text word for word,
every figure it states among the claim's published figures, and each
check well formed. STUDIES.md is kept in tests/fixtures as it was given
(and compared with ../shared/STUDIES.md where that exists)."""

from __future__ import annotations

import re

import pytest

from satbench.validate import load
from satbench.validate.claims import KINDS

from ..helpers import FIXTURES, REPO

STUDIES = FIXTURES / "STUDIES.md"


def _published() -> dict[str, str]:
    """Each claim of STUDIES.md by its id: the text after '- A1. '."""
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^- ([A-Z]\d+)\. (.+)$", STUDIES.read_text(), re.M)}


def test_the_fixture_is_the_shared_copy() -> None:
    shared = REPO.parent / "shared" / "STUDIES.md"
    if not shared.exists():
        pytest.skip("no ../shared/STUDIES.md beside this checkout")
    assert shared.read_text() == STUDIES.read_text()


def test_every_published_claim_is_in_the_claims_file_word_for_word() -> None:
    _, claims = load()
    published = _published()
    assert set(published) == {c.id for c in claims}, set(published) ^ {c.id for c in claims}
    for c in claims:
        assert c.text == published[c.id], c.id
        assert c.study == c.id[0], c.id


def test_every_figure_the_study_states_is_a_published_figure_of_its_claim() -> None:
    _, claims = load()
    for c in claims:
        stated = {float(x) for x in re.findall(r"(\d+(?:\.\d+)?) %", c.text)}
        checked = {abs(k.published) for k in c.checks if k.published is not None}
        # A percentage the study gives is what a check compares against (B1's "13 s against 7 s"
        # is checked as the ratio it makes, +86 %; its "2.2 times" as +120 %).
        for x in stated - {0.5, 1.0, 2.7}:  # loss rates and the header floor are conditions, not findings
            assert x in checked, (c.id, x, checked)
        assert c.published, c.id


def test_each_check_is_well_formed() -> None:
    studies, claims = load()
    for c in claims:
        for k in c.checks:
            assert k.kind in KINDS
            if k.kind in ("relative", "spread"):
                assert k.a and k.b, (c.id, k.label)
                assert k.published is not None or k.direction in ("lower", "higher"), (c.id, k.label)
            if k.kind == "trend":
                assert k.x and k.direction in ("falls", "rises"), (c.id, k.label)
            if k.kind == "value":
                assert k.published is not None and k.relation in ("about", "at least", "at most", "between"), \
                    (c.id, k.label)
                assert (k.relation == "between") == (k.upper is not None and k.upper > k.published), (c.id, k.label)
            if k.kind == "share":
                assert k.a and k.b and k.c and k.published is not None, (c.id, k.label)
                assert k.relation in ("at least", "at most"), (c.id, k.label)
    for s in studies:
        for f in (*s.quick, *s.full):
            assert (REPO / "experiments" / f).is_file(), f


def test_every_claims_finding_is_a_section_of_the_docs() -> None:
    """A claim's ``finding`` names a heading of docs/ (GitHub's anchor of it), so the validation
    page's links to the causes of differences lead somewhere."""
    import re
    from pathlib import Path

    from satbench.validate.claims import load

    docs = Path(__file__).resolve().parents[2] / "docs"

    def anchors(page: str) -> set[str]:
        heads = re.findall(r"^#+ (.+)$", (docs / page).read_text(), flags=re.M)
        return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}

    for c in load()[1]:
        if c.finding:
            page, _, anchor = c.finding.partition("#")
            assert anchor in anchors(page), f"{c.id}: {c.finding} is no heading of docs/{page}"


def test_the_header_floor_judges_complete_loads_only() -> None:
    """P2: a load that timed out delivered part of its page (its 'overhead' against the whole page is
    no overhead); a valid load below the floor, or one the runner failed for it, fails the check."""
    import pandas as pd

    from satbench.validate.claims import load
    from satbench.validate.judge import evaluate

    p2 = next(c for c in load()[1] if c.id == "P2")
    check = p2.checks[0]
    rows = [{"status": "valid", "reason": None, "overhead_pct": 6.0},
            {"status": "invalid", "reason": "navigation failed: timed out", "overhead_pct": -20.0}]
    assert evaluate(pd.DataFrame(rows), p2, check).verdict == "holds"
    rows.append({"status": "failed", "reason": "harness error: ... below the TCP/IP header floor", "overhead_pct": 1.0})
    assert evaluate(pd.DataFrame(rows), p2, check).verdict == "fails"
    assert evaluate(pd.DataFrame(rows[:1] + [{**rows[0], "overhead_pct": 2.0}]), p2, check).verdict == "fails"


def test_a_check_on_two_metrics_of_the_same_trials_counts_each_trial_once_and_pairs_them() -> None:
    import pandas as pd

    from satbench.validate.claims import Check, Claim
    from satbench.validate.judge import evaluate

    # Five trials, each with an HTTP/1.1 and an HTTP/2 group: HTTP/2 exactly 50 % slower in each,
    # while the trials themselves vary by a factor of three. Paired, the interval is the 50 %;
    # resampled side by side it would spread over the trials' own spread.
    base = [4000.0, 6000.0, 12000.0, 5000.0, 9000.0]
    df = pd.DataFrame({"key": [f"t{i}" for i in range(5)], "link": "fair-lte",
                       "plt_ms_h1": base, "plt_ms_h2": [x * 1.5 for x in base]})
    check = Check(label="h2 against h1", kind="relative", a={"metric": "plt_ms_h2"}, b={"metric": "plt_ms_h1"},
                  pair=(), published=50)
    claim = Claim(id="B1", study="B", text="", published="", metric="plt_ms", where={}, checks=(check,))
    r = evaluate(df, claim, check)
    assert r.n == 5 and r.cells == 1
    assert r.low is not None and r.high is not None
    assert 49.9 < r.low <= r.value <= r.high < 50.1
    assert r.verdict == "reproduced"
    # A trial without one of the two metrics leaves the pairs of the others.
    gap = pd.concat([df, pd.DataFrame([{"key": "t5", "link": "fair-lte", "plt_ms_h1": 3000.0}])], ignore_index=True)
    r = evaluate(gap, claim, check)
    assert r.n == 5 and r.low is not None and 49.9 < r.low


def test_a_spread_check_on_two_metrics_of_the_same_trials_resamples_them_as_pairs() -> None:
    import pandas as pd

    from satbench.validate.claims import Check, Claim
    from satbench.validate.judge import evaluate

    # Eight trials, each with two client groups whose loads always differ by the same factor: their
    # coefficients of variation are equal in every resample of the trials as pairs, so the ratio's
    # interval is 1 exactly. Resampled side by side, the two sides' draws differ and it spreads.
    base = [4000.0, 6000.0, 12000.0, 5000.0, 9000.0, 7000.0, 15000.0, 3000.0]
    df = pd.DataFrame({"key": [f"t{i}" for i in range(8)], "plt_ms_h1": base, "plt_ms_h2": [x * 2 for x in base]})
    check = Check(label="spread", kind="spread", a={"metric": "plt_ms_h2"}, b={"metric": "plt_ms_h1"}, pair=())
    claim = Claim(id="B3", study="B", text="", published="", metric="plt_ms", where={}, checks=(check,))
    r = evaluate(df, claim, check)
    assert r.n == 8 and r.cells == 1
    assert r.low is not None and r.high is not None
    assert 0.999 < r.low <= r.high < 1.001, r.measured
    assert r.verdict == "inconclusive"


def test_the_largest_effect_one_at_a_time_must_be_apart_from_every_other_knob() -> None:
    import pandas as pd

    from satbench.validate.claims import Check, Claim
    from satbench.validate.judge import evaluate

    # BBR halves the load, every time; a larger initial window saves 20 %, every time; slow start
    # after idle off saves 19 % on the mean of three loads, one of them 60 % faster: its interval
    # reaches past BBR's, so BBR being first is not decided (apart from the second is not enough).
    base = {"protocol": "h2", "cc": "cubic", "iw": 10, "ss": 1}
    rows = [{**base, "plt_ms": v} for v in (9990.0, 10000.0, 10010.0)]
    rows += [{**base, "cc": "bbr", "plt_ms": v} for v in (4990.0, 5000.0, 5010.0)]
    rows += [{**base, "iw": 30, "plt_ms": v} for v in (7990.0, 8000.0, 8010.0)]
    rows += [{**base, "ss": 0, "plt_ms": v} for v in (10300.0, 4000.0, 10000.0)]
    df = pd.DataFrame([{**r, "key": f"t{i}"} for i, r in enumerate(rows)])
    check = Check(label="largest", kind="largest_effect", knobs=("cc", "iw", "ss"), knob="cc", a=base)
    claim = Claim(id="D1", study="D", text="", published="", metric="plt_ms", where={}, checks=(check,))
    r = evaluate(df, claim, check)
    assert r.measured.startswith("|effect| on the mean [95 % interval]: cc 50.0 % [") and r.n == 12, r.measured
    assert r.verdict == "inconclusive", r.measured
    steady = pd.concat([df[df["ss"] == 1], df[df["ss"] == 0].assign(plt_ms=[8100.0, 8110.0, 8120.0])])
    assert evaluate(steady, claim, check).verdict == "reproduced"


def test_the_largest_effect_of_a_factorial_design_comes_from_its_main_effects() -> None:
    import itertools

    import pandas as pd

    from satbench.validate.claims import Check, Claim
    from satbench.validate.judge import evaluate

    # A 2^3 design, 2 repetitions: every trial has several knobs off their baseline, so no
    # one-at-a-time comparison exists; the main effects rank the knobs.
    def design(effects: dict[str, float]) -> pd.DataFrame:
        rows = []
        for i, (cc, iw, ss) in enumerate(itertools.product(["cubic", "bbr"], [10, 30], [1, 0])):
            for rep in range(2):
                # (each run's own few ms, so that the residuals are not all alike)
                plt = (10_000 + effects["cc"] * (cc == "bbr") + effects["iw"] * (iw == 30)
                       + effects["ss"] * (ss == 0) + (50 if rep else -50) + i)
                rows.append({"key": f"t{i}-{rep}", "experiment": "full", "protocol": "h2", "link": "net-terrible",
                             "cc": cc, "server.tcp_initcwnd": iw,
                             "server.sysctl.net.ipv4.tcp_slow_start_after_idle": ss, "plt_ms": plt})
        return pd.DataFrame(rows)

    def one_at_a_time(offset: float) -> pd.DataFrame:
        # A quick set: each knob changed alone, 3 trials each, on a page ``offset`` ms slower.
        levels = [("cubic", 10, 1), ("bbr", 10, 1), ("cubic", 30, 1), ("cubic", 10, 0)]
        return pd.DataFrame([{"key": f"q{i}-{rep}", "experiment": "quick", "protocol": "h2", "link": "net-terrible",
                              "cc": cc, "server.tcp_initcwnd": iw, "server.sysctl.net.ipv4.tcp_slow_start_after_idle": ss,
                              "plt_ms": 10_000 + offset + (-3000 if cc == "bbr" else 0) + 10 * rep}
                             for i, (cc, iw, ss) in enumerate(levels) for rep in range(3)])

    knobs = ("cc", "server.tcp_initcwnd", "server.sysctl.net.ipv4.tcp_slow_start_after_idle")
    check = Check(label="largest", kind="largest_effect", knobs=knobs, knob="cc",
                  a={"protocol": "h2", "link": "net-terrible", "cc": "cubic", "server.tcp_initcwnd": 10,
                     "server.sysctl.net.ipv4.tcp_slow_start_after_idle": 1})
    claim = Claim(id="D1", study="D", text="", published="", metric="plt_ms", where={}, checks=(check,))
    r = evaluate(design({"cc": -5000, "iw": -500, "ss": 0}), claim, check)
    assert r.verdict == "reproduced" and r.n == 16 and "main effects" in r.measured, r.measured
    assert r.value is not None and -5100 < r.value < -4900
    assert evaluate(design({"cc": -100, "iw": -2000, "ss": 0}), claim, check).verdict == "differs"
    assert evaluate(design({"cc": -1000, "iw": -990, "ss": 0}), claim, check).verdict == "inconclusive"
    # A one-at-a-time set is judged one at a time; stored beside the factorial one, it does not
    # enter the factorial's model (its page is another).
    quick = evaluate(one_at_a_time(0), claim, check)
    assert quick.measured.startswith("|effect| on the mean") and quick.verdict == "reproduced", quick.measured
    both = evaluate(pd.concat([design({"cc": -5000, "iw": -500, "ss": 0}), one_at_a_time(8000)], ignore_index=True),
                    claim, check)
    assert (both.value, both.n) == (r.value, 16)


def test_an_inconclusive_value_check_says_when_its_cells_lie_on_either_side() -> None:
    """Study C's full room: long polling pooled over HTTP versions and Nagle straddles 'at least 2 RTT'
    only because one cell (HTTP/2 with Nagle) lies above it and the others below; the check says so.
    One population straddling the figure says nothing more."""
    import pandas as pd

    from satbench.validate.claims import Check, Claim
    from satbench.validate.judge import _split, evaluate

    cells = {("h1", True): 1.54, ("h1", False): 1.56, ("h2", True): 1.52, ("h2", False): 2.55}
    rows = [{"scenario": "room", "realtime": "poll", "protocol": p, "nodelay": nd,
             "rt_latency_relay_median_rtt": v + 0.01 * i} for (p, nd), v in cells.items() for i in range(3)]
    check = Check(label="long polling", kind="value", a={"realtime": "poll"}, pair=(), published=2,
                  relation="at least")
    claim = Claim(id="C5", study="C", text="", published="", metric="rt_latency_relay_median_rtt",
                  where={"scenario": "room"}, checks=(check,))
    r = evaluate(pd.DataFrame(rows), claim, check)
    assert (r.verdict, r.n) == ("inconclusive", 12)
    assert r.split.startswith("cells apart: 9 trials below 2")
    assert "3 trials above 2 (2.55-2.57: protocol=h2 nodelay=False)" in r.split
    # Cells that straddle the figure alike (chance, not pooling): nothing to tell apart, although
    # some cell's trials all lie on one side.
    noise = [1.7, 2.0, 2.3, 1.8, 1.95, 2.25, 1.65, 2.05, 2.35, 1.5, 1.6, 1.9]
    alike = pd.DataFrame([{**row, "rt_latency_relay_median_rtt": v} for row, v in zip(rows, noise)])
    r = evaluate(alike, claim, check)
    assert (r.verdict, r.split) == ("inconclusive", "")
    # A cell of one trial is no cell; a factor whose levels are tables (clients) groups as well.
    lone = pd.DataFrame([*[{**row, "clients": {"h1": 1}} for row in rows if row["protocol"] == "h1"],
                         {**rows[-1], "clients": {"h2": 1}}, *[{**row, "clients": {"h1": 1}} for row in rows[6:8]]])
    assert _split(lone, "rt_latency_relay_median_rtt", 2.0, ()) == ""
    assert _split(lone.drop(columns="clients"), "rt_latency_relay_median_rtt", 2.0, ()) == ""
    assert _split(pd.DataFrame(rows), "rt_latency_relay_median_rtt", 2.0, ()).startswith("cells apart")
    # One cell wholly below and one wholly above, but so noisy that they may share a mean (ANOVA p = 0.15).
    noisy = pd.DataFrame([{"protocol": p, "rt_latency_relay_median_rtt": v}
                          for p, vs in (("h1", (1.0, 1.9, 1.95)), ("h2", (2.05, 2.1, 3.0))) for v in vs])
    assert _split(noisy, "rt_latency_relay_median_rtt", 2.0, ()) == ""
    assert _split(noisy.assign(rt_latency_relay_median_rtt=[1.5, 1.51, 1.52, 2.5, 2.51, 2.52]),
                  "rt_latency_relay_median_rtt", 2.0, ()).startswith("cells apart: 3 trials below 2")
