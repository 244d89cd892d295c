//! HTTP/3 over QUIC with quinn and the `h3` crate (`--quic-stack quinn`), in
//! one thread with its own tokio runtime, beside quiche's `quic.rs`: same
//! files and answers (`files::Site::plan`), same access-log records plus
//! `"quic_stack": "quinn"`, same `--quic-info` samples.
//!
//! Each connection gets its own `ServerConfig` (`Incoming::accept_with`), so
//! that it can have its own qlog file and its own congestion-control probe:
//! [`Probe`] wraps quinn's controller and copies what quinn tells it (bytes
//! sent, acked and lost, bytes in flight after each ACK batch, whether the
//! connection was application-limited, the window, BBR's pacing rate) where
//! the sampler reads it. quinn exposes no more: its pacer and the peer's
//! credit are internal (see `limits.rs` for how the rule copes).
//!
//! What quinn can and cannot do here:
//! - congestion control: Cubic, NewReno, and BBR, which quinn marks
//!   experimental: a port of Chromium's BBRv1 `bbr_sender` (quinn-proto
//!   0.11 src/congestion/bbr/mod.rs). quinn's pacer is a token bucket
//!   refilled at 5/4 cwnd per sRTT for every controller; BBR's own pacing
//!   rate is only reported (`cc_pacing_rate_bps`);
//! - pacing cannot be turned off (refused in `main.rs`);
//! - the initial window is `--quic-initcwnd` x 1350 bytes; datagrams are
//!   1350 bytes, without path MTU discovery, as quiche's;
//! - windows: `--quic-max-data` is quinn's `receive_window`,
//!   `--quic-max-stream-data` its `stream_receive_window`, both fixed (quinn
//!   does not autotune); its send window (data written and not yet acked)
//!   is at least 64 MiB ([`send_window`]);
//! - 0-RTT: accepted unless `--no-0rtt` (rustls `max_early_data_size`), but
//!   answered once the handshake is complete (see `serve`); `early_data`,
//!   `early_requests` and `resumed` are null: quinn does not expose them;
//! - qlog: quinn-proto's `qlog` feature, JSON-SEQ, one `.sqlog` per
//!   connection in `--qlog-dir`.

use crate::files::{is_upload, Body, Planned, Site};
use crate::h3stack::{
    admit, cc_family, Admit, ConnectionRecord, H3Stack, Serving, EVICTED,
    H3_MAX_FIELD_SECTION_BYTES, QUIC_MAX_STREAMS_BIDI, QUIC_MAX_STREAMS_UNI,
};
use crate::limits::{Observation, QuicInfo, Sampler};
use crate::log::{unix_ns, JsonLines};
use crate::record::RequestRecord;
use crate::{Options, QUIC_MAX_DATAGRAM};
use bytes::{Buf, Bytes};
use quinn::congestion::{
    BbrConfig, Controller, ControllerFactory, ControllerMetrics, CubicConfig, NewRenoConfig,
};
use std::io::Read;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CHUNK: usize = 64 * 1024;
const SAMPLE_EVERY: Duration = Duration::from_millis(10);

/// The implementation recorded as `cc_impl` for `--cc cubic|bbr|reno`.
pub fn cc_impl(cc: &str) -> &'static str {
    match cc {
        "bbr" => "quinn bbr (experimental, BBRv1 port)",
        "reno" => "quinn newreno",
        _ => "quinn cubic",
    }
}

/// Why the quinn HTTP/3 server could not start; printed as
/// `satbench-server: <message>`, exit 2.
#[derive(Debug, thiserror::Error)]
pub enum QuinnError {
    /// bind(2) of the UDP socket failed.
    #[error("bind udp {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    /// A socket buffer size was refused.
    #[error(transparent)]
    Sock(#[from] crate::tcpinfo::SockError),
    /// The certificate or key could not be loaded.
    #[error(transparent)]
    Tls(#[from] crate::tcp::TlsConfigError),
    /// rustls has no TLS 1.3 cipher suite QUIC can start with.
    #[error("quinn: {0}")]
    Crypto(quinn::crypto::rustls::NoInitialCipherSuite),
    /// quinn could not take the socket (its platform set-up).
    #[error("quinn endpoint: {0}")]
    Endpoint(std::io::Error),
    /// `--idle-timeout-s` too large for QUIC.
    #[error("--idle-timeout-s: {0}")]
    IdleTimeout(quinn::VarIntBoundsExceeded),
}

/// What the [`Probe`] saw, read by the sampler.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProbeState {
    pub bytes_in_flight: u64,
    pub sent: u64,
    pub acked: u64,
    pub lost: u64,
    /// quinn's view at the last ACK batch: nothing to send, and not blocked
    /// by congestion control or pacing.
    pub app_limited: bool,
    pub window: u64,
    pub ssthresh: Option<u64>,
    /// The controller's own pacing rate, bits/s (BBR only).
    pub cc_pacing_rate: Option<u64>,
}

/// A congestion controller wrapping quinn's, recording what quinn tells it.
struct Probe {
    inner: Box<dyn Controller>,
    st: Arc<Mutex<ProbeState>>,
}

impl Probe {
    fn update(&self, f: impl FnOnce(&mut ProbeState)) {
        let m = self.inner.metrics();
        let mut st = self.st.lock().expect("probe");
        f(&mut st);
        st.window = m.congestion_window;
        st.ssthresh = m.ssthresh;
        st.cc_pacing_rate = m.pacing_rate;
    }
}

impl Controller for Probe {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.inner.on_sent(now, bytes, last_packet_number);
        self.update(|s| {
            s.sent += bytes;
            s.bytes_in_flight += bytes;
        });
    }

    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &quinn_proto::RttEstimator,
    ) {
        self.inner.on_ack(now, sent, bytes, app_limited, rtt);
        self.update(|s| s.acked += bytes);
    }

    fn on_end_acks(
        &mut self,
        now: Instant,
        in_flight: u64,
        app_limited: bool,
        largest_packet_num_acked: Option<u64>,
    ) {
        self.inner
            .on_end_acks(now, in_flight, app_limited, largest_packet_num_acked);
        self.update(|s| {
            s.bytes_in_flight = in_flight;
            s.app_limited = app_limited;
        });
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        self.inner
            .on_congestion_event(now, sent, is_persistent_congestion, lost_bytes);
        self.update(|s| {
            s.lost += lost_bytes;
            s.bytes_in_flight = s.bytes_in_flight.saturating_sub(lost_bytes);
        });
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.inner.on_mtu_update(new_mtu);
    }

    fn window(&self) -> u64 {
        self.inner.window()
    }

    fn metrics(&self) -> ControllerMetrics {
        self.inner.metrics()
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(Probe {
            inner: self.inner.clone_box(),
            st: self.st.clone(),
        })
    }

    fn initial_window(&self) -> u64 {
        self.inner.initial_window()
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

/// Builds a [`Probe`] around the controller `--cc` asks for.
struct ProbeFactory {
    inner: Arc<dyn ControllerFactory + Send + Sync>,
    st: Arc<Mutex<ProbeState>>,
}

impl ControllerFactory for ProbeFactory {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(Probe {
            inner: self.inner.clone().build(now, current_mtu),
            st: self.st.clone(),
        })
    }
}

/// quinn's controller factory for `--cc`, with the initial window in bytes.
fn cc_factory(cc: &str, initial_window: u64) -> Arc<dyn ControllerFactory + Send + Sync> {
    match cc {
        "bbr" => {
            let mut c = BbrConfig::default();
            c.initial_window(initial_window);
            Arc::new(c)
        }
        "reno" => {
            let mut c = NewRenoConfig::default();
            c.initial_window(initial_window);
            Arc::new(c)
        }
        _ => {
            let mut c = CubicConfig::default();
            c.initial_window(initial_window);
            Arc::new(c)
        }
    }
}

/// The least of quinn's send window (its cap on data written and not yet
/// acknowledged): above the bandwidth-delay products of the testbed's
/// links (64 MiB is 600 ms at 890 Mbit/s).
pub const MIN_SEND_WINDOW: u64 = 64 << 20;

/// quinn's send window: `--quic-max-data` or [`MIN_SEND_WINDOW`], whichever
/// is larger, so that it does not limit a download where quiche, which has
/// no such cap besides the peer's credit, would not be limited.
pub fn send_window(o: &Options) -> u64 {
    o.max_data().max(MIN_SEND_WINDOW)
}

struct Shared {
    opts: Options,
    root: Arc<Site>,
    /// The real-time sessions and rooms, shared with the TCP server (`--webtransport`).
    realtime: Arc<crate::rt_state::RtState>,
    access: JsonLines,
    quic_info: JsonLines,
    crypto: Arc<quinn::crypto::rustls::QuicServerConfig>,
    idle: quinn::IdleTimeout,
}

impl Shared {
    /// One connection's configuration: the transport settings of `opts`, its
    /// probe, and its qlog file.
    fn server_config(&self, id: &str, st: Arc<Mutex<ProbeState>>) -> Arc<quinn::ServerConfig> {
        let o = &self.opts;
        let mut t = quinn::TransportConfig::default();
        t.max_idle_timeout(Some(self.idle));
        t.initial_mtu(QUIC_MAX_DATAGRAM as u16);
        t.min_mtu(QUIC_MAX_DATAGRAM as u16);
        t.mtu_discovery_config(None);
        // Both below 2^62, checked by the argument parser.
        t.receive_window(quinn::VarInt::from_u64(o.max_data()).expect("varint"));
        t.stream_receive_window(quinn::VarInt::from_u64(o.max_stream_data()).expect("varint"));
        t.send_window(send_window(o));
        t.max_concurrent_bidi_streams(
            quinn::VarInt::from_u64(QUIC_MAX_STREAMS_BIDI).expect("varint"),
        );
        t.max_concurrent_uni_streams(
            quinn::VarInt::from_u64(QUIC_MAX_STREAMS_UNI).expect("varint"),
        );
        let initial_window = (o.initcwnd() * QUIC_MAX_DATAGRAM) as u64;
        t.congestion_controller_factory(Arc::new(ProbeFactory {
            inner: cc_factory(o.cc_name(), initial_window),
            st,
        }));
        if let Some(dir) = &o.qlog_dir {
            if let Ok(f) = std::fs::File::create(format!("{dir}/{id}.sqlog")) {
                let mut q = quinn::QlogConfig::default();
                q.writer(Box::new(std::io::BufWriter::new(f)))
                    .title(Some(format!("satbench-server {id}")))
                    .description(Some(format!("quinn, {}", cc_impl(o.cc_name()))));
                t.qlog_stream(q.into_stream());
            }
        }
        let mut c = quinn::ServerConfig::with_crypto(self.crypto.clone());
        c.transport_config(Arc::new(t));
        c.migration(false);
        Arc::new(c)
    }
}

pub struct Server {
    rt: tokio::runtime::Runtime,
    endpoint: quinn::Endpoint,
    shared: Arc<Shared>,
}

impl Server {
    pub fn new(
        opts: &Options,
        root: Arc<Site>,
        access: JsonLines,
        quic_info: JsonLines,
        realtime: Arc<crate::rt_state::RtState>,
    ) -> Result<Server, QuinnError> {
        let addr = SocketAddr::new(opts.bind, opts.https_port);
        let sock =
            std::net::UdpSocket::bind(addr).map_err(|source| QuinnError::Bind { addr, source })?;
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
        // The TCP side's certificate, key and key log; QUIC always resumes
        // (as quiche does: --no-resumption is about TCP).
        let mut tls = crate::tcp::tls_config(
            opts.cert.as_deref().unwrap_or(""),
            opts.key.as_deref().unwrap_or(""),
            true,
        )?;
        tls.alpn_protocols = vec![b"h3".to_vec()];
        tls.max_early_data_size = if opts.zero_rtt { u32::MAX } else { 0 };
        let crypto = Arc::new(
            quinn::crypto::rustls::QuicServerConfig::try_from(tls).map_err(QuinnError::Crypto)?,
        );
        let idle = quinn::IdleTimeout::try_from(Duration::from_secs(opts.idle_timeout_s))
            .map_err(QuinnError::IdleTimeout)?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let endpoint = {
            let _in_runtime = rt.enter();
            // Handshakes not yet accepted or refused, and the datagrams
            // buffered for them, are bounded (quinn's defaults: 65536
            // and 10 MiB each, 100 MiB in all).
            let mut server = quinn::ServerConfig::with_crypto(crypto.clone());
            server
                .max_incoming(opts.max_quic_conns)
                .incoming_buffer_size(QUINN_INCOMING_BUFFER_BYTES)
                .incoming_buffer_size_total(QUINN_INCOMING_BUFFER_TOTAL_BYTES);
            quinn::Endpoint::new(
                quinn::EndpointConfig::default(),
                Some(server),
                sock,
                Arc::new(quinn::TokioRuntime),
            )
            .map_err(QuinnError::Endpoint)?
        };
        Ok(Server {
            rt,
            endpoint,
            shared: Arc::new(Shared {
                opts: opts.clone(),
                root,
                realtime,
                access,
                quic_info,
                crypto,
                idle,
            }),
        })
    }

    pub fn run(self, stop: Arc<AtomicBool>) {
        let Server {
            rt,
            endpoint,
            shared: sh,
        } = self;
        rt.block_on(async move {
            let mut tasks = tokio::task::JoinSet::new();
            let mut next_id = 1u64;
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            let table: Table = Default::default();
            loop {
                tokio::select! {
                    inc = endpoint.accept() => match inc {
                        Some(inc) => {
                            // At the cap, an address not yet validated gets a
                            // stateless Retry (connections quinn closes linger
                            // ~3 PTO, so evicting for each would pile them up);
                            // back with its token, it takes the place of the
                            // oldest handshake, or is refused.
                            let may_retry = !inc.remote_address_validated() && inc.may_retry();
                            let decision = {
                                let t = table.lock().expect("table");
                                let half_open = t
                                    .iter()
                                    .filter(|(_, e)| !e.established.load(Ordering::Relaxed))
                                    .map(|(k, e)| (*k, e.t_open));
                                admit(t.len(), sh.opts.max_quic_conns, may_retry, half_open)
                            };
                            match decision {
                                Admit::Accept => {}
                                Admit::Retry => {
                                    if let Err(e) = inc.retry() {
                                        e.into_incoming().refuse();
                                    }
                                    continue;
                                }
                                Admit::Evict(k) => evict(&sh, &table, k),
                                Admit::Refuse => {
                                    inc.refuse();
                                    continue;
                                }
                            }
                            let n = next_id;
                            let id = format!("q{n}");
                            next_id += 1;
                            let established = Arc::new(AtomicBool::new(false));
                            let peer = inc.remote_address();
                            // Registered before the task can run (and leave).
                            let mut t = table.lock().expect("table");
                            let abort = tasks.spawn(serve(
                                sh.clone(),
                                inc,
                                id.clone(),
                                established.clone(),
                                Leave(table.clone(), n),
                            ));
                            t.insert(n, Entry { abort, established, t_open: unix_ns(), peer, id });
                        }
                        None => break,
                    },
                    _ = tick.tick() => {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                    }
                    Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
                }
            }
            // Every connection still open is closed and logged.
            endpoint.close(0u32.into(), b"server stopped");
            let _ = tokio::time::timeout(Duration::from_secs(1), async {
                while tasks.join_next().await.is_some() {}
            })
            .await;
        });
    }
}

impl H3Stack for Server {
    const NAME: &'static str = "quinn";
    type Error = QuinnError;

    fn cc_impl(cc: &str) -> String {
        cc_impl(cc).to_string()
    }

    fn bind(serving: Serving) -> Result<Self, QuinnError> {
        Server::new(
            &serving.opts,
            serving.root,
            serving.access,
            serving.quic_info,
            serving.realtime,
        )
    }

    fn run(self, stop: Arc<AtomicBool>) {
        Server::run(self, stop)
    }
}

/// Handshakes not yet accepted: datagrams buffered for one, and for all.
pub const QUINN_INCOMING_BUFFER_BYTES: u64 = 64 << 10;
pub const QUINN_INCOMING_BUFFER_TOTAL_BYTES: u64 = 16 << 20;

/// A connection's task as `--max-quic-conns` sees it.
struct Entry {
    abort: tokio::task::AbortHandle,
    established: Arc<AtomicBool>,
    t_open: u64,
    peer: SocketAddr,
    id: String,
}

/// The connections open, by number.
type Table = Arc<Mutex<std::collections::HashMap<u64, Entry>>>;

/// Takes a connection out of the table when its task ends.
struct Leave(Table, u64);

impl Drop for Leave {
    fn drop(&mut self) {
        if let Ok(mut t) = self.0.lock() {
            t.remove(&self.1);
        }
    }
}

/// Stop a connection to make room for a new one (`--max-quic-conns`): its
/// task is aborted (dropping it closes it), logged as evicted.
fn evict(sh: &Shared, table: &Table, k: u64) {
    let Some(e) = table.lock().expect("table").remove(&k) else {
        return;
    };
    e.abort.abort();
    let mut r = ConnectionRecord::new::<Server>(&e.id, sh.opts.cc_name(), e.peer, e.t_open);
    r.error = Some(EVICTED.to_string());
    r.write(&sh.access);
}

/// One connection's counters shared by its request tasks and its sampler.
#[derive(Default)]
struct ConnState {
    requests: AtomicU64,
    /// Responses not yet wholly handed to quinn.
    active: AtomicUsize,
}

async fn serve(
    sh: Arc<Shared>,
    inc: quinn::Incoming,
    id: String,
    established: Arc<AtomicBool>,
    _leave: Leave,
) {
    let t_open = unix_ns();
    let peer = inc.remote_address();
    let probe = Arc::new(Mutex::new(ProbeState::default()));
    let state = Arc::new(ConnState::default());
    let cfg = sh.server_config(&id, probe.clone());
    let record = |conn: Option<&quinn::Connection>, sampler: &Sampler, error: Option<String>| {
        let mut r = ConnectionRecord::new::<Server>(&id, sh.opts.cc_name(), peer, t_open);
        r.requests = state.requests.load(Ordering::Relaxed);
        r.error = error;
        // quinn says neither whether the TLS session was resumed nor whether
        // 0-RTT data was accepted, nor how long its pacer held packets.
        let Some(conn) = conn else {
            r.limited_ms = Some(sampler.tally.json());
            return r;
        };
        let stats = conn.stats();
        r.alpn = conn
            .handshake_data()
            .and_then(|h| h.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
            .and_then(|h| h.protocol)
            .map(|p| String::from_utf8_lossy(&p).into_owned())
            .unwrap_or_default();
        (r.packets_sent, r.packets_recv) =
            (Some(stats.path.sent_packets), Some(stats.udp_rx.datagrams));
        r.packets_lost = Some(stats.path.lost_packets);
        (r.bytes_sent, r.bytes_recv) = (Some(stats.udp_tx.bytes), Some(stats.udp_rx.bytes));
        r.bytes_lost = Some(stats.path.lost_bytes);
        (r.srtt_ms, r.cwnd) = (Some(conn.rtt().as_secs_f64() * 1e3), Some(stats.path.cwnd));
        r.data_blocked_sent = Some(stats.frame_tx.data_blocked);
        r.stream_data_blocked_sent = Some(stats.frame_tx.stream_data_blocked);
        r.limited_ms = Some(sampler.tally.json());
        r
    };
    let connecting = match inc.accept_with(cfg) {
        Ok(c) => c,
        Err(e) => {
            record(None, &Sampler::default(), Some(e.to_string())).write(&sh.access);
            return;
        }
    };
    // Requests are served once the handshake is complete: 0-RTT data is
    // accepted (unless --no-0rtt) but answered after the handshake. quinn's
    // server-side `into_0rtt` would answer at once, but with it every other
    // connection from a quiche client hung with its request unaccepted by h3
    // (quinn 0.11.12, h3-quinn 0.0.10); and quinn would not then say which
    // requests were early.
    let conn = match connecting.await {
        Ok(c) => c,
        Err(e) => {
            record(None, &Sampler::default(), Some(e.to_string())).write(&sh.access);
            return;
        }
    };
    established.store(true, Ordering::Relaxed);
    let sampling = tokio::spawn(sample_loop(
        Sampler::starting(t_open),
        sh.clone(),
        conn.clone(),
        id.clone(),
        probe.clone(),
        state.clone(),
    ));
    let mut builder = h3::server::builder();
    builder.max_field_section_size(H3_MAX_FIELD_SECTION_BYTES);
    if sh.opts.webtransport {
        builder
            .enable_webtransport(true)
            .enable_extended_connect(true)
            .enable_datagram(true)
            .max_webtransport_sessions(1);
    }
    let h3 = match builder
        .build::<_, Bytes>(h3_quinn::Connection::new(conn.clone()))
        .await
    {
        Ok(h) => Some(h),
        Err(_) => {
            conn.close(0x101u32.into(), b"h3 setup failed");
            None
        }
    };
    if let Some(mut h3) = h3 {
        // A WebTransport CONNECT comes back from its request's task: its
        // session then takes the connection over.
        let (wt_tx, mut wt_rx) = tokio::sync::mpsc::channel(1);
        let wt_tx = sh.opts.webtransport.then_some(wt_tx);
        loop {
            let next = tokio::select! {
                r = h3.accept() => match r {
                    Ok(Some(resolver)) => Ok(resolver),
                    _ => break,
                },
                Some(wt) = wt_rx.recv() => Err(wt),
            };
            match next {
                Ok(resolver) => {
                    let (sh, state, id, wt) =
                        (sh.clone(), state.clone(), id.clone(), wt_tx.clone());
                    tokio::spawn(respond(sh, state, id, resolver, wt));
                }
                Err((req, stream)) => {
                    // The CONNECT's record as this stack writes every request's; the session adds its own.
                    let cc = sh.opts.cc_name();
                    let family = (cc_family(cc), cc_impl(cc).to_string());
                    let path = req
                        .uri()
                        .path_and_query()
                        .map(|p| p.as_str().to_string())
                        .unwrap_or_default();
                    let mut rec =
                        RequestRecord::new(&id, "h3", true, family, "CONNECT", &path, unix_ns());
                    rec.quic_stack = Some(Server::NAME);
                    crate::rt_wt::serve(sh.access.clone(), &sh.realtime, rec, req, stream, h3)
                        .await;
                    break;
                }
            }
        }
    }
    let error = conn.closed().await;
    let mut sampler = sampling.await.unwrap_or_else(|_| Sampler::starting(t_open));
    write_sample(&sh, &conn, &id, &probe, &state, &mut sampler, true);
    record(Some(&conn), &sampler, Some(error.to_string())).write(&sh.access);
}

/// Sample every 10 ms until the connection closes; returns the sampler.
async fn sample_loop(
    mut sampler: Sampler,
    sh: Arc<Shared>,
    conn: quinn::Connection,
    id: String,
    probe: Arc<Mutex<ProbeState>>,
    state: Arc<ConnState>,
) -> Sampler {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                write_sample(&sh, &conn, &id, &probe, &state, &mut sampler, false);
            }
            _ = conn.closed() => return sampler,
        }
    }
}

fn write_sample(
    sh: &Shared,
    conn: &quinn::Connection,
    id: &str,
    probe: &Mutex<ProbeState>,
    state: &ConnState,
    sampler: &mut Sampler,
    at_close: bool,
) {
    let p = *probe.lock().expect("probe");
    let stats = conn.stats();
    let mss = QUIC_MAX_DATAGRAM as u64;
    let app_pending = state.active.load(Ordering::Relaxed) > 0;
    // Sent something, and at the last ACK quinn still had data it held back.
    let transport_pending = p.sent > 0 && !p.app_limited;
    let o = Observation {
        cwnd: p.window,
        bytes_in_flight: p.bytes_in_flight,
        mss,
        app_pending,
        transport_pending,
        // quinn's pacer is internal: holding data while the window has room.
        pacer_holding: transport_pending && p.bytes_in_flight + mss < p.window,
        data_blocked_sent: stats.frame_tx.data_blocked,
        stream_data_blocked_sent: stats.frame_tx.stream_data_blocked,
        progress: stats.udp_tx.bytes,
    };
    let v = sampler.sample(unix_ns(), &o);
    let busy = app_pending || transport_pending || p.bytes_in_flight > 0;
    if !sh.quic_info.enabled() || !(at_close || busy) {
        return;
    }
    let srtt = conn.rtt();
    // quinn's pacer: a bucket refilled at 5/4 of the window per sRTT.
    let pacing =
        (srtt > Duration::ZERO).then(|| (p.window as f64 * 8.0 * 1.25 / srtt.as_secs_f64()) as u64);
    let info = QuicInfo {
        t_unix_ns: unix_ns(),
        conn: id.to_string(),
        quic_stack: Server::NAME,
        cc: cc_family(sh.opts.cc_name()),
        cwnd: p.window,
        bytes_in_flight: p.bytes_in_flight,
        srtt_ms: srtt.as_secs_f64() * 1e3,
        min_rtt_ms: Some(stats.path.min_rtt.as_secs_f64() * 1e3),
        pacing_rate_bps: pacing,
        cc_pacing_rate_bps: p.cc_pacing_rate,
        delivery_rate_bps: None,
        bytes_sent: p.sent,
        bytes_acked: Some(p.acked),
        bytes_lost: p.lost,
        data_blocked_sent: o.data_blocked_sent,
        stream_data_blocked_sent: o.stream_data_blocked_sent,
        pacer_holding: None,
        app_pending,
        transport_pending,
        at_close,
    };
    sh.quic_info.write(&info.json(&o, &v));
}

/// Answer one request as `quic.rs` does and log it.
async fn respond(
    sh: Arc<Shared>,
    state: Arc<ConnState>,
    id: String,
    resolver: h3::server::RequestResolver<h3_quinn::Connection, Bytes>,
    wt: Option<tokio::sync::mpsc::Sender<(hyper::http::Request<()>, crate::rt_wt::Stream)>>,
) {
    let Ok((req, mut stream)) = resolver.resolve_request().await else {
        return;
    };
    if crate::rt_wt::is_connect(&req) {
        if let Some(wt) = wt {
            let _ = wt.send((req, stream)).await;
            return;
        }
    }
    let t_request = unix_ns();
    state.requests.fetch_add(1, Ordering::Relaxed);
    state.active.fetch_add(1, Ordering::Relaxed);
    let method = req.method().as_str().to_string();
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_default();
    let upload = is_upload(&method, &path);
    let cors = req.headers().contains_key("origin");
    let mut received = 0u64;
    if upload {
        // The sink's payload: read to its end, counted (h3 hands out chunks
        // as quinn delivers them).
        while let Ok(Some(chunk)) = stream.recv_data().await {
            received += chunk.remaining() as u64;
        }
    }
    let t_body_done = unix_ns();
    let planned = match upload {
        true => Planned::uploaded(received),
        false => {
            let authority = req.uri().authority().map_or("", |a| a.as_str());
            sh.root.plan_for(("https", authority), &method, &path, cors)
        }
    };
    if !planned.delay.is_zero() {
        tokio::time::sleep(planned.delay).await;
    }
    let cc = sh.opts.cc_name();
    let family = (cc_family(cc), cc_impl(cc).to_string());
    let mut rec = RequestRecord::new(&id, "h3", true, family, &method, &path, t_request);
    rec.quic_stack = Some(Server::NAME);
    rec.authority = req.uri().authority().map(|a| a.as_str().to_string());
    (rec.status, rec.content_length) = (Some(planned.status), Some(planned.content_length));
    (rec.stream, rec.request_bytes) = (Some(stream.id().into_inner()), Some(received));
    (rec.t_body_done_unix_ns, rec.replay) = (Some(t_body_done), planned.replay);
    let mut resp = hyper::Response::builder()
        .status(planned.status)
        .header("server", "satbench")
        .header("content-type", planned.content_type.as_ref())
        .header("timing-allow-origin", crate::files::TIMING_ALLOW_ORIGIN);
    if planned.sends_length() {
        resp = resp.header("content-length", planned.content_length);
    }
    for (name, value) in &planned.headers {
        resp = resp.header(name.as_str(), value.as_str());
    }
    let resp = resp.body(()).expect("valid response");
    let (sent, error) = send(&mut stream, resp, planned.body, &mut rec).await;
    state.active.fetch_sub(1, Ordering::Relaxed);
    rec.finish(&sh.access, sent, error);
}

/// Send the head and body; returns the body bytes handed to quinn and the
/// error that stopped it, if any.
async fn send(
    stream: &mut h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>,
    resp: hyper::Response<()>,
    body: Body,
    rec: &mut RequestRecord,
) -> (u64, Option<&'static str>) {
    if stream.send_response(resp).await.is_err() {
        return (0, Some("send_response failed"));
    }
    rec.t_response_unix_ns = Some(unix_ns());
    let mut sent = 0u64;
    match body {
        Body::File { mut file, len } => {
            let mut remaining = len;
            while remaining > 0 {
                let n = (remaining as usize).min(CHUNK);
                let mut buf = vec![0u8; n];
                // Page-cached local files: a blocking read of one chunk is brief.
                if file.read_exact(&mut buf).is_err() {
                    stream.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                    return (sent, Some("read failed"));
                }
                if stream.send_data(Bytes::from(buf)).await.is_err() {
                    return (sent, Some("reset by client"));
                }
                remaining -= n as u64;
                sent += n as u64;
            }
        }
        Body::Mem(b) => {
            let n = b.len() as u64;
            if stream.send_data(Bytes::from(b)).await.is_err() {
                return (sent, Some("send_body failed"));
            }
            sent = n;
        }
        Body::Empty => {}
    }
    if stream.finish().await.is_err() {
        return (sent, Some("send_body failed"));
    }
    (sent, None)
}
