//! satbench-probe: round-trip time and loss over UDP.
//!
//! ```text
//! satbench-probe echo [--port P] [--duration-s S]
//! satbench-probe ping HOST:PORT [--count N] [--interval-ms X] [--size B] [--wait-ms W]
//! ```
//! `echo` answers every datagram with itself until it has been idle for
//! `--duration-s` (default 60 s). `ping` sends `N` numbered probes, one every
//! `X` ms, waits `W` ms after the last for stragglers, and prints one JSON
//! object: counts, and the RTT of every probe in ms (null if lost).

use std::net::{ToSocketAddrs, UdpSocket};
use std::process::exit;
use std::time::{Duration, Instant};

fn die(msg: &str) -> ! {
    eprintln!("satbench-probe: {msg}");
    exit(2);
}

struct Opts {
    rest: Vec<String>,
    port: u16,
    duration_s: f64,
    count: u32,
    interval_ms: f64,
    size: usize,
    wait_ms: f64,
}

fn parse(args: &[String]) -> Opts {
    let mut o = Opts {
        rest: vec![],
        port: 9000,
        duration_s: 60.0,
        count: 100,
        interval_ms: 10.0,
        size: 64,
        wait_ms: 2000.0,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut num = |name: &str| -> f64 {
            it.next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| die(&format!("{name} needs a number")))
        };
        match a.as_str() {
            "--port" => o.port = num("--port") as u16,
            "--duration-s" => o.duration_s = num("--duration-s"),
            "--count" => o.count = num("--count") as u32,
            "--interval-ms" => o.interval_ms = num("--interval-ms"),
            "--size" => o.size = num("--size") as usize,
            "--wait-ms" => o.wait_ms = num("--wait-ms"),
            s if s.starts_with("--") => die(&format!("unknown option {s}")),
            s => o.rest.push(s.to_string()),
        }
    }
    if o.size < 12 {
        die("--size must be at least 12 bytes");
    }
    o
}

fn echo(o: &Opts) {
    let sock = UdpSocket::bind(("0.0.0.0", o.port))
        .unwrap_or_else(|e| die(&format!("bind port {}: {e}", o.port)));
    sock.set_read_timeout(Some(Duration::from_secs_f64(o.duration_s.max(0.001))))
        .expect("timeout");
    println!("{{\"listening\": {}}}", o.port);
    let mut buf = [0u8; 65_536];
    loop {
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                let _ = sock.send_to(&buf[..n], from);
            }
            Err(_) => return, // idle for the whole duration
        }
    }
}

fn ping(o: &Opts) {
    let target = o
        .rest
        .first()
        .unwrap_or_else(|| die("ping needs HOST:PORT"));
    let addr = target
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .unwrap_or_else(|| die(&format!("cannot resolve {target}")));
    let sock = UdpSocket::bind(("0.0.0.0", 0)).unwrap_or_else(|e| die(&format!("bind: {e}")));
    sock.connect(addr)
        .unwrap_or_else(|e| die(&format!("connect {addr}: {e}")));
    let start = Instant::now();
    let interval = Duration::from_secs_f64(o.interval_ms / 1e3);
    let mut rtt: Vec<Option<f64>> = vec![None; o.count as usize];
    let mut sent_at: Vec<Option<Duration>> = vec![None; o.count as usize];
    let mut buf = vec![0u8; o.size.max(65_536)];
    let mut payload = vec![0u8; o.size];
    let mut next = 0u32;
    let mut received = 0u32;
    let mut duplicates = 0u32;
    let deadline_after_last = Duration::from_secs_f64(o.wait_ms / 1e3);
    loop {
        let now = start.elapsed();
        if next < o.count && now >= interval * next {
            payload[..4].copy_from_slice(&next.to_be_bytes());
            payload[4..12].copy_from_slice(&(now.as_nanos() as u64).to_be_bytes());
            if sock.send(&payload).is_ok() {
                sent_at[next as usize] = Some(now);
            }
            next += 1;
            continue;
        }
        let wake = if next < o.count {
            interval * next
        } else {
            if received == o.count {
                break;
            }
            interval * o.count.saturating_sub(1) + deadline_after_last
        };
        let now = start.elapsed();
        if next >= o.count && now >= wake {
            break;
        }
        let wait = wake.saturating_sub(now).max(Duration::from_micros(1));
        sock.set_read_timeout(Some(wait)).expect("timeout");
        if let Ok(n) = sock.recv(&mut buf) {
            let t = start.elapsed();
            if n >= 12 {
                let seq = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
                let sent_ns = u64::from_be_bytes(buf[4..12].try_into().unwrap());
                if seq < rtt.len() && sent_at[seq].is_some() {
                    if rtt[seq].is_some() {
                        duplicates += 1;
                    } else {
                        rtt[seq] = Some((t.as_nanos() as u64 - sent_ns) as f64 / 1e6);
                        received += 1;
                    }
                }
            }
        }
    }
    let sent = sent_at.iter().filter(|s| s.is_some()).count();
    let out = serde_json::json!({
        "target": addr.to_string(),
        "sent": sent,
        "received": received,
        "duplicates": duplicates,
        "size": o.size,
        "interval_ms": o.interval_ms,
        "rtt_ms": rtt,
    });
    println!("{out}");
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        die("usage: satbench-probe echo|ping ...")
    };
    let o = parse(&args[1..]);
    match cmd.as_str() {
        "echo" => echo(&o),
        "ping" => ping(&o),
        other => die(&format!("unknown command {other:?} (echo, ping)")),
    }
}
