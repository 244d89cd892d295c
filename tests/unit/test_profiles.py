"""Link profiles: every built-in loads and resolves; bad input, whether its form
(refused here) or its values (refused by the emulator's check), is named by
file, line and field. No root needed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from satbench import ProfileError, load_profile
from satbench.link import profile as profiles
from satbench.link.spec import LinkSpec, resolve

from ..helpers import run_cli

BUILTIN = ["geo", "lan", "fair-lan", "fair-lte", "fair-wifi", "fair-3g", "geo-consumer", "meo", "leo", "wifi", "wire",
           "geo-cra", "geo-rbdc", "geo-vbdc", "geo-mixed", "geo-acm", "geo-ccm"]


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_profiles_load_and_resolve(name: str) -> None:
    p = load_profile(name)
    assert p.name == name
    cfg = p.emulator_config(seed=7)
    assert cfg["seed"] == 7 and set(cfg) >= {"forward", "return"}
    link = resolve(p)
    assert link.name == name and len(link.hash) == 16
    assert link.base_rtt_ms == pytest.approx(p.base_rtt_ms)
    assert link.emulator_config(3)["seed"] == 3 and "seed" not in link.config
    # The stored form reads back as the same link.
    assert LinkSpec.from_json(json.loads(json.dumps(link.to_json()))) == link


def test_the_emulators_numbers() -> None:
    geo = resolve(load_profile("geo"))
    assert geo.forward.mean_bps == 10e6 and geo.base_rtt_ms == 530
    assert geo.forward.queue_limit_bytes == 10e6 / 8 * 0.530
    ber = resolve(load_profile("geo", ["ber=1e-5"]))
    assert ber.forward.packet_loss_1500 == pytest.approx(1 - (1 - 1e-5) ** 12000)
    assert ber.hash != geo.hash
    # The long-run rate of a repeating schedule is its time-weighted mean.
    leo = resolve(load_profile("leo"))
    assert 80e6 < leo.forward.mean_bps < 110e6
    assert resolve(load_profile("wire")).forward.mean_bps is None


def test_a_trace_is_read_once_and_inlined(tmp_path: Path) -> None:
    (tmp_path / "t.trace").write_text("".join(f"{i}\n" for i in range(1, 11)))
    f = write(tmp_path, 'name = "x"\n[forward]\ntrace = "t.trace"\n')
    link = resolve(profiles.load(str(f)))
    assert link.config["forward"]["rate"] == {"kind": "trace", "opportunities_ms": list(range(1, 11))}
    # One 1504-byte opportunity per millisecond (the emulator's own figure).
    assert link.forward.mean_bps == pytest.approx(1504 * 8 * 1000)
    (tmp_path / "t.trace").unlink()  # the resolved link no longer needs the file
    assert link.emulator_config(1)["forward"]["rate"]["opportunities_ms"][-1] == 10


def test_the_same_link_has_the_same_hash_however_written(tmp_path: Path) -> None:
    a = write(tmp_path, 'name = "a"\n[forward]\nrate_mbps = 10\nber = 0\n', "a.toml")
    b = write(tmp_path, 'name = "b"\ndescription = "other words"\n[forward]\nrate_mbps = 10.0\n[return]\n', "b.toml")
    assert resolve(profiles.load(str(a))).hash == resolve(profiles.load(str(b))).hash


def test_reference_parameters() -> None:
    geo = load_profile("geo")
    assert geo.base_rtt_ms == 530
    assert geo.forward.params["rate_mbps"] == 10 and geo.ret.params["rate_mbps"] == 10
    assert load_profile("lan").base_rtt_ms == pytest.approx(1.08)
    assert [load_profile(f"fair-{n}").base_rtt_ms for n in ("lan", "lte", "wifi", "3g")] == [10, 100, 150, 200]
    gc = load_profile("geo-consumer")
    assert (gc.forward.params["rate_mbps"], gc.ret.params["rate_mbps"], gc.base_rtt_ms) == (20, 2, 600)
    leo = load_profile("leo")
    assert leo.align_minute
    rtts = [2 * v for _, v in leo.forward.params["delay_schedule"]]
    assert min(rtts) >= 20 and max(rtts) <= 140
    changes = [t for t, _ in leo.forward.params["rate_schedule"]]
    assert {12, 27, 42, 57} <= set(changes)


def test_override_sets_both_directions_or_one() -> None:
    p = load_profile("geo", ["ber=1e-5", "forward.rate_mbps=20"])
    assert p.forward.params["ber"] == p.ret.params["ber"] == 1e-5
    assert p.forward.params["rate_mbps"] == 20 and p.ret.params["rate_mbps"] == 10
    losses = p.emulator_config(1)["forward"]["loss"]
    assert {"kind": "ber", "ber": 1e-5} in losses


def test_links_command_lists_every_profile_with_parameters() -> None:
    p = run_cli("links", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["name"]: r for r in json.loads(p.stdout)}
    assert set(BUILTIN) <= set(rows)
    assert "10 Mbit/s" in rows["geo"]["forward"] and "265 ms" in rows["geo"]["forward"]
    human = run_cli("links").stdout
    assert "geo  (base RTT 530 ms)" in human


def test_user_profiles_extend_the_builtins(tmp_path: Path) -> None:
    write(tmp_path, 'name = "mine"\n[forward]\nrate_mbps = 3\n[return]\nrate_mbps = 1\n', "mine.toml")
    p = run_cli("links", "--json", env={**os.environ, "SATBENCH_LINKS": str(tmp_path)})
    assert "mine" in {r["name"] for r in json.loads(p.stdout)}


@pytest.mark.parametrize(
    "body, line, field, words",
    [
        ('name = "x"\n[forward]\ndelay_ms = -5\n', 3, "forward.delay_ms", "must be within 0 and 3600000, got -5"),
        ('name = "x"\n[forward]\n[return]\nrate_mbps = 0\n', 4, "return.rate_mbps", "must be from 0.001 to 1e+06 Mbit/s, got 0"),
        ('name = "x"\n[return]\n\nrate_mbps = -2\n', 4, "return.rate_mbps", "got -2"),
        ('name = "x"\n[return]\n\nrate_mbps = 1e30\n', 4, "return.rate_mbps", "got 1e+30"),
        ('name = "x"\n[forward]\nloss = 1.5\n', 3, "forward.loss", "within 0 and 1, got 1.5"),
        ('name = "x"\n[forward]\nloss = -0.1\n', 3, "forward.loss", "within 0 and 1"),
        ('name = "x"\n[forward]\nber = 2\n', 3, "forward.ber", "within 0 and 1"),
        ('name = "x"\n[forward]\nloss = nan\n', 3, "forward.loss", "finite"),
        ('name = "x"\n[forward]\ndelay_ms = inf\n', 3, "forward.delay_ms", "finite"),
        ('name = "x"\n[forward]\ndelay_ms = 1e15\n', 3, "forward.delay_ms", "within 0 and 3600000"),
        ('name = "x"\n[forward]\nqueue_packets = 0\n', 3, "forward.queue_packets", "within 1 and 10000000"),
        ('name = "x"\n[forward]\nrate_schedule = [[0, 1], [3, -1]]\n', 3, "forward.rate_schedule", "point 1: "),
        ('name = "x"\n[forward]\nrate_mbps = "fast"\n', 3, "forward.rate_mbps", "number"),
        ('name = "x"\n[forward]\ncolour = 1\n', 3, "forward.colour", "unknown key"),
        ('name = "x"\n[forward]\nqueue_ms = 10\n', 3, "forward.queue_ms", "needs a rate"),
        ('name = "x"\n[forward]\nrate_mbps = 1\nrate_schedule = [[0, 1]]\n', 4, "forward.rate_schedule", "conflicts"),
        ('name = "x"\n[forward]\ndelay_schedule = [[0, 1], [0, 2]]\n', 3, "forward.delay_schedule", "point 1 does not come after"),
        ('name = "x"\n[forward]\nloss_schedule = [[0, 2]]\n', 3, "forward.loss_schedule", "point 0: probability must be within 0 and 1"),
        ('name = "x"\n[forward]\ngilbert = { p = 0.1 }\n', 3, "forward.gilbert", "p and r"),
        ('name = "x"\n[forward]\ndelay_ms = 10\n[forward.access]\nkind = "acm"\nsymbol_rate_baud = 1\n', 4,
         "forward.access", "symbol rate (baud) must be within 1000 and 10000000000, got 1"),
        ('name = "x"\n[return]\nrate_mbps = 2\n[return.access]\nkind = "dama"\nsuperframe_ms = 0\n', 4,
         "return.access", "superframe (ms) must be within 1 and 1000"),
        ('name = "x"\n[forward]\naccess = 3\n', 3, "forward.access", "must be a table"),
        ('name = "x"\n\n[[terminals]]\nforward = { colour = 1 }\n', 3, "terminals[0].forward.colour", "unknown key"),
        ('name = "x"\n[[terminals]]\nreturn = { vbdc_max_bytes = 1.5 }\n', 2, "terminals[0].return.vbdc_max_bytes",
         "whole number"),
        ('name = "x"\n[return]\nrate_mbps = 2\n[return.access]\nkind = "dama"\n[[terminals]]\n'
         'return = { cra_mbps = -1 }\n', 6, "terminals[0].return.cra_mbps", "must be from 0 to 1e+06 Mbit/s, got -1"),
        ('name = "x"\n[return]\nrate_mbps = 2\n[return.access]\nkind = "dama"\n[[terminals]]\n'
         'return = { cra_mbps = 3 }\n', 6, "terminals", "exceeds the return carrier"),
    ],
)
def test_bad_values_name_file_line_and_field(tmp_path: Path, body: str, line: int, field: str, words: str) -> None:
    f = write(tmp_path, body)
    with pytest.raises(ProfileError) as e:
        resolve(profiles.load(str(f)))
    assert e.value.file == str(f) and e.value.line == line and e.value.field == field
    assert str(e.value).startswith(f"{f}:{line}: {field}: ")
    assert words in str(e.value)


def test_a_file_a_profile_reads_is_named_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "rain.txt").write_text("# a fade\n0 0\n1 x\n")
    f = write(tmp_path, 'name = "x"\n[forward]\ndelay_ms = 10\n[forward.access]\nkind = "acm"\n'
                        'symbol_rate_baud = 2e6\n[[terminals]]\nforward = { fade = "rain.txt" }\n')
    with pytest.raises(ProfileError) as e:
        resolve(profiles.load(str(f)))
    assert (e.value.file, e.value.line) == (str(tmp_path / "rain.txt"), 3) and "time_s dB" in str(e.value)
    f = write(tmp_path, 'name = "x"\n[forward]\nleo_trace = "missing.txt"\n')
    with pytest.raises(ProfileError) as e:
        resolve(profiles.load(str(f)))
    assert e.value.file == str(tmp_path / "missing.txt") and "cannot read" in str(e.value)


def test_access_and_terminals_reach_the_emulator() -> None:
    acm = resolve(load_profile("geo-acm"))
    [term] = acm.forward.access["terminals"]  # type: ignore[index]
    # 20 dB clear sky: 32APSK 9/10 at 2.5 Mbaud; the moderate rain's 8 dB: 16APSK 3/4.
    assert (term["clear_sky_modcod"], term["worst_modcod"]) == ("32APSK 9/10", "16APSK 3/4")
    assert acm.forward.mean_bps == pytest.approx(2.5e6 * 4.453, rel=0.01)
    # The fade file is read by the emulator and part of the link's identity.
    assert acm.config["terminals"][0]["forward"]["fade"]["points"][:2] == [[0.0, 0.0], [2.0, 0.0]]
    vbdc, cra = resolve(load_profile("geo-vbdc")), resolve(load_profile("geo-cra"))
    assert vbdc.ret.access["request_to_grant_ms"] == 609.5  # type: ignore[index]
    assert cra.ret.access["terminals"][0]["cra_bps"] == 2e6  # type: ignore[index]
    # Two terminals: the profile's settings in turn, each with the testbed's subnets.
    from satbench.testbed.testbed import terminal_subnets
    two = resolve(load_profile("geo-rbdc"), terminal_subnets(2))
    assert two.terminals == 2 and [t["subnets"] for t in two.config["terminals"]] == terminal_subnets(2)
    assert two.hash != resolve(load_profile("geo-rbdc")).hash


def test_toml_syntax_error_names_line(tmp_path: Path) -> None:
    f = write(tmp_path, 'name = "x"\n[forward]\nrate_mbps = = 3\n')
    with pytest.raises(ProfileError) as e:
        profiles.load(str(f))
    assert e.value.line == 3 and str(f) in str(e.value)


def test_malformed_trace_line_is_named(tmp_path: Path) -> None:
    (tmp_path / "t.trace").write_text("1\n2\n3x\n4\n")
    f = write(tmp_path, 'name = "x"\n[forward]\ntrace = "t.trace"\n')
    with pytest.raises(ProfileError) as e:
        resolve(profiles.load(str(f)))
    assert str(e.value) == f"{tmp_path / 't.trace'}:3: expected a whole number of milliseconds, found \"3x\""
    (tmp_path / "t.trace").write_text("5\n4\n")
    with pytest.raises(ProfileError, match=r"t.trace:2: 4 ms comes before"):
        resolve(profiles.load(str(f)))


def test_unknown_profile_lists_the_available_ones() -> None:
    with pytest.raises(ProfileError) as e:
        load_profile("nosuch")
    assert "nosuch" in str(e.value) and "geo" in str(e.value)


def test_bad_override_is_named() -> None:
    with pytest.raises(ProfileError) as e:
        resolve(load_profile("geo", ["forward.delay_ms=-1"]))
    assert str(e.value) == "--set forward.delay_ms=-1: forward.delay_ms: delay (ms) must be within 0 and 3600000, got -1"
    with pytest.raises(ProfileError, match="unknown direction"):
        load_profile("geo", ["sideways.delay_ms=1"])
    with pytest.raises(ProfileError, match="KEY=VALUE"):
        load_profile("geo", ["delay_ms"])


def test_a_recorded_leo_trace_and_its_reconfiguration(tmp_path: Path) -> None:
    # Bandwidth: in each of 4 ms, 2, 1, 0 and 1 lines of 12 Mbit/s; delay: 20 then 30 ms per 10 ms.
    (tmp_path / "bw.txt").write_text("0\n0\n1\n3\n")
    (tmp_path / "delay.txt").write_text("20\n30\n")
    f = write(tmp_path, 'name = "leo-rec"\n[forward]\nleo_trace = "bw.txt"\ndelay_trace = "delay.txt"\n'
                        'reconfiguration = { period_s = 15, offset_s = 12, delay_ms = 40, delay_duration_ms = 300,'
                        ' loss_p = 1, loss_duration_ms = 50 }\n[return]\nrate_mbps = 15\ndelay_ms = 20\n')
    link = resolve(profiles.load(str(f)))
    assert link.forward.mean_bps == pytest.approx(4 * 12e6 / 4)
    assert link.forward.min_delay_ms == 20 and link.forward.max_delay_ms >= 30
    assert link.config["forward"]["reconfiguration"]["period_s"] == 15
    # The files are part of the link's identity.
    (tmp_path / "delay.txt").write_text("20\n31\n")
    assert resolve(profiles.load(str(f))).hash != link.hash
