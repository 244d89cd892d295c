//! Hostile clients against the built server (issue 16, item 5): each test
//! starts `satbench-server` on 127.0.0.1 with ephemeral ports, attacks it
//! with hand-made bytes, frames or packets in loops bounded in count and
//! time, and checks that the server is still running, that its resident
//! memory (VmRSS of /proc/PID/status) stayed bounded, and that a
//! well-behaved client is served during the attack and after it.
//!
//! Loopback only; every test ends in well under 20 s. Memory figures are
//! printed (`cargo test --release -p satbench-server --test hostile --
//! --nocapture`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_satbench-server");
const INDEX: &[u8] = b"<p>hello, hostile world</p>\n";
const BIG: usize = 8 << 20;

fn certs() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/certs")
}

/// A port free for both TCP and UDP on 127.0.0.1 (at the time of asking).
fn free_port() -> u16 {
    loop {
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = u.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// A running server over a fresh root (index.html and an 8 MiB big.bin).
struct Srv {
    child: Child,
    http: u16,
    https: u16,
    dir: PathBuf,
    name: &'static str,
    rss0: u64,
    peak: u64,
}

impl Srv {
    fn start(name: &'static str, args: &[&str]) -> Srv {
        let dir =
            std::env::temp_dir().join(format!("satbench-hostile-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root")).unwrap();
        std::fs::write(dir.join("root/index.html"), INDEX).unwrap();
        std::fs::write(dir.join("root/big.bin"), vec![7u8; BIG]).unwrap();
        let (http, mut https) = (free_port(), free_port());
        while https == http {
            https = free_port();
        }
        let c = certs();
        let mut child = Command::new(BIN)
            .arg("--root")
            .arg(dir.join("root"))
            .args(["--bind", "127.0.0.1"])
            .args(["--http-port", &http.to_string()])
            .args(["--https-port", &https.to_string()])
            .arg("--cert")
            .arg(c.join("cert.pem"))
            .arg("--key")
            .arg(c.join("key.pem"))
            .arg("--access-log")
            .arg(dir.join("access.jsonl"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("{name}: no ready line: {line:?}")
        });
        assert_eq!(v["ready"], true, "{line}");
        let mut s = Srv {
            child,
            http,
            https,
            dir,
            name,
            rss0: 0,
            peak: 0,
        };
        // Warm up (first requests allocate buffers for good), then measure.
        for _ in 0..3 {
            s.served_by_every_protocol(v["h3"] == true);
        }
        s.rss0 = s.rss_kib();
        s.peak = s.rss0;
        s
    }

    fn rss_kib(&self) -> u64 {
        let st = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        st.lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0)
    }

    /// Sample memory (call during an attack).
    fn sample(&mut self) {
        self.peak = self.peak.max(self.rss_kib());
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn served_by_every_protocol(&mut self, h3: bool) {
        h1_get(self.http, "/").unwrap_or_else(|e| panic!("{}: HTTP/1.1 client: {e}", self.name));
        h2_get(self.https, "/").unwrap_or_else(|e| panic!("{}: HTTP/2 client: {e}", self.name));
        if h3 {
            h3_get(self.https, "/").unwrap_or_else(|e| panic!("{}: HTTP/3 client: {e}", self.name));
        }
    }

    /// The server is up, serves every protocol, and its memory grew by at
    /// most `max_growth_mib` (peak and after); prints the figures.
    fn check(&mut self, h3: bool, max_growth_mib: u64) {
        assert!(self.alive(), "{}: the server died", self.name);
        self.served_by_every_protocol(h3);
        self.sample();
        // Let connections the attack left be closed and freed.
        std::thread::sleep(Duration::from_millis(300));
        let after = self.rss_kib();
        eprintln!(
            "memory {}: rss before {} KiB, peak {} KiB (+{} KiB), after {} KiB (+{} KiB)",
            self.name,
            self.rss0,
            self.peak,
            self.peak.saturating_sub(self.rss0),
            after,
            after.saturating_sub(self.rss0)
        );
        assert!(
            self.peak.saturating_sub(self.rss0) < max_growth_mib << 10,
            "{}: memory grew from {} to {} KiB",
            self.name,
            self.rss0,
            self.peak
        );
        assert!(self.alive(), "{}: the server died", self.name);
    }

    fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("access.jsonl")).unwrap_or_default()
    }
}

impl Drop for Srv {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn connect(port: u16) -> TcpStream {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(3)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    s
}

/// A well-behaved HTTP/1.1 GET on a fresh connection.
fn h1_get(port: u16, path: &str) -> Result<(), String> {
    let mut s = connect(port);
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).map_err(|e| e.to_string())?;
    if out.starts_with(b"HTTP/1.1 200 ") && out.ends_with(INDEX) {
        Ok(())
    } else {
        Err(format!(
            "answer {:?}",
            String::from_utf8_lossy(&out[..out.len().min(80)])
        ))
    }
}

/// Close with a reset (SO_LINGER 0) rather than a FIN.
fn reset(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt with a valid linger struct on a live socket.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as u32,
        )
    };
}

// ---- HTTP/2 by hand over rustls ----

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn tls_config(alpn: &[u8]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(certs().join("ca.pem")).unwrap();
    for c in rustls_pemfile::certs(&mut &pem[..]) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut c = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    c.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(c)
}

fn tls_connect(port: u16, alpn: &[u8]) -> Tls {
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let conn = rustls::ClientConnection::new(tls_config(alpn), name).unwrap();
    let mut t = rustls::StreamOwned::new(conn, connect(port));
    while t.conn.is_handshaking() {
        t.conn.complete_io(&mut t.sock).unwrap();
    }
    assert_eq!(t.conn.alpn_protocol(), Some(alpn));
    t
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0;
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;
const ACK: u8 = 1;
const REFUSED_STREAM: u32 = 7;

fn frame(ty: u8, flags: u8, sid: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.extend_from_slice(&[ty, flags]);
    f.extend_from_slice(&sid.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// An HPACK block for `GET https://localhost{path}` (static-table names).
fn get_block(path: &str) -> Vec<u8> {
    let mut b = vec![0x82, 0x87]; // :method GET, :scheme https
    if path == "/" {
        b.push(0x84);
    } else {
        b.extend_from_slice(&[0x04, path.len() as u8]);
        b.extend_from_slice(path.as_bytes());
    }
    b.extend_from_slice(&[0x01, 9]);
    b.extend_from_slice(b"localhost");
    b
}

/// Connection preface and our SETTINGS (pairs of id and value).
fn h2_open(port: u16, settings: &[(u16, u32)]) -> Tls {
    let mut t = tls_connect(port, b"h2");
    let mut p = Vec::new();
    for (id, v) in settings {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    t.write_all(PREFACE).unwrap();
    t.write_all(&frame(SETTINGS, 0, 0, &p)).unwrap();
    t
}

struct Frame {
    ty: u8,
    flags: u8,
    sid: u32,
    payload: Vec<u8>,
}

fn read_frame(t: &mut impl Read) -> std::io::Result<Frame> {
    let mut h = [0u8; 9];
    t.read_exact(&mut h)?;
    let len = u32::from_be_bytes([0, h[0], h[1], h[2]]) as usize;
    let mut payload = vec![0; len];
    t.read_exact(&mut payload)?;
    Ok(Frame {
        ty: h[3],
        flags: h[4],
        sid: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
        payload,
    })
}

/// A well-behaved HTTP/2 GET on a fresh connection: status 200 and the body.
fn h2_get(port: u16, path: &str) -> Result<(), String> {
    let mut t = h2_open(port, &[]);
    t.write_all(&frame(
        HEADERS,
        END_STREAM | END_HEADERS,
        1,
        &get_block(path),
    ))
    .map_err(|e| e.to_string())?;
    let mut body = Vec::new();
    let mut status_ok = false;
    loop {
        let f = read_frame(&mut t).map_err(|e| e.to_string())?;
        match f.ty {
            SETTINGS if f.flags & ACK == 0 => {
                t.write_all(&frame(SETTINGS, ACK, 0, &[]))
                    .map_err(|e| e.to_string())?;
            }
            // :status 200 is entry 8 of the static table.
            HEADERS if f.sid == 1 => status_ok = f.payload.first() == Some(&0x88),
            DATA if f.sid == 1 => {
                body.extend_from_slice(&f.payload);
                if f.flags & END_STREAM != 0 {
                    break;
                }
            }
            GOAWAY | RST_STREAM => return Err(format!("frame type {} {:?}", f.ty, f.payload)),
            _ => {}
        }
    }
    if status_ok && body == INDEX {
        Ok(())
    } else {
        Err(format!("status ok {status_ok}, body {body:?}"))
    }
}

// ---- HTTP/3 with quiche as the client ----

fn quiche_client_config() -> quiche::Config {
    let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION).unwrap();
    c.load_verify_locations_from_file(certs().join("ca.pem").to_str().unwrap())
        .unwrap();
    c.verify_peer(true);
    c.set_application_protos(quiche::h3::APPLICATION_PROTOCOL)
        .unwrap();
    c.set_max_idle_timeout(5000);
    c.set_max_recv_udp_payload_size(1350);
    c.set_max_send_udp_payload_size(1350);
    c.set_initial_max_data(10_000_000);
    c.set_initial_max_stream_data_bidi_local(1_000_000);
    c.set_initial_max_stream_data_bidi_remote(1_000_000);
    c.set_initial_max_stream_data_uni(1_000_000);
    c.set_initial_max_streams_bidi(100);
    c.set_initial_max_streams_uni(100);
    c
}

fn random_cid() -> [u8; 16] {
    let mut b = [0u8; 16];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b).unwrap();
    b
}

/// A client's first datagram: a real Initial (padded to 1200 bytes).
fn real_initial(cfg: &mut quiche::Config, local: SocketAddr, peer: SocketAddr) -> Vec<u8> {
    let cid = random_cid();
    let scid = quiche::ConnectionId::from_ref(&cid);
    let mut conn = quiche::connect(Some("localhost"), &scid, local, peer, cfg).unwrap();
    let mut out = [0u8; 1500];
    let (n, _) = conn.send(&mut out).unwrap();
    out[..n].to_vec()
}

/// A well-behaved HTTP/3 GET on a fresh connection, within 5 s.
fn h3_get(port: u16, path: &str) -> Result<(), String> {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(5)))
        .unwrap();
    let local = sock.local_addr().unwrap();
    let peer: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut cfg = quiche_client_config();
    let cid = random_cid();
    let scid = quiche::ConnectionId::from_ref(&cid);
    let mut conn = quiche::connect(Some("localhost"), &scid, local, peer, &mut cfg)
        .map_err(|e| e.to_string())?;
    let h3cfg = quiche::h3::Config::new().unwrap();
    let mut h3: Option<quiche::h3::Connection> = None;
    let (mut status, mut body) = (None, Vec::new());
    let mut buf = [0u8; 65535];
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let mut out = [0u8; 1500];
        while let Ok((n, info)) = conn.send(&mut out) {
            let _ = sock.send_to(&out[..n], info.to);
        }
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                let _ = conn.recv(&mut buf[..n], quiche::RecvInfo { from, to: local });
            }
            Err(_) => conn.on_timeout(),
        }
        if conn.is_closed() {
            return Err(format!("closed: {:?}", conn.peer_error()));
        }
        if conn.is_established() && h3.is_none() {
            let mut h = quiche::h3::Connection::with_transport(&mut conn, &h3cfg)
                .map_err(|e| e.to_string())?;
            let req = [
                quiche::h3::Header::new(b":method", b"GET"),
                quiche::h3::Header::new(b":scheme", b"https"),
                quiche::h3::Header::new(b":authority", b"localhost"),
                quiche::h3::Header::new(b":path", path.as_bytes()),
            ];
            h.send_request(&mut conn, &req, true)
                .map_err(|e| e.to_string())?;
            h3 = Some(h);
        }
        if let Some(h) = h3.as_mut() {
            loop {
                match h.poll(&mut conn) {
                    Ok((_, quiche::h3::Event::Headers { list, .. })) => {
                        use quiche::h3::NameValue;
                        status = list
                            .iter()
                            .find(|x| x.name() == b":status")
                            .map(|x| x.value().to_vec());
                    }
                    Ok((sid, quiche::h3::Event::Data)) => {
                        while let Ok(n) = h.recv_body(&mut conn, sid, &mut buf) {
                            body.extend_from_slice(&buf[..n]);
                        }
                    }
                    Ok((_, quiche::h3::Event::Finished)) => {
                        let _ = conn.close(true, 0x100, b"");
                        return if status.as_deref() == Some(b"200") && body == INDEX {
                            Ok(())
                        } else {
                            Err(format!("status {status:?}, {} body bytes", body.len()))
                        };
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        }
    }
    Err(format!(
        "no answer in 5 s (established {}, status {status:?})",
        conn.is_established()
    ))
}

// ---- the attacks ----

/// Malformed and oversized requests on both TCP ports: each answered with
/// a 4xx or closed; 400 connections.
#[test]
fn malformed_and_oversized_requests() {
    let mut srv = Srv::start("malformed", &[]);
    let big_header = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "a".repeat(100 << 10)
    );
    let long_uri = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "b".repeat(70 << 10));
    let many_headers = format!(
        "GET / HTTP/1.1\r\nHost: a\r\n{}\r\n",
        (0..5000)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect::<String>()
    );
    let mut rng = 0x1234_5678_u64;
    let mut noise = || {
        (0..4096)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                rng as u8
            })
            .collect::<Vec<u8>>()
    };
    let cases: Vec<(Vec<u8>, &[&str])> = vec![
        (b"GARBAGE\r\n\r\n".to_vec(), &["400"]),
        (big_header.into_bytes(), &["431"]),
        (long_uri.into_bytes(), &["414", "431", "400"]),
        (many_headers.into_bytes(), &["431"]),
        (
            b"GET / HTTP/9.9\r\nHost: a\r\n\r\n".to_vec(),
            &["505", "400"],
        ),
        (
            b"GET /%zz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".to_vec(),
            &["403"],
        ),
        (
            b"GET /../../etc/passwd HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n".to_vec(),
            &["403"],
        ),
        (
            b"GET / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n".to_vec(),
            &["400"],
        ),
        (
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!".to_vec(),
            &["400"],
        ),
        (b"GET / HTTP/1.1\r\nBad Header\r\n\r\n".to_vec(), &["400"]),
        (noise(), &["400", ""]),
        ([PREFACE, &noise()[..512]].concat(), &[""]),
    ];
    let t0 = Instant::now();
    for round in 0..30 {
        for (bytes, want) in &cases {
            let mut s = connect(srv.http);
            // The server may answer and close before reading everything.
            let _ = s.write_all(bytes);
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            let status = if out.starts_with(b"HTTP/1.1 ") && out.len() >= 12 {
                String::from_utf8_lossy(&out[9..12]).into_owned()
            } else {
                String::new()
            };
            assert!(
                want.contains(&status.as_str()),
                "{:?}...: got {:?}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(40)]),
                String::from_utf8_lossy(&out[..out.len().min(60)])
            );
        }
        // Not TLS at all, on the TLS port.
        let mut s = connect(srv.https);
        let _ = s.write_all(&noise());
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        assert!(out.len() < 64, "answered garbage with {} bytes", out.len());
        if round % 10 == 0 {
            srv.sample();
            srv.served_by_every_protocol(true);
        }
    }
    // An oversized head over TLS too.
    let mut t = tls_connect(srv.https, b"http/1.1");
    let _ =
        t.write_all(format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(100 << 10)).as_bytes());
    let mut out = Vec::new();
    let _ = t.read_to_end(&mut out);
    assert!(
        out.starts_with(b"HTTP/1.1 431"),
        "{:?}",
        &out[..out.len().min(40)]
    );
    eprintln!(
        "malformed: {} connections in {:?}",
        30 * (cases.len() + 1) + 1,
        t0.elapsed()
    );
    srv.check(true, 32);
}

/// Slowloris: 40 HTTP/1.1 clients send a request head one byte a second,
/// 10 TLS clients a handshake likewise; `--header-read-timeout-s 2` closes
/// every one (well before the 30 s idle timeout), others are served meanwhile.
#[test]
fn slowloris_is_cut_by_the_header_read_timeout() {
    let mut srv = Srv::start("slowloris", &["--header-read-timeout-s", "2"]);
    let head = b"GET / HTTP/1.1\r\nHost: localhost\r\nUser-Agent: slow\r\nAccept: */*\r\n\r\n";
    // A TLS record header announcing a 16 KiB handshake message, then slowly nothing.
    let tls_head = [
        0x16u8, 0x03, 0x01, 0x40, 0x00, 0x01, 0x00, 0x3f, 0xfc, 0x03, 0x03,
    ];
    let mut slow: Vec<(TcpStream, &[u8], usize, Option<Duration>)> = Vec::new();
    for i in 0..50 {
        let (port, bytes): (u16, &[u8]) = if i < 40 {
            (srv.http, head)
        } else {
            (srv.https, &tls_head)
        };
        let s = connect(port);
        s.set_nonblocking(true).unwrap();
        slow.push((s, bytes, 0, None));
    }
    let t0 = Instant::now();
    let mut tick = 0;
    while slow.iter().any(|c| c.3.is_none()) && t0.elapsed() < Duration::from_secs(12) {
        for (s, bytes, sent, closed) in slow.iter_mut().filter(|c| c.3.is_none()) {
            let mut buf = [0u8; 512];
            match s.read(&mut buf) {
                // EOF or an answer (408) or a reset: the server gave up on it.
                Ok(_) => *closed = Some(t0.elapsed()),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => *closed = Some(t0.elapsed()),
            }
            if closed.is_none() && *sent < bytes.len() && s.write(&bytes[*sent..*sent + 1]).is_ok()
            {
                *sent += 1;
            }
        }
        if tick % 2 == 1 {
            srv.served_by_every_protocol(true);
            srv.sample();
        }
        tick += 1;
        std::thread::sleep(Duration::from_millis(1000));
    }
    let times: Vec<f64> = slow
        .iter()
        .map(|c| c.3.map_or(f64::INFINITY, |d| d.as_secs_f64()))
        .collect();
    let latest = times.iter().cloned().fold(0.0, f64::max);
    let earliest = times.iter().cloned().fold(f64::INFINITY, f64::min);
    eprintln!("slowloris: 50 slow clients closed between {earliest:.1} and {latest:.1} s");
    assert!(latest <= 6.0, "slow clients still open: {times:?}");
    assert!(earliest >= 1.0, "closed before the timeout: {times:?}");
    srv.check(true, 16);
}

/// Abrupt resets: 80 HTTP/1.1 and 40 HTTP/2 clients ask for 8 MiB, read a
/// little and reset the connection (or reset right after asking).
#[test]
fn abrupt_resets_mid_response() {
    let mut srv = Srv::start("resets", &[]);
    for i in 0..80 {
        let mut s = connect(srv.http);
        s.write_all(b"GET /big.bin HTTP/1.1\r\nHost: a\r\n\r\n")
            .unwrap();
        if i % 4 != 0 {
            let mut buf = [0u8; 65536];
            let _ = s.read(&mut buf);
        }
        reset(&s);
        drop(s);
    }
    srv.sample();
    srv.served_by_every_protocol(true);
    for i in 0..40 {
        let mut t = h2_open(srv.https, &[]);
        for sid in [1u32, 3, 5] {
            t.write_all(&frame(
                HEADERS,
                END_STREAM | END_HEADERS,
                sid,
                &get_block("/big.bin"),
            ))
            .unwrap();
        }
        if i % 4 != 0 {
            for _ in 0..8 {
                if read_frame(&mut t).is_err() {
                    break;
                }
            }
        }
        reset(&t.sock);
        drop(t);
    }
    srv.sample();
    srv.check(true, 32);
}

/// HTTP/2 rapid reset (CVE-2023-44487): 8 connections each open and cancel
/// up to 5,000 streams (HEADERS then RST_STREAM) as fast as they can
/// write. The server answers GOAWAY ENHANCE_YOUR_CALM and closes: the
/// client's next write fails or it reads the GOAWAY (a close with our
/// frames unread resets the connection, and the GOAWAY with it).
#[test]
fn h2_rapid_reset() {
    let mut srv = Srv::start("rapid-reset", &[]);
    let block = get_block("/big.bin");
    let (mut answered_total, mut cut_short) = (0, 0);
    let mut goaways = Vec::new();
    for _ in 0..8 {
        let mut t = h2_open(srv.https, &[]);
        let mut batch = Vec::new();
        let mut sent = 0;
        for chunk in 0..50 {
            batch.clear();
            for k in 0..100u32 {
                let sid = 1 + 2 * (chunk * 100 + k);
                batch.extend(frame(HEADERS, END_STREAM | END_HEADERS, sid, &block));
                batch.extend(frame(RST_STREAM, 0, sid, &8u32.to_be_bytes()));
            }
            if t.write_all(&batch).and_then(|_| t.flush()).is_err() {
                break;
            }
            sent += 100;
        }
        let mut answered = 0;
        let mut ended = "read timeout";
        t.sock
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        loop {
            match read_frame(&mut t) {
                Ok(f) if f.ty == HEADERS => answered += 1,
                Ok(f) if f.ty == GOAWAY => {
                    goaways.push(u32::from_be_bytes(f.payload[4..8].try_into().unwrap()));
                    ended = "GOAWAY";
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => break,
                Err(_) => {
                    ended = "closed";
                    break;
                }
            }
        }
        if sent < 5000 || ended != "read timeout" {
            cut_short += 1;
        }
        answered_total += answered;
        eprintln!(
            "rapid reset: {sent} streams opened and reset, {answered} answered, then {ended}"
        );
        srv.sample();
        srv.served_by_every_protocol(true);
    }
    eprintln!("rapid reset: GOAWAY codes read {goaways:?}");
    assert!(goaways.iter().all(|&c| c == 0xb), "{goaways:?}");
    assert_eq!(cut_short, 8, "connections the server did not stop");
    assert!(answered_total < 100, "{answered_total} streams answered");
    srv.check(true, 48);
}

/// HTTP/2 CONTINUATION flood: a HEADERS frame without END_HEADERS followed
/// by CONTINUATION frames without end (16 KiB of headers each, or empty):
/// the connection is closed after a bounded amount.
#[test]
fn h2_continuation_flood() {
    let mut srv = Srv::start("continuation", &[]);
    // 126 literal headers "x: <126 bytes>" per frame: 16,380 bytes.
    let mut fat = Vec::new();
    for _ in 0..126 {
        fat.extend_from_slice(&[0x00, 0x01, b'x', 126]);
        fat.extend_from_slice(&[b'a'; 126]);
    }
    for (what, payload) in [("16 KiB", fat.clone()), ("empty", Vec::new())] {
        for _ in 0..4 {
            let mut t = h2_open(srv.https, &[]);
            t.write_all(&frame(HEADERS, 0, 1, &[0x82, 0x87, 0x84]))
                .unwrap();
            let one = frame(CONTINUATION, 0, 1, &payload);
            let mut batch = Vec::new();
            for _ in 0..64 {
                batch.extend_from_slice(&one);
            }
            let mut frames = 0;
            let t0 = Instant::now();
            // Up to 100,000 frames (1.6 GB of headers, or 0.9 MB of empty frames).
            while frames < 100_000 && t0.elapsed() < Duration::from_secs(4) {
                if t.write_all(&batch).and_then(|_| t.flush()).is_err() {
                    break;
                }
                frames += 64;
            }
            t.sock
                .set_read_timeout(Some(Duration::from_secs(3)))
                .unwrap();
            let mut code = None;
            while let Ok(f) = read_frame(&mut t) {
                if f.ty == GOAWAY {
                    code = Some(u32::from_be_bytes([
                        f.payload[4],
                        f.payload[5],
                        f.payload[6],
                        f.payload[7],
                    ]));
                    break;
                }
            }
            eprintln!("continuation flood ({what}): {frames} frames written before the server stopped reading, GOAWAY {code:?}");
            // The server must end the flood: stop reading (our writes fail before
            // 100,000 frames) or answer GOAWAY. Empty frames (0.9 MB in all) can
            // all fit in the kernel's socket buffers before a busy server reads
            // them, so for them the GOAWAY is the proof.
            assert!(
                frames < 100_000 || code.is_some(),
                "the server took 100,000 CONTINUATION frames and never said GOAWAY"
            );
            srv.sample();
        }
    }
    srv.check(true, 48);
}

/// HTTP/2 SETTINGS and PING floods: 2 x 4 connections write up to 200,000
/// SETTINGS (or PING) frames each without reading the ACKs; a client is
/// served meanwhile.
#[test]
fn h2_settings_and_ping_floods() {
    let mut srv = Srv::start("settings-flood", &[]);
    let settings = frame(SETTINGS, 0, 0, &[0x00, 0x01, 0x00, 0x00, 0x10, 0x00]);
    let ping = frame(PING, 0, 0, b"flooding");
    for (what, one) in [("SETTINGS", settings), ("PING", ping)] {
        let mut floods = Vec::new();
        for _ in 0..4 {
            let mut t = h2_open(srv.https, &[]);
            t.sock
                .set_write_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            let mut batch = Vec::new();
            for _ in 0..1000 {
                batch.extend_from_slice(&one);
            }
            let mut n = 0;
            let t0 = Instant::now();
            while n < 200_000 && t0.elapsed() < Duration::from_secs(3) {
                if t.write_all(&batch).and_then(|_| t.flush()).is_err() {
                    break;
                }
                n += 1000;
            }
            srv.sample();
            floods.push((t, n));
        }
        // Served while four flooders hold their connections, unread.
        srv.served_by_every_protocol(true);
        srv.sample();
        let counts: Vec<usize> = floods.iter().map(|f| f.1).collect();
        eprintln!(
            "{what} flood: frames written per connection before it stalled or ended: {counts:?}"
        );
    }
    srv.check(true, 48);
}

/// HTTP/2 with too many concurrent streams: 1,000 requests for 8 MiB on a
/// connection whose stream window is 0 (nothing can be sent): at most 256
/// are taken, the rest refused.
#[test]
fn h2_too_many_streams() {
    let mut srv = Srv::start("streams", &[]);
    for _ in 0..3 {
        // SETTINGS_INITIAL_WINDOW_SIZE = 0.
        let mut t = h2_open(srv.https, &[(4, 0)]);
        let block = get_block("/big.bin");
        let mut batch = Vec::new();
        for k in 0..1000u32 {
            batch.extend(frame(HEADERS, END_STREAM | END_HEADERS, 1 + 2 * k, &block));
        }
        t.write_all(&batch).unwrap();
        t.sock
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let (mut answered, mut refused, mut goaway) = (0, 0, false);
        while let Ok(f) = read_frame(&mut t) {
            match f.ty {
                SETTINGS if f.flags & ACK == 0 => {
                    let _ = t.write_all(&frame(SETTINGS, ACK, 0, &[]));
                }
                HEADERS => answered += 1,
                RST_STREAM
                    if u32::from_be_bytes(f.payload[..4].try_into().unwrap()) == REFUSED_STREAM =>
                {
                    refused += 1
                }
                GOAWAY => goaway = true,
                _ => {}
            }
        }
        srv.sample();
        eprintln!(
            "too many streams: 1000 asked, {answered} answered, {refused} refused, GOAWAY {goaway}"
        );
        assert!(answered <= 256, "{answered} streams served at once");
        assert!(refused >= 700 || goaway, "{refused} refused");
        // Held open while a client is served.
        srv.served_by_every_protocol(true);
        drop(t);
    }
    srv.check(true, 160);
}

/// The TCP connection cap: with `--max-tcp-conns 50`, 300 idle
/// connections; the quietest are closed to make room and clients served.
#[test]
fn tcp_connection_cap_closes_the_quietest() {
    let mut srv = Srv::start("tcp-cap", &["--max-tcp-conns", "50"]);
    let mut idle = Vec::new();
    for i in 0..300 {
        let s = connect(if i % 2 == 0 { srv.http } else { srv.https });
        idle.push(s);
        if i % 100 == 99 {
            srv.served_by_every_protocol(true);
            srv.sample();
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let mut closed = 0;
    for s in &idle {
        s.set_nonblocking(true).unwrap();
        let mut b = [0u8; 16];
        match (&*s).read(&mut b) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            _ => closed += 1,
        }
    }
    eprintln!("tcp cap: 300 idle connections, {closed} closed by the server");
    assert!(closed >= 250, "{closed} closed");
    let evicted = srv
        .access_log()
        .matches("evicted: --max-tcp-conns reached")
        .count();
    assert!(evicted >= 250, "{evicted} evictions logged");
    srv.check(true, 32);
}

/// QUIC connection floods, on each stack, with `--max-quic-conns 100`:
/// 4,000 datagrams of garbage shaped like Initials (half under 1200 bytes),
/// then 600 real Initials from 600 source ports, never continued; an HTTP/3
/// client is served during and after.
fn quic_flood(stack: &'static str, name: &'static str) {
    let mut srv = Srv::start(name, &["--quic-stack", stack, "--max-quic-conns", "100"]);
    let peer: SocketAddr = ([127, 0, 0, 1], srv.https).into();
    let socks: Vec<UdpSocket> = (0..40)
        .map(|_| UdpSocket::bind("127.0.0.1:0").unwrap())
        .collect();
    let mut rng = 99u64;
    let mut cfg = quiche_client_config();
    let t0 = Instant::now();
    let (mut after_wave, mut retries) = (Vec::new(), 0);
    // Three waves: memory after the last shows whether it keeps growing.
    for wave in 0..3 {
        for i in 0..4000 {
            let len = if i % 2 == 0 { 1200 } else { 200 };
            let mut d = vec![0u8; len];
            for b in d.iter_mut() {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                *b = rng as u8;
            }
            // Long header, Initial, version 1, 8-byte DCID and SCID.
            d[0] = 0xc0 | (d[0] & 0x0f);
            d[1..5].copy_from_slice(&1u32.to_be_bytes());
            d[5] = 8;
            d[14] = 8;
            let _ = socks[i % socks.len()].send_to(&d, peer);
            if i % 500 == 0 {
                srv.sample();
            }
        }
        h3_get(srv.https, "/").unwrap_or_else(|e| panic!("{name}: during garbage: {e}"));
        let mut flooders = Vec::new();
        for i in 0..600 {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            let d = real_initial(&mut cfg, s.local_addr().unwrap(), peer);
            s.send_to(&d, peer).unwrap();
            flooders.push(s);
            if i % 100 == 50 {
                srv.sample();
                h3_get(srv.https, "/").unwrap_or_else(|e| {
                    panic!("{name}: during the Initial flood (wave {wave}, {i}): {e}")
                });
            }
        }
        std::thread::sleep(Duration::from_millis(1000));
        // What the server answered each abandoned handshake with: a Retry
        // (long header, type 3) or its own Initial (and so some state).
        for s in &flooders {
            s.set_nonblocking(true).unwrap();
            let mut b = [0u8; 1500];
            while let Ok(n) = s.recv(&mut b) {
                if n > 0 && b[0] & 0xf0 == 0xf0 {
                    retries += 1;
                    break;
                }
            }
        }
        srv.sample();
        after_wave.push(srv.rss_kib());
    }
    let evicted = srv
        .access_log()
        .matches("evicted: --max-quic-conns reached")
        .count();
    eprintln!(
        "{name}: 3 x (4000 garbage and 600 real Initials) in {:?}; {evicted} half-open \
         connections evicted, {retries} answered with a Retry; rss after each wave \
         {after_wave:?} KiB",
        t0.elapsed()
    );
    // 1,800 handshakes, 100 places: quiche evicts, quinn asks for a Retry.
    assert!(
        evicted + retries >= 1500,
        "{name}: {evicted} evicted, {retries} retries: the cap is not in force"
    );
    assert!(
        after_wave[2] < after_wave[1] + (8 << 10),
        "{name}: memory still growing from wave to wave: {after_wave:?} KiB"
    );
    srv.check(true, 64);
}

#[test]
fn quic_flood_quiche() {
    quic_flood("quiche", "quic-flood-quiche");
}

#[test]
fn quic_flood_quinn() {
    quic_flood("quinn", "quic-flood-quinn");
}
