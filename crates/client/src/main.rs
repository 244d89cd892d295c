//! satbench-get: fetch a URL over HTTP/3 (quiche) one or more times on one
//! connection, and report timings as JSON.
//!
//! ```text
//! satbench-get URL [--count N] [--cacert PEM] [--connect ADDR:PORT] [-o FILE]
//! ```
//! `--connect` sends to ADDR:PORT while the URL's host is still the TLS name.
//! Prints `{"protocol": "h3", "handshake_s", "requests": [{status, bytes, ttfb_s, total_s}], "bytes", "seconds",
//! "mbps", "timeline": {dns_s, handshake_s, first_byte_s, total_s}}`; the timeline is the first request's,
//! cumulative from the start as curl reports its phases.

use quiche::h3::NameValue;
use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const MAX_DATAGRAM: usize = 1350;

fn die(msg: &str) -> ! {
    eprintln!("satbench-get: {msg}");
    std::process::exit(2);
}

struct Args {
    url: String,
    count: usize,
    cacert: Option<String>,
    connect: Option<String>,
    out: Option<String>,
}

fn parse() -> Args {
    let mut a = Args { url: String::new(), count: 1, cacert: None, connect: None, out: None };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| die(&format!("{x} needs a value")));
        match x.as_str() {
            "--count" => a.count = val().parse().unwrap_or_else(|_| die("--count: not a number")),
            "--cacert" => a.cacert = Some(val()),
            "--connect" => a.connect = Some(val()),
            "-o" => a.out = Some(val()),
            s if s.starts_with('-') => die(&format!("unknown option {s}")),
            s => a.url = s.to_string(),
        }
    }
    if !a.url.starts_with("https://") {
        die("URL must be https://HOST[:PORT]/PATH");
    }
    a
}

fn main() {
    let a = parse();
    let rest = &a.url["https://".len()..];
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let path = if path.is_empty() { "/" } else { path };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), p.parse::<u16>().unwrap_or_else(|_| die("bad port"))),
        None => (authority.to_string(), 443),
    };
    let t_start = Instant::now();
    let target = a.connect.clone().unwrap_or(format!("{host}:{port}"));
    let peer: SocketAddr = target.to_socket_addrs().ok().and_then(|mut i| i.next()).unwrap_or_else(|| die(&format!("cannot resolve {target}")));
    let dns_s = t_start.elapsed().as_secs_f64();
    let sock = UdpSocket::bind("0.0.0.0:0").unwrap_or_else(|e| die(&format!("bind: {e}")));
    sock.set_nonblocking(true).expect("nonblocking");
    let big = 8i32 << 20;
    // SAFETY: setsockopt with a valid int.
    unsafe { libc::setsockopt(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &big as *const i32 as *const libc::c_void, 4) };
    let local = sock.local_addr().expect("local");

    let mut cfg = quiche::Config::new(quiche::PROTOCOL_VERSION).expect("config");
    cfg.set_application_protos(quiche::h3::APPLICATION_PROTOCOL).expect("alpn");
    match &a.cacert {
        Some(p) => cfg.load_verify_locations_from_file(p).unwrap_or_else(|e| die(&format!("{p}: {e}"))),
        None => cfg.verify_peer(false),
    }
    cfg.set_max_idle_timeout(30_000);
    cfg.set_max_recv_udp_payload_size(MAX_DATAGRAM);
    cfg.set_max_send_udp_payload_size(MAX_DATAGRAM);
    cfg.set_initial_max_data(256 << 20);
    cfg.set_initial_max_stream_data_bidi_local(128 << 20);
    cfg.set_initial_max_stream_data_bidi_remote(128 << 20);
    cfg.set_initial_max_stream_data_uni(1 << 20);
    cfg.set_initial_max_streams_bidi(100);
    cfg.set_initial_max_streams_uni(100);
    cfg.set_disable_active_migration(true);
    let mut scid = [0u8; quiche::MAX_CONN_ID_LEN];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut scid).expect("random");
    let scid = quiche::ConnectionId::from_ref(&scid);
    let mut conn = quiche::connect(Some(&host), &scid, local, peer, &mut cfg).unwrap_or_else(|e| die(&format!("connect: {e}")));
    let h3cfg = quiche::h3::Config::new().expect("h3 config");
    let mut h3: Option<quiche::h3::Connection> = None;
    let mut out_file = a.out.as_ref().map(|p| std::fs::File::create(p).unwrap_or_else(|e| die(&format!("{p}: {e}"))));

    let t0 = Instant::now();
    let mut handshake_s = None;
    let mut buf = vec![0u8; 65_535];
    let mut out = [0u8; MAX_DATAGRAM];
    let mut body = vec![0u8; 1 << 20];
    let mut results: Vec<serde_json::Value> = Vec::new();
    let mut current: Option<(u64, Instant, Option<f64>, u64, u16)> = None;
    let (mut first_byte_s, mut first_done_s): (Option<f64>, Option<f64>) = (None, None);
    let deadline = t0 + Duration::from_secs(600);
    loop {
        // Send everything quiche has (the client does not pace).
        loop {
            match conn.send(&mut out) {
                Ok((n, info)) => {
                    let _ = sock.send_to(&out[..n], info.to);
                }
                Err(quiche::Error::Done) => break,
                Err(e) => die(&format!("send: {e}")),
            }
        }
        if conn.is_closed() || results.len() == a.count || Instant::now() > deadline {
            break;
        }
        // A request ready to go (the previous one just finished) goes out now.
        let ready_to_request = h3.is_some() && current.is_none() && results.len() < a.count;
        let wait = if ready_to_request { Duration::ZERO } else { conn.timeout().unwrap_or(Duration::from_secs(1)) };
        let mut pfd = libc::pollfd { fd: sock.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ts = libc::timespec { tv_sec: wait.as_secs() as i64, tv_nsec: wait.subsec_nanos() as i64 };
        // SAFETY: one pollfd, valid timespec.
        let n = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
        if n == 0 && !ready_to_request {
            conn.on_timeout();
        }
        loop {
            match sock.recv_from(&mut buf) {
                Ok((n, from)) => {
                    let _ = conn.recv(&mut buf[..n], quiche::RecvInfo { from, to: local });
                }
                Err(_) => break,
            }
        }
        if conn.is_established() && handshake_s.is_none() {
            handshake_s = Some(t_start.elapsed().as_secs_f64());
            h3 = Some(quiche::h3::Connection::with_transport(&mut conn, &h3cfg).unwrap_or_else(|e| die(&format!("h3: {e}"))));
        }
        let Some(h) = h3.as_mut() else { continue };
        if current.is_none() && results.len() < a.count {
            let req = [
                quiche::h3::Header::new(b":method", b"GET"),
                quiche::h3::Header::new(b":scheme", b"https"),
                quiche::h3::Header::new(b":authority", authority.as_bytes()),
                quiche::h3::Header::new(b":path", path.as_bytes()),
                quiche::h3::Header::new(b"user-agent", b"satbench-get"),
            ];
            match h.send_request(&mut conn, &req, true) {
                Ok(sid) => current = Some((sid, Instant::now(), None, 0, 0)),
                Err(quiche::h3::Error::StreamBlocked) => {}
                Err(e) => die(&format!("request: {e}")),
            }
        }
        loop {
            match h.poll(&mut conn) {
                Ok((sid, quiche::h3::Event::Headers { list, .. })) => {
                    if first_byte_s.is_none() {
                        first_byte_s = Some(t_start.elapsed().as_secs_f64());
                    }
                    if let Some(c) = current.as_mut().filter(|c| c.0 == sid) {
                        c.2 = Some(c.1.elapsed().as_secs_f64());
                        c.4 = list.iter().find(|h| h.name() == b":status").and_then(|h| std::str::from_utf8(h.value()).ok()?.parse().ok()).unwrap_or(0);
                    }
                }
                Ok((sid, quiche::h3::Event::Data)) => {
                    while let Ok(n) = h.recv_body(&mut conn, sid, &mut body) {
                        if let Some(c) = current.as_mut().filter(|c| c.0 == sid) {
                            c.3 += n as u64;
                        }
                        if let Some(f) = out_file.as_mut() {
                            let _ = f.write_all(&body[..n]);
                        }
                    }
                }
                Ok((sid, quiche::h3::Event::Finished)) => {
                    if let Some(c) = current.take_if(|c| c.0 == sid) {
                        if first_done_s.is_none() {
                            first_done_s = Some(t_start.elapsed().as_secs_f64());
                        }
                        results.push(serde_json::json!({"status": c.4, "bytes": c.3, "ttfb_s": c.2, "total_s": c.1.elapsed().as_secs_f64()}));
                        out_file = None; // only the first body is written
                    }
                }
                Ok((_, quiche::h3::Event::Reset(e))) => die(&format!("stream reset by server: {e}")),
                Ok(_) => {}
                Err(quiche::h3::Error::Done) => break,
                Err(e) => die(&format!("h3: {e}")),
            }
        }
    }
    let _ = conn.close(true, 0x100, b"");
    let _ = conn.send(&mut out).map(|(n, i)| sock.send_to(&out[..n], i.to));
    if results.len() < a.count {
        die(&format!("only {} of {} responses before the connection ended (peer {:?}, local {:?}, timed out {})", results.len(), a.count, conn.peer_error(), conn.local_error(), conn.is_timed_out()));
    }
    let bytes: u64 = results.iter().map(|r| r["bytes"].as_u64().unwrap_or(0)).sum();
    // Throughput over the requests only, from the end of the handshake.
    let seconds = t_start.elapsed().as_secs_f64() - handshake_s.unwrap_or(0.0);
    println!(
        "{}",
        serde_json::json!({"protocol": "h3", "handshake_s": handshake_s, "requests": results, "bytes": bytes,
            "seconds": seconds, "mbps": bytes as f64 * 8.0 / seconds / 1e6,
            // The first request's phases, cumulative from the start as curl reports them
            // (QUIC has no separate connect: its handshake is connect and TLS at once).
            "timeline": {"dns_s": dns_s, "handshake_s": handshake_s, "first_byte_s": first_byte_s,
                         "total_s": first_done_s}})
    );
}
