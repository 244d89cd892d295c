//! Connections of one page load: HTTP/1.1 pools of up to K connections per
//! origin, one multiplexed HTTP/2 connection per origin (hyper over kernel
//! TCP and rustls), and one HTTP/3 connection per origin (quiche, in
//! `h3.rs`). Every fetch returns the object's timings; every connection its
//! phases (records and clock in `session.rs`). Times are seconds since the
//! page load's start.

use crate::h3::{H3Conn, H3Error};
use crate::session::{keep_type, ConnInfo, Object, Progress, Proto, Session, Settings};
use crate::upload::Payload;
use crate::url::Url;
use http_body_util::BodyExt;
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{OnceCell, Semaphore};

/// Why a fetch failed. The texts are the loader's `errors` and
/// `invalid_reason`. Clone, because a connection's failure is the failure of
/// every request waiting for it (library errors are shared behind `Arc`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum FetchError {
    /// The name resolved to nothing.
    #[error("{host}: no address")]
    NoAddress { host: String },
    /// The lookup failed.
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        source: Arc<std::io::Error>,
    },
    /// TCP connect failed.
    #[error("connect to {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: Arc<std::io::Error>,
    },
    /// The host is no name a certificate can be checked against.
    #[error("{host}: not a TLS server name: {source}")]
    ServerName {
        host: String,
        source: Arc<rustls::pki_types::InvalidDnsNameError>,
    },
    /// The TLS handshake failed (certificate, protocol).
    #[error("TLS handshake with {host}: {source}")]
    TlsHandshake {
        host: String,
        source: Arc<std::io::Error>,
    },
    /// The server chose another application protocol than asked for.
    #[error("asked for {asked} but {host} negotiated {negotiated}")]
    Alpn {
        asked: String,
        host: String,
        negotiated: String,
    },
    /// The HTTP/1.1 or HTTP/2 handshake on a new connection failed.
    #[error("{protocol} on connection {id}: {source}")]
    Handshake {
        protocol: &'static str,
        id: usize,
        source: Arc<hyper::Error>,
    },
    /// The connection can take no further request.
    #[error("connection {id}: {source}")]
    NotReady {
        id: usize,
        source: Arc<hyper::Error>,
    },
    /// The per-origin connection limit was closed (never happens while loading).
    #[error("semaphore closed")]
    PoolClosed,
    /// The request could not be built from the URL.
    #[error("{0}")]
    BadRequest(Arc<hyper::http::Error>),
    /// Sending the request or reading the response head failed.
    #[error("{url}: {source}")]
    Request {
        url: String,
        source: Arc<hyper::Error>,
    },
    /// Reading the body failed.
    #[error("{url}: body: {source}")]
    Body {
        url: String,
        source: Arc<hyper::Error>,
    },
    /// Writing the body to the `-o` file failed.
    #[error("writing the body: {0}")]
    Sink(Arc<std::io::Error>),
    /// An HTTP/3 connection or request failed.
    #[error(transparent)]
    H3(#[from] H3Error),
}

/// A connection's byte stream: TCP, or TLS over it.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type H1Sender = hyper::client::conn::http1::SendRequest<Payload>;
type H2Sender = hyper::client::conn::http2::SendRequest<Payload>;

enum OriginClient {
    H1 {
        permits: Semaphore,
        idle: Mutex<Vec<(usize, H1Sender)>>,
    },
    H2(OnceCell<Result<(usize, H2Sender), FetchError>>),
    H3(OnceCell<Result<H3Conn, FetchError>>),
}

struct Origin {
    url: Url,
    addr: OnceCell<Result<(SocketAddr, f64), FetchError>>,
    dns_reported: Mutex<bool>,
    client: OriginClient,
}

/// The connections of one page load.
pub struct Fetcher {
    session: Arc<Session>,
    origins: Mutex<HashMap<(bool, String, u16), Arc<Origin>>>,
}

impl Fetcher {
    /// A page load starting now.
    pub fn new(settings: Arc<Settings>) -> Arc<Fetcher> {
        Arc::new(Fetcher {
            session: Arc::new(Session::new(settings)),
            origins: Mutex::default(),
        })
    }

    /// Seconds since the page load's start.
    pub fn now(&self) -> f64 {
        self.session.now()
    }

    pub fn settings(&self) -> &Settings {
        &self.session.settings
    }

    /// Every connection opened so far.
    pub fn connections(&self) -> Vec<ConnInfo> {
        self.session.connections()
    }

    fn origin(&self, url: &Url) -> Arc<Origin> {
        let mut m = self.origins.lock().expect("origins");
        m.entry(url.origin())
            .or_insert_with(|| {
                let client = match self.settings().proto {
                    Proto::H1 => OriginClient::H1 {
                        permits: Semaphore::new(self.settings().connections),
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
        self.session.new_conn(info)
    }

    fn update_conn(&self, id: usize, f: impl FnOnce(&mut ConnInfo)) {
        self.session.update_conn(id, f)
    }

    /// The origin's address, resolved once per page load (a fresh browser
    /// context has an empty host cache). The first connection reports the lookup.
    async fn resolve(&self, o: &Origin) -> Result<(SocketAddr, Option<f64>), FetchError> {
        let r = o
            .addr
            .get_or_init(|| async {
                if let Some(a) = self.settings().connect_to {
                    return Ok((a, self.now()));
                }
                let target = format!("{}:{}", o.url.host, o.url.port);
                let found = tokio::net::lookup_host(target)
                    .await
                    .map(|mut it| it.next());
                match found {
                    Ok(first) => match first {
                        Some(a) => Ok((a, self.now())),
                        None => Err(FetchError::NoAddress {
                            host: o.url.host.clone(),
                        }),
                    },
                    Err(e) => Err(FetchError::Resolve {
                        host: o.url.host.clone(),
                        source: Arc::new(e),
                    }),
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
    async fn connect_tcp(
        &self,
        o: &Origin,
        alpn: &[u8],
    ) -> Result<(usize, Box<dyn Io>), FetchError> {
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
        let tcp = connect(addr, self.settings().tfo)
            .await
            .map_err(|e| FetchError::Connect {
                addr,
                source: Arc::new(e),
            })?;
        let _ = tcp.set_nodelay(true);
        // With Fast Open the connect returns before any SYN left: no connect time to report (the
        // handshake's time is then in the TLS phase).
        let connect_s = (!self.settings().tfo).then(|| self.now());
        if !o.url.https {
            self.update_conn(id, |c| {
                c.connect_s = connect_s;
                c.protocol = "http/1.1".into();
            });
            return Ok((id, Box::new(tcp)));
        }
        let mut cfg = (*self.settings().tls).clone();
        cfg.alpn_protocols = vec![alpn.to_vec()];
        let name = rustls::pki_types::ServerName::try_from(o.url.host.clone()).map_err(|e| {
            FetchError::ServerName {
                host: o.url.host.clone(),
                source: Arc::new(e),
            }
        })?;
        let tls = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(name, tcp)
            .await
            .map_err(|e| FetchError::TlsHandshake {
                host: o.url.host.clone(),
                source: Arc::new(e),
            })?;
        let negotiated = tls
            .get_ref()
            .1
            .alpn_protocol()
            .map(|p| String::from_utf8_lossy(p).into_owned());
        let tls_s = self.now();
        let proto = negotiated.clone().unwrap_or_else(|| "http/1.1".into());
        let resumed = tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
        // The SYN's data (the ClientHello, with Fast Open) is acknowledged by now.
        let fast_open =
            satbench_common::tcpinfo::tcp_info(tls.get_ref().0.as_raw_fd()).map(|i| i.syn_data());
        self.update_conn(id, |c| {
            c.connect_s = connect_s;
            c.tls_s = Some(tls_s);
            c.protocol = proto.clone();
            c.resumed = Some(resumed);
            c.fast_open = fast_open;
        });
        if negotiated
            .as_deref()
            .map(str::as_bytes)
            .unwrap_or(b"http/1.1")
            != alpn
        {
            return Err(FetchError::Alpn {
                asked: String::from_utf8_lossy(alpn).into_owned(),
                host: o.url.host.clone(),
                negotiated: negotiated
                    .as_deref()
                    .unwrap_or("no ALPN (HTTP/1.1)")
                    .to_string(),
            });
        }
        Ok((id, Box::new(tls)))
    }

    /// A connection of its own to `url`'s origin (TCP, and TLS with ALPN
    /// `alpn` for https), recorded with the load's others; its id and stream.
    pub async fn open(&self, url: &Url, alpn: &[u8]) -> Result<(usize, Box<dyn Io>), FetchError> {
        let o = self.origin(url);
        self.connect_tcp(&o, alpn).await
    }

    /// Fetch one URL. `keep` keeps the body of HTML and CSS responses;
    /// `sink` receives the body as it arrives.
    pub async fn fetch(
        self: Arc<Self>,
        url: Url,
        queued_s: f64,
        keep: bool,
    ) -> Result<Object, FetchError> {
        self.fetch_into(url, queued_s, keep, None).await
    }

    pub async fn fetch_into(
        self: Arc<Self>,
        url: Url,
        queued_s: f64,
        keep: bool,
        sink: Option<std::fs::File>,
    ) -> Result<Object, FetchError> {
        let o = self.origin(&url);
        let mut obj = Object {
            url: url.to_string(),
            queued_s,
            ..Default::default()
        };
        match &o.client {
            OriginClient::H1 { permits, idle } => {
                let _permit = permits
                    .acquire()
                    .await
                    .map_err(|_| FetchError::PoolClosed)?;
                let reuse = idle.lock().expect("idle").pop();
                let (id, mut sender) = match reuse {
                    Some(s) => s,
                    None => {
                        let (id, io) = self.connect_tcp(&o, b"http/1.1").await?;
                        let (sender, conn) =
                            hyper::client::conn::http1::handshake(TokioIo::new(io))
                                .await
                                .map_err(|e| FetchError::Handshake {
                                    protocol: "HTTP/1.1",
                                    id,
                                    source: Arc::new(e),
                                })?;
                        tokio::spawn(conn);
                        (id, sender)
                    }
                };
                sender.ready().await.map_err(|e| FetchError::NotReady {
                    id,
                    source: Arc::new(e),
                })?;
                let req = request(&url, false, self.settings().upload)?;
                obj.conn = id;
                obj.protocol = "http/1.1".into();
                obj.sent = self.settings().upload.unwrap_or(0);
                obj.start_s = self.now();
                let resp = sender
                    .send_request(req)
                    .await
                    .map_err(|e| FetchError::Request {
                        url: url.to_string(),
                        source: Arc::new(e),
                    })?;
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
                                .map_err(|e| FetchError::Handshake {
                                    protocol: "HTTP/2",
                                    id,
                                    source: Arc::new(e),
                                })?;
                        tokio::spawn(conn);
                        Ok((id, sender))
                    })
                    .await
                    .clone()?;
                let mut sender = sender.clone();
                sender.ready().await.map_err(|e| FetchError::NotReady {
                    id,
                    source: Arc::new(e),
                })?;
                let req = request(&url, true, self.settings().upload)?;
                obj.conn = id;
                obj.protocol = "h2".into();
                obj.sent = self.settings().upload.unwrap_or(0);
                obj.start_s = self.now();
                let resp = sender
                    .send_request(req)
                    .await
                    .map_err(|e| FetchError::Request {
                        url: url.to_string(),
                        source: Arc::new(e),
                    })?;
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
                        Ok(H3Conn::connect(self.session.clone(), id, &o.url, addr).await?)
                    })
                    .await
                    .clone()?;
                obj.conn = h3.id;
                // The protocol is the connection's ALPN, set by the stack.
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
    ) -> Result<(), FetchError> {
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
        let mut progress = Progress::new(self.settings().progress, self.settings().client);
        let mut b = resp.into_body();
        while let Some(frame) = b.frame().await {
            let frame = frame.map_err(|e| FetchError::Body {
                url: obj.url.clone(),
                source: Arc::new(e),
            })?;
            if let Some(d) = frame.data_ref() {
                obj.bytes += d.len() as u64;
                if let Some(v) = body.as_mut() {
                    v.extend_from_slice(d);
                }
                if let Some(f) = sink.as_mut() {
                    std::io::Write::write_all(f, d).map_err(|e| FetchError::Sink(Arc::new(e)))?;
                }
                progress.tick(obj.bytes);
            }
        }
        obj.done_s = self.now();
        obj.body = body;
        Ok(())
    }
}

/// A GET as a browser sends it, or with `upload` a POST of that many bytes:
/// HTTP/1.1 with the path and a Host header, HTTP/2 with the absolute URL
/// (hyper makes `:scheme` and `:authority` of it).
fn request(url: &Url, absolute: bool, upload: Option<u64>) -> Result<Request<Payload>, FetchError> {
    let method = if upload.is_some() { "POST" } else { "GET" };
    let b = if absolute {
        Request::builder().method(method).uri(url.to_string())
    } else {
        Request::builder()
            .method(method)
            .uri(url.path.as_str())
            .header("host", url.authority())
    };
    b.header("user-agent", "satbench-load")
        .header("accept", "*/*")
        .body(Payload::new(upload.unwrap_or(0)))
        .map_err(|e| FetchError::BadRequest(Arc::new(e)))
}

/// A TCP connection to `addr`; with `tfo`, by TCP Fast Open
/// (TCP_FASTOPEN_CONNECT: connect returns at once, and the first write goes
/// in the SYN when the kernel holds a cookie for the server, else the usual
/// handshake runs first).
async fn connect(addr: SocketAddr, tfo: bool) -> std::io::Result<TcpStream> {
    if !tfo {
        return TcpStream::connect(addr).await;
    }
    let sock = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on a socket this function owns, with a c_int value.
    let rc = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&sock),
            libc::IPPROTO_TCP,
            libc::TCP_FASTOPEN_CONNECT,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
            // Fast Open's client side is off in this namespace (net.ipv4.tcp_fastopen): connect as usual.
            return TcpStream::connect(addr).await;
        }
        return Err(e);
    }
    sock.connect(addr).await
}
