//! What the parts of one page load share, so that the HTTP/1.1-2 fetcher
//! (`conn.rs`) and the HTTP/3 connections (`h3.rs`) need not know each other:
//! the loader's settings, the records of objects and connections, and the
//! page load's clock ([`Session`]). Times are seconds since the page load's start.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

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
    /// Request body bytes sent (an upload).
    pub sent: u64,
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

/// Seconds (the loader's clock) as the milliseconds every output carries.
pub fn ms(seconds: f64) -> f64 {
    seconds * 1e3
}

impl Object {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"url": self.url, "protocol": self.protocol, "status": self.status,
            "content_type": self.content_type, "bytes": self.bytes, "sent": self.sent,
            "conn": self.conn,
            "queued_ms": ms(self.queued_s), "start_ms": ms(self.start_s),
            "ttfb_ms": ms(self.ttfb_s), "done_ms": ms(self.done_s)})
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
    /// The transport parameters the server sent (QUIC over quiche; quinn
    /// does not expose them): the windows and limits in effect, as received.
    pub peer_params: Option<serde_json::Value>,
    /// The TLS session was resumed (TCP: rustls's handshake kind; QUIC:
    /// quiche's), and requests went as 0-RTT early data (quiche); None where
    /// the stack does not say or there is no TLS.
    pub resumed: Option<bool>,
    pub early_data: Option<bool>,
    /// TCP: the SYN carried data the server took (Fast Open; TCP_INFO's
    /// TCPI_OPT_SYN_DATA once the TLS handshake is done); None for QUIC and
    /// cleartext connections, whose first write may come later.
    pub fast_open: Option<bool>,
}

impl ConnInfo {
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"id": self.id, "origin": self.origin, "protocol": self.protocol,
            "peer": self.peer, "start_ms": ms(self.start_s), "dns_ms": self.dns_s.map(ms),
            "connect_ms": self.connect_s.map(ms), "tls_ms": self.tls_s.map(ms),
            "peer_params": self.peer_params, "resumed": self.resumed, "early_data": self.early_data,
            "fast_open": self.fast_open})
    }
}

/// The QUIC implementation for HTTP/3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuicStack {
    Quiche,
    Quinn,
}

impl QuicStack {
    pub fn parse(s: &str) -> Option<QuicStack> {
        match s {
            "quiche" => Some(QuicStack::Quiche),
            "quinn" => Some(QuicStack::Quinn),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            QuicStack::Quiche => "quiche",
            QuicStack::Quinn => "quinn",
        }
    }
}

/// The flow-control windows the loader advertises over QUIC: they decide
/// how fast a server may send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuicWindows {
    /// Connection level (initial_max_data; quinn's receive_window).
    pub max_data: u64,
    /// Per stream (initial_max_stream_data_bidi_*; quinn's stream_receive_window).
    pub max_stream_data: u64,
    /// Given on the command line: kept for the whole connection (quiche's
    /// autotuning caps set to them). Otherwise quiche uses min(window, its
    /// 24 MiB / 16 MiB caps) after the first window.
    pub fixed: bool,
}

impl QuicWindows {
    /// 256 MiB and 128 MiB, so that flow control does not limit a download.
    pub const DEFAULT: QuicWindows = QuicWindows {
        max_data: 256 << 20,
        max_stream_data: 128 << 20,
        fixed: false,
    };
}

pub struct Settings {
    pub proto: Proto,
    /// HTTP/1.1 connections per origin.
    pub connections: usize,
    pub tls: Arc<rustls::ClientConfig>,
    pub quic_cacert: Option<String>,
    pub quic_stack: QuicStack,
    pub quic_windows: QuicWindows,
    /// Resolve every name to this address instead (curl's --connect-to).
    pub connect_to: Option<SocketAddr>,
    /// Print progress of long bodies on stderr.
    pub progress: bool,
    /// Write the first response body here (single and bulk modes).
    pub output: Option<std::path::PathBuf>,
    /// POST this many bytes to the URL instead of a GET (single mode).
    pub upload: Option<u64>,
    /// Open TCP connections with TCP Fast Open (TCP_FASTOPEN_CONNECT).
    pub tfo: bool,
    /// A browser's request schedule to replay instead of discovering the page's objects.
    pub schedule: Option<Arc<crate::schedule::Schedule>>,
    pub client: usize,
    /// The client's QUIC sessions by authority (quiche's serialized session
    /// tickets): a later connection to the same origin resumes and sends its
    /// requests as 0-RTT early data (a repeat view).
    pub quic_sessions: std::sync::Mutex<std::collections::HashMap<String, Vec<u8>>>,
}

/// One page load's clock and connection records, shared by every connection.
pub struct Session {
    /// When the page load started.
    t0: Instant,
    pub settings: Arc<Settings>,
    conns: Mutex<Vec<ConnInfo>>,
}

impl Session {
    /// A page load starting now.
    pub fn new(settings: Arc<Settings>) -> Session {
        Session {
            t0: Instant::now(),
            settings,
            conns: Mutex::default(),
        }
    }

    /// Seconds since the page load's start.
    pub fn now(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Every connection opened so far, in order of opening.
    pub fn connections(&self) -> Vec<ConnInfo> {
        self.conns.lock().expect("conns").clone()
    }

    /// Record a new connection; returns its id.
    pub fn new_conn(&self, info: ConnInfo) -> usize {
        let mut c = self.conns.lock().expect("conns");
        let id = c.len();
        c.push(ConnInfo { id, ..info });
        id
    }

    /// Change the record of connection `id`.
    pub fn update_conn(&self, id: usize, f: impl FnOnce(&mut ConnInfo)) {
        if let Some(c) = self.conns.lock().expect("conns").get_mut(id) {
            f(c);
        }
    }
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
