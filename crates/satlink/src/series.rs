//! Bounded time series for the stats file: step values recorded on change.
//!
//! - [`Series`] (a MODCOD in use): at most one point per interval (initially
//!   [`INTERVAL_MS`]); a change within the interval of the previous point
//!   overwrites that point's value, so a point holds the value in force at
//!   the end of its interval.
//! - [`RateSeries`] (a granted rate): the time-weighted mean of the rate over
//!   each interval, a point at the interval's start whenever the mean
//!   changes, so a grant shorter than the interval still shows.
//!
//! When a series would exceed [`MAX_POINTS`] points its interval doubles and
//! its points are merged (keeping the last value, or the mean over the new
//! interval for a rate), so a long run keeps its whole span at a coarser
//! resolution.

use crate::time::Instant;

/// Initial interval of every series, in ms.
pub const INTERVAL_MS: u64 = 100;
/// Most points a series keeps.
pub const MAX_POINTS: usize = 4096;

/// How points that come to share an interval are merged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Merge {
    /// The value at the end of the interval.
    Last,
    /// The time-weighted mean over the interval.
    Mean,
}

/// A step value over time, at most one point per interval.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    interval_ns: u64,
    /// (time in ns, value) with strictly increasing interval buckets.
    points: Vec<(u64, f64)>,
    cap: usize,
    merge: Merge,
}

impl Default for Series {
    fn default() -> Self {
        Series::new(INTERVAL_MS * 1_000_000, MAX_POINTS)
    }
}

impl Series {
    /// A series of at most `cap` (>= 2) points, one per `interval_ns` at first.
    pub fn new(interval_ns: u64, cap: usize) -> Series {
        Series {
            interval_ns: interval_ns.max(1),
            points: Vec::new(),
            cap: cap.max(2),
            merge: Merge::Last,
        }
    }

    /// The value is `v` from `t` on (`t` not before the previous point).
    pub fn record(&mut self, t: Instant, v: f64) {
        let t = t.as_nanos();
        match self.points.last_mut() {
            Some(&mut (_, last)) if last == v => return,
            Some(last) if last.0 / self.interval_ns == t / self.interval_ns => {
                last.1 = v;
                // The overwritten point may now repeat its predecessor.
                let n = self.points.len();
                if n >= 2 && self.points[n - 2].1 == v {
                    self.points.pop();
                }
                return;
            }
            _ => self.points.push((t, v)),
        }
        // A rate series coarsens when its accumulator allows (RateSeries).
        while self.merge == Merge::Last && self.points.len() > self.cap {
            self.coarsen();
        }
    }

    /// Double the interval and merge the points that now share one.
    fn coarsen(&mut self) {
        self.interval_ns *= 2;
        if self.merge == Merge::Mean {
            self.coarsen_mean();
            return;
        }
        let i = self.interval_ns;
        let mut merged: Vec<(u64, f64)> = Vec::with_capacity(self.points.len());
        for &(t, v) in &self.points {
            match merged.last_mut() {
                Some(last) if last.0 / i == t / i => last.1 = v,
                _ => merged.push((t, v)),
            }
            let n = merged.len();
            if n >= 2 && merged[n - 2].1 == merged[n - 1].1 {
                merged.pop();
            }
        }
        self.points = merged;
    }

    /// Merge into intervals of `interval_ns` by the mean of the step
    /// function over each interval that holds a point.
    fn coarsen_mean(&mut self) {
        let w = self.interval_ns;
        let old = std::mem::take(&mut self.points);
        let n = old.len();
        let mut out: Vec<(u64, f64)> = Vec::with_capacity(n);
        let mut i = 0;
        while i < n {
            let b = old[i].0 / w;
            let (bs, be) = (b * w, b * w + w);
            let (mut t, mut v) = if i > 0 {
                (bs, old[i - 1].1)
            } else {
                (old[0].0, old[0].1)
            };
            let from = t;
            let mut integral = 0.0;
            while i < n && old[i].0 < be {
                integral += v * (old[i].0 - t) as f64;
                t = old[i].0;
                v = old[i].1;
                i += 1;
            }
            integral += v * (be - t) as f64;
            let mean = integral / (be - from) as f64;
            out.push((if out.is_empty() { old[0].0 } else { bs }, mean));
            // The last value holds after the interval, if no point follows at once.
            if v != mean && (i == n || old[i].0 / w > b + 1) {
                out.push((be, v));
            }
        }
        out.dedup_by(|b, a| a.1 == b.1);
        self.points = out;
    }

    /// The interval in use, in ns.
    pub fn interval_ns(&self) -> u64 {
        self.interval_ns
    }

    /// The points as (seconds, value).
    pub fn points_s(&self) -> Vec<(f64, f64)> {
        self.points
            .iter()
            .map(|&(t, v)| (t as f64 / 1e9, v))
            .collect()
    }

    pub fn len(&self) -> usize {
        self.points.len()
    }

    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }
}

/// A rate over time: its mean over each interval, recorded when it changes.
#[derive(Clone, Debug, PartialEq)]
pub struct RateSeries {
    series: Series,
    /// The interval being summed and its integral (value x ns).
    bucket: Option<u64>,
    integral: f64,
}

impl Default for RateSeries {
    fn default() -> Self {
        RateSeries::new(INTERVAL_MS * 1_000_000, MAX_POINTS)
    }
}

impl RateSeries {
    pub fn new(interval_ns: u64, cap: usize) -> RateSeries {
        let mut series = Series::new(interval_ns, cap);
        series.merge = Merge::Mean;
        RateSeries {
            series,
            bucket: None,
            integral: 0.0,
        }
    }

    /// The rate was `v` from `t0` to `t1`; spans come in time order. A gap
    /// between spans counts as a rate of 0.
    pub fn add(&mut self, t0: Instant, t1: Instant, v: f64) {
        let (mut t, t1) = (t0.as_nanos(), t1.as_nanos());
        while t < t1 {
            let w = self.series.interval_ns;
            let b = t / w;
            match self.bucket {
                None => self.bucket = Some(b),
                Some(cb) if cb < b => {
                    self.flush(cb, w, b * w);
                    continue;
                }
                _ => {}
            }
            let end = t1.min((b + 1) * w);
            self.integral += v * (end - t) as f64;
            t = end;
        }
    }

    /// Record interval `bucket` (of width `w`) and start the one at `next`
    /// (a zero rate in between). Coarsen when the series is full and `next`
    /// starts a coarse interval (or when it is twice full).
    fn flush(&mut self, bucket: u64, w: u64, next: u64) {
        let mean = self.integral / w as f64;
        self.integral = 0.0;
        self.series.record(Instant::from_nanos(bucket * w), mean);
        if next > (bucket + 1) * w {
            self.series
                .record(Instant::from_nanos((bucket + 1) * w), 0.0);
        }
        let s = &mut self.series;
        while s.points.len() > s.cap
            && (next % (2 * s.interval_ns) == 0 || s.points.len() > 2 * s.cap)
        {
            s.coarsen();
        }
        self.bucket = Some(next / self.series.interval_ns);
    }

    /// The interval in use, in ns.
    pub fn interval_ns(&self) -> u64 {
        self.series.interval_ns()
    }

    /// The points as (seconds, mean), the interval being summed included
    /// (its mean so far, over the part of it that passed by `until`).
    pub fn points_s(&self, until: Instant) -> Vec<(f64, f64)> {
        let mut s = self.series.clone();
        if let Some(b) = self.bucket {
            let w = s.interval_ns;
            let start = b * w;
            let len = until.as_nanos().clamp(start + 1, start + w) - start;
            s.record(Instant::from_nanos(start), self.integral / len as f64);
        }
        s.points_s()
    }
}

/// Sample times from 0 to `until` (inclusive of 0) every `interval_ns`,
/// the interval doubled until at most `cap` samples fit. Returns the times
/// and the interval used.
pub fn sample_times(until: Instant, interval_ns: u64, cap: usize) -> (Vec<Instant>, u64) {
    let mut step = interval_ns.max(1);
    while until.as_nanos() / step + 1 > cap as u64 {
        step *= 2;
    }
    let n = until.as_nanos() / step + 1;
    (
        (0..n).map(|k| Instant::from_nanos(k * step)).collect(),
        step,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(x: u64) -> Instant {
        Instant::from_millis(x)
    }

    #[test]
    fn records_changes_only() {
        let mut s = Series::default();
        s.record(ms(0), 1.0);
        s.record(ms(150), 1.0);
        s.record(ms(250), 2.0);
        assert_eq!(s.points_s(), vec![(0.0, 1.0), (0.25, 2.0)]);
    }

    #[test]
    fn one_point_per_interval_keeps_the_last_value() {
        let mut s = Series::default();
        s.record(ms(0), 1.0);
        s.record(ms(210), 2.0);
        s.record(ms(230), 3.0);
        s.record(ms(290), 4.0);
        assert_eq!(s.points_s(), vec![(0.0, 1.0), (0.21, 4.0)]);
        // Back to the previous value within the interval: the step vanishes.
        s.record(ms(295), 1.0);
        assert_eq!(s.points_s(), vec![(0.0, 1.0)]);
    }

    #[test]
    fn bounded_by_coarsening() {
        let mut s = Series::new(1_000_000, 8);
        for k in 0..100u64 {
            s.record(ms(k), k as f64);
        }
        assert!(s.len() <= 8, "{} points", s.len());
        assert!(s.interval_ns() >= 16_000_000);
        // The span is kept: the first point is still at 0, the last value is the last.
        assert_eq!(s.points_s()[0].0, 0.0);
        assert_eq!(s.points_s().last().unwrap().1, 99.0);
    }

    #[test]
    fn rate_series_means_per_interval() {
        let mut r = RateSeries::default();
        // 1000 bit/s for 26 ms within [1.6, 1.7) s: a mean of 260 bit/s.
        r.add(ms(1600), ms(1616), 0.0);
        r.add(ms(1616), ms(1642), 1000.0);
        r.add(ms(1642), ms(1800), 0.0);
        r.add(ms(1800), ms(2000), 500.0);
        assert_eq!(
            r.points_s(ms(2000)),
            vec![(1.6, 260.0), (1.7, 0.0), (1.8, 500.0)]
        );
        // Constant spans that straddle intervals give a constant series.
        let mut c = RateSeries::default();
        for k in 0..100u64 {
            c.add(
                Instant::from_micros(26_500 * k),
                Instant::from_micros(26_500 * (k + 1)),
                7.0,
            );
        }
        assert_eq!(c.points_s(ms(2650)), vec![(0.0, 7.0)]);
    }

    #[test]
    fn rate_series_coarsens_by_the_mean() {
        let mut r = RateSeries::new(1_000_000, 8);
        // Alternating 0 and 10 every ms: the mean of any coarse interval is 5.
        for k in 0..64u64 {
            r.add(ms(k), ms(k + 1), if k % 2 == 0 { 0.0 } else { 10.0 });
        }
        let p = r.points_s(ms(64));
        assert!(p.len() <= 8, "{p:?}");
        assert!(p.iter().all(|x| x.1 == 5.0), "{p:?}");
    }

    #[test]
    fn sample_grid_doubles_to_fit() {
        let (t, step) = sample_times(ms(1000), 100_000_000, 100);
        assert_eq!((t.len(), step), (11, 100_000_000));
        let (t, step) = sample_times(ms(1000), 100_000_000, 4);
        assert_eq!((t.len(), step), (3, 400_000_000));
    }
}
