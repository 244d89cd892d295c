//! Time as the model sees it: nanoseconds on a clock the caller owns.
//!
//! Nothing in the model reads a clock. The TUN front end passes
//! `CLOCK_MONOTONIC`; tests pass simulated time.

use core::ops::{Add, Sub};
use std::time::Duration;

/// A point in time, in nanoseconds since an arbitrary origin chosen by the caller.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);

    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }
    pub const fn from_micros(us: u64) -> Instant {
        Instant(us * 1_000)
    }
    pub const fn from_millis(ms: u64) -> Instant {
        Instant(ms * 1_000_000)
    }
    pub fn from_secs_f64(s: f64) -> Instant {
        Instant((s * 1e9).round() as u64)
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
    /// Time elapsed since `earlier`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        Instant(
            self.0
                .saturating_add(d.as_nanos().min(u64::MAX as u128) as u64),
        )
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    fn sub(self, other: Instant) -> Duration {
        self.saturating_since(other)
    }
}

/// Nanoseconds needed to serialise `bytes` at `bits_per_sec`, rounded to nearest.
pub fn serialization_nanos(bytes: u64, bits_per_sec: f64) -> u64 {
    ((bytes as f64 * 8.0 * 1e9) / bits_per_sec).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic() {
        let t = Instant::from_millis(5) + Duration::from_micros(250);
        assert_eq!(t.as_nanos(), 5_250_000);
        assert_eq!(t - Instant::from_millis(5), Duration::from_micros(250));
        assert_eq!(Instant::from_millis(1) - t, Duration::ZERO);
    }

    #[test]
    fn serialization() {
        // 1500 bytes at 10 Mbit/s is 1.2 ms.
        assert_eq!(serialization_nanos(1500, 10e6), 1_200_000);
    }
}
