"""Experiment files: validation that names file, line and field and runs
nothing; the expansion into trials (scenarios, explicit trials, a seeded
order); the estimate; and the statistics the report uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from satbench.endpoints.sites import SITE_VERSION
from satbench.errors import InputError, ProfileError
from satbench.experiment import design, estimate, spec
from satbench.experiment.plan import Plan
from satbench.experiment.trialspec import TrialSpec
from satbench.link import profile
from satbench.link.spec import resolve
from satbench.results.stats import jain, mann_whitney_p, median_diff_ci

from ..helpers import REPO, run_cli

GOOD = """[experiment]
name = "t"
repetitions = 2
seed = 9

[factors]
link = "wire"
protocol = ["h1", "h2", "h3"]
cc = ["cubic", "bbr"]
page = "uniform-100k"
client = "loader"
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return p


def test_cross_product_repetitions_and_seeded_order(tmp_path: Path) -> None:
    e = spec.load(write(tmp_path, GOOD))
    assert len(e.trials) == 3 * 2 * 2
    assert e.varied == ["protocol", "cc"]
    assert len({t.key for t in e.trials}) == len(e.trials)
    # The order is random but fixed by the seed, and the same for the same file.
    again = spec.load(write(tmp_path, GOOD))
    assert [t.key for t in again.trials] == [t.key for t in e.trials]
    ordered = [t.key for t in e.run_order().trials]
    assert [t.key for t in again.run_order().trials] == ordered
    other = design.run_order(e.trials, "random", 10)
    assert sorted(t.key for t in other.trials) == sorted(ordered)
    assert [t.key for t in other.trials] != ordered
    seq = spec.load(write(tmp_path, GOOD.replace("seed = 9", 'order = "sequential"')))
    assert [t.factors["protocol"] for t in seq.run_order().trials][:4] == ["h1", "h1", "h1", "h1"]
    # Defaults are filled in and recorded.
    t = e.trials[0]
    assert t.factors["server"] == "satbench" and t.factors["connections"] == 6 and t.factors["access"] == "none"


def test_scenarios_share_trials_and_explicit_trials_add(tmp_path: Path) -> None:
    text = GOOD + """
[[scenario]]
name = "a"
cc = "bbr"

[[scenario]]
name = "b"
protocol = "h2"
repetitions = 3
"""
    e = spec.load(write(tmp_path, text))
    # a: 3 protocols x bbr x 2 reps; b: h2 x 2 cc x 3 reps; shared: h2 bbr reps 1-2.
    assert len(e.trials) == 6 + 6 - 2
    shared = [t for t in e.trials if t.factors["protocol"] == "h2" and t.factors["cc"] == "bbr" and t.rep <= 2]
    assert all(t.scenarios == ["a", "b"] for t in shared)
    # One scenario's trials alone (`satbench run --scenario b`): the same keys, shared ones included.
    only_b = e.only_scenarios(["b"])
    assert len(only_b.trials) == 6 and all("b" in t.scenarios for t in only_b.trials)
    assert only_b.spec_json(1)["trials"] == 10  # the file's plan, stored for the report, stays whole
    with pytest.raises(InputError, match="--scenario c: no such scenario in .* .its scenarios: a, b"):
        e.only_scenarios(["b", "c"])
    listed = spec.load(write(tmp_path, GOOD.replace('protocol = ["h1", "h2", "h3"]\ncc = ["cubic", "bbr"]\n', "")
                                   + '\n[[trial]]\nprotocol = "h2"\n\n[[trial]]\nprotocol = "h3"\ncc = "bbr"\n'))
    assert sorted((t.factors["protocol"], t.factors["cc"], t.rep) for t in listed.trials) == [
        ("h2", "cubic", 1), ("h2", "cubic", 2), ("h3", "bbr", 1), ("h3", "bbr", 2)]


@pytest.mark.parametrize("change, line, words", [
    (("protocol = [", "protocol = [[", 1), None, ["not valid TOML"]),
    (('page = "uniform-100k"', 'page = "nosuch"'), 10, ["factors.page", "unknown page"]),
    (('cc = ["cubic", "bbr"]', 'cc = ["cubic", "vegas"]'), 9, ["factors.cc", "cubic, bbr, reno", "vegas"]),
    (('client = "loader"', 'client = "loader"\ncolour = ["red"]'), 12, ["factors.colour", "unknown factor"]),
    (("repetitions = 2", "repetitions = 0"), 3, ["experiment.repetitions", "from 1 to"]),
    (("seed = 9", "seeds = 9"), 4, ["experiment.seeds", "unknown key"]),
    (('link = "wire"', 'link = "nosuch"'), 7, ["link", "nosuch"]),
    (('client = "loader"', 'client = "loader"\n"link.delay_ms" = [-5]'), 12, ["delay_ms"]),
    (('client = "loader"', 'client = "chromium"\nclients = [1, 10]'), None, ["clients", "one browser"]),
    (('client = "loader"', 'client = "chromium"\nconnections = 1'), None, ["connections", "Chromium", "firefox"]),
    (('client = "loader"', 'client = "loader"\n"server.tfo" = ["yes"]'), 12, ["factors.server.tfo", "true or false"]),
    (('protocol = ["h1", "h2", "h3"]', 'protocol = ["h1", "h1"]'), 8, ["factors.protocol", "repeat"]),
    (('name = "t"', 'name = "a b"'), 2, ["experiment.name"]),
])
def test_malformed_files_name_file_line_and_field(tmp_path: Path, change: tuple, line: int | None,
                                                  words: list[str]) -> None:
    text = GOOD.replace(*change)
    assert text != GOOD
    p = write(tmp_path, text)
    with pytest.raises(ProfileError) as ei:
        spec.load(p)
    msg = str(ei.value)
    assert msg.startswith(str(p)), msg
    if line is not None:
        assert f"{p}:{line}:" in msg, msg
    for w in words:
        assert w in msg, (w, msg)


def test_missing_required_factor_and_missing_table(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="factor 'page' is required"):
        spec.load(write(tmp_path, GOOD.replace('page = "uniform-100k"\n', "")))
    with pytest.raises(ProfileError, match=r"missing \[experiment\]"):
        spec.load(write(tmp_path, "[factors]" + GOOD.split("[factors]")[1]))


def test_run_and_plan_reject_a_bad_file_and_run_nothing(tmp_path: Path) -> None:
    bad = write(tmp_path, GOOD.replace('cc = ["cubic", "bbr"]', 'cc = ["cubic", "vegas"]'))
    db = tmp_path / "r.sqlite"
    for cmd in (["run", str(bad), "--db", str(db)], ["plan", str(bad)]):
        p = run_cli(*cmd)
        assert p.returncode == 2, p.stderr
        assert p.stderr.strip().count("\n") == 0 and f"{bad}:9:" in p.stderr and "factors.cc" in p.stderr
    assert not db.exists()


def test_plan_prints_trials_and_estimate_without_running(tmp_path: Path) -> None:
    p = run_cli("plan", str(write(tmp_path, GOOD)), "--json")
    assert p.returncode == 0, p.stderr
    import json

    d = json.loads(p.stdout)
    assert len(d["trials"]) == 12 and d["estimate_s"] > 0
    assert all(t["estimate_s"] > 0 and not t["done"] for t in d["trials"])


@pytest.mark.parametrize("name", ["demo.toml", "geo-study-a.toml", "study-e-timing.toml", "study-d-tuning.toml",
                                  "shared-beam.toml", "ipv6-check.toml"])
def test_presets_are_valid(name: str) -> None:
    e = spec.load(REPO / "experiments" / name)
    assert e.trials and Plan(e, e.run_order(), frozenset()).estimate_s() > 0


def test_geo_study_has_the_three_scenarios_on_both_links() -> None:
    e = spec.load(REPO / "experiments" / "geo-study-a.toml")
    names = {s for t in e.trials for s in t.scenarios}
    assert names == {"parallel-streams", "congestion-control", "page-structure"}
    assert {t.factors["link"] for t in e.trials} == {"geo", "lan"}
    assert {t.factors["cc"] for t in e.trials if "congestion-control" in t.scenarios} == {"cubic", "bbr"}
    assert {t.rep for t in e.trials} == {1, 2, 3}
    # As the study: Firefox with one HTTP/1.1 connection per server.
    assert {(t.factors["client"], t.factors["connections"]) for t in e.trials} == {("firefox", 1)}


def test_demo_is_small_and_shows_both_quic_stacks() -> None:
    e = spec.load(REPO / "experiments" / "demo.toml")
    assert len(e.trials) == 40 and {t.rep for t in e.trials} == {1, 2, 3, 4, 5}
    seen = {(t.factors["protocol"], t.factors["cc"], t.factors["quic_stack"] if t.factors["protocol"] == "h3"
             else None) for t in e.trials}
    assert seen == {(p, c, s) for c in ("cubic", "bbr") for p, s in (("h1", None), ("h2", None), ("h3", "quinn"),
                                                                      ("h3", "quiche"))}


def test_estimate_follows_rtt_rate_and_size() -> None:
    f = {"link": "geo", "protocol": "h2", "page": "uniform-2m", "client": "loader", "clients": 1, "connections": 6}
    geo, lan_link = resolve(profile.load("geo")), resolve(profile.load("lan"))
    big = estimate.trial_s(TrialSpec.of(f), geo)
    small = estimate.trial_s(TrialSpec.of({**f, "page": "uniform-100k"}), geo)
    lan = estimate.trial_s(TrialSpec.of(f), lan_link)
    # 2 MB at 10 Mbit/s is 1.6 s of transfer plus round trips of 530 ms.
    assert 1.6 + 4 * 0.53 < big < 1.6 + 12 * 0.53 + 1
    assert small < big and lan < small


def test_a_populations_estimate_is_its_slowest_groups() -> None:
    # Study B's loader set ran 60 % over its plan while a mix was estimated by HTTP/1.1 alone: under
    # loss HTTP/2's one connection is the slow group. Each group is estimated with every client sharing
    # the link, so a mix takes as long as the slower of its protocols alone.
    lte = resolve(profile.load("fair-lte", ["forward.loss=0.03"]))
    f = {"link": "fair-lte", "page": "shop", "client": "loader", "cc": "cubic", "connections": 6}

    def est(h1: int, h2: int) -> float:
        return estimate.trial_s(TrialSpec.of({**f, "protocol": "mix", "clients": {"h1": h1, "h2": h2}}), lte)

    assert est(0, 10) > est(10, 0)
    assert est(7, 3) == est(3, 7) == max(est(10, 0), est(0, 10))


def test_statistics() -> None:
    assert jain([5, 5, 5, 5]) == pytest.approx(1.0)
    assert jain([10, 0, 0, 0]) == pytest.approx(0.25)
    assert jain([]) is None
    d, lo, hi = median_diff_ci([1.0, 2, 3, 4, 5, 6, 7, 8], [11.0, 12, 13, 14, 15, 16, 17, 18])
    assert d == pytest.approx(10) and lo <= 10 <= hi and lo > 5
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert mann_whitney_p([3, 3, 3], [3, 3, 3]) == 1.0


def test_page_sizes_in_the_estimate_are_the_generated_ones(generated_pages) -> None:  # type: ignore[no-untyped-def]
    _, manifests = generated_pages
    for name, m in manifests.items():
        total, objects = estimate.page_bytes(name)
        assert objects == len(m.objects), name
        # Study A's pages are their object sizes by definition; the HTML adds under 1 %.
        assert abs(total - m.total_bytes) <= 0.01 * m.total_bytes, (name, total, m.total_bytes)


def test_plan_reads_a_v1_database_without_changing_it() -> None:
    """`satbench plan --db` on a satbench 0.1 database marks its stored trials
    done under the keys they will have once migrated, and writes nothing."""
    import hashlib
    import json

    from ..helpers import FIXTURES

    db = FIXTURES / "v1-results.sqlite"
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    p = run_cli("plan", str(FIXTURES / "v1-experiment.toml"), "--db", str(db), "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert len(d["trials"]) == 10 and all(t["done"] for t in d["trials"]), [t for t in d["trials"] if not t["done"]]
    assert d["estimate_s"] == 0
    assert hashlib.sha256(db.read_bytes()).hexdigest() == before


#: The key of the uniform 100 KB page over GEO by the loader over HTTP/2, repetition 1, as satbench
#: keyed it before the content of named files joined keys (commit 031b411).
KEY_BEFORE_CONTENT = "13a313e7edc47bd8"


def test_the_files_a_trial_names_are_part_of_its_key(tmp_path: Path) -> None:
    # A request schedule or a replayed site edited between two runs is another trial (as an edited
    # link profile is); a trial that names no file keeps the key it always had.
    geo = resolve(profile.load("geo"))
    plain = {"link": "geo", "protocol": "h2", "page": "uniform-100k", "client": "loader"}
    t = design.Trial(TrialSpec.of(plain), 1, {"link": geo})
    assert design.content_of(t.spec) == {}
    assert t.key == KEY_BEFORE_CONTENT, t.key  # as keyed before files were: stored studies keep their keys
    sched = tmp_path / "s.json"
    sched.write_text('{"a": 1}\n')
    f = {**plain, "schedule": str(sched)}
    first = design.Trial(TrialSpec.of(f), 1, {"link": geo}).key
    assert first != t.key and design.Trial(TrialSpec.of(f), 1, {"link": geo}).key == first
    sched.write_text('{"a": 2}\n')
    assert design.Trial(TrialSpec.of(f), 1, {"link": geo}).key != first
    site = tmp_path / "site"
    page = {**plain, "page": f"site:{site}"}
    assert design.content_of(TrialSpec.of(page)) == {}  # no site there yet (refused where it is checked)
    site.mkdir()

    def manifest(source: str, path: str = "/") -> str:
        return json.dumps({"version": SITE_VERSION, "page": "https://a.test/", "hosts": ["a.test"],
                           "entries": [{"method": "GET", "path": path, "query": "", "status": 200, "headers": [],
                                        "bytes": 0, "host": "a.test", "body": "0" * 64}], "source": source})

    (site / "site.json").write_text(manifest("/here/a.har"))
    a = design.content_of(TrialSpec.of(page))
    assert set(a) == {"page"}
    # Where it was imported from is not what it is: another folder with the same site, the same identity.
    other = tmp_path / "other"
    other.mkdir()
    (other / "site.json").write_text(manifest("/elsewhere/a.har"))
    assert design.content_of(TrialSpec.of({**plain, "page": f"site:{other}"})) == a
    edited = tmp_path / "edited"
    edited.mkdir()
    (edited / "site.json").write_text(manifest("/here/a.har", "/a"))
    assert design.content_of(TrialSpec.of({**plain, "page": f"site:{edited}"}))["page"] != a["page"]


def test_a_quic_stack_has_a_say_only_where_http3_is_spoken() -> None:
    """The progress line and a cell's name leave out what does not apply: an HTTP/2 trial's QUIC
    stack (issue: `protocol=h1 cc=bbr quic_stack=quinn`)."""
    base = {"link": "geo", "page": "uniform-100k", "client": "loader"}
    assert not TrialSpec.of({**base, "protocol": "h2", "quic_stack": "quinn"}).applies("quic_stack")
    assert TrialSpec.of({**base, "protocol": "h3", "quic_stack": "quinn"}).applies("quic_stack")
    assert TrialSpec.of({**base, "protocol": "mix", "clients": {"h2": 1, "h3": 1}}).applies("quic_window")
    assert TrialSpec.of({**base, "protocol": "h1"}).applies("cc")
