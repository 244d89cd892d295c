"""One ``satbench-link`` process joining two TUN devices in two namespaces."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .. import prereq
from ..model import LinkCounters
from ..testbed.proc import read_ready_line, stop_process
from .spec import LinkSpec

NETNS_RUN = Path("/run/netns")


class Emulator:
    """The emulator of one link: ``near`` and ``far`` are (namespace, device);
    the forward direction runs from far to near. ``near`` may list several
    terminals, in the order of the link's ``terminals``."""

    def __init__(self, name: str, link: LinkSpec, seed: int, near: tuple[str, str] | list[tuple[str, str]],
                 far: tuple[str, str], run_dir: Path, pcap_dir: Path | None):
        nears = near if isinstance(near, list) else [near]
        self.name, self.link, self.seed = name, link, seed
        self.config_path = run_dir / f"{name}.json"
        self.stats_path = run_dir / f"{name}-stats.json"
        self.config_path.write_text(json.dumps(link.emulator_config(seed)))
        argv = [str(prereq.link_binary()), "--config", str(self.config_path)]
        for ns, dev in nears:
            argv += ["--terminal", f"{NETNS_RUN / ns}:{dev}"]
        argv += ["--gateway", f"{NETNS_RUN / far[0]}:{far[1]}", "--stats", str(self.stats_path),
                 "--parent-pid", str(os.getpid())]
        if pcap_dir is not None:
            d = pcap_dir / name
            d.mkdir(parents=True, exist_ok=True)
            argv += ["--pcap-dir", str(d)]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        self.ready = read_ready_line(self.proc, f"link emulator {name}", 10.0)
        self.stats: dict[str, Any] | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> dict[str, Any] | None:
        """Stop the emulator and return its counters (as it wrote them)."""
        stop_process(self.proc)
        if self.stats is None and self.stats_path.exists():
            self.stats = json.loads(self.stats_path.read_text())
        return self.stats

    def counters(self) -> LinkCounters | None:
        return None if self.stats is None else LinkCounters.parse(self.stats)
