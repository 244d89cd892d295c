"""One generator for every real-time schedule: the browsers' script (rt.js) gives the schedules
crates/common gives (its golden fixture, written by its tests), for the server's messages and for a
client's; the loader and the server use the crate itself. Runs the script's generator in Debian's
Chromium (V8), as a browser trial does."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from satbench import prereq
from satbench.endpoints.chromium import BASE_FLAGS, CHROMIUM

FIXTURE = prereq.REPO / "tests" / "fixtures" / "rt-arrivals.json"
RT_JS = prereq.REPO / "python" / "satbench" / "endpoints" / "static" / "rt.js"


def _generator_source() -> str:
    m = re.search(r"// <satbench-common>.*?// </satbench-common>", RT_JS.read_text(), re.S)
    assert m, "rt.js has no <satbench-common> section"
    return m.group(0)


@pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no Chromium (scripts/setup installs it)")
def test_the_browser_script_draws_the_crates_schedules():
    from playwright.sync_api import sync_playwright

    cases = json.loads(FIXTURE.read_text())["cases"]
    assert len(cases) >= 5 and any(c["poisson"] for c in cases) and any(not c["poisson"] for c in cases)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=BASE_FLAGS)
        try:
            page = browser.new_page()
            page.add_script_tag(content=_generator_source())
            got = page.evaluate("""(cases) => cases.map((c) => {
                const up = satbenchUpSeed(BigInt(c.seed), BigInt(c.client));
                return {up_seed: up.toString(),
                        down_ms: satbenchArrivals(BigInt(c.seed), c.n, c.interval_ms, c.poisson),
                        up_ms: satbenchArrivals(up, c.n, c.interval_ms, c.poisson)};
            })""", cases)
        finally:
            browser.close()
    for c, g in zip(cases, got):
        assert g["up_seed"] == c["up_seed"], c
        for side in ("down_ms", "up_ms"):
            # The same draws; the logarithm may differ in its last bit between V8 and libm.
            assert g[side] == pytest.approx(c[side], rel=1e-12, abs=1e-9), (side, c)
