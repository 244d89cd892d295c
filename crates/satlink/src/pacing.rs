//! When the TUN front end waits, and how: the timing policy of its event
//! loop, sans-IO (the caller passes the time in; tests run in simulated time).
//!
//! A timed wake-up on a virtual machine is tens of microseconds late. So the
//! loop sleeps until a learned margin before the model's next deadline
//! ([`WakeMargin`]: a streaming estimate of the 90th percentile of lateness,
//! plus a guard, capped), then polls without sleeping until the deadline,
//! within a CPU budget ([`SpinBudget`]: 10 % of one core on average). It also
//! polls for [`LINGER`] after a delivery: a reply the kernel generates (ICMP,
//! TCP ACKs) is queued within microseconds. (Polling long enough to catch
//! userspace replies was measured: on two cores it takes CPU from the
//! endpoints and worsens the tail.)
//!
//! ```text
//! loop {
//!     deliver what is due at now
//!     wait = pacer.plan(now, next deadline, delivered anything)
//!     poll the devices for wait (Spin: timeout 0; Sleep: timeout; Forever: none)
//!     pacer.woke(after, a device or the stop signal was ready)
//!     read what is ready
//! }
//! ```

use crate::time::Instant;
use std::time::Duration;

/// How long to keep polling after a delivery, for a reply the kernel generates.
pub const LINGER: Duration = Duration::from_micros(30);

/// How early to stop sleeping before a deadline: a streaming estimate of the
/// 90th percentile of timed wake-up lateness (frugal quantile estimation:
/// an outlier moves it by one step, not by its size), plus a small guard,
/// capped at [`WakeMargin::MAX_NS`].
#[derive(Clone, Debug, PartialEq)]
pub struct WakeMargin {
    p90_ns: f64,
    margin_ns: u64,
}

impl WakeMargin {
    /// Step of the quantile estimate per observation.
    pub const STEP_NS: f64 = 2_000.0;
    /// Added to the estimate.
    pub const GUARD_NS: u64 = 10_000;
    /// Largest margin, whatever the estimate.
    pub const MAX_NS: u64 = 300_000;

    /// Start from an estimate of the 90th percentile of lateness.
    pub fn new(p90_ns: f64) -> WakeMargin {
        let p90_ns = p90_ns.max(0.0);
        WakeMargin {
            p90_ns,
            margin_ns: Self::margin_for(p90_ns),
        }
    }

    /// Start from measured lateness of short timed sleeps (the front end
    /// makes 30): their 90th percentile. No samples: an estimate of 0.
    pub fn from_calibration(late_ns: &[u64]) -> WakeMargin {
        let mut late = late_ns.to_vec();
        late.sort_unstable();
        WakeMargin::new(late.get(late.len() * 9 / 10).copied().unwrap_or(0) as f64)
    }

    fn margin_for(p90_ns: f64) -> u64 {
        (p90_ns as u64 + Self::GUARD_NS).min(Self::MAX_NS)
    }

    /// `late_ns`: how long after the requested wake-up the thread ran.
    pub fn observe(&mut self, late_ns: i64) {
        if (late_ns as f64) > self.p90_ns {
            self.p90_ns += Self::STEP_NS * 0.9;
        } else {
            self.p90_ns = (self.p90_ns - Self::STEP_NS * 0.1).max(0.0);
        }
        self.margin_ns = Self::margin_for(self.p90_ns);
    }

    /// The current margin in nanoseconds.
    pub fn margin_ns(&self) -> u64 {
        self.margin_ns
    }

    /// The current estimate of the 90th percentile of lateness.
    pub fn p90_ns(&self) -> f64 {
        self.p90_ns
    }
}

/// A token bucket of CPU time for polling without sleeping: at most
/// [`SpinBudget::RATE`] of one core on average, in bursts of at most
/// [`SpinBudget::CAP_NS`].
#[derive(Clone, Debug, PartialEq)]
pub struct SpinBudget {
    tokens_ns: f64,
    last: Instant,
    spent_ns: u64,
}

impl SpinBudget {
    /// Share of one core that polling may use.
    pub const RATE: f64 = 0.10;
    /// Largest burst of polling.
    pub const CAP_NS: f64 = 2_000_000.0;

    /// A full bucket at `now`.
    pub fn new(now: Instant) -> SpinBudget {
        SpinBudget {
            tokens_ns: Self::CAP_NS,
            last: now,
            spent_ns: 0,
        }
    }

    /// Add the tokens earned since the last refill.
    pub fn refill(&mut self, now: Instant) {
        let earned = now.as_nanos().saturating_sub(self.last.as_nanos()) as f64 * Self::RATE;
        self.tokens_ns = (self.tokens_ns + earned).min(Self::CAP_NS);
        self.last = now;
    }

    /// True while any token is left.
    pub fn allows(&self) -> bool {
        self.tokens_ns > 0.0
    }

    /// Take the time just spent polling.
    pub fn spend(&mut self, ns: u64) {
        self.tokens_ns -= ns as f64;
        self.spent_ns += ns;
    }

    /// All time spent polling, in nanoseconds.
    pub fn spent_ns(&self) -> u64 {
        self.spent_ns
    }
}

/// How the event loop waits until its next iteration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Poll the devices without sleeping (a timeout of 0).
    Spin,
    /// Wait for the devices at most `timeout`, a timed wake-up meant for
    /// `wake_at` (the deadline less the margin). `timeout` may be 0 when the
    /// budget forbids spinning near a deadline.
    Sleep { timeout: Duration, wake_at: Instant },
    /// Nothing is due: wait for the devices only.
    Forever,
}

impl Wait {
    /// The poll timeout: `None` waits forever.
    pub fn timeout(self) -> Option<Duration> {
        match self {
            Wait::Spin => Some(Duration::ZERO),
            Wait::Sleep { timeout, .. } => Some(timeout),
            Wait::Forever => None,
        }
    }
}

/// The event loop's timing policy: the wake-up margin, the spin budget and
/// the linger after deliveries, combined into one [`Wait`] per iteration.
#[derive(Clone, Debug)]
pub struct Pacer {
    margin: WakeMargin,
    budget: SpinBudget,
    linger_until: Instant,
    /// The last plan and the time it was made at.
    last: Option<(Wait, Instant)>,
}

impl Pacer {
    /// A pacer starting at `now` with a calibrated margin and a full budget.
    pub fn new(now: Instant, margin: WakeMargin) -> Pacer {
        Pacer {
            margin,
            budget: SpinBudget::new(now),
            linger_until: Instant::ZERO,
            last: None,
        }
    }

    /// Plan the wait at `now`: `due` is the model's next deadline (None if
    /// nothing is pending), `delivered` whether this iteration wrote packets.
    ///
    /// Spin (if the budget allows) when the deadline is within the margin or
    /// a delivery was less than [`LINGER`] ago; otherwise sleep until the
    /// deadline less the margin, or forever when nothing is due.
    pub fn plan(&mut self, now: Instant, due: Option<Instant>, delivered: bool) -> Wait {
        if delivered {
            self.linger_until = now + LINGER;
        }
        self.budget.refill(now);
        let m = self.margin.margin_ns();
        let now_ns = now.as_nanos();
        let near = due.is_some_and(|d| now_ns + m >= d.as_nanos());
        let wait = if self.budget.allows() && (near || now < self.linger_until) {
            Wait::Spin
        } else {
            match due {
                Some(d) => {
                    let wake_at = Instant::from_nanos(d.as_nanos().saturating_sub(m));
                    Wait::Sleep {
                        timeout: wake_at - now,
                        wake_at,
                    }
                }
                None => Wait::Forever,
            }
        };
        self.last = Some((wait, now));
        wait
    }

    /// The wait planned last ended at `after`; `by_io` if a device or the
    /// stop signal was ready. Polling time is charged to the budget; the
    /// lateness of a timed wake-up that nothing else cut short trains the
    /// margin.
    pub fn woke(&mut self, after: Instant, by_io: bool) {
        match self.last.take() {
            Some((Wait::Spin, at)) => self
                .budget
                .spend(after.as_nanos().saturating_sub(at.as_nanos())),
            Some((Wait::Sleep { timeout, wake_at }, _)) if !timeout.is_zero() && !by_io => self
                .margin
                .observe(after.as_nanos() as i64 - wake_at.as_nanos() as i64),
            _ => {}
        }
    }

    /// The learned margin, in nanoseconds.
    pub fn margin_ns(&self) -> u64 {
        self.margin.margin_ns()
    }

    /// CPU time spent polling without sleeping, in nanoseconds.
    pub fn spin_ns(&self) -> u64 {
        self.budget.spent_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn us(x: u64) -> Duration {
        Duration::from_micros(x)
    }

    #[test]
    fn calibration_takes_the_90th_percentile() {
        let late: Vec<u64> = (1..=30).map(|i| i * 1_000).collect();
        let m = WakeMargin::from_calibration(&late);
        // Index 27 of 30 sorted samples: 28 us, plus the 10 us guard.
        assert_eq!(m.p90_ns(), 28_000.0);
        assert_eq!(m.margin_ns(), 38_000);
        assert_eq!(
            WakeMargin::from_calibration(&[]).margin_ns(),
            WakeMargin::GUARD_NS
        );
    }

    #[test]
    fn margin_follows_the_p90_estimate() {
        // Lateness uniform in [0, 100) us: the estimate settles near 90 us.
        let mut rng = Rng::new(3);
        let mut m = WakeMargin::new(0.0);
        for _ in 0..20_000 {
            m.observe((rng.uniform() * 100_000.0) as i64);
        }
        assert!(
            (m.p90_ns() - 90_000.0).abs() < 5_000.0,
            "p90 {}",
            m.p90_ns()
        );
        assert_eq!(m.margin_ns(), m.p90_ns() as u64 + WakeMargin::GUARD_NS);
        // One huge outlier moves it by one step only.
        let before = m.p90_ns();
        m.observe(50_000_000);
        assert_eq!(m.p90_ns(), before + WakeMargin::STEP_NS * 0.9);
    }

    #[test]
    fn margin_is_capped() {
        let mut m = WakeMargin::new(0.0);
        for _ in 0..1_000 {
            m.observe(5_000_000);
        }
        assert!(m.p90_ns() > WakeMargin::MAX_NS as f64);
        assert_eq!(m.margin_ns(), WakeMargin::MAX_NS);
        assert_eq!(WakeMargin::new(1e9).margin_ns(), WakeMargin::MAX_NS);
    }

    #[test]
    fn sleeps_until_deadline_minus_margin() {
        let margin = WakeMargin::new(40_000.0); // 50 us with the guard
        let t0 = Instant::from_millis(100);
        let mut p = Pacer::new(t0, margin);
        let due = t0 + Duration::from_millis(10);
        let w = p.plan(t0, Some(due), false);
        let wake_at = Instant::from_nanos(due.as_nanos() - 50_000);
        assert_eq!(
            w,
            Wait::Sleep {
                timeout: wake_at - t0,
                wake_at
            }
        );
        assert_eq!(w.timeout(), Some(Duration::from_millis(10) - us(50)));
        // Within the margin of the deadline: poll instead.
        assert_eq!(p.plan(wake_at, Some(due), false), Wait::Spin);
        // Nothing due: wait for packets only.
        assert_eq!(p.plan(due + us(100), None, false), Wait::Forever);
        assert_eq!(Wait::Forever.timeout(), None);
    }

    #[test]
    fn lingers_after_a_delivery() {
        let t0 = Instant::from_millis(5);
        let mut p = Pacer::new(t0, WakeMargin::new(0.0));
        assert_eq!(p.plan(t0, None, true), Wait::Spin);
        p.woke(t0 + us(10), false);
        assert_eq!(p.plan(t0 + us(29), None, false), Wait::Spin);
        p.woke(t0 + us(29), false);
        assert_eq!(p.plan(t0 + LINGER, None, false), Wait::Forever);
    }

    #[test]
    fn spinning_is_capped_at_a_tenth_of_a_core() {
        // A deadline always 1 us away: the loop would spin forever. Each
        // iteration's poll takes 5 us; the budget allows 10 % of the time.
        let t0 = Instant::ZERO;
        let mut p = Pacer::new(t0, WakeMargin::new(0.0));
        let mut now = t0;
        let end = Instant::from_millis(1_000);
        while now < end {
            let w = p.plan(now, Some(now + us(1)), false);
            now = match w {
                Wait::Spin => now + us(5),
                Wait::Sleep { timeout, .. } => now + timeout.max(us(5)),
                Wait::Forever => unreachable!("a deadline is pending"),
            };
            p.woke(now, false);
        }
        let spun = p.spin_ns() as f64;
        let limit = 0.10 * 1e9 + SpinBudget::CAP_NS + 5_000.0;
        assert!(spun <= limit, "spun {spun} ns");
        assert!(spun >= 0.09 * 1e9, "spun only {spun} ns");
    }

    #[test]
    fn only_undisturbed_timed_wakeups_train_the_margin() {
        let t0 = Instant::ZERO;
        let mut p = Pacer::new(t0, WakeMargin::new(0.0));
        let due = Instant::from_millis(1);
        let Wait::Sleep { wake_at, .. } = p.plan(t0, Some(due), false) else {
            panic!()
        };
        // Woken by a packet: not a measure of timer lateness.
        p.woke(wake_at + us(500), true);
        assert_eq!(p.margin_ns(), WakeMargin::GUARD_NS);
        let Wait::Sleep { wake_at, .. } = p.plan(t0, Some(due), false) else {
            panic!()
        };
        p.woke(wake_at + us(500), false);
        assert_eq!(p.margin_ns(), WakeMargin::GUARD_NS + 1_800);
        // Spinning is charged to the budget, not to the margin.
        assert_eq!(p.plan(due, Some(due), false), Wait::Spin);
        p.woke(due + us(7), false);
        assert_eq!(p.spin_ns(), 7_000);
        assert_eq!(p.margin_ns(), WakeMargin::GUARD_NS + 1_800);
    }
}
