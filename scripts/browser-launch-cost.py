#!/usr/bin/env python3
"""What a fresh Chromium per trial costs: launch, a new context and page (about:blank), close; N times,
inside a testbed's client namespace, as the runner launches it. Run as root:
.venv/bin/python scripts/browser-launch-cost.py [N] (docs/benchmarks.md, "The harness")."""

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from satbench import Testbed, TestbedSpec, load_profile
from satbench.endpoints.browser import BrowseOptions
from satbench.endpoints.chromium import Browser, _flags

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
times: dict[str, list[float]] = {"launch": [], "context+page": [], "close": [], "total": []}
with Testbed(TestbedSpec(link=load_profile("lan"), seed=1)) as tb, Browser() as b:
    for _ in range(N):
        with tempfile.TemporaryDirectory(dir=b._tmp.name) as tmp:
            home = Path(tmp) / "home"
            shutil.copytree(b._nss_template, home)
            t0 = time.monotonic()
            br = b._pw.chromium.launch(executable_path=b._executable(tb.client, Path(tmp)), headless=True,
                                       args=_flags(BrowseOptions(protocol="h2"), "https://server.test/"),
                                       env={"HOME": str(home), "PATH": "/usr/bin:/bin"})
            t1 = time.monotonic()
            br.new_context().new_page().goto("about:blank")
            t2 = time.monotonic()
            br.close()
            t3 = time.monotonic()
        for name, dt in (("launch", t1 - t0), ("context+page", t2 - t1), ("close", t3 - t2), ("total", t3 - t0)):
            times[name].append(dt)
for name, xs in times.items():
    print(f"{name:13s} median {statistics.median(xs) * 1e3:7.1f} ms  min {min(xs) * 1e3:7.1f}  "
          f"max {max(xs) * 1e3:7.1f}  (n={len(xs)})")
