//! Protocol overhead: every packet offered to the link, split into byte
//! parts that add up to its length, from what the link itself sees.
//!
//! Sans-IO: a [`Classifier`] (one per direction) is handed each IP packet
//! ([`Classifier::classify`]) or offloaded chunk of segments
//! ([`Classifier::classify_offload`]) and returns its [`Overhead`]. Nothing
//! depends on time. The parts, exactly:
//!
//! - `ip_header`: the IPv4 header with options, or the IPv6 header with the
//!   extension headers [`Ipv6Packet::upper_layer`] steps over;
//! - `transport_header`: the TCP header with options, UDP's 8 bytes;
//! - TCP payload ([`tcp`]): `tcp_retransmitted` (sequence range already
//!   sent in that flow and direction); new bytes of a flow that starts with
//!   a TLS record ([`tls`]): `tls_handshake` (records 20, 21, 22: header and
//!   body), `tls_record_overhead` (records 23: header and the last 17 bytes,
//!   [`tls::AEAD_EXPANSION`]) and `tls_application` (the rest of records 23);
//!   (TLS 1.3 encrypts its handshake after the ServerHello in records 23:
//!   from the link, `tls_handshake` is the ClientHello, ServerHello and
//!   ChangeCipherSpec, and the certificate chain counts as records 23);
//!   new bytes of other flows, of flows no longer tracked, and of TLS flows
//!   the tracker lost step with: `tcp_payload`;
//! - UDP payload: QUIC if either port is 443 or the first byte has the fixed
//!   bit (0x40): `quic_handshake` if the first packet of the datagram has a
//!   long header (0x80: Initial, 0-RTT, Handshake, Retry, version
//!   negotiation; coalesced packets included), else `quic_application`;
//!   other datagrams: `udp_payload`;
//! - `other`: what does not parse: a whole packet whose IP header does not
//!   (version, truncation, extension headers), or what follows a valid IP
//!   header that is a fragment, another protocol than TCP and UDP, or a
//!   truncated TCP or UDP header.
//!
//! Lengths are the buffer's: the IP and UDP length fields are not trusted.
//! Two more counters are packets, not bytes: TCP segments without payload
//! are `pure_acks`, or `syn_fin_rst` if SYN, FIN or RST is set.
//!
//! Per-flow state (TCP only, per 4-tuple and direction) is created by a SYN
//! or by the first segment with payload, and bounded ([`flows::FlowTable`],
//! [`DEFAULT_MAX_FLOWS`]); a flow evicted and seen again starts afresh, as
//! one first seen midway (its payload counts as new, `tcp_payload` unless a
//! record header happens to start it).

pub mod flows;
pub mod tcp;
pub mod tls;

use crate::wire::{
    tcp_flags, GsoChunk, Ipv4Packet, Ipv6Packet, TcpPacket, UdpPacket, UpperLayer, IPPROTO_TCP,
    IPPROTO_UDP,
};
use flows::{FlowKey, FlowTable};
use serde::Serialize;
use std::ops::AddAssign;
use tcp::TcpFlow;

/// Flows a [`Classifier`] tracks by default.
pub const DEFAULT_MAX_FLOWS: usize = 65_536;
/// UDP port whose datagrams are QUIC whatever their first byte.
pub const QUIC_PORT: u16 = 443;
const QUIC_LONG_HEADER: u8 = 0x80;
const QUIC_FIXED_BIT: u8 = 0x40;

/// Bytes of packets by part (the byte fields add up to the packets'
/// length) and two packet counts. The stats' `overhead` object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Overhead {
    pub ip_header: u64,
    pub transport_header: u64,
    pub tcp_payload: u64,
    pub tcp_retransmitted: u64,
    pub tls_handshake: u64,
    pub tls_record_overhead: u64,
    pub tls_application: u64,
    pub quic_handshake: u64,
    pub quic_application: u64,
    pub udp_payload: u64,
    pub other: u64,
    /// TCP segments without payload and without SYN, FIN or RST (packets).
    pub pure_acks: u64,
    /// TCP segments without payload with SYN, FIN or RST (packets).
    pub syn_fin_rst: u64,
}

impl Overhead {
    /// The sum of the byte parts.
    pub fn bytes(&self) -> u64 {
        self.ip_header
            + self.transport_header
            + self.tcp_payload
            + self.tcp_retransmitted
            + self.tls_handshake
            + self.tls_record_overhead
            + self.tls_application
            + self.quic_handshake
            + self.quic_application
            + self.udp_payload
            + self.other
    }
}

impl AddAssign for Overhead {
    fn add_assign(&mut self, o: Overhead) {
        self.ip_header += o.ip_header;
        self.transport_header += o.transport_header;
        self.tcp_payload += o.tcp_payload;
        self.tcp_retransmitted += o.tcp_retransmitted;
        self.tls_handshake += o.tls_handshake;
        self.tls_record_overhead += o.tls_record_overhead;
        self.tls_application += o.tls_application;
        self.quic_handshake += o.quic_handshake;
        self.quic_application += o.quic_application;
        self.udp_payload += o.udp_payload;
        self.other += o.other;
        self.pure_acks += o.pure_acks;
        self.syn_fin_rst += o.syn_fin_rst;
    }
}

/// A checked IP header of either version.
enum Ip<'a> {
    V4(Ipv4Packet<&'a [u8]>),
    V6(Ipv6Packet<&'a [u8]>),
}

impl<'a> Ip<'a> {
    fn parse(p: &'a [u8]) -> Option<(Ip<'a>, UpperLayer)> {
        match p.first()? >> 4 {
            4 => {
                let v4 = Ipv4Packet::new_checked(p).ok()?;
                Some((Ip::V4(v4), v4.upper_layer()))
            }
            6 => {
                let v6 = Ipv6Packet::new_checked(p).ok()?;
                let upper = v6.upper_layer().ok()?;
                Some((Ip::V6(v6), upper))
            }
            _ => None,
        }
    }

    fn flow(&self, src_port: u16, dst_port: u16) -> FlowKey {
        match self {
            Ip::V4(p) => FlowKey::v4(p.src_addr(), p.dst_addr(), src_port, dst_port),
            Ip::V6(p) => FlowKey::v6(p.src_addr(), p.dst_addr(), src_port, dst_port),
        }
    }
}

/// Splits one direction's packets into their parts, with the TCP flows'
/// state (see the module's rules).
pub struct Classifier {
    flows: FlowTable<TcpFlow>,
}

impl Default for Classifier {
    fn default() -> Self {
        Classifier::with_max_flows(DEFAULT_MAX_FLOWS)
    }
}

impl Classifier {
    /// A classifier that tracks at most `n` TCP flows (at least 1).
    pub fn with_max_flows(n: usize) -> Classifier {
        Classifier {
            flows: FlowTable::new(n),
        }
    }

    /// TCP flows tracked now.
    pub fn flows(&self) -> usize {
        self.flows.len()
    }

    /// TCP flows evicted to make room so far.
    pub fn evicted(&self) -> u64 {
        self.flows.evicted()
    }

    /// The parts of one IP packet (`packet.len()` bytes in all).
    pub fn classify(&mut self, packet: &[u8]) -> Overhead {
        let mut o = Overhead::default();
        self.classify_into(packet, &mut o);
        o
    }

    /// [`classify`](Self::classify), the parts added to `o` (the front
    /// end's running totals: nothing to zero, copy and add per packet).
    pub fn classify_into(&mut self, packet: &[u8], o: &mut Overhead) {
        let Some((ip, upper)) = Ip::parse(packet) else {
            o.other += packet.len() as u64;
            return;
        };
        o.ip_header += upper.offset as u64;
        let l4 = &packet[upper.offset..];
        let rest = l4.len() as u64;
        match upper.protocol {
            _ if upper.fragment => o.other += rest,
            IPPROTO_TCP => match TcpPacket::new_checked(l4) {
                Ok(t) => {
                    o.transport_header += t.header_len() as u64;
                    let flow = ip.flow(t.src_port(), t.dst_port());
                    self.tcp(flow, t.seq_number(), t.flags(), t.payload(), o);
                }
                Err(_) => o.other += rest,
            },
            IPPROTO_UDP => match UdpPacket::new_checked(l4) {
                Ok(u) => {
                    o.transport_header += u.header_len() as u64;
                    udp(u.src_port(), u.dst_port(), u.payload(), o);
                }
                Err(_) => o.other += rest,
            },
            _ => o.other += rest,
        }
    }

    /// The parts of an offloaded chunk as the segments it stands for
    /// ([`GsoChunk::wire_size`] bytes in all): each segment's headers, the
    /// TCP payload as one range, each UDP segment a datagram of its own.
    pub fn classify_offload(&mut self, chunk: &GsoChunk) -> Overhead {
        let mut o = Overhead::default();
        self.classify_offload_into(chunk, &mut o);
        o
    }

    /// [`classify_offload`](Self::classify_offload), the parts added to `o`.
    pub fn classify_offload_into(&mut self, chunk: &GsoChunk, o: &mut Overhead) {
        let (n, _) = chunk.wire_size();
        let (ip, l4, hl) = (
            chunk.packet(),
            chunk.transport_offset(),
            chunk.headers_len(),
        );
        o.ip_header += n as u64 * l4 as u64;
        o.transport_header += n as u64 * (hl - l4) as u64;
        let payload = &ip[hl..];
        // GsoChunk::new_checked established a full IP header and a
        // transport header within the packet; the views check again.
        let parsed = Ip::parse(ip).map(|(v, _)| v);
        match (parsed, chunk.protocol()) {
            (Some(v), IPPROTO_TCP) => match TcpPacket::new_checked(&ip[l4..]) {
                Ok(t) => {
                    let flow = v.flow(t.src_port(), t.dst_port());
                    self.tcp(flow, t.seq_number(), t.flags(), payload, o);
                }
                Err(_) => o.other += payload.len() as u64,
            },
            (Some(_), IPPROTO_UDP) => match UdpPacket::new_checked(&ip[l4..]) {
                Ok(u) => {
                    for d in payload.chunks(chunk.segment_size().max(1)) {
                        udp(u.src_port(), u.dst_port(), d, o);
                    }
                }
                Err(_) => o.other += payload.len() as u64,
            },
            _ => o.other += payload.len() as u64,
        }
    }

    fn tcp(&mut self, flow: FlowKey, seq: u32, flags: u8, payload: &[u8], o: &mut Overhead) {
        let syn = flags & tcp_flags::SYN != 0;
        if payload.is_empty() {
            if flags & (tcp_flags::SYN | tcp_flags::FIN | tcp_flags::RST) != 0 {
                o.syn_fin_rst += 1;
            } else {
                o.pure_acks += 1;
            }
            if !syn {
                return;
            }
        }
        let f = self
            .flows
            .get_or_insert_with(flow, || TcpFlow::new(seq, syn));
        if syn && !f.is_same_syn(seq) {
            // A new connection on the same addresses and ports.
            *f = TcpFlow::new(seq, syn);
        }
        f.segment(seq, syn, payload, o);
    }
}

/// A UDP payload's part: QUIC handshake or application, or other UDP.
fn udp(src_port: u16, dst_port: u16, payload: &[u8], o: &mut Overhead) {
    let Some(&first) = payload.first() else {
        return;
    };
    let n = payload.len() as u64;
    if src_port == QUIC_PORT || dst_port == QUIC_PORT || first & QUIC_FIXED_BIT != 0 {
        if first & QUIC_LONG_HEADER != 0 {
            o.quic_handshake += n;
        } else {
            o.quic_application += n;
        }
    } else {
        o.udp_payload += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{emit_tcp, emit_udp, VnetHeader, GSO_TCPV4, GSO_UDP_L4, VNET_HDR_LEN};
    use std::net::SocketAddr;
    use tcp_flags::{ACK, FIN, PSH, RST, SYN};

    const CLIENT: &str = "198.18.1.10:50000";
    const SERVER: &str = "198.18.3.10:443";
    /// Timestamps (NOP, NOP, TS): the options of every segment after the SYN.
    const TS: [u8; 12] = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
    /// A SYN's options: MSS 1460, SACK permitted, timestamps, window scale 7.
    const SYN_OPTS: [u8; 20] = [
        2, 4, 0x05, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
    ];

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// A segment of the server's stream (to the client) with timestamps.
    fn down(seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        emit_tcp(addr(SERVER), addr(CLIENT), seq, flags, &TS, payload)
    }

    /// A segment of the client's stream (to the server) with timestamps.
    fn up(seq: u32, flags: u8, payload: &[u8]) -> Vec<u8> {
        emit_tcp(addr(CLIENT), addr(SERVER), seq, flags, &TS, payload)
    }

    /// Classify, checking the per-packet invariant: the byte parts add up to
    /// the packet, and it is at most one control segment.
    fn check(c: &mut Classifier, p: &[u8]) -> Overhead {
        let o = c.classify(p);
        assert_eq!(o.bytes(), p.len() as u64, "{o:?}");
        assert!(o.pure_acks + o.syn_fin_rst <= 1, "{o:?}");
        o
    }

    /// A TLS record of type `t` with a `body`-byte body.
    fn record(t: u8, body: usize) -> Vec<u8> {
        let mut r = vec![t, 3, 3];
        r.extend_from_slice(&(body as u16).to_be_bytes());
        r.extend((0..body).map(|i| (i * 7) as u8));
        r
    }

    /// IPv4 (20) + TCP with timestamps (32).
    fn headers() -> Overhead {
        Overhead {
            ip_header: 20,
            transport_header: 32,
            ..Default::default()
        }
    }

    #[test]
    fn handshake_segments_with_options_are_headers_and_control_counts() {
        let mut c = Classifier::default();
        let syn = emit_tcp(addr(CLIENT), addr(SERVER), 1000, SYN, &SYN_OPTS, &[]);
        let expect = Overhead {
            ip_header: 20,
            transport_header: 40,
            syn_fin_rst: 1,
            ..Default::default()
        };
        assert_eq!(check(&mut c, &syn), expect);
        let synack = emit_tcp(addr(SERVER), addr(CLIENT), 9000, SYN | ACK, &SYN_OPTS, &[]);
        assert_eq!(check(&mut c, &synack), expect);
        let ack = up(1001, ACK, &[]);
        let o = check(&mut c, &ack);
        assert_eq!(
            o,
            Overhead {
                pure_acks: 1,
                ..headers()
            }
        );
        assert_eq!(check(&mut c, &up(1001, FIN | ACK, &[])).syn_fin_rst, 1);
        assert_eq!(check(&mut c, &up(1002, RST, &[])).syn_fin_rst, 1);
        // Payload with FIN: no control segment.
        let o = check(&mut c, &down(9001, FIN | PSH | ACK, b"bye"));
        assert_eq!(
            o,
            Overhead {
                tcp_payload: 3,
                ..headers()
            }
        );
        // The SYNs made the flows, pure ACKs and FINs none.
        assert_eq!(c.flows(), 2);
    }

    #[test]
    fn ipv4_options_count_as_ip_header() {
        let mut p = up(1, ACK, b"GET / HTTP/1.1\r\n\r\n");
        p.splice(20..20, [1, 1, 1, 0]); // NOP NOP NOP EOL
        p[0] = 0x46;
        let o = check(&mut Classifier::default(), &p);
        assert_eq!(
            o,
            Overhead {
                ip_header: 24,
                transport_header: 32,
                tcp_payload: 18,
                ..Default::default()
            }
        );
    }

    #[test]
    fn a_client_hello_split_across_two_segments() {
        let mut c = Classifier::default();
        check(
            &mut c,
            &emit_tcp(addr(CLIENT), addr(SERVER), 1000, SYN, &SYN_OPTS, &[]),
        );
        let mut hello = vec![22, 3, 1, 0x02, 0x00]; // a 512-byte ClientHello
        hello.extend((0..512).map(|i| i as u8));
        let o1 = check(&mut c, &up(1001, ACK, &hello[..300]));
        let o2 = check(&mut c, &up(1301, PSH | ACK, &hello[300..]));
        assert_eq!(
            o1,
            Overhead {
                tls_handshake: 300,
                ..headers()
            }
        );
        assert_eq!(
            o2,
            Overhead {
                tls_handshake: 217,
                ..headers()
            }
        );
        // The client's Finished and a request in one segment: a TLS 1.3
        // record of a 53-byte Finished, then a 200-byte request.
        let mut flight = record(20, 1);
        flight.extend(record(23, 53));
        flight.extend(record(23, 200 + 17));
        let o = check(&mut c, &up(1518, PSH | ACK, &flight));
        assert_eq!(
            o,
            Overhead {
                tls_handshake: 6,
                tls_record_overhead: 5 + 17 + 5 + 17,
                tls_application: 36 + 200,
                ..headers()
            }
        );
    }

    /// The server's first TLS 1.3 bytes: ServerHello (95), change_cipher_spec
    /// (6), then a 3000-byte application_data record (3005): 3106 bytes.
    fn server_stream() -> Vec<u8> {
        let mut s = record(22, 90);
        s.extend(record(20, 1));
        s.extend(record(23, 3000));
        s
    }

    #[test]
    fn an_application_record_spanning_segments() {
        let mut c = Classifier::default();
        check(
            &mut c,
            &emit_tcp(addr(SERVER), addr(CLIENT), 0, SYN | ACK, &SYN_OPTS, &[]),
        );
        let s = server_stream();
        let o1 = check(&mut c, &down(1, ACK, &s[..1448]));
        let o2 = check(&mut c, &down(1449, ACK, &s[1448..2896]));
        let o3 = check(&mut c, &down(2897, PSH | ACK, &s[2896..]));
        assert_eq!(
            o1,
            Overhead {
                tls_handshake: 101,
                tls_record_overhead: 5,
                tls_application: 1342,
                ..headers()
            }
        );
        assert_eq!(
            o2,
            Overhead {
                tls_application: 1448,
                ..headers()
            }
        );
        assert_eq!(
            o3,
            Overhead {
                tls_record_overhead: 17,
                tls_application: 193,
                ..headers()
            }
        );
    }

    #[test]
    fn retransmissions_full_and_partial_are_skipped_by_the_tls_tracker() {
        let mut c = Classifier::default();
        check(
            &mut c,
            &emit_tcp(addr(SERVER), addr(CLIENT), 0, SYN | ACK, &SYN_OPTS, &[]),
        );
        let s = server_stream();
        let mut total = Overhead::default();
        total += check(&mut c, &down(1, ACK, &s[..1448]));
        // The second segment is lost on the link; the third goes out.
        total += check(&mut c, &down(1449, ACK, &s[1448..2896]));
        total += check(&mut c, &down(2897, ACK, &s[2896..]));
        // The second again: all of it old.
        let o = check(&mut c, &down(1449, ACK, &s[1448..2896]));
        assert_eq!(
            o,
            Overhead {
                tcp_retransmitted: 1448,
                ..headers()
            }
        );
        total += o;
        // Repacketised: 1000 old bytes, then 500 new bytes of a new record
        // (a 495-byte application_data record).
        let mut more = s[2106..].to_vec();
        more.extend(record(23, 495));
        let o = check(&mut c, &down(2107, ACK, &more));
        assert_eq!(
            o,
            Overhead {
                tcp_retransmitted: 1000,
                tls_record_overhead: 5 + 17,
                tls_application: 478,
                ..headers()
            }
        );
        total += o;
        assert_eq!(
            total,
            Overhead {
                ip_header: 5 * 20,
                transport_header: 5 * 32,
                tcp_retransmitted: 2448,
                tls_handshake: 101,
                tls_record_overhead: 5 + 17 + 5 + 17,
                tls_application: 2983 + 478,
                ..Default::default()
            }
        );
    }

    #[test]
    fn cleartext_http_and_its_retransmissions() {
        let mut c = Classifier::default();
        let body = [b'a'; 1000];
        assert_eq!(check(&mut c, &down(5000, ACK, &body)).tcp_payload, 1000);
        assert_eq!(check(&mut c, &down(6000, ACK, &body)).tcp_payload, 1000);
        assert_eq!(
            check(&mut c, &down(5000, ACK, &body)).tcp_retransmitted,
            1000
        );
        let o = check(&mut c, &down(6500, ACK, &body));
        assert_eq!((o.tcp_retransmitted, o.tcp_payload), (500, 500));
        // The other direction is a flow of its own.
        assert_eq!(check(&mut c, &up(5000, ACK, &body)).tcp_payload, 1000);
    }

    #[test]
    fn a_new_connection_on_the_same_ports_starts_afresh() {
        let mut c = Classifier::default();
        check(&mut c, &up(100, SYN, &[]));
        assert_eq!(check(&mut c, &up(101, ACK, b"abcd")).tcp_payload, 4);
        check(&mut c, &up(100, SYN, &[])); // the same SYN again
        assert_eq!(check(&mut c, &up(101, ACK, b"abcd")).tcp_retransmitted, 4);
        // A new ISN: a new connection, TLS this time.
        check(&mut c, &up(50, SYN, &[]));
        let o = check(&mut c, &up(51, ACK, &record(22, 10)));
        assert_eq!(o.tls_handshake, 15);
    }

    #[test]
    fn flows_beyond_the_table_fall_back_to_tcp_payload() {
        let mut c = Classifier::with_max_flows(2);
        let r = record(23, 2000);
        let flow = |port: u16, seq: u32, payload: &[u8]| {
            let dst = SocketAddr::new(addr(CLIENT).ip(), port);
            emit_tcp(addr(SERVER), dst, seq, ACK, &TS, payload)
        };
        for port in [1, 2] {
            let o = check(&mut c, &flow(port, 1, &r[..1000]));
            assert_eq!(o.tls_application, 995);
        }
        // A third flow evicts the first; its next segment starts a flow
        // seen midway, in a record body: tcp_payload.
        check(&mut c, &flow(3, 1, &r[..1000]));
        assert_eq!((c.flows(), c.evicted()), (2, 1));
        let o = check(&mut c, &flow(1, 1001, &r[1000..]));
        assert_eq!(o.tcp_payload, 1005);
        assert_eq!(c.evicted(), 2);
    }

    /// A QUIC packet's first bytes: a long header (Initial, version 1) or a
    /// short one, then `n` bytes in all.
    fn quic(first: u8, n: usize) -> Vec<u8> {
        let mut d = vec![first, 0, 0, 0, 1, 8];
        d.resize(n, 0x5a);
        d
    }

    #[test]
    fn quic_initial_and_one_rtt_datagrams() {
        let mut c = Classifier::default();
        let udp = |src: &str, dst: &str, p: &[u8]| emit_udp(addr(src), addr(dst), p);
        let o = check(&mut c, &udp(CLIENT, SERVER, &quic(0xc3, 1200)));
        let expect = |quic_handshake, quic_application, udp_payload| Overhead {
            ip_header: 20,
            transport_header: 8,
            quic_handshake,
            quic_application,
            udp_payload,
            ..Default::default()
        };
        assert_eq!(o, expect(1200, 0, 0));
        // A Handshake packet coalesced after an Initial: still the datagram.
        let mut two = quic(0xc0, 600);
        two.extend(quic(0xe0, 600));
        assert_eq!(
            check(&mut c, &udp(SERVER, CLIENT, &two)),
            expect(1200, 0, 0)
        );
        let o = check(&mut c, &udp(SERVER, CLIENT, &quic(0x41, 1252)));
        assert_eq!(o, expect(0, 1252, 0));
        // Port 443 with the fixed bit greased away: QUIC still.
        let o = check(&mut c, &udp(SERVER, CLIENT, &quic(0x01, 100)));
        assert_eq!(o, expect(0, 100, 0));
        // Another port: the fixed bit decides.
        let other = ("10.0.0.1:4433", "10.0.0.2:5000");
        let o = check(&mut c, &udp(other.0, other.1, &quic(0x4f, 100)));
        assert_eq!(o, expect(0, 100, 0));
        let o = check(
            &mut c,
            &udp("10.0.0.1:5353", "10.0.0.2:53", &[0x12, 0x34, 1, 0]),
        );
        assert_eq!(o, expect(0, 0, 4));
        assert_eq!(check(&mut c, &udp(CLIENT, SERVER, &[])), expect(0, 0, 0));
        assert_eq!(c.flows(), 0);
    }

    /// `p` (an IPv6 packet) with an extension header of next header `next`
    /// and bytes `ext` inserted after the fixed header.
    fn with_extension(mut p: Vec<u8>, next: u8, mut ext: Vec<u8>) -> Vec<u8> {
        ext[0] = p[6];
        p[6] = next;
        let len = u16::from_be_bytes([p[4], p[5]]) + ext.len() as u16;
        p[4..6].copy_from_slice(&len.to_be_bytes());
        p.splice(40..40, ext);
        p
    }

    #[test]
    fn ipv6_with_extension_headers_and_fragments() {
        let (a, b) = (addr("[fd00::1]:443"), addr("[fd00::2]:50000"));
        let mut c = Classifier::default();
        let p = emit_tcp(a, b, 1, ACK, &TS, &record(22, 100));
        let o = check(&mut c, &p);
        assert_eq!(
            o,
            Overhead {
                ip_header: 40,
                transport_header: 32,
                tls_handshake: 105,
                ..Default::default()
            }
        );
        // Destination options (8 bytes) then the next segment.
        let p = with_extension(emit_tcp(a, b, 106, ACK, &TS, b"xy"), 60, vec![0; 8]);
        let o = check(&mut c, &p);
        assert_eq!(
            (o.ip_header, o.transport_header, o.tcp_payload),
            (48, 32, 2)
        );
        // A hop-by-hop header of 16 bytes and a QUIC datagram.
        let p = with_extension(
            emit_udp(b, a, &quic(0x40, 50)),
            0,
            vec![0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        );
        let o = check(&mut c, &p);
        assert_eq!(
            (o.ip_header, o.transport_header, o.quic_application),
            (56, 8, 50)
        );
        // A first fragment (M set): no whole segment after the headers.
        let frag = vec![0, 0, 0, 1, 0, 0, 0, 9];
        let p = with_extension(emit_tcp(a, b, 108, ACK, &TS, b"xy"), 44, frag);
        let o = check(&mut c, &p);
        assert_eq!((o.ip_header, o.other), (48, 34));
        // An atomic fragment (offset 0, M clear) is a whole datagram.
        let p = with_extension(emit_tcp(a, b, 108, ACK, &TS, b"zz"), 44, vec![0; 8]);
        assert_eq!(check(&mut c, &p).tcp_payload, 2);
        // An extension header past the packet: all other.
        let mut p = with_extension(emit_udp(b, a, &[]), 60, vec![0; 8]);
        p[41] = 2; // 24 bytes from 40, in a 56-byte packet
        assert_eq!(check(&mut c, &p).other, 56);
        // One that ends where the packet does: the UDP header is missing.
        p[41] = 1;
        let o = check(&mut c, &p);
        assert_eq!((o.ip_header, o.other), (56, 0));
    }

    #[test]
    fn what_does_not_parse_is_other() {
        let mut c = Classifier::default();
        let p = up(1, ACK, b"hello");
        // IPv4 fragments, ICMP, truncated transport headers.
        let mut frag = p.clone();
        frag[6] = 0x20; // MF
        assert_eq!(check(&mut c, &frag).other, 37);
        let mut later = p.clone();
        later[7] = 0x10; // offset 16 * 8
        assert_eq!(check(&mut c, &later).other, 37);
        let mut icmp = p.clone();
        icmp[9] = 1;
        assert_eq!(check(&mut c, &icmp).other, 37);
        assert_eq!(check(&mut c, &p[..39]).other, 19);
        let mut doff = p.clone();
        doff[32] = 0xf0; // 60-byte header in 37 bytes
        assert_eq!(check(&mut c, &doff).other, 37);
        let u = emit_udp(addr(CLIENT), addr(SERVER), b"x");
        assert_eq!(check(&mut c, &u[..27]).other, 7);
        // Not IP at all.
        for g in [&[][..], &[0x50, 1, 2][..], &p[..19], &[0x60; 39][..]] {
            let o = check(&mut c, g);
            assert_eq!(o.other, g.len() as u64);
        }
    }

    #[test]
    fn never_panics_on_garbage_or_truncated_packets() {
        let mut c = Classifier::with_max_flows(16);
        let mut rng = crate::rng::Rng::new(7);
        let mut real = vec![
            emit_tcp(addr(CLIENT), addr(SERVER), 1, SYN, &SYN_OPTS, &[]),
            up(2, ACK, &record(22, 300)),
            down(1, ACK, &server_stream()),
            emit_udp(addr(CLIENT), addr(SERVER), &quic(0xc3, 1200)),
            with_extension(
                emit_tcp(addr("[fd00::1]:1"), addr("[fd00::2]:2"), 1, ACK, &TS, b"ab"),
                60,
                vec![0; 8],
            ),
        ];
        for p in real.clone() {
            for n in 0..=p.len() {
                check(&mut c, &p[..n]);
            }
        }
        for i in 0..50_000 {
            let len = (rng.next_u64() % 120) as usize;
            let mut p: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if let Some(b) = p.first_mut() {
                *b = [0x45, 0x46, 0x4f, 0x60, *b][i % 5];
            }
            check(&mut c, &p);
            // A real packet with a few bytes changed.
            let base = &mut real[i % 5];
            let at = (rng.next_u64() as usize) % base.len();
            base[at] = rng.next_u64() as u8;
            let b = base.clone();
            check(&mut c, &b);
        }
    }

    /// A TUN frame of an offloaded chunk: `ip` with the vnet header asking
    /// for `gso` segmentation in `mss`-byte segments.
    fn chunk_frame(ip: &[u8], gso: u8, l4: usize, hl: usize, mss: u16) -> Vec<u8> {
        let h = VnetHeader {
            flags: 1,
            gso_type: gso,
            hdr_len: hl as u16,
            gso_size: mss,
            csum_start: l4 as u16,
            csum_offset: if gso == GSO_UDP_L4 { 6 } else { 16 },
        };
        let mut f = vec![0u8; VNET_HDR_LEN];
        h.emit(&mut f);
        f.extend_from_slice(ip);
        f
    }

    #[test]
    fn an_offloaded_chunk_counts_as_its_segments() {
        let s = server_stream();
        let mut quic_burst = quic(0x41, 1200);
        quic_burst.extend(quic(0x42, 1200));
        quic_burst.extend(quic(0xc0, 700));
        let frames = [
            chunk_frame(&down(1, ACK, &s), GSO_TCPV4, 20, 52, 1448),
            // The same bytes again, then 500 new ones of a new record.
            chunk_frame(
                &down(1, ACK, &[&s[..], &record(23, 495)].concat()),
                GSO_TCPV4,
                20,
                52,
                1000,
            ),
            chunk_frame(
                &emit_udp(addr(SERVER), addr(CLIENT), &quic_burst),
                GSO_UDP_L4,
                20,
                28,
                1200,
            ),
            chunk_frame(&down(9, ACK, &[]), GSO_TCPV4, 20, 52, 1448),
        ];
        let (mut whole, mut each) = (Classifier::default(), Classifier::default());
        check(
            &mut whole,
            &emit_tcp(addr(SERVER), addr(CLIENT), 0, SYN | ACK, &SYN_OPTS, &[]),
        );
        check(
            &mut each,
            &emit_tcp(addr(SERVER), addr(CLIENT), 0, SYN | ACK, &SYN_OPTS, &[]),
        );
        let mut totals = (Overhead::default(), Overhead::default());
        for f in &frames {
            let chunk = GsoChunk::new_checked(f).unwrap();
            let o = whole.classify_offload(&chunk);
            assert_eq!(o.bytes(), chunk.wire_size().1 as u64);
            totals.0 += o;
            let mut segs = Overhead::default();
            chunk.segment(|seg| segs += check(&mut each, &seg[VNET_HDR_LEN..]));
            assert_eq!(o, segs);
            totals.1 += segs;
        }
        assert_eq!(totals.0, totals.1);
        assert_eq!(
            totals.0,
            Overhead {
                ip_header: 20 * (3 + 4 + 3 + 1),
                transport_header: 32 * (3 + 4 + 1) + 8 * 3,
                tcp_retransmitted: 3106,
                tls_handshake: 101,
                tls_record_overhead: 5 + 17 + 5 + 17,
                tls_application: 2983 + 478,
                quic_handshake: 700,
                quic_application: 2400,
                pure_acks: 1,
                ..Default::default()
            }
        );
    }
}
