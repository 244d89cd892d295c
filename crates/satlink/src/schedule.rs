//! Piecewise-constant values over time, optionally repeating.
//!
//! Used for every time-varying parameter (delay, rate, loss): LEO paths change
//! every few seconds, and a handover is a short step up and back down.

use crate::time::Instant;

/// A value that holds from one breakpoint until the next.
///
/// Before the first breakpoint the value of the last breakpoint holds when the
/// schedule repeats (it wraps around), and the first one's otherwise.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// (start offset in ns, value), strictly increasing offsets.
    points: Vec<(u64, f64)>,
    /// Repeat period in ns; 0 means no repetition (the last value holds forever).
    period: u64,
    /// Offset added to every query time (aligns the schedule to a wall clock).
    phase: u64,
}

/// Why a schedule could not be built.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    /// No breakpoint at all.
    #[error("schedule has no points")]
    Empty,
    /// A breakpoint at or before the previous one (times must strictly increase).
    #[error("schedule point {index} does not come after the previous one")]
    NotIncreasing { index: usize },
    /// A breakpoint at or after the period of a repeating schedule.
    #[error("schedule point {index} lies at or beyond the period")]
    BeyondPeriod { index: usize },
}

impl Schedule {
    /// A value that never changes.
    pub fn constant(v: f64) -> Schedule {
        Schedule {
            points: vec![(0, v)],
            period: 0,
            phase: 0,
        }
    }

    /// Build from (seconds, value) points; `period_s` of 0 means no repetition.
    pub fn new(points_s: &[(f64, f64)], period_s: f64) -> Result<Schedule, ScheduleError> {
        if points_s.is_empty() {
            return Err(ScheduleError::Empty);
        }
        let period = (period_s * 1e9).round() as u64;
        let mut points = Vec::with_capacity(points_s.len());
        for (i, &(t, v)) in points_s.iter().enumerate() {
            let ns = (t * 1e9).round() as u64;
            if let Some(&(prev, _)) = points.last() {
                if ns <= prev {
                    return Err(ScheduleError::NotIncreasing { index: i });
                }
            }
            if period > 0 && ns >= period {
                return Err(ScheduleError::BeyondPeriod { index: i });
            }
            points.push((ns, v));
        }
        Ok(Schedule {
            points,
            period,
            phase: 0,
        })
    }

    /// Shift the schedule so that time `t` is read as offset `t + phase`.
    pub fn with_phase(mut self, phase_ns: u64) -> Schedule {
        self.phase = phase_ns;
        self
    }

    pub fn is_constant(&self) -> bool {
        self.points.len() == 1
    }

    /// The value in force at `t`.
    pub fn value_at(&self, t: Instant) -> f64 {
        self.segment_at(t).0
    }

    /// The value at `t` and the instant it next changes (None if never).
    pub fn segment_at(&self, t: Instant) -> (f64, Option<Instant>) {
        if self.points.len() == 1 {
            return (self.points[0].1, None);
        }
        let abs = t.as_nanos() + self.phase;
        let (base, off) = if self.period > 0 {
            (abs - abs % self.period, abs % self.period)
        } else {
            (0, abs)
        };
        // Index of the last point at or before `off`.
        let idx = self.points.partition_point(|&(s, _)| s <= off);
        let value = if idx == 0 {
            if self.period > 0 {
                self.points[self.points.len() - 1].1
            } else {
                self.points[0].1
            }
        } else {
            self.points[idx - 1].1
        };
        let next_abs = if idx < self.points.len() {
            Some(base + self.points[idx].0)
        } else if self.period > 0 {
            Some(base + self.period + self.points[0].0)
        } else {
            None
        };
        (value, next_abs.map(|n| Instant::from_nanos(n - self.phase)))
    }

    /// Largest value anywhere in the schedule.
    pub fn max(&self) -> f64 {
        self.points
            .iter()
            .map(|p| p.1)
            .fold(f64::NEG_INFINITY, f64::max)
    }

    /// Smallest value anywhere in the schedule.
    pub fn min(&self) -> f64 {
        self.points
            .iter()
            .map(|p| p.1)
            .fold(f64::INFINITY, f64::min)
    }

    /// The long-run value: the time-weighted mean over one period of a
    /// repeating schedule, and the last point's value for one that does not
    /// repeat (it holds forever after its time).
    pub fn mean(&self) -> f64 {
        if self.period == 0 || self.points.len() == 1 {
            return self.points[self.points.len() - 1].1;
        }
        let mut total = 0.0;
        let n = self.points.len();
        for i in 0..n {
            let start = self.points[i].0;
            let end = if i + 1 < n {
                self.points[i + 1].0
            } else {
                self.period + self.points[0].0
            };
            total += (end - start) as f64 * self.points[i].1;
        }
        total / self.period as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: f64) -> Instant {
        Instant::from_secs_f64(x)
    }

    #[test]
    fn constant_never_changes() {
        let c = Schedule::constant(3.0);
        assert_eq!(c.segment_at(s(100.0)), (3.0, None));
    }

    #[test]
    fn one_shot_holds_last_value() {
        let c = Schedule::new(&[(0.0, 1.0), (2.0, 5.0)], 0.0).unwrap();
        assert_eq!(c.segment_at(s(1.0)), (1.0, Some(s(2.0))));
        assert_eq!(c.segment_at(s(2.0)), (5.0, None));
        assert_eq!(c.value_at(s(1000.0)), 5.0);
    }

    #[test]
    fn periodic_wraps_around() {
        // Starlink-like: changes at 12, 27, 42, 57 s of every minute.
        let c = Schedule::new(&[(12.0, 1.0), (27.0, 2.0), (42.0, 3.0), (57.0, 4.0)], 60.0).unwrap();
        assert_eq!(c.segment_at(s(0.0)), (4.0, Some(s(12.0))));
        assert_eq!(c.segment_at(s(13.0)), (1.0, Some(s(27.0))));
        assert_eq!(c.segment_at(s(58.0)), (4.0, Some(s(72.0))));
        assert_eq!(c.value_at(s(60.0 + 30.0)), 2.0);
        assert!((c.mean() - 2.5).abs() < 1e-9);
    }

    #[test]
    fn mean_is_the_long_run_value() {
        // Not repeating: the last value holds forever.
        let once = Schedule::new(&[(0.0, 10.0), (5.0, 2.0), (9.0, 4.0)], 0.0).unwrap();
        assert_eq!(once.mean(), 4.0);
        // Repeating: weighted by time, including the wrap-around segment
        // (value 4 from 9 s to 10 s + 1 s, value 1 from 1 s to 5 s, 2 from 5 s to 9 s).
        let rep = Schedule::new(&[(1.0, 1.0), (5.0, 2.0), (9.0, 4.0)], 10.0).unwrap();
        assert!((rep.mean() - (4.0 * 1.0 + 8.0 * 1.0 + 2.0 * 4.0) / 10.0).abs() < 1e-12);
        assert_eq!(Schedule::constant(3.0).mean(), 3.0);
        assert_eq!((rep.min(), rep.max()), (1.0, 4.0));
    }

    #[test]
    fn phase_shifts_origin() {
        let c = Schedule::new(&[(0.0, 1.0), (30.0, 2.0)], 60.0)
            .unwrap()
            .with_phase(25_000_000_000);
        // t = 0 reads offset 25 s: value 1, next change at offset 30 s, i.e. t = 5 s.
        assert_eq!(c.segment_at(s(0.0)), (1.0, Some(s(5.0))));
    }

    #[test]
    fn rejects_bad_points() {
        assert_eq!(Schedule::new(&[], 0.0), Err(ScheduleError::Empty));
        assert_eq!(
            Schedule::new(&[(1.0, 1.0), (1.0, 2.0)], 0.0),
            Err(ScheduleError::NotIncreasing { index: 1 })
        );
        assert_eq!(
            Schedule::new(&[(0.0, 1.0), (60.0, 2.0)], 60.0),
            Err(ScheduleError::BeyondPeriod { index: 1 })
        );
    }
}
