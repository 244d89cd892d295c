//! The return carrier (DVB-RCS2) with bandwidth on demand (DAMA).
//!
//! Time is cut into superframes (`T`, 26.5 ms by default) of timeslots of
//! `slot_bytes` each; the carrier holds `floor(rate * T / 8 / slot_bytes)`
//! slots per superframe, its rate taken at the superframe's start. Three
//! pieces, one concern each:
//!
//! - [`RequestAgent`] (the terminal): once per synchronisation period, in
//!   superframe `k` with `k mod P == i mod P` (`P` = the period in
//!   superframes, terminal `i`: each terminal in its own frame of the
//!   period), it sends a capacity request from its queue:
//!   - RBDC (rate): `arrivals * 8 / period + max(0, backlog * 8 - in_flight)
//!     / rtt_estimate`, times the over-estimation factor, less the CRA,
//!     clipped to `0 ..= rbdc_max_bps`; `arrivals` are the bytes queued since
//!     its last request, `backlog` the bytes waiting now, `in_flight` the
//!     volume its RBDC requests of the last `rtt_estimate` will bring (each
//!     one period's worth), as OpenSAND's legacy agent does;
//!   - VBDC (volume): the backlog not yet requested (less the RBDC volume
//!     in flight), clipped to `vbdc_max_bytes`.
//!
//!   Bytes are counted encapsulated as whole packets.
//! - The request travels to the control centre and the grant back: it is in
//!   force from superframe `k + max(msl, ceil(rtt / T))`, `rtt` being the
//!   round trip of both directions' base delays when it was sent, `msl` the
//!   minimum scheduling latency in superframes.
//! - [`Ncc`] (the control centre) allocates every superframe, in order: CRA;
//!   RBDC by fair share (each terminal's rate scaled by the capacity left
//!   over the rates asked, when they exceed it), the fractional slot carried
//!   as credit to the next superframe; VBDC (whole slots; by share when the
//!   volume asked exceeds what is left); free capacity, shared evenly among
//!   the terminals that accept it, each up to its `fca_max_bps`. An RBDC rate
//!   holds until the terminal's next request replaces it, or for
//!   `rbdc_timeout` after it came into force.
//!
//! [`ReturnCarrier`] puts them on the clock: a terminal's slots of a
//! superframe are spread evenly over it (slot `j` of `n` starts at `T * j /
//! n`), and a slot is a frame of [`crate::framed`]: it carries the packets
//! queued by its start. Slots a terminal cannot use are lost to it.

use crate::delay::RoundTrip;
use crate::framed::{Backlog, Carrier, Frame};
use crate::schedule::Schedule;
use crate::series::RateSeries;
use crate::stats::{GrantedBytes, ReturnTerminal, TerminalDetail};
use crate::time::Instant;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// The carrier's timing and the request algorithm's parameters.
#[derive(Clone, Debug, PartialEq)]
pub struct DamaParams {
    /// Superframe duration.
    pub superframe: Duration,
    /// Synchronisation (request) period, in superframes (>= 1).
    pub sync_frames: u64,
    /// Minimum scheduling latency, in superframes.
    pub msl_frames: u64,
    /// Horizon of the RBDC backlog term and of the requests in flight.
    pub rtt_estimate: Duration,
    /// Factor on the RBDC request (>= 1).
    pub overestimation: f64,
    /// How long an RBDC rate holds without a new request, in superframes.
    pub rbdc_timeout_frames: u64,
    /// Bytes one timeslot carries.
    pub slot_bytes: u32,
}

impl DamaParams {
    fn sf_ns(&self) -> u64 {
        (self.superframe.as_nanos() as u64).max(1)
    }
    fn sf_s(&self) -> f64 {
        self.superframe.as_secs_f64()
    }
    /// Slots per superframe of a rate.
    pub fn slots(&self, bps: f64) -> f64 {
        bps * self.sf_s() / 8.0 / self.slot_bytes as f64
    }
    /// Superframes from a request to its grant, for a round trip `rtt`.
    pub fn latency_frames(&self, rtt: Duration) -> u64 {
        let sf = self.sf_ns();
        self.msl_frames
            .max((rtt.as_nanos() as u64).div_ceil(sf))
            .max(1)
    }
}

/// What one terminal may be given.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TerminalAllocation {
    /// Constant rate, always allocated.
    pub cra_bps: f64,
    /// Largest RBDC rate; 0 disables RBDC.
    pub rbdc_max_bps: f64,
    /// Largest VBDC request; 0 disables VBDC.
    pub vbdc_max_bytes: u64,
    /// Largest share of free capacity; 0: none.
    pub fca_max_bps: f64,
}

/// A capacity request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Request {
    pub rbdc_bps: f64,
    pub vbdc_bytes: u64,
}

impl Request {
    pub fn is_empty(&self) -> bool {
        self.rbdc_bps == 0.0 && self.vbdc_bytes == 0
    }
}

/// The terminal's side: what it asks for.
#[derive(Clone, Debug)]
pub struct RequestAgent {
    alloc: TerminalAllocation,
    /// Bytes queued since the last request.
    arrivals: u64,
    /// RBDC requests sent: (superframe, bit/s).
    history: VecDeque<(u64, f64)>,
    /// VBDC bytes requested and not yet granted.
    vbdc_pending: u64,
}

impl RequestAgent {
    pub fn new(alloc: TerminalAllocation) -> RequestAgent {
        RequestAgent {
            alloc,
            arrivals: 0,
            history: VecDeque::new(),
            vbdc_pending: 0,
        }
    }

    pub fn on_arrival(&mut self, bytes: u32) {
        self.arrivals += bytes as u64;
    }

    /// The request sent in superframe `sf` with `backlog` bytes waiting.
    pub fn request(&mut self, sf: u64, backlog: u64, p: &DamaParams) -> Request {
        let period_s = p.sync_frames as f64 * p.sf_s();
        let horizon_s = p.rtt_estimate.as_secs_f64().max(1e-9);
        let window = (p.rtt_estimate.as_nanos() as u64).div_ceil(p.sf_ns());
        while self.history.front().is_some_and(|h| h.0 + window <= sf) {
            self.history.pop_front();
        }
        let in_flight_bits = self.history.iter().map(|h| h.1).sum::<f64>() * period_s;
        let mut req = Request::default();
        if self.alloc.rbdc_max_bps > 0.0 {
            let need = self.arrivals as f64 * 8.0 / period_s
                + (backlog as f64 * 8.0 - in_flight_bits).max(0.0) / horizon_s;
            req.rbdc_bps =
                (need * p.overestimation - self.alloc.cra_bps).clamp(0.0, self.alloc.rbdc_max_bps);
            self.history.push_back((sf, req.rbdc_bps));
        }
        if self.alloc.vbdc_max_bytes > 0 {
            let covered = if self.alloc.rbdc_max_bps > 0.0 {
                (in_flight_bits / 8.0) as u64
            } else {
                0
            };
            req.vbdc_bytes = backlog
                .saturating_sub(self.vbdc_pending + covered)
                .min(self.alloc.vbdc_max_bytes);
            self.vbdc_pending += req.vbdc_bytes;
        }
        self.arrivals = 0;
        req
    }

    /// VBDC capacity granted (the terminal learns it with the burst time plan).
    pub fn on_vbdc_grant(&mut self, bytes: u64) {
        self.vbdc_pending = self.vbdc_pending.saturating_sub(bytes);
    }

    fn quiet(&self) -> bool {
        self.arrivals == 0 && self.vbdc_pending == 0
    }
}

/// Timeslots granted to a terminal in one superframe, by class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grant {
    pub cra: u32,
    pub rbdc: u32,
    pub vbdc: u32,
    pub free: u32,
}

impl Grant {
    pub fn total(&self) -> u32 {
        self.cra + self.rbdc + self.vbdc + self.free
    }
}

#[derive(Clone, Debug)]
struct NccTerminal {
    cra_slots: f64,
    fca_slots: u32,
    rbdc_bps: f64,
    /// The RBDC rate holds in superframes before this one.
    rbdc_until: u64,
    vbdc_bytes: u64,
    cra_credit: f64,
    rbdc_credit: f64,
}

/// The control centre: per-superframe allocation.
#[derive(Clone, Debug)]
pub struct Ncc {
    terms: Vec<NccTerminal>,
    /// Where ties and remainders start (rotates every superframe).
    rr: usize,
}

impl Ncc {
    pub fn new(terms: &[TerminalAllocation], p: &DamaParams) -> Ncc {
        Ncc {
            terms: terms
                .iter()
                .map(|a| NccTerminal {
                    cra_slots: p.slots(a.cra_bps),
                    fca_slots: p.slots(a.fca_max_bps).floor() as u32,
                    rbdc_bps: 0.0,
                    rbdc_until: 0,
                    vbdc_bytes: 0,
                    cra_credit: 0.0,
                    rbdc_credit: 0.0,
                })
                .collect(),
            rr: 0,
        }
    }

    /// A request of `terminal` comes into force in superframe `sf`.
    pub fn apply(&mut self, terminal: usize, req: Request, sf: u64, p: &DamaParams) {
        let t = &mut self.terms[terminal];
        t.rbdc_bps = req.rbdc_bps;
        t.rbdc_until = sf + p.rbdc_timeout_frames;
        if req.rbdc_bps == 0.0 {
            t.rbdc_credit = 0.0;
        }
        t.vbdc_bytes += req.vbdc_bytes;
    }

    /// Allocate the `total` slots of superframe `sf` into `out` (one per terminal).
    pub fn allocate(&mut self, sf: u64, total: u32, p: &DamaParams, out: &mut [Grant]) {
        let n = self.terms.len();
        let rr = self.rr;
        let order = move || (0..n).map(move |k| (rr + k) % n);
        self.rr = (self.rr + 1) % n.max(1);
        out.iter_mut().for_each(|g| *g = Grant::default());
        let mut left = total;
        // CRA, with its fractional slot carried.
        for i in order() {
            let t = &mut self.terms[i];
            let x = t.cra_slots + t.cra_credit;
            let want = x.floor();
            t.cra_credit = x - want;
            out[i].cra = (want as u32).min(left);
            left -= out[i].cra;
        }
        // RBDC by fair share, the fraction carried as credit.
        let mut demand = 0.0;
        for t in self.terms.iter_mut() {
            if sf >= t.rbdc_until && t.rbdc_bps > 0.0 {
                t.rbdc_bps = 0.0;
                t.rbdc_credit = 0.0;
            }
            demand += p.slots(t.rbdc_bps);
        }
        let share = if demand <= left as f64 {
            1.0
        } else {
            left as f64 / demand
        };
        for i in order() {
            let t = &mut self.terms[i];
            if t.rbdc_bps == 0.0 {
                continue;
            }
            let x = p.slots(t.rbdc_bps) * share + t.rbdc_credit;
            let want = x.floor();
            t.rbdc_credit = x - want;
            out[i].rbdc = (want as u32).min(left);
            left -= out[i].rbdc;
        }
        // VBDC in whole slots, by share if short.
        let slot = p.slot_bytes as u64;
        let need = |t: &NccTerminal| t.vbdc_bytes.div_ceil(slot);
        let total_need: u64 = self.terms.iter().map(need).sum();
        if total_need > 0 {
            let l = left as u64;
            for (g, t) in out.iter_mut().zip(&self.terms) {
                g.vbdc = if total_need <= l {
                    need(t)
                } else {
                    need(t) * l / total_need
                } as u32;
            }
            // The slots the shares' fractions left, one each in turn.
            let mut rest = l.min(total_need) - out.iter().map(|g| g.vbdc as u64).sum::<u64>();
            for i in order().chain(order()) {
                if rest == 0 {
                    break;
                }
                if (out[i].vbdc as u64) < need(&self.terms[i]) {
                    out[i].vbdc += 1;
                    rest -= 1;
                }
            }
            for (g, t) in out.iter().zip(self.terms.iter_mut()) {
                left -= g.vbdc;
                t.vbdc_bytes = t.vbdc_bytes.saturating_sub(g.vbdc as u64 * slot);
            }
        }
        // Free capacity, evenly, each up to its cap (water filling).
        loop {
            let open = order()
                .filter(|&i| out[i].free < self.terms[i].fca_slots)
                .count() as u32;
            if open == 0 || left == 0 {
                break;
            }
            let each = (left / open).max(1);
            for i in order() {
                let cap = self.terms[i].fca_slots;
                if left == 0 {
                    break;
                }
                if out[i].free >= cap {
                    continue;
                }
                let give = each.min(cap - out[i].free).min(left);
                out[i].free += give;
                left -= give;
            }
        }
    }

    fn quiet(&self) -> bool {
        self.terms
            .iter()
            .all(|t| t.rbdc_bps == 0.0 && t.vbdc_bytes == 0)
    }
}

/// A request on its way to the control centre.
#[derive(Clone, Copy, Debug)]
struct Pending {
    effective: u64,
    seq: u64,
    terminal: usize,
    req: Request,
}
impl PartialEq for Pending {
    fn eq(&self, o: &Self) -> bool {
        (self.effective, self.seq) == (o.effective, o.seq)
    }
}
impl Eq for Pending {}
impl PartialOrd for Pending {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Pending {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.effective, self.seq).cmp(&(o.effective, o.seq))
    }
}

#[derive(Clone, Debug, Default)]
struct ReturnStats {
    requests: u64,
    rbdc_request_max_bps: f64,
    vbdc_requested_bytes: u64,
    superframes_granted: u64,
    granted: GrantedBytes,
    used_bytes: u64,
    granted_bps: RateSeries,
}

/// The return carrier: superframes, requests, allocation and timeslots.
pub struct ReturnCarrier {
    p: DamaParams,
    capacity_bps: Schedule,
    round_trip: RoundTrip,
    agents: Vec<RequestAgent>,
    ncc: Ncc,
    pending: BinaryHeap<Reverse<Pending>>,
    seq: u64,
    /// The superframe whose allocation is in force.
    sf: Option<u64>,
    grants: Vec<Grant>,
    /// Slots of the superframe used or passed, per terminal.
    used: Vec<u32>,
    stats: Vec<ReturnStats>,
}

impl ReturnCarrier {
    /// `capacity_bps`: the carrier's total rate over time.
    pub fn new(
        p: DamaParams,
        capacity_bps: Schedule,
        round_trip: RoundTrip,
        terminals: &[TerminalAllocation],
    ) -> ReturnCarrier {
        let n = terminals.len();
        ReturnCarrier {
            ncc: Ncc::new(terminals, &p),
            agents: terminals.iter().map(|&a| RequestAgent::new(a)).collect(),
            p,
            capacity_bps,
            round_trip,
            pending: BinaryHeap::new(),
            seq: 0,
            sf: None,
            grants: vec![Grant::default(); n],
            used: vec![0; n],
            stats: vec![ReturnStats::default(); n],
        }
    }

    fn slot_start(&self, sf: u64, j: u32, n: u32) -> Instant {
        let t = self.p.sf_ns();
        let n = n.max(1) as u64;
        let off = match (j as u64).checked_mul(t) {
            Some(x) => x / n,
            None => (j as u128 * t as u128 / n as u128) as u64,
        };
        Instant::from_nanos(sf * t + off)
    }

    /// Add to `series` the rate granted to terminal `i` by the superframe in
    /// force (starting at `from`) up to `to`: its grant for one superframe,
    /// then what a quiet carrier gives every superframe (CRA and free capacity).
    fn account(&self, series: &mut RateSeries, i: usize, from: Instant, to: Instant) {
        let g = self.grants[i];
        let bps = |slots: u32| slots as f64 * self.p.slot_bytes as f64 * 8.0 / self.p.sf_s();
        let end = (from + self.p.superframe).min(to);
        series.add(from, end, bps(g.total()));
        if to > end {
            series.add(end, to, bps(g.cra + g.free));
        }
    }

    /// Superframe `k` begins: requests sent, requests in force, allocation.
    fn enter(&mut self, k: u64, backlog: &dyn Backlog) {
        let t = Instant::from_nanos(k * self.p.sf_ns());
        if let Some(prev) = self.sf {
            // Superframes skipped while idle had the same grants (CRA, free).
            let skipped = k - prev - 1;
            let t_prev = Instant::from_nanos(prev * self.p.sf_ns());
            for i in 0..self.grants.len() {
                let mut series = std::mem::take(&mut self.stats[i].granted_bps);
                self.account(&mut series, i, t_prev, t);
                let g = self.grants[i];
                let s = &mut self.stats[i];
                s.granted_bps = series;
                let slot = self.p.slot_bytes as u64;
                s.granted.cra += g.cra as u64 * slot * skipped;
                s.granted.free += g.free as u64 * slot * skipped;
                s.superframes_granted += (g.total() > 0) as u64 * skipped;
            }
        }
        self.sf = Some(k);
        let period = self.p.sync_frames.max(1);
        for i in 0..self.agents.len() {
            if k % period != i as u64 % period {
                continue;
            }
            let req = self.agents[i].request(k, backlog.bytes(i), &self.p);
            let s = &mut self.stats[i];
            if !req.is_empty() {
                s.requests += 1;
                s.rbdc_request_max_bps = s.rbdc_request_max_bps.max(req.rbdc_bps);
                s.vbdc_requested_bytes += req.vbdc_bytes;
            }
            self.seq += 1;
            self.pending.push(Reverse(Pending {
                effective: k + self.p.latency_frames(self.round_trip.at(t)),
                seq: self.seq,
                terminal: i,
                req,
            }));
        }
        while self.pending.peek().is_some_and(|r| r.0.effective <= k) {
            let Reverse(r) = self.pending.pop().expect("peeked");
            self.ncc.apply(r.terminal, r.req, k, &self.p);
        }
        let total = self.p.slots(self.capacity_bps.value_at(t)).floor() as u32;
        self.ncc.allocate(k, total, &self.p, &mut self.grants);
        let slot = self.p.slot_bytes as u64;
        for (i, g) in self.grants.iter().enumerate() {
            self.used[i] = 0;
            let s = &mut self.stats[i];
            s.granted.cra += g.cra as u64 * slot;
            s.granted.rbdc += g.rbdc as u64 * slot;
            s.granted.vbdc += g.vbdc as u64 * slot;
            s.granted.free += g.free as u64 * slot;
            s.superframes_granted += (g.total() > 0) as u64;
            self.agents[i].on_vbdc_grant(g.vbdc as u64 * slot);
        }
    }

    /// Nothing waits, nothing is asked or granted beyond CRA and free capacity.
    fn quiet(&self, backlog: &dyn Backlog) -> bool {
        self.pending.is_empty()
            && self.ncc.quiet()
            && self.agents.iter().all(|a| a.quiet())
            && (0..self.agents.len()).all(|i| backlog.ready_at(i).is_none())
    }

    /// The grants in force (tests).
    pub fn grants(&self) -> &[Grant] {
        &self.grants
    }
}

impl Carrier for ReturnCarrier {
    fn kind(&self) -> &'static str {
        "dama"
    }

    fn terminals(&self) -> usize {
        self.agents.len()
    }

    fn on_arrival(&mut self, _now: Instant, terminal: usize, bytes: u32) {
        self.agents[terminal].on_arrival(bytes);
    }

    fn next_frame(
        &mut self,
        now: Instant,
        backlog: &dyn Backlog,
    ) -> Result<Frame, Option<Instant>> {
        let sf_ns = self.p.sf_ns();
        if self.sf.is_none() {
            self.enter(now.as_nanos() / sf_ns, backlog);
        }
        loop {
            let k = self.sf.expect("entered");
            let t0 = k * sf_ns;
            let mut best: Option<(Instant, usize, u32)> = None;
            for i in 0..self.agents.len() {
                let n = self.grants[i].total();
                if self.used[i] >= n {
                    continue;
                }
                let Some(ready) = backlog.ready_at(i) else {
                    continue;
                };
                let d = ready.as_nanos().saturating_sub(t0);
                let first = match d.checked_mul(n as u64) {
                    Some(x) => x.div_ceil(sf_ns),
                    None => (d as u128 * n as u128).div_ceil(sf_ns as u128) as u64,
                };
                let mut j = first.max(self.used[i] as u64).min(n as u64) as u32;
                while j < n && self.slot_start(k, j, n) < ready {
                    j += 1;
                }
                if j >= n {
                    continue;
                }
                let s = self.slot_start(k, j, n);
                if best.map_or(true, |b| s < b.0) {
                    best = Some((s, i, j));
                }
            }
            if let Some((start, i, j)) = best {
                if start > now {
                    return Err(Some(start));
                }
                self.used[i] = j + 1;
                let n = self.grants[i].total();
                return Ok(Frame {
                    terminal: i,
                    start,
                    end: self.slot_start(k, j + 1, n),
                    payload: self.p.slot_bytes,
                    header: 0,
                    lost: false,
                });
            }
            let next = Instant::from_nanos((k + 1) * sf_ns);
            let quiet = self.quiet(backlog);
            if next > now {
                return Err(if quiet { None } else { Some(next) });
            }
            // Idle superframes change nothing: go straight to the current one.
            let to = if quiet {
                (k + 1).max(now.as_nanos() / sf_ns)
            } else {
                k + 1
            };
            self.enter(to, backlog);
        }
    }

    fn on_frame_filled(&mut self, frame: &Frame, used: u32) {
        self.stats[frame.terminal].used_bytes += used as u64;
    }

    fn ends_in_order(&self) -> bool {
        // One terminal's slots never overlap; several terminals' may.
        self.agents.len() == 1
    }

    fn report(&self, until: Instant) -> (Vec<TerminalDetail>, u64) {
        let mut interval = crate::series::INTERVAL_MS * 1_000_000;
        let details = self
            .stats
            .iter()
            .enumerate()
            .map(|(i, s)| {
                // The superframe in force counts up to `until`.
                let mut series = s.granted_bps.clone();
                if let Some(k) = self.sf {
                    let t = Instant::from_nanos(k * self.p.sf_ns());
                    self.account(&mut series, i, t, until.max(t));
                }
                interval = interval.max(series.interval_ns());
                TerminalDetail::Return(ReturnTerminal {
                    requests: s.requests,
                    rbdc_request_max_bps: s.rbdc_request_max_bps,
                    vbdc_requested_bytes: s.vbdc_requested_bytes,
                    superframes_granted: s.superframes_granted,
                    granted_bytes: s.granted,
                    used_bytes: s.used_bytes,
                    granted_bps_series: series.points_s(until),
                })
            })
            .collect();
        (details, interval)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delay::Delay;
    use crate::encap::{Rle, RleTrailer};
    use crate::framed::Framed;
    use crate::link::Direction;
    use crate::queue::{DropTail, Limit, Queue};
    use crate::rng::Rng;
    use crate::stats::TerminalDetail;
    use crate::testutil::run;

    /// The OpenSAND timing: 26.5 ms superframes, 1 s sync period (38
    /// superframes), 23 superframes of scheduling latency.
    fn opensand() -> DamaParams {
        DamaParams {
            superframe: Duration::from_micros(26_500),
            sync_frames: 38,
            msl_frames: 23,
            rtt_estimate: Duration::from_micros(609_500),
            overestimation: 1.0,
            rbdc_timeout_frames: 39,
            slot_bytes: 188,
        }
    }

    fn direction(p: DamaParams, carrier_bps: f64, terms: &[TerminalAllocation]) -> Direction<u32> {
        let carrier = ReturnCarrier::new(
            p,
            Schedule::constant(carrier_bps),
            RoundTrip::constant(Duration::from_millis(500)),
            terms,
        );
        let queues: Vec<Box<dyn Queue<u32>>> = terms
            .iter()
            .map(|_| Box::new(DropTail::new(Limit::Unlimited)) as Box<dyn Queue<u32>>)
            .collect();
        let stage = Framed::new(
            queues,
            Box::new(carrier),
            Box::new(Rle::new(2, RleTrailer::Seq)),
        );
        Direction::with_stage(
            Box::new(stage),
            vec![],
            Delay::constant(Duration::from_millis(250)),
            false,
            Rng::new(1),
        )
    }

    fn ms(x: f64) -> Instant {
        Instant::from_secs_f64(x / 1e3)
    }

    /// Terminal `i`'s report with the model brought up to `until`.
    fn detail(d: &mut Direction<u32>, i: usize, until: Instant) -> ReturnTerminal {
        match &d.report_at(until).access.unwrap().terminals[i].detail {
            TerminalDetail::Return(r) => r.clone(),
            _ => panic!("not a return terminal"),
        }
    }

    #[test]
    fn latency_is_the_msl_or_the_round_trip() {
        let p = opensand();
        assert_eq!(p.latency_frames(Duration::from_millis(500)), 23);
        // A round trip longer than the MSL: ceil(1000 / 26.5) = 38 superframes.
        assert_eq!(p.latency_frames(Duration::from_millis(1000)), 38);
        // 2 Mbit/s: 35.2 slots of 188 bytes per superframe.
        assert!((p.slots(2e6) - 35.239).abs() < 1e-3);
    }

    #[test]
    fn cra_forwards_a_packet_after_idle_at_once() {
        let cra = TerminalAllocation {
            cra_bps: 256e3,
            ..Default::default()
        };
        let mut d = direction(opensand(), 2e6, &[cra]);
        let out = run(&mut d, &[(ms(1000.0), 0, 1, 100)]);
        // Superframe 37 starts at 980.5 ms; CRA gives it 4 slots (4.51 per
        // superframe, the fraction carried): 980.5, 987.125, 993.75, 1000.375;
        // the last one ends with the superframe, at 1007 ms; then 250 ms.
        assert_eq!(out, vec![(ms(1257.0), 1)]);
    }

    #[test]
    fn vbdc_packet_after_idle_waits_for_its_sync_slot_and_the_grant() {
        let vbdc = TerminalAllocation {
            vbdc_max_bytes: 100_000,
            ..Default::default()
        };
        let mut d = direction(opensand(), 2e6, &[vbdc]);
        let out = run(&mut d, &[(ms(1000.0), 0, 1, 100)]);
        // The terminal's sync slot is superframe 38 (1007 ms): it asks for
        // 104 bytes (RLE: 2 + 2 + 100); the grant is in force 23 superframes
        // later, superframe 61 (1616.5 ms), one slot, 1616.5 to 1643 ms.
        assert_eq!(out, vec![(ms(1643.0 + 250.0), 1)]);
        let r = detail(&mut d, 0, ms(2000.0));
        assert_eq!((r.requests, r.vbdc_requested_bytes), (1, 104));
        assert_eq!((r.granted_bytes.vbdc, r.used_bytes), (188, 104));
        // The granted rate, mean per 100 ms: one slot of 188 bytes in [1.6, 1.7).
        let s = &r.granted_bps_series;
        assert_eq!(s[0], (0.9, 0.0));
        assert_eq!(s[1], (1.6, 188.0 * 8.0 / 0.1));
        assert_eq!(s[2], (1.7, 0.0));
    }

    #[test]
    fn rbdc_ramps_to_the_flow_and_back() {
        let rbdc = TerminalAllocation {
            rbdc_max_bps: 2e6,
            ..Default::default()
        };
        let mut d = direction(opensand(), 2e6, &[rbdc]);
        // 500 kbit/s of 1000-byte packets (one every 16 ms) from 0.5 s to 10.5 s.
        let arr: Vec<_> = (0..625u32)
            .map(|i| (ms(500.0 + 16.0 * i as f64), 0, i, 1000))
            .collect();
        let out = run(&mut d, &arr);
        assert_eq!(out.len(), 625);
        let r = detail(&mut d, 0, ms(14_000.0));
        let s = &r.granted_bps_series;
        let at = |t: f64| {
            s.iter()
                .take_while(|p| p.0 <= t)
                .last()
                .map_or(0.0, |p| p.1)
        };
        // Nothing until the first request's grant: sync slot at 1.007 s, in
        // force 609.5 ms later (the series holds means per 100 ms).
        assert_eq!(at(1.59), 0.0);
        assert!(at(1.6) > 0.0);
        // In steady state the grant follows the flow: 500 kbit/s of packets,
        // 1004 bytes each with RLE (one slot in 188 is padding on average).
        let mean = |a: f64, b: f64| {
            let n = 100;
            (0..n)
                .map(|k| at(a + (b - a) * k as f64 / n as f64))
                .sum::<f64>()
                / n as f64
        };
        let steady = mean(4.0, 10.0);
        assert!((steady - 0.5e6).abs() < 0.1e6, "steady grant {steady}");
        // The ramp: the first grant asks for the backlog too.
        assert!(at(1.7) > steady, "first grant {} vs {steady}", at(1.7));
        assert!(
            mean(2.7, 3.5) > 2.0 * steady,
            "backlog drained at {}",
            mean(2.7, 3.5)
        );
        // And back to nothing once the flow stops and the rate times out.
        assert_eq!(at(13.0), 0.0, "{:?}", &s[s.len().saturating_sub(12)..]);
        assert_eq!(
            r.granted_bytes.cra + r.granted_bytes.vbdc + r.granted_bytes.free,
            0
        );
        assert!(r.used_bytes < r.granted_bytes.rbdc);
        // Packets waited for the first grant, then far less.
        let late: Vec<f64> = out.iter().skip(300).map(|o| o.0.as_secs_f64()).collect();
        let sent: Vec<f64> = arr.iter().skip(300).map(|a| a.0.as_secs_f64()).collect();
        let worst = late
            .iter()
            .zip(&sent)
            .map(|(a, b)| a - b)
            .fold(0.0, f64::max);
        assert!(worst < 0.25 + 0.2, "steady one-way delay up to {worst}");
    }

    fn params_100ms() -> DamaParams {
        // 100 ms superframes of 100-byte slots: 8 kbit/s per slot.
        DamaParams {
            superframe: Duration::from_millis(100),
            sync_frames: 1,
            msl_frames: 1,
            rtt_estimate: Duration::from_millis(100),
            overestimation: 1.0,
            rbdc_timeout_frames: 2,
            slot_bytes: 100,
        }
    }

    #[test]
    fn allocation_order_cra_rbdc_fair_share_vbdc_free() {
        let p = params_100ms();
        let t = |cra: f64, fca: f64| TerminalAllocation {
            cra_bps: cra,
            rbdc_max_bps: 1e9,
            vbdc_max_bytes: 1 << 30,
            fca_max_bps: fca,
        };
        let mut ncc = Ncc::new(&[t(80e3, 80e3), t(80e3, 0.0), t(80e3, 800e3)], &p);
        let mut g = vec![Grant::default(); 3];
        let req = |rbdc_bps: f64, vbdc_bytes: u64| Request {
            rbdc_bps,
            vbdc_bytes,
        };
        ncc.apply(0, req(320e3, 0), 0, &p); // 40 slots
        ncc.apply(1, req(480e3, 0), 0, &p); // 60 slots
        ncc.apply(2, req(0.0, 1000), 0, &p); // 10 slots
                                             // 100 slots: CRA 3 x 10, then RBDC asks 100 for the 70 left: 0.7 each.
        ncc.allocate(0, 100, &p, &mut g);
        let cra_rbdc: Vec<(u32, u32, u32, u32)> =
            g.iter().map(|x| (x.cra, x.rbdc, x.vbdc, x.free)).collect();
        assert_eq!(
            cra_rbdc,
            vec![(10, 28, 0, 0), (10, 42, 0, 0), (10, 0, 0, 0)]
        );
        // 200 slots: everyone's RBDC, then VBDC (10 slots), then the 60 left as
        // free capacity: 30 each offered, terminal 0 capped at 10, the rest to 2.
        ncc.allocate(1, 200, &p, &mut g);
        let all: Vec<(u32, u32, u32, u32)> =
            g.iter().map(|x| (x.cra, x.rbdc, x.vbdc, x.free)).collect();
        assert_eq!(all, vec![(10, 40, 0, 10), (10, 60, 0, 0), (10, 0, 10, 50)]);
        // The RBDC rates time out 2 superframes after they came into force.
        ncc.allocate(2, 200, &p, &mut g);
        assert_eq!((g[0].rbdc, g[1].rbdc), (0, 0));
    }

    #[test]
    fn rbdc_fraction_is_carried_as_credit() {
        let p = params_100ms();
        let a = TerminalAllocation {
            rbdc_max_bps: 1e9,
            ..Default::default()
        };
        let mut ncc = Ncc::new(&[a], &p);
        let mut g = vec![Grant::default(); 1];
        let mut got = Vec::new();
        for sf in 0..6 {
            // 20 kbit/s = 2.5 slots per superframe, refreshed every superframe.
            ncc.apply(
                0,
                Request {
                    rbdc_bps: 20e3,
                    vbdc_bytes: 0,
                },
                sf,
                &p,
            );
            ncc.allocate(sf, 100, &p, &mut g);
            got.push(g[0].rbdc);
        }
        assert_eq!(got, vec![2, 3, 2, 3, 2, 3]);
    }

    #[test]
    fn terminals_share_a_short_carrier_fairly() {
        // Two saturated RBDC terminals on a 1 Mbit/s carrier: half each.
        let rbdc = TerminalAllocation {
            rbdc_max_bps: 2e6,
            ..Default::default()
        };
        let mut d = direction(opensand(), 1e6, &[rbdc, rbdc]);
        let mut arr = Vec::new();
        for i in 0..1500u32 {
            let t = ms(8.0 * i as f64);
            arr.push((t, 0, 2 * i, 1000));
            arr.push((t, 1, 2 * i + 1, 1000));
        }
        run(&mut d, &arr);
        let a = d.report().access.unwrap();
        let used: Vec<u64> = (0..2)
            .map(|i| match &a.terminals[i].detail {
                TerminalDetail::Return(r) => r.used_bytes,
                _ => unreachable!(),
            })
            .collect();
        let share = used[0] as f64 / (used[0] + used[1]) as f64;
        assert!((share - 0.5).abs() < 0.02, "share {share}");
    }

    #[test]
    fn request_agent_rbdc_and_vbdc() {
        let p = opensand();
        let mut a = RequestAgent::new(TerminalAllocation {
            cra_bps: 100e3,
            rbdc_max_bps: 1e6,
            ..Default::default()
        });
        // 125,875 bytes in one period (1.007 s): 1 Mbit/s; backlog 0.
        a.on_arrival(125_875);
        let r = a.request(38, 0, &p);
        assert!((r.rbdc_bps - 0.9e6).abs() < 1.0, "{}", r.rbdc_bps);
        // Clipped to the maximum.
        a.on_arrival(1_000_000);
        assert_eq!(a.request(76, 0, &p).rbdc_bps, 1e6);
        let mut v = RequestAgent::new(TerminalAllocation {
            vbdc_max_bytes: 5000,
            ..Default::default()
        });
        assert_eq!(v.request(0, 3000, &p).vbdc_bytes, 3000);
        // Already asked for: only the new backlog.
        assert_eq!(v.request(38, 4000, &p).vbdc_bytes, 1000);
        v.on_vbdc_grant(4000);
        assert_eq!(v.request(76, 20_000, &p).vbdc_bytes, 5000);
    }
}
