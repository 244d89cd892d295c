"""A measured RTT and loss series as a link profile: both published forms
parse, a lost probe keeps the delay before it, the loss per window is split
over the two directions, and the emulator accepts what is written; bad lines
are refused naming the file and line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from satbench.errors import InputError
from satbench.link import profile, series
from satbench.link.spec import resolve

PING = """PING 198.18.3.10 (198.18.3.10) 56(84) bytes of data.
[1700000000.000] 64 bytes from 198.18.3.10: icmp_seq=1 ttl=64 time=40.0 ms
[1700000000.100] no answer yet for icmp_seq=2
[1700000000.200] 64 bytes from 198.18.3.10: icmp_seq=3 ttl=64 time=60.0 ms
[1700000000.300] 64 bytes from 198.18.3.10: icmp_seq=4 ttl=64 time=50.0 ms
"""


def test_both_forms_parse_and_a_lost_probe_keeps_the_delay_before_it() -> None:
    ping = series.parse(PING, "ping.txt")
    plain = series.parse("time,rtt_ms\n0.0,40\n0.1,lost\n0.2, 60\n0.3 50 # a comment\n", "plain.csv")
    assert [p.rtt_ms for p in ping] == [p.rtt_ms for p in plain] == [40.0, None, 60.0, 50.0]
    d = series.derive(plain, split=0.6, loss_window_s=0.2)
    assert d.interval_ms == 100 and d.duration_s == pytest.approx(0.4)
    assert d.forward_ms == [24.0, 24.0, 36.0, 30.0] and d.return_ms == [16.0, 16.0, 24.0, 20.0]
    # One of the first window's two probes lost: each direction loses 1 - sqrt(1 - 0.5).
    assert d.loss_schedule == [(0.0, round(1 - math.sqrt(0.5), 6)), (0.2, 0.0)]
    assert d.probes == 4 and d.lost == 1


@pytest.mark.parametrize("text, words", [
    ("0 40\n0.1 fast\n", "plain.txt:2: the round trip must be ms or 'lost'"),
    ("0 40\nnoon 40\n", "plain.txt:2: expected TIME RTT"),
    ("0 40\n1 -5\n", "plain.txt:2: the round trip must be 0 to 60000 ms"),
    ("0 lost\n1 lost\n", "every probe was lost"),
    ("0 40\n", "at least two probes"),
])
def test_bad_series_are_refused_with_the_line(text: str, words: str) -> None:
    with pytest.raises(InputError, match=words):
        series.parse(text, "plain.txt")


def test_the_written_profile_is_the_emulators(tmp_path: Path) -> None:
    src = tmp_path / "s.txt"
    src.write_text("".join(f"{t / 100:.2f} {40 if t < 200 else 100}\n" for t in range(400)))
    before = src.read_text()
    p = series.write(src, tmp_path / "out", "stepped", forward_mbps=50, return_mbps=10, queue_ms=80, align_minute=True)
    assert src.read_text() == before
    link = resolve(profile.load(str(p)))
    assert link.forward.mean_mbps == 50 and link.base_rtt_ms == pytest.approx(40, abs=0.5)
    assert "align_minute = true" in p.read_text()
    assert (tmp_path / "out" / "stepped-forward-delay.txt").read_text().splitlines()[199:201] == ["20", "50"]
    with pytest.raises(InputError, match="does not divide a minute"):
        series.write(src, tmp_path / "out", "x", align_minute=True, interval_ms=7)


def test_the_shipped_example_is_what_its_generator_makes(tmp_path: Path) -> None:
    """The synthetic series and the leo-series profile in the package are made by write_example: a
    change to either the generator or the files fails here (remake with write_example())."""
    series.write_example(tmp_path)
    shipped = series.EXAMPLE_SERIES.parent.parent
    for rel in ("series/starlink-synthetic.txt", "leo-series.toml", "leo-series-forward-delay.txt",
                "leo-series-return-delay.txt"):
        assert (tmp_path / rel).read_text() == (shipped / rel).read_text(), rel
    text = (shipped / "leo-series.toml").read_text()
    assert "SYNTHETIC" in text and "align_minute = true" in text
    link = resolve(profile.load("leo-series"))
    assert link.forward.mean_mbps == 100 and link.ret.mean_mbps == 15
