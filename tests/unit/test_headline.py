"""The report's answer: every combination with its medians and intervals, HTTP/3 named by its stack
(never pooled), the fastest marked, and a sentence per factor that says what the trials decide."""

from __future__ import annotations

import pandas as pd

from satbench.results import headline


def trials(cells: dict[tuple[str, str, str], list[float]]) -> pd.DataFrame:
    rows = [{"protocol": p, "quic_stack": q, "cc": cc, "plt_ms": x, "fcp_ms": x / 2, "lcp_ms": x * 0.8}
            for (p, q, cc), xs in cells.items() for x in xs]
    return pd.DataFrame(rows)


def test_stacks_are_never_pooled_and_the_fastest_is_marked() -> None:
    df = trials({("h2", "quinn", "cubic"): [4000, 4100, 4050, 4020, 4080],
                 ("h3", "quinn", "cubic"): [3000, 3050, 3020, 3010, 3040],
                 ("h3", "quiche", "cubic"): [6000, 6100, 6050, 6020, 6080]})
    df2, keys = headline.labelled(df, ["protocol", "quic_stack"])
    assert keys == ["protocol"] and set(df2["protocol"]) == {"h2", "h3 (quinn)", "h3 (quiche)"}
    head, rows = headline.table(df2, keys)
    assert head[:2] == ["protocol", "trials"] and len(rows) == 3
    marked = [r for r in rows if str(r[0]).startswith("★")]
    assert marked == [r for r in rows if "h3 (quinn)" in str(r[0])] and marked[0][2].startswith("3020 [")
    said = headline.sentences(df2, keys)
    assert len(said) == 1 and said[0].startswith("protocol: h3 (quinn) loaded fastest, faster than h2 by 25 %")
    assert "(5 and 5 trials)" in said[0] and "h3 (quiche) by 50.1 % [49.3, 50.7]" in said[0]


def test_too_few_trials_or_overlapping_ones_decide_nothing() -> None:
    few = trials({("h2", "quinn", "cubic"): [4000, 4100, 4050], ("h1", "quinn", "cubic"): [5000, 5100, 5050]})
    df, keys = headline.labelled(few, ["protocol"])
    (s,) = headline.sentences(df, keys)
    assert "cannot decide" in s and "needs 4 against 4" in s
    mixed = trials({("h2", "quinn", "cubic"): [4000, 4100, 4050, 3900, 4200],
                    ("h1", "quinn", "cubic"): [4010, 4090, 4060, 3950, 4150]})
    df, keys = headline.labelled(mixed, ["protocol"])
    (s,) = headline.sentences(df, keys)
    assert s.startswith("protocol: the trials do not decide;") and "p = " in s


def test_a_factor_is_judged_within_each_combination_of_the_others() -> None:
    df = trials({("h2", "quinn", "cubic"): [4000, 4010, 4020, 4030], ("h2", "quinn", "bbr"): [3000, 3010, 3020, 3030],
                 ("h1", "quinn", "cubic"): [5000, 5010, 5020, 5030], ("h1", "quinn", "bbr"): [5500, 5510, 5520, 5530]})
    df2, keys = headline.labelled(df, ["protocol", "cc"])
    said = headline.sentences(df2, keys)
    assert "cc with protocol h1: cubic loaded fastest" in " ".join(said)
    assert "cc with protocol h2: bbr loaded fastest" in " ".join(said)
