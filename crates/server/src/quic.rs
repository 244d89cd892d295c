//! HTTP/3 over QUIC (quiche), on one UDP socket, in one thread.
//!
//! quiche is sans-IO: this loop feeds it datagrams and timeouts and sends
//! what it produces, holding each packet until the time quiche asks for
//! (`SendInfo::at`): without that wait quiche's pacing would not happen.
//!
//! Every 10 ms each connection is sampled into `limits::Sampler` (and, while
//! it has something to send, into `--quic-info`): cwnd and RTT from
//! `path_stats`, bytes in flight as sent - acked - lost bytes of `stats`,
//! the DATA_BLOCKED/STREAM_DATA_BLOCKED frames quiche sent, the packet this
//! loop holds for its send time, and the response bytes not yet accepted.
//! Samples are taken between iterations of the loop: while it is busy
//! sending a large window they come as often as it iterates (each carries
//! its `interval_ms`).

use crate::files::{is_upload, Body, Planned, Site};
use crate::h3stack::{
    admit, cc_family, Admit, ConnectionRecord, H3Stack, Serving, EVICTED,
    H3_MAX_FIELD_SECTION_BYTES, MIN_INITIAL_DATAGRAM, QUIC_MAX_STREAMS_BIDI, QUIC_MAX_STREAMS_UNI,
};
use crate::limits::{Observation, QuicInfo, Sampler};
use crate::log::{unix_ns, JsonLines};
use crate::record::RequestRecord;
use crate::{Options, QUIC_MAX_DATAGRAM};
use quiche::h3::NameValue;
use std::collections::HashMap;
use std::io::Read;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MAX_DATAGRAM: usize = QUIC_MAX_DATAGRAM;
const CHUNK: usize = 64 * 1024;
/// How often a connection is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// quiche's cap on an autotuned connection window (`MAX_CONNECTION_WINDOW`,
/// quiche 0.30 src/lib.rs, private there).
pub const QUICHE_MAX_CONNECTION_WINDOW: u64 = 24 << 20;
/// quiche's cap on an autotuned stream window (`stream::MAX_STREAM_WINDOW`).
pub const QUICHE_MAX_STREAM_WINDOW: u64 = 16 << 20;

/// quiche's name for a congestion control given as cubic, bbr or reno.
pub fn quiche_cc(cc: &str) -> &'static str {
    match cc {
        "bbr" => "bbr2_gcongestion",
        "reno" => "reno",
        _ => "cubic",
    }
}

/// The implementation in effect, in its own field next to the family:
/// `quiche bbr2_gcongestion` (quiche's BBR is BBRv2).
pub fn quic_cc_impl(cc: &str) -> String {
    format!("quiche {}", quiche_cc(cc))
}

struct Resp {
    headers: Option<Vec<quiche::h3::Header>>,
    file: Option<std::fs::File>,
    remaining: u64,
    buf: Vec<u8>,
    sent: u64,
    record: RequestRecord,
    /// Not answered before this (a replayed origin's think time).
    not_before: Option<Instant>,
}

/// An upload to the sink whose body is still arriving.
struct Upload {
    path: String,
    authority: String,
    t_request: u64,
    received: u64,
}

struct Conn {
    id: String,
    conn: quiche::Connection,
    h3: Option<quiche::h3::Connection>,
    streams: HashMap<u64, Resp>,
    uploads: HashMap<u64, Upload>,
    /// A packet quiche produced that must wait until its send time.
    pending: Option<(Vec<u8>, SocketAddr, Instant)>,
    timeout_at: Option<Instant>,
    t_open: u64,
    peer: SocketAddr,
    requests: u64,
    /// Packets held until quiche's send time, and the total time they waited.
    paced: u64,
    paced_wait: Duration,
    /// Requests that arrived as 0-RTT early data.
    early_requests: u64,
    /// Response bytes (headers and body) quiche has accepted.
    accepted: u64,
    sampler: Sampler,
    next_sample: Instant,
    /// Closed to make room for a new connection (`--max-quic-conns`).
    evicted: bool,
}

pub struct Server {
    sock: UdpSocket,
    config: quiche::Config,
    h3_config: quiche::h3::Config,
    root: Arc<Site>,
    access: JsonLines,
    quic_info: JsonLines,
    opts: Options,
    conns: HashMap<Vec<u8>, Conn>,
    aliases: HashMap<Vec<u8>, Vec<u8>>,
    next_id: u64,
    keylog: Option<std::fs::File>,
}

/// Why the HTTP/3 server could not start; printed as `satbench-server: <message>`, exit 2.
#[derive(Debug, thiserror::Error)]
pub enum QuicError {
    /// bind(2) of the UDP socket failed.
    #[error("bind udp {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// The socket could not be made non-blocking (ioctl FIONBIO).
    #[error("set_nonblocking: {0}")]
    Nonblocking(std::io::Error),
    /// A socket buffer size was refused.
    #[error(transparent)]
    Sock(#[from] crate::tcpinfo::SockError),
    /// quiche refused a setting.
    #[error("{0}")]
    Config(quiche::Error),
    /// quiche could not load the certificate or key file.
    #[error("{path}: {source}")]
    File { path: String, source: quiche::Error },
    /// $SSLKEYLOGFILE could not be opened.
    #[error("{path:?}: {source}")]
    Keylog {
        path: std::ffi::OsString,
        source: std::io::Error,
    },
    /// quiche refused the HTTP/3 settings.
    #[error("{0}")]
    H3Config(quiche::h3::Error),
}

/// A packet within this of its send time goes now: the loop wakes no finer.
const SEND_EARLY: Duration = Duration::from_micros(20);
/// The longest the loop sleeps without a timer (to see `stop`).
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// Whether a packet quiche wants sent at `at` goes now, or is held (pacing).
fn due(now: Instant, at: Instant) -> bool {
    at <= now + SEND_EARLY
}

/// How long the loop may wait for a datagram: until its earliest timer
/// (quiche's timeout, a held packet, a sample, a response's think time).
fn sleep_for(now: Instant, earliest: Option<Instant>) -> Duration {
    earliest
        .map(|w| w.saturating_duration_since(now))
        .unwrap_or(MAX_SLEEP)
        .min(MAX_SLEEP)
}

fn random_cid() -> Vec<u8> {
    let mut b = vec![0u8; quiche::MAX_CONN_ID_LEN];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut b).expect("random");
    b
}

impl Server {
    pub fn new(
        opts: &Options,
        root: Arc<Site>,
        access: JsonLines,
        quic_info: JsonLines,
    ) -> Result<Server, QuicError> {
        let addr = SocketAddr::new(opts.bind, opts.https_port);
        let sock = UdpSocket::bind(addr).map_err(|source| QuicError::Bind { addr, source })?;
        sock.set_nonblocking(true).map_err(QuicError::Nonblocking)?;
        let fd = sock.as_raw_fd();
        if let Some(n) = opts.sndbuf {
            crate::tcpinfo::set_int(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUFFORCE,
                n as i32,
                "SO_SNDBUFFORCE",
            )?;
        }
        crate::tcpinfo::set_udp_rcvbuf(fd, opts.rcvbuf)?;
        let (cert, key) = (
            opts.cert.as_deref().unwrap_or(""),
            opts.key.as_deref().unwrap_or(""),
        );
        let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION).map_err(QuicError::Config)?;
        c.load_cert_chain_from_pem_file(cert)
            .map_err(|source| QuicError::File {
                path: cert.to_string(),
                source,
            })?;
        c.load_priv_key_from_pem_file(key)
            .map_err(|source| QuicError::File {
                path: key.to_string(),
                source,
            })?;
        c.set_application_protos(quiche::h3::APPLICATION_PROTOCOL)
            .map_err(QuicError::Config)?;
        c.set_max_idle_timeout(opts.idle_timeout_s * 1000);
        c.set_max_recv_udp_payload_size(MAX_DATAGRAM);
        c.set_max_send_udp_payload_size(MAX_DATAGRAM);
        c.set_initial_max_data(opts.max_data());
        c.set_initial_max_stream_data_bidi_local(opts.max_stream_data());
        c.set_initial_max_stream_data_bidi_remote(opts.max_stream_data());
        // A window given on the command line is the window for the whole
        // connection: quiche would otherwise use min(it, 24 MiB / 16 MiB)
        // for its later updates and autotune within those caps.
        if let Some(v) = opts.quic_max_data {
            c.set_max_connection_window(v);
        }
        if let Some(v) = opts.quic_max_stream_data {
            c.set_max_stream_window(v);
        }
        c.set_initial_max_stream_data_uni(1 << 20);
        c.set_initial_max_streams_bidi(QUIC_MAX_STREAMS_BIDI);
        c.set_initial_max_streams_uni(QUIC_MAX_STREAMS_UNI);
        c.set_disable_active_migration(true);
        c.set_cc_algorithm_name(quiche_cc(opts.cc.as_deref().unwrap_or("cubic")))
            .map_err(QuicError::Config)?;
        c.enable_pacing(opts.pacing);
        if let Some(n) = opts.quic_initcwnd {
            c.set_initial_congestion_window_packets(n);
        }
        if opts.zero_rtt {
            c.enable_early_data();
        }
        let keylog = match std::env::var_os("SSLKEYLOGFILE") {
            Some(p) => {
                c.log_keys();
                Some(
                    std::fs::OpenOptions::new()
                        .create(true)
                        .append(true)
                        .open(&p)
                        .map_err(|source| QuicError::Keylog {
                            path: p.clone(),
                            source,
                        })?,
                )
            }
            None => None,
        };
        let mut h3_config = quiche::h3::Config::new().map_err(QuicError::H3Config)?;
        // A request's header section, as on TCP (HTTP/1.1 head, quinn's h3).
        h3_config.set_max_field_section_size(H3_MAX_FIELD_SECTION_BYTES);
        Ok(Server {
            sock,
            config: c,
            h3_config,
            root,
            access,
            quic_info,
            opts: opts.clone(),
            conns: HashMap::new(),
            aliases: HashMap::new(),
            next_id: 1,
            keylog,
        })
    }

    pub fn run(mut self, stop: Arc<AtomicBool>) {
        // SAFETY: prctl with integer arguments (timer slack of this thread).
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
        let mut buf = vec![0u8; 65_535];
        let local = self.sock.local_addr().expect("local addr");
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            let wake = self
                .conns
                .values()
                .flat_map(|c| {
                    [
                        c.timeout_at,
                        c.pending.as_ref().map(|p| p.2),
                        Some(c.next_sample),
                        c.streams.values().filter_map(|r| r.not_before).min(),
                    ]
                })
                .flatten()
                .min();
            let wait = sleep_for(now, wake);
            let mut pfd = libc::pollfd {
                fd: self.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ts = libc::timespec {
                tv_sec: wait.as_secs() as i64,
                tv_nsec: wait.subsec_nanos() as i64,
            };
            // SAFETY: one valid pollfd and timespec.
            unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
            while let Ok((n, from)) = self.sock.recv_from(&mut buf) {
                self.on_datagram(&mut buf[..n], from, local);
            }
            let now = Instant::now();
            let ids: Vec<Vec<u8>> = self.conns.keys().cloned().collect();
            for id in ids {
                let c = self.conns.get_mut(&id).expect("conn");
                if c.timeout_at.is_some_and(|t| t <= now) {
                    c.conn.on_timeout();
                }
                // Answers whose think time is over.
                let due: Vec<u64> = c
                    .streams
                    .iter()
                    .filter(|(_, r)| r.not_before.is_some_and(|t| t <= now))
                    .map(|(sid, _)| *sid)
                    .collect();
                if !due.is_empty() {
                    if let Some(mut h3) = c.h3.take() {
                        for sid in due {
                            Self::push(&self.access, &mut h3, c, sid);
                        }
                        c.h3 = Some(h3);
                    }
                }
                Self::flush(&self.sock, c, self.opts.pacing);
                c.timeout_at = c.conn.timeout().map(|d| Instant::now() + d);
                if c.next_sample <= now {
                    c.next_sample = now + SAMPLE_EVERY;
                    Self::sample(&self.quic_info, &self.opts, c, false);
                }
                if c.conn.is_closed() {
                    let mut c = self.conns.remove(&id).expect("conn");
                    self.aliases.retain(|_, v| *v != id);
                    Self::sample(&self.quic_info, &self.opts, &mut c, true);
                    self.log_close(&c);
                }
            }
        }
        for (_, mut c) in std::mem::take(&mut self.conns) {
            Self::sample(&self.quic_info, &self.opts, &mut c, true);
            self.log_close(&c);
        }
    }

    /// Judge the interval since the last sample; write it while the
    /// connection has something to send, and at close.
    fn sample(out: &JsonLines, opts: &Options, c: &mut Conn, at_close: bool) {
        let s = c.conn.stats();
        let p = c.conn.path_stats().next();
        let in_flight = s.sent_bytes.saturating_sub(s.acked_bytes + s.lost_bytes);
        let o = Observation {
            cwnd: p.as_ref().map_or(0, |p| p.cwnd as u64),
            bytes_in_flight: in_flight,
            mss: MAX_DATAGRAM as u64,
            app_pending: !c.streams.is_empty(),
            transport_pending: c.pending.is_some(),
            pacer_holding: c.pending.is_some(),
            data_blocked_sent: s.data_blocked_sent_count,
            stream_data_blocked_sent: s.stream_data_blocked_sent_count,
            progress: c.accepted,
        };
        let v = c.sampler.sample(unix_ns(), &o);
        if !out.enabled() || !(at_close || o.app_pending || o.transport_pending || in_flight > 0) {
            return;
        }
        let info = QuicInfo {
            t_unix_ns: unix_ns(),
            conn: c.id.clone(),
            quic_stack: Server::NAME,
            cc: cc_family(opts.cc_name()),
            cwnd: o.cwnd,
            bytes_in_flight: in_flight,
            srtt_ms: p.as_ref().map_or(0.0, |p| p.rtt.as_secs_f64() * 1e3),
            min_rtt_ms: p
                .as_ref()
                .and_then(|p| p.min_rtt)
                .map(|d| d.as_secs_f64() * 1e3),
            // quiche computes its pacing rate but does not expose it.
            pacing_rate_bps: None,
            cc_pacing_rate_bps: p.as_ref().and_then(|p| p.max_bandwidth).map(|b| b * 8),
            delivery_rate_bps: p.as_ref().map(|p| p.delivery_rate * 8),
            bytes_sent: s.sent_bytes,
            bytes_acked: Some(s.acked_bytes),
            bytes_lost: s.lost_bytes,
            data_blocked_sent: s.data_blocked_sent_count,
            stream_data_blocked_sent: s.stream_data_blocked_sent_count,
            pacer_holding: Some(o.pacer_holding),
            app_pending: o.app_pending,
            transport_pending: o.transport_pending,
            at_close,
        };
        out.write(&info.json(&o, &v));
    }

    fn on_datagram(&mut self, pkt: &mut [u8], from: SocketAddr, local: SocketAddr) {
        let Ok(hdr) = quiche::Header::from_slice(pkt, quiche::MAX_CONN_ID_LEN) else {
            return;
        };
        let dcid = hdr.dcid.to_vec();
        let (key, created) = if self.conns.contains_key(&dcid) {
            (dcid, false)
        } else if let Some(k) = self.aliases.get(&dcid) {
            (k.clone(), false)
        } else {
            if hdr.ty != quiche::Type::Initial {
                return;
            }
            // RFC 9000 14.1: an Initial comes in a datagram of at least
            // 1200 bytes; smaller ones are dropped before any state is made
            // or anything is sent back (no amplification either).
            if pkt.len() < MIN_INITIAL_DATAGRAM {
                return;
            }
            let half_open = self
                .conns
                .iter()
                .filter(|(_, c)| !c.conn.is_established())
                .map(|(k, c)| (k, c.t_open));
            // quiche's server sends no Retry: at the cap, a half-open connection makes room or none.
            match admit(self.conns.len(), self.opts.max_quic_conns, false, half_open) {
                Admit::Accept => {}
                Admit::Evict(key) => {
                    let key = key.clone();
                    self.evict(&key);
                }
                Admit::Retry | Admit::Refuse => return,
            }
            if !quiche::version_is_supported(hdr.version) {
                let mut out = [0u8; MAX_DATAGRAM];
                if let Ok(n) = quiche::negotiate_version(&hdr.scid, &hdr.dcid, &mut out) {
                    let _ = self.sock.send_to(&out[..n], from);
                }
                return;
            }
            let scid = random_cid();
            let scid_ref = quiche::ConnectionId::from_ref(&scid);
            let Ok(mut conn) = quiche::accept(&scid_ref, None, local, from, &mut self.config)
            else {
                return;
            };
            let id = format!("q{}", self.next_id);
            self.next_id += 1;
            if let Some(dir) = &self.opts.qlog_dir {
                if let Ok(f) = std::fs::File::create(format!("{dir}/{id}.sqlog")) {
                    // Buffered: qlog writes each event in many small pieces,
                    // and unbuffered they cut loopback throughput twentyfold.
                    // Flushed when the connection is dropped.
                    conn.set_qlog(
                        Box::new(std::io::BufWriter::with_capacity(1 << 20, f)),
                        format!("satbench-server {id}"),
                        format!(
                            "cc {}",
                            quiche_cc(self.opts.cc.as_deref().unwrap_or("cubic"))
                        ),
                    );
                }
            }
            if let Some(k) = &self.keylog {
                if let Ok(f) = k.try_clone() {
                    conn.set_keylog(Box::new(f));
                }
            }
            self.aliases.insert(dcid, scid.clone());
            self.conns.insert(
                scid.clone(),
                Conn {
                    id,
                    conn,
                    h3: None,
                    streams: HashMap::new(),
                    uploads: HashMap::new(),
                    pending: None,
                    timeout_at: None,
                    t_open: unix_ns(),
                    peer: from,
                    requests: 0,
                    paced: 0,
                    paced_wait: Duration::ZERO,
                    early_requests: 0,
                    accepted: 0,
                    sampler: Sampler::starting(unix_ns()),
                    next_sample: Instant::now(),
                    evicted: false,
                },
            );
            (scid, true)
        };
        let c = self.conns.get_mut(&key).expect("conn");
        if c.conn
            .recv(pkt, quiche::RecvInfo { from, to: local })
            .is_err()
        {
            if created {
                // A first packet quiche could not use (garbage that looks
                // like an Initial): the connection it made is forgotten.
                self.conns.remove(&key);
                self.aliases.retain(|_, v| *v != key);
            }
            return;
        }
        if (c.conn.is_established() || c.conn.is_in_early_data()) && c.h3.is_none() {
            match quiche::h3::Connection::with_transport(&mut c.conn, &self.h3_config) {
                Ok(h) => c.h3 = Some(h),
                Err(_) => {
                    let _ = c.conn.close(true, 0x101, b"h3 setup failed");
                    return;
                }
            }
        }
        let Some(mut h3) = c.h3.take() else { return };
        loop {
            match h3.poll(&mut c.conn) {
                Ok((sid, quiche::h3::Event::Headers { list, .. })) => {
                    Self::on_request(&self.root, &self.opts, c, sid, &list);
                    Self::push(&self.access, &mut h3, c, sid);
                }
                Ok((sid, quiche::h3::Event::Data)) => {
                    // An upload's body is counted; any other body is not read
                    // (its stream's read side was shut down).
                    let mut buf = [0u8; 16384];
                    while let Ok(n) = h3.recv_body(&mut c.conn, sid, &mut buf) {
                        if let Some(u) = c.uploads.get_mut(&sid) {
                            u.received += n as u64;
                        }
                    }
                }
                Ok((sid, quiche::h3::Event::Finished)) => {
                    if let Some(u) = c.uploads.remove(&sid) {
                        let planned = Planned::uploaded(u.received);
                        let mut rec = Self::record(&self.opts, c, "POST", &u.path, u.t_request);
                        rec.authority = Some(u.authority);
                        rec.request_bytes = Some(u.received);
                        rec.t_body_done_unix_ns = Some(unix_ns());
                        Self::start_response(c, sid, rec, planned);
                        Self::push(&self.access, &mut h3, c, sid);
                    }
                }
                Ok((sid, quiche::h3::Event::Reset(_))) => {
                    c.uploads.remove(&sid);
                    if let Some(r) = c.streams.remove(&sid) {
                        Self::log_done(&self.access, r, "reset by client");
                    }
                }
                Ok(_) => {}
                Err(quiche::h3::Error::Done) => break,
                Err(_) => break,
            }
        }
        let writable: Vec<u64> = c.conn.writable().collect();
        for sid in writable {
            Self::push(&self.access, &mut h3, c, sid);
        }
        c.h3 = Some(h3);
    }

    /// A request's headers: an upload waits for its body; anything else is
    /// answered now.
    fn on_request(root: &Site, opts: &Options, c: &mut Conn, sid: u64, req: &[quiche::h3::Header]) {
        let t_request = unix_ns();
        let (mut method, mut path, mut authority) = (String::new(), String::new(), String::new());
        let mut cors = false;
        for h in req {
            match h.name() {
                b":method" => method = String::from_utf8_lossy(h.value()).into_owned(),
                b":path" => path = String::from_utf8_lossy(h.value()).into_owned(),
                b":authority" => authority = String::from_utf8_lossy(h.value()).into_owned(),
                b"origin" => cors = true,
                _ => {}
            }
        }
        if is_upload(&method, &path) {
            let received = 0;
            c.uploads.insert(
                sid,
                Upload {
                    path,
                    authority,
                    t_request,
                    received,
                },
            );
            return;
        }
        let _ = c.conn.stream_shutdown(sid, quiche::Shutdown::Read, 0);
        let planned = root.plan_for(("https", &authority), &method, &path, cors);
        let mut rec = Self::record(opts, c, &method, &path, t_request);
        rec.authority = Some(authority);
        rec.request_bytes = Some(0);
        Self::start_response(c, sid, rec, planned);
    }

    /// A request's record as it arrives on this connection.
    fn record(opts: &Options, c: &Conn, method: &str, path: &str, t_request: u64) -> RequestRecord {
        let cc = opts.cc_name();
        let family = (cc_family(cc), quic_cc_impl(cc));
        let mut r = RequestRecord::new(&c.id, "h3", true, family, method, path, t_request);
        r.quic_stack = Some(Server::NAME);
        r
    }

    fn start_response(c: &mut Conn, sid: u64, mut rec: RequestRecord, mut planned: Planned) {
        let (status, content_length) = (planned.status, planned.content_length);
        let ctype = planned.content_type.to_string();
        let (file, body_len, buf) = match std::mem::replace(&mut planned.body, Body::Empty) {
            Body::File { file, len } => (Some(file), len, Vec::new()),
            Body::Mem(b) => (None, 0, b),
            Body::Empty => (None, 0, Vec::new()),
        };
        let mut headers = vec![
            quiche::h3::Header::new(b":status", status.to_string().as_bytes()),
            quiche::h3::Header::new(b"server", b"satbench"),
            quiche::h3::Header::new(b"content-type", ctype.as_bytes()),
            quiche::h3::Header::new(
                b"timing-allow-origin",
                crate::files::TIMING_ALLOW_ORIGIN.as_bytes(),
            ),
        ];
        if planned.sends_length() {
            headers.push(quiche::h3::Header::new(
                b"content-length",
                content_length.to_string().as_bytes(),
            ));
        }
        for (name, value) in &planned.headers {
            headers.push(quiche::h3::Header::new(name.as_bytes(), value.as_bytes()));
        }
        let not_before = (!planned.delay.is_zero()).then(|| Instant::now() + planned.delay);
        c.requests += 1;
        let early = c.conn.is_in_early_data();
        if early {
            c.early_requests += 1;
        }
        (rec.status, rec.content_length) = (Some(status), Some(content_length));
        (rec.stream, rec.early_data, rec.replay) = (Some(sid), Some(early), planned.replay);
        c.streams.insert(
            sid,
            Resp {
                headers: Some(headers),
                file,
                remaining: body_len,
                buf,
                sent: 0,
                record: rec,
                not_before,
            },
        );
    }

    /// Send what a response can: headers, then body until flow or congestion control stops it.
    fn push(access: &JsonLines, h3: &mut quiche::h3::Connection, c: &mut Conn, sid: u64) {
        let Some(r) = c.streams.get_mut(&sid) else {
            return;
        };
        if r.not_before.is_some_and(|t| t > Instant::now()) {
            return;
        }
        r.not_before = None;
        if let Some(h) = &r.headers {
            match h3.send_response(&mut c.conn, sid, h, false) {
                Ok(()) => {
                    r.headers = None;
                    c.accepted += 1;
                    r.record.t_response_unix_ns = Some(unix_ns());
                }
                Err(quiche::h3::Error::StreamBlocked) => return,
                Err(_) => {
                    let r = c.streams.remove(&sid).expect("stream");
                    Self::log_done(access, r, "send_response failed");
                    return;
                }
            }
        }
        loop {
            if r.buf.is_empty() && r.remaining > 0 {
                let n = (r.remaining as usize).min(CHUNK);
                r.buf.resize(n, 0);
                if r.file
                    .as_mut()
                    .expect("file")
                    .read_exact(&mut r.buf)
                    .is_err()
                {
                    let _ = c.conn.stream_shutdown(sid, quiche::Shutdown::Write, 0x102);
                    let r = c.streams.remove(&sid).expect("stream");
                    Self::log_done(access, r, "read failed");
                    return;
                }
                r.remaining -= n as u64;
            }
            let fin = r.remaining == 0;
            match h3.send_body(&mut c.conn, sid, &r.buf, fin) {
                Ok(n) => {
                    r.sent += n as u64;
                    c.accepted += n as u64;
                    let all = n == r.buf.len();
                    r.buf.drain(..n);
                    if all && fin {
                        let r = c.streams.remove(&sid).expect("stream");
                        Self::log_done(access, r, "");
                        return;
                    }
                    if !all {
                        return;
                    }
                }
                Err(quiche::h3::Error::Done) => return,
                Err(_) => {
                    let r = c.streams.remove(&sid).expect("stream");
                    Self::log_done(access, r, "send_body failed");
                    return;
                }
            }
        }
    }

    fn log_done(access: &JsonLines, r: Resp, error: &str) {
        r.record.finish(access, r.sent, Some(error));
    }

    /// Send every packet quiche has that is due; keep the first one that is not.
    fn flush(sock: &UdpSocket, c: &mut Conn, pacing: bool) {
        let mut out = [0u8; MAX_DATAGRAM];
        loop {
            let now = Instant::now();
            if let Some((pkt, to, at)) = c.pending.take() {
                if !due(now, at) {
                    c.pending = Some((pkt, to, at));
                    return;
                }
                let _ = sock.send_to(&pkt, to);
            }
            match c.conn.send(&mut out) {
                Ok((n, info)) => {
                    if pacing && !due(now, info.at) {
                        c.paced += 1;
                        c.paced_wait += info.at - now;
                        c.pending = Some((out[..n].to_vec(), info.to, info.at));
                        return;
                    }
                    let _ = sock.send_to(&out[..n], info.to);
                }
                Err(quiche::Error::Done) => return,
                Err(_) => {
                    let _ = c.conn.close(false, 0x1, b"send failed");
                    return;
                }
            }
        }
    }

    /// Forget a connection to make room for a new one (`--max-quic-conns`),
    /// logged as evicted.
    fn evict(&mut self, key: &[u8]) {
        let mut c = self.conns.remove(key).expect("conn");
        self.aliases.retain(|_, v| *v != key);
        c.evicted = true;
        self.log_close(&c);
    }

    fn log_close(&self, c: &Conn) {
        let s = c.conn.stats();
        let p = c.conn.path_stats().next();
        let peer_tp = c.conn.peer_transport_params();
        let mut r = ConnectionRecord::new::<Server>(&c.id, self.opts.cc_name(), c.peer, c.t_open);
        r.alpn = String::from_utf8_lossy(c.conn.application_proto()).into_owned();
        r.requests = c.requests;
        (r.packets_sent, r.packets_recv) = (Some(s.sent as u64), Some(s.recv as u64));
        (r.packets_lost, r.packets_retrans) = (Some(s.lost as u64), Some(s.retrans as u64));
        (r.bytes_sent, r.bytes_recv, r.bytes_lost) =
            (Some(s.sent_bytes), Some(s.recv_bytes), Some(s.lost_bytes));
        r.srtt_ms = p.as_ref().map(|p| p.rtt.as_secs_f64() * 1e3);
        r.cwnd = p.as_ref().map(|p| p.cwnd as u64);
        (r.resumed, r.early_requests) = (Some(c.conn.is_resumed()), Some(c.early_requests));
        (r.paced_packets, r.paced_wait_ms) =
            (Some(c.paced), Some(c.paced_wait.as_secs_f64() * 1e3));
        r.data_blocked_sent = Some(s.data_blocked_sent_count);
        r.stream_data_blocked_sent = Some(s.stream_data_blocked_sent_count);
        r.peer_initial_max_data = peer_tp.map(|t| t.initial_max_data);
        r.peer_initial_max_stream_data = peer_tp.map(|t| t.initial_max_stream_data_bidi_local);
        r.limited_ms = Some(c.sampler.tally.json());
        r.error = if c.evicted {
            Some(EVICTED.to_string())
        } else {
            c.conn.peer_error().map(|e| format!("{e:?}"))
        };
        r.write(&self.access);
    }
}

impl H3Stack for Server {
    const NAME: &'static str = "quiche";
    type Error = QuicError;

    fn cc_impl(cc: &str) -> String {
        quic_cc_impl(cc)
    }

    /// quiche serves no real-time endpoints (`Serving::realtime` is unused).
    fn bind(serving: Serving) -> Result<Self, QuicError> {
        Server::new(
            &serving.opts,
            serving.root,
            serving.access,
            serving.quic_info,
        )
    }

    fn run(self, stop: Arc<AtomicBool>) {
        Server::run(self, stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packet_goes_at_its_send_time_or_waits_for_it() {
        let now = Instant::now();
        assert!(due(now, now) && due(now, now - Duration::from_millis(1)));
        assert!(due(now, now + SEND_EARLY));
        assert!(!due(now, now + SEND_EARLY + Duration::from_micros(1)));
    }

    #[test]
    fn the_loop_sleeps_until_its_first_timer_and_never_long() {
        let now = Instant::now();
        assert_eq!(sleep_for(now, None), MAX_SLEEP);
        assert_eq!(
            sleep_for(now, Some(now + Duration::from_millis(7))),
            Duration::from_millis(7)
        );
        assert_eq!(
            sleep_for(now, Some(now - Duration::from_millis(7))),
            Duration::ZERO
        );
        assert_eq!(
            sleep_for(now, Some(now + Duration::from_secs(9))),
            MAX_SLEEP
        );
    }
}
