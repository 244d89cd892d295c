//! Time as the relay sees it: nanoseconds on a clock the caller owns.
//!
//! Nothing in [`crate::relay`] reads a clock: the event loop passes
//! `CLOCK_MONOTONIC`, tests pass whatever they like.

use core::ops::{Add, Sub};
use std::time::Duration;

/// A point in time, in nanoseconds since an origin chosen by the caller.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(u64);

impl Instant {
    pub const ZERO: Instant = Instant(0);

    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }
    pub const fn from_millis(ms: u64) -> Instant {
        Instant(ms * 1_000_000)
    }
    pub const fn from_secs(s: u64) -> Instant {
        Instant(s * 1_000_000_000)
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
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

/// The two clocks of the event loop: `CLOCK_MONOTONIC` for the relays,
/// `CLOCK_REALTIME` for the logs.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Now on `CLOCK_MONOTONIC`.
pub fn monotonic() -> Instant {
    Instant(clock_ns(libc::CLOCK_MONOTONIC))
}

/// Now on `CLOCK_REALTIME`, in nanoseconds since the Unix epoch.
pub fn unix_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
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
        assert_eq!(Instant::from_secs(2), Instant::from_millis(2000));
    }
}
