"""Benchmarks: figures of satbench's own speed and error, each a ``run``
(measure, return a JSON-able dict) and a ``format_report`` (its text).

- :mod:`.link`: the emulator's throughput, CPU, RTT error and goodput;
- :mod:`.server`: the test server's throughput per protocol;
- :mod:`.loader`: the synthetic loader's CPU with many clients;
- :mod:`.harness`: the overhead per trial and the plan's accuracy;
- :mod:`.parallel`: ``--parallel N`` at N = 1 to one beyond a testbed per core: trials per hour, PLT, the
  emulator's RTT error and goodput beside busy testbeds, and what the planner accepts;
- :mod:`.soak`: a thousand trials in one run, and whether anything leaks;
- :mod:`.pep`: the split-TCP PEP's relay throughput, CPU and set-up latency;
- :mod:`.capture`: what capturing a browser load's frames costs its PLT, FCP and LCP;
- :mod:`.shaped`: browser-shaped loader clients against Chromium: PLT agreement and CPU per client;
- :mod:`.returning`: what a returning visitor saves (TLS resumption, TCP Fast Open, 0-RTT), paired within
  repeat-view trials;
- :mod:`.replay`: what replaying a site of 10, 100 and 300 hosts costs (set-up, server memory).
"""

BENCHES = ("link", "server", "loader", "harness", "parallel", "soak", "pep", "capture", "shaped", "returning", "replay")
