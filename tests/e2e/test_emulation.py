"""Chromium's emulation as factors: CPU throttling at 4x makes a script-heavy
page's load (the ``script`` page: a fixed amount of script work) measurably slower on the LAN, and a phone is a phone (its
viewport, pixel ratio, mobile user agent and touch), each recorded with the
trial; both are refused where the client cannot do them."""

from __future__ import annotations

import re
import statistics
from pathlib import Path

from tests.e2e.test_quic_stacks import trials
from tests.helpers import run_cli


def test_cpu_throttling_slows_a_load_and_a_phone_is_emulated(tmp_path: Path) -> None:
    exp = tmp_path / "emulation.toml"
    exp.write_text('[experiment]\nname = "emulation"\nseed = 3\ntimeout_s = 90\n'
                   '[factors]\nlink = "lan"\nprotocol = "h2"\npage = "script"\nclient = "chromium"\n'
                   'cpu_slowdown = [1, 4]\n'
                   '[[trial]]\ndevice = "phone"\n')
    db = tmp_path / "db.sqlite"
    p = run_cli("run", str(exp), "--db", str(db), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    ts = trials(db)
    assert len(ts) == 3 and all(t["status"] == "valid" for t in ts), [t["reason"] for t in ts]
    plt = {r: statistics.median(t["m"]["plt_ms"] for t in ts if t["f"]["cpu_slowdown"] == r
                                 and t["f"]["device"] == "desktop") for r in (1, 4)}
    assert plt[4] > 1.5 * plt[1], plt  # about 3.3 times here: the page's load is its script
    for t in ts:
        emu = t["env"]["client"]["emulation"]
        assert emu["cpu_slowdown"] == t["f"]["cpu_slowdown"] and emu["device"] == t["f"]["device"]
    phone = next(t["env"]["client"]["emulation"] for t in ts if t["f"]["device"] == "phone")
    assert phone["viewport"]["width"] < 500 and phone["is_mobile"] and phone["has_touch"]
    assert phone["device_scale_factor"] > 2 and "Mobile" in phone["user_agent"]


def test_emulation_is_refused_where_the_client_cannot_do_it(tmp_path: Path) -> None:
    exp = tmp_path / "bad.toml"
    for client, factor, value, why in (("firefox", "cpu_slowdown", "4", "no CPU throttling"),
                                       ("firefox", "device", '"phone"', "no mobile layout"),
                                       ("loader", "device", '"phone"', "render nothing"),
                                       ("chromium", "cpu_slowdown", "0.5", ""), ("chromium", "device", '"watch"', "")):
        exp.write_text(f'[experiment]\nname = "bad"\n[factors]\nlink = "lan"\nprotocol = "h2"\npage = "shop"\n'
                       f'client = "{client}"\n{factor} = {value}\n')
        p = run_cli("plan", str(exp))
        assert p.returncode == 2, p.stdout + p.stderr
        [msg] = p.stderr.strip().splitlines()
        assert re.search(rf"{re.escape(str(exp))}:8: (factors\.)?{factor}: ", msg) and why in msg, msg
