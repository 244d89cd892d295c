//! Link capacity: when does a packet that starts transmission now finish?
//!
//! Three kinds: unlimited, a bit rate (constant or scheduled, 0 meaning an
//! outage), and a Mahimahi delivery trace.

use crate::schedule::Schedule;
use crate::time::Instant;
use serde::Serialize;

/// How long the link takes to put a packet on the wire.
pub trait Capacity: Send {
    /// The packet of `bytes` reaches the head of the link at `start` (the link
    /// is idle then). Returns when its last bit has left, or `None` if the link
    /// never again has capacity.
    fn finish(&mut self, start: Instant, bytes: u32) -> Option<Instant>;
    /// Average rate in bit/s used to size queues given in milliseconds; `None` if unlimited.
    fn nominal_bps(&self) -> Option<f64>;
    /// The most it ever delivers: no interval of `t` seconds carries more
    /// than `burst_bytes + bps x t / 8` bytes; `None` if unlimited. What a
    /// lower bound on a transfer's time may assume of the link.
    fn peak(&self) -> Option<Peak>;
}

/// The highest rate of a capacity (see [`Capacity::peak`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Peak {
    pub bps: f64,
    pub burst_bytes: u64,
}

/// No serialisation delay at all.
#[derive(Debug, Default)]
pub struct Unlimited;

impl Capacity for Unlimited {
    fn finish(&mut self, start: Instant, _bytes: u32) -> Option<Instant> {
        Some(start)
    }
    fn nominal_bps(&self) -> Option<f64> {
        None
    }
    fn peak(&self) -> Option<Peak> {
        None
    }
}

/// A bit rate that may change over time; a rate of zero is an outage.
#[derive(Debug)]
pub struct Rate {
    bps: Schedule,
}

impl Rate {
    pub fn constant(bps: f64) -> Rate {
        Rate {
            bps: Schedule::constant(bps),
        }
    }
    pub fn scheduled(bps: Schedule) -> Rate {
        Rate { bps }
    }
}

impl Capacity for Rate {
    fn finish(&mut self, start: Instant, bytes: u32) -> Option<Instant> {
        let mut bits = bytes as f64 * 8.0;
        let mut t = start;
        loop {
            let (rate, next) = self.bps.segment_at(t);
            if rate <= 0.0 {
                t = next?;
                continue;
            }
            let need_ns = (bits * 1e9 / rate).round() as u64;
            let done = Instant::from_nanos(t.as_nanos() + need_ns);
            match next {
                Some(n) if done > n => {
                    bits -= rate * (n - t).as_secs_f64();
                    t = n;
                }
                _ => return Some(done),
            }
        }
    }
    fn nominal_bps(&self) -> Option<f64> {
        Some(self.bps.mean())
    }
    fn peak(&self) -> Option<Peak> {
        Some(Peak {
            bps: self.bps.max(),
            burst_bytes: 0,
        })
    }
}

/// A capacity that is switched off in windows (an outage schedule: 1 up,
/// 0 down). A packet does not start in a window, and a packet whose
/// transmission would overlap the next window starts after it. The inner
/// capacity must not keep state between calls (a rate, not a trace).
pub struct Gated {
    inner: Box<dyn Capacity>,
    up: Schedule,
}

impl Gated {
    pub fn new(inner: Box<dyn Capacity>, up: Schedule) -> Gated {
        Gated { inner, up }
    }
}

impl Capacity for Gated {
    fn finish(&mut self, start: Instant, bytes: u32) -> Option<Instant> {
        let mut s = start;
        loop {
            let (v, next) = self.up.segment_at(s);
            if v == 0.0 {
                s = next?;
                continue;
            }
            let fin = self.inner.finish(s, bytes)?;
            match next {
                Some(n) if n < fin => s = n,
                _ => return Some(fin),
            }
        }
    }
    fn nominal_bps(&self) -> Option<f64> {
        self.inner.nominal_bps().map(|b| b * self.up.mean())
    }
    fn peak(&self) -> Option<Peak> {
        self.inner.peak()
    }
}

/// Bytes one Mahimahi delivery opportunity may carry.
pub const TRACE_OPPORTUNITY_BYTES: u32 = 1504;

/// A Mahimahi delivery trace: each line is a millisecond at which up to
/// [`TRACE_OPPORTUNITY_BYTES`] may leave; the trace repeats after its last line.
///
/// As in Mahimahi, a packet may span several opportunities; bytes of an
/// opportunity that no queued packet uses are lost.
#[derive(Debug, Clone)]
pub struct Trace {
    /// Opportunity offsets in ms, non-decreasing, last > 0.
    opportunities: Vec<u64>,
    period_ms: u64,
    /// Index (absolute, counting repetitions) of the opportunity in use and bytes left in it.
    current: Option<(u64, u32)>,
}

/// Most delivery opportunities a trace may hold (80 MB of offsets in memory).
pub const MAX_TRACE_OPPORTUNITIES: usize = 10_000_000;
/// Latest offset of an opportunity, in ms (about 11.6 days; the model's
/// nanosecond clock reaches 18,000 such periods).
pub const MAX_TRACE_MS: u64 = 1_000_000_000;

/// A trace entry that could not be used.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceError {
    /// 1-based position: the line of a trace file, or the entry of an inline
    /// list; 0 if the error concerns the whole trace.
    pub line: usize,
    pub message: String,
}

impl core::fmt::Display for TraceError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: {}", self.line, self.message)
        } else {
            f.write_str(&self.message)
        }
    }
}

impl std::error::Error for TraceError {}

/// Collects opportunities, checking each as it comes.
struct TraceBuilder {
    opportunities: Vec<u64>,
    /// "line" or "entry", for messages.
    unit: &'static str,
}

impl TraceBuilder {
    fn push(&mut self, line: usize, ms: u64) -> Result<(), TraceError> {
        let fail = |message: String| Err(TraceError { line, message });
        if self.opportunities.len() == MAX_TRACE_OPPORTUNITIES {
            return fail(format!(
                "trace has more than {MAX_TRACE_OPPORTUNITIES} delivery opportunities"
            ));
        }
        if ms > MAX_TRACE_MS {
            return fail(format!(
                "{ms} ms is later than the latest allowed, {MAX_TRACE_MS} ms"
            ));
        }
        if let Some(&prev) = self.opportunities.last() {
            if ms < prev {
                let unit = self.unit;
                return fail(format!(
                    "{ms} ms comes before the previous {unit}'s {prev} ms"
                ));
            }
        }
        self.opportunities.push(ms);
        Ok(())
    }

    fn finish(self) -> Result<Trace, TraceError> {
        let whole = |message: &str| {
            Err(TraceError {
                line: 0,
                message: message.into(),
            })
        };
        let Some(&last) = self.opportunities.last() else {
            return whole("trace has no delivery opportunities");
        };
        if last == 0 {
            return whole("trace must end after 0 ms");
        }
        Ok(Trace {
            opportunities: self.opportunities,
            period_ms: last,
            current: None,
        })
    }
}

impl Trace {
    /// Parse Mahimahi's format: one non-negative integer (ms) per line,
    /// non-decreasing, at most [`MAX_TRACE_MS`], at most
    /// [`MAX_TRACE_OPPORTUNITIES`] lines, the last after 0. Blank lines are skipped.
    pub fn parse(text: &str) -> Result<Trace, TraceError> {
        let mut b = TraceBuilder {
            opportunities: Vec::new(),
            unit: "line",
        };
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            let ms: u64 = line.parse().map_err(|_| TraceError {
                line: i + 1,
                message: format!("expected a whole number of milliseconds, found {line:?}"),
            })?;
            b.push(i + 1, ms)?;
        }
        b.finish()
    }

    /// The same trace given as a list of offsets in ms (the rules of
    /// [`Trace::parse`]); an error's `line` is the 1-based entry.
    pub fn from_opportunities(ms: &[u64]) -> Result<Trace, TraceError> {
        let mut b = TraceBuilder {
            opportunities: Vec::with_capacity(ms.len()),
            unit: "entry",
        };
        for (i, &m) in ms.iter().enumerate() {
            b.push(i + 1, m)?;
        }
        b.finish()
    }

    /// The opportunities' offsets in ms within one period.
    pub fn opportunities(&self) -> &[u64] {
        &self.opportunities
    }

    fn time_of(&self, idx: u64) -> Instant {
        let n = self.opportunities.len() as u64;
        Instant::from_millis((idx / n) * self.period_ms + self.opportunities[(idx % n) as usize])
    }

    /// Index of the first opportunity at or after `t`.
    fn first_at_or_after(&self, t: Instant) -> u64 {
        let n = self.opportunities.len() as u64;
        let ms_ceil = t.as_nanos().div_ceil(1_000_000);
        let rep = ms_ceil / self.period_ms;
        let off = ms_ceil % self.period_ms;
        // Opportunities at offset == period end the previous repetition and
        // fall on this repetition's offset 0.
        if off == 0 && rep > 0 {
            let j = self.opportunities.partition_point(|&o| o < self.period_ms) as u64;
            if j < n {
                return (rep - 1) * n + j;
            }
        }
        let i = self.opportunities.partition_point(|&o| o < off) as u64;
        rep * n + i
    }

    /// The most opportunities that fall in one millisecond.
    pub fn busiest_ms(&self) -> u64 {
        let (mut most, mut run) = (0u64, 0u64);
        for (i, &o) in self.opportunities.iter().enumerate() {
            run = if i > 0 && self.opportunities[i - 1] == o {
                run + 1
            } else {
                1
            };
            most = most.max(run);
        }
        // The last offset is the next repetition's offset 0 too.
        let last = self.period_ms;
        let at_end = self.opportunities.iter().filter(|&&o| o == last).count() as u64;
        let at_start = self.opportunities.iter().filter(|&&o| o == 0).count() as u64;
        most.max(at_end + at_start)
    }

    /// Mean rate of the trace in bit/s.
    pub fn mean_bps(&self) -> f64 {
        self.opportunities.len() as f64 * TRACE_OPPORTUNITY_BYTES as f64 * 8.0
            / (self.period_ms as f64 / 1e3)
    }
}

impl Capacity for Trace {
    fn finish(&mut self, start: Instant, bytes: u32) -> Option<Instant> {
        // Leftover bytes of an opportunity only serve a packet that was already
        // waiting when that opportunity came.
        // An opportunity used up by earlier packets cannot serve this one.
        let (mut idx, mut left) = match self.current {
            Some((i, l)) if l > 0 && self.time_of(i) >= start => (i, l),
            Some((i, _)) => (
                self.first_at_or_after(start).max(i + 1),
                TRACE_OPPORTUNITY_BYTES,
            ),
            None => (self.first_at_or_after(start), TRACE_OPPORTUNITY_BYTES),
        };
        let mut need = bytes;
        while need > left {
            need -= left;
            idx += 1;
            left = TRACE_OPPORTUNITY_BYTES;
        }
        self.current = Some((idx, left - need));
        Some(self.time_of(idx).max(start))
    }
    fn nominal_bps(&self) -> Option<f64> {
        Some(self.mean_bps())
    }
    /// Packets leave at the millisecond of their last opportunity: an
    /// interval of `t` ms spans at most `t + 1` milliseconds' opportunities,
    /// and a packet may have used the leftover of one before it.
    fn peak(&self) -> Option<Peak> {
        let most = self.busiest_ms();
        let per_ms = most * TRACE_OPPORTUNITY_BYTES as u64;
        Some(Peak {
            bps: per_ms as f64 * 8.0 * 1e3,
            burst_bytes: per_ms + TRACE_OPPORTUNITY_BYTES as u64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_rate_exact() {
        let mut r = Rate::constant(10e6);
        assert_eq!(
            r.finish(Instant::ZERO, 1500),
            Some(Instant::from_micros(1200))
        );
    }

    #[test]
    fn rate_change_mid_packet() {
        // 8 Mbit/s for the first 0.5 ms, then 16 Mbit/s: 1000 bytes = 8000 bits;
        // 4000 bits in the first 0.5 ms, the remaining 4000 take 0.25 ms.
        let s = Schedule::new(&[(0.0, 8e6), (0.0005, 16e6)], 0.0).unwrap();
        let mut r = Rate::scheduled(s);
        assert_eq!(
            r.finish(Instant::ZERO, 1000),
            Some(Instant::from_micros(750))
        );
    }

    #[test]
    fn outage_waits_for_capacity() {
        let s = Schedule::new(&[(0.0, 0.0), (1.0, 12e6)], 0.0).unwrap();
        let mut r = Rate::scheduled(s);
        assert_eq!(
            r.finish(Instant::ZERO, 1500),
            Some(Instant::from_millis(1001))
        );
        let never = Schedule::new(&[(0.0, 1e6), (1.0, 0.0)], 0.0).unwrap();
        assert_eq!(
            Rate::scheduled(never).finish(Instant::from_secs_f64(2.0), 1),
            None
        );
    }

    #[test]
    fn gated_rate_waits_out_the_outage() {
        // 1 Mbit/s, down from 1 s to 1.1 s of every 2 s.
        let up = Schedule::new(&[(0.0, 1.0), (1.0, 0.0), (1.1, 1.0)], 2.0).unwrap();
        let mut g = Gated::new(Box::new(Rate::constant(1e6)), up);
        // 1000 bytes = 8 ms: fits before the window.
        assert_eq!(
            g.finish(Instant::from_millis(900), 1000),
            Some(Instant::from_millis(908))
        );
        // Would overlap it: starts after, at 1.1 s.
        assert_eq!(
            g.finish(Instant::from_millis(995), 1000),
            Some(Instant::from_millis(1108))
        );
        // Starts inside it: waits.
        assert_eq!(
            g.finish(Instant::from_millis(1050), 1000),
            Some(Instant::from_millis(1108))
        );
        assert_eq!(g.nominal_bps(), Some(1e6 * 0.95));
    }

    #[test]
    fn trace_parse_errors_name_line() {
        let e = Trace::parse("1\n2\nabc\n").unwrap_err();
        assert_eq!(e.line, 3);
        let e = Trace::parse("5\n3\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert_eq!(Trace::parse("\n").unwrap_err().line, 0);
        assert_eq!(Trace::parse("0\n0\n").unwrap_err().line, 0);
    }

    #[test]
    fn trace_limits() {
        let e = Trace::parse("1\n1000000001\n").unwrap_err();
        assert_eq!((e.line, e.message.contains("later than")), (2, true));
        let many = vec![1u64; MAX_TRACE_OPPORTUNITIES + 1];
        let e = Trace::from_opportunities(&many).unwrap_err();
        assert_eq!(e.line, MAX_TRACE_OPPORTUNITIES + 1);
        let e = Trace::from_opportunities(&[3, 2]).unwrap_err();
        assert_eq!(e.message, "2 ms comes before the previous entry's 3 ms");
        let t = Trace::from_opportunities(&[1, 1, 3]).unwrap();
        assert_eq!(
            (t.opportunities(), t.mean_bps()),
            (&[1, 1, 3][..], 3.0 * 1504.0 * 8.0 / 0.003)
        );
    }

    #[test]
    fn trace_delivers_on_opportunities_and_loops() {
        let mut t = Trace::parse("1\n1\n3\n").unwrap();
        // Two full packets at 1 ms, the third at 3 ms, the fourth at 4 ms (1 + period 3).
        assert_eq!(t.finish(Instant::ZERO, 1500), Some(Instant::from_millis(1)));
        assert_eq!(t.finish(Instant::ZERO, 1500), Some(Instant::from_millis(1)));
        assert_eq!(t.finish(Instant::ZERO, 1500), Some(Instant::from_millis(3)));
        assert_eq!(
            t.finish(Instant::from_millis(3), 1500),
            Some(Instant::from_millis(4))
        );
    }

    #[test]
    fn trace_small_packets_share_an_opportunity() {
        let mut t = Trace::parse("10\n").unwrap();
        // 4 x 376 bytes fit into one 1504-byte opportunity at 10 ms.
        for _ in 0..4 {
            assert_eq!(t.finish(Instant::ZERO, 376), Some(Instant::from_millis(10)));
        }
        assert_eq!(t.finish(Instant::ZERO, 376), Some(Instant::from_millis(20)));
        // A packet arriving after an opportunity cannot use its leftover.
        let mut t = Trace::parse("10\n").unwrap();
        assert_eq!(t.finish(Instant::ZERO, 100), Some(Instant::from_millis(10)));
        assert_eq!(
            t.finish(Instant::from_millis(11), 100),
            Some(Instant::from_millis(20))
        );
    }

    #[test]
    fn trace_mean_rate() {
        // One opportunity per ms = 1504 * 8 * 1000 bit/s.
        let t = Trace::parse("1\n").unwrap();
        assert!((t.mean_bps() - 12.032e6).abs() < 1.0);
    }
}
