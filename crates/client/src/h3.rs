//! HTTP/3 on quiche: one connection per origin driven by a task that owns
//! the sans-IO `quiche::Connection`, feeds it datagrams and timer expiries,
//! and serves requests sent to it over a channel, multiplexed on streams.

use crate::conn::{keep_type, Fetcher, Object, Progress};
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
/// A handshake that has not finished by then means no HTTP/3 here.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The client's QUIC transport parameters: large windows, so flow control
/// never limits a download, and one hundred streams as browsers allow.
pub fn client_config(cacert: Option<&str>) -> Result<quiche::Config, String> {
    let mut cfg = quiche::Config::new(quiche::PROTOCOL_VERSION).map_err(|e| e.to_string())?;
    cfg.set_application_protos(quiche::h3::APPLICATION_PROTOCOL)
        .map_err(|e| e.to_string())?;
    match cacert {
        Some(p) => cfg
            .load_verify_locations_from_file(p)
            .map_err(|e| format!("{p}: {e}"))?,
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
    Ok(cfg)
}

struct Req {
    url: Url,
    keep: bool,
    sink: Option<std::fs::File>,
    reply: oneshot::Sender<Result<Object, String>>,
    obj: Object,
}

/// A handle on one HTTP/3 connection.
#[derive(Clone)]
pub struct H3Conn {
    pub id: usize,
    tx: mpsc::UnboundedSender<Req>,
}

impl H3Conn {
    /// Connect and complete the handshake; an error if the server does not speak HTTP/3.
    pub async fn connect(
        f: Arc<Fetcher>,
        id: usize,
        url: &Url,
        peer: SocketAddr,
    ) -> Result<H3Conn, String> {
        let bind = if peer.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        };
        let sock = UdpSocket::bind(bind)
            .await
            .map_err(|e| format!("bind: {e}"))?;
        // Connected, so an ICMP port-unreachable comes back as an error.
        sock.connect(peer)
            .await
            .map_err(|e| format!("connect {peer}: {e}"))?;
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
        let local = sock.local_addr().map_err(|e| e.to_string())?;
        let mut cfg = client_config(f.settings.quic_cacert.as_deref())?;
        let mut scid = [0u8; quiche::MAX_CONN_ID_LEN];
        ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut scid)
            .map_err(|_| "random")?;
        let scid = quiche::ConnectionId::from_ref(&scid);
        let conn = quiche::connect(Some(&url.host), &scid, local, peer, &mut cfg)
            .map_err(|e| format!("QUIC: {e}"))?;
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
        };
        tokio::spawn(driver.run(rx));
        ready_rx
            .await
            .map_err(|_| "HTTP/3 connection task ended".to_string())??;
        Ok(H3Conn { id, tx })
    }

    pub async fn fetch(
        &self,
        url: &Url,
        obj: &mut Object,
        keep: bool,
        sink: Option<std::fs::File>,
    ) -> Result<(), String> {
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
            .map_err(|_| format!("{url}: the HTTP/3 connection has closed"))?;
        *obj = rx
            .await
            .map_err(|_| format!("{url}: the HTTP/3 connection has closed"))??;
        Ok(())
    }
}

struct Stream {
    req: Req,
    body: Option<Vec<u8>>,
    progress: Progress,
}

struct Driver {
    f: Arc<Fetcher>,
    id: usize,
    sock: UdpSocket,
    local: SocketAddr,
    peer: SocketAddr,
    conn: quiche::Connection,
    h3: Option<quiche::h3::Connection>,
    streams: HashMap<u64, Stream>,
    backlog: VecDeque<Req>,
    authority: String,
    ready: Option<oneshot::Sender<Result<(), String>>>,
}

impl Driver {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Req>) {
        let err = self.drive(&mut rx).await.err();
        let _ = self.conn.close(true, 0x100, b"");
        self.flush().await;
        let msg = err.unwrap_or_else(|| "HTTP/3 connection closed".into());
        if let Some(r) = self.ready.take() {
            let _ = r.send(Err(msg.clone()));
        }
        for (_, s) in self.streams.drain() {
            let _ = s.req.reply.send(Err(format!("{}: {msg}", s.req.url)));
        }
        rx.close();
        while let Ok(r) = rx.try_recv() {
            let _ = r.reply.send(Err(format!("{}: {msg}", r.url)));
        }
        for r in self.backlog.drain(..) {
            let _ = r.reply.send(Err(format!("{}: {msg}", r.url)));
        }
    }

    async fn flush(&mut self) {
        let mut out = [0u8; MAX_DATAGRAM];
        loop {
            match self.conn.send(&mut out) {
                Ok((n, _)) => {
                    let _ = self.sock.send(&out[..n]).await;
                }
                Err(_) => break,
            }
        }
    }

    async fn drive(&mut self, rx: &mut mpsc::UnboundedReceiver<Req>) -> Result<(), String> {
        let mut buf = vec![0u8; 65_535];
        let h3cfg = quiche::h3::Config::new().map_err(|e| e.to_string())?;
        let handshake_deadline = tokio::time::Instant::now() + HANDSHAKE_TIMEOUT;
        let mut rx_open = true;
        loop {
            self.flush().await;
            if self.conn.is_closed() {
                return Err(self.close_reason());
            }
            if self.h3.is_none() && tokio::time::Instant::now() > handshake_deadline {
                return Err(format!(
                    "no QUIC handshake with {} within {} s",
                    self.authority,
                    HANDSHAKE_TIMEOUT.as_secs()
                ));
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
                            format!("{}: UDP port unreachable (no HTTP/3 server)", self.authority)
                        }
                        _ => format!("recv: {e}"),
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
            if self.conn.is_established() && self.h3.is_none() {
                let now = self.f.now();
                self.f.update_conn(self.id, |c| c.tls_s = Some(now));
                self.h3 = Some(
                    quiche::h3::Connection::with_transport(&mut self.conn, &h3cfg)
                        .map_err(|e| format!("h3: {e}"))?,
                );
                if let Some(r) = self.ready.take() {
                    let _ = r.send(Ok(()));
                }
            }
            if self.h3.is_some() {
                while let Ok(r) = rx.try_recv() {
                    self.backlog.push_back(r);
                }
                self.send_requests()?;
                self.poll_h3()?;
            }
        }
    }

    fn close_reason(&self) -> String {
        if let Some(e) = self.conn.peer_error() {
            return format!(
                "{} closed the QUIC connection: error {:#x} {}",
                self.authority,
                e.error_code,
                String::from_utf8_lossy(&e.reason)
            );
        }
        if let Some(e) = self.conn.local_error() {
            return format!(
                "QUIC connection to {} failed: error {:#x} {}",
                self.authority,
                e.error_code,
                String::from_utf8_lossy(&e.reason)
            );
        }
        if self.conn.is_timed_out() {
            return format!("QUIC connection to {} timed out", self.authority);
        }
        format!("QUIC connection to {} closed", self.authority)
    }

    fn send_requests(&mut self) -> Result<(), String> {
        let h3 = self.h3.as_mut().expect("h3");
        while let Some(mut r) = self.backlog.pop_front() {
            let hdrs = [
                quiche::h3::Header::new(b":method", b"GET"),
                quiche::h3::Header::new(b":scheme", b"https"),
                quiche::h3::Header::new(b":authority", self.authority.as_bytes()),
                quiche::h3::Header::new(b":path", r.url.path.as_bytes()),
                quiche::h3::Header::new(b"user-agent", b"satbench-load"),
                quiche::h3::Header::new(b"accept", b"*/*"),
            ];
            match h3.send_request(&mut self.conn, &hdrs, true) {
                Ok(sid) => {
                    r.obj.start_s = self.f.now();
                    let progress = Progress::new(self.f.settings.progress, self.f.settings.client);
                    self.streams.insert(
                        sid,
                        Stream {
                            req: r,
                            body: None,
                            progress,
                        },
                    );
                }
                Err(quiche::h3::Error::StreamBlocked)
                | Err(quiche::h3::Error::TransportError(quiche::Error::StreamLimit)) => {
                    self.backlog.push_front(r);
                    break;
                }
                Err(e) => {
                    let _ = r.reply.send(Err(format!("{}: request: {e}", r.url)));
                }
            }
        }
        Ok(())
    }

    fn poll_h3(&mut self) -> Result<(), String> {
        let h3 = self.h3.as_mut().expect("h3");
        let mut body = [0u8; 65_536];
        loop {
            match h3.poll(&mut self.conn) {
                Ok((sid, quiche::h3::Event::Headers { list, .. })) => {
                    if let Some(s) = self.streams.get_mut(&sid) {
                        s.req.obj.ttfb_s = self.f.now();
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
                                    return Err(format!("writing the body: {e}"));
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
                        let _ = s.req.reply.send(Err(format!(
                            "{}: stream reset by the server (error {e})",
                            s.req.url
                        )));
                    }
                }
                Ok(_) => {}
                Err(quiche::h3::Error::Done) => return Ok(()),
                Err(e) => return Err(format!("HTTP/3: {e}")),
            }
        }
    }
}
