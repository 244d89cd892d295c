//! Connections of one page load: HTTP/1.1 pools of up to K connections per
//! origin, one multiplexed HTTP/2 connection per origin (hyper over kernel
//! TCP and rustls), and one HTTP/3 connection per origin (quiche, in
//! `h3.rs`). Every fetch returns the object's timings; every connection its
//! phases. Times are seconds since the page load's start.

use crate::h3::H3Conn;
use crate::url::Url;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{OnceCell, Semaphore};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    H1,
    H2,
    H3,
}

impl Proto {
    pub fn parse(s: &str) -> Option<Proto> {
        match s {
            "h1" => Some(Proto::H1),
            "h2" => Some(Proto::H2),
            "h3" => Some(Proto::H3),
            _ => None,
        }
    }
    /// The name browsers report as `nextHopProtocol`.
    pub fn wire_name(self) -> &'static str {
        match self {
            Proto::H1 => "http/1.1",
            Proto::H2 => "h2",
            Proto::H3 => "h3",
        }
    }
}

/// What one request saw.
#[derive(Debug, Default)]
pub struct Object {
    pub url: String,
    pub protocol: String,
    pub status: u16,
    pub content_type: String,
    pub bytes: u64,
    pub conn: usize,
    /// Asked for by the page (discovered).
    pub queued_s: f64,
    /// Request handed to its connection.
    pub start_s: f64,
    /// Response headers received.
    pub ttfb_s: f64,
    /// Last body byte received.
    pub done_s: f64,
    /// Kept for HTML and CSS, when asked, to find subresources.
    pub body: Option<Vec<u8>>,
}

impl Object {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"url": self.url, "protocol": self.protocol, "status": self.status,
            "content_type": self.content_type, "bytes": self.bytes, "conn": self.conn,
            "queued_s": self.queued_s, "start_s": self.start_s, "ttfb_s": self.ttfb_s,
            "done_s": self.done_s})
    }
}

/// One connection's phases, cumulative from the page load's start as curl reports them.
#[derive(Debug, Default, Clone)]
pub struct ConnInfo {
    pub id: usize,
    pub origin: String,
    pub protocol: String,
    pub peer: String,
    pub start_s: f64,
    /// When the name was resolved (only the connection that resolved it).
    pub dns_s: Option<f64>,
    /// TCP connect done (none for QUIC).
    pub connect_s: Option<f64>,
    /// TLS or QUIC handshake done.
    pub tls_s: Option<f64>,
}

impl ConnInfo {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"id": self.id, "origin": self.origin, "protocol": self.protocol,
            "peer": self.peer, "start_s": self.start_s, "dns_s": self.dns_s,
            "connect_s": self.connect_s, "tls_s": self.tls_s})
    }
}

pub struct Settings {
    pub proto: Proto,
    /// HTTP/1.1 connections per origin.
    pub connections: usize,
    pub tls: Arc<rustls::ClientConfig>,
    pub quic_cacert: Option<String>,
    /// Resolve every name to this address instead (curl's --connect-to).
    pub connect_to: Option<SocketAddr>,
    /// Print progress of long bodies on stderr.
    pub progress: bool,
    /// Write the first response body here (single and bulk modes).
    pub output: Option<std::path::PathBuf>,
    pub client: usize,
}

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type H1Sender = hyper::client::conn::http1::SendRequest<Empty<Bytes>>;
type H2Sender = hyper::client::conn::http2::SendRequest<Empty<Bytes>>;

enum OriginClient {
    H1 {
        permits: Semaphore,
        idle: Mutex<Vec<(usize, H1Sender)>>,
    },
    H2(OnceCell<Result<(usize, H2Sender), String>>),
    H3(OnceCell<Result<H3Conn, String>>),
}

struct Origin {
    url: Url,
    addr: OnceCell<Result<(SocketAddr, f64), String>>,
    dns_reported: Mutex<bool>,
    client: OriginClient,
}

/// The connections of one page load.
pub struct Fetcher {
    pub t0: Instant,
    pub settings: Arc<Settings>,
    origins: Mutex<HashMap<(bool, String, u16), Arc<Origin>>>,
    conns: Mutex<Vec<ConnInfo>>,
}

impl Fetcher {
    pub fn new(settings: Arc<Settings>) -> Arc<Fetcher> {
        Arc::new(Fetcher {
            t0: Instant::now(),
            settings,
            origins: Mutex::default(),
            conns: Mutex::default(),
        })
    }

    pub fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    pub fn connections(&self) -> Vec<ConnInfo> {
        self.conns.lock().expect("conns").clone()
    }

    fn origin(&self, url: &Url) -> Arc<Origin> {
        let mut m = self.origins.lock().expect("origins");
        m.entry(url.origin())
            .or_insert_with(|| {
                let client = match self.settings.proto {
                    Proto::H1 => OriginClient::H1 {
                        permits: Semaphore::new(self.settings.connections),
                        idle: Mutex::default(),
                    },
                    Proto::H2 => OriginClient::H2(OnceCell::new()),
                    Proto::H3 => OriginClient::H3(OnceCell::new()),
                };
                Arc::new(Origin {
                    url: url.clone(),
                    addr: OnceCell::new(),
                    dns_reported: Mutex::new(false),
                    client,
                })
            })
            .clone()
    }

    fn new_conn(&self, info: ConnInfo) -> usize {
        let mut c = self.conns.lock().expect("conns");
        let id = c.len();
        c.push(ConnInfo { id, ..info });
        id
    }

    pub fn update_conn(&self, id: usize, f: impl FnOnce(&mut ConnInfo)) {
        if let Some(c) = self.conns.lock().expect("conns").get_mut(id) {
            f(c);
        }
    }

    /// The origin's address, resolved once per page load (a fresh browser
    /// context has an empty host cache). The first connection reports the lookup.
    async fn resolve(&self, o: &Origin) -> Result<(SocketAddr, Option<f64>), String> {
        let r = o
            .addr
            .get_or_init(|| async {
                if let Some(a) = self.settings.connect_to {
                    return Ok((a, self.now()));
                }
                let target = format!("{}:{}", o.url.host, o.url.port);
                let found = tokio::net::lookup_host(target)
                    .await
                    .map(|mut it| it.next());
                match found {
                    Ok(first) => match first {
                        Some(a) => Ok((a, self.now())),
                        None => Err(format!("{}: no address", o.url.host)),
                    },
                    Err(e) => Err(format!("cannot resolve {}: {e}", o.url.host)),
                }
            })
            .await
            .clone()?;
        let mut reported = o.dns_reported.lock().expect("dns");
        let dns = if *reported { None } else { Some(r.1) };
        *reported = true;
        Ok((r.0, dns))
    }

    /// A TCP (and TLS) connection to the origin, ALPN `alpn`.
    async fn connect_tcp(&self, o: &Origin, alpn: &[u8]) -> Result<(usize, Box<dyn Io>), String> {
        let start_s = self.now();
        let (addr, dns_s) = self.resolve(o).await?;
        let origin = o.url.to_string().trim_end_matches(&o.url.path).to_string();
        let id = self.new_conn(ConnInfo {
            origin,
            peer: addr.to_string(),
            start_s,
            dns_s,
            ..Default::default()
        });
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect to {addr}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let connect_s = self.now();
        if !o.url.https {
            self.update_conn(id, |c| {
                c.connect_s = Some(connect_s);
                c.protocol = "http/1.1".into();
            });
            return Ok((id, Box::new(tcp)));
        }
        let mut cfg = (*self.settings.tls).clone();
        cfg.alpn_protocols = vec![alpn.to_vec()];
        let name = rustls::pki_types::ServerName::try_from(o.url.host.clone())
            .map_err(|e| format!("{}: not a TLS server name: {e}", o.url.host))?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS handshake with {}: {e}", o.url.host))?;
        let negotiated = tls
            .get_ref()
            .1
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned());
        let tls_s = self.now();
        let proto = negotiated.clone().unwrap_or_else(|| "http/1.1".into());
        self.update_conn(id, |c| {
            c.connect_s = Some(connect_s);
            c.tls_s = Some(tls_s);
            c.protocol = proto.clone();
        });
        if negotiated
            .as_deref()
            .map(str::as_bytes)
            .unwrap_or(b"http/1.1")
            != alpn
        {
            return Err(format!(
                "asked for {} but {} negotiated {}",
                String::from_utf8_lossy(alpn),
                o.url.host,
                negotiated.as_deref().unwrap_or("no ALPN (HTTP/1.1)")
            ));
        }
        Ok((id, Box::new(tls)))
    }

    /// Fetch one URL. `keep` keeps the body of HTML and CSS responses;
    /// `sink` receives the body as it arrives.
    pub async fn fetch(
        self: Arc<Self>,
        url: Url,
        queued_s: f64,
        keep: bool,
    ) -> Result<Object, String> {
        self.fetch_into(url, queued_s, keep, None).await
    }

    pub async fn fetch_into(
        self: Arc<Self>,
        url: Url,
        queued_s: f64,
        keep: bool,
        sink: Option<std::fs::File>,
    ) -> Result<Object, String> {
        let o = self.origin(&url);
        let mut obj = Object {
            url: url.to_string(),
            queued_s,
            ..Default::default()
        };
        match &o.client {
            OriginClient::H1 { permits, idle } => {
                let _permit = permits.acquire().await.map_err(|e| e.to_string())?;
                let reuse = idle.lock().expect("idle").pop();
                let (id, mut sender) = match reuse {
                    Some(s) => s,
                    None => {
                        let (id, io) = self.connect_tcp(&o, b"http/1.1").await?;
                        let (sender, conn) =
                            hyper::client::conn::http1::handshake(TokioIo::new(io))
                                .await
                                .map_err(|e| format!("HTTP/1.1 on connection {id}: {e}"))?;
                        tokio::spawn(conn);
                        (id, sender)
                    }
                };
                sender
                    .ready()
                    .await
                    .map_err(|e| format!("connection {id}: {e}"))?;
                let req = get_request(&url, false)?;
                obj.conn = id;
                obj.protocol = "http/1.1".into();
                obj.start_s = self.now();
                let resp = sender
                    .send_request(req)
                    .await
                    .map_err(|e| format!("{url}: {e}"))?;
                self.read_body(resp, &mut obj, keep, sink).await?;
                idle.lock().expect("idle").push((id, sender));
            }
            OriginClient::H2(cell) => {
                let (id, sender) = cell
                    .get_or_init(|| async {
                        let (id, io) = self.connect_tcp(&o, b"h2").await?;
                        let (sender, conn) =
                            hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                                // Chromium's windows: 6 MB per stream, 15 MB per connection.
                                .initial_stream_window_size(6 << 20)
                                .initial_connection_window_size(15 << 20)
                                .handshake(TokioIo::new(io))
                                .await
                                .map_err(|e| format!("HTTP/2 on connection {id}: {e}"))?;
                        tokio::spawn(conn);
                        Ok((id, sender))
                    })
                    .await
                    .clone()?;
                let mut sender = sender.clone();
                sender
                    .ready()
                    .await
                    .map_err(|e| format!("connection {id}: {e}"))?;
                let req = get_request(&url, true)?;
                obj.conn = id;
                obj.protocol = "h2".into();
                obj.start_s = self.now();
                let resp = sender
                    .send_request(req)
                    .await
                    .map_err(|e| format!("{url}: {e}"))?;
                self.read_body(resp, &mut obj, keep, sink).await?;
            }
            OriginClient::H3(cell) => {
                let h3 = cell
                    .get_or_init(|| async {
                        let start_s = self.now();
                        let (addr, dns_s) = self.resolve(&o).await?;
                        let origin = o.url.to_string().trim_end_matches(&o.url.path).to_string();
                        let id = self.new_conn(ConnInfo {
                            origin,
                            peer: addr.to_string(),
                            start_s,
                            dns_s,
                            protocol: "h3".into(),
                            ..Default::default()
                        });
                        H3Conn::connect(self.clone(), id, &o.url, addr).await
                    })
                    .await
                    .clone()?;
                obj.conn = h3.id;
                obj.protocol = "h3".into();
                h3.fetch(&url, &mut obj, keep, sink).await?;
            }
        }
        Ok(obj)
    }

    async fn read_body(
        &self,
        resp: hyper::Response<hyper::body::Incoming>,
        obj: &mut Object,
        keep: bool,
        mut sink: Option<std::fs::File>,
    ) -> Result<(), String> {
        obj.ttfb_s = self.now();
        obj.status = resp.status().as_u16();
        obj.content_type = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        let keep = keep && keep_type(&obj.content_type);
        let mut body = if keep { Some(Vec::new()) } else { None };
        let mut progress = Progress::new(self.settings.progress, self.settings.client);
        let mut b = resp.into_body();
        while let Some(frame) = b.frame().await {
            let frame = frame.map_err(|e| format!("{}: body: {e}", obj.url))?;
            if let Some(d) = frame.data_ref() {
                obj.bytes += d.len() as u64;
                if let Some(v) = body.as_mut() {
                    v.extend_from_slice(d);
                }
                if let Some(f) = sink.as_mut() {
                    std::io::Write::write_all(f, d)
                        .map_err(|e| format!("writing the body: {e}"))?;
                }
                progress.tick(obj.bytes);
            }
        }
        obj.done_s = self.now();
        obj.body = body;
        Ok(())
    }
}

/// A GET as a browser sends it: HTTP/1.1 with the path and a Host header,
/// HTTP/2 with the absolute URL (hyper makes `:scheme` and `:authority` of it).
fn get_request(url: &Url, absolute: bool) -> Result<Request<Empty<Bytes>>, String> {
    let b = if absolute {
        Request::get(url.to_string())
    } else {
        Request::get(url.path.as_str()).header("host", url.authority())
    };
    b.header("user-agent", "satbench-load")
        .header("accept", "*/*")
        .body(Empty::new())
        .map_err(|e| e.to_string())
}

/// Whether a body of this type can name subresources.
pub fn keep_type(content_type: &str) -> bool {
    let t = content_type.to_ascii_lowercase();
    t.starts_with("text/html") || t.starts_with("text/css")
}

/// A line on stderr each second for long transfers (bulk mode).
pub struct Progress {
    on: bool,
    client: usize,
    start: Instant,
    last: Instant,
    last_bytes: u64,
}

impl Progress {
    pub fn new(on: bool, client: usize) -> Progress {
        let now = Instant::now();
        Progress {
            on,
            client,
            start: now,
            last: now,
            last_bytes: 0,
        }
    }
    pub fn tick(&mut self, bytes: u64) {
        if !self.on || self.last.elapsed().as_secs_f64() < 1.0 {
            return;
        }
        let dt = self.last.elapsed().as_secs_f64();
        let rate = (bytes - self.last_bytes) as f64 * 8.0 / dt / 1e6;
        eprintln!(
            "satbench-load: client {} {:.1} MB in {:.1} s, {:.1} Mbit/s now",
            self.client,
            bytes as f64 / 1e6,
            self.start.elapsed().as_secs_f64(),
            rate
        );
        self.last = Instant::now();
        self.last_bytes = bytes;
    }
}
