//! Fuzz target `overhead` (`fuzzkit`, on stable Rust): the protocol-overhead
//! classifier fed a sequence of packets and TUN frames. Seeds in
//! `fuzz-corpus/overhead/`, written by the ignored test `write_seeds`.
//!
//! An input is records `[kind][length: u16 BE][bytes]` (the last takes
//! what is left): kind even, an IP packet; odd, a TUN frame (virtio-net
//! header, then an IP packet), handled as the front end does: a plain frame
//! classified as a packet, an offloaded chunk classified whole (as an
//! unsegmented direction offers it) and, on a second classifier, segment by
//! segment (as a segmenting one does); a chunk `GsoChunk::new_checked`
//! refuses is not offered.
//!
//! Invariants: no panic; each packet's byte parts add up to its length and
//! a chunk's to its `wire_size`; at most one control segment per packet;
//! the two classifiers agree packet by packet and in total as long as the
//! chunks are ones the kernel makes (no SYN, segments of 5 bytes or more,
//! and headers the packet parser reads as the chunk's offsets say), after
//! which they may part; a classifier holding 2 flows keeps the same sums.
//!
//! `cargo test` runs it for half a second;
//! `SATBENCH_FUZZ_SECONDS=60 cargo test --release -p satlink --test fuzz_overhead`
//! for a minute.

use fuzzkit::{Config, Features};
use satlink::overhead::{Classifier, Overhead};
use satlink::wire::{
    emit_tcp, emit_udp, tcp_flags, GsoChunk, VnetHeader, GSO_TCPV4, GSO_TCPV6, GSO_UDP_L4,
    VNET_HDR_LEN,
};
use std::net::SocketAddr;

fn corpus(target: &str) -> String {
    format!("{}/fuzz-corpus/{target}", env!("CARGO_MANIFEST_DIR"))
}

/// The records of an input: (kind, bytes).
fn records(mut b: &[u8]) -> Vec<(u8, &[u8])> {
    let mut v = Vec::new();
    while let [kind, hi, lo, rest @ ..] = b {
        let n = (u16::from_be_bytes([*hi, *lo]) as usize).min(rest.len());
        v.push((*kind, &rest[..n]));
        b = &rest[n..];
    }
    v
}

/// Which byte parts are not zero, and the control counts: a feature.
fn shape(o: &Overhead) -> u64 {
    let parts = [
        o.ip_header,
        o.transport_header,
        o.tcp_payload,
        o.tcp_retransmitted,
        o.tls_handshake,
        o.tls_record_overhead,
        o.tls_application,
        o.quic_handshake,
        o.quic_application,
        o.udp_payload,
        o.other,
        o.pure_acks,
        o.syn_fin_rst,
    ];
    parts
        .iter()
        .enumerate()
        .fold(0, |m, (i, &x)| m | ((x != 0) as u64) << i)
}

fn check_packet(o: &Overhead, len: u64, what: &str) {
    assert_eq!(o.bytes(), len, "{what}: parts {o:?}");
    assert!(o.pure_acks + o.syn_fin_rst <= 1, "{what}: {o:?}");
}

/// Offsets the packet parser reads from `segment` are the chunk's (l4, hl).
fn parses_as(segment: &[u8], l4: usize, hl: usize) -> bool {
    let o = Classifier::default().classify(segment);
    o.ip_header == l4 as u64 && o.transport_header == (hl - l4) as u64
}

struct Run {
    whole: Classifier,
    each: Classifier,
    small: Classifier,
    totals: [Overhead; 3],
    agree: bool,
}

impl Run {
    fn packet(&mut self, p: &[u8], f: &mut Features) {
        let o = [
            self.whole.classify(p),
            self.each.classify(p),
            self.small.classify(p),
        ];
        for (i, x) in o.iter().enumerate() {
            check_packet(x, p.len() as u64, "packet");
            self.totals[i] += *x;
        }
        if self.agree {
            assert_eq!(o[0], o[1], "the same packet, two classifiers in step");
        }
        f.add(1000 + shape(&o[0]));
    }

    fn chunk(&mut self, c: &GsoChunk, f: &mut Features) {
        let (n, bytes) = c.wire_size();
        let whole = self.whole.classify_offload(c);
        check_packet(&whole, bytes as u64, "chunk");
        let mut segs = Vec::new();
        c.segment(|s| segs.push(s));
        let (l4, hl) = (c.transport_offset(), c.headers_len());
        let ip = c.packet();
        let syn = c.protocol() == 6 && ip[l4 + 13] & tcp_flags::SYN != 0;
        let kernel_like =
            !syn && c.segment_size() >= 5 && parses_as(&segs[0][VNET_HDR_LEN..], l4, hl);
        let mut each = Overhead::default();
        for s in &segs {
            let p = &s[VNET_HDR_LEN..];
            let o = self.each.classify(p);
            check_packet(&o, p.len() as u64, "segment");
            each += o;
            let o = self.small.classify(p);
            check_packet(&o, p.len() as u64, "segment (2 flows)");
            self.totals[2] += o;
        }
        assert_eq!(each.bytes(), bytes as u64);
        self.totals[0] += whole;
        self.totals[1] += each;
        self.agree &= kernel_like;
        if self.agree {
            assert_eq!(whole, each, "a chunk whole and as its {n} segments");
        }
        f.add(2000 + shape(&whole));
        f.add(3000 + kernel_like as u64);
        f.add_count(3010, n as usize);
    }
}

#[test]
fn fuzz_overhead() {
    fuzzkit::run(
        Config::new("overhead", corpus("overhead"))
            .dict::<&[u8]>(&[
                b"\x16\x03\x01",
                b"\x17\x03\x03",
                b"\x14\x03\x03\x00\x01\x01",
                b"\x15\x03\x03\x00\x02",
                b"\x00\x11",
                b"\x48\x00",
                b"\xc3\x00\x00\x00\x01",
                b"\x40",
                b"\x45",
                b"\x46",
                b"\x60",
                b"\x06",
                b"\x11",
                b"\x2c",
                b"\x3c",
                b"\x01\xbb",
                b"\x02",
                b"\x12",
                b"\x10",
                b"\x11",
                b"\x04",
                b"\x50",
                b"\x80",
                b"\xff\xff\xff\xff",
                b"\x01\x01\x05\xa8\x00\x14\x00\x10",
                b"\x01\x05\x04\xb0\x00\x14\x00\x06",
            ])
            .max_len(8192),
        |b, f| {
            let mut run = Run {
                whole: Classifier::default(),
                each: Classifier::default(),
                small: Classifier::with_max_flows(2),
                totals: [Overhead::default(); 3],
                agree: true,
            };
            for (kind, r) in records(b) {
                if kind % 2 == 0 {
                    run.packet(r, f);
                    continue;
                }
                let Some(h) = VnetHeader::parse(r) else {
                    f.add(1);
                    continue;
                };
                if !h.is_gso() {
                    run.packet(&r[VNET_HDR_LEN..], f);
                    continue;
                }
                match GsoChunk::new_checked(r) {
                    Ok(c) => run.chunk(&c, f),
                    Err(e) => f.add_bytes(
                        2,
                        format!("{e:?}").split(' ').next().unwrap_or("").as_bytes(),
                    ),
                }
            }
            let [w, e, s] = run.totals;
            assert_eq!(w.bytes(), e.bytes(), "totals");
            assert_eq!(w.bytes(), s.bytes(), "totals with 2 flows");
            if run.agree {
                assert_eq!(w, e, "totals of classifiers in step");
            }
            f.add_count(4000, run.whole.flows());
            f.add_count(4100, w.tls_application as usize);
            f.add(4200 + run.agree as u64);
        },
    );
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn push(input: &mut Vec<u8>, kind: u8, b: &[u8]) {
    input.push(kind);
    input.extend_from_slice(&(b.len() as u16).to_be_bytes());
    input.extend_from_slice(b);
}

fn record(t: u8, body: usize) -> Vec<u8> {
    let mut r = vec![t, 3, 3];
    r.extend_from_slice(&(body as u16).to_be_bytes());
    r.extend((0..body).map(|i| i as u8));
    r
}

/// A TUN frame asking for segmentation of `ip` in `mss`-byte segments.
fn gso_frame(ip: &[u8], gso: u8, l4: usize, hl: usize, mss: u16) -> Vec<u8> {
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

/// The committed seeds: `cargo test --release -p satlink --test
/// fuzz_overhead -- --ignored write_seeds` rewrites them.
#[test]
#[ignore]
fn write_seeds() {
    use tcp_flags::{ACK, FIN, PSH, SYN};
    let (c, s) = (addr("198.18.1.10:50000"), addr("198.18.3.10:443"));
    let ts = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
    let syn_opts = [
        2, 4, 5, 180, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7,
    ];
    let mut seeds: Vec<(&str, Vec<u8>)> = Vec::new();

    // A TLS 1.3 exchange: handshake, a ClientHello in two segments, a
    // record across segments, a full and a partial retransmission, FINs.
    let mut t = Vec::new();
    push(&mut t, 0, &emit_tcp(c, s, 1000, SYN, &syn_opts, &[]));
    push(&mut t, 0, &emit_tcp(s, c, 0, SYN | ACK, &syn_opts, &[]));
    push(&mut t, 0, &emit_tcp(c, s, 1001, ACK, &ts, &[]));
    let hello = record(22, 512);
    push(&mut t, 0, &emit_tcp(c, s, 1001, ACK, &ts, &hello[..300]));
    push(
        &mut t,
        0,
        &emit_tcp(c, s, 1301, PSH | ACK, &ts, &hello[300..]),
    );
    let mut down = record(22, 90);
    down.extend(record(20, 1));
    down.extend(record(23, 3000));
    for (i, p) in down.chunks(1448).enumerate() {
        push(&mut t, 0, &emit_tcp(s, c, 1 + 1448 * i as u32, ACK, &ts, p));
    }
    push(
        &mut t,
        0,
        &emit_tcp(s, c, 1449, ACK, &ts, &down[1448..2896]),
    );
    push(&mut t, 0, &emit_tcp(s, c, 2107, ACK, &ts, &down[2106..]));
    push(&mut t, 0, &emit_tcp(c, s, 1518, FIN | ACK, &ts, &[]));
    seeds.push(("tls-exchange", t));

    // Cleartext HTTP with retransmissions.
    let mut h = Vec::new();
    push(
        &mut h,
        0,
        &emit_tcp(
            c,
            addr("198.18.3.10:80"),
            7,
            ACK,
            &ts,
            b"GET / HTTP/1.1\r\nHost: s\r\n\r\n",
        ),
    );
    let body = vec![b'a'; 1000];
    for seq in [1, 1001, 1, 501] {
        push(
            &mut h,
            0,
            &emit_tcp(addr("198.18.3.10:80"), c, seq, ACK, &ts, &body),
        );
    }
    seeds.push(("http-retransmit", h));

    // QUIC: an Initial, a coalesced Handshake, 1-RTT, and other UDP.
    let mut q = Vec::new();
    let mut initial = vec![0xc3, 0, 0, 0, 1, 8];
    initial.resize(1200, 0);
    push(&mut q, 0, &emit_udp(c, s, &initial));
    let mut coalesced = initial[..600].to_vec();
    coalesced.extend_from_slice(&[0xe0, 0, 0, 0, 1]);
    coalesced.resize(1200, 1);
    push(&mut q, 0, &emit_udp(s, c, &coalesced));
    push(&mut q, 0, &emit_udp(s, c, &[0x41; 1252]));
    push(
        &mut q,
        0,
        &emit_udp(
            addr("10.0.0.1:5353"),
            addr("10.0.0.2:53"),
            &[0x12, 0x34, 1, 0],
        ),
    );
    seeds.push(("quic", q));

    // IPv6: a destination-options header, then a fragment.
    let (a6, b6) = (addr("[fd00::1]:443"), addr("[fd00::2]:50000"));
    let mut v = Vec::new();
    push(&mut v, 0, &emit_tcp(a6, b6, 1, ACK, &ts, &record(22, 100)));
    for (next, ext) in [
        (60u8, vec![6u8, 0, 1, 4, 0, 0, 0, 0]),
        (44, vec![6, 0, 0, 1, 0, 0, 0, 9]),
    ] {
        let mut p = emit_tcp(a6, b6, 106, ACK, &ts, b"xy");
        p[6] = next;
        p[5] += 8;
        p.splice(40..40, ext);
        push(&mut v, 0, &p);
    }
    seeds.push(("ipv6-ext", v));

    // Offloaded chunks: TCP over IPv4 and IPv6, UDP (QUIC) over IPv4.
    let mut g = Vec::new();
    push(
        &mut g,
        1,
        &gso_frame(&emit_tcp(s, c, 1, ACK, &ts, &down), GSO_TCPV4, 20, 52, 1448),
    );
    push(
        &mut g,
        1,
        &gso_frame(
            &emit_tcp(a6, b6, 1, ACK, &ts, &down),
            GSO_TCPV6,
            40,
            72,
            1428,
        ),
    );
    let mut burst = vec![0x41; 2400];
    burst[1200] = 0x42;
    push(
        &mut g,
        1,
        &gso_frame(&emit_udp(s, c, &burst), GSO_UDP_L4, 20, 28, 1200),
    );
    let mut plain = vec![0u8; VNET_HDR_LEN];
    plain.extend(emit_tcp(c, s, 1001, ACK, &ts, &[]));
    push(&mut g, 1, &plain);
    seeds.push(("gso", g));

    seeds.push((
        "garbage",
        (0..200u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect(),
    ));

    let dir = corpus("overhead");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, b) in seeds {
        std::fs::write(format!("{dir}/{name}"), b).unwrap();
    }
}

#[test]
fn records_split_as_documented() {
    assert_eq!(records(&[]), vec![]);
    assert_eq!(
        records(&[0, 0, 2, 9, 8, 1, 0, 5, 7]),
        vec![(0, &[9, 8][..]), (1, &[7][..])]
    );
    assert_eq!(records(&[4, 0]), vec![]);
}
