//! `--bench-overhead`: what the overhead classifier costs per packet.
//!
//! Packets are built once and `Classifier::classify_into` is timed over
//! them, as the front end calls it (on a packet just read, so in cache,
//! adding to the direction's totals):
//! - `tls_download`: one flow of 1500-byte IPv4 segments (TCP with
//!   timestamps, 1448 bytes of payload) carrying TLS application_data
//!   records of 8 KiB, headers straddling segments;
//! - `pure_ack`: 52-byte ACKs (no flow state);
//! - `quic`: 1280-byte QUIC 1-RTT datagrams (no flow state);
//! - `tls_10k_flows`: the download's segments dealt round-robin over 10,000
//!   flows (a table of 10,000 entries, cold in the caches);
//! - `tls_100k_flows`: over 100,000 flows, more than the table holds: every
//!   segment evicts a flow and makes one (the worst case).
//!
//! Each figure is the best of 3 runs, wall-clock nanoseconds per packet,
//! with a sequence number (and for the flow cases an address) written into
//! the packet before each call, as a new packet would bring.

use satlink::overhead::{Classifier, Overhead};
use satlink::wire::{emit_tcp, emit_udp, tcp_flags};
use serde::Serialize;
use std::hint::black_box;
use std::net::SocketAddr;

/// Packets per case by default.
pub const PACKETS: u64 = 1_000_000;
/// Segments in the ring the download cycles through.
const RING: usize = 1024;
const MSS: usize = 1448;
/// A record with its header: the stream's period (RING * MSS) is 181 records.
const RECORD: usize = 8192;
/// Offsets in the IPv4 + TCP packets of the destination address and the
/// sequence number.
const DST: usize = 16;
const SEQ: usize = 24;

/// The figures `--bench-overhead` prints (ns per packet).
#[derive(Serialize)]
pub struct OverheadBench {
    packets_per_case: u64,
    tls_download_ns: f64,
    pure_ack_ns: f64,
    quic_ns: f64,
    tls_10k_flows_ns: f64,
    tls_100k_flows_ns: f64,
    /// The classifier's parts of the download case, for a look at what it saw.
    tls_download_parts: Overhead,
}

impl OverheadBench {
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("serialise bench")
    }
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("bench address")
}

/// The server's segments of a TLS stream of 8 KiB records, `RING` of them.
fn download_ring() -> Vec<Vec<u8>> {
    let mut stream = Vec::with_capacity(RING * MSS);
    while stream.len() < RING * MSS {
        let body = RECORD - 5;
        stream.extend_from_slice(&[23, 3, 3]);
        stream.extend_from_slice(&(body as u16).to_be_bytes());
        stream.extend((0..body).map(|i| i as u8));
    }
    let ts = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
    stream
        .chunks(MSS)
        .map(|p| {
            let (s, c) = (addr("198.18.3.10:443"), addr("10.0.0.1:50000"));
            emit_tcp(s, c, 0, tcp_flags::ACK, &ts, p)
        })
        .collect()
}

/// Best of 3 runs of `n` calls of `step(classifier, i, totals)`, ns per call.
fn time(n: u64, mut step: impl FnMut(&mut Classifier, u64, &mut Overhead)) -> (f64, Overhead) {
    let mut best = f64::INFINITY;
    let mut parts = Overhead::default();
    for _ in 0..3 {
        let mut c = Classifier::default();
        let mut total = Overhead::default();
        let t0 = std::time::Instant::now();
        for i in 0..n {
            step(&mut c, i, &mut total);
        }
        best = best.min(t0.elapsed().as_nanos() as f64 / n as f64);
        parts = black_box(total);
    }
    (best, parts)
}

/// Segment `k` of a flow's download, addressed to flow `flow`'s client.
fn segment(ring: &mut [Vec<u8>], flow: u32, k: u64) -> &[u8] {
    let p = &mut ring[k as usize % RING];
    p[DST..DST + 4].copy_from_slice(&(0x0a00_0000 | flow).to_be_bytes());
    let seq = 1u32.wrapping_add((k as u32).wrapping_mul(MSS as u32));
    p[SEQ..SEQ + 4].copy_from_slice(&seq.to_be_bytes());
    p
}

fn flows(ring: &mut [Vec<u8>], n: u64, flows: u64) -> f64 {
    time(n, |c, i, o| {
        let p = segment(ring, (i % flows) as u32, i / flows);
        c.classify_into(black_box(p), o)
    })
    .0
}

pub fn run(n: u64) -> OverheadBench {
    let mut ring = download_ring();
    let (tls, parts) = time(n, |c, i, o| {
        c.classify_into(black_box(segment(&mut ring, 1, i)), o)
    });
    let ack = emit_tcp(
        addr("10.0.0.1:50000"),
        addr("198.18.3.10:443"),
        1,
        tcp_flags::ACK,
        &[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
        &[],
    );
    let (pure_ack, _) = time(n, |c, _, o| c.classify_into(black_box(&ack), o));
    let mut dgram = vec![0x41; 1280 - 28];
    dgram[1..9].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
    let quic_packet = emit_udp(addr("198.18.3.10:443"), addr("10.0.0.1:50000"), &dgram);
    let (quic, _) = time(n, |c, _, o| c.classify_into(black_box(&quic_packet), o));
    OverheadBench {
        packets_per_case: n,
        tls_download_ns: tls,
        pure_ack_ns: pure_ack,
        quic_ns: quic,
        tls_10k_flows_ns: flows(&mut ring, n, 10_000),
        tls_100k_flows_ns: flows(&mut ring, n, 100_000),
        tls_download_parts: parts,
    }
}
