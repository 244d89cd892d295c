"""A link profile from a measured RTT and loss series: the form the public
LEO (Starlink) measurement sets publish their ping and IRTT results in.

Input, one probe per line (``#`` comments and blank lines skipped):

    TIME RTT          seconds (any origin) and the round trip in ms
    TIME lost         a probe that never came back (also: loss, timeout, -, nan, an empty field)

with whitespace or commas between the two, or the output of ``ping -D -O``
(``[EPOCH] 64 bytes from ...: icmp_seq=N ttl=T time=RTT ms`` and ``[EPOCH]
no answer yet for icmp_seq=N``).

What it becomes (:func:`profile`), each direction of the emulated link:

- **delay**: a delay trace (one one-way delay per interval, the probes'
  median spacing, repeating; ``delay_trace``), each interval the latest
  round trip measured by then times the direction's share (``split``, the
  forward share; default half); a lost probe keeps the delay before it;
- **loss**: per window (default 1 s), the share of probes lost is the round
  trip's loss, split evenly over the two directions (each direction loses
  1 - sqrt(1 - p) of its packets), as a ``loss_schedule`` repeating with the
  delay trace;
- **rate and queue**: what the caller gives (a ping series measures no rate).

So the emulated path has the series' round trips, in their order and at
their times, and its losses where they came; the physical lower bound of a
trial over it uses the profile's rates. A series is a sample of one path at
one time: what it gives is that path, not "LEO" in general.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from .profile import NAME_RE

LOST = {"lost", "loss", "timeout", "-", "nan", "", "none", "null"}
PING_RE = re.compile(r"^\[(?P<t>\d+(?:\.\d+)?)\].*?(?:time=(?P<rtt>\d+(?:\.\d+)?) ?ms|no answer yet)")
#: The shortest and longest interval a series may be resampled to (ms).
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 1.0, 10_000.0


@dataclass(frozen=True)
class Probe:
    t_s: float
    #: None: lost.
    rtt_ms: float | None


def parse(text: str, file: str = "<series>") -> list[Probe]:
    """The probes of a series, in time order (see the module's formats); a line that is neither is
    refused naming the file and line."""
    out: list[Probe] = []
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            m = PING_RE.match(line)
            if m is None:
                if "PING" in line or "bytes of data" in line:
                    continue
                raise InputError(f"{file}:{n}: not a ping -D line (a reply with time=, or 'no answer yet')")
            out.append(Probe(float(m.group("t")), float(m.group("rtt")) if m.group("rtt") else None))
            continue
        if line.startswith("PING ") or line.startswith("---") or "packets transmitted" in line or \
                line.startswith("rtt min"):
            continue
        fields = [f.strip() for f in re.split(r"[,\s]+", line, maxsplit=1)] + [""]
        try:
            t = float(fields[0])
        except ValueError:
            if n == 1:  # a header line
                continue
            raise InputError(f"{file}:{n}: expected TIME RTT (seconds, then ms or 'lost'), "
                             f"got {raw.strip()!r}") from None
        v = fields[1].strip().lower()
        if v in LOST:
            out.append(Probe(t, None))
            continue
        try:
            rtt = float(v.removesuffix("ms").strip())
        except ValueError:
            raise InputError(f"{file}:{n}: the round trip must be ms or 'lost', got {fields[1]!r}") from None
        if not math.isfinite(rtt) or rtt < 0 or rtt > 60_000:
            raise InputError(f"{file}:{n}: the round trip must be 0 to 60000 ms, got {rtt}")
        out.append(Probe(t, rtt))
    out.sort(key=lambda p: p.t_s)
    if len(out) < 2:
        raise InputError(f"{file}: a series needs at least two probes, found {len(out)}")
    if all(p.rtt_ms is None for p in out):
        raise InputError(f"{file}: every probe was lost: no round trip to emulate")
    return out


@dataclass(frozen=True)
class Derived:
    """A series as the emulator takes it."""

    interval_ms: float
    #: One-way delays per interval (ms), each direction.
    forward_ms: list[float]
    return_ms: list[float]
    #: (second, loss probability) steps, each direction the same.
    loss_schedule: list[tuple[float, float]]
    duration_s: float
    probes: int
    lost: int

    @property
    def rtt_summary(self) -> dict[str, float]:
        rtts = sorted(f + r for f, r in zip(self.forward_ms, self.return_ms))
        q = statistics.quantiles(rtts, n=4) if len(rtts) > 1 else [rtts[0]] * 3
        return {"min": rtts[0], "p25": q[0], "median": q[1], "p75": q[2], "max": rtts[-1]}


def derive(probes: list[Probe], *, split: float = 0.5, loss_window_s: float = 1.0,
           interval_ms: float | None = None) -> Derived:
    """The delay traces and loss schedule of a parsed series (see the module)."""
    if not 0 < split < 1:
        raise InputError(f"--split: the forward share of the round trip must be between 0 and 1, got {split}")
    if not 0 < loss_window_s <= 3600:
        raise InputError(f"--loss-window-s: must be more than 0 and at most 3600, got {loss_window_s}")
    t0 = probes[0].t_s
    gaps = [b.t_s - a.t_s for a, b in zip(probes, probes[1:]) if b.t_s > a.t_s]
    step = interval_ms if interval_ms is not None else (statistics.median(gaps) * 1e3 if gaps else 1000.0)
    step = min(MAX_INTERVAL_MS, max(MIN_INTERVAL_MS, round(step, 3)))
    duration = probes[-1].t_s - t0 + step / 1e3
    n = max(1, math.ceil(duration * 1e3 / step - 1e-9))
    first = next(p.rtt_ms for p in probes if p.rtt_ms is not None)
    assert first is not None
    rtts: list[float] = []
    k, current = 0, first
    for i in range(n):
        until = t0 + (i + 1) * step / 1e3
        while k < len(probes) and probes[k].t_s < until - 1e-9:
            if (rtt := probes[k].rtt_ms) is not None:
                current = rtt
            k += 1
        rtts.append(current)
    windows = max(1, math.ceil(duration / loss_window_s - 1e-9))
    counts = [[0, 0] for _ in range(windows)]  # [sent, lost]
    for probe in probes:
        w = min(windows - 1, int((probe.t_s - t0) / loss_window_s))
        counts[w][0] += 1
        counts[w][1] += probe.rtt_ms is None
    schedule: list[tuple[float, float]] = []
    for w, (sent, lost) in enumerate(counts):
        p_rt = lost / sent if sent else 0.0
        p = round(1 - math.sqrt(1 - p_rt), 6)
        if not schedule or schedule[-1][1] != p:
            schedule.append((round(w * loss_window_s, 6), p))
    return Derived(interval_ms=step, forward_ms=[round(r * split, 3) for r in rtts],
                   return_ms=[round(r * (1 - split), 3) for r in rtts], loss_schedule=schedule,
                   duration_s=round(n * step / 1e3, 6), probes=len(probes),
                   lost=sum(x.rtt_ms is None for x in probes))


def profile(d: Derived, name: str, source: str, *, forward_mbps: float, return_mbps: float,
            queue_ms: float, align_minute: bool = False) -> tuple[str, dict[str, str]]:
    """The profile's TOML and its delay traces (file name to text)."""
    files = {f"{name}-forward-delay.txt": "\n".join(f"{v:g}" for v in d.forward_ms) + "\n",
             f"{name}-return-delay.txt": "\n".join(f"{v:g}" for v in d.return_ms) + "\n"}
    s = d.rtt_summary
    loss = ", ".join(f"[{t:g}, {p:g}]" for t, p in d.loss_schedule)

    def direction(key: str, rate: float, delays: str) -> str:
        out = (f"[{key}]\nrate_mbps = {rate:g}\nqueue_ms = {queue_ms:g}\ndelay_trace = \"{delays}\"\n"
               f"delay_trace_interval_ms = {d.interval_ms:g}\n")
        if any(p for _, p in d.loss_schedule):
            out += f"loss_schedule = [{loss}]\nloss_period_s = {d.duration_s:g}\n"
        return out

    head = (f"name = \"{name}\"\ndescription = \"from the series {source}: {d.probes} probes over {d.duration_s:g} s, "
            f"RTT median {s['median']:.1f} ms (min {s['min']:.1f}, p25 {s['p25']:.1f}, p75 {s['p75']:.1f}), "
            f"{d.lost} lost; rates set by hand\"\n\n"
            "# Made by satbench series: each direction's one-way delay per interval from the measured round\n"
            "# trips, the loss per window from the probes lost (split over the two directions); repeating.\n"
            + ("align_minute = true\n" if align_minute else "") + "\n")
    text = (head + direction("forward", forward_mbps, f"{name}-forward-delay.txt") + "\n"
            + direction("return", return_mbps, f"{name}-return-delay.txt"))
    return text, files


def write(series: Path, out: Path, name: str, *, split: float = 0.5, loss_window_s: float = 1.0,
          interval_ms: float | None = None, forward_mbps: float = 100.0, return_mbps: float = 15.0,
          queue_ms: float = 100.0, align_minute: bool = False, label: str | None = None) -> Path:
    """Read ``series``, write ``out/NAME.toml`` and its delay traces; return the profile's path. The
    series itself is read, never changed."""
    if not re.fullmatch(NAME_RE, name):
        raise InputError(f"--name: letters, digits, '-', '_' or '.', got {name!r}")
    try:
        text = series.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{series}: cannot read the series: {getattr(e, 'strerror', None) or e}") from None
    d = derive(parse(text, str(series)), split=split, loss_window_s=loss_window_s, interval_ms=interval_ms)
    if align_minute and abs(60 / d.duration_s - round(60 / d.duration_s)) > 1e-9:
        raise InputError(f"--align-minute: the series lasts {d.duration_s:g} s, which does not divide a minute")
    toml, files = profile(d, name, label or series.name, forward_mbps=forward_mbps, return_mbps=return_mbps,
                          queue_ms=queue_ms, align_minute=align_minute)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for fn, body in files.items():
            (out / fn).write_text(body)
        p = out / f"{name}.toml"
        p.write_text(toml)
    except OSError as e:
        raise InputError(f"{out}: cannot write the profile: {e.strerror}") from None
    return p


def lines(probes: Iterable[Probe]) -> str:
    """A series in the plain form (``TIME RTT`` or ``TIME lost``)."""
    return "".join(f"{p.t_s:.3f} {'lost' if p.rtt_ms is None else f'{p.rtt_ms:.2f}'}\n" for p in probes)


#: Published Starlink statistics (../shared/REFERENCE.md, study E): RTT quantiles (ms) and the seconds of
#: each minute at which the constellation reconfigures.
STARLINK_RTT_QUANTILES = ((0.0, 20.0), (0.25, 40.0), (0.5, 50.0), (0.75, 60.0), (1.0, 90.0))
STARLINK_HANDOVERS_S = (12, 27, 42, 57)


#: The shipped example: the series, and how its profile (leo-series) is made from it.
EXAMPLE_SERIES = Path(__file__).parent / "profiles" / "series" / "starlink-synthetic.txt"
EXAMPLE_LABEL = "starlink-synthetic.txt, SYNTHETIC (drawn from the published statistics, not measured)"


def write_example(profiles: Path = EXAMPLE_SERIES.parent.parent) -> Path:
    """(Re)make the shipped example: the synthetic series and the ``leo-series`` profile from it."""
    src = profiles / "series" / EXAMPLE_SERIES.name
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text("# SYNTHETIC: made by satbench.link.series.synthetic_starlink(60, 20, seed=1) from the\n"
                   "# published Starlink statistics (RTT quartiles, reconfiguration seconds, suggested loss);\n"
                   "# not a measurement.\n# time_s rtt_ms (or lost)\n" + lines(synthetic_starlink()))
    return write(src, profiles, "leo-series", forward_mbps=100, return_mbps=15, queue_ms=100, align_minute=True,
                 label=EXAMPLE_LABEL)


def synthetic_starlink(seconds: int = 60, interval_ms: int = 20, seed: int = 1) -> list[Probe]:
    """A SYNTHETIC ping series shaped by the published Starlink statistics, not a measurement: each
    epoch between reconfigurations (seconds 12, 27, 42 and 57 of the minute) has its own base RTT,
    drawn from the published quartiles (min 20, 25th 40, median 50, 75th 60 ms); probes jitter a
    little around it; each reconfiguration brings a 300 ms spike of 30 to 60 ms more and a 30 %
    chance of loss; elsewhere 0.2 % of probes are lost (the suggested uplink loss)."""
    import random  # noqa: PLC0415

    rnd = random.Random(seed)

    def base() -> float:
        u = rnd.random()
        for (u0, v0), (u1, v1) in zip(STARLINK_RTT_QUANTILES, STARLINK_RTT_QUANTILES[1:]):
            if u <= u1:
                return v0 + (v1 - v0) * (u - u0) / (u1 - u0)
        return STARLINK_RTT_QUANTILES[-1][1]

    out, rtt, spike = [], base(), 0.0
    for k in range(seconds * 1000 // interval_ms):
        t = k * interval_ms / 1000
        second = t % 60
        if any(abs(second - h) < 1e-9 for h in STARLINK_HANDOVERS_S):
            rtt, spike = base(), rnd.uniform(30, 60)
        in_spike = any(0 <= second - h < 0.3 for h in STARLINK_HANDOVERS_S)
        lost = rnd.random() < (0.3 if in_spike else 0.002)
        value = rtt + (spike if in_spike else 0.0) + abs(rnd.gauss(0, 2))
        out.append(Probe(round(t, 3), None if lost else round(value, 2)))
    return out
