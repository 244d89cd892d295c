//! satbench-tunnel: a point-to-point WireGuard tunnel in user space, the VPN
//! that hides TCP from the satellite path's PEPs (this kernel has no
//! wireguard link type).
//!
//! The protocol is boringtun's (Cloudflare's userspace WireGuard: the Noise
//! IK handshake, ChaCha20-Poly1305 transport, its timers), used as a sans-IO
//! core: [`Endpoint`] takes an IP packet from the TUN device or a datagram
//! from the network and says what to send where, counting both sides. The
//! binary (`main.rs`) moves bytes between a TUN device, a UDP socket and
//! the endpoint, and ticks its timers.
//!
//! IPv4 and IPv6 packets are carried (over an IPv4 or IPv6 socket: the
//! outer family is the caller's). Inner packets are never fragmented here: the TUN device's MTU (1420 by default, WireGuard's usual
//! one) keeps every datagram within the path's 1500 bytes, and the caller
//! clamps TCP's MSS to it.

use boringtun::noise::{Tunn, TunnResult};
use boringtun::x25519::{PublicKey, StaticSecret};
use std::net::IpAddr;

/// WireGuard's overhead on a datagram: outer IPv4 (20) + UDP (8) + the
/// data message's header (16) and tag (16).
pub const OVERHEAD_IPV4: usize = 60;

/// Room for any datagram the endpoint makes.
pub const BUF: usize = 65_536;

/// A key pair as lowercase hex (the command line's form).
pub fn keypair() -> (String, String) {
    let secret = StaticSecret::random_from_rng(rand_core::OsRng);
    let public = PublicKey::from(&secret);
    (hex(secret.as_bytes()), hex(public.as_bytes()))
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// 32 bytes from 64 hex digits.
pub fn key_from_hex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// What the endpoint asks its caller to do with the bytes it made.
#[derive(Debug, PartialEq, Eq)]
pub enum Out {
    /// Send this datagram to the peer.
    Network(Vec<u8>),
    /// Write this (decrypted) IP packet to the TUN device.
    Tunnel(Vec<u8>),
}

/// Counters, both directions, as the summary reports them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counters {
    /// IP packets read from the TUN device and sent encrypted (or queued
    /// until the handshake completes).
    pub tun_in_packets: u64,
    pub tun_in_bytes: u64,
    /// Decrypted packets written to the TUN device.
    pub tun_out_packets: u64,
    pub tun_out_bytes: u64,
    /// Datagrams sent to and received from the peer (data, handshake, keepalive).
    pub net_out_datagrams: u64,
    pub net_out_bytes: u64,
    pub net_in_datagrams: u64,
    pub net_in_bytes: u64,
    /// Datagrams the protocol refused (bad MAC, replay, unknown session...).
    pub net_in_rejected: u64,
    /// Handshakes completed (initial and rekeys).
    pub handshakes: u64,
    /// Inner packets that were neither IPv4 nor IPv6 (dropped).
    pub not_ip: u64,
}

/// One side of the tunnel: the protocol state and its counters.
pub struct Endpoint {
    tunn: Tunn,
    buf: Vec<u8>,
    counters: Counters,
    had_session: bool,
}

impl Endpoint {
    pub fn new(private: [u8; 32], peer_public: [u8; 32], keepalive_s: Option<u16>) -> Endpoint {
        let tunn = Tunn::new(
            StaticSecret::from(private),
            PublicKey::from(peer_public),
            None,
            keepalive_s,
            0,
            None,
        )
        .expect("a tunnel from valid keys");
        Endpoint {
            tunn,
            buf: vec![0; BUF],
            counters: Counters::default(),
            had_session: false,
        }
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The protocol's smoothed handshake round trip, if measured (ms).
    pub fn handshake_rtt_ms(&self) -> Option<u32> {
        self.tunn.stats().4
    }

    /// Start the handshake now (the initiator does, at start).
    pub fn initiate(&mut self) -> Vec<Out> {
        let mut out = Vec::new();
        if let TunnResult::WriteToNetwork(d) =
            self.tunn.format_handshake_initiation(&mut self.buf, false)
        {
            out.push(Out::Network(d.to_vec()));
        }
        self.count(&out);
        out
    }

    /// An IP packet from the TUN device.
    pub fn from_tun(&mut self, packet: &[u8]) -> Vec<Out> {
        if !matches!(packet.first().map(|b| b >> 4), Some(4 | 6)) {
            self.counters.not_ip += 1;
            return Vec::new();
        }
        self.counters.tun_in_packets += 1;
        self.counters.tun_in_bytes += packet.len() as u64;
        let mut out = Vec::new();
        match self.tunn.encapsulate(packet, &mut self.buf) {
            TunnResult::WriteToNetwork(d) => out.push(Out::Network(d.to_vec())),
            TunnResult::Err(_) | TunnResult::Done => {}
            TunnResult::WriteToTunnelV4(..) | TunnResult::WriteToTunnelV6(..) => {}
        }
        self.count(&out);
        out
    }

    /// A datagram from the peer's address.
    pub fn from_network(&mut self, from: IpAddr, datagram: &[u8]) -> Vec<Out> {
        self.counters.net_in_datagrams += 1;
        self.counters.net_in_bytes += datagram.len() as u64;
        let mut out = Vec::new();
        let mut first = true;
        loop {
            let input: &[u8] = if first { datagram } else { &[] };
            match self.tunn.decapsulate(Some(from), input, &mut self.buf) {
                TunnResult::WriteToNetwork(d) => {
                    // A handshake answer or a packet queued during the
                    // handshake: call again (empty) until nothing is left.
                    out.push(Out::Network(d.to_vec()));
                    first = false;
                    continue;
                }
                TunnResult::WriteToTunnelV4(p, _) | TunnResult::WriteToTunnelV6(p, _) => {
                    out.push(Out::Tunnel(p.to_vec()))
                }
                TunnResult::Err(_) if first => self.counters.net_in_rejected += 1,
                TunnResult::Err(_) | TunnResult::Done => {}
            }
            break;
        }
        self.count(&out);
        out
    }

    /// The timers (retransmitted handshakes, keepalives, rekeys): call a few
    /// times a second.
    pub fn tick(&mut self) -> Vec<Out> {
        let mut out = Vec::new();
        if let TunnResult::WriteToNetwork(d) = self.tunn.update_timers(&mut self.buf) {
            out.push(Out::Network(d.to_vec()));
        }
        self.count(&out);
        out
    }

    fn count(&mut self, out: &[Out]) {
        for o in out {
            match o {
                Out::Network(d) => {
                    self.counters.net_out_datagrams += 1;
                    self.counters.net_out_bytes += d.len() as u64;
                }
                Out::Tunnel(p) => {
                    self.counters.tun_out_packets += 1;
                    self.counters.tun_out_bytes += p.len() as u64;
                }
            }
        }
        // A new session: the time since the last handshake restarts near zero.
        let fresh = matches!(self.tunn.stats().0, Some(t) if t.as_secs() < 1);
        if fresh && !self.had_session {
            self.counters.handshakes += 1;
        }
        self.had_session = fresh;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// A minimal IPv4/UDP packet of `len` bytes (the endpoint reads only the
    /// version and the destination for the peer's checks).
    fn ipv4(len: usize, src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p[12..16].copy_from_slice(&src);
        p[16..20].copy_from_slice(&dst);
        for (i, b) in p[20..].iter_mut().enumerate() {
            *b = i as u8;
        }
        p
    }

    fn pair() -> (Endpoint, Endpoint) {
        let (a_priv, a_pub) = keypair();
        let (b_priv, b_pub) = keypair();
        let k = |s: &str| key_from_hex(s).unwrap();
        (
            Endpoint::new(k(&a_priv), k(&b_pub), None),
            Endpoint::new(k(&b_priv), k(&a_pub), None),
        )
    }

    const A: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 1, 10));
    const B: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 3, 2));

    /// Deliver `to_b` (what `a` made) and everything that follows to the
    /// other side until both are quiet; returns what each wrote to its TUN
    /// device.
    fn exchange(
        a: &mut Endpoint,
        b: &mut Endpoint,
        mut to_b: Vec<Out>,
    ) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
        let (mut tun_a, mut tun_b) = (Vec::new(), Vec::new());
        let mut to_a: Vec<Out> = Vec::new();
        while !to_a.is_empty() || !to_b.is_empty() {
            for o in std::mem::take(&mut to_b) {
                match o {
                    Out::Network(d) => to_a.extend(b.from_network(A, &d)),
                    Out::Tunnel(p) => tun_a.push(p),
                }
            }
            for o in std::mem::take(&mut to_a) {
                match o {
                    Out::Network(d) => to_b.extend(a.from_network(B, &d)),
                    Out::Tunnel(p) => tun_b.push(p),
                }
            }
        }
        (tun_a, tun_b)
    }

    #[test]
    fn keys_round_trip_through_hex() {
        let (s, p) = keypair();
        assert_eq!(hex(&key_from_hex(&s).unwrap()), s);
        assert_eq!(p.len(), 64);
        for bad in ["", "00", &"g".repeat(64), &"0".repeat(63), &"é".repeat(32)] {
            assert_eq!(key_from_hex(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_packet_sent_before_the_handshake_arrives_after_it() {
        let (mut a, mut b) = pair();
        let p = ipv4(1000, [10, 200, 0, 2], [198, 18, 3, 10]);
        // No session yet: the packet is queued and a handshake initiation goes out.
        let out = a.from_tun(&p);
        assert!(
            matches!(&out[..], [Out::Network(d)] if d.len() == 148),
            "{out:?}"
        );
        let (_, tun_b) = exchange(&mut a, &mut b, out);
        assert_eq!(tun_b, vec![p.clone()]);
        assert_eq!(a.counters().handshakes, 1);
        // The session carries data both ways; each datagram is the packet plus 32 bytes.
        let out = b.from_tun(&p);
        assert!(matches!(&out[..], [Out::Network(d)] if d.len() == p.len() + OVERHEAD_IPV4 - 28));
        let (tun_b_side, tun_a) = exchange(&mut b, &mut a, out);
        assert_eq!((tun_a, tun_b_side), (vec![p], vec![]));
        let (ca, cb) = (a.counters(), b.counters());
        assert_eq!((ca.tun_in_packets, ca.tun_out_packets), (1, 1));
        assert_eq!((cb.tun_in_packets, cb.tun_out_packets), (1, 1));
        assert_eq!(ca.net_out_datagrams, cb.net_in_datagrams);
        assert_eq!(ca.net_out_bytes, cb.net_in_bytes);
        assert_eq!(ca.net_in_rejected + cb.net_in_rejected, 0);
    }

    #[test]
    fn forged_and_replayed_datagrams_are_rejected() {
        let (mut a, mut b) = pair();
        let init = a.initiate();
        assert_eq!(init.len(), 1);
        let _ = exchange(&mut a, &mut b, init);
        let p = ipv4(200, [10, 200, 0, 2], [198, 18, 3, 10]);
        let Out::Network(d) = a.from_tun(&p).remove(0) else {
            panic!("no datagram")
        };
        assert_eq!(b.from_network(A, &d), vec![Out::Tunnel(p)]);
        // The same datagram again (a replay) and a flipped bit: nothing comes out.
        assert_eq!(b.from_network(A, &d), vec![]);
        let mut forged = d.clone();
        *forged.last_mut().unwrap() ^= 1;
        assert_eq!(b.from_network(A, &forged), vec![]);
        assert_eq!(b.counters().net_in_rejected, 2);
        // Garbage of every short length is refused, never a panic.
        for n in 0..200 {
            let _ = b.from_network(A, &vec![n as u8; n]);
        }
    }

    /// A minimal IPv6/UDP packet of `len` bytes (40 of header, the rest payload).
    fn ipv6(len: usize, dst_last: u8) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        p[6] = 17;
        p[7] = 64;
        p[8..12].copy_from_slice(&[0xfd, 0x00, 0x00, 0x5b]);
        p[24..28].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
        p[39] = dst_last;
        for (i, b) in p[40..].iter_mut().enumerate() {
            *b = i as u8;
        }
        p
    }

    #[test]
    fn ipv4_and_ipv6_are_carried_and_nothing_else() {
        let (mut a, mut b) = pair();
        let v6 = ipv6(1000, 10);
        let out = a.from_tun(&v6);
        let (_, tun_b) = exchange(&mut a, &mut b, out);
        assert_eq!(tun_b, vec![v6.clone()]);
        let out = b.from_tun(&v6);
        let (_, tun_a) = exchange(&mut b, &mut a, out);
        assert_eq!(tun_a, vec![v6]);
        // Neither family: dropped and counted, never sent.
        let mut other = ipv4(60, [10, 200, 0, 2], [198, 18, 3, 10]);
        other[0] = 0x55;
        assert_eq!(a.from_tun(&other), vec![]);
        assert_eq!(a.from_tun(&[]), vec![]);
        assert_eq!(a.counters().not_ip, 2);
        assert_eq!(a.counters().tun_in_packets, 1);
    }
}
