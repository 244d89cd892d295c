"""`--parallel N` on one machine: refused where N testbeds would not measure as one at a time does
(the cores each testbed gets against what its heaviest client needs; docs/benchmarks.md,
"Testbeds at once"). No root needed: the plan only."""

from __future__ import annotations

from satbench.experiment import plan, spec


def _trials(**factors):
    base = {"link": "geo", "page": "uniform-500k"} | ({} if "clients" in factors else {"protocol": "h2"})
    return spec.build("t", base | factors, repetitions=1, seed=1, timeout_s=60).trials


def test_a_loader_or_curl_study_may_run_one_testbed_per_core():
    assert plan.parallel_problems(_trials(client="loader"), 2, 2) == []
    assert plan.parallel_problems(_trials(client="curl", page="blank"), 2, 2) == []


def test_a_browser_study_gets_the_cores_a_browser_trial_needs():
    problems = plan.parallel_problems(_trials(client="chromium"), 2, 2)
    assert bool(problems) == (plan.CORES_PER_TESTBED["browser"] > 1)
    # With enough cores for each, it runs.
    assert plan.parallel_problems(_trials(client="chromium"), 2, 2 * plan.CORES_PER_TESTBED["browser"]) == []


def test_a_population_too_heavy_for_a_testbeds_share_is_refused_naming_the_limit():
    problems = plan.parallel_problems(_trials(client="chromium", clients={"h1": 3, "h2": 3}), 2, 2)
    assert problems and "2 testbeds at once leave each 1 core(s)" in problems[0]
    assert "Chromium" in problems[0]
