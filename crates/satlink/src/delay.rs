//! Propagation delay (constant or scheduled) with optional jitter, and the
//! delay line that holds packets until they are due.

use crate::rng::Rng;
use crate::schedule::Schedule;
use crate::time::Instant;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// Shape of the random part of the delay.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Jitter {
    None,
    /// Uniform in [-j, +j].
    Uniform(Duration),
    /// Normal with standard deviation j.
    Normal(Duration),
}

/// One-way delay: a base value (constant or scheduled, in seconds), an
/// optional extra step (a periodic reconfiguration), plus jitter.
#[derive(Debug)]
pub struct Delay {
    base_s: Schedule,
    extra_s: Option<Schedule>,
    jitter: Jitter,
}

impl Delay {
    pub fn constant(d: Duration) -> Delay {
        Delay {
            base_s: Schedule::constant(d.as_secs_f64()),
            extra_s: None,
            jitter: Jitter::None,
        }
    }
    pub fn scheduled(base_s: Schedule, jitter: Jitter) -> Delay {
        Delay {
            base_s,
            extra_s: None,
            jitter,
        }
    }
    /// Add `extra_s` (seconds, over time) to the base delay.
    pub fn with_extra(mut self, extra_s: Schedule) -> Delay {
        self.extra_s = Some(extra_s);
        self
    }
    pub fn with_jitter(mut self, jitter: Jitter) -> Delay {
        self.jitter = jitter;
        self
    }
    /// The base delay's schedule, in seconds (without jitter).
    pub fn base_s(&self) -> &Schedule {
        &self.base_s
    }
    /// True if every packet gets the same delay.
    pub fn is_fixed(&self) -> bool {
        self.base_s.is_constant() && self.extra_s.is_none() && self.jitter == Jitter::None
    }

    /// The delay for a packet that leaves the link at `t`.
    pub fn sample(&self, t: Instant, rng: &mut Rng) -> Duration {
        let base = self.base_s.value_at(t) + self.extra_s.as_ref().map_or(0.0, |e| e.value_at(t));
        let extra = match self.jitter {
            Jitter::None => 0.0,
            Jitter::Uniform(j) => (rng.uniform() * 2.0 - 1.0) * j.as_secs_f64(),
            Jitter::Normal(j) => rng.normal() * j.as_secs_f64(),
        };
        Duration::from_secs_f64((base + extra).max(0.0))
    }
}

/// The round trip of a control loop over both directions' base delays
/// (without jitter): a request up the return link and its answer back down
/// the forward link.
#[derive(Clone, Debug, PartialEq)]
pub struct RoundTrip {
    /// Return (terminal to gateway) and forward base delays, in seconds.
    ret_s: Schedule,
    fwd_s: Schedule,
}

impl RoundTrip {
    pub fn new(ret_s: Schedule, fwd_s: Schedule) -> RoundTrip {
        RoundTrip { ret_s, fwd_s }
    }

    /// A fixed round trip (tests).
    pub fn constant(rtt: Duration) -> RoundTrip {
        let half = rtt.as_secs_f64() / 2.0;
        RoundTrip::new(Schedule::constant(half), Schedule::constant(half))
    }

    /// The round trip of a message sent up at `t`.
    pub fn at(&self, t: Instant) -> Duration {
        Duration::from_secs_f64((self.ret_s.value_at(t) + self.fwd_s.value_at(t)).max(0.0))
    }

    /// The smallest and largest round trip (sums of the extremes).
    pub fn min(&self) -> Duration {
        Duration::from_secs_f64((self.ret_s.min() + self.fwd_s.min()).max(0.0))
    }
    pub fn max(&self) -> Duration {
        Duration::from_secs_f64((self.ret_s.max() + self.fwd_s.max()).max(0.0))
    }
}

/// Packets in flight on the propagation path, released when due.
///
/// Without reordering a packet never overtakes an earlier one: if its sampled
/// arrival is earlier, it arrives together with its predecessor.
pub struct DelayLine<T> {
    fifo: VecDeque<(Instant, T)>,
    heap: BinaryHeap<Reverse<Timed<T>>>,
    reorder: bool,
    last_release: Instant,
    seq: u64,
}

struct Timed<T> {
    at: Instant,
    seq: u64,
    data: T,
}
impl<T> PartialEq for Timed<T> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<T> Eq for Timed<T> {}
impl<T> PartialOrd for Timed<T> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<T> Ord for Timed<T> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(o.at, o.seq))
    }
}

impl<T> DelayLine<T> {
    pub fn new(reorder: bool) -> DelayLine<T> {
        DelayLine {
            fifo: VecDeque::new(),
            heap: BinaryHeap::new(),
            reorder,
            last_release: Instant::ZERO,
            seq: 0,
        }
    }

    pub fn push(&mut self, at: Instant, data: T) {
        if self.reorder {
            self.seq += 1;
            self.heap.push(Reverse(Timed {
                at,
                seq: self.seq,
                data,
            }));
        } else {
            let at = at.max(self.last_release);
            self.last_release = at;
            self.fifo.push_back((at, data));
        }
    }

    /// Next packet due at or before `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<T> {
        self.pop_due_timed(now).map(|(_, d)| d)
    }

    /// Next packet due at or before `now`, with the time it was due.
    pub fn pop_due_timed(&mut self, now: Instant) -> Option<(Instant, T)> {
        if self.reorder {
            if self.heap.peek()?.0.at <= now {
                return self.heap.pop().map(|r| (r.0.at, r.0.data));
            }
            None
        } else {
            if self.fifo.front()?.0 <= now {
                return self.fifo.pop_front();
            }
            None
        }
    }

    pub fn next_due(&self) -> Option<Instant> {
        if self.reorder {
            self.heap.peek().map(|r| r.0.at)
        } else {
            self.fifo.front().map(|f| f.0)
        }
    }

    pub fn len(&self) -> usize {
        self.fifo.len() + self.heap.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_delay_exact() {
        let d = Delay::constant(Duration::from_millis(265));
        let mut rng = Rng::new(0);
        assert_eq!(
            d.sample(Instant::from_millis(3), &mut rng),
            Duration::from_millis(265)
        );
        assert!(d.is_fixed());
    }

    #[test]
    fn jitter_bounds_and_mean() {
        let d = Delay::constant(Duration::from_millis(100))
            .with_jitter(Jitter::Uniform(Duration::from_millis(10)));
        let mut rng = Rng::new(4);
        let n = 20_000;
        let mut sum = 0.0;
        for _ in 0..n {
            let s = d.sample(Instant::ZERO, &mut rng).as_secs_f64();
            assert!((0.090..=0.110).contains(&s));
            sum += s;
        }
        assert!((sum / n as f64 - 0.100).abs() < 0.0005);
    }

    #[test]
    fn fifo_line_never_reorders() {
        let mut l = DelayLine::new(false);
        l.push(Instant::from_millis(10), 1);
        l.push(Instant::from_millis(5), 2); // would overtake
        assert_eq!(l.pop_due(Instant::from_millis(9)), None);
        assert_eq!(l.pop_due(Instant::from_millis(10)), Some(1));
        assert_eq!(l.pop_due(Instant::from_millis(10)), Some(2));
    }

    #[test]
    fn reordering_line_releases_by_time() {
        let mut l = DelayLine::new(true);
        l.push(Instant::from_millis(10), 1);
        l.push(Instant::from_millis(5), 2);
        assert_eq!(l.next_due(), Some(Instant::from_millis(5)));
        assert_eq!(l.pop_due(Instant::from_millis(10)), Some(2));
        assert_eq!(l.pop_due(Instant::from_millis(10)), Some(1));
    }
}
