//! LEO paths: recorded traces in the public Starlink form, and the periodic
//! reconfiguration event.
//!
//! # Trace files
//!
//! - Bandwidth: one line per unit of rate, each a whole millisecond
//!   (non-decreasing, 0 ..= [`MAX_TRACE_MS`]); `k` lines with the same
//!   millisecond mean `k` units during that millisecond (one public set uses
//!   12 Mbit/s per line: one 1500-byte packet per ms). A millisecond without
//!   a line has no capacity. The rate is fluid within the millisecond, and
//!   the trace repeats after its last millisecond (period: last + 1 ms).
//! - Delay: one one-way delay in ms per line (a decimal number, 0 ..=
//!   [`MAX_DELAY_MS`]), each holding for one interval (10 ms in the public
//!   set); the trace repeats after its last interval.
//!
//! Blank lines are skipped; at most [`MAX_LEO_LINES`] lines.
//!
//! # Reconfiguration
//!
//! [`Reconfiguration`]: every `period_s` (15 s on Starlink) at `offset_s`
//! into the period, the delay rises by `delay_ms` for `delay_duration_ms`,
//! and for `loss_duration_ms` packets are lost with probability `loss_p`, or,
//! with `outage`, the link sends nothing (packets wait). With the link's
//! `align_minute`, offset 12 s gives events at seconds 12, 27, 42 and 57 of
//! every UTC minute.

use crate::capacity::TraceError;
use crate::schedule::{Schedule, ScheduleError};

/// Latest millisecond of a bandwidth trace (as for Mahimahi traces).
pub const MAX_TRACE_MS: u64 = crate::capacity::MAX_TRACE_MS;
/// Largest delay of a delay trace, ms (one hour).
pub const MAX_DELAY_MS: f64 = 3_600_000.0;
/// Most lines of a trace.
pub const MAX_LEO_LINES: usize = 10_000_000;

fn fail<T>(line: usize, message: String) -> Result<T, TraceError> {
    Err(TraceError { line, message })
}

/// Check a bandwidth trace's milliseconds (entries 1-based in errors).
pub fn check_bandwidth(ms: &[u64]) -> Result<(), TraceError> {
    if ms.is_empty() {
        return fail(0, "bandwidth trace has no lines".into());
    }
    if ms.len() > MAX_LEO_LINES {
        return fail(
            MAX_LEO_LINES + 1,
            format!("trace has more than {MAX_LEO_LINES} lines"),
        );
    }
    for (i, w) in ms.iter().enumerate() {
        if *w > MAX_TRACE_MS {
            return fail(
                i + 1,
                format!("{w} ms is later than the latest allowed, {MAX_TRACE_MS} ms"),
            );
        }
        if i > 0 && *w < ms[i - 1] {
            return fail(
                i + 1,
                format!("{w} ms comes before the previous line's {} ms", ms[i - 1]),
            );
        }
    }
    Ok(())
}

/// Parse a bandwidth trace: one whole millisecond per line.
pub fn parse_bandwidth(text: &str) -> Result<Vec<u64>, TraceError> {
    let mut out = Vec::new();
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let Ok(ms) = line.parse::<u64>() else {
            return fail(
                i + 1,
                format!("expected a whole number of milliseconds, found {line:?}"),
            );
        };
        out.push(ms);
        lines.push(i + 1);
    }
    check_bandwidth(&out).map_err(|mut e| {
        if e.line > 0 {
            e.line = lines.get(e.line - 1).copied().unwrap_or(e.line);
        }
        e
    })?;
    Ok(out)
}

/// The rate (bit/s) of a bandwidth trace as a repeating schedule:
/// `count * unit_bps` in each millisecond.
pub fn bandwidth_schedule(ms: &[u64], unit_bps: f64) -> Result<Schedule, ScheduleError> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    let mut push = |t_ms: u64, v: f64| {
        if points.last().map_or(true, |p| p.1 != v) {
            points.push((t_ms as f64 / 1e3, v));
        }
    };
    let mut i = 0;
    let mut t = 0u64;
    while i < ms.len() {
        let m = ms[i];
        if m > t {
            push(t, 0.0);
        }
        let mut k = 0u64;
        while i < ms.len() && ms[i] == m {
            k += 1;
            i += 1;
        }
        push(m, k as f64 * unit_bps);
        t = m + 1;
    }
    let period_s = t as f64 / 1e3;
    if points.len() == 1 {
        return Ok(Schedule::constant(points[0].1));
    }
    Schedule::new(&points, period_s)
}

/// The largest count of lines in one millisecond.
pub fn max_units(ms: &[u64]) -> u64 {
    let mut best = 0;
    let mut i = 0;
    while i < ms.len() {
        let j = i + ms[i..].partition_point(|&x| x == ms[i]);
        best = best.max((j - i) as u64);
        i = j;
    }
    best
}

/// Check a delay trace's values (entries 1-based in errors).
pub fn check_delays(values_ms: &[f64]) -> Result<(), TraceError> {
    if values_ms.is_empty() {
        return fail(0, "delay trace has no lines".into());
    }
    if values_ms.len() > MAX_LEO_LINES {
        return fail(
            MAX_LEO_LINES + 1,
            format!("trace has more than {MAX_LEO_LINES} lines"),
        );
    }
    for (i, &v) in values_ms.iter().enumerate() {
        if !v.is_finite() || !(0.0..=MAX_DELAY_MS).contains(&v) {
            return fail(
                i + 1,
                format!("delay must be within 0 and {MAX_DELAY_MS} ms, got {v}"),
            );
        }
    }
    Ok(())
}

/// Parse a delay trace: one delay in ms per line.
pub fn parse_delays(text: &str) -> Result<Vec<f64>, TraceError> {
    let mut out = Vec::new();
    let mut lines = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        let Ok(v) = line.parse::<f64>() else {
            return fail(
                i + 1,
                format!("expected a delay in milliseconds, found {line:?}"),
            );
        };
        out.push(v);
        lines.push(i + 1);
    }
    check_delays(&out).map_err(|mut e| {
        if e.line > 0 {
            e.line = lines.get(e.line - 1).copied().unwrap_or(e.line);
        }
        e
    })?;
    Ok(out)
}

/// The delay (seconds) of a delay trace as a repeating schedule, one value
/// per `interval_ms`.
pub fn delay_schedule(values_ms: &[f64], interval_ms: f64) -> Result<Schedule, ScheduleError> {
    let mut points: Vec<(f64, f64)> = Vec::new();
    for (i, &v) in values_ms.iter().enumerate() {
        let s = v / 1e3;
        if points.last().map_or(true, |p| p.1 != s) {
            points.push((i as f64 * interval_ms / 1e3, s));
        }
    }
    if points.len() == 1 {
        return Ok(Schedule::constant(points[0].1));
    }
    Schedule::new(&points, values_ms.len() as f64 * interval_ms / 1e3)
}

/// The periodic reconfiguration of a LEO constellation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reconfiguration {
    pub period_s: f64,
    pub offset_s: f64,
    pub delay_ms: f64,
    pub delay_duration_ms: f64,
    pub loss_p: f64,
    pub loss_duration_ms: f64,
    pub outage: bool,
}

/// `on` for `duration_s` from `offset_s` in every `period_s`, `off` else.
fn window(
    period_s: f64,
    offset_s: f64,
    duration_s: f64,
    on: f64,
    off: f64,
) -> Result<Schedule, ScheduleError> {
    let end = offset_s + duration_s;
    let mut pts: Vec<(f64, f64)> = if end < period_s {
        vec![(0.0, off), (offset_s, on), (end, off)]
    } else if end == period_s {
        vec![(0.0, off), (offset_s, on)]
    } else {
        vec![(0.0, on), (end - period_s, off), (offset_s, on)]
    };
    // Points at the same time: the later one holds.
    pts.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1 = b.1;
            true
        } else {
            false
        }
    });
    Schedule::new(&pts, period_s)
}

impl Reconfiguration {
    /// The extra delay in seconds, if any.
    pub fn delay_s(&self) -> Result<Option<Schedule>, ScheduleError> {
        if self.delay_ms == 0.0 || self.delay_duration_ms == 0.0 {
            return Ok(None);
        }
        window(
            self.period_s,
            self.offset_s,
            self.delay_duration_ms / 1e3,
            self.delay_ms / 1e3,
            0.0,
        )
        .map(Some)
    }

    /// The loss probability over time, if the event loses packets.
    pub fn loss(&self) -> Result<Option<Schedule>, ScheduleError> {
        if self.outage || self.loss_p == 0.0 || self.loss_duration_ms == 0.0 {
            return Ok(None);
        }
        window(
            self.period_s,
            self.offset_s,
            self.loss_duration_ms / 1e3,
            self.loss_p,
            0.0,
        )
        .map(Some)
    }

    /// When the link is up (1) or down (0), if the event is an outage.
    pub fn up(&self) -> Result<Option<Schedule>, ScheduleError> {
        if !self.outage || self.loss_duration_ms == 0.0 {
            return Ok(None);
        }
        window(
            self.period_s,
            self.offset_s,
            self.loss_duration_ms / 1e3,
            0.0,
            1.0,
        )
        .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Instant;

    fn s(x: f64) -> Instant {
        Instant::from_secs_f64(x)
    }

    #[test]
    fn bandwidth_lines_are_units_per_millisecond() {
        // A hand-made trace: 2 units in ms 0, none in ms 1, 1 in ms 2 and 3.
        let ms = parse_bandwidth("0\n0\n\n2\n3\n").unwrap();
        assert_eq!(ms, vec![0, 0, 2, 3]);
        assert_eq!(max_units(&ms), 2);
        let r = bandwidth_schedule(&ms, 12e6).unwrap();
        assert_eq!(r.value_at(s(0.0005)), 24e6);
        assert_eq!(r.value_at(s(0.0015)), 0.0);
        assert_eq!(r.value_at(s(0.0025)), 12e6);
        assert_eq!(r.value_at(s(0.0035)), 12e6);
        // It repeats every 4 ms; its mean is 4 units over 4 ms.
        assert_eq!(r.value_at(s(0.0045)), 24e6);
        assert!((r.mean() - 12e6).abs() < 1e-6);
        // A trace that starts later has no capacity before.
        let late = bandwidth_schedule(&[5, 6], 12e6).unwrap();
        assert_eq!(late.value_at(s(0.001)), 0.0);
        assert_eq!(late.value_at(s(0.0055)), 12e6);
    }

    #[test]
    fn bandwidth_errors_name_the_line() {
        let e = parse_bandwidth("1\n\n3\n2\n").unwrap_err();
        assert_eq!(e.line, 4);
        assert_eq!(e.message, "2 ms comes before the previous line's 3 ms");
        assert_eq!(parse_bandwidth("1\nx\n").unwrap_err().line, 2);
        assert_eq!(parse_bandwidth("\n").unwrap_err().line, 0);
    }

    #[test]
    fn delays_hold_for_an_interval_and_repeat() {
        let v = parse_delays("30\n30\n45.5\n\n20\n").unwrap();
        assert_eq!(v, vec![30.0, 30.0, 45.5, 20.0]);
        let d = delay_schedule(&v, 10.0).unwrap();
        assert_eq!(d.value_at(s(0.015)), 0.030);
        assert_eq!(d.value_at(s(0.025)), 0.0455);
        assert_eq!(d.value_at(s(0.035)), 0.020);
        assert_eq!(d.value_at(s(0.045)), 0.030);
        assert_eq!((d.min(), d.max()), (0.020, 0.0455));
        assert_eq!(parse_delays("10\n-1\n").unwrap_err().line, 2);
        assert_eq!(parse_delays("10\nten\n").unwrap_err().line, 2);
    }

    #[test]
    fn reconfiguration_windows() {
        let r = Reconfiguration {
            period_s: 15.0,
            offset_s: 12.0,
            delay_ms: 40.0,
            delay_duration_ms: 300.0,
            loss_p: 0.5,
            loss_duration_ms: 100.0,
            outage: false,
        };
        let d = r.delay_s().unwrap().unwrap();
        assert_eq!(d.value_at(s(11.9)), 0.0);
        assert_eq!(d.value_at(s(12.1)), 0.040);
        assert_eq!(d.value_at(s(12.35)), 0.0);
        assert_eq!(d.value_at(s(27.1)), 0.040);
        let l = r.loss().unwrap().unwrap();
        assert_eq!((l.value_at(s(12.05)), l.value_at(s(12.15))), (0.5, 0.0));
        assert!(r.up().unwrap().is_none());
        // A window that wraps around the period.
        let w = Reconfiguration {
            offset_s: 14.9,
            outage: true,
            ..r
        };
        let up = w.up().unwrap().unwrap();
        assert_eq!(up.value_at(s(14.95)), 0.0);
        assert_eq!(up.value_at(s(15.05)), 1.0);
        assert_eq!(up.value_at(s(29.95)), 0.0);
        assert!(w.loss().unwrap().is_none());
        // Offset 0.
        let z = Reconfiguration { offset_s: 0.0, ..r };
        assert_eq!(z.delay_s().unwrap().unwrap().value_at(s(15.1)), 0.040);
    }
}
