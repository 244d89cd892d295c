//! Queue disciplines in front of the link: drop-tail, CoDel (RFC 8289) and
//! FQ-CoDel (RFC 8290), with ECN: CoDel marks an ECN-capable packet
//! Congestion Experienced where it would drop it (RFC 8289 section 5; the
//! marking is `Entry::ce`, applied to the packet by whoever transmits it),
//! and may also mark every ECN-capable packet that waited longer than a
//! shallow threshold (`ce_threshold`, as Linux's fq_codel: with
//! `ect1_only`, only ECT(1) packets, the L4S way).

use crate::time::Instant;
use std::collections::VecDeque;
use std::time::Duration;

/// A packet's ECN field (RFC 3168) as it arrived.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Ecn {
    #[default]
    NotEct,
    Ect1,
    Ect0,
    Ce,
}

impl Ecn {
    /// From the two ECN bits of the IP header's traffic class.
    pub fn from_bits(b: u8) -> Ecn {
        match b & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }
    /// Whether a router may mark it instead of dropping it.
    pub fn capable(self) -> bool {
        self != Ecn::NotEct
    }
}

/// What the link knows of a packet besides its size: the flow it belongs
/// to (a hash of its addresses, ports and protocol; 0 when it has none)
/// and its ECN field.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    pub flow: u32,
    pub ecn: Ecn,
}

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
    pub meta: Meta,
    /// Marked Congestion Experienced by the queue.
    pub ce: bool,
}

impl<T> Entry<T> {
    pub fn new(data: T, bytes: u32, packets: u32, enqueued: Instant, meta: Meta) -> Entry<T> {
        Entry {
            data,
            bytes,
            packets,
            enqueued,
            meta,
            ce: false,
        }
    }
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
    /// Arrival time of the packet at the head, if any (several heads: the earliest).
    fn head_enqueued(&self) -> Option<Instant>;
    /// Packets dropped to make room for accepted ones (FQ-CoDel drops from
    /// the head of its fattest flow), moved to `out`; the caller counts
    /// them as queue drops.
    fn take_overflow(&mut self, _out: &mut Vec<Entry<T>>) {}
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

/// How CoDel signals congestion to ECN-capable packets.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EcnMarking {
    /// Mark instead of dropping (RFC 8289 section 5).
    pub mark: bool,
    /// Also mark every capable packet whose sojourn exceeds this (a shallow
    /// threshold, Linux fq_codel's `ce_threshold`).
    pub ce_threshold: Option<Duration>,
    /// The threshold applies to ECT(1) packets only (L4S's identifier).
    pub ect1_only: bool,
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
    ecn: EcnMarking,
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
            ecn: EcnMarking::default(),
        }
    }

    /// Mark ECN-capable packets as `ecn` says.
    pub fn with_ecn(mut self, ecn: EcnMarking) -> CoDel<T> {
        self.ecn = ecn;
        self
    }

    /// Whether CoDel's signal for this packet is a mark (else a drop).
    fn marks(&self, e: &Entry<T>) -> bool {
        self.ecn.mark && e.meta.ecn.capable()
    }

    /// The shallow threshold's mark, on the packet about to leave.
    fn threshold_mark(&self, now: Instant, e: &mut Entry<T>) {
        if let Some(th) = self.ecn.ce_threshold {
            let selected = if self.ecn.ect1_only {
                e.meta.ecn == Ecn::Ect1
            } else {
                e.meta.ecn.capable()
            };
            if selected && now - e.enqueued > th {
                e.ce = true;
            }
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
                    let e = p.take().expect("packet present while dropping");
                    self.count += 1;
                    if self.marks(&e) {
                        // Marked and sent: the signal of this drop time.
                        let mut e = e;
                        e.ce = true;
                        p = Some(e);
                        self.drop_next = self.control_law(self.drop_next, self.count);
                        break;
                    }
                    dropped.push(e);
                    (p, ok) = self.do_dequeue(now);
                    if p.is_none() || !ok {
                        self.dropping = false;
                    } else {
                        self.drop_next = self.control_law(self.drop_next, self.count);
                    }
                }
            }
        } else if ok {
            let e = p.take().expect("packet present");
            if self.marks(&e) {
                let mut e = e;
                e.ce = true;
                p = Some(e);
            } else {
                dropped.push(e);
                (p, _) = self.do_dequeue(now);
            }
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
        if let Some(e) = p.as_mut() {
            self.threshold_mark(now, e);
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

/// FQ-CoDel (RFC 8290): a CoDel queue per flow (packets hashed by their
/// 5-tuple into `flows` queues), served by deficit round robin with a
/// `quantum` of bytes, new flows before old ones; over the shared limit, the
/// head of the flow with the most bytes is dropped. Linux's fq_codel
/// defaults: 1024 flows, a quantum of 1514 bytes. One difference from
/// Linux: each flow's CoDel leaves its last MTU of backlog alone by that
/// flow's own backlog (RFC 8289's check per queue), where Linux's fq_codel
/// passes the whole qdisc's backlog.
pub struct FqCoDel<T> {
    flows: Vec<FlowQueue<T>>,
    new_flows: VecDeque<usize>,
    old_flows: VecDeque<usize>,
    quantum: i64,
    limit: Limit,
    packets: usize,
    bytes: u64,
    overflow: Vec<Entry<T>>,
}

struct FlowQueue<T> {
    q: CoDel<T>,
    deficit: i64,
    listed: bool,
}

impl<T> FqCoDel<T> {
    pub fn new(
        limit: Limit,
        flows: usize,
        quantum: u32,
        target: Duration,
        interval: Duration,
        ecn: EcnMarking,
    ) -> FqCoDel<T> {
        let flows = (0..flows.max(1))
            .map(|_| FlowQueue {
                q: CoDel::new(Limit::Unlimited, target, interval).with_ecn(ecn),
                deficit: 0,
                listed: false,
            })
            .collect();
        FqCoDel {
            flows,
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            quantum: quantum.max(1) as i64,
            limit,
            packets: 0,
            bytes: 0,
            overflow: Vec::new(),
        }
    }

    fn over(&self) -> bool {
        match self.limit {
            Limit::Unlimited => false,
            Limit::Packets(n) => self.packets > n as usize,
            Limit::Bytes(b) => self.bytes > b,
        }
    }

    fn pop_front(&mut self, from_new: bool) {
        if from_new {
            self.new_flows.pop_front();
        } else {
            self.old_flows.pop_front();
        }
    }

    /// Drop the head of the flow holding the most bytes; false if every flow is empty.
    fn drop_from_fattest(&mut self) -> bool {
        let fattest = self
            .new_flows
            .iter()
            .chain(self.old_flows.iter())
            .copied()
            .filter(|&i| !self.flows[i].q.inner.q.is_empty())
            .max_by_key(|&i| (self.flows[i].q.inner.bytes, std::cmp::Reverse(i)));
        match fattest.and_then(|i| self.flows[i].q.inner.pop()) {
            Some(e) => {
                self.packets -= 1;
                self.bytes -= e.bytes as u64;
                self.overflow.push(e);
                true
            }
            None => false,
        }
    }
}

impl<T: Send> Queue<T> for FqCoDel<T> {
    fn enqueue(&mut self, now: Instant, e: Entry<T>) -> Result<(), Entry<T>> {
        let i = e.meta.flow as usize % self.flows.len();
        let bytes = e.bytes as u64;
        let f = &mut self.flows[i];
        f.q.enqueue(now, e)?;
        if !f.listed {
            f.listed = true;
            f.deficit = self.quantum;
            self.new_flows.push_back(i);
        }
        self.packets += 1;
        self.bytes += bytes;
        while self.over() && self.drop_from_fattest() {}
        Ok(())
    }

    fn dequeue(&mut self, now: Instant, dropped: &mut Vec<Entry<T>>) -> Option<Entry<T>> {
        loop {
            let (from_new, i) = match (self.new_flows.front(), self.old_flows.front()) {
                (Some(&i), _) => (true, i),
                (None, Some(&i)) => (false, i),
                (None, None) => return None,
            };
            if self.flows[i].deficit <= 0 {
                // Its turn is used up: a new quantum, at the end of the old flows.
                self.flows[i].deficit += self.quantum;
                self.pop_front(from_new);
                self.old_flows.push_back(i);
                continue;
            }
            let before = dropped.len();
            let p = self.flows[i].q.dequeue(now, dropped);
            for d in &dropped[before..] {
                self.packets -= 1;
                self.bytes -= d.bytes as u64;
            }
            match p {
                Some(e) => {
                    self.flows[i].deficit -= e.bytes as i64;
                    self.packets -= 1;
                    self.bytes -= e.bytes as u64;
                    return Some(e);
                }
                None => {
                    // Empty: a new flow goes to the old ones (so that it cannot
                    // come back as new at once while others wait); an old one
                    // leaves the schedule.
                    self.pop_front(from_new);
                    if from_new && !self.old_flows.is_empty() {
                        self.old_flows.push_back(i);
                    } else {
                        self.flows[i].listed = false;
                    }
                }
            }
        }
    }
    fn len_packets(&self) -> usize {
        self.packets
    }
    fn len_bytes(&self) -> u64 {
        self.bytes
    }
    fn head_enqueued(&self) -> Option<Instant> {
        self.new_flows
            .iter()
            .chain(self.old_flows.iter())
            .filter_map(|&i| self.flows[i].q.head_enqueued())
            .min()
    }
    fn take_overflow(&mut self, out: &mut Vec<Entry<T>>) {
        out.append(&mut self.overflow);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u32, bytes: u32, at: Instant) -> Entry<u32> {
        Entry::new(id, bytes, 1, at, Meta::default())
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

    fn flow_entry(flow: u32, id: u32, bytes: u32, at: Instant, ecn: Ecn) -> Entry<u32> {
        Entry::new(id, bytes, 1, at, Meta { flow, ecn })
    }

    fn fq(limit: Limit) -> FqCoDel<u32> {
        FqCoDel::new(
            limit,
            1024,
            1514,
            Duration::from_millis(5),
            Duration::from_millis(100),
            EcnMarking::default(),
        )
    }

    #[test]
    fn fq_codel_serves_flows_in_turn_and_new_flows_first() {
        let mut q = fq(Limit::Unlimited);
        let t = Instant::ZERO;
        // A bulk flow's backlog of 10 full packets, then one packet of a new (sparse) flow.
        for i in 0..10 {
            q.enqueue(t, flow_entry(1, i, 1500, t, Ecn::NotEct))
                .unwrap();
        }
        let mut d = vec![];
        // A new flow's first quantum (1514 bytes) lets two packets go: its deficit is above 0
        // after the first.
        assert_eq!(q.dequeue(t, &mut d).unwrap().data, 0);
        assert_eq!(q.dequeue(t, &mut d).unwrap().data, 1);
        q.enqueue(t, flow_entry(2, 100, 80, t, Ecn::NotEct))
            .unwrap();
        // The sparse flow is new: it goes next, before the bulk flow's third packet.
        assert_eq!(q.dequeue(t, &mut d).unwrap().data, 100);
        // Two bulk flows share by bytes: alternate quanta of 1514 bytes (one 1500-byte packet each).
        for i in 0..10 {
            q.enqueue(t, flow_entry(3, 200 + i, 1500, t, Ecn::NotEct))
                .unwrap();
        }
        let order: Vec<u32> = (0..12)
            .map(|_| q.dequeue(t, &mut d).unwrap().data)
            .collect();
        let a = order.iter().filter(|&&x| x < 100).count();
        let b = order.iter().filter(|&&x| x >= 200).count();
        assert!(a + b == 12 && a.abs_diff(b) <= 2, "{order:?}");
        assert!(d.is_empty());
        assert_eq!(q.len_packets(), 8 + 10 - 12);
    }

    #[test]
    fn fq_codel_drops_from_the_fattest_flow_over_its_limit() {
        let mut q = fq(Limit::Packets(10));
        let t = Instant::ZERO;
        for i in 0..9 {
            q.enqueue(t, flow_entry(1, i, 1500, t, Ecn::NotEct))
                .unwrap();
        }
        // A second flow's packets fit by pushing the fattest flow's head out, never their own.
        for i in 0..3 {
            q.enqueue(t, flow_entry(2, 100 + i, 100, t, Ecn::NotEct))
                .unwrap();
        }
        let mut over = vec![];
        q.take_overflow(&mut over);
        assert_eq!(over.iter().map(|e| e.data).collect::<Vec<_>>(), vec![0, 1]);
        assert_eq!((q.len_packets(), q.len_bytes()), (10, 7 * 1500 + 300));
    }

    #[test]
    fn codel_marks_ecn_capable_packets_instead_of_dropping() {
        let ecn = EcnMarking {
            mark: true,
            ..EcnMarking::default()
        };
        for (kind, expect_drops) in [(Ecn::Ect0, false), (Ecn::NotEct, true)] {
            let mut q = CoDel::new(
                Limit::Unlimited,
                Duration::from_millis(5),
                Duration::from_millis(100),
            )
            .with_ecn(ecn);
            let (mut d, mut marked, mut out) = (vec![], 0, 0);
            for ms in 0..2000u64 {
                let t = Instant::from_millis(ms);
                for k in 0..2 {
                    q.enqueue(t, flow_entry(0, (ms * 2 + k) as u32, 1500, t, kind))
                        .unwrap();
                }
                if let Some(e) = q.dequeue(t, &mut d) {
                    out += 1;
                    marked += e.ce as u32;
                }
            }
            assert_eq!(out, 2000);
            if expect_drops {
                assert!(
                    d.len() > 10 && marked == 0,
                    "{} drops, {marked} marks",
                    d.len()
                );
            } else {
                assert!(
                    d.is_empty() && marked > 10,
                    "{} drops, {marked} marks",
                    d.len()
                );
            }
        }
    }

    #[test]
    fn a_shallow_threshold_marks_ect1_only_when_asked() {
        let ecn = EcnMarking {
            mark: false,
            ce_threshold: Some(Duration::from_millis(1)),
            ect1_only: true,
        };
        let mut q = CoDel::new(
            Limit::Unlimited,
            Duration::from_millis(5),
            Duration::from_millis(100),
        )
        .with_ecn(ecn);
        let t0 = Instant::ZERO;
        let mut d = vec![];
        for (id, ecn) in [(1, Ecn::Ect1), (2, Ecn::Ect0), (3, Ecn::Ect1)] {
            q.enqueue(t0, flow_entry(0, id, 1500, t0, ecn)).unwrap();
        }
        // 0.5 ms of sojourn: under the threshold; then 2 ms: over it.
        let first = q.dequeue(t0 + Duration::from_micros(500), &mut d).unwrap();
        let second = q.dequeue(t0 + Duration::from_millis(2), &mut d).unwrap();
        let third = q.dequeue(t0 + Duration::from_millis(2), &mut d).unwrap();
        assert_eq!((first.ce, second.ce, third.ce), (false, false, true));
    }

    #[test]
    fn fq_codel_keeps_a_sparse_flows_delay_low_beside_a_standing_bulk_queue() {
        // In simulated time: a bulk flow offers two 1500-byte packets per ms to a link that sends one
        // per ms; a sparse flow one 100-byte packet every 50 ms. The sparse packets leave within a
        // packet time or two of arriving; the bulk flow's own queue stands far above that.
        let mut q = fq(Limit::Packets(1000));
        let (mut d, mut sparse, mut bulk) = (vec![], vec![], vec![]);
        let mut id = 0;
        for ms in 0..2000u64 {
            let t = Instant::from_millis(ms);
            for _ in 0..2 {
                q.enqueue(t, flow_entry(1, id, 1500, t, Ecn::NotEct))
                    .unwrap();
                id += 1;
            }
            if ms % 50 == 0 {
                q.enqueue(t, flow_entry(2, 1_000_000 + id, 100, t, Ecn::NotEct))
                    .unwrap();
            }
            if let Some(e) = q.dequeue(t, &mut d) {
                let waited = (t - e.enqueued).as_secs_f64() * 1e3;
                if e.meta.flow == 2 {
                    sparse.push(waited)
                } else {
                    bulk.push(waited)
                }
            }
        }
        let worst_sparse = sparse.iter().cloned().fold(0.0, f64::max);
        let worst_bulk = bulk.iter().cloned().fold(0.0, f64::max);
        assert!(sparse.len() >= 35, "{}", sparse.len());
        assert!(worst_sparse <= 2.0, "sparse waited {worst_sparse} ms");
        assert!(worst_bulk >= 20.0, "bulk waited at most {worst_bulk} ms");
        assert!(!d.is_empty(), "CoDel never dropped from the bulk flow");
    }
}
