"""Property-based tests of the Python-side parsers (hypothesis): whatever an
experiment file, a link profile or an override holds, reading it either
succeeds or raises the one error type that names the file and field; never
a traceback. (The Rust parsers are fuzzed by `cargo test` targets.)"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from satbench.errors import ProfileError
from satbench.experiment import spec
from satbench.link import profile
from satbench.link.spec import LinkSpec, resolve

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True),
                    st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=8)
link_keys = st.sampled_from(sorted(profile.KEYS) + ["colour", "rate", ""])
directions = st.dictionaries(link_keys, values, max_size=6)


def _toml_value(v: Any) -> str:
    """A value as TOML text (floats spelled so TOML reads them back)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(x)}" for k, x in v.items()) + "}"


def _profile_text(name: Any, fwd: dict[str, Any], ret: dict[str, Any]) -> str:
    lines = [f"name = {_toml_value(name)}", "[forward]"]
    lines += [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in fwd.items()]
    lines += ["[return]"] + [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in ret.items()]
    return "\n".join(lines) + "\n"


@SETTINGS
@given(name=st.one_of(st.just("p"), scalars), fwd=directions, ret=directions)
def test_any_profile_parses_or_names_its_field(name: Any, fwd: dict[str, Any], ret: dict[str, Any]) -> None:
    text = _profile_text(name, fwd, ret)
    try:
        p = profile.parse_profile(text, file="/tmp/p.toml")
    except ProfileError as e:
        assert str(e).startswith("/tmp/p.toml"), e
        return
    # What parses is either resolved by the emulator or refused naming a key.
    try:
        link = resolve(p)
    except ProfileError as e:
        assert e.field or e.file, e
        return
    assert LinkSpec.from_json(json.loads(json.dumps(link.to_json()))) == link


@SETTINGS
@given(key=st.text(max_size=20), value=st.text(max_size=20))
def test_any_override_is_applied_or_refused(key: str, value: str) -> None:
    try:
        p = profile.load("wire", [f"{key}={value}"])
    except ProfileError:
        return
    try:
        resolve(p)
    except ProfileError as e:
        assert "--set" in str(e) or e.field, e


experiment_tables = st.fixed_dictionaries(
    {"experiment": st.dictionaries(st.sampled_from(["name", "repetitions", "seed", "order", "timeout_s", "warmup",
                                                    "artefacts", "colour"]), values, max_size=5)},
    optional={"factors": st.dictionaries(st.sampled_from(["link", "protocol", "cc", "page", "client", "clients",
                                                          "connections", "server", "access", "link.delay_ms",
                                                          "server.tfo", "nonsense"]), values, max_size=6),
              "trial": st.lists(st.dictionaries(st.sampled_from(["protocol", "page", "cc"]), scalars, max_size=3),
                                max_size=2)})


@SETTINGS
@given(doc=experiment_tables)
def test_any_experiment_document_parses_or_names_its_field(tmp_path_factory: Any, doc: dict[str, Any]) -> None:
    try:
        exp = spec.parse(doc, "", "/tmp/e.toml")
    except ProfileError as e:
        assert str(e).startswith("/tmp/e.toml"), e
        return
    assert exp.trials and all(len(t.key) == 16 for t in exp.trials)


@settings(max_examples=60, deadline=None)
@given(raw=st.binary(max_size=200))
def test_any_bytes_as_an_experiment_file(tmp_path_factory: Any, raw: bytes) -> None:
    p = Path(tmp_path_factory.mktemp("e")) / "e.toml"
    p.write_bytes(raw)
    try:
        spec.load(p)
    except ProfileError as e:
        assert str(e).startswith(str(p)), e


def test_toml_values_render_back() -> None:
    assert tomllib.loads("v = " + _toml_value([1, 2.5, "x", {"a": True}]))["v"] == [1, 2.5, "x", {"a": True}]
