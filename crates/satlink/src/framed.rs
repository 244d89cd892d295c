//! A carrier shared by several terminals and cut into frames: each frame
//! carries bytes of one terminal's packets, encapsulated.
//!
//! ```text
//! terminal 0 queue --\
//! terminal 1 queue ----> [Carrier: which terminal's frame, when, how big, lost?]
//! terminal N queue --/        filled by [Encapsulation: headers, fragments]
//! ```
//!
//! [`Framed`] is the [`Stage`] that composes them. The [`Carrier`] decides
//! the frames: [`crate::forward::ForwardCarrier`] (DVB-S2 BBFRAMEs, one
//! terminal at a time, each with its MODCOD) and
//! [`crate::dama::ReturnCarrier`] (DVB-RCS2 timeslots granted by bandwidth
//! on demand). A frame is filled when it starts, with the packets of its
//! terminal queued by then; a packet that does not fit is fragmented and
//! continues in the terminal's next frame. A packet leaves the stage when the
//! frame carrying its last piece ends, and is lost if any frame that carried
//! a piece of it was lost.

use crate::delay::DelayLine;
use crate::encap::Encapsulation;
use crate::queue::{Entry, Queue};
use crate::stage::{Sent, Stage};
use crate::stats::{
    AccessReport, Counters, EncapsulationReport, Tally, TerminalDetail, TerminalReport,
};
use crate::time::Instant;

/// One frame of the carrier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    pub terminal: usize,
    /// On the air from `start` to `end`; filled at `start`.
    pub start: Instant,
    pub end: Instant,
    /// Bytes it carries for packets (a BBFRAME's data field, a timeslot).
    pub payload: u32,
    /// Bytes of frame header besides the payload (a BBHEADER), for counters.
    pub header: u32,
    /// The channel destroys it.
    pub lost: bool,
}

/// What a carrier may know of the terminals' queues.
pub trait Backlog {
    /// When the terminal's next bytes were ready (its oldest waiting packet
    /// or its packet in fragments); None if it has nothing to send.
    fn ready_at(&self, terminal: usize) -> Option<Instant>;
    /// Bytes it has waiting, encapsulated as whole packets.
    fn bytes(&self, terminal: usize) -> u64;
}

/// Decides the frames of a shared carrier.
pub trait Carrier: Send {
    /// "acm", "ccm", "dama".
    fn kind(&self) -> &'static str;
    fn terminals(&self) -> usize;
    /// `bytes` (encapsulated as a whole packet) were queued by `terminal` at `now`.
    fn on_arrival(&mut self, _now: Instant, _terminal: usize, _bytes: u32) {}
    /// The next frame starting at or before `now` (in order of start), or
    /// when to ask again: `Err(Some(t))` if something is due at `t`,
    /// `Err(None)` if nothing happens until a packet arrives.
    fn next_frame(&mut self, now: Instant, backlog: &dyn Backlog)
        -> Result<Frame, Option<Instant>>;
    /// `used` of the frame's payload bytes carried data.
    fn on_frame_filled(&mut self, _frame: &Frame, _used: u32) {}
    /// True if frames end in the order they start (no two overlap).
    fn ends_in_order(&self) -> bool {
        false
    }
    /// Bring time-driven state up to `now` (reports).
    fn settle(&mut self, _now: Instant) {}
    /// Per terminal, what the carrier's control loop did up to `until`; and
    /// the largest interval of its time series, ns.
    fn report(&self, until: Instant) -> (Vec<TerminalDetail>, u64);
}

/// A packet cut into fragments, part of it sent.
struct Partial<T> {
    e: Entry<T>,
    /// What its pieces carried so far (see [`Encapsulation::piece`]).
    sent: u32,
    /// Frame bytes its pieces took.
    frame_bytes: u32,
    pieces: u32,
    lost: bool,
}

struct Terminal<T> {
    queue: Box<dyn Queue<T>>,
    partial: Option<Partial<T>>,
    /// Bytes waiting in the queue, encapsulated as whole packets.
    queued_wire: u64,
    frames: u64,
    frames_lost: u64,
    carried: Tally,
}

struct View<'a, T> {
    terms: &'a [Terminal<T>],
    encap: &'a dyn Encapsulation,
}

impl<T> Backlog for View<'_, T> {
    fn ready_at(&self, terminal: usize) -> Option<Instant> {
        let t = &self.terms[terminal];
        match &t.partial {
            Some(p) => Some(p.e.enqueued),
            None => t.queue.head_enqueued(),
        }
    }
    fn bytes(&self, terminal: usize) -> u64 {
        let t = &self.terms[terminal];
        let partial = t.partial.as_ref().map_or(0, |p| {
            self.encap.whole(p.e.bytes).saturating_sub(p.frame_bytes) as u64
        });
        t.queued_wire + partial
    }
}

/// Per-terminal queues sharing a framed carrier.
pub struct Framed<T> {
    terms: Vec<Terminal<T>>,
    carrier: Box<dyn Carrier>,
    encap: Box<dyn Encapsulation>,
    /// Packets whose last piece is on the air, by the end of its frame.
    sent: DelayLine<(Entry<T>, bool)>,
    wake: Option<Instant>,
    /// A packet arrived since the carrier was last asked.
    dirty: bool,
    scratch: Vec<Entry<T>>,
    frames: u64,
    frames_lost: u64,
    packets_lost: u64,
    encap_report: EncapsulationReport,
    last_now: Instant,
}

impl<T: Send> Framed<T> {
    /// `queues`: one per terminal of the carrier.
    pub fn new(
        queues: Vec<Box<dyn Queue<T>>>,
        carrier: Box<dyn Carrier>,
        encap: Box<dyn Encapsulation>,
    ) -> Framed<T> {
        assert_eq!(queues.len(), carrier.terminals(), "one queue per terminal");
        let kind = encap.kind();
        let in_order = carrier.ends_in_order();
        Framed {
            terms: queues
                .into_iter()
                .map(|queue| Terminal {
                    queue,
                    partial: None,
                    queued_wire: 0,
                    frames: 0,
                    frames_lost: 0,
                    carried: Tally::default(),
                })
                .collect(),
            carrier,
            encap,
            sent: DelayLine::new(!in_order),
            wake: None,
            dirty: false,
            scratch: Vec::new(),
            frames: 0,
            frames_lost: 0,
            packets_lost: 0,
            encap_report: EncapsulationReport {
                kind,
                ..Default::default()
            },
            last_now: Instant::ZERO,
        }
    }

    /// Build every frame that starts by `now`.
    fn run(&mut self, now: Instant, c: &mut Counters) {
        self.last_now = self.last_now.max(now);
        // Nothing arrived and the carrier has nothing to do before `wake`.
        if !self.dirty && self.wake.map_or(true, |w| now < w) {
            return;
        }
        self.dirty = false;
        loop {
            let view = View {
                terms: &self.terms,
                encap: self.encap.as_ref(),
            };
            match self.carrier.next_frame(now, &view) {
                Ok(f) => self.fill(f, c),
                Err(wake) => {
                    self.wake = wake;
                    return;
                }
            }
        }
    }

    /// Fill `f` with its terminal's packets queued by its start.
    fn fill(&mut self, f: Frame, c: &mut Counters) {
        let encap = self.encap.as_ref();
        let t = &mut self.terms[f.terminal];
        let mut room = f.payload;
        loop {
            if t.partial.is_none() {
                match t.queue.head_enqueued() {
                    Some(h) if h <= f.start => {}
                    _ => break,
                }
                let e = t.queue.dequeue(f.start, &mut self.scratch);
                for d in self.scratch.drain(..) {
                    t.queued_wire -= encap.whole(d.bytes) as u64;
                    c.dropped.aqm.add(d.packets, d.bytes);
                }
                let Some(e) = e else { break };
                t.queued_wire -= encap.whole(e.bytes) as u64;
                c.queue_delay.record(f.start - e.enqueued);
                t.partial = Some(Partial {
                    e,
                    sent: 0,
                    frame_bytes: 0,
                    pieces: 0,
                    lost: false,
                });
            }
            let p = t.partial.as_mut().expect("partial set above");
            let Some(piece) = encap.piece(p.e.bytes, p.sent, room) else {
                break;
            };
            room -= piece.frame_bytes;
            p.sent += piece.carried;
            p.frame_bytes += piece.frame_bytes;
            p.pieces += 1;
            p.lost |= f.lost;
            if piece.done {
                let p = t.partial.take().expect("partial present");
                let r = &mut self.encap_report;
                r.packets += 1;
                r.fragmented += (p.pieces > 1) as u64;
                r.ip_bytes += p.e.bytes as u64;
                r.overhead_bytes += p.frame_bytes.saturating_sub(p.e.bytes) as u64;
                t.carried.add(p.e.packets, p.e.bytes);
                self.packets_lost += p.lost as u64;
                self.sent.push(f.end, (p.e, p.lost));
            }
        }
        t.frames += 1;
        t.frames_lost += f.lost as u64;
        self.frames += 1;
        self.frames_lost += f.lost as u64;
        self.encap_report.frame_header_bytes += f.header as u64;
        self.encap_report.padding_bytes += room as u64;
        self.carrier.on_frame_filled(&f, f.payload - room);
    }
}

impl<T: Send> Stage<T> for Framed<T> {
    fn enqueue(
        &mut self,
        now: Instant,
        terminal: usize,
        e: Entry<T>,
        c: &mut Counters,
    ) -> Result<(), Entry<T>> {
        self.run(now, c);
        let i = terminal.min(self.terms.len() - 1);
        let wire = self.encap.whole(e.bytes);
        self.terms[i].queue.enqueue(now, e)?;
        self.dirty = true;
        self.terms[i].queued_wire += wire as u64;
        self.carrier.on_arrival(now, i, wire);
        Ok(())
    }

    fn pop_sent(&mut self, now: Instant, c: &mut Counters) -> Option<Sent<T>> {
        self.run(now, c);
        let (at, (entry, lost)) = self.sent.pop_due_timed(now)?;
        Some(Sent { at, entry, lost })
    }

    fn next_event(&self) -> Option<Instant> {
        match (self.wake, self.sent.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn queued(&self) -> (u64, u64) {
        self.terms.iter().fold((0, 0), |(p, b), t| {
            (p + t.queue.len_packets() as u64, b + t.queue.len_bytes())
        })
    }

    fn per_packet(&self) -> bool {
        true
    }

    fn settle(&mut self, now: Instant) {
        self.last_now = self.last_now.max(now);
        self.carrier.settle(now);
    }

    fn access_report(&self) -> Option<AccessReport> {
        let (details, interval) = self.carrier.report(self.last_now);
        Some(AccessReport {
            kind: self.carrier.kind(),
            frames: self.frames,
            frames_lost: self.frames_lost,
            packets_lost: self.packets_lost,
            encapsulation: self.encap_report.clone(),
            series_interval_ms: interval as f64 / 1e6,
            terminals: self
                .terms
                .iter()
                .zip(details)
                .map(|(t, detail)| TerminalReport {
                    frames: t.frames,
                    frames_lost: t.frames_lost,
                    carried: t.carried,
                    detail,
                })
                .collect(),
        })
    }
}
