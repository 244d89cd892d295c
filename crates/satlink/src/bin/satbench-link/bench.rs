//! `--bench-model`: what the link model costs per packet, in simulated time.
//!
//! Two GEO links with the same delays and about the same rates:
//! - plain: forward 10 Mbit/s, return 2 Mbit/s, drop-tail queues;
//! - access: forward DVB-S2 ACM at 3 Mbaud with GSE, C/N 13 dB in clear sky
//!   (16APSK 5/6, 9.9 Mbit/s) under a looped 3 dB rain fade (16APSK 2/3,
//!   7.9 Mbit/s) that makes the loop change MODCOD; return bandwidth on
//!   demand (opensand timing, RBDC up to 2 Mbit/s on a 2 Mbit/s carrier)
//!   with RLE.
//!
//! Forward: 1500-byte packets at 7.1 Mbit/s; return: one 60-byte ACK per
//! two forward packets. Each direction is driven alone
//! through `on_packet`, `poll_transmit` and `poll_timeout`, as the front end
//! does; the figures are wall-clock time per packet of each direction (the
//! best of 3 runs) and their mean. For scale, `io_ns_per_packet` is a 1500-byte datagram
//! written and read back on a UNIX socket pair: about what each packet costs
//! the front end in system calls (one TUN read, one TUN write).

use satlink::config::LinkConfig;
use satlink::{Direction, Instant};
use serde::Serialize;
use std::hint::black_box;
use std::time::Duration;

/// Packets per direction by default.
pub const PACKETS: u64 = 200_000;

const PLAIN: &str = r#"{"forward": {"rate": {"kind": "constant", "bps": 10e6},
    "delay": {"kind": "constant", "ms": 265}, "queue": {"limit": {"kind": "packets", "n": 1000}}},
  "return": {"rate": {"kind": "constant", "bps": 2e6},
    "delay": {"kind": "constant", "ms": 265}, "queue": {"limit": {"kind": "packets", "n": 1000}}}}"#;

const ACCESS: &str = r#"{"forward": {"delay": {"kind": "constant", "ms": 265},
    "queue": {"limit": {"kind": "packets", "n": 1000}},
    "access": {"kind": "acm", "symbol_rate_baud": 3e6}},
  "return": {"rate": {"kind": "constant", "bps": 2e6},
    "delay": {"kind": "constant", "ms": 265}, "queue": {"limit": {"kind": "packets", "n": 1000}},
    "access": {"kind": "dama"}},
  "terminals": [{"forward": {"clear_sky_cn_db": 13,
      "fade": {"points": [[0, 0], [20, 0], [25, 3], [30, 0]], "loop": true}},
    "return": {"rbdc_max_bps": 2e6}}]}"#;

/// The figures `--bench-model` prints (ns per packet: both directions
/// together, and each alone).
#[derive(Serialize)]
pub struct BenchReport {
    packets_per_direction: u64,
    plain_ns_per_packet: f64,
    access_ns_per_packet: f64,
    /// How much more the access model costs per packet, percent.
    access_overhead_pct: f64,
    plain_forward_ns: f64,
    plain_return_ns: f64,
    /// ACM with GSE.
    access_forward_ns: f64,
    /// Bandwidth on demand with RLE.
    access_return_ns: f64,
    /// A datagram write and read on a socket pair, for scale.
    io_ns_per_packet: f64,
    /// Model time the traffic spans.
    simulated_s: f64,
}

impl BenchReport {
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("serialise bench")
    }
}

/// Drive one direction with `n` packets of `bytes`, one every `gap`; returns
/// the packets delivered.
fn drive(d: &mut Direction<u32>, n: u64, bytes: u32, gap: Duration) -> u64 {
    let mut delivered = 0;
    let mut i = 0u64;
    let gap_ns = gap.as_nanos() as u64;
    loop {
        let arrival = (i < n).then(|| Instant::from_nanos(i * gap_ns));
        let next = match (arrival, d.poll_timeout()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => return delivered,
            },
        };
        while d.poll_transmit(next).is_some() {
            delivered += 1;
        }
        if arrival.is_some_and(|a| a <= next) {
            d.on_packet(next, i as u32, bytes, 1);
            i += 1;
        }
    }
}

/// Wall time per packet of each direction of `config`: (forward, return),
/// the best of 3 runs each.
fn cost(config: &str, n: u64) -> (f64, f64) {
    let c = LinkConfig::from_json(config).expect("bench configuration");
    let fwd_gap = Duration::from_secs_f64(1500.0 * 8.0 / (0.8 * 8.9e6));
    let (mut fwd, mut ret) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..3 {
        let (mut f, mut r): (Direction<u32>, Direction<u32>) =
            c.build_directions(0).expect("bench model");
        let t0 = std::time::Instant::now();
        black_box(drive(&mut f, n, 1500, fwd_gap));
        fwd = fwd.min(t0.elapsed().as_nanos() as f64 / n as f64);
        let t0 = std::time::Instant::now();
        black_box(drive(&mut r, n, 60, fwd_gap * 2));
        ret = ret.min(t0.elapsed().as_nanos() as f64 / n as f64);
    }
    (fwd, ret)
}

/// A 1500-byte datagram written and read back on a UNIX socket pair.
fn io_cost(n: u64) -> f64 {
    let (a, b) = std::os::unix::net::UnixDatagram::pair().expect("socketpair");
    let buf = [0u8; 1500];
    let mut rd = [0u8; 2048];
    let n = n.min(100_000);
    let t0 = std::time::Instant::now();
    for _ in 0..n {
        a.send(&buf).expect("send");
        black_box(b.recv(&mut rd).expect("recv"));
    }
    t0.elapsed().as_nanos() as f64 / n as f64
}

pub fn run(n: u64) -> BenchReport {
    let (pf, pr) = cost(PLAIN, n);
    let (af, ar) = cost(ACCESS, n);
    let plain = (pf + pr) / 2.0;
    let access = (af + ar) / 2.0;
    BenchReport {
        packets_per_direction: n,
        plain_ns_per_packet: plain,
        access_ns_per_packet: access,
        access_overhead_pct: (access / plain - 1.0) * 100.0,
        plain_forward_ns: pf,
        plain_return_ns: pr,
        access_forward_ns: af,
        access_return_ns: ar,
        io_ns_per_packet: io_cost(n),
        simulated_s: n as f64 * 1500.0 * 8.0 / (0.8 * 8.9e6),
    }
}
