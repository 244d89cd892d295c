//! The stage of a direction between a packet's arrival and the channel:
//! where it waits and when its transmission ends.
//!
//! - [`Serial`]: one queue in front of one [`Capacity`], one packet on the
//!   wire at a time (the plain link; every terminal shares the queue).
//! - [`crate::framed::Framed`]: a queue per terminal, sharing a carrier cut
//!   into frames ([`crate::framed::Carrier`]: DVB-S2 BBFRAMEs forward, DVB-RCS2
//!   timeslots on return), with encapsulation overhead per packet.
//!
//! A stage is sans-IO like the rest of the model: the caller passes the time,
//! and packets leave the stage in the order of the time their transmission
//! ended.

use crate::capacity::Capacity;
use crate::queue::{Entry, Queue};
use crate::stats::{AccessReport, Counters};
use crate::time::Instant;

/// A packet whose transmission ended.
#[derive(Debug)]
pub struct Sent<T> {
    /// When its last bit (or the frame carrying its last fragment) left.
    pub at: Instant,
    pub entry: Entry<T>,
    /// A frame that carried part of it was lost on the carrier (a fade).
    pub lost: bool,
}

/// Queueing and transmission of one direction.
pub trait Stage<T>: Send {
    /// A packet for `terminal` arrives at `now` (the caller has taken every
    /// packet sent by `now` with [`Stage::pop_sent`] first). A packet the
    /// queue refuses is handed back (a tail drop).
    fn enqueue(
        &mut self,
        now: Instant,
        terminal: usize,
        e: Entry<T>,
        c: &mut Counters,
    ) -> Result<(), Entry<T>>;
    /// The next packet whose transmission ended at or before `now`, oldest
    /// first. Drops on the way (AQM, outage) are counted in `c`.
    fn pop_sent(&mut self, now: Instant, c: &mut Counters) -> Option<Sent<T>>;
    /// When the stage next has something to do: a transmission ends, a frame
    /// starts, a superframe's allocation is due. None: nothing pending.
    fn next_event(&self) -> Option<Instant>;
    /// Packets and bytes waiting (not yet on the wire).
    fn queued(&self) -> (u64, u64);
    /// True if every wire packet must be handed in on its own.
    fn per_packet(&self) -> bool;
    /// Bring time-driven state (control loops, time series) up to `now`
    /// without sending anything new; used before a final report.
    fn settle(&mut self, _now: Instant) {}
    /// What a framed carrier counted; None for a plain link.
    fn access_report(&self) -> Option<AccessReport> {
        None
    }
}

/// One queue in front of one capacity: the plain link.
pub struct Serial<T> {
    queue: Box<dyn Queue<T>>,
    capacity: Box<dyn Capacity>,
    on_wire: Option<(Instant, Entry<T>)>,
    link_free_at: Instant,
    scratch: Vec<Entry<T>>,
    limited: bool,
}

impl<T> Serial<T> {
    /// `limited`: false only for an unlimited capacity.
    pub fn new(queue: Box<dyn Queue<T>>, capacity: Box<dyn Capacity>, limited: bool) -> Serial<T> {
        Serial {
            queue,
            capacity,
            on_wire: None,
            link_free_at: Instant::ZERO,
            scratch: Vec::new(),
            limited,
        }
    }

    fn count_aqm_drops(&mut self, c: &mut Counters) {
        for e in self.scratch.drain(..) {
            c.dropped.aqm.add(e.packets, e.bytes);
        }
    }
}

impl<T: Send> Stage<T> for Serial<T> {
    fn enqueue(
        &mut self,
        now: Instant,
        _terminal: usize,
        e: Entry<T>,
        c: &mut Counters,
    ) -> Result<(), Entry<T>> {
        let r = self.queue.enqueue(now, e);
        // What a flow-queueing discipline dropped to make room: queue drops too.
        self.queue.take_overflow(&mut self.scratch);
        for d in self.scratch.drain(..) {
            c.dropped.queue.add(d.packets, d.bytes);
        }
        r
    }

    fn pop_sent(&mut self, now: Instant, c: &mut Counters) -> Option<Sent<T>> {
        loop {
            if let Some((fin, _)) = self.on_wire {
                if fin > now {
                    return None;
                }
                let (fin, e) = self.on_wire.take().expect("on_wire checked");
                self.link_free_at = fin;
                return Some(Sent {
                    at: fin,
                    entry: e,
                    lost: false,
                });
            }
            // The link is idle: start the next packet at its logical start time.
            let head = self.queue.head_enqueued()?;
            let at = head.max(self.link_free_at).min(now);
            let Some(e) = self.queue.dequeue(at, &mut self.scratch) else {
                self.count_aqm_drops(c);
                return None;
            };
            self.count_aqm_drops(c);
            let start = e.enqueued.max(self.link_free_at);
            c.queue_delay.record(start - e.enqueued);
            match self.capacity.finish(start, e.bytes) {
                Some(fin) => self.on_wire = Some((fin, e)),
                None => c.dropped.outage.add(e.packets, e.bytes),
            }
        }
    }

    fn next_event(&self) -> Option<Instant> {
        self.on_wire.as_ref().map(|w| w.0)
    }

    fn queued(&self) -> (u64, u64) {
        (self.queue.len_packets() as u64, self.queue.len_bytes())
    }

    fn per_packet(&self) -> bool {
        self.limited
    }
}
