//! Queue disciplines in front of the link: drop-tail and CoDel (RFC 8289).

use crate::time::Instant;
use std::collections::VecDeque;
use std::time::Duration;

/// A packet as the model carries it: opaque payload plus what the link needs to know.
#[derive(Debug)]
pub struct Entry<T> {
    pub data: T,
    /// Bytes on the wire (all segments).
    pub bytes: u32,
    /// Packets on the wire (segments of an offloaded chunk, else 1).
    pub packets: u32,
    /// When it entered the queue.
    pub enqueued: Instant,
}

/// How much a queue may hold (waiting packets; the one on the wire is not counted).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    Unlimited,
    Packets(u32),
    Bytes(u64),
}

/// A queue discipline.
pub trait Queue<T>: Send {
    /// Accept the packet or hand it back (a tail drop).
    fn enqueue(&mut self, now: Instant, e: Entry<T>) -> Result<(), Entry<T>>;
    /// The next packet to transmit; packets the discipline drops on the way go to `dropped`.
    fn dequeue(&mut self, now: Instant, dropped: &mut Vec<Entry<T>>) -> Option<Entry<T>>;
    fn len_packets(&self) -> usize;
    fn len_bytes(&self) -> u64;
    /// Arrival time of the packet at the head, if any.
    fn head_enqueued(&self) -> Option<Instant>;
}

/// FIFO with a tail-drop limit.
pub struct DropTail<T> {
    q: VecDeque<Entry<T>>,
    bytes: u64,
    limit: Limit,
}

impl<T> DropTail<T> {
    pub fn new(limit: Limit) -> DropTail<T> {
        DropTail {
            q: VecDeque::new(),
            bytes: 0,
            limit,
        }
    }

    fn fits(&self, e: &Entry<T>) -> bool {
        match self.limit {
            Limit::Unlimited => true,
            Limit::Packets(n) => self.q.len() < n as usize,
            Limit::Bytes(b) => self.bytes + e.bytes as u64 <= b,
        }
    }

    fn pop(&mut self) -> Option<Entry<T>> {
        let e = self.q.pop_front()?;
        self.bytes -= e.bytes as u64;
        Some(e)
    }
}

impl<T: Send> Queue<T> for DropTail<T> {
    fn enqueue(&mut self, _now: Instant, e: Entry<T>) -> Result<(), Entry<T>> {
        if !self.fits(&e) {
            return Err(e);
        }
        self.bytes += e.bytes as u64;
        self.q.push_back(e);
        Ok(())
    }
    fn dequeue(&mut self, _now: Instant, _dropped: &mut Vec<Entry<T>>) -> Option<Entry<T>> {
        self.pop()
    }
    fn len_packets(&self) -> usize {
        self.q.len()
    }
    fn len_bytes(&self) -> u64 {
        self.bytes
    }
    fn head_enqueued(&self) -> Option<Instant> {
        self.q.front().map(|e| e.enqueued)
    }
}

/// CoDel as in RFC 8289's pseudocode, over a drop-tail buffer with its own limit.
pub struct CoDel<T> {
    inner: DropTail<T>,
    target: Duration,
    interval: Duration,
    mtu: u64,
    first_above_time: Option<Instant>,
    drop_next: Instant,
    count: u32,
    lastcount: u32,
    dropping: bool,
}

impl<T> CoDel<T> {
    pub fn new(limit: Limit, target: Duration, interval: Duration) -> CoDel<T> {
        CoDel {
            inner: DropTail::new(limit),
            target,
            interval,
            mtu: 1514,
            first_above_time: None,
            drop_next: Instant::ZERO,
            count: 0,
            lastcount: 0,
            dropping: false,
        }
    }

    fn control_law(&self, t: Instant, count: u32) -> Instant {
        t + self.interval.div_f64((count.max(1) as f64).sqrt())
    }

    /// Pop one packet and say whether CoDel may drop it.
    fn do_dequeue(&mut self, now: Instant) -> (Option<Entry<T>>, bool) {
        let Some(e) = self.inner.pop() else {
            self.first_above_time = None;
            return (None, false);
        };
        let sojourn = now - e.enqueued;
        let mut ok_to_drop = false;
        if sojourn < self.target || self.inner.bytes <= self.mtu {
            self.first_above_time = None;
        } else {
            match self.first_above_time {
                None => self.first_above_time = Some(now + self.interval),
                Some(t) if now >= t => ok_to_drop = true,
                Some(_) => {}
            }
        }
        (Some(e), ok_to_drop)
    }
}

impl<T: Send> Queue<T> for CoDel<T> {
    fn enqueue(&mut self, now: Instant, e: Entry<T>) -> Result<(), Entry<T>> {
        self.inner.enqueue(now, e)
    }

    fn dequeue(&mut self, now: Instant, dropped: &mut Vec<Entry<T>>) -> Option<Entry<T>> {
        let (mut p, mut ok) = self.do_dequeue(now);
        if p.is_none() {
            self.dropping = false;
            return None;
        }
        if self.dropping {
            if !ok {
                self.dropping = false;
            } else {
                while now >= self.drop_next && self.dropping {
                    dropped.push(p.take().expect("packet present while dropping"));
                    self.count += 1;
                    (p, ok) = self.do_dequeue(now);
                    if p.is_none() || !ok {
                        self.dropping = false;
                    } else {
                        self.drop_next = self.control_law(self.drop_next, self.count);
                    }
                }
            }
        } else if ok {
            dropped.push(p.take().expect("packet present"));
            (p, _) = self.do_dequeue(now);
            self.dropping = true;
            let delta = self.count.saturating_sub(self.lastcount);
            self.count = if delta > 1 && now - self.drop_next < self.interval * 16 {
                delta
            } else {
                1
            };
            self.drop_next = self.control_law(now, self.count);
            self.lastcount = self.count;
        }
        p
    }
    fn len_packets(&self) -> usize {
        self.inner.len_packets()
    }
    fn len_bytes(&self) -> u64 {
        self.inner.len_bytes()
    }
    fn head_enqueued(&self) -> Option<Instant> {
        self.inner.head_enqueued()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u32, bytes: u32, at: Instant) -> Entry<u32> {
        Entry {
            data: id,
            bytes,
            packets: 1,
            enqueued: at,
        }
    }

    #[test]
    fn droptail_packet_limit() {
        let mut q = DropTail::new(Limit::Packets(2));
        assert!(q
            .enqueue(Instant::ZERO, entry(1, 100, Instant::ZERO))
            .is_ok());
        assert!(q
            .enqueue(Instant::ZERO, entry(2, 100, Instant::ZERO))
            .is_ok());
        assert_eq!(
            q.enqueue(Instant::ZERO, entry(3, 100, Instant::ZERO))
                .unwrap_err()
                .data,
            3
        );
        let mut d = vec![];
        assert_eq!(q.dequeue(Instant::ZERO, &mut d).unwrap().data, 1);
    }

    #[test]
    fn droptail_byte_limit() {
        let mut q = DropTail::new(Limit::Bytes(250));
        assert!(q
            .enqueue(Instant::ZERO, entry(1, 100, Instant::ZERO))
            .is_ok());
        assert!(q
            .enqueue(Instant::ZERO, entry(2, 150, Instant::ZERO))
            .is_ok());
        assert!(q
            .enqueue(Instant::ZERO, entry(3, 1, Instant::ZERO))
            .is_err());
        assert_eq!(q.len_bytes(), 250);
    }

    #[test]
    fn codel_leaves_short_queues_alone() {
        let mut q = CoDel::new(
            Limit::Unlimited,
            Duration::from_millis(5),
            Duration::from_millis(100),
        );
        let mut d = vec![];
        for i in 0..1000u32 {
            let t = Instant::from_millis(i as u64);
            q.enqueue(t, entry(i, 1500, t)).unwrap();
            // Dequeued 1 ms later: sojourn 1 ms, under target.
            q.dequeue(t + Duration::from_millis(1), &mut d).unwrap();
        }
        assert!(d.is_empty());
    }

    #[test]
    fn codel_drops_a_standing_queue() {
        let mut q = CoDel::new(
            Limit::Unlimited,
            Duration::from_millis(5),
            Duration::from_millis(100),
        );
        let mut d = vec![];
        // Two packets in per ms, one out per ms: the queue grows without bound.
        let mut id = 0;
        for ms in 0..2000u64 {
            let t = Instant::from_millis(ms);
            for _ in 0..2 {
                q.enqueue(t, entry(id, 1500, t)).unwrap();
                id += 1;
            }
            q.dequeue(t, &mut d);
        }
        assert!(!d.is_empty(), "CoDel never dropped");
        // Its drop rate rises over time (control law), so later seconds drop more.
        assert!(d.len() > 10, "only {} drops", d.len());
    }
}
