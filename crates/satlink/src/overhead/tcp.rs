//! One direction of a TCP connection: which payload bytes are new, which
//! are sent again, and what the new ones carry.
//!
//! The flow remembers the end of the highest sequence range sent (`next`,
//! like the sender's `snd_max`, without the FIN). A segment's payload
//! occupies `[seq + SYN, seq + SYN + len)`; the part below `next` is
//! `tcp_retransmitted`, the part above it new (sequence numbers compared
//! modulo 2^32, as RFC 793's `SEQ_LT`). New bytes go to the flow's content:
//! a [`TlsStream`] if the flow's first new payload starts the stream (its
//! SYN was seen, or no state existed) and [`looks_like_tls`], else
//! `tcp_payload`. A hole (new bytes beyond `next`) is skipped by the TLS
//! tracker.

use super::tls::{looks_like_tls, TlsStream};
use super::Overhead;

/// What a flow's new payload bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Content {
    /// No new payload seen yet.
    Unknown,
    Tls(TlsStream),
    /// Anything else: cleartext HTTP, iperf, or a stream first seen midway.
    Plain,
}

/// One direction of a TCP connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpFlow {
    /// Sequence number after the highest payload byte sent.
    next: u32,
    /// The stream's first sequence number (ISN + 1), if its SYN was seen.
    first: Option<u32>,
    content: Content,
}

impl TcpFlow {
    /// A flow whose first segment seen starts at `seq` (a SYN if `syn`).
    pub fn new(seq: u32, syn: bool) -> TcpFlow {
        let first = seq.wrapping_add(syn as u32);
        TcpFlow {
            next: first,
            first: syn.then_some(first),
            content: Content::Unknown,
        }
    }

    /// True if a SYN at `seq` is this connection's (a retransmitted SYN),
    /// false if it opens a new connection on the same addresses and ports.
    pub fn is_same_syn(&self, seq: u32) -> bool {
        self.first == Some(seq.wrapping_add(1))
    }

    /// True if the flow's new payload is followed as TLS records (and the
    /// tracker is still in step).
    pub fn is_tls(&self) -> bool {
        matches!(self.content, Content::Tls(t) if !t.is_lost())
    }

    /// A segment's payload (at `seq`, after the SYN if `syn`), added to `out`.
    pub fn segment(&mut self, seq: u32, syn: bool, payload: &[u8], out: &mut Overhead) {
        if payload.is_empty() {
            return;
        }
        let start = seq.wrapping_add(syn as u32);
        let len = payload.len() as u32;
        // How far `next` is beyond the segment's start (negative: a hole).
        let behind = self.next.wrapping_sub(start) as i32;
        let (old, hole) = if behind > 0 {
            ((behind as u32).min(len), 0)
        } else {
            (0, behind.unsigned_abs())
        };
        out.tcp_retransmitted += old as u64;
        if old == len {
            return;
        }
        self.next = start.wrapping_add(len);
        let new = &payload[old as usize..];
        if self.content == Content::Unknown {
            self.content = if hole == 0 && looks_like_tls(new) {
                Content::Tls(TlsStream::default())
            } else {
                Content::Plain
            };
        }
        match &mut self.content {
            Content::Tls(t) => {
                t.skip(hole);
                t.feed(new, out);
            }
            _ => out.tcp_payload += new.len() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(f: &mut TcpFlow, seq: u32, payload: &[u8]) -> Overhead {
        let mut o = Overhead::default();
        f.segment(seq, false, payload, &mut o);
        assert_eq!(o.bytes(), payload.len() as u64);
        o
    }

    #[test]
    fn retransmissions_full_and_partial_across_the_wrap() {
        let isn = u32::MAX - 1000;
        let mut f = TcpFlow::new(isn, true);
        assert!(f.is_same_syn(isn) && !f.is_same_syn(isn + 1));
        let p = [b'x'; 1400];
        let s0 = isn.wrapping_add(1);
        assert_eq!(seg(&mut f, s0, &p).tcp_payload, 1400);
        // Crosses 2^32.
        let s1 = s0.wrapping_add(1400);
        assert_eq!(seg(&mut f, s1, &p).tcp_payload, 1400);
        // The first again: all of it.
        assert_eq!(seg(&mut f, s0, &p).tcp_retransmitted, 1400);
        // 400 old bytes and 1000 new.
        let o = seg(&mut f, s1.wrapping_add(1000), &p);
        assert_eq!((o.tcp_retransmitted, o.tcp_payload), (400, 1000));
        // A keep-alive: one old byte.
        let o = seg(&mut f, s1.wrapping_add(2399), &[0]);
        assert_eq!(o.tcp_retransmitted, 1);
    }

    #[test]
    fn a_flow_first_seen_midway_starts_where_it_is_seen() {
        let mut f = TcpFlow::new(5000, false);
        let o = seg(&mut f, 5000, &[22, 3, 1, 0, 10, 0, 0]);
        assert!(f.is_tls());
        assert_eq!(o.tls_handshake, 7);
        assert_eq!(seg(&mut f, 5000, &[22, 3]).tcp_retransmitted, 2);
    }

    #[test]
    fn tls_only_from_the_start_of_the_stream() {
        let tls = [22, 3, 1, 0, 10];
        let mut f = TcpFlow::new(100, true);
        // A hole before the first payload: not the stream's start.
        assert_eq!(seg(&mut f, 111, &tls).tcp_payload, 5);
        assert!(!f.is_tls());
        let mut f = TcpFlow::new(100, true);
        assert_eq!(seg(&mut f, 101, b"GET / HTTP/1.1\r\n").tcp_payload, 16);
        assert_eq!(seg(&mut f, 117, &tls).tcp_payload, 5);
        // A retransmission of nothing new does not decide.
        let mut f = TcpFlow::new(100, true);
        assert_eq!(seg(&mut f, 90, &tls).tcp_retransmitted, 5);
        let o = seg(&mut f, 101, &tls);
        assert_eq!(o.tls_handshake, 5);
    }

    #[test]
    fn data_on_a_syn_starts_after_it() {
        let mut f = TcpFlow::new(7, true);
        let mut o = Overhead::default();
        f.segment(7, true, &[22, 3, 1, 0, 1, 1], &mut o);
        assert_eq!(o.tls_handshake, 6);
        assert!(f.is_tls());
        f.segment(7, true, &[22, 3, 1, 0, 1, 1], &mut o);
        assert_eq!(o.tcp_retransmitted, 6);
    }
}
