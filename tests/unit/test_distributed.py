"""The cluster's rules without a cluster: which scheduler addresses are
allowed, which workers are refused (and the one line saying why), the
coordinator's bookkeeping of attempts, cores for parallel testbeds, the
artefacts' round trip, and that a record survives pickling."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from satbench.errors import InputError
from satbench.experiment import spec
from satbench.experiment.distributed import (
    Book,
    check_scheduler_address,
    identity,
    identity_difference,
    listen_host,
    pack,
    parse_cores,
    split_cores,
    unpack,
)
from satbench.model import TrialStatus
from satbench.results.store import TrialRecord


def fake_dns(table: dict[str, list[str]]):
    def resolve(host: str) -> list[str]:
        if host in table:
            return table[host]
        try:
            import ipaddress

            return [str(ipaddress.ip_address(host))]
        except ValueError:
            raise OSError(f"unknown host {host}") from None

    return resolve


DNS = fake_dns({"localhost": ["127.0.0.1", "::1"], "lab1": ["10.0.0.5"], "me": ["127.0.1.1"],
                "mixed": ["127.0.0.1", "192.168.1.2"]})


@pytest.mark.parametrize("address", ["tls://lab1:8786", "tls://10.0.0.5:8786", "tcp://127.0.0.1:8786",
                                     "tcp://localhost:8786", "tcp://[::1]:8786", "tcp://me:9000", "tcp://127.0.0.1"])
def test_tls_anywhere_and_plain_tcp_on_loopback_are_allowed(address: str) -> None:
    assert check_scheduler_address(address, resolve=DNS) == address


@pytest.mark.parametrize("address", ["tcp://lab1:8786", "tcp://10.0.0.5:8786", "tcp://mixed:8786",
                                     "tcp://0.0.0.0:8786"])
def test_plain_tcp_off_loopback_is_refused_in_one_line(address: str) -> None:
    with pytest.raises(InputError) as e:
        check_scheduler_address(address, resolve=DNS)
    msg = str(e.value)
    assert "\n" not in msg and "tls://" in msg and "loopback" in msg and address in msg


@pytest.mark.parametrize("address", ["lab1:8786", "http://lab1:8786", "tcp://", "ucx://lab1:1", "tls://a b:1"])
def test_what_is_no_scheduler_address_is_refused(address: str) -> None:
    with pytest.raises(InputError, match="expected tls://HOST:PORT"):
        check_scheduler_address(address, resolve=DNS)


def test_an_unresolvable_host_is_refused() -> None:
    with pytest.raises(InputError, match="cannot resolve nowhere"):
        check_scheduler_address("tcp://nowhere:1", resolve=DNS)


def test_a_worker_listens_on_loopback_or_on_its_interface_towards_the_scheduler_never_on_all() -> None:
    def route(addr: str) -> str:
        assert addr == "10.0.0.5"  # the scheduler's address, not one of ours
        return "10.0.0.9"

    assert listen_host("tcp://127.0.0.1:8786", resolve=DNS, route=route) == "127.0.0.1"
    assert listen_host("tcp://localhost:8786", resolve=DNS, route=route) == "127.0.0.1"
    assert listen_host("tcp://[::1]:8786", resolve=DNS, route=route) == "[::1]"
    assert listen_host("tls://[2001:db8::5]:8786", resolve=DNS, route=lambda a: "2001:db8::9") == "[2001:db8::9]"
    assert listen_host("tls://lab1:8786", resolve=DNS, route=route) == "10.0.0.9"
    assert listen_host("tls://10.0.0.5", resolve=DNS, route=route) == "10.0.0.9"


def test_cluster_credentials_are_private_and_reach_a_worker_through_its_environment(tmp_path: Path) -> None:
    import stat
    import subprocess
    import sys

    from satbench.experiment import cluster_tls

    tls = cluster_tls.make(tmp_path / "tls")
    assert stat.S_IMODE((tmp_path / "tls").stat().st_mode) == 0o700
    for role in cluster_tls.ROLES:
        assert stat.S_IMODE(tls.key(role).stat().st_mode) == 0o600
        v = subprocess.run(["openssl", "verify", "-CAfile", str(tls.ca), str(tls.cert(role))], capture_output=True,
                           text=True)
        assert v.returncode == 0, v.stdout + v.stderr
    assert not (tmp_path / "tls" / "ca.key").exists()  # a run's CA signs nothing after it is made
    # What a worker started with tls.env() reads from Dask's configuration: the owner's names.
    code = ("import dask.config, json; print(json.dumps({k: dask.config.get(k) for k in "
            f"{sorted(tls.config())!r}}}))")
    out = subprocess.run([sys.executable, "-c", code], env={"PATH": "/usr/bin:/bin", **tls.env()},
                         capture_output=True, text=True, check=True).stdout
    import json

    got = json.loads(out)
    assert got == {k: (v if isinstance(v, bool) else str(v)) for k, v in tls.config().items()}
    assert got["distributed.comm.require-encryption"] is True


OURS = {"satbench": "0.2.0", "commit": "a" * 40,
        "binaries": {"satbench-link": "1" * 64, "satbench-server": "2" * 64, "satbench-load": "3" * 64}}


def test_a_worker_like_the_coordinator_is_accepted() -> None:
    assert identity_difference(OURS, dict(OURS)) is None


def test_a_worker_with_another_commit_is_refused_with_one_line_saying_so() -> None:
    line = identity_difference(OURS, {**OURS, "commit": "b" * 40 + "-dirty"})
    assert line is not None and "\n" not in line
    assert line.startswith("commit bbbbbbbb") and "coordinator's aaaaaaaa" in line
    assert "satbench-" not in line and "satbench 0" not in line


def test_each_difference_is_named_version_commit_and_binary() -> None:
    theirs = {"satbench": "0.1.9", "commit": None,
              "binaries": {**OURS["binaries"], "satbench-server": "f" * 64, "satbench-load": None}}
    line = identity_difference(OURS, theirs)
    assert line is not None
    parts = line.split("; ")
    assert parts[0] == "satbench 0.1.9 differs from the coordinator's 0.2.0"
    assert parts[1].startswith("commit none differs")
    assert parts[2] == "satbench-server ffffffffffff differs from the coordinator's 222222222222"
    assert parts[3] == "satbench-load none differs from the coordinator's 333333333333"
    assert len(parts) == 4


def test_identity_names_the_binaries() -> None:
    me = identity()
    assert set(me["binaries"]) == {"satbench-link", "satbench-server", "satbench-load", "satbench-pep",
                                   "satbench-tunnel"}
    assert me["satbench"] and identity_difference(me, identity()) is None


def test_the_book_fills_free_slots_and_takes_one_result_per_trial() -> None:
    b = Book("r1")
    assert b.free_worker() is None
    b.join("w1", "id1", 1)
    b.join("w2", "id2", 2)
    a1 = b.attempt("k1", b.free_worker() or "")
    assert a1 is not None and a1.worker == "w2" and a1.n == 1  # the one with most free slots
    a2 = b.attempt("k2", b.free_worker() or "")
    a3 = b.attempt("k3", b.free_worker() or "")
    assert a2 is not None and a3 is not None and {a2.worker, a3.worker} == {"w1", "w2"}
    assert b.free_worker() is None and b.capacity == 3
    assert b.take(a1, "id2") and not b.take(a1, "id2")  # stored once
    assert b.free_worker() == "w2"
    assert b.attempt("k1", "w2") is None  # a stored trial gets no new attempt
    assert len({a1.task, a2.task, a3.task}) == 3 and a1.task.startswith("satbench-r1-k1-a1")


def test_a_lost_worker_loses_its_attempts_and_their_late_results_are_discarded() -> None:
    b = Book("r")
    b.join("w1", "id1", 1)
    b.join("w2", "id2", 1)
    a = b.attempt("k", "w1")
    other = b.attempt("j", "w2")
    assert a is not None and other is not None
    assert b.leave("w1") == [a]
    assert not b.wants(a)
    retry = b.attempt("k", "w2") if b.free_worker() else None
    assert retry is None  # w2 is busy with j
    assert b.take(other, "id2")
    retry = b.attempt("k", "w2")
    assert retry is not None and retry.n == 2 and retry.worker == "w2"
    assert not b.take(a, "id1")  # the lost attempt's result, had it come: discarded
    assert b.take(retry, "id2")


def test_a_result_from_another_incarnation_of_the_worker_is_discarded() -> None:
    b = Book("r")
    b.join("w1", "id1", 1)
    a = b.attempt("k", "w1")
    assert a is not None and not b.take(a, "id1-restarted")
    assert b.free_worker() == "w1"


def test_attempts_are_bounded_and_cancel_all_wants_nothing() -> None:
    b = Book("r", max_attempts=2)
    b.join("w", "i", 2)
    a1 = b.attempt("k", "w")
    assert a1 is not None and b.drop(a1) and not b.drop(a1)
    a2 = b.attempt("k", "w")
    assert a2 is not None and a2.n == 2 and b.tries("k") == 2
    assert b.attempt("k", "w") is None  # its attempts are spent
    j = b.attempt("j", "w")
    assert j is not None
    assert b.cancel_all() == sorted([a2, j], key=lambda x: x.task)
    assert not b.take(a2, "i") and not b.take(j, "i")
    b.give_up("k")
    assert b.attempt("k", "w") is None


def test_cores_are_split_into_disjoint_equal_sets() -> None:
    assert split_cores(2, [0, 1]) == [[0], [1]]
    assert split_cores(3, range(8)) == [[0, 1], [2, 3], [4, 5]]
    assert split_cores(1, [3, 1]) == [[1, 3]]
    with pytest.raises(InputError, match="need a core each"):
        split_cores(3, [0, 1])
    with pytest.raises(InputError):
        split_cores(0, [0, 1])


def test_cpu_lists_parse_as_taskset_takes_them() -> None:
    assert parse_cores("0") == [0]
    with pytest.raises(InputError, match="CPU list"):
        parse_cores("a-b")
    with pytest.raises(InputError, match="may only use"):
        parse_cores("100000")


def test_artefacts_travel_as_a_gzipped_tar(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "server").mkdir(parents=True)
    (src / "client.json").write_text("{}")
    (src / "server" / "access.jsonl").write_bytes(b"x" * 10_000)
    data = pack(src)
    assert data[:2] == b"\x1f\x8b" and len(data) < 1000
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "stale").write_text("old")
    unpack(data, dest)
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == [
        "client.json", "server", "server/access.jsonl"]
    assert (dest / "server" / "access.jsonl").read_bytes() == b"x" * 10_000


def test_a_trial_record_survives_pickling() -> None:
    exp = spec.build("p", {"link": "wire", "protocol": "h2", "page": "blank", "client": "loader"}, seed=1)
    t = exp.trials[0]
    rec = TrialRecord(key=t.key, rep=t.rep, seq=1, factors=t.factors, scenarios=t.scenarios,
                      status=TrialStatus.VALID, reason=None, started=1.0, duration_s=2.0, overhead_s=0.5, seed=3,
                      env={"worker": {"name": "w"}}, links=t.links, metrics={"plt_ms": 12.0})
    back = pickle.loads(pickle.dumps(rec))
    assert back == rec and back.links["link"].hash == t.link.hash
    assert pickle.loads(pickle.dumps(exp)).trials[0].key == t.key


def test_scheduler_and_parallel_in_the_experiment_file(tmp_path: Path) -> None:
    base = '[factors]\nlink = "wire"\nprotocol = "h2"\npage = "blank"\nclient = "loader"\n'

    def load(extra: str) -> spec.Experiment:
        p = tmp_path / "e.toml"
        p.write_text(f'[experiment]\nname = "e"\n{extra}\n{base}')
        return spec.load(p)

    assert load('scheduler = "tls://lab1:8786"').scheduler == "tls://lab1:8786"
    assert load("parallel = 2").parallel == 2
    e = load("")
    assert e.scheduler is None and e.parallel is None
    with pytest.raises(spec.ExperimentError, match=r"e.toml:4: experiment.scheduler: must be a Dask scheduler"):
        load('\nscheduler = "lab1:8786"')
    with pytest.raises(spec.ExperimentError, match=r"e.toml:4: experiment.parallel: must be a whole number"):
        load("\nparallel = 0")
    with pytest.raises(spec.ExperimentError, match=r"experiment.parallel: give scheduler .* not both"):
        load('scheduler = "tcp://127.0.0.1:1"\nparallel = 2')


def test_the_parallel_bench_shares_cores_only_beyond_one_testbed_per_core() -> None:
    from satbench.bench.parallel import cores_for, counts, format_report, planner_says

    assert cores_for(1, [0, 1]) == [[0, 1]] and cores_for(2, [0, 1]) == [[0], [1]]
    assert cores_for(3, [0, 1]) == [[0], [1], [0]]  # what the planner refuses, measured to show why
    assert counts(2) == [1, 2, 3] and counts(1) == [1, 2] and counts(16) == [1, 2, 3, 4]
    # The planner's word is the one satbench run gives: a loader study takes a core, a browser two.
    assert planner_says(2, 2)["loader"] == "accepted"
    assert "at most --parallel 1 on 2 cores" in planner_says(2, 2)["browser"]
    assert "at most --parallel 2 on 2 cores" in planner_says(3, 2)["loader"]
    level = {"testbeds": 2, "planner": {"loader": "accepted", "browser": "refused"},
             "trials": {"trials": 20, "valid": 19, "span_s": 36.0, "trials_per_hour": 2000.0,
                        "not_valid": {"CPU busy": 1}, "cores": [[0], [1]], "plt_median_ms": 190.0,
                        "plt_p10_ms": 185.0, "plt_p90_ms": 200.0, "plt_difference_ms": [6.0, 2.0, 9.5]},
             "fidelity": {"rtt_error": {"probes": 500, "received": 500, "median_ms": 0.09, "p99_ms": 0.7},
                          "goodput": {"mbps": 95.1, "fraction": 0.9999}, "neighbours": [{"mbps": 94.0}]}}
    text = format_report({"machine": {"cores": 2, "kernel": "6.18"}, "repetitions": 10, "levels": [level]})
    assert "N = 2 (cores 0; 1)" in text and "20 (19 valid) in 36 s = 2000 per hour; not valid: CPU busy x1" in text
    assert "against N = 1: +6.0 ms [+2.0, +9.5]" in text and "median +0.090 ms, p99 +0.700 ms" in text
    assert "99.99 % of ideal" in text and "neighbour 2: bulk 94.0 Mbit/s" in text
