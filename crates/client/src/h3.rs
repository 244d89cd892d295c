//! HTTP/3 on quiche: one connection per origin driven by a task that owns
//! the sans-IO `quiche::Connection`, feeds it datagrams and timer expiries,
//! and serves requests sent to it over a channel, multiplexed on streams.
//! It shares only the page load's [`Session`] with the HTTP/1.1-2 fetcher.
//! With `--quic-stack quinn` the same channel is served by `h3_quinn.rs`.
//! Each object's protocol is the connection's negotiated ALPN.

pub use crate::h3_common::H3Error;
use crate::h3_common::{Req, HANDSHAKE_TIMEOUT};
use crate::session::{keep_type, Object, Progress, QuicStack, QuicWindows, Session};
use crate::upload::Payload;
use crate::url::Url;
use quiche::h3::NameValue;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot};

const MAX_DATAGRAM: usize = 1350;
/// BoringSSL's `ssl_early_data_accepted` (`SSL_get_early_data_reason`).
const EARLY_DATA_ACCEPTED: u32 = 2;

/// The client's QUIC transport parameters: the windows of `w` (large by
/// default, so flow control never limits a download), and one hundred
/// streams as browsers allow.
pub fn client_config(cacert: Option<&str>, w: QuicWindows) -> Result<quiche::Config, H3Error> {
    let mut cfg = quiche::Config::new(quiche::PROTOCOL_VERSION).map_err(H3Error::Config)?;
    cfg.set_application_protos(quiche::h3::APPLICATION_PROTOCOL)
        .map_err(H3Error::Config)?;
    match cacert {
        Some(p) => cfg
            .load_verify_locations_from_file(p)
            .map_err(|source| H3Error::CaFile {
                path: p.to_string(),
                source,
            })?,
        None => cfg.verify_peer(false),
    }
    cfg.set_max_idle_timeout(30_000);
    cfg.set_max_recv_udp_payload_size(MAX_DATAGRAM);
    cfg.set_max_send_udp_payload_size(MAX_DATAGRAM);
    cfg.set_initial_max_data(w.max_data);
    cfg.set_initial_max_stream_data_bidi_local(w.max_stream_data);
    cfg.set_initial_max_stream_data_bidi_remote(w.max_stream_data);
    if w.fixed {
        // The same window for the whole connection, not min(it, 24 MiB / 16
        // MiB) after the first one (quiche's autotuning caps).
        cfg.set_max_connection_window(w.max_data);
        cfg.set_max_stream_window(w.max_stream_data);
    }
    cfg.set_initial_max_stream_data_uni(1 << 20);
    cfg.set_initial_max_streams_bidi(100);
    cfg.set_initial_max_streams_uni(100);
    cfg.set_disable_active_migration(true);
    Ok(cfg)
}

/// A handle on one HTTP/3 connection.
/// The server's transport parameters that bear on a transfer, as received.
fn peer_params(p: &quiche::TransportParams) -> serde_json::Value {
    serde_json::json!({
        "initial_max_data": p.initial_max_data,
        "initial_max_stream_data_bidi_local": p.initial_max_stream_data_bidi_local,
        "initial_max_stream_data_bidi_remote": p.initial_max_stream_data_bidi_remote,
        "initial_max_stream_data_uni": p.initial_max_stream_data_uni,
        "initial_max_streams_bidi": p.initial_max_streams_bidi,
        "max_udp_payload_size": p.max_udp_payload_size,
        "max_idle_timeout_ms": p.max_idle_timeout,
        "max_ack_delay_ms": p.max_ack_delay,
    })
}

#[derive(Clone)]
pub struct H3Conn {
    pub id: usize,
    tx: mpsc::UnboundedSender<Req>,
}

impl H3Conn {
    /// Connect and complete the handshake; an error if the server does not speak HTTP/3.
    pub async fn connect(
        f: Arc<Session>,
        id: usize,
        url: &Url,
        peer: SocketAddr,
    ) -> Result<H3Conn, H3Error> {
        if f.settings.quic_stack == QuicStack::Quinn {
            let tx = crate::h3_quinn::connect(f, id, url, peer).await?;
            return Ok(H3Conn { id, tx });
        }
        let bind = if peer.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        };
        let sock = UdpSocket::bind(bind)
            .await
            .map_err(|e| H3Error::Bind(Arc::new(e)))?;
        // Connected, so an ICMP port-unreachable comes back as an error.
        sock.connect(peer).await.map_err(|e| H3Error::Connect {
            peer,
            source: Arc::new(e),
        })?;
        let big = 8i32 << 20;
        // SAFETY: setsockopt with a valid int.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUFFORCE,
                &big as *const i32 as *const libc::c_void,
                4,
            )
        };
        let local = sock
            .local_addr()
            .map_err(|e| H3Error::LocalAddr(Arc::new(e)))?;
        let mut cfg = client_config(f.settings.quic_cacert.as_deref(), f.settings.quic_windows)?;
        let mut scid = [0u8; quiche::MAX_CONN_ID_LEN];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut scid)
            .map_err(|_| H3Error::Random)?;
        let scid = quiche::ConnectionId::from_ref(&scid);
        cfg.enable_early_data();
        let mut conn = quiche::connect(Some(&url.host), &scid, local, peer, &mut cfg)
            .map_err(H3Error::Quic)?;
        // A session of this origin's from an earlier load: resume it (0-RTT).
        let ticket = f
            .settings
            .quic_sessions
            .lock()
            .expect("sessions")
            .get(&url.authority())
            .cloned();
        if let Some(t) = ticket {
            let _ = conn.set_session(&t);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = oneshot::channel();
        let driver = Driver {
            f,
            id,
            sock,
            local,
            peer,
            conn,
            h3: None,
            streams: HashMap::new(),
            backlog: VecDeque::new(),
            authority: url.authority(),
            ready: Some(ready_tx),
            handshake_done: false,
        };
        tokio::spawn(driver.run(rx));
        ready_rx.await.map_err(|_| H3Error::TaskEnded)??;
        Ok(H3Conn { id, tx })
    }

    pub async fn fetch(
        &self,
        url: &Url,
        obj: &mut Object,
        keep: bool,
        sink: Option<std::fs::File>,
    ) -> Result<(), H3Error> {
        let (reply, rx) = oneshot::channel();
        let o = Object {
            url: obj.url.clone(),
            queued_s: obj.queued_s,
            conn: obj.conn,
            protocol: obj.protocol.clone(),
            ..Default::default()
        };
        self.tx
            .send(Req {
                url: url.clone(),
                keep,
                sink,
                reply,
                obj: o,
            })
            .map_err(|_| H3Error::ConnectionGone {
                url: url.to_string(),
            })?;
        *obj = rx.await.map_err(|_| H3Error::ConnectionGone {
            url: url.to_string(),
        })??;
        Ok(())
    }
}

struct Stream {
    req: Req,
    body: Option<Vec<u8>>,
    progress: Progress,
    /// An upload's body still to send: the generator and a chunk quiche took
    /// only part of.
    upload: Option<(Payload, Vec<u8>)>,
}

struct Driver {
    f: Arc<Session>,
    id: usize,
    sock: UdpSocket,
    local: SocketAddr,
    peer: SocketAddr,
    conn: quiche::Connection,
    h3: Option<quiche::h3::Connection>,
    streams: HashMap<u64, Stream>,
    backlog: VecDeque<Req>,
    authority: String,
    ready: Option<oneshot::Sender<Result<(), H3Error>>>,
    /// The handshake's completion has been recorded.
    handshake_done: bool,
}

impl Driver {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Req>) {
        let err = self.drive(&mut rx).await.err();
        // Keep the session (its ticket came after the handshake) for a later load of the origin.
        if let Some(t) = self.conn.session() {
            self.f
                .settings
                .quic_sessions
                .lock()
                .expect("sessions")
                .insert(self.authority.clone(), t.to_vec());
        }
        let _ = self.conn.close(true, 0x100, b"");
        self.flush().await;
        let cause = err.unwrap_or(H3Error::Finished);
        if let Some(r) = self.ready.take() {
            let _ = r.send(Err(cause.clone()));
        }
        let failed = |url: &Url| {
            Err(H3Error::ConnectionFailed {
                url: url.to_string(),
                cause: Box::new(cause.clone()),
            })
        };
        for (_, s) in self.streams.drain() {
            let _ = s.req.reply.send(failed(&s.req.url));
        }
        rx.close();
        while let Ok(r) = rx.try_recv() {
            let _ = r.reply.send(failed(&r.url));
        }
        for r in self.backlog.drain(..) {
            let _ = r.reply.send(failed(&r.url));
        }
    }

    async fn flush(&mut self) {
        let mut out = [0u8; MAX_DATAGRAM];
        while let Ok((n, _)) = self.conn.send(&mut out) {
            let _ = self.sock.send(&out[..n]).await;
        }
    }

    async fn drive(&mut self, rx: &mut mpsc::UnboundedReceiver<Req>) -> Result<(), H3Error> {
        let mut buf = vec![0u8; 65_535];
        let h3cfg = quiche::h3::Config::new().map_err(H3Error::H3Config)?;
        let handshake_deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
        let mut rx_open = true;
        loop {
            self.flush().await;
            if self.conn.is_closed() {
                return Err(self.close_reason());
            }
            // A resumed session is in early data once its ClientHello left: requests may go now.
            self.open_h3(&h3cfg)?;
            if !self.handshake_done && tokio::time::Instant::now() > handshake_deadline {
                return Err(H3Error::HandshakeTimeout {
                    authority: self.authority.clone(),
                    secs: HANDSHAKE_TIMEOUT.as_secs(),
                });
            }
            if !rx_open && self.streams.is_empty() && self.backlog.is_empty() {
                return Ok(());
            }
            let timeout = self
                .conn
                .timeout()
                .unwrap_or(Duration::from_secs(1))
                .min(Duration::from_secs(1));
            let established = self.h3.is_some();
            tokio::select! {
                r = self.sock.recv(&mut buf) => {
                    let n = r.map_err(|e| match e.raw_os_error() {
                        Some(libc::ECONNREFUSED) => {
                            H3Error::PortUnreachable(self.authority.clone())
                        }
                        _ => H3Error::Recv(Arc::new(e)),
                    })?;
                    let info = quiche::RecvInfo { from: self.peer, to: self.local };
                    let _ = self.conn.recv(&mut buf[..n], info);
                    // Drain what else has arrived before sending.
                    while let Ok(n) = self.sock.try_recv(&mut buf) {
                        let _ = self.conn.recv(&mut buf[..n], info);
                    }
                }
                req = rx.recv(), if established && rx_open => match req {
                    Some(r) => self.backlog.push_back(r),
                    None => rx_open = false,
                },
                _ = tokio::time::sleep(timeout) => self.conn.on_timeout(),
            }
            if self.conn.is_established() && !self.handshake_done {
                self.handshake_done = true;
                let now = self.f.now();
                let params = self.conn.peer_transport_params().map(peer_params);
                let resumed = self.conn.is_resumed();
                // BoringSSL's ssl_early_data_accepted: the 0-RTT requests were taken as sent (a
                // rejected 0-RTT flight is recovered later, by loss recovery).
                let accepted = self.conn.early_data_reason() == EARLY_DATA_ACCEPTED;
                self.f.update_conn(self.id, |c| {
                    c.tls_s = Some(now);
                    c.peer_params = params;
                    c.resumed = Some(resumed);
                    c.early_data = Some(c.early_data == Some(true) && accepted);
                });
            }
            self.open_h3(&h3cfg)?;
            if self.h3.is_some() {
                while let Ok(r) = rx.try_recv() {
                    self.backlog.push_back(r);
                }
                self.send_requests()?;
                self.send_uploads();
                self.poll_h3()?;
            }
        }
    }

    /// HTTP/3 on the connection once requests may go: the handshake done, or at once as 0-RTT
    /// data of a resumed session; the connection is then ready for requests.
    fn open_h3(&mut self, h3cfg: &quiche::h3::Config) -> Result<(), H3Error> {
        if self.h3.is_some() || !(self.conn.is_established() || self.conn.is_in_early_data()) {
            return Ok(());
        }
        if self.conn.is_in_early_data() {
            self.f.update_conn(self.id, |c| c.early_data = Some(true));
        }
        self.h3 = Some(
            quiche::h3::Connection::with_transport(&mut self.conn, h3cfg)
                .map_err(H3Error::H3Setup)?,
        );
        if let Some(r) = self.ready.take() {
            let _ = r.send(Ok(()));
        }
        Ok(())
    }

    fn close_reason(&self) -> H3Error {
        let authority = self.authority.clone();
        if let Some(e) = self.conn.peer_error() {
            let reason = String::from_utf8_lossy(&e.reason).into_owned();
            return H3Error::PeerClosed {
                authority,
                code: e.error_code,
                reason,
            };
        }
        if let Some(e) = self.conn.local_error() {
            let reason = String::from_utf8_lossy(&e.reason).into_owned();
            return H3Error::LocalClosed {
                authority,
                code: e.error_code,
                reason,
            };
        }
        if self.conn.is_timed_out() {
            return H3Error::TimedOut(authority);
        }
        H3Error::Closed(authority)
    }

    fn send_requests(&mut self) -> Result<(), H3Error> {
        let h3 = self.h3.as_mut().expect("h3");
        let upload = self.f.settings.upload;
        let method: &[u8] = if upload.is_some() { b"POST" } else { b"GET" };
        while let Some(mut r) = self.backlog.pop_front() {
            let hdrs = [
                quiche::h3::Header::new(b":method", method),
                quiche::h3::Header::new(b":scheme", b"https"),
                quiche::h3::Header::new(b":authority", self.authority.as_bytes()),
                quiche::h3::Header::new(b":path", r.url.path.as_bytes()),
                quiche::h3::Header::new(b"user-agent", b"satbench-load"),
                quiche::h3::Header::new(b"accept", b"*/*"),
            ];
            match h3.send_request(&mut self.conn, &hdrs, upload.is_none()) {
                Ok(sid) => {
                    r.obj.start_s = self.f.now();
                    let progress = Progress::new(self.f.settings.progress, self.f.settings.client);
                    self.streams.insert(
                        sid,
                        Stream {
                            req: r,
                            body: None,
                            progress,
                            upload: upload.map(|n| (Payload::new(n), Vec::new())),
                        },
                    );
                }
                Err(quiche::h3::Error::StreamBlocked)
                | Err(quiche::h3::Error::TransportError(quiche::Error::StreamLimit)) => {
                    self.backlog.push_front(r);
                    break;
                }
                Err(e) => {
                    let url = r.url.to_string();
                    let _ = r.reply.send(Err(H3Error::Request { url, source: e }));
                }
            }
        }
        Ok(())
    }

    /// Send what uploads' bodies flow and congestion control allow.
    fn send_uploads(&mut self) {
        let h3 = self.h3.as_mut().expect("h3");
        for (sid, s) in self.streams.iter_mut() {
            let Some((payload, pending)) = s.upload.as_mut() else {
                continue;
            };
            loop {
                if pending.is_empty() {
                    *pending = payload.next_chunk();
                }
                let fin = payload.remaining() == 0;
                match h3.send_body(&mut self.conn, *sid, pending, fin) {
                    Ok(n) => {
                        s.req.obj.sent += n as u64;
                        let all = n == pending.len();
                        pending.drain(..n);
                        if all && fin {
                            s.upload = None;
                            break;
                        }
                        if !all {
                            break;
                        }
                    }
                    // Done: no room now; an error: the stream's reset shows in poll_h3.
                    Err(_) => break,
                }
            }
        }
    }

    fn poll_h3(&mut self) -> Result<(), H3Error> {
        let h3 = self.h3.as_mut().expect("h3");
        let mut body = [0u8; 65_536];
        loop {
            match h3.poll(&mut self.conn) {
                Ok((sid, quiche::h3::Event::Headers { list, .. })) => {
                    if let Some(s) = self.streams.get_mut(&sid) {
                        s.req.obj.ttfb_s = self.f.now();
                        s.req.obj.protocol =
                            String::from_utf8_lossy(self.conn.application_proto()).into_owned();
                        for h in &list {
                            match h.name() {
                                b":status" => {
                                    s.req.obj.status = std::str::from_utf8(h.value())
                                        .ok()
                                        .and_then(|v| v.parse().ok())
                                        .unwrap_or(0)
                                }
                                b"content-type" => {
                                    s.req.obj.content_type =
                                        String::from_utf8_lossy(h.value()).into_owned()
                                }
                                _ => {}
                            }
                        }
                        if s.req.keep && keep_type(&s.req.obj.content_type) {
                            s.body = Some(Vec::new());
                        }
                    }
                }
                Ok((sid, quiche::h3::Event::Data)) => {
                    while let Ok(n) = h3.recv_body(&mut self.conn, sid, &mut body) {
                        if let Some(s) = self.streams.get_mut(&sid) {
                            s.req.obj.bytes += n as u64;
                            if let Some(b) = s.body.as_mut() {
                                b.extend_from_slice(&body[..n]);
                            }
                            if let Some(f) = s.req.sink.as_mut() {
                                if let Err(e) = std::io::Write::write_all(f, &body[..n]) {
                                    return Err(H3Error::Sink(Arc::new(e)));
                                }
                            }
                            s.progress.tick(s.req.obj.bytes);
                        }
                    }
                }
                Ok((sid, quiche::h3::Event::Finished)) => {
                    if let Some(mut s) = self.streams.remove(&sid) {
                        s.req.obj.done_s = self.f.now();
                        s.req.obj.body = s.body;
                        let _ = s.req.reply.send(Ok(s.req.obj));
                    }
                }
                Ok((sid, quiche::h3::Event::Reset(e))) => {
                    if let Some(s) = self.streams.remove(&sid) {
                        let url = s.req.url.to_string();
                        let _ = s.req.reply.send(Err(H3Error::StreamReset { url, code: e }));
                    }
                }
                Ok(_) => {}
                Err(quiche::h3::Error::Done) => return Ok(()),
                Err(e) => return Err(H3Error::Protocol(e)),
            }
        }
    }
}
