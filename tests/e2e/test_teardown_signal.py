"""A stop signal that lands while a testbed is torn down (the runner's Ctrl-C
during a trial's teardown) is held until the teardown is done: no namespace
is left behind, and the signal still stops the program."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import os, signal, sys
# Python's own SIGINT handler, even where the test was started with SIGINT ignored (a background job of a
# non-interactive shell inherits SIG_IGN, and Python then installs no handler).
signal.signal(signal.SIGINT, signal.default_int_handler)
from satbench import Testbed, TestbedSpec, load_profile
tb = Testbed(TestbedSpec(link=load_profile("lan"), seed=1))
tb.__enter__()
print(tb.id, flush=True)
e = next(iter(tb.emulators.values()))
stop = e.stop
def stop_and_signal():
    os.kill(os.getpid(), signal.SIGINT)  # lands in the middle of the teardown
    return stop()
e.stop = stop_and_signal
try:
    tb.close()
except KeyboardInterrupt:
    print("interrupted after the teardown", flush=True)
    sys.exit(0)
print("no interrupt", flush=True)
"""


def test_a_signal_during_teardown_leaves_no_namespace() -> None:
    p = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    tid, said = p.stdout.split()[0], p.stdout.strip().splitlines()[-1]
    assert said == "interrupted after the teardown", p.stdout + p.stderr
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert tid not in left, left
