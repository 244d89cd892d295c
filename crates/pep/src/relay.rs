//! One intercepted connection, sans-IO: which leg is open, half-closed or
//! closed, who closed first, and what to do next.
//!
//! A connection has two legs: [`Leg::In`], accepted from the client (its
//! local address is the original destination), and [`Leg::Out`], connected
//! to that destination from the client's address. Bytes flow [`Dir::Up`]
//! (client to server: read from `In`, written to `Out`) and [`Dir::Down`].
//! Each direction has a buffer of fixed capacity (a pipe or memory, see
//! [`crate::buffer`]); the relay only counts what is in it.
//!
//! The event loop tells the relay what happened ([`Relay::handle`],
//! [`Relay::handle_timeout`], [`Relay::abort`]) and asks what to do next
//! ([`Relay::poll_action`]) until the answer is `None`; then it waits for
//! readiness or for [`Relay::poll_timeout`]. Readiness is edge-triggered: the
//! relay remembers which legs may be read or written and forgets it when an
//! attempt would block.
//!
//! The contract: every [`Action::Read`] and [`Action::Write`] is answered by
//! exactly one event about it (`Read`, `ReadBlocked`, `Wrote`,
//! `WriteBlocked`, `Reset` or `Failed`) before the next `poll_action`;
//! [`Action::ShutdownWrite`] is answered only if it fails; after
//! [`Action::Close`] the relay is finished and says nothing more.
//!
//! The rules:
//! - A FIN read on one leg (`Read(dir, 0)`) is carried to the other leg with
//!   `shutdown(SHUT_WR)` once the direction's buffer is empty; the other
//!   direction keeps flowing. Both directions shut down: close both legs
//!   gracefully.
//! - A reset or an error on either leg resets the other one (`SO_LINGER` 0)
//!   at once; bytes still buffered for it are dropped, as a reset drops them.
//! - No bytes moved for the idle timeout, or [`Relay::abort`]: both legs
//!   reset.
//! - Bytes from the client are read before the outgoing leg is connected
//!   (up to the buffer's capacity); nothing is written to the outgoing leg
//!   before its handshake is done, except with TCP Fast Open, whose deferred
//!   connect sends the SYN with the first write. If the client sends nothing
//!   within [`FASTOPEN_WAIT`] of the accept (a server-first protocol), the
//!   SYN is sent without data ([`Action::SendSyn`]).

use crate::time::Instant;
use std::time::Duration;

/// How long a deferred (Fast Open) connect waits for the client's first
/// bytes before its SYN is sent without them.
pub const FASTOPEN_WAIT: Duration = Duration::from_millis(10);

/// One of a connection's two TCP connections.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Leg {
    /// Accepted from the client.
    In,
    /// Connected to the original destination.
    Out,
}

impl Leg {
    pub const BOTH: [Leg; 2] = [Leg::In, Leg::Out];

    pub fn other(self) -> Leg {
        match self {
            Leg::In => Leg::Out,
            Leg::Out => Leg::In,
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
    /// The endpoint at the far end of this leg.
    pub fn peer(self) -> By {
        match self {
            Leg::In => By::Client,
            Leg::Out => By::Server,
        }
    }
}

/// A direction of bytes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    /// Client to server: read from [`Leg::In`], written to [`Leg::Out`].
    Up,
    /// Server to client.
    Down,
}

impl Dir {
    pub const BOTH: [Dir; 2] = [Dir::Up, Dir::Down];

    pub fn src(self) -> Leg {
        match self {
            Dir::Up => Leg::In,
            Dir::Down => Leg::Out,
        }
    }
    pub fn dst(self) -> Leg {
        self.src().other()
    }
    /// The direction read from `leg`.
    pub fn from_src(leg: Leg) -> Dir {
        match leg {
            Leg::In => Dir::Up,
            Leg::Out => Dir::Down,
        }
    }
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Who did something first.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum By {
    Client,
    Server,
    /// The PEP itself (idle timeout, exit).
    Pep,
}

/// How a connection started to close, or why it ended.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum How {
    /// A FIN (for the end: both directions closed with FINs).
    Fin,
    /// A reset from the peer (also a refused connect).
    Rst,
    /// Another socket error (connect timeout, host unreachable, ...).
    Error,
    /// No bytes moved for the idle timeout.
    Timeout,
    /// The PEP was told to exit.
    Exit,
}

/// Who closed first and how.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct First {
    pub by: By,
    pub how: How,
    /// The error number, for [`How::Error`].
    pub errno: Option<i32>,
}

/// How a leg ended, as the PEP saw it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum End {
    /// Its peer sent a FIN (and the PEP closed it gracefully or reset it later).
    Fin,
    /// Its peer reset it.
    Rst,
    /// It failed with this error number.
    Error(i32),
    /// The PEP reset it (the other leg failed, idle timeout, exit).
    Aborted,
}

/// How to close the legs' sockets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Closing {
    /// Plain `close()`: both FINs are through, nothing is left unread.
    Graceful,
    /// `SO_LINGER` 0 then `close()`: the peers get a reset.
    Reset,
}

/// Where the outgoing leg's handshake is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum OutState {
    /// `connect()` in progress.
    Connecting,
    /// TCP Fast Open's deferred connect: the SYN leaves with the first
    /// write, or without data after [`FASTOPEN_WAIT`].
    Deferred,
    /// Handshake done.
    Connected,
}

/// What happened, as the event loop tells it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// The outgoing leg's handshake is done.
    Connected,
    /// `connect()` returned at once without a handshake (TCP Fast Open).
    ConnectDeferred,
    /// The leg may have bytes, a FIN or an error to read (edge).
    Readable(Leg),
    /// The leg may accept bytes (edge).
    Writable(Leg),
    /// Bytes moved from the direction's source into its buffer; 0 is the
    /// source's FIN.
    Read(Dir, usize),
    /// The read would block (the socket or the buffer was full or empty).
    ReadBlocked(Dir),
    /// Bytes moved from the buffer to the direction's destination.
    Wrote(Dir, usize),
    /// The write would block.
    WriteBlocked(Dir),
    /// The leg's peer reset it (`ECONNRESET`, `EPIPE`, `ECONNREFUSED`).
    Reset(Leg),
    /// The leg failed with this error number.
    Failed(Leg, i32),
}

/// What to do next.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Move at most `max` bytes from the direction's source into its buffer.
    Read { dir: Dir, max: usize },
    /// Move the `len` buffered bytes (or as many as fit) to the destination.
    Write { dir: Dir, len: usize },
    /// `shutdown(SHUT_WR)` the leg: carry a FIN through.
    ShutdownWrite(Leg),
    /// Send the deferred connect's SYN without data (a `send` of nothing):
    /// the client did not speak first. Answered only if it fails.
    SendSyn,
    /// Close both legs; the relay is finished.
    Close(Closing),
}

/// One direction's counters.
#[derive(Clone, Debug, Default)]
struct Flow {
    cap: usize,
    /// Bytes in the buffer.
    pending: usize,
    /// Bytes read from the source.
    read: u64,
    /// Bytes written to the destination.
    written: u64,
    /// The source's FIN was read.
    eof: bool,
    /// The FIN was carried to the destination.
    shut: bool,
    /// A read would block while the buffer held bytes: the buffer may be
    /// full (a pipe's capacity is in pages, not bytes). Retry after a write
    /// or a new readable edge.
    stalled: bool,
}

/// The relay of one connection.
#[derive(Clone, Debug)]
pub struct Relay {
    flows: [Flow; 2],
    readable: [bool; 2],
    writable: [bool; 2],
    out: OutState,
    ends: [Option<End>; 2],
    first: Option<First>,
    /// Why it ended (`Fin`: both directions closed with FINs).
    outcome: Option<How>,
    close: Option<Closing>,
    closed: bool,
    idle: Option<Duration>,
    last_activity: Instant,
    /// A deferred connect's SYN goes out without data at this time.
    syn_due: Option<Instant>,
    /// ... which has come.
    send_syn: bool,
    connected_at: Option<Instant>,
}

impl Relay {
    /// A relay whose incoming leg was just accepted at `now`, with buffers of
    /// `cap` bytes per direction (`[up, down]`) and an idle timeout.
    pub fn new(now: Instant, cap: [usize; 2], idle: Option<Duration>) -> Relay {
        let flow = |cap| Flow {
            cap,
            ..Flow::default()
        };
        Relay {
            flows: [flow(cap[0]), flow(cap[1])],
            readable: [false; 2],
            writable: [false; 2],
            out: OutState::Connecting,
            ends: [None; 2],
            first: None,
            outcome: None,
            close: None,
            closed: false,
            idle,
            last_activity: now,
            syn_due: None,
            send_syn: false,
            connected_at: None,
        }
    }

    /// Take in what happened.
    pub fn handle(&mut self, now: Instant, ev: Event) {
        if self.closed {
            return;
        }
        match ev {
            Event::Connected => {
                if self.out != OutState::Connected {
                    self.out = OutState::Connected;
                    self.connected_at = Some(now);
                    self.last_activity = now;
                }
            }
            Event::ConnectDeferred => {
                if self.out == OutState::Connecting {
                    self.out = OutState::Deferred;
                    self.syn_due = Some(now + FASTOPEN_WAIT);
                }
            }
            Event::Readable(leg) => {
                self.readable[leg.index()] = true;
                self.flows[Dir::from_src(leg).index()].stalled = false;
            }
            Event::Writable(leg) => self.writable[leg.index()] = true,
            Event::Read(dir, 0) => {
                let src = dir.src();
                self.flows[dir.index()].eof = true;
                self.ends[src.index()].get_or_insert(End::Fin);
                self.first.get_or_insert(First {
                    by: src.peer(),
                    how: How::Fin,
                    errno: None,
                });
            }
            Event::Read(dir, n) => {
                let f = &mut self.flows[dir.index()];
                debug_assert!(f.pending + n <= f.cap, "read beyond the buffer");
                f.pending += n;
                f.read += n as u64;
                self.last_activity = now;
            }
            Event::ReadBlocked(dir) => {
                let f = &mut self.flows[dir.index()];
                if f.pending == 0 {
                    self.readable[dir.src().index()] = false;
                } else {
                    f.stalled = true;
                }
            }
            Event::Wrote(dir, 0) | Event::WriteBlocked(dir) => {
                self.writable[dir.dst().index()] = false;
                self.syn_sent(dir);
            }
            Event::Wrote(dir, n) => {
                self.syn_sent(dir);
                let f = &mut self.flows[dir.index()];
                debug_assert!(n <= f.pending, "wrote more than buffered");
                f.pending -= n.min(f.pending);
                f.written += n as u64;
                f.stalled = false;
                self.last_activity = now;
            }
            Event::Reset(leg) => self.fail(leg, End::Rst, How::Rst, None),
            Event::Failed(leg, errno) => self.fail(leg, End::Error(errno), How::Error, Some(errno)),
        }
    }

    /// A write to a deferred outgoing leg sent its SYN: no more writes
    /// before the handshake is done.
    fn syn_sent(&mut self, dir: Dir) {
        if dir == Dir::Up && self.out == OutState::Deferred {
            self.out = OutState::Connecting;
            self.syn_due = None;
        }
    }

    /// A leg reset or failed: reset the other one.
    fn fail(&mut self, leg: Leg, end: End, how: How, errno: Option<i32>) {
        if self.close.is_some() {
            return;
        }
        self.ends[leg.index()] = Some(end);
        self.ends[leg.other().index()] = Some(End::Aborted);
        self.first.get_or_insert(First {
            by: leg.peer(),
            how,
            errno,
        });
        self.outcome = Some(how);
        self.close = Some(Closing::Reset);
    }

    /// The PEP ends the connection itself (`Timeout`, `Exit`): both legs reset.
    fn end_here(&mut self, how: How) {
        if self.close.is_some() || self.closed {
            return;
        }
        for e in &mut self.ends {
            if !matches!(e, Some(End::Rst | End::Error(_))) {
                *e = Some(End::Aborted);
            }
        }
        self.first.get_or_insert(First {
            by: By::Pep,
            how,
            errno: None,
        });
        self.outcome = Some(how);
        self.close = Some(Closing::Reset);
    }

    /// Time passed: send a deferred SYN that waited long enough; end the
    /// connection if it has been idle too long.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.close.is_some() || self.closed {
            return;
        }
        if matches!(self.syn_due, Some(t) if now >= t) {
            self.syn_due = None;
            self.send_syn = true;
        }
        if matches!(self.idle, Some(d) if now >= self.last_activity + d) {
            self.end_here(How::Timeout);
        }
    }

    /// End the connection now (the PEP exits): both legs reset.
    pub fn abort(&mut self) {
        self.end_here(How::Exit);
    }

    /// When [`Relay::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.close.is_some() || self.closed {
            return None;
        }
        let idle = self.idle.map(|d| self.last_activity + d);
        match (idle, self.syn_due) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn out_writable(&self) -> bool {
        self.out != OutState::Connecting
    }

    fn can_write(&self, dir: Dir) -> bool {
        let f = &self.flows[dir.index()];
        let dst = dir.dst();
        f.pending > 0 && self.writable[dst.index()] && (dst == Leg::In || self.out_writable())
    }

    fn can_read(&self, dir: Dir) -> bool {
        let f = &self.flows[dir.index()];
        let src = dir.src();
        !f.eof
            && !f.stalled
            && f.pending < f.cap
            && self.readable[src.index()]
            && (src == Leg::In || self.out == OutState::Connected)
    }

    fn can_shut(&self, dir: Dir) -> bool {
        let f = &self.flows[dir.index()];
        f.eof
            && !f.shut
            && f.pending == 0
            && (dir.dst() == Leg::In || self.out == OutState::Connected)
    }

    /// What to do next; `None`: wait for an event or the timeout.
    pub fn poll_action(&mut self) -> Option<Action> {
        if self.closed {
            return None;
        }
        if let Some(c) = self.close {
            self.closed = true;
            return Some(Action::Close(c));
        }
        if self.send_syn {
            self.send_syn = false;
            if self.out == OutState::Deferred {
                self.out = OutState::Connecting;
                return Some(Action::SendSyn);
            }
        }
        for dir in Dir::BOTH {
            if self.can_write(dir) {
                let len = self.flows[dir.index()].pending;
                return Some(Action::Write { dir, len });
            }
        }
        for dir in Dir::BOTH {
            if self.can_read(dir) {
                let f = &self.flows[dir.index()];
                return Some(Action::Read {
                    dir,
                    max: f.cap - f.pending,
                });
            }
        }
        for dir in Dir::BOTH {
            if self.can_shut(dir) {
                self.flows[dir.index()].shut = true;
                return Some(Action::ShutdownWrite(dir.dst()));
            }
        }
        if self.flows.iter().all(|f| f.shut) {
            self.outcome = Some(How::Fin);
            self.closed = true;
            return Some(Action::Close(Closing::Graceful));
        }
        None
    }

    /// Whether [`Action::Close`] was handed out.
    pub fn is_closed(&self) -> bool {
        self.closed
    }
    pub fn out_state(&self) -> OutState {
        self.out
    }
    /// When the outgoing leg's handshake was seen done.
    pub fn connected_at(&self) -> Option<Instant> {
        self.connected_at
    }
    /// Bytes written to the direction's destination.
    pub fn bytes(&self, dir: Dir) -> u64 {
        self.flows[dir.index()].written
    }
    /// Bytes read but never written (dropped by a reset or an abort).
    pub fn dropped(&self, dir: Dir) -> u64 {
        let f = &self.flows[dir.index()];
        f.read - f.written
    }
    /// Whether the direction's FIN was read (`eof`) and carried through (`shut`).
    pub fn fin(&self, dir: Dir) -> (bool, bool) {
        let f = &self.flows[dir.index()];
        (f.eof, f.shut)
    }
    pub fn end(&self, leg: Leg) -> Option<End> {
        self.ends[leg.index()]
    }
    pub fn first(&self) -> Option<First> {
        self.first
    }
    /// Why it ended (`Fin`: gracefully); `None` while open.
    pub fn outcome(&self) -> Option<How> {
        self.outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Dir::{Down, Up};
    use Leg::{In, Out};

    const CAP: usize = 1000;
    const IDLE: Duration = Duration::from_secs(10);

    fn t(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// A relay with both legs connected, readable and writable.
    fn open() -> Relay {
        let mut r = Relay::new(t(0), [CAP, CAP], Some(IDLE));
        r.handle(t(1), Event::Connected);
        for leg in Leg::BOTH {
            r.handle(t(1), Event::Writable(leg));
        }
        r
    }

    /// Drain the actions until the relay waits, answering each read with
    /// `reads[dir]` (then blocking) and each write in full.
    fn run(r: &mut Relay, now: Instant, reads: &mut [Vec<usize>; 2]) -> Vec<Action> {
        let mut done = Vec::new();
        while let Some(a) = r.poll_action() {
            done.push(a);
            match a {
                Action::Read { dir, max } => match reads[dir.index()].first().copied() {
                    Some(n) => {
                        reads[dir.index()].remove(0);
                        assert!(n <= max);
                        r.handle(now, Event::Read(dir, n));
                    }
                    None => r.handle(now, Event::ReadBlocked(dir)),
                },
                Action::Write { dir, len } => r.handle(now, Event::Wrote(dir, len)),
                Action::ShutdownWrite(_) | Action::SendSyn | Action::Close(_) => {}
            }
            assert!(done.len() < 100, "no progress: {done:?}");
        }
        done
    }

    #[test]
    fn bytes_flow_both_ways_then_fins_close_gracefully() {
        let mut r = open();
        r.handle(t(2), Event::Readable(In));
        r.handle(t(2), Event::Readable(Out));
        let mut reads = [vec![300, 200], vec![1000]];
        let acts = run(&mut r, t(2), &mut reads);
        assert_eq!(
            acts,
            vec![
                Action::Read { dir: Up, max: 1000 },
                Action::Write { dir: Up, len: 300 },
                Action::Read { dir: Up, max: 1000 },
                Action::Write { dir: Up, len: 200 },
                Action::Read { dir: Up, max: 1000 },
                Action::Read {
                    dir: Down,
                    max: 1000
                },
                Action::Write {
                    dir: Down,
                    len: 1000
                },
                Action::Read {
                    dir: Down,
                    max: 1000
                },
            ]
        );
        assert_eq!((r.bytes(Up), r.bytes(Down)), (500, 1000));
        // The client's FIN goes to the server; the server's answer still flows.
        r.handle(t(3), Event::Readable(In));
        let acts = run(&mut r, t(3), &mut [vec![0], vec![]]);
        assert_eq!(
            acts,
            vec![
                Action::Read { dir: Up, max: 1000 },
                Action::ShutdownWrite(Out)
            ]
        );
        assert_eq!(r.fin(Up), (true, true));
        r.handle(t(4), Event::Readable(Out));
        let acts = run(&mut r, t(4), &mut [vec![], vec![7, 0]]);
        assert_eq!(
            acts,
            vec![
                Action::Read {
                    dir: Down,
                    max: 1000
                },
                Action::Write { dir: Down, len: 7 },
                Action::Read {
                    dir: Down,
                    max: 1000
                },
                Action::ShutdownWrite(In),
                Action::Close(Closing::Graceful),
            ]
        );
        assert!(r.is_closed());
        assert_eq!(r.poll_action(), None);
        assert_eq!(
            r.first(),
            Some(First {
                by: By::Client,
                how: How::Fin,
                errno: None
            })
        );
        assert_eq!(r.outcome(), Some(How::Fin));
        assert_eq!((r.end(In), r.end(Out)), (Some(End::Fin), Some(End::Fin)));
        assert_eq!((r.bytes(Up), r.bytes(Down)), (500, 1007));
        assert_eq!((r.dropped(Up), r.dropped(Down)), (0, 0));
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn fin_waits_for_the_buffer_to_drain() {
        let mut r = open();
        r.handle(t(2), Event::Readable(In));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: CAP }));
        r.handle(t(2), Event::Read(Up, 400));
        // The server's side is full: the write blocks.
        assert_eq!(r.poll_action(), Some(Action::Write { dir: Up, len: 400 }));
        r.handle(t(2), Event::Wrote(Up, 100));
        assert_eq!(r.poll_action(), Some(Action::Write { dir: Up, len: 300 }));
        r.handle(t(2), Event::WriteBlocked(Up));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: 700 }));
        r.handle(t(2), Event::Read(Up, 0));
        // FIN read, 300 bytes still buffered: no shutdown yet.
        assert_eq!(r.poll_action(), None);
        r.handle(t(3), Event::Writable(Out));
        assert_eq!(r.poll_action(), Some(Action::Write { dir: Up, len: 300 }));
        r.handle(t(3), Event::Wrote(Up, 300));
        assert_eq!(r.poll_action(), Some(Action::ShutdownWrite(Out)));
        assert_eq!(r.poll_action(), None);
        assert!(!r.is_closed());
    }

    #[test]
    fn server_fin_first_is_recorded_as_server() {
        let mut r = open();
        r.handle(t(2), Event::Readable(Out));
        assert_eq!(
            run(&mut r, t(2), &mut [vec![], vec![0]]),
            vec![
                Action::Read {
                    dir: Down,
                    max: CAP
                },
                Action::ShutdownWrite(In)
            ]
        );
        assert_eq!(r.first().unwrap().by, By::Server);
        // The client keeps sending after the server's FIN (half-close).
        r.handle(t(3), Event::Readable(In));
        let acts = run(&mut r, t(3), &mut [vec![10, 0], vec![]]);
        assert_eq!(acts.last(), Some(&Action::Close(Closing::Graceful)));
        assert_eq!(r.bytes(Up), 10);
    }

    #[test]
    fn reset_on_one_leg_resets_the_other_and_drops_the_buffer() {
        let mut r = open();
        r.handle(t(2), Event::Readable(Out));
        assert_eq!(
            r.poll_action(),
            Some(Action::Read {
                dir: Down,
                max: CAP
            })
        );
        r.handle(t(2), Event::Read(Down, 500));
        assert_eq!(
            r.poll_action(),
            Some(Action::Write {
                dir: Down,
                len: 500
            })
        );
        r.handle(t(2), Event::WriteBlocked(Down));
        r.handle(t(2), Event::Readable(Out));
        assert_eq!(
            r.poll_action(),
            Some(Action::Read {
                dir: Down,
                max: 500
            })
        );
        r.handle(t(3), Event::Reset(Out));
        assert_eq!(r.poll_action(), Some(Action::Close(Closing::Reset)));
        assert_eq!(r.poll_action(), None);
        assert_eq!(
            r.first(),
            Some(First {
                by: By::Server,
                how: How::Rst,
                errno: None
            })
        );
        assert_eq!(r.outcome(), Some(How::Rst));
        assert_eq!(
            (r.end(In), r.end(Out)),
            (Some(End::Aborted), Some(End::Rst))
        );
        assert_eq!(r.dropped(Down), 500);
        // Later events change nothing.
        r.handle(t(4), Event::Failed(In, libc::EPIPE));
        assert_eq!(r.end(In), Some(End::Aborted));
    }

    #[test]
    fn reset_after_a_fin_keeps_who_closed_first() {
        let mut r = open();
        r.handle(t(2), Event::Readable(In));
        run(&mut r, t(2), &mut [vec![0], vec![]]);
        r.handle(t(3), Event::Reset(Out));
        assert_eq!(r.poll_action(), Some(Action::Close(Closing::Reset)));
        assert_eq!(
            r.first().map(|f| (f.by, f.how)),
            Some((By::Client, How::Fin))
        );
        assert_eq!(r.outcome(), Some(How::Rst));
        assert_eq!(
            (r.end(In), r.end(Out)),
            (Some(End::Aborted), Some(End::Rst))
        );
    }

    #[test]
    fn client_bytes_are_read_before_the_connect_and_written_after() {
        let mut r = Relay::new(t(0), [CAP, CAP], None);
        r.handle(t(0), Event::Writable(In));
        r.handle(t(0), Event::Readable(In));
        r.handle(t(0), Event::Readable(Out));
        r.handle(t(0), Event::Writable(Out));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: CAP }));
        r.handle(t(0), Event::Read(Up, 100));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: 900 }));
        r.handle(t(0), Event::ReadBlocked(Up));
        // Blocked with bytes buffered: not known to be empty, but nothing to
        // do until the connect is done.
        assert_eq!(r.poll_action(), None);
        r.handle(t(50), Event::Connected);
        assert_eq!(r.connected_at(), Some(t(50)));
        assert_eq!(r.poll_action(), Some(Action::Write { dir: Up, len: 100 }));
        r.handle(t(50), Event::Wrote(Up, 100));
        // The stall is over: read again, and now the server's side too.
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: CAP }));
        r.handle(t(50), Event::ReadBlocked(Up));
        assert_eq!(
            r.poll_action(),
            Some(Action::Read {
                dir: Down,
                max: CAP
            })
        );
        r.handle(t(50), Event::ReadBlocked(Down));
        assert_eq!(r.poll_action(), None);
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn fin_before_the_connect_waits_for_it() {
        let mut r = Relay::new(t(0), [CAP, CAP], None);
        r.handle(t(0), Event::Readable(In));
        assert_eq!(
            run(&mut r, t(0), &mut [vec![5, 0], vec![]]),
            vec![
                Action::Read { dir: Up, max: CAP },
                Action::Read { dir: Up, max: 995 },
            ]
        );
        r.handle(t(9), Event::Connected);
        r.handle(t(9), Event::Writable(Out));
        assert_eq!(
            run(&mut r, t(9), &mut [vec![], vec![]]),
            vec![
                Action::Write { dir: Up, len: 5 },
                Action::ShutdownWrite(Out)
            ]
        );
    }

    #[test]
    fn deferred_connect_writes_first_and_reads_after_the_handshake() {
        let mut r = Relay::new(t(0), [CAP, CAP], None);
        r.handle(t(0), Event::ConnectDeferred);
        r.handle(t(0), Event::Writable(Out));
        r.handle(t(0), Event::Readable(Out));
        r.handle(t(0), Event::Readable(In));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: CAP }));
        r.handle(t(0), Event::Read(Up, 64));
        // The write carries the SYN.
        assert_eq!(r.poll_action(), Some(Action::Write { dir: Up, len: 64 }));
        r.handle(t(0), Event::Wrote(Up, 64));
        assert_eq!(r.out_state(), OutState::Connecting);
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: CAP }));
        r.handle(t(0), Event::Read(Up, 10));
        // Nothing more is written, the server's side not read, before the
        // handshake is done.
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: 990 }));
        r.handle(t(0), Event::ReadBlocked(Up));
        assert_eq!(r.poll_action(), None);
        r.handle(t(30), Event::Connected);
        assert_eq!(r.poll_action(), Some(Action::Write { dir: Up, len: 10 }));
        r.handle(t(30), Event::Wrote(Up, 10));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: CAP }));
        r.handle(t(30), Event::ReadBlocked(Up));
        assert_eq!(
            r.poll_action(),
            Some(Action::Read {
                dir: Down,
                max: CAP
            })
        );
    }

    #[test]
    fn deferred_connect_without_client_bytes_sends_its_syn_after_the_wait() {
        let mut r = Relay::new(t(0), [CAP, CAP], Some(IDLE));
        r.handle(t(0), Event::ConnectDeferred);
        r.handle(t(0), Event::Writable(Out));
        r.handle(t(0), Event::Writable(In));
        assert_eq!(r.poll_action(), None);
        assert_eq!(r.poll_timeout(), Some(t(0) + FASTOPEN_WAIT));
        r.handle_timeout(t(0) + (FASTOPEN_WAIT - Duration::from_nanos(1)));
        assert_eq!(r.poll_action(), None);
        r.handle_timeout(t(0) + FASTOPEN_WAIT);
        assert_eq!(r.poll_action(), Some(Action::SendSyn));
        assert_eq!(r.out_state(), OutState::Connecting);
        assert_eq!(r.poll_action(), None);
        assert_eq!(r.poll_timeout(), Some(t(0) + IDLE));
        // Client bytes now wait for the handshake.
        r.handle(t(20), Event::Readable(In));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: CAP }));
        r.handle(t(20), Event::Read(Up, 5));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: 995 }));
        r.handle(t(20), Event::ReadBlocked(Up));
        assert_eq!(r.poll_action(), None);
        r.handle(t(30), Event::Connected);
        assert_eq!(r.poll_action(), Some(Action::Write { dir: Up, len: 5 }));
    }

    #[test]
    fn deferred_connect_with_client_bytes_sends_no_empty_syn() {
        let mut r = Relay::new(t(0), [CAP, CAP], None);
        r.handle(t(0), Event::ConnectDeferred);
        r.handle(t(0), Event::Writable(Out));
        r.handle(t(1), Event::Readable(In));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: CAP }));
        r.handle(t(1), Event::Read(Up, 100));
        assert_eq!(r.poll_action(), Some(Action::Write { dir: Up, len: 100 }));
        // Part of it in the SYN.
        r.handle(t(1), Event::Wrote(Up, 60));
        assert_eq!(r.poll_timeout(), None);
        r.handle_timeout(t(50));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: 960 }));
        r.handle(t(50), Event::ReadBlocked(Up));
        assert_eq!(r.poll_action(), None);
        r.handle(t(60), Event::Connected);
        assert_eq!(r.poll_action(), Some(Action::Write { dir: Up, len: 40 }));
    }

    #[test]
    fn refused_connect_resets_the_client() {
        let mut r = Relay::new(t(0), [CAP, CAP], Some(IDLE));
        r.handle(t(0), Event::Readable(In));
        r.handle(t(0), Event::Writable(In));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: CAP }));
        r.handle(t(0), Event::ReadBlocked(Up));
        r.handle(t(1), Event::Reset(Out));
        assert_eq!(r.poll_action(), Some(Action::Close(Closing::Reset)));
        assert_eq!(r.connected_at(), None);
        assert_eq!(r.first().map(|f| f.by), Some(By::Server));
    }

    #[test]
    fn connect_error_is_recorded_with_its_errno() {
        let mut r = Relay::new(t(0), [CAP, CAP], Some(IDLE));
        r.handle(t(3), Event::Failed(Out, libc::EHOSTUNREACH));
        assert_eq!(r.poll_action(), Some(Action::Close(Closing::Reset)));
        assert_eq!(
            r.first(),
            Some(First {
                by: By::Server,
                how: How::Error,
                errno: Some(libc::EHOSTUNREACH)
            })
        );
        assert_eq!(r.end(Out), Some(End::Error(libc::EHOSTUNREACH)));
        assert_eq!(r.outcome(), Some(How::Error));
    }

    #[test]
    fn idle_timeout_counts_from_the_last_byte() {
        let mut r = open();
        // Connected at 1 ms: the deadline moves there.
        assert_eq!(r.poll_timeout(), Some(t(1) + IDLE));
        r.handle(t(5), Event::Readable(In));
        run(&mut r, t(5), &mut [vec![10], vec![]]);
        assert_eq!(r.poll_timeout(), Some(t(5) + IDLE));
        // Readiness alone is no activity.
        r.handle(t(8), Event::Readable(In));
        run(&mut r, t(8), &mut [vec![], vec![]]);
        assert_eq!(r.poll_timeout(), Some(t(5) + IDLE));
        r.handle_timeout(t(5) + (IDLE - Duration::from_nanos(1)));
        assert_eq!(r.poll_action(), None);
        r.handle_timeout(t(5) + IDLE);
        assert_eq!(r.poll_action(), Some(Action::Close(Closing::Reset)));
        assert_eq!(
            r.first().map(|f| (f.by, f.how)),
            Some((By::Pep, How::Timeout))
        );
        assert_eq!(
            (r.end(In), r.end(Out)),
            (Some(End::Aborted), Some(End::Aborted))
        );
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn no_idle_timeout_without_one() {
        let r = Relay::new(t(0), [CAP, CAP], None);
        assert_eq!(r.poll_timeout(), None);
    }

    #[test]
    fn abort_resets_both_and_keeps_an_earlier_fin() {
        let mut r = open();
        r.handle(t(2), Event::Readable(Out));
        run(&mut r, t(2), &mut [vec![], vec![0]]);
        r.abort();
        assert_eq!(r.poll_action(), Some(Action::Close(Closing::Reset)));
        assert_eq!(
            r.first().map(|f| (f.by, f.how)),
            Some((By::Server, How::Fin))
        );
        assert_eq!(r.outcome(), Some(How::Exit));
        assert_eq!(
            (r.end(In), r.end(Out)),
            (Some(End::Aborted), Some(End::Aborted))
        );
    }

    #[test]
    fn a_full_buffer_stops_reading_until_a_write() {
        let mut r = open();
        r.handle(t(1), Event::WriteBlocked(Up));
        r.handle(t(2), Event::Readable(In));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: CAP }));
        r.handle(t(2), Event::Read(Up, CAP));
        // Full: no read, no write (the server's side is blocked).
        assert_eq!(r.poll_action(), None);
        r.handle(t(3), Event::Writable(Out));
        assert_eq!(r.poll_action(), Some(Action::Write { dir: Up, len: CAP }));
        r.handle(t(3), Event::Wrote(Up, 10));
        assert_eq!(r.poll_action(), Some(Action::Write { dir: Up, len: 990 }));
        r.handle(t(3), Event::WriteBlocked(Up));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: 10 }));
        // A pipe full in pages before it is full in bytes: stalled, not empty.
        r.handle(t(3), Event::ReadBlocked(Up));
        assert_eq!(r.poll_action(), None);
        // A new edge retries the read.
        r.handle(t(4), Event::Readable(In));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: 10 }));
        r.handle(t(4), Event::ReadBlocked(Up));
        assert_eq!(r.poll_action(), None);
    }

    #[test]
    fn write_of_zero_counts_as_blocked() {
        let mut r = open();
        r.handle(t(2), Event::Readable(In));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: CAP }));
        r.handle(t(2), Event::Read(Up, 3));
        assert_eq!(r.poll_action(), Some(Action::Write { dir: Up, len: 3 }));
        r.handle(t(2), Event::Wrote(Up, 0));
        assert_eq!(r.poll_action(), Some(Action::Read { dir: Up, max: 997 }));
    }
}
