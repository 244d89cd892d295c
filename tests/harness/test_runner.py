"""The runner, the store and the report against a fake lab: the whole
sweep's logic (resolved links, keys, run order, resume, failures, the
judgement of what the server did, migrations) without root, in seconds."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from satbench.errors import InputError, TestbedError
from satbench.experiment import runner, spec
from satbench.model import TrialStatus
from satbench.results.read import Results
from satbench.results.report import write_report

from ..helpers import FIXTURES
from . import fakes


def exp(name: str = "fake", **factors: object) -> spec.Experiment:
    f: dict[str, object] = {"link": "wire", "link.delay_ms": [10, 50], "protocol": ["h1", "h2"],
                            "page": "uniform-100k", "client": "loader"}
    f.update(factors)
    return spec.build(name, f, repetitions=2, seed=5, timeout_s=30)


def events(e: spec.Experiment, db: Path, **kw: object) -> tuple[runner.RunSummary, list[runner.Event]]:
    seen: list[runner.Event] = []
    s = runner.run(e, db, progress=seen.append, lab=fakes.lab(), pages_root=db.parent / "pages",
                   **kw)  # type: ignore[arg-type]
    return s, seen


@pytest.fixture(autouse=True)
def _reset() -> None:
    fakes.FakeLoader.fail_next = None
    fakes.FakeLoader.too_fast_next = False
    fakes.FakeLoader.loads.clear()
    fakes.FakeServer.report_cc = None
    fakes.FakeServer.die = None
    fakes.FakeTestbed.built.clear()
    fakes.FakeTestbed.next_faults = []


def test_every_trial_is_stored_once_with_its_link(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    s, seen = events(exp(), db)
    assert (s.ran, s.valid, s.failed) == (8, 8, 0)
    done = [e for e in seen if isinstance(e, runner.TrialDone)]
    assert [e.done for e in done] == list(range(1, 9)) and done[-1].eta_s == pytest.approx(0, abs=1e-9)
    with Results(db) as r:
        df = r.trials("fake")
        links = r.links()
    assert len(df) == 8 and df["key"].is_unique and set(df["status"]) == {"valid"}
    # Two links (10 and 50 ms one way), stored once each, and each trial names its own.
    assert len(links) == 2 == df["link_hash"].nunique()
    for _, row in df.iterrows():
        spec_json = links[row["link_hash"]]
        assert spec_json["derived"]["forward"]["min_delay_ms"] == row["link.delay_ms"]
        # The fake loader's PLT is 6 base RTTs + 10 ms (+20 over HTTP/1.1): the link the trial ran is the one it was given.
        assert row["plt_ms"] == pytest.approx(6 * 2 * row["link.delay_ms"] + 10 + (20 if row["protocol"] == "h1" else 0))
    # Seeds: the emulator's seed derives from the order seed and the trial's key.
    assert {b.seed for b in fakes.FakeTestbed.built} == set(df["seed"])


def test_resume_runs_only_what_is_missing_and_keeps_the_order(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    e = exp()
    order = [t.key for t in e.run_order().trials]
    fakes.FakeLoader.fail_next = TestbedError("the emulator died")
    s, _ = events(e, db)
    assert (s.ran, s.failed) == (8, 1)
    with Results(db) as r:
        df = r.trials("fake")
    failed = df[df.status == "failed"]
    assert list(failed.reason) == ["TestbedError: the emulator died"]
    # The failed trial runs again, alone; the rest are recognised.
    s2, seen = events(e, db)
    assert (s2.already, s2.ran, s2.failed) == (7, 1, 0)
    assert [x.trial.key for x in seen if isinstance(x, runner.TrialDone)] == list(failed.key)
    with Results(db) as r:
        df2 = r.trials("fake")
    assert len(df2) == 8 and set(df2.status) == {"valid"}
    # The run order is the seed's: the same on every resume.
    assert [t.key for t in e.run_order(999).trials] == order  # the file's seed wins over a stored one


def test_a_part_of_a_study_counts_its_own_trials_and_keeps_the_whole_plan(tmp_path: Path) -> None:
    # A run of some of a file's trials (`--scenario`, `validate --repetitions`) beside another part
    # already stored: progress counts this part's trials (not "5/4"), and the stored plan stays the file's.
    import dataclasses

    db = tmp_path / "r.sqlite"
    e = exp()

    def part(protocol: str) -> spec.Experiment:
        return dataclasses.replace(e, trials=[t for t in e.trials if t.spec.factors["protocol"] == protocol],
                                   planned=len(e.trials))

    events(part("h1"), db)
    s, seen = events(part("h2"), db)
    started = next(x for x in seen if isinstance(x, runner.Started))
    assert (started.planned, started.already, started.todo) == (4, 0, 4) and (s.already, s.ran) == (0, 4)
    assert [(x.done, x.planned) for x in seen if isinstance(x, runner.TrialDone)] == [(i, 4) for i in range(1, 5)]
    con = sqlite3.connect(db)
    assert json.loads(con.execute("SELECT spec FROM experiments WHERE name = 'fake'").fetchone()[0])["trials"] == 8
    con.close()
    s, _ = events(e, db)
    assert (s.already, s.ran) == (8, 0)


def test_no_seed_in_the_file_keeps_the_first_runs_order(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    e = spec.build("noseed", {"link": "wire", "protocol": ["h1", "h2", "h3"], "page": "blank", "client": "loader"},
                   repetitions=3)
    _, seen = events(e, db)
    first = next(x for x in seen if isinstance(x, runner.Started)).seed
    again = spec.build("noseed", {"link": "wire", "protocol": ["h1", "h2", "h3"], "page": "blank",
                                  "client": "loader"}, repetitions=3)
    assert again.seed is None
    _, seen2 = events(again, db)
    assert next(x for x in seen2 if isinstance(x, runner.Started)).seed == first


def test_a_server_with_another_congestion_control_makes_the_trial_invalid(tmp_path: Path) -> None:
    fakes.FakeServer.report_cc = "bbr"
    s, _ = events(exp(cc="cubic"), tmp_path / "r.sqlite")
    assert s.invalid == 8 and set(s.reasons) == {"the server used bbr, not cubic"}


def test_an_edited_profile_is_a_different_trial(tmp_path: Path) -> None:
    prof = tmp_path / "mine.toml"
    prof.write_text('name = "mine"\n[forward]\ndelay_ms = 20\n[return]\ndelay_ms = 20\n')
    f = {"link": str(prof), "protocol": "h2", "page": "blank", "client": "loader"}
    db = tmp_path / "r.sqlite"
    a = spec.build("edit", f, repetitions=2, seed=1)
    events(a, db)
    prof.write_text('name = "mine"\n[forward]\ndelay_ms = 30\n[return]\ndelay_ms = 20\n')
    b = spec.build("edit", f, repetitions=2, seed=1)
    assert {t.key for t in a.trials}.isdisjoint(t.key for t in b.trials)
    s, _ = events(b, db)
    assert (s.planned, s.ran) == (2, 2)  # the first link's two trials stay stored, apart
    # The loaded experiment kept the link it resolved: nothing re-reads the profile.
    assert {t.link.base_rtt_ms for t in a.trials} == {40}


def test_report_of_a_fake_study(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    events(exp(), db)
    html = write_report(db, tmp_path / "rep").read_text()
    assert "Experiment fake" in html and "Mann-Whitney" in html and "h1 vs h2" in html
    assert len(list((tmp_path / "rep" / "figures").glob("*.svg"))) >= 4
    # What limited the senders, beside the PLT and the bounds; the bounds drawn under the PLT bars.
    assert "What limited the transfer" in html and "physical bound (ms)" in html
    with Results(db) as r:
        df = r.trials("fake")
    assert set(df["limited_cwnd_pct"]) == {75.0} and set(df["limited_application_pct"]) == {25.0}
    plt_fig = next((tmp_path / "rep" / "figures").glob("*-plt_ms-by-protocol.svg")).read_text()
    assert "physical lower bound" in plt_fig
    # Study C's PLT summary: the mean with its interval, the median and the 95th percentile, per cell.
    assert "Means, medians and 95th percentiles per combination" in html
    from satbench.metrics import nearest_rank

    for cell, g in df[df["status"] == "valid"].groupby(["link.delay_ms", "protocol"]):
        xs = g["plt_ms"].dropna().tolist()
        assert f"<td>{nearest_rank(xs, 0.95):.1f}</td>" in html, cell
    assert nearest_rank([3.0, 1.0, 2.0], 0.95) == 3.0 and nearest_rank(list(map(float, range(1, 101))), 0.95) == 95.0


def test_v1_database_opens_reports_and_resumes(tmp_path: Path) -> None:
    """A database written by satbench 0.1 (committed as a fixture) keeps its
    measurements: it reads as it is, reports, and a resumed run migrates it,
    recognises every stored trial and runs only what the file adds."""
    db = tmp_path / "v1.sqlite"
    shutil.copy(FIXTURES / "v1-results.sqlite", db)
    before = sqlite3.connect(db).execute("SELECT id, key, status, started FROM trials ORDER BY id").fetchall()
    with Results(db) as r:
        assert r.version == 1
        assert len(r.trials("v1")) == 10
    assert "Experiment v1" in write_report(db, tmp_path / "rep").read_text()
    e = spec.load(FIXTURES / "v1-experiment.toml")
    s, seen = events(e, db)
    started = next(x for x in seen if isinstance(x, runner.Started))
    # Its four HTTP/3 trials ran quiche, the only QUIC stack then, and say so now: under today's
    # default stack (quinn) the file's HTTP/3 trials are new ones, and run; nothing stored is lost
    # (the 4 quiche trials stay stored; "already" counts the 6 of the file's 10 that are).
    assert started.migrated_from == 1 and (s.already, s.ran) == (6, 4)
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA user_version").fetchone() == (7,)
    after = con.execute("SELECT id, key_v1, status, started FROM trials ORDER BY id").fetchall()
    assert [(i, k, st, t) for i, k, st, t in before] == after[:10]  # nothing measured is lost
    # The stored link is the one the emulator reported with its counters.
    (spec_json,) = [json.loads(x) for (x,) in con.execute("SELECT spec FROM links")]
    assert spec_json["config"]["forward"]["delay"] == {"kind": "constant", "ms": 20.0}
    # A new repetition runs only the new trials.
    more = spec.build("v1", {"link": "wire", "link.delay_ms": 20, "protocol": ["h1", "h2", "h3"],
                             "page": "uniform-100k", "client": "loader"}, repetitions=3, seed=3, timeout_s=60)
    s2, _ = events(more, db)
    assert (s2.planned, s2.ran) == (9, 3)  # reps 1 and 2 recognised, rep 3 runs


def test_a_database_from_the_future_or_not_ours_is_refused(tmp_path: Path) -> None:
    future = tmp_path / "future.sqlite"
    shutil.copy(FIXTURES / "v1-results.sqlite", future)
    con = sqlite3.connect(future)
    con.execute("PRAGMA user_version = 99")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="schema 99"):
        Results(future)
    with pytest.raises(InputError, match="schema 99"):
        events(exp(), future)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x)")
    con.commit()
    con.close()
    data = other.read_bytes()
    with pytest.raises(InputError, match="not satbench's"):
        events(exp(), other)
    assert other.read_bytes() == data
    text = tmp_path / "text.sqlite"
    text.write_text("hello")
    with pytest.raises(InputError, match="not an SQLite file"):
        Results(text)
    assert text.read_text() == "hello"
    assert TrialStatus.VALID.value == "valid"


def test_a_part_that_dies_fails_its_trial_and_the_next_runs(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    fakes.FakeServer.die = "satbench-server died (signal 9 (SIGKILL))"
    s, _ = events(exp(), db)
    assert (s.ran, s.failed, s.valid) == (8, 1, 7)
    assert list(s.reasons) == ["satbench-server died (signal 9 (SIGKILL))"]
    fakes.FakeTestbed.next_faults = ["the link emulator died (signal 9 (SIGKILL))"]
    s2, _ = events(exp(), db)
    assert (s2.ran, s2.failed) == (1, 1) and list(s2.reasons) == ["the link emulator died (signal 9 (SIGKILL))"]
    s3, _ = events(exp(), db)
    assert (s3.ran, s3.valid) == (1, 1)
    with Results(db) as r:
        df = r.trials("fake")
    assert len(df) == 8 and df["key"].is_unique and set(df.status) == {"valid"}


def test_a_load_faster_than_physics_fails_as_a_harness_error(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    fakes.FakeLoader.too_fast_next = True
    s, _ = events(exp(), db)
    assert (s.ran, s.failed, s.valid) == (8, 1, 7)
    (reason,) = s.reasons
    assert reason.startswith("harness error: plt_ms") and "below the physical lower bound" in reason
    with Results(db) as r:
        df = r.trials("fake")
    # Every trial carries its bound; every valid one is above it.
    assert df["lower_bound_ms"].notna().all()
    valid = df[df.status == "valid"]
    assert (valid["plt_ms"] >= valid["lower_bound_ms"]).all() and (valid["last_object_ms"] >= valid["lower_bound_ms"]).all()


def test_unwritable_artefacts_fail_the_trial_not_the_run(tmp_path: Path) -> None:
    blocker = tmp_path / "art"
    blocker.write_text("a file where the artefact folder should be")
    s, _ = events(exp(), tmp_path / "r.sqlite", art_root=blocker)
    assert (s.ran, s.failed) == (8, 8)
    assert all("FileExistsError" in r or "NotADirectoryError" in r for r in s.reasons), s.reasons


def test_a_database_held_by_another_writer(tmp_path: Path) -> None:
    """The run waits for a writer that lets go, and stops, keeping what it
    stored, for one that does not."""
    import threading
    import time

    db = tmp_path / "r.sqlite"
    events(spec.build("first", {"link": "wire", "protocol": "h2", "page": "blank", "client": "loader"}), db)
    other = sqlite3.connect(db, timeout=5, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")
    release = threading.Timer(1.5, other.rollback)
    release.start()
    s, seen = events(exp(), db, db_timeout_s=0.5)
    release.join()
    assert (s.ran, s.valid) == (8, 8)
    assert any(isinstance(e, runner.Waiting) and "locked by another writer" in e.reason for e in seen)
    other.execute("BEGIN EXCLUSIVE")
    t0 = time.monotonic()
    with pytest.raises(TestbedError, match="locked by another writer"):
        events(exp("second"), db, db_timeout_s=0.1)
    assert time.monotonic() - t0 < 30
    other.rollback()
    other.close()
    with Results(db) as r:
        assert len(r.trials("fake")) == 8 and "second" not in r.experiments()  # nothing of it ran


def test_a_report_never_pools_trials_of_different_links(tmp_path: Path) -> None:
    """Study A's preset is unbalanced: CUBIC runs on one link only. Pooled,
    'CUBIC against BBR' would compare links, not algorithms."""
    from satbench.results.report import comparable

    db = tmp_path / "r.sqlite"
    e = spec.build("unbalanced", {"link": ["wire", "lan"], "protocol": ["h1", "h2"], "page": "uniform-100k",
                                  "client": "loader"}, repetitions=2, seed=3, scenarios=[
        {"name": "cc", "link": "lan", "cc": ["cubic", "bbr"]},
        {"name": "pages", "link": ["wire", "lan"], "cc": "bbr", "page": ["uniform-100k", "single-100k"]}])
    events(e, db)
    with Results(db) as r:
        df = r.trials("unbalanced")
    varied = ["link", "protocol", "cc", "page"]
    panels, how = comparable(df, "cc", varied)
    assert [p.title for p in panels] == ["link=lan"] and "One panel per link" in how
    for p in panels:
        assert p.trials["link"].nunique() == 1
        # Balanced: each combination of the other factors holds both algorithms.
        assert (p.trials.groupby(["protocol", "page"])["cc"].nunique() == 2).all()
        assert set(p.trials["page"]) == {"uniform-100k"}  # single-100k ran with BBR only
    panels, _ = comparable(df, "link", varied)
    (p,) = panels
    assert set(p.trials["cc"]) == {"bbr"}  # the links ran both only with BBR
    html = write_report(db, tmp_path / "rep").read_text()
    assert "One panel per link" in html and "balanced subset" in html


def test_a_parameter_study_reports_which_settings_matter(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    e = spec.build("tune", {"link": ["wire", "lan"], "protocol": ["h2", "h3"], "page": "blank", "client": "loader",
                            "cc": ["cubic", "bbr"], "server.quic_initcwnd": [10, 32], "server.pacing": [True, False],
                            "quic_stack": "quiche"},  # quiche's pacer can be switched off
                   repetitions=4, seed=2, design={"kind": "fractional", "generators": ["C=-AB"], "block": "link",
                                                  "factors": ["cc", "server.quic_initcwnd", "server.pacing"]})
    s, _ = events(e, db)
    assert s.ran == 2 * 2 * 4 * 4 and s.valid == s.ran
    html = write_report(db, tmp_path / "rep").read_text()
    assert "Which settings matter" in html and "Holm" in html and "Tuned against default" in html
    assert "Main effects and two-factor interactions" in html and "C=-AB" in html
    # The same analysis through the Python API, against the file's baseline (its first levels).
    r = Results(db)
    try:
        assert r.spec("tune")["baseline"]["server.quic_initcwnd"] == 10
        a = r.settings("tune", correction="bh")
    finally:
        r.close()
    assert a["effects"].empty and set(a["factorial"]["correction"]) == {"bh"}
    mains = a["factorial"][a["factorial"]["minus"] != ""]
    assert set(mains["term"]) == {"cc", "server.quic_initcwnd", "server.pacing"}
    assert set(mains["minus"]) == {"cubic", "10", "True"}  # cc's, the initial window's and pacing's first levels
    assert set(a["tuned"]["protocol"]) == {"h2", "h3"} and set(a["tuned"]["basis"]) == {"main-effects model"}
    assert set(a["tuned"]["judged"]) == {"chosen on repetitions 1, 3, judged on 2, 4"}


def test_a_mixed_population(tmp_path: Path) -> None:
    """Five HTTP/1.1 and five HTTP/2 clients, each on its own host, released at
    once: per-client rows with their group, host and start; per-group
    medians; Jain's index from the stored throughputs, by its formula."""
    db = tmp_path / "r.sqlite"
    e = spec.build("mix", {"link": "fair-lan", "page": "uniform-100k", "client": "loader",
                           "clients": [{"h1": 5, "h2": 5}, {"h1": 10, "h2": 0}],
                           "link.forward.loss": [0, 0.01], "link.rate_mbps": 1000}, seed=1)
    assert {t.factors["protocol"] for t in e.trials} == {"mix"}
    s, _ = events(e, db)
    assert (s.ran, s.valid) == (4, 4), s.reasons
    assert [b.clients for b in fakes.FakeTestbed.built] == [10] * 4  # a host per client
    con = sqlite3.connect(db)
    tid = con.execute("SELECT id FROM trials WHERE factors LIKE '%\"h2\": 5%' AND factors LIKE "
                      "'%\"link.forward.loss\": 0,%'").fetchone()[0]
    rows = con.execute("SELECT grp, host, start_unix_ms, throughput_mbps, normalised_throughput FROM clients "
                       f"WHERE trial_id = {tid} ORDER BY client").fetchall()
    starts = [r[2] for r in rows]
    m = dict(con.execute(f"SELECT name, value FROM metrics WHERE trial_id = {tid}").fetchall())
    con.close()
    assert [r[0] for r in rows] == ["h1"] * 5 + ["h2"] * 5 and len({r[1] for r in rows}) == 10
    xs = [r[4] for r in rows]
    assert m["jain_throughput"] == pytest.approx(sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs)))
    fair = 1000 / 10  # 1 Gbit/s shared by ten (the fake's loads are quicker than 100 Mbit/s would allow ten)
    assert xs[0] == pytest.approx(rows[0][3] / fair)
    assert m["plt_ms_h1"] > m["plt_ms_h2"] and m["clients_h1"] == 5
    # The skew is the last client's start minus the first's, as each client reported it.
    assert m["start_skew_ms"] == pytest.approx(max(starts) - min(starts)) and m["start_skew_ms"] > 0
    # The shared link's bound on the population: every client's bytes through one bottleneck.
    assert 0 < m["population_bound_ms"] <= m["population_span_ms"]
    assert m["population_span_over_bound"] == pytest.approx(m["population_span_ms"] / m["population_bound_ms"])
    # The report's population views: PLT per group per network, Jain against loss, per-client CDFs, skew and CPU.
    html = write_report(db, tmp_path / "rep").read_text()
    assert "Populations" in html and "Start skew and idle CPU of every trial" in html and "h1=5 h2=5" in html
    names = {f.name.split("-", 2)[-1] for f in (tmp_path / "rep" / "figures").glob("*.svg")}
    assert {"plt-by-group.svg", "jain-vs-loss.svg", "client-plt-cdf.svg"} <= names, names


def test_a_population_started_apart_is_invalid(tmp_path: Path) -> None:
    """Clients that start further apart than the loaders' 5 ms target did not compete from one
    instant: the trial is stored invalid, saying how far apart they were."""
    db = tmp_path / "r.sqlite"
    e = spec.build("apart", {"link": "fair-lan", "page": "uniform-100k", "client": "loader",
                             "clients": {"h1": 2, "h2": 2}}, seed=1)
    fakes.FakeLoader.start_spread_ms = 3.0  # 0, 3 and 6 ms after the barrier
    try:
        s, _ = events(e, db)
    finally:
        fakes.FakeLoader.start_spread_ms = 0.5
    assert (s.ran, s.valid) == (1, 0)
    con = sqlite3.connect(db)
    status, reason = con.execute("SELECT status, reason FROM trials").fetchone()
    con.close()
    assert status == "invalid" and "start skew 6.0 ms over the loader target" in reason, reason


def test_a_population_is_validated() -> None:
    base = {"link": "fair-lan", "page": "uniform-100k", "client": "loader"}
    with pytest.raises(spec.ExperimentError, match="groups are protocols"):
        spec.build("x", {**base, "clients": {"h4": 2}})
    with pytest.raises(spec.ExperimentError, match="leave protocol out"):
        spec.build("x", {**base, "protocol": "h2", "clients": {"h1": 2}})
    with pytest.raises(spec.ExperimentError, match="Chromium's HTTP/1.1 limit"):
        spec.build("x", {**base, "clients": {"h1": {"n": 2, "client": "chromium", "connections": 1}}})


def test_a_population_faster_than_its_shared_link_allows_fails(tmp_path: Path) -> None:
    """Each fake client takes 6 round trips of 300 ms, above one client's bound for 100 KB at
    1 Mbit/s (1.7 s); ten clients' 1 MB cannot cross in that time (8.9 s): a harness error."""
    e = spec.build("crowd", {"link": "fair-lan", "page": "uniform-100k", "client": "loader",
                             "clients": {"h2": 10}, "link.delay_ms": 150, "link.rate_mbps": 1}, seed=1)
    s, _ = events(e, tmp_path / "r.sqlite")
    assert s.failed == 1, s.reasons
    (reason,) = s.reasons
    assert "below the physical lower bound of its shared link" in reason, reason


def test_compare_prints_each_combinations_change_as_sql_gives_it(tmp_path: Path) -> None:
    """Two runs of the fake lab, the second over a longer path: per protocol, the change from the
    first's median to the second's equals the medians from SQL, with its interval and whether it is
    decided (4 trials a side: an exact test can); two experiments of one database compare too, and a
    database of several experiments must name one (exit 2, one line)."""
    import subprocess
    import sys

    from satbench.results import compare

    before, after = tmp_path / "before.sqlite", tmp_path / "after.sqlite"
    for db, delay in ((before, 5), (after, 50)):
        e = spec.build("change", {"link": "lan", "page": "blank", "client": "loader", "protocol": ["h1", "h2"],
                                  "link.delay_ms": delay}, repetitions=4, seed=1)
        s, _ = events(e, db)
        assert s.valid == 8, s.reasons
    rows, text = compare.run(compare.Run(before), compare.Run(after))

    def medians(db: Path) -> dict[str, float]:
        con = sqlite3.connect(db)
        got = {}
        for proto in ("h1", "h2"):
            xs = sorted(v for (v,) in con.execute(
                "SELECT m.value FROM metrics m JOIN trials t ON t.id = m.trial_id WHERE m.name = 'plt_ms' "
                "AND json_extract(t.factors, '$.protocol') = ?", (proto,)))
            got[proto] = (xs[1] + xs[2]) / 2
        con.close()
        return got

    a, b = medians(before), medians(after)
    assert [r.combination for r in rows] == ["protocol h1", "protocol h2"]
    for r, proto in zip(rows, ("h1", "h2")):
        want = (b[proto] - a[proto]) / a[proto] * 100
        assert (r.median_a, r.median_b) == (a[proto], b[proto]) and r.change_pct == pytest.approx(want), r
        assert r.low <= r.change_pct <= r.high and r.decided, r
        assert f"{want:+.1f} %" in text
    # Two experiments in one database, each named.
    e = spec.build("change-2", {"link": "lan", "page": "blank", "client": "loader", "protocol": ["h1", "h2"],
                                "link.delay_ms": 50}, repetitions=4, seed=1)
    events(e, before)
    rows2, _ = compare.run(compare.Run.parse(f"{before}:change"), compare.Run.parse(f"{before}:change-2"))
    assert [r.change_pct for r in rows2] == pytest.approx([r.change_pct for r in rows])
    p = subprocess.run([sys.executable, "-m", "satbench", "compare", str(before), str(after)], capture_output=True,
                       text=True)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "name one as" in p.stderr, p.stderr
