"""A browser's load as the runner stores it: responses the browser finished
without a Resource Timing entry are counted, not passed over; the settings
every load shares are in the trial's environment."""

from __future__ import annotations

from typing import cast

import pytest

from satbench.endpoints import client_class
from satbench.endpoints.base import Client
from satbench.endpoints.browser import LoadResult, judge, outcome
from satbench.experiment import runner
from satbench.experiment.runner import Lab, static_environment, trial_environment
from satbench.model import ClientKind


def resource(url: str, end_ms: float | None, failed: str | None = None, nbytes: int | None = 1000
             ) -> dict[str, object]:
    return {"url": url, "protocol": "h2", "status": 200, "connection": "1", "bytes": nbytes, "failed": failed,
            "start_ms": None if end_ms is None else 1.0, "response_start_ms": None, "end_ms": end_ms}


def test_untimed_responses_are_counted() -> None:
    r = LoadResult(url="https://server.test/p/", protocol="h2", valid=True, invalid_reason=None, plt_ms=100.0,
                   fcp_ms=50.0, resources=[resource("https://server.test/p/", 20.0),
                                           resource("https://server.test/p/a.jpg", 60.0),
                                           resource("https://server.test/p/b.jpg", None),
                                           resource("https://server.test/p/c.jpg", None, failed="net::ERR_FAILED"),
                                           resource("https://server.test/p/d.jpg", None, nbytes=None)])
    m = outcome(r).metrics
    assert m["responses"] == 5
    # b.jpg; c.jpg failed (the load's failures say so) and d.jpg never finished
    assert m["responses_untimed"] == 1


def test_a_failed_request_is_named_in_the_reason() -> None:
    # Chromium's failed request has no response: its URL comes from the request it sent.
    r = LoadResult(url="https://server.test/p/", protocol="h1", valid=True, invalid_reason=None, plt_ms=100.0,
                   fcp_ms=50.0, resources=[{**resource("https://server.test/p/", 20.0), "protocol": "http/1.1"}])
    judge(r, "http/1.1", {"7.12": "net::ERR_TIMED_OUT", "7.13": "net::ERR_FAILED"},
          {"7.12": "https://s3.test/p/279.jpg", "7.13": "https://s3.test/p/280.jpg"})
    assert not r.valid
    assert r.invalid_reason == "2 requests failed; first: net::ERR_TIMED_OUT (https://s3.test/p/279.jpg)"


def test_the_environment_records_each_clients_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # A page-load trial in Firefox says whether its timers were coarsened: the profile's prefs are
    # in env.client_settings, as Chromium's flags are; the loader has none to record.
    def quiet(kind: ClientKind) -> type[Client]:
        return cast(type[Client], type("Quiet", (client_class(kind),), {"version": classmethod(lambda cls: "test")}))

    monkeypatch.setattr(runner, "_binaries", dict)  # no hashing of release binaries, no git, in a unit test
    monkeypatch.setattr(runner, "_git_commit", lambda: None)

    env = static_environment(Lab(client=quiet), {ClientKind.FIREFOX, ClientKind.LOADER})
    assert env["client_settings"]["firefox"]["prefs"]["privacy.reduceTimerPrecision"] is False
    assert "loader" not in env["client_settings"] and "chromium" not in env["client_settings"]
    env = static_environment(Lab(client=quiet), {ClientKind.CHROMIUM})
    assert "--headless" in env["client_settings"]["chromium"]["flags"]
    # Each trial keeps only its own clients' settings: a loader trial of a mixed sweep has none.
    env = static_environment(Lab(client=quiet), {ClientKind.CHROMIUM, ClientKind.LOADER})
    assert trial_environment(env, [ClientKind.LOADER])["client_settings"] == {}
    assert list(trial_environment(env, [ClientKind.CHROMIUM])["client_settings"]) == ["chromium"]


def test_cumulative_layout_shift_takes_the_largest_session_window() -> None:
    from satbench.endpoints.browser import cumulative_layout_shift

    shifts = [{"t": 100, "value": 0.1, "input": False}, {"t": 900, "value": 0.05, "input": False},  # one window
              {"t": 3000, "value": 0.12, "input": False},  # over 1 s later: a new window
              {"t": 3100, "value": 0.5, "input": True}]  # after input: left out
    assert cumulative_layout_shift(shifts) == pytest.approx(0.15)
    # A window ends 5 s after it began, however close its shifts.
    steady = [{"t": t, "value": 0.01, "input": False} for t in range(0, 8000, 500)]
    assert cumulative_layout_shift(steady) == pytest.approx(0.11)  # 0, 500, ..., 5000: 11 shifts
    assert cumulative_layout_shift([]) == 0.0


def test_total_blocking_time_counts_long_tasks_beyond_50_ms_from_fcp_to_the_load_end() -> None:
    from satbench.endpoints.browser import total_blocking_time

    tasks = [{"t": 0, "d": 200},      # ends before FCP (300): nothing
             {"t": 250, "d": 150},    # clipped to 300-400: 100 ms, 50 of it blocking
             {"t": 500, "d": 40},     # short: nothing
             {"t": 600, "d": 120},    # 70 blocking
             {"t": 950, "d": 300}]    # clipped at the load's end (1000): 50 ms, none blocking
    assert total_blocking_time(tasks, fcp_ms=300, end_ms=1000) == pytest.approx(120)
    assert total_blocking_time(tasks, fcp_ms=None, end_ms=1000) is None
    assert total_blocking_time([], fcp_ms=300, end_ms=1000) == 0.0
