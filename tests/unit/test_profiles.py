"""Link profiles: every built-in loads; bad input is named by file, line and field.
No root needed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from satbench import ProfileError, load_profile, prereq, profiles

from ..helpers import run_cli

BUILTIN = ["geo", "lan", "fair-lan", "fair-lte", "fair-wifi", "fair-3g", "geo-consumer", "meo", "leo", "wifi", "wire"]


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_profiles_load(name: str) -> None:
    p = load_profile(name)
    assert p.name == name
    cfg = p.emulator_config(seed=7)
    assert cfg["seed"] == 7 and set(cfg) >= {"forward", "return"}


def test_builtin_configs_pass_the_emulators_own_check(tmp_path: Path) -> None:
    binary = prereq.link_binary()
    if not binary.exists():
        pytest.skip("emulator not built")
    for name in BUILTIN:
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps(load_profile(name).emulator_config(1)))
        p = subprocess.run([str(binary), "--check", "--config", str(f)], capture_output=True, text=True)
        assert p.returncode == 0, (name, p.stderr)


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
        ('name = "x"\n[forward]\ndelay_ms = -5\n', 3, "forward.delay_ms", "zero or positive"),
        ('name = "x"\n[forward]\n[return]\nrate_mbps = 0\n', 4, "return.rate_mbps", "positive"),
        ('name = "x"\n[return]\n\nrate_mbps = -2\n', 4, "return.rate_mbps", "positive"),
        ('name = "x"\n[forward]\nloss = 1.5\n', 3, "forward.loss", "[0, 1]"),
        ('name = "x"\n[forward]\nloss = -0.1\n', 3, "forward.loss", "[0, 1]"),
        ('name = "x"\n[forward]\nber = 2\n', 3, "forward.ber", "[0, 1]"),
        ('name = "x"\n[forward]\nrate_mbps = "fast"\n', 3, "forward.rate_mbps", "number"),
        ('name = "x"\n[forward]\ncolour = 1\n', 3, "forward.colour", "unknown key"),
        ('name = "x"\n[forward]\nqueue_ms = 10\n', 3, "forward.queue_ms", "needs a rate"),
        ('name = "x"\n[forward]\nrate_mbps = 1\nrate_schedule = [[0, 1]]\n', 4, "forward.rate_schedule", "conflicts"),
        ('name = "x"\n[forward]\ndelay_schedule = [[0, 1], [0, 2]]\n', 3, "forward.delay_schedule", "increase"),
        ('name = "x"\n[forward]\nloss_schedule = [[0, 2]]\n', 3, "forward.loss_schedule", "[0, 1]"),
        ('name = "x"\n[forward]\ngilbert = { p = 0.1 }\n', 3, "forward.gilbert", "p and r"),
    ],
)
def test_bad_values_name_file_line_and_field(tmp_path: Path, body: str, line: int, field: str, words: str) -> None:
    f = write(tmp_path, body)
    with pytest.raises(ProfileError) as e:
        profiles.load(str(f))
    assert e.value.file == str(f) and e.value.line == line and e.value.field == field
    assert str(e.value).startswith(f"{f}:{line}: {field}: ")
    assert words in str(e.value)


def test_toml_syntax_error_names_line(tmp_path: Path) -> None:
    f = write(tmp_path, 'name = "x"\n[forward]\nrate_mbps = = 3\n')
    with pytest.raises(ProfileError) as e:
        profiles.load(str(f))
    assert e.value.line == 3 and str(f) in str(e.value)


def test_malformed_trace_line_is_named(tmp_path: Path) -> None:
    (tmp_path / "t.trace").write_text("1\n2\n3x\n4\n")
    f = write(tmp_path, 'name = "x"\n[forward]\ntrace = "t.trace"\n')
    with pytest.raises(ProfileError) as e:
        profiles.load(str(f))
    assert str(e.value) == f"{tmp_path / 't.trace'}:3: expected a whole number of milliseconds, found '3x'"
    (tmp_path / "t.trace").write_text("5\n4\n")
    with pytest.raises(ProfileError, match=r"t.trace:2: 4 ms comes before"):
        profiles.load(str(f))


def test_unknown_profile_lists_the_available_ones() -> None:
    with pytest.raises(ProfileError) as e:
        load_profile("nosuch")
    assert "nosuch" in str(e.value) and "geo" in str(e.value)


def test_bad_override_is_named() -> None:
    with pytest.raises(ProfileError) as e:
        load_profile("geo", ["forward.delay_ms=-1"])
    assert str(e.value) == "--set forward.delay_ms=-1: forward.delay_ms: must be zero or positive, got -1"
    with pytest.raises(ProfileError, match="unknown direction"):
        load_profile("geo", ["sideways.delay_ms=1"])
    with pytest.raises(ProfileError, match="KEY=VALUE"):
        load_profile("geo", ["delay_ms"])
