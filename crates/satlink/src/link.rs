//! One direction of the emulated link, composed of one-concern pieces:
//!
//! ```text
//! on_packet -> [stage: queue discipline + transmission] -> [loss] -> [delay line]
//!           -> poll_transmit
//! ```
//!
//! The stage ([`crate::stage::Stage`]) is either the plain link (one queue in
//! front of one capacity, [`crate::stage::Serial`]) or a framed carrier shared
//! by several terminals ([`crate::framed::Framed`]: DVB-S2 ACM forward,
//! DVB-RCS2 bandwidth on demand on return).
//!
//! Sans-IO: the caller passes the time to every call and asks `poll_timeout`
//! when to come back. Channel loss is applied after transmission, because a
//! corrupted frame still used its air time.

use crate::capacity::Capacity;
use crate::delay::{Delay, DelayLine};
use crate::loss::Loss;
use crate::queue::{Entry, Meta, Queue};
use crate::rng::Rng;
use crate::stage::{Sent, Serial, Stage};
use crate::stats::{Counters, CountersReport, Tally};
use crate::time::Instant;

pub struct Direction<T> {
    stage: Box<dyn Stage<T>>,
    losses: Vec<Box<dyn Loss>>,
    delay: Delay,
    line: DelayLine<Entry<T>>,
    rng: Rng,
    counters: Counters,
    per_packet: bool,
}

impl<T: Send + 'static> Direction<T> {
    /// The plain link: one queue in front of one capacity.
    /// `per_packet_capacity`: false only for an unlimited link.
    pub fn new(
        queue: Box<dyn Queue<T>>,
        capacity: Box<dyn Capacity>,
        per_packet_capacity: bool,
        losses: Vec<Box<dyn Loss>>,
        delay: Delay,
        reorder: bool,
        rng: Rng,
    ) -> Direction<T> {
        let stage = Serial::new(queue, capacity, per_packet_capacity);
        Direction::with_stage(Box::new(stage), losses, delay, reorder, rng)
    }
}

impl<T: Send> Direction<T> {
    /// A direction around any stage (a framed carrier, say).
    pub fn with_stage(
        stage: Box<dyn Stage<T>>,
        losses: Vec<Box<dyn Loss>>,
        delay: Delay,
        reorder: bool,
        rng: Rng,
    ) -> Direction<T> {
        let per_packet = stage.per_packet() || !losses.is_empty() || !delay.is_fixed();
        Direction {
            stage,
            losses,
            delay,
            line: DelayLine::new(reorder),
            rng,
            counters: Counters::default(),
            per_packet,
        }
    }

    /// True if every wire packet must be handed in on its own (rate, loss or
    /// jitter act per packet). False only for a fixed-delay, unlimited, lossless
    /// direction, where an offloaded chunk of segments keeps exact timing.
    pub fn needs_segments(&self) -> bool {
        self.per_packet
    }

    /// A packet (or offloaded chunk of `packets` segments) arrives at `now`,
    /// for the first (or only) terminal.
    pub fn on_packet(&mut self, now: Instant, data: T, bytes: u32, packets: u32) {
        self.on_packet_for(now, 0, data, bytes, packets)
    }

    /// A packet arrives at `now` for `terminal` (forward: the terminal it is
    /// routed to; return: the terminal it came from). A plain link has one
    /// queue for all terminals.
    pub fn on_packet_for(
        &mut self,
        now: Instant,
        terminal: usize,
        data: T,
        bytes: u32,
        packets: u32,
    ) {
        self.on_packet_meta(now, terminal, data, bytes, packets, Meta::default())
    }

    /// A packet arrives with what the queue may use of it: its flow (for
    /// flow queueing) and its ECN field (for marking).
    pub fn on_packet_meta(
        &mut self,
        now: Instant,
        terminal: usize,
        data: T,
        bytes: u32,
        packets: u32,
        meta: Meta,
    ) {
        self.advance(now);
        self.counters.offered.add(packets, bytes);
        if meta.ecn.capable() {
            self.counters.ecn.capable.add(packets, bytes);
        }
        let e = Entry::new(data, bytes, packets, now, meta);
        if let Err(e) = self.stage.enqueue(now, terminal, e, &mut self.counters) {
            self.counters.dropped.queue.add(e.packets, e.bytes);
        } else {
            let (p, b) = self.stage.queued();
            let mq = &mut self.counters.max_queue;
            mq.packets = mq.packets.max(p);
            mq.bytes = mq.bytes.max(b);
        }
        self.advance(now);
    }

    /// The next packet due for delivery at `now`, if any.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<T> {
        self.poll_transmit_marked(now).map(|(d, _)| d)
    }

    /// The next packet due at `now`, and whether the queue marked it
    /// Congestion Experienced (the caller sets its ECN field).
    pub fn poll_transmit_marked(&mut self, now: Instant) -> Option<(T, bool)> {
        self.advance(now);
        let (due, e) = self.line.pop_due_timed(now)?;
        self.counters.delivered.add(e.packets, e.bytes);
        self.counters.release_lateness.record(now - due);
        if e.ce {
            self.counters.ecn.marked.add(e.packets, e.bytes);
        }
        Some((e.data, e.ce))
    }

    /// When the model next has something to do (None: nothing pending).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.stage.next_event(), self.line.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Counters with the packets still queued or travelling.
    pub fn report(&self) -> CountersReport {
        let c = &self.counters;
        let d = &c.dropped;
        let gone = |f: fn(&Tally) -> u64| {
            f(&c.delivered) + f(&d.queue) + f(&d.aqm) + f(&d.loss) + f(&d.outage)
        };
        let in_flight = Tally {
            packets: c.offered.packets - gone(|t| t.packets),
            bytes: c.offered.bytes - gone(|t| t.bytes),
        };
        let mut r = c.report(in_flight);
        r.access = self.stage.access_report();
        r
    }

    /// Report with a framed carrier's control loops and time series brought
    /// up to `now` (packets are not moved: the counters are `report`'s).
    pub fn report_at(&mut self, now: Instant) -> CountersReport {
        self.stage.settle(now);
        self.report()
    }

    /// Move packets through the link up to `now`, in their logical times.
    fn advance(&mut self, now: Instant) {
        while let Some(s) = self.stage.pop_sent(now, &mut self.counters) {
            self.depart(s);
        }
    }

    fn depart(&mut self, s: Sent<T>) {
        let Sent { at, entry: e, lost } = s;
        let mut lost = lost;
        for l in self.losses.iter_mut() {
            // Every model draws for every packet, so one model's outcome never
            // shifts another's random stream.
            lost |= l.lose(at, e.bytes / e.packets.max(1), &mut self.rng);
        }
        if lost {
            self.counters.dropped.loss.add(e.packets, e.bytes);
            return;
        }
        let arrival = at + self.delay.sample(at, &mut self.rng);
        self.line.push(arrival, e);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::{Rate, Trace, Unlimited};
    use crate::loss::Bernoulli;
    use crate::queue::{DropTail, Limit};
    use std::time::Duration;

    fn direction(
        cap: Box<dyn Capacity>,
        limited: bool,
        loss: Vec<Box<dyn Loss>>,
        delay_ms: u64,
        limit: Limit,
    ) -> Direction<u32> {
        Direction::new(
            Box::new(DropTail::new(limit)),
            cap,
            limited,
            loss,
            Delay::constant(Duration::from_millis(delay_ms)),
            false,
            Rng::new(1),
        )
    }

    /// Drive the model in simulated time: feed arrivals, collect (time, id) deliveries.
    fn run(d: &mut Direction<u32>, arrivals: &[(Instant, u32, u32)]) -> Vec<(Instant, u32)> {
        let mut out = Vec::new();
        let mut i = 0;
        loop {
            let next_arrival = arrivals.get(i).map(|a| a.0);
            let next = match (next_arrival, d.poll_timeout()) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => match a.or(b) {
                    Some(t) => t,
                    None => return out,
                },
            };
            while let Some(p) = d.poll_transmit(next) {
                out.push((next, p));
            }
            while i < arrivals.len() && arrivals[i].0 <= next {
                let (t, id, bytes) = arrivals[i];
                d.on_packet(t, id, bytes, 1);
                i += 1;
            }
            while let Some(p) = d.poll_transmit(next) {
                out.push((next, p));
            }
        }
    }

    #[test]
    fn exact_delay_unlimited() {
        let mut d = direction(Box::new(Unlimited), false, vec![], 250, Limit::Unlimited);
        assert!(!d.needs_segments());
        let out = run(&mut d, &[(Instant::from_micros(1), 7, 100)]);
        assert_eq!(out, vec![(Instant::from_micros(250_001), 7)]);
    }

    #[test]
    fn serialisation_then_delay() {
        // 10 Mbit/s, 1500-byte packets: 1.2 ms each; 3 back to back at t=0.
        let mut d = direction(
            Box::new(Rate::constant(10e6)),
            true,
            vec![],
            100,
            Limit::Unlimited,
        );
        let arr: Vec<_> = (0..3).map(|i| (Instant::ZERO, i, 1500)).collect();
        let out = run(&mut d, &arr);
        let times: Vec<u64> = out.iter().map(|o| o.0.as_nanos()).collect();
        assert_eq!(times, vec![101_200_000, 102_400_000, 103_600_000]);
        let r = d.report();
        assert_eq!(r.delivered.packets, 3);
        assert_eq!(r.in_flight.packets, 0);
        // Queueing delays 0, 1.2, 2.4 ms.
        assert!((r.queue_delay.max_ms - 2.4).abs() < 0.05);
    }

    #[test]
    fn delivered_rate_matches_rate() {
        // Offer 20 Mbit/s to a 10 Mbit/s link for one second with a big queue:
        // deliveries are spaced exactly 1.2 ms apart.
        let mut d = direction(
            Box::new(Rate::constant(10e6)),
            true,
            vec![],
            0,
            Limit::Unlimited,
        );
        let arr: Vec<_> = (0..1666u32)
            .map(|i| (Instant::from_micros(600 * i as u64), i, 1500))
            .collect();
        let out = run(&mut d, &arr);
        assert_eq!(out.len(), 1666);
        for w in out.windows(2) {
            assert_eq!(w[1].0 - w[0].0, Duration::from_micros(1200));
        }
    }

    #[test]
    fn delivered_rate_matches_trace() {
        // A trace with 1 opportunity per ms for 100 ms, 1504-byte packets, saturated.
        let text: String = (1..=100).map(|i| format!("{i}\n")).collect();
        let mut d = direction(
            Box::new(Trace::parse(&text).unwrap()),
            true,
            vec![],
            0,
            Limit::Unlimited,
        );
        let arr: Vec<_> = (0..300u32).map(|i| (Instant::ZERO, i, 1504)).collect();
        let out = run(&mut d, &arr);
        // One packet per ms: 300 packets over 300 ms.
        assert_eq!(out.len(), 300);
        for (k, (t, _)) in out.iter().enumerate() {
            assert_eq!(*t, Instant::from_millis(k as u64 + 1));
        }
    }

    #[test]
    fn tail_drop_counts() {
        let mut d = direction(
            Box::new(Rate::constant(1e6)),
            true,
            vec![],
            0,
            Limit::Packets(2),
        );
        // Packet 0 goes on the wire, 1 and 2 wait, 3 and 4 are dropped.
        for i in 0..5 {
            d.on_packet(Instant::ZERO, i, 1000, 1);
        }
        let r = d.report();
        assert_eq!(r.dropped.queue.packets, 2);
        assert_eq!(r.in_flight.packets, 3);
    }

    #[test]
    fn loss_counted_and_consistent() {
        let mut d = direction(
            Box::new(Unlimited),
            false,
            vec![Box::new(Bernoulli::new(0.1))],
            10,
            Limit::Unlimited,
        );
        assert!(d.needs_segments());
        let arr: Vec<_> = (0..10_000u32)
            .map(|i| (Instant::from_micros(i as u64 * 100), i, 1000))
            .collect();
        let out = run(&mut d, &arr);
        let r = d.report();
        assert_eq!(out.len() as u64 + r.dropped.loss.packets, 10_000);
        let rate = r.dropped.loss.packets as f64 / 1e4;
        assert!(
            (rate - 0.1).abs() < 5.0 * (0.1f64 * 0.9 / 1e4).sqrt(),
            "loss rate {rate}"
        );
    }

    #[test]
    fn same_seed_same_losses() {
        let mk = || {
            direction(
                Box::new(Unlimited),
                false,
                vec![Box::new(Bernoulli::new(0.3))],
                1,
                Limit::Unlimited,
            )
        };
        let arr: Vec<_> = (0..1000u32)
            .map(|i| (Instant::from_micros(i as u64 * 10), i, 100))
            .collect();
        let a = run(&mut mk(), &arr);
        let b = run(&mut mk(), &arr);
        assert_eq!(a, b);
    }

    #[test]
    fn outage_forever_drops() {
        let s = crate::schedule::Schedule::new(&[(0.0, 1e6), (1.0, 0.0)], 0.0).unwrap();
        let mut d = direction(
            Box::new(Rate::scheduled(s)),
            true,
            vec![],
            0,
            Limit::Unlimited,
        );
        d.on_packet(Instant::from_secs_f64(2.0), 1, 100, 1);
        assert_eq!(d.report().dropped.outage.packets, 1);
        assert_eq!(d.poll_timeout(), None);
    }
}
