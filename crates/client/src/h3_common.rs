//! What both HTTP/3 stacks of the loader share (quiche in `h3.rs`, quinn in
//! `h3_quinn.rs`): the error type, the request handed to a connection's task
//! and the handshake deadline. Neither stack's module imports the other's.

use crate::session::Object;
use crate::url::Url;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Why an HTTP/3 connection or request failed. The texts are the loader's
/// `errors`. Clone, because a connection's failure is reported to every
/// request on it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum H3Error {
    /// quiche refused a transport setting.
    #[error("{0}")]
    Config(quiche::Error),
    /// The CA file could not be loaded for QUIC.
    #[error("{path}: {source}")]
    CaFile { path: String, source: quiche::Error },
    /// bind(2) of the UDP socket failed.
    #[error("bind: {0}")]
    Bind(Arc<std::io::Error>),
    /// connect(2) of the UDP socket failed.
    #[error("connect {peer}: {source}")]
    Connect {
        peer: SocketAddr,
        source: Arc<std::io::Error>,
    },
    /// getsockname(2) failed.
    #[error("{0}")]
    LocalAddr(Arc<std::io::Error>),
    /// No randomness for the connection id.
    #[error("random")]
    Random,
    /// quiche refused to start the connection.
    #[error("QUIC: {0}")]
    Quic(quiche::Error),
    /// The connection's task ended before the handshake.
    #[error("HTTP/3 connection task ended")]
    TaskEnded,
    /// quiche refused the HTTP/3 settings.
    #[error("{0}")]
    H3Config(quiche::h3::Error),
    /// No handshake within [`HANDSHAKE_TIMEOUT`].
    #[error("no QUIC handshake with {authority} within {secs} s")]
    HandshakeTimeout { authority: String, secs: u64 },
    /// ICMP port unreachable: nothing listens on the UDP port.
    #[error("{0}: UDP port unreachable (no HTTP/3 server)")]
    PortUnreachable(String),
    /// recv(2) failed.
    #[error("recv: {0}")]
    Recv(Arc<std::io::Error>),
    /// HTTP/3 could not start on the established connection.
    #[error("h3: {0}")]
    H3Setup(quiche::h3::Error),
    /// The server closed the connection with an error.
    #[error("{authority} closed the QUIC connection: error {code:#x} {reason}")]
    PeerClosed {
        authority: String,
        code: u64,
        reason: String,
    },
    /// This side closed the connection with an error.
    #[error("QUIC connection to {authority} failed: error {code:#x} {reason}")]
    LocalClosed {
        authority: String,
        code: u64,
        reason: String,
    },
    /// The idle timeout expired.
    #[error("QUIC connection to {0} timed out")]
    TimedOut(String),
    /// Closed without an error.
    #[error("QUIC connection to {0} closed")]
    Closed(String),
    /// The connection ended with no request left (the page load is over).
    #[error("HTTP/3 connection closed")]
    Finished,
    /// Writing the body to the `-o` file failed.
    #[error("writing the body: {0}")]
    Sink(Arc<std::io::Error>),
    /// quiche reported an HTTP/3 protocol error.
    #[error("HTTP/3: {0}")]
    Protocol(quiche::h3::Error),
    /// A request on a connection whose task has gone.
    #[error("{url}: the HTTP/3 connection has closed")]
    ConnectionGone { url: String },
    /// A request on a connection that failed.
    #[error("{url}: {cause}")]
    ConnectionFailed { url: String, cause: Box<H3Error> },
    /// quiche refused to send the request.
    #[error("{url}: request: {source}")]
    Request {
        url: String,
        source: quiche::h3::Error,
    },
    /// The server reset the request's stream.
    #[error("{url}: stream reset by the server (error {code})")]
    StreamReset { url: String, code: u64 },
    /// quinn refused the TLS configuration (no TLS 1.3 suite for QUIC).
    #[error("quinn: {0}")]
    QuinnCrypto(quinn::crypto::rustls::NoInitialCipherSuite),
    /// The UDP socket could not be set up for quinn.
    #[error("quinn endpoint: {0}")]
    QuinnEndpoint(Arc<std::io::Error>),
    /// quinn refused to start the connection.
    #[error("QUIC: {0}")]
    QuinnConnect(quinn::ConnectError),
    /// The quinn connection failed or was closed by the server.
    #[error("QUIC connection to {authority}: {source}")]
    QuinnConnection {
        authority: String,
        source: quinn::ConnectionError,
    },
    /// HTTP/3 could not start on the quinn connection.
    #[error("h3: {0}")]
    H3QuinnSetup(Arc<h3::error::ConnectionError>),
    /// A request on the quinn connection failed (sending it, or reading the answer).
    #[error("{url}: HTTP/3: {source}")]
    H3Stream {
        url: String,
        source: Arc<h3::error::StreamError>,
    },
    /// The request could not be built from the URL.
    #[error("{0}")]
    BadRequest(Arc<hyper::http::Error>),
    /// The answer did not come over HTTP/3.
    #[error("{url}: answered over {version}, not HTTP/3")]
    NotH3 { url: String, version: String },
}

/// A handshake that has not finished by then means no HTTP/3 here.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A request handed to a connection's task.
pub(crate) struct Req {
    pub url: Url,
    pub keep: bool,
    pub sink: Option<std::fs::File>,
    pub reply: oneshot::Sender<Result<Object, H3Error>>,
    pub obj: Object,
}
