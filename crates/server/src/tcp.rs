//! HTTP/1.1 (cleartext and TLS) and HTTP/2 (TLS, ALPN h2) over kernel TCP.

use crate::files::{is_upload, Planned};
use crate::http::{now_ms, ConnUse, FileBody, Shared};
use crate::limits::Sampler;
use crate::log::unix_ns;
use crate::record::RequestRecord;
use crate::tcpinfo::{self, SockError};
use crate::Options;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};

static NEXT_CONN: AtomicU64 = AtomicU64::new(1);

fn proto_name(v: hyper::Version) -> &'static str {
    match v {
        hyper::Version::HTTP_2 => "h2",
        hyper::Version::HTTP_10 => "http/1.0",
        _ => "http/1.1",
    }
}

/// The origin a request named: HTTP/2's `:authority`, else HTTP/1.1's
/// `Host` (which connections served which names shows coalescing).
fn authority_of<B>(req: &Request<B>) -> Option<String> {
    req.uri()
        .authority()
        .map(|a| a.as_str().to_string())
        .or_else(|| {
            req.headers()
                .get(hyper::header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
        })
}

pub(crate) async fn handle(
    req: Request<hyper::body::Incoming>,
    sh: Arc<Shared>,
    conn: Arc<str>,
    tls: bool,
    cc: Arc<str>,
    conn_use: Arc<ConnUse>,
) -> Result<Response<FileBody>, std::io::Error> {
    let t_request = unix_ns();
    let method = req.method().clone();
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let proto = proto_name(req.version());
    let authority = authority_of(&req);
    if crate::rt_serve::is_realtime(req.uri().path()) {
        let r = crate::rt_serve::Req {
            conn,
            proto,
            tls,
            cc,
            authority,
            t_request,
            conn_use,
        };
        return crate::rt_serve::respond(req, sh, r).await;
    }
    // Read the request body to its end, counting it: the upload sink's
    // payload, or a stray body of any other request (answered 405 or as if
    // it had none).
    let upload = is_upload(method.as_str(), &target);
    let cors = req.headers().contains_key(hyper::header::ORIGIN);
    let mut body = req.into_body();
    let mut received = 0u64;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => received += f.data_ref().map_or(0, |d| d.len() as u64),
            Err(_) => break,
        }
    }
    let t_body_done = unix_ns();
    let planned = if upload {
        Planned::uploaded(received)
    } else {
        let scheme = if tls { "https" } else { "http" };
        let at = (scheme, authority.as_deref().unwrap_or(""));
        sh.root.plan_for(at, method.as_str(), &target, cors)
    };
    if !planned.delay.is_zero() {
        tokio::time::sleep(planned.delay).await;
    }
    let status = StatusCode::from_u16(planned.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let access = sh.access.clone();
    let cc_impl = format!("linux {cc}");
    let mut rec = RequestRecord::new(
        &conn,
        proto,
        tls,
        (&cc, cc_impl),
        method.as_str(),
        &target,
        t_request,
    );
    rec.authority = authority;
    rec.status = Some(status.as_u16());
    rec.content_length = Some(planned.content_length);
    rec.request_bytes = Some(received);
    rec.t_body_done_unix_ns = Some(t_body_done);
    rec.t_response_unix_ns = Some(unix_ns());
    rec.replay = planned.replay;
    let on_done: Box<dyn FnOnce(u64) + Send> =
        Box::new(move |sent| rec.finish(&access, sent, None));
    let mut b = Response::builder()
        .status(status)
        .header("server", "satbench")
        .header("content-type", planned.content_type.as_ref())
        .header("timing-allow-origin", crate::files::TIMING_ALLOW_ORIGIN);
    for (name, value) in &planned.headers {
        b = b.header(name.as_str(), value.as_str());
    }
    if sh.opts.alt_svc {
        b = b.header(
            "alt-svc",
            format!("h3=\":{}\"; ma=86400", sh.opts.https_port),
        );
    }
    let body = match planned.body {
        crate::files::Body::File { file, len } => FileBody::file(file, len, on_done),
        crate::files::Body::Empty => {
            if planned.sends_length() {
                b = b.header("content-length", planned.content_length);
            }
            FileBody::mem(Bytes::new(), on_done)
        }
        crate::files::Body::Mem(m) => FileBody::mem(Bytes::from(m), on_done),
    };
    Ok(b.body(body).expect("valid response"))
}

/// Why a listening socket could not be set up; printed as
/// `satbench-server: <message>`, exit 1.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// socket(2), setsockopt(2) or listen(2) failed.
    #[error(transparent)]
    Sock(#[from] SockError),
    /// bind(2) failed (port in use, no such address).
    #[error("bind {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    /// The socket could not be made non-blocking (ioctl FIONBIO).
    #[error("set_nonblocking: {0}")]
    Nonblocking(std::io::Error),
}

/// Bind a listener with the options every accepted socket inherits.
pub fn listener(
    addr: std::net::SocketAddr,
    opts: &Options,
) -> Result<std::net::TcpListener, ListenError> {
    let (family, name) = match addr {
        std::net::SocketAddr::V4(_) => (libc::AF_INET, "AF_INET, SOCK_STREAM"),
        std::net::SocketAddr::V6(_) => (libc::AF_INET6, "AF_INET6, SOCK_STREAM"),
    };
    // SAFETY: plain socket(2) call; the fd is owned right after.
    let fd = unsafe { libc::socket(family, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(SockError::last("socket", name).into());
    }
    // SAFETY: fd is a fresh socket owned by no one else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    let raw = sock.as_raw_fd();
    tcpinfo::set_int(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1, "SO_REUSEADDR")?;
    if let Some(cc) = &opts.cc {
        tcpinfo::set_congestion(raw, cc)?;
    }
    if opts.tfo {
        tcpinfo::set_int(
            raw,
            libc::IPPROTO_TCP,
            libc::TCP_FASTOPEN,
            256,
            "TCP_FASTOPEN",
        )?;
    }
    if let Some(n) = opts.sndbuf {
        tcpinfo::set_int(
            raw,
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            n as i32,
            "SO_SNDBUF",
        )?;
    }
    if let Some(n) = opts.rcvbuf {
        tcpinfo::set_int(
            raw,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            n as i32,
            "SO_RCVBUF",
        )?;
    }
    bind(raw, addr)?;
    // SAFETY: plain listen(2).
    if unsafe { libc::listen(raw, 1024) } != 0 {
        return Err(SockError::last("listen", addr.to_string()).into());
    }
    let l = std::net::TcpListener::from(sock);
    l.set_nonblocking(true).map_err(ListenError::Nonblocking)?;
    Ok(l)
}

/// bind(2) to an IPv4 or IPv6 address; `::` takes both families (IPv4
/// clients then appear as `::ffff:a.b.c.d`), any other IPv6 address only its own.
fn bind(raw: std::os::fd::RawFd, addr: std::net::SocketAddr) -> Result<(), ListenError> {
    let rc = match addr {
        std::net::SocketAddr::V4(v4) => {
            let sa = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sa is a valid sockaddr_in of the size given.
            unsafe {
                libc::bind(
                    raw,
                    &sa as *const libc::sockaddr_in as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in>() as u32,
                )
            }
        }
        std::net::SocketAddr::V6(v6) => {
            let only = i32::from(!v6.ip().is_unspecified());
            tcpinfo::set_int(
                raw,
                libc::IPPROTO_IPV6,
                libc::IPV6_V6ONLY,
                only,
                "IPV6_V6ONLY",
            )?;
            let sa = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sa is a valid sockaddr_in6 of the size given.
            unsafe {
                libc::bind(
                    raw,
                    &sa as *const libc::sockaddr_in6 as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_in6>() as u32,
                )
            }
        }
    };
    if rc != 0 {
        let source = std::io::Error::last_os_error();
        return Err(ListenError::Bind { addr, source });
    }
    Ok(())
}

/// The request head limit of HTTP/1.1: larger heads are refused (431), as
/// real servers do.
pub const H1_MAX_HEAD_BYTES: usize = 64 * 1024;
/// HTTP/2 streams one connection may have open; more are refused
/// (RST_STREAM REFUSED_STREAM).
pub const H2_MAX_CONCURRENT_STREAMS: u32 = 256;
/// The largest HTTP/2 header list accepted (SETTINGS_MAX_HEADER_LIST_SIZE,
/// hyper's default made explicit); with it h2 bounds CONTINUATION frames.
pub const H2_MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;
/// Streams a client may open and reset before the server has accepted them
/// (HTTP/2 rapid reset, CVE-2023-44487): past it, GOAWAY ENHANCE_YOUR_CALM.
pub const H2_MAX_PENDING_ACCEPT_RESET_STREAMS: usize = 20;
/// Streams the server may reset for the client's protocol errors before it
/// closes the connection (hyper's default made explicit).
pub const H2_MAX_LOCAL_ERROR_RESET_STREAMS: usize = 1024;
/// Response bytes buffered per HTTP/2 stream (hyper's default made explicit).
pub const H2_MAX_SEND_BUF_BYTES: usize = 400 * 1024;

/// hyper's HTTP/1.1 and HTTP/2 server with this server's limits (listed in
/// the ready line, `limits`): every TCP connection is served by one.
pub fn http_builder(opts: &Options) -> hyper_util::server::conn::auto::Builder<TokioExecutor> {
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(opts.header_read_timeout())
        .max_buf_size(H1_MAX_HEAD_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_CONCURRENT_STREAMS)
        .max_header_list_size(H2_MAX_HEADER_LIST_BYTES)
        .max_pending_accept_reset_streams(H2_MAX_PENDING_ACCEPT_RESET_STREAMS)
        .max_local_error_reset_streams(H2_MAX_LOCAL_ERROR_RESET_STREAMS)
        .max_send_buf_size(H2_MAX_SEND_BUF_BYTES)
        .enable_connect_protocol();
    builder
}

/// A stream that records when it last read or wrote anything, and how long
/// its writes waited for room in the socket.
struct Tracked<T> {
    inner: T,
    last: Arc<AtomicU64>,
    blocked: Arc<WriteBlocked>,
}

/// How long the application's writes to a socket stayed pending (its send
/// buffer full), cumulative: what the classifier of `limits.rs` reads as
/// the application waiting for the send buffer. Linux's own sndbuf-limited
/// chrono needs `SOCK_NOSPACE` at the moment it sends from an empty queue,
/// and stayed at 0 through a whole transfer held by a 64 KB `SO_SNDBUF`
/// (tokio's edge-triggered writes): this clock is the application's view.
#[derive(Debug, Default)]
pub struct WriteBlocked {
    since_ns: AtomicU64,
    total_ns: AtomicU64,
}

impl WriteBlocked {
    fn pending(&self, now_ns: u64) {
        let _ =
            self.since_ns
                .compare_exchange(0, now_ns.max(1), Ordering::Relaxed, Ordering::Relaxed);
    }

    fn ready(&self, now_ns: u64) {
        let since = self.since_ns.swap(0, Ordering::Relaxed);
        if since > 0 {
            self.total_ns
                .fetch_add(now_ns.saturating_sub(since), Ordering::Relaxed);
        }
    }

    /// Microseconds blocked up to `now_ns`, the wait in progress included.
    pub fn total_us(&self, now_ns: u64) -> u64 {
        let since = self.since_ns.load(Ordering::Relaxed);
        let open = if since > 0 {
            now_ns.saturating_sub(since)
        } else {
            0
        };
        (self.total_ns.load(Ordering::Relaxed) + open) / 1000
    }
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Tracked<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.last.store(now_ms(), Ordering::Relaxed);
        }
        r
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Tracked<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        let now = unix_ns();
        match r {
            Poll::Pending => self.blocked.pending(now),
            Poll::Ready(ref w) => {
                self.blocked.ready(now);
                if matches!(w, Ok(n) if *n > 0) {
                    self.last.store(now / 1_000_000, Ordering::Relaxed);
                }
            }
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Resolves once nothing was read or written for `idle` while no real-time
/// stream was open.
async fn idle_watch(last: Arc<AtomicU64>, idle: Duration, streams: Arc<AtomicUsize>) {
    let idle_ms = idle.as_millis() as u64;
    loop {
        let (now, last, open) = (
            now_ms(),
            last.load(Ordering::Relaxed),
            streams.load(Ordering::Relaxed),
        );
        match idle_check(now, last, idle_ms, open) {
            None => return,
            Some(wait) => tokio::time::sleep(wait).await,
        }
    }
}

/// Whether a connection quiet since `last_ms` (at `now_ms`) is to be closed
/// for `--idle-timeout` (None), or how long to wait before looking again: a
/// connection with a real-time stream open is never idle, and the watch
/// wakes at least every 10 ms apart.
fn idle_check(now_ms: u64, last_ms: u64, idle_ms: u64, streams_open: usize) -> Option<Duration> {
    let quiet = now_ms.saturating_sub(last_ms);
    if quiet >= idle_ms && streams_open == 0 {
        return None;
    }
    Some(Duration::from_millis(idle_ms.saturating_sub(quiet).max(10)))
}

/// Sample TCP_INFO every 10 ms until `stop` (or the server's shutdown), and
/// once more at close; each interval judged by the classifier of
/// `limits.rs`, whose tally goes into the connection's record (`limited_ms`)
/// before the record is written. The samples go to `--tcp-info`'s file when
/// there is one.
async fn sample(
    sh: Arc<Shared>,
    fd: OwnedFd,
    conn: Arc<str>,
    cc: Arc<str>,
    t_open: u64,
    blocked: Arc<WriteBlocked>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut sampler = Sampler::starting(t_open);
    let mut stop = stop;
    let mut shutdown = sh.shutdown.subscribe();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let one = |sampler: &mut Sampler, at_close: bool| {
        if let Some(i) = tcpinfo::tcp_info(fd.as_raw_fd()) {
            let t = unix_ns();
            let o = tcpinfo::observation(&i, blocked.total_us(t));
            let v = sampler.sample_tcp(t, &o);
            if sh.tcp_info.enabled() {
                let mut j = tcpinfo::line(&i, &conn, t, &cc, &o, &v);
                if at_close {
                    j["at_close"] = true.into();
                }
                sh.tcp_info.write(&j);
            }
        }
    };
    loop {
        tokio::select! {
            _ = tick.tick() => one(&mut sampler, false),
            _ = &mut stop => break,
            _ = shutdown.changed() => break,
        }
    }
    one(&mut sampler, true);
    if let Some(r) = sh.open.lock().expect("open lock").get_mut(&conn) {
        r["limited_ms"] = sampler.tally.json();
    }
}

async fn serve_conn(sh: Arc<Shared>, stream: TcpStream, tls: Option<tokio_rustls::TlsAcceptor>) {
    let slot = sh.live.admit(sh.opts.max_tcp_conns);
    let _ = stream.set_nodelay(sh.opts.nodelay);
    let conn: Arc<str> = format!("t{}", NEXT_CONN.fetch_add(1, Ordering::Relaxed)).into();
    let fd = stream.as_raw_fd();
    let cc: Arc<str> = tcpinfo::congestion(fd)
        .unwrap_or_else(|| "unknown".into())
        .into();
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let t_open = unix_ns();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    let blocked = Arc::new(WriteBlocked::default());
    // The classifier runs on every connection (its tally is the record's
    // `limited_ms`, as QUIC's is); the samples are written only when
    // `--tcp-info` names a file.
    // SAFETY: dup of a live socket; the copy is owned by the sampler.
    let dup = unsafe { libc::dup(fd) };
    let sampling = (dup >= 0).then(|| {
        // SAFETY: fresh fd from dup.
        let owned = unsafe { OwnedFd::from_raw_fd(dup) };
        tokio::spawn(sample(
            sh.clone(),
            owned,
            conn.clone(),
            cc.clone(),
            t_open,
            blocked.clone(),
            stop_rx,
        ))
    });
    sh.open.lock().expect("open lock").insert(
        conn.clone(),
        serde_json::json!({
            "type": "connection", "conn": &*conn, "transport": "tcp", "cc": &*cc,
            "cc_impl": format!("linux {cc}"), "alpn": "",
            "peer": peer, "t_open_unix_ns": t_open, "tls": tls.is_some(),
            "nodelay": tcpinfo::get_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY).map(|v| v != 0),
        }),
    );
    let builder = http_builder(&sh.opts);
    let (c2, s2, c3) = (conn.clone(), sh.clone(), cc.clone());
    let conn_use = Arc::new(ConnUse::default());
    let u2 = conn_use.clone();
    let idle = Duration::from_secs(sh.opts.idle_timeout_s);
    // Connections idle for longer than the idle timeout (including ones that
    // never send a byte) are closed: the serving future is dropped.
    let last = slot.last.clone();
    let stream = Tracked {
        inner: stream,
        last: last.clone(),
        blocked,
    };
    let watch = idle_watch(last, idle, conn_use.streams.clone());
    tokio::pin!(watch);
    let handshake = sh.opts.header_read_timeout();
    let work = async {
        match tls {
            None => {
                let svc = hyper::service::service_fn(move |r| {
                    handle(r, s2.clone(), c2.clone(), false, c3.clone(), u2.clone())
                });
                tokio::select! {
                    r = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc) => {
                        r.map_err(ConnError::Http)
                    }
                    _ = &mut watch => Err(ConnError::Idle),
                }
            }
            Some(acc) => match tokio::time::timeout(handshake, acc.accept(stream)).await {
                Ok(Ok(s)) => {
                    let alpn = s
                        .get_ref()
                        .1
                        .alpn_protocol()
                        .map(|p| String::from_utf8_lossy(p).into_owned())
                        .unwrap_or_default();
                    let kind = s
                        .get_ref()
                        .1
                        .handshake_kind()
                        .map(|k| format!("{k:?}"))
                        .unwrap_or_default();
                    if let Some(r) = sh.open.lock().expect("open lock").get_mut(&conn) {
                        r["alpn"] = alpn.into();
                        r["tls_handshake"] = kind.into();
                    }
                    let svc = hyper::service::service_fn(move |r| {
                        handle(r, s2.clone(), c2.clone(), true, c3.clone(), u2.clone())
                    });
                    tokio::select! {
                        r = builder.serve_connection_with_upgrades(TokioIo::new(s), svc) => {
                            r.map_err(ConnError::Http)
                        }
                        _ = &mut watch => Err(ConnError::Idle),
                    }
                }
                Ok(Err(e)) => Err(ConnError::Tls(e)),
                Err(_) => Err(ConnError::TlsTimeout),
            },
        }
    };
    let evicted = slot.evict.clone();
    let result = tokio::select! {
        r = work => r,
        _ = evicted.notified() => Err(ConnError::Evicted),
    };
    // Until an upgraded WebSocket on this connection is done (or evicted).
    tokio::select! {
        _ = conn_use.upgrades.acquire() => {}
        _ = evicted.notified() => {}
    }
    drop(slot);
    let _ = stop_tx.send(());
    if let Some(h) = sampling {
        let _ = h.await; // its last sample and tally are in the record
    }
    let error = result.err().map(|e| e.to_string());
    if let Some(mut rec) = sh.open.lock().expect("open lock").remove(&conn) {
        rec["t_close_unix_ns"] = unix_ns().into();
        rec["error"] = error.into();
        sh.access.write(&rec);
    }
}

pub async fn accept_loop(
    sh: Arc<Shared>,
    l: std::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let l = TcpListener::from_std(l).expect("tokio listener");
    loop {
        match l.accept().await {
            Ok((s, _)) => {
                tokio::spawn(serve_conn(sh.clone(), s, tls.clone()));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// Why the TLS configuration could not be built; printed as
/// `satbench-server: <message>`, exit 2.
#[derive(Debug, thiserror::Error)]
pub enum TlsConfigError {
    /// The certificate or key file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    /// A PEM block of the file is malformed.
    #[error("{path}: {source}")]
    Pem {
        path: String,
        source: std::io::Error,
    },
    /// The key file holds no private key.
    #[error("{0}: no private key")]
    NoKey(String),
    /// rustls refused TLS 1.3 with this provider.
    #[error("{0}")]
    Versions(rustls::Error),
    /// rustls refused the certificate chain or the key.
    #[error("certificate: {0}")]
    Certificate(rustls::Error),
}

/// How a TCP connection ended, when not cleanly: the access log's `error`.
#[derive(Debug, thiserror::Error)]
enum ConnError {
    /// hyper's error serving HTTP/1.1 or HTTP/2.
    #[error("{0}")]
    Http(Box<dyn std::error::Error + Send + Sync>),
    /// Nothing was read or written for the idle timeout.
    #[error("idle timeout")]
    Idle,
    /// The TLS handshake failed.
    #[error("tls: {0}")]
    Tls(std::io::Error),
    /// The TLS handshake took longer than the header-read timeout.
    #[error("tls: handshake timeout")]
    TlsTimeout,
    /// Closed to make room for a new connection (`--max-tcp-conns`).
    #[error("evicted: --max-tcp-conns reached")]
    Evicted,
}

/// TLS 1.3 with ALPN h2 and http/1.1; session resumption unless disabled;
/// keys logged to $SSLKEYLOGFILE when set.
pub fn tls_config(
    cert: &str,
    key: &str,
    resumption: bool,
) -> Result<rustls::ServerConfig, TlsConfigError> {
    let read = |p: &str| {
        std::fs::read(p).map_err(|source| TlsConfigError::Read {
            path: p.to_string(),
            source,
        })
    };
    let certs = rustls_pemfile::certs(&mut &read(cert)?[..])
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsConfigError::Pem {
            path: cert.to_string(),
            source,
        })?;
    let key = rustls_pemfile::private_key(&mut &read(key)?[..])
        .map_err(|source| TlsConfigError::Pem {
            path: key.to_string(),
            source,
        })?
        .ok_or_else(|| TlsConfigError::NoKey(key.to_string()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut c = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(TlsConfigError::Versions)?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(TlsConfigError::Certificate)?;
    c.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    c.key_log = Arc::new(rustls::KeyLogFile::new());
    if !resumption {
        c.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        c.send_tls13_tickets = 0;
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quiet_connection_closes_at_the_idle_timeout_unless_a_stream_holds_it() {
        assert_eq!(idle_check(1_000, 0, 1_000, 0), None);
        assert_eq!(
            idle_check(1_000, 200, 1_000, 0),
            Some(Duration::from_millis(200))
        );
        // An event stream or a held poll keeps a connection, however quiet.
        assert_eq!(
            idle_check(9_000, 0, 1_000, 1),
            Some(Duration::from_millis(10))
        );
        // A clock that went back (last after now) counts as no quiet at all.
        assert_eq!(
            idle_check(0, 5, 1_000, 0),
            Some(Duration::from_millis(1_000))
        );
    }
}
