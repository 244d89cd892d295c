//! satbench-server: one directory over HTTP/1.1, HTTP/2 and HTTP/3.
//!
//! ```text
//! satbench-server --root DIR [--cert PEM --key PEM] [--cc cubic|bbr|reno]
//!     [--bind ADDR] [--http-port 80] [--https-port 443] [--no-h3]
//!     [--access-log FILE] [--tcp-info FILE] [--quic-info FILE] [--qlog-dir DIR]
//!     [--tfo] [--no-nodelay] [--no-resumption] [--no-0rtt] [--sndbuf BYTES] [--rcvbuf BYTES]
//!     [--quic-stack quiche|quinn] [--quic-initcwnd PACKETS] [--no-pacing]
//!     [--quic-max-data BYTES] [--quic-max-stream-data BYTES] [--idle-timeout-s S]
//!     [--max-tcp-conns N] [--max-quic-conns N] [--header-read-timeout-s S] [--webtransport]
//!     [--replay MANIFEST [--replay-think]]
//! ```
//! - port 80: HTTP/1.1 in cleartext;
//! - port 443/TCP: TLS 1.3 with ALPN h2 and http/1.1, advertising HTTP/3 (Alt-Svc);
//! - port 443/UDP: HTTP/3 over QUIC, paced: quiche (default, `quic.rs`) or
//!   quinn with the `h3` crate (`--quic-stack quinn`, `quic_quinn.rs`).
//!
//! `--replay MANIFEST`: the origin answers as one recorded host did
//! (`replay.rs`: its statuses, headers and bodies, the request matched as
//! Web Page Replay matches it; a request never recorded gets 404 and
//! `"replay": "miss"` in the access log); `--replay-think` waits each
//! answer's recorded server think time first. Uploads and the real-time
//! endpoints are served as ever.
//!
//! `--bind` defaults to 127.0.0.1: started by hand, the server serves the
//! directory to this machine only. Give the address to serve on (a testbed
//! host's, or 0.0.0.0) explicitly.
//!
//! Congestion control: for TCP, TCP_CONGESTION on the listening sockets (and
//! checked on every accepted one: it is in the access log); for QUIC, the
//! stack's own: quiche's cubic, reno, or BBRv2 for `bbr`; quinn's Cubic,
//! NewReno, or its experimental BBR (a BBRv1 port) for `bbr`. The kernel's
//! `bbr` is BBRv1.
//!
//! QUIC windows: `--quic-max-data` and `--quic-max-stream-data` set the
//! connection- and stream-level flow-control windows this server advertises
//! (for downloads the loader's windows are the ones that count). Given, the
//! window is fixed for the whole connection on both stacks (quiche: also its
//! autotuning cap, `set_max_connection_window`/`set_max_stream_window`);
//! not given, 32 MiB and 8 MiB initially (quiche then autotunes within its
//! 24 MiB/16 MiB caps; quinn keeps them). quinn cannot turn pacing off:
//! `--no-pacing --quic-stack quinn` is refused.
//!
//! `--quic-info FILE`: every 10 ms while a QUIC connection has data to send,
//! and at close, one JSON line of its sender state and what limited it
//! (`limits.rs`); `--tcp-info FILE` likewise for TCP (TCP_INFO).
//! Limits (what one client, or many, can make the server hold), all in the
//! ready line's `limits` object:
//! - TCP connections: at most `--max-tcp-conns` (default 1000) open; at the
//!   cap a new connection is served and the one quiet the longest is closed
//!   (access log: `"error": "evicted: --max-tcp-conns reached"`), so idle or
//!   trickling connections cannot lock clients out;
//! - time: `--idle-timeout-s` (30) without a byte read or written closes a
//!   connection; `--header-read-timeout-s` (default: the idle timeout) bounds
//!   the TLS handshake and each HTTP/1.1 request head (slowloris);
//! - HTTP/1.1: request heads over 64 KiB are refused (431);
//! - HTTP/2 (`tcp::http_builder`): 256 concurrent streams (more are
//!   refused), header lists up to 16 KiB (h2 also bounds CONTINUATION
//!   frames by it), 20 streams opened and reset before being accepted (rapid
//!   reset, CVE-2023-44487: then GOAWAY), 1024 streams reset for the
//!   client's errors, 400 KiB buffered per stream; SETTINGS and PING are
//!   answered one at a time as the client reads (h2);
//! - QUIC: at most `--max-quic-conns` (default 1000) connections, so that an
//!   Initial flood cannot lock clients out nor grow memory. quiche: at the
//!   cap the oldest connection still in its handshake is dropped (at once,
//!   no draining) for the new one, and when every one is established the
//!   Initial is dropped; datagrams under 1200 bytes are never answered nor
//!   given state (RFC 9000 14.1), and a connection whose first packet fails
//!   is forgotten at once. quinn: at the cap a client whose address is not
//!   yet validated gets a stateless Retry, and one back with its token takes
//!   the place of the oldest connection in its handshake (or is refused when
//!   all are established): a closed quinn connection lingers for 3 PTO, so
//!   evicting for every Initial would pile them up; handshakes waiting to be
//!   accepted are capped likewise, with 64 KiB buffered for each, 16 MiB in
//!   all. Both: 256 bidirectional and 16 unidirectional streams per
//!   connection; request header sections up to 64 KiB.
//!
//! Keys go to $SSLKEYLOGFILE when it is set. Prints one JSON line when ready;
//! exits 0 on SIGTERM or SIGINT; configuration errors exit 2.
//!
//! `satbench-server --describe` prints what the orchestrator reads of this
//! binary (every flag with its kind and range, `RANGES`; the classes of what
//! limited a sender); `satbench-server --check-args ARGS...` parses a
//! command line as the server would and serves nothing.

mod files;
#[cfg(test)]
mod fuzz;
mod limits;
mod log;
mod quic;
mod quic_quinn;
mod realtime;
mod replay;
mod rt_serve;
mod rt_wt;
mod tcp;
mod tcpinfo;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The QUIC implementation serving HTTP/3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuicStack {
    Quiche,
    Quinn,
}

impl QuicStack {
    pub fn name(self) -> &'static str {
        match self {
            QuicStack::Quiche => "quiche",
            QuicStack::Quinn => "quinn",
        }
    }
}

/// The connection-level window advertised when `--quic-max-data` is not given.
pub const DEFAULT_QUIC_MAX_DATA: u64 = 32 << 20;
/// The stream-level window advertised when `--quic-max-stream-data` is not given.
pub const DEFAULT_QUIC_MAX_STREAM_DATA: u64 = 8 << 20;
/// quiche's default initial congestion window, in packets (used for quinn too).
pub const DEFAULT_QUIC_INITCWND: usize = 10;
/// TCP connections open at once when `--max-tcp-conns` is not given.
pub const DEFAULT_MAX_TCP_CONNS: usize = 1000;
/// QUIC connections open at once when `--max-quic-conns` is not given.
pub const DEFAULT_MAX_QUIC_CONNS: usize = 1000;
/// The UDP payload both stacks send and accept (no path MTU discovery).
pub const QUIC_MAX_DATAGRAM: usize = 1350;

#[derive(Clone, Debug)]
pub struct Options {
    pub root: String,
    pub cert: Option<String>,
    pub key: Option<String>,
    pub cc: Option<String>,
    pub bind: String,
    pub http_port: u16,
    pub https_port: u16,
    pub h3: bool,
    pub alt_svc: bool,
    pub access_log: Option<String>,
    pub tcp_info: Option<String>,
    pub quic_info: Option<String>,
    pub qlog_dir: Option<String>,
    pub tfo: bool,
    pub resumption: bool,
    pub zero_rtt: bool,
    pub sndbuf: Option<u32>,
    pub rcvbuf: Option<u32>,
    pub quic_initcwnd: Option<usize>,
    pub idle_timeout_s: u64,
    pub pacing: bool,
    pub quic_stack: QuicStack,
    /// `--quic-max-data`: connection-level window, fixed when given.
    pub quic_max_data: Option<u64>,
    /// `--quic-max-stream-data`: stream-level window, fixed when given.
    pub quic_max_stream_data: Option<u64>,
    /// `--max-tcp-conns`: TCP connections open at once (both ports).
    pub max_tcp_conns: usize,
    /// `--max-quic-conns`: QUIC connections open at once.
    pub max_quic_conns: usize,
    /// `--header-read-timeout-s`: the idle timeout when not given.
    pub header_read_timeout_s: Option<u64>,
    /// TCP_NODELAY on every TCP connection (`--no-nodelay`: Nagle's algorithm on).
    pub nodelay: bool,
    /// `--webtransport`: WebTransport over HTTP/3 (quinn only), the real-time endpoint `/rt/wt` (`rt_wt.rs`).
    pub webtransport: bool,
    /// `--replay`: a recorded origin's manifest (`replay.rs`).
    pub replay: Option<String>,
    /// `--replay-think`: the recorded think time before each replayed answer.
    pub replay_think: bool,
}

impl Options {
    /// The connection-level window advertised.
    pub fn max_data(&self) -> u64 {
        self.quic_max_data.unwrap_or(DEFAULT_QUIC_MAX_DATA)
    }
    /// The stream-level window advertised.
    pub fn max_stream_data(&self) -> u64 {
        self.quic_max_stream_data
            .unwrap_or(DEFAULT_QUIC_MAX_STREAM_DATA)
    }
    /// The initial congestion window, in packets.
    pub fn initcwnd(&self) -> usize {
        self.quic_initcwnd.unwrap_or(DEFAULT_QUIC_INITCWND)
    }
    /// How long a TCP client has for its TLS handshake and each HTTP/1.1
    /// request head.
    pub fn header_read_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.header_read_timeout_s.unwrap_or(self.idle_timeout_s))
    }
    /// The congestion control asked for (cubic when none).
    pub fn cc_name(&self) -> &str {
        self.cc.as_deref().unwrap_or("cubic")
    }
}

fn usage(msg: &str) -> ! {
    eprintln!("satbench-server: {msg}");
    std::process::exit(2);
}

impl Default for Options {
    fn default() -> Options {
        Options {
            root: String::new(),
            cert: None,
            key: None,
            cc: None,
            bind: "127.0.0.1".into(),
            http_port: 80,
            https_port: 443,
            h3: true,
            alt_svc: true,
            access_log: None,
            tcp_info: None,
            quic_info: None,
            qlog_dir: None,
            tfo: false,
            resumption: true,
            zero_rtt: true,
            sndbuf: None,
            rcvbuf: None,
            quic_initcwnd: None,
            idle_timeout_s: 30,
            pacing: true,
            quic_stack: QuicStack::Quiche,
            quic_max_data: None,
            quic_max_stream_data: None,
            max_tcp_conns: DEFAULT_MAX_TCP_CONNS,
            max_quic_conns: DEFAULT_MAX_QUIC_CONNS,
            header_read_timeout_s: None,
            nodelay: true,
            webtransport: false,
            replay: None,
            replay_think: false,
        }
    }
}

/// The numeric flags, each with its range (inclusive) and unit: the one place a range is set.
/// `--describe` gives them to the orchestrator, whose own checks of the options it passes
/// are held to them at the edges by a test on its side (tests/unit/test_contracts.py).
pub const RANGES: &[(&str, u64, u64, &str)] = &[
    ("--http-port", 0, 65_535, "(0: none)"),
    ("--https-port", 1, 65_535, ""),
    ("--sndbuf", 1, 1 << 30, "bytes"),
    ("--rcvbuf", 1, 1 << 30, "bytes"),
    ("--quic-initcwnd", 1, 10_000, "packets"),
    ("--quic-max-data", 1, (1 << 62) - 1, "bytes"),
    ("--quic-max-stream-data", 1, (1 << 62) - 1, "bytes"),
    ("--idle-timeout-s", 1, 86_400, "s"),
    ("--header-read-timeout-s", 1, 86_400, "s"),
    ("--max-tcp-conns", 1, 1 << 20, "connections"),
    ("--max-quic-conns", 1, 1 << 20, "connections"),
];
/// The flags with a fixed set of values.
pub const CHOICES: &[(&str, &[&str])] = &[
    ("--cc", &["cubic", "bbr", "reno"]),
    ("--quic-stack", &["quiche", "quinn"]),
];
/// The switches (no value).
pub const SWITCHES: &[&str] = &[
    "--no-h3",
    "--tfo",
    "--no-nodelay",
    "--webtransport",
    "--no-resumption",
    "--no-0rtt",
    "--no-pacing",
    "--replay-think",
];
/// The flags that take text (paths, an address).
pub const TEXT: &[&str] = &[
    "--root",
    "--cert",
    "--key",
    "--bind",
    "--access-log",
    "--tcp-info",
    "--quic-info",
    "--qlog-dir",
    "--replay",
];

/// Every flag as `--describe` gives it: `{"flag", "kind": "int"|"choice"|"switch"|"text", ...}`.
fn describe_flags() -> Vec<serde_json::Value> {
    let mut v: Vec<serde_json::Value> = RANGES
        .iter()
        .map(|(f, lo, hi, unit)| serde_json::json!({"flag": f, "kind": "int", "lo": lo, "hi": hi, "unit": unit}))
        .collect();
    v.extend(
        CHOICES
            .iter()
            .map(|(f, c)| serde_json::json!({"flag": f, "kind": "choice", "choices": c})),
    );
    v.extend(
        SWITCHES
            .iter()
            .map(|f| serde_json::json!({"flag": f, "kind": "switch"})),
    );
    v.extend(
        TEXT.iter()
            .map(|f| serde_json::json!({"flag": f, "kind": "text"})),
    );
    v
}

/// A command line that cannot be used; printed as `satbench-server: <message>`, exit 2.
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    /// An option that takes a value came last.
    #[error("{0} needs a value")]
    MissingValue(String),
    /// An option or positional argument this program does not have.
    #[error("unknown argument {0:?}")]
    Unknown(String),
    /// A numeric option whose value does not parse.
    #[error("{flag}: not a valid number: {value:?}")]
    NotANumber { flag: &'static str, value: String },
    /// `--cc` other than cubic, bbr or reno.
    #[error("--cc: must be cubic, bbr or reno, got {0:?}")]
    BadCc(String),
    /// A number outside its flag's range (`RANGES`).
    #[error("{flag}: must be {lo} to {hi}{unit}, got {value}")]
    OutOfRange {
        flag: &'static str,
        lo: u64,
        hi: u64,
        unit: String,
        value: u64,
    },
    /// No `--root`.
    #[error("--root is required")]
    NoRoot,
    /// `--quic-stack` other than quiche or quinn.
    #[error("--quic-stack: must be quiche or quinn, got {0:?}")]
    BadQuicStack(String),
    /// A setting quinn has no way to apply.
    #[error("{0}")]
    NotWithQuinn(&'static str),
    #[error("--webtransport needs --quic-stack quinn (quiche's HTTP/3 has no WebTransport)")]
    WebTransportNeedsQuinn,
    /// Only one of `--cert` and `--key`.
    #[error("--cert and --key go together")]
    CertWithoutKey,
    /// `--replay-think` without a recording to take the time from.
    #[error("--replay-think needs --replay")]
    ThinkWithoutReplay,
    /// Anything else lexopt reports (a value given to a flag, non-UTF-8 text).
    #[error(transparent)]
    Other(lexopt::Error),
}

impl From<lexopt::Error> for ArgError {
    fn from(e: lexopt::Error) -> ArgError {
        match e {
            lexopt::Error::MissingValue { option: Some(o) } => ArgError::MissingValue(o),
            lexopt::Error::UnexpectedOption(o) => ArgError::Unknown(o),
            lexopt::Error::UnexpectedArgument(a) => {
                ArgError::Unknown(a.to_string_lossy().into_owned())
            }
            other => ArgError::Other(other),
        }
    }
}

fn num<T: std::str::FromStr>(flag: &'static str, p: &mut lexopt::Parser) -> Result<T, ArgError> {
    use lexopt::ValueExt;
    let value = p.value()?.string()?;
    value
        .parse()
        .map_err(|_| ArgError::NotANumber { flag, value })
}

/// A number within its flag's range (`RANGES`).
fn ranged<T: TryFrom<u64>>(flag: &'static str, p: &mut lexopt::Parser) -> Result<T, ArgError> {
    let (lo, hi, unit) = RANGES
        .iter()
        .find(|r| r.0 == flag)
        .map(|r| (r.1, r.2, r.3))
        .expect("every ranged flag is in RANGES");
    let v: u64 = num(flag, p)?;
    let out = || ArgError::OutOfRange {
        flag,
        lo,
        hi,
        unit: if unit.is_empty() {
            String::new()
        } else {
            format!(" {unit}")
        },
        value: v,
    };
    if !(lo..=hi).contains(&v) {
        return Err(out());
    }
    T::try_from(v).map_err(|_| out())
}

/// Parse the arguments after the program name.
fn parse<I>(args: I) -> Result<Options, ArgError>
where
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString>,
{
    use lexopt::prelude::*;
    let mut o = Options::default();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        match arg {
            Long("root") => o.root = p.value()?.string()?,
            Long("cert") => o.cert = Some(p.value()?.string()?),
            Long("key") => o.key = Some(p.value()?.string()?),
            Long("cc") => {
                let v = p.value()?.string()?;
                if !["cubic", "bbr", "reno"].contains(&v.as_str()) {
                    return Err(ArgError::BadCc(v));
                }
                o.cc = Some(v);
            }
            Long("bind") => o.bind = p.value()?.string()?,
            Long("http-port") => o.http_port = ranged("--http-port", &mut p)?,
            Long("https-port") => o.https_port = ranged("--https-port", &mut p)?,
            Long("no-h3") => {
                o.h3 = false;
                o.alt_svc = false;
            }
            Long("access-log") => o.access_log = Some(p.value()?.string()?),
            Long("tcp-info") => o.tcp_info = Some(p.value()?.string()?),
            Long("quic-info") => o.quic_info = Some(p.value()?.string()?),
            Long("quic-stack") => {
                o.quic_stack = match p.value()?.string()?.as_str() {
                    "quiche" => QuicStack::Quiche,
                    "quinn" => QuicStack::Quinn,
                    other => return Err(ArgError::BadQuicStack(other.into())),
                }
            }
            Long("quic-max-data") => o.quic_max_data = Some(ranged("--quic-max-data", &mut p)?),
            Long("quic-max-stream-data") => {
                o.quic_max_stream_data = Some(ranged("--quic-max-stream-data", &mut p)?)
            }
            Long("qlog-dir") => o.qlog_dir = Some(p.value()?.string()?),
            Long("tfo") => o.tfo = true,
            Long("no-nodelay") => o.nodelay = false,
            Long("webtransport") => o.webtransport = true,
            Long("replay") => o.replay = Some(p.value()?.string()?),
            Long("replay-think") => o.replay_think = true,
            Long("no-resumption") => o.resumption = false,
            Long("no-0rtt") => o.zero_rtt = false,
            Long("no-pacing") => o.pacing = false,
            Long("sndbuf") => o.sndbuf = Some(ranged("--sndbuf", &mut p)?),
            Long("rcvbuf") => o.rcvbuf = Some(ranged("--rcvbuf", &mut p)?),
            Long("quic-initcwnd") => o.quic_initcwnd = Some(ranged("--quic-initcwnd", &mut p)?),
            Long("idle-timeout-s") => o.idle_timeout_s = ranged("--idle-timeout-s", &mut p)?,
            Long("max-tcp-conns") => o.max_tcp_conns = ranged("--max-tcp-conns", &mut p)?,
            Long("max-quic-conns") => o.max_quic_conns = ranged("--max-quic-conns", &mut p)?,
            Long("header-read-timeout-s") => {
                o.header_read_timeout_s = Some(ranged("--header-read-timeout-s", &mut p)?)
            }
            other => return Err(other.unexpected().into()),
        }
    }
    if o.root.is_empty() {
        return Err(ArgError::NoRoot);
    }
    if o.quic_stack == QuicStack::Quinn && !o.pacing {
        return Err(ArgError::NotWithQuinn(
            "--no-pacing: quinn always paces (quinn-proto has no switch for its pacer)",
        ));
    }
    if o.webtransport && o.quic_stack != QuicStack::Quinn {
        return Err(ArgError::WebTransportNeedsQuinn);
    }
    if o.cert.is_some() != o.key.is_some() {
        return Err(ArgError::CertWithoutKey);
    }
    if o.replay_think && o.replay.is_none() {
        return Err(ArgError::ThinkWithoutReplay);
    }
    if o.cert.is_none() {
        o.h3 = false;
        o.alt_svc = false;
    }
    Ok(o)
}

/// The congestion control implementation of the QUIC stack in use.
pub fn quic_cc_impl(opts: &Options) -> String {
    match opts.quic_stack {
        QuicStack::Quiche => quic::quic_cc_impl(opts.cc_name()),
        QuicStack::Quinn => quic_quinn::cc_impl(opts.cc_name()).to_string(),
    }
}

/// The QUIC settings in effect, for the ready line.
fn quic_settings(opts: &Options) -> serde_json::Map<String, serde_json::Value> {
    // quiche autotunes a window it was not told to fix, up to its caps.
    let (conn_cap, stream_cap) = match opts.quic_stack {
        QuicStack::Quiche => (
            opts.quic_max_data
                .unwrap_or(quic::QUICHE_MAX_CONNECTION_WINDOW),
            opts.quic_max_stream_data
                .unwrap_or(quic::QUICHE_MAX_STREAM_WINDOW),
        ),
        QuicStack::Quinn => (opts.max_data(), opts.max_stream_data()),
    };
    let v = serde_json::json!({
        "quic_stack": opts.quic_stack.name(),
        "quic_max_data": opts.max_data(),
        "quic_max_stream_data": opts.max_stream_data(),
        "quic_fc_autotune": opts.quic_stack == QuicStack::Quiche
            && (opts.quic_max_data.is_none() || opts.quic_max_stream_data.is_none()),
        "quic_fc_window_cap": {"conn": conn_cap, "stream": stream_cap},
        "quic_initcwnd_packets": opts.initcwnd(),
        "quic_max_datagram": QUIC_MAX_DATAGRAM,
        "quic_pacing": opts.pacing,
        "quic_0rtt": opts.zero_rtt,
        "quic_qlog": opts.qlog_dir.as_ref().map(|_| "sqlog"),
        // quinn's cap on data written and not yet acknowledged (quiche has none).
        "quic_send_window": (opts.quic_stack == QuicStack::Quinn)
            .then(|| quic_quinn::send_window(opts)),
    });
    v.as_object().expect("object").clone()
}

/// The limits in effect (see the module docs), for the ready line.
fn limits(opts: &Options) -> serde_json::Value {
    let mut v = serde_json::json!({
        "max_tcp_conns": opts.max_tcp_conns,
        "idle_timeout_s": opts.idle_timeout_s,
        "header_read_timeout_s": opts.header_read_timeout().as_secs(),
        "h1_max_head_bytes": tcp::H1_MAX_HEAD_BYTES,
        "h2_max_concurrent_streams": tcp::H2_MAX_CONCURRENT_STREAMS,
        "h2_max_header_list_bytes": tcp::H2_MAX_HEADER_LIST_BYTES,
        "h2_max_pending_accept_reset_streams": tcp::H2_MAX_PENDING_ACCEPT_RESET_STREAMS,
        "h2_max_local_error_reset_streams": tcp::H2_MAX_LOCAL_ERROR_RESET_STREAMS,
        "h2_max_send_buf_bytes": tcp::H2_MAX_SEND_BUF_BYTES,
    });
    if opts.h3 {
        let q = serde_json::json!({
            "max_quic_conns": opts.max_quic_conns,
            "quic_max_streams_bidi": quic::QUIC_MAX_STREAMS_BIDI,
            "quic_max_streams_uni": quic::QUIC_MAX_STREAMS_UNI,
            "h3_max_field_section_bytes": quic::H3_MAX_FIELD_SECTION_BYTES,
            "quic_min_initial_datagram": quic::MIN_INITIAL_DATAGRAM,
            "quinn_incoming_buffer_bytes": (opts.quic_stack == QuicStack::Quinn)
                .then_some(quic_quinn::QUINN_INCOMING_BUFFER_BYTES),
            "quinn_incoming_buffer_total_bytes": (opts.quic_stack == QuicStack::Quinn)
                .then_some(quic_quinn::QUINN_INCOMING_BUFFER_TOTAL_BYTES),
        });
        if let (Some(m), Some(q)) = (v.as_object_mut(), q.as_object()) {
            m.extend(q.clone());
        }
    }
    v
}

/// `--describe`: the facts the orchestrator reads of this binary, as one
/// JSON line (their one owner is here): the classes of what limited a
/// sender, in the order reports show them, and every flag with its kind and
/// range or values.
fn describe() -> serde_json::Value {
    serde_json::json!({
        "limited_by": limits::LimitedBy::ALL.iter().map(|c| c.name()).collect::<Vec<_>>(),
        "flags": describe_flags(),
        "realtime": {
            "min_size": realtime::MIN_SIZE,
            "max_size": realtime::MAX_SIZE,
            "max_messages": realtime::MAX_MESSAGES,
            "max_interval_ms": realtime::MAX_INTERVAL_MS,
            "max_members": realtime::MAX_MEMBERS,
        },
    })
}

fn main() {
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "--describe")
    {
        println!("{}", describe());
        return;
    }
    // `--check-args ARGS...`: parse the arguments as a server would, serve nothing (exit 0, or
    // 2 with the message): how the orchestrator's tests hold its checks to this parser.
    let check_only = std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "--check-args");
    let opts = parse(std::env::args_os().skip(if check_only { 2 } else { 1 }))
        .unwrap_or_else(|e| usage(&e.to_string()));
    if check_only {
        return;
    }
    let dir = || {
        files::Root::new(std::path::Path::new(&opts.root))
            .unwrap_or_else(|e| usage(&format!("--root {}: {e}", opts.root)))
    };
    let archive = || {
        opts.replay.as_ref().map(|f| {
            replay::Archive::load(std::path::Path::new(f))
                .unwrap_or_else(|e| usage(&format!("--replay {e}")))
        })
    };
    let root = files::Site::new(dir(), archive(), opts.replay_think);
    let open = |p: &Option<String>, flag: &str| {
        log::JsonLines::create(p.as_deref()).unwrap_or_else(|e| usage(&format!("{flag}: {e}")))
    };
    let access = open(&opts.access_log, "--access-log");
    let tcp_info = open(&opts.tcp_info, "--tcp-info");
    let quic_info = open(&opts.quic_info, "--quic-info");
    if let Some(d) = &opts.qlog_dir {
        std::fs::create_dir_all(d).unwrap_or_else(|e| usage(&format!("--qlog-dir {d}: {e}")));
    }
    let tls = opts.cert.as_ref().map(|c| {
        let cfg = tcp::tls_config(c, opts.key.as_deref().expect("checked"), opts.resumption)
            .unwrap_or_else(|e| usage(&e.to_string()));
        tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
    });
    let bind = |port: u16| -> std::net::TcpListener {
        let addr = format!("{}:{port}", opts.bind)
            .parse()
            .unwrap_or_else(|_| usage(&format!("--bind: not an IPv4 address: {}", opts.bind)));
        tcp::listener(addr, &opts).unwrap_or_else(|e| {
            eprintln!("satbench-server: {e}");
            std::process::exit(1)
        })
    };
    let http = (opts.http_port != 0).then(|| bind(opts.http_port));
    let https = tls.as_ref().map(|_| bind(opts.https_port));
    let stop = Arc::new(AtomicBool::new(false));
    // The real-time endpoints' sessions and rooms, one for both servers.
    let realtime = Arc::new(rt_serve::RtState::default());
    let quic = if opts.h3 {
        let files = Arc::new(files::Site::new(dir(), archive(), opts.replay_think));
        let st = stop.clone();
        let run: Box<dyn FnOnce() + Send> = match opts.quic_stack {
            QuicStack::Quiche => {
                let s = quic::Server::new(&opts, files, access.clone(), quic_info.clone())
                    .unwrap_or_else(|e| usage(&e.to_string()));
                Box::new(move || s.run(st))
            }
            QuicStack::Quinn => {
                let rt = realtime.clone();
                let s =
                    quic_quinn::Server::new(&opts, files, access.clone(), quic_info.clone(), rt)
                        .unwrap_or_else(|e| usage(&e.to_string()));
                Box::new(move || s.run(st))
            }
        };
        Some(
            std::thread::Builder::new()
                .name("quic".into())
                .spawn(run)
                .expect("spawn"),
        )
    } else {
        None
    };
    let cc_in_effect = http
        .as_ref()
        .or(https.as_ref())
        .and_then(|l| tcpinfo::congestion(std::os::fd::AsRawFd::as_raw_fd(l)));
    let (shutdown, _) = tokio::sync::watch::channel(false);
    let shared = Arc::new(tcp::Shared {
        root,
        opts: opts.clone(),
        access,
        tcp_info,
        open: Default::default(),
        shutdown,
        live: Default::default(),
        realtime,
    });
    let sh_end = shared.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        if let Some(l) = http {
            tokio::spawn(tcp::accept_loop(shared.clone(), l, None));
        }
        if let (Some(l), Some(t)) = (https, tls) {
            tokio::spawn(tcp::accept_loop(shared.clone(), l, Some(t)));
        }
        println!(
            "{}",
            serde_json::json!({
                "ready": true, "pid": std::process::id(), "root": shared.root.path(),
                "replay": shared.root.archive().map(|a| serde_json::json!({
                    "host": a.host, "entries": a.len(), "think": opts.replay_think})),
                "http_port": opts.http_port, "https_port": opts.https_port, "h3": opts.h3,
                "tcp_cc": cc_in_effect,
                "quic_cc": opts.h3.then(|| quic::cc_family(opts.cc_name())),
                "quic_cc_impl": opts.h3.then(|| quic_cc_impl(&opts)),
                "version": env!("CARGO_PKG_VERSION"),
            })
            .as_object()
            .map(|m| {
                let mut m = m.clone();
                if opts.h3 {
                    m.extend(quic_settings(&opts));
                }
                m.insert("limits".into(), limits(&opts));
                serde_json::Value::Object(m)
            })
            .expect("object")
        );
        let terminate = tokio::signal::unix::SignalKind::terminate();
        let mut term = tokio::signal::unix::signal(terminate).expect("signal");
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        // Last TCP_INFO samples, then a record for every connection still open.
        let _ = sh_end.shutdown.send(true);
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
        sh_end.close_all();
    });
    stop.store(true, Ordering::Relaxed);
    if let Some(q) = quic {
        let _ = q.join();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(args: &[&str]) -> String {
        parse(args.iter().copied()).unwrap_err().to_string()
    }

    #[test]
    fn parses_options_as_before() {
        let o = parse(["--root", "/srv", "--cert", "c", "--key", "k", "--cc", "bbr"]).unwrap();
        assert!(o.h3 && o.alt_svc && o.cc.as_deref() == Some("bbr"));
        let o = parse([
            "--root",
            "/srv",
            "--http-port",
            "0",
            "--sndbuf",
            "4096",
            "--no-pacing",
        ])
        .unwrap();
        assert_eq!(
            (o.http_port, o.sndbuf, o.pacing, o.h3),
            (0, Some(4096), false, false)
        );
        assert_eq!(parse(["--root", "/srv"]).unwrap().idle_timeout_s, 30);
    }

    #[test]
    fn quic_stack_windows_and_bind() {
        let o = parse(["--root", "/srv"]).unwrap();
        assert_eq!(o.bind, "127.0.0.1");
        assert_eq!(o.quic_stack, QuicStack::Quiche);
        assert_eq!(
            (o.max_data(), o.max_stream_data(), o.initcwnd()),
            (32 << 20, 8 << 20, 10)
        );
        assert_eq!((o.quic_info, o.quic_max_data), (None, None));
        let o = parse([
            "--root",
            "/srv",
            "--quic-stack",
            "quinn",
            "--quic-max-data",
            "1000000",
            "--quic-max-stream-data",
            "500000",
            "--quic-info",
            "q.jsonl",
            "--quic-initcwnd",
            "32",
            "--bind",
            "0.0.0.0",
        ])
        .unwrap();
        assert_eq!(o.quic_stack, QuicStack::Quinn);
        assert_eq!((o.max_data(), o.max_stream_data()), (1_000_000, 500_000));
        assert_eq!(
            (o.quic_info.as_deref(), o.initcwnd(), o.bind.as_str()),
            (Some("q.jsonl"), 32, "0.0.0.0")
        );
        let o = parse(["--root", "/", "--quic-stack", "quiche", "--no-pacing"]).unwrap();
        assert!(!o.pacing);
    }

    #[test]
    fn quic_messages() {
        assert_eq!(
            err(&["--root", "/", "--quic-stack", "msquic"]),
            "--quic-stack: must be quiche or quinn, got \"msquic\""
        );
        assert_eq!(
            err(&["--root", "/", "--quic-stack", "quinn", "--no-pacing"]),
            "--no-pacing: quinn always paces (quinn-proto has no switch for its pacer)"
        );
        assert_eq!(
            err(&["--root", "/", "--no-pacing", "--quic-stack", "quinn"]),
            "--no-pacing: quinn always paces (quinn-proto has no switch for its pacer)"
        );
        assert_eq!(
            err(&["--root", "/", "--webtransport"]),
            "--webtransport needs --quic-stack quinn (quiche's HTTP/3 has no WebTransport)"
        );
        let o = parse(["--root", "/", "--quic-stack", "quinn", "--webtransport"]).unwrap();
        assert!(o.webtransport);
        assert_eq!(
            err(&["--root", "/", "--quic-max-data", "0"]),
            "--quic-max-data: must be 1 to 4611686018427387903 bytes, got 0"
        );
        assert_eq!(
            err(&["--root", "/", "--quic-max-stream-data", "4611686018427387904"]),
            "--quic-max-stream-data: must be 1 to 4611686018427387903 bytes, got 4611686018427387904"
        );
        assert_eq!(
            err(&["--root", "/", "--quic-max-data", "lots"]),
            "--quic-max-data: not a valid number: \"lots\""
        );
        assert_eq!(
            err(&["--root", "/", "--quic-initcwnd", "0"]),
            "--quic-initcwnd: must be 1 to 10000 packets, got 0"
        );
        assert_eq!(
            err(&["--root", "/", "--quic-info"]),
            "--quic-info needs a value"
        );
        assert_eq!(
            err(&["--root", "/", "--sndbuf", "1073741825"]),
            "--sndbuf: must be 1 to 1073741824 bytes, got 1073741825"
        );
    }

    #[test]
    fn every_flag_is_described_once_and_parsed() {
        let flags = describe_flags();
        let names: Vec<&str> = flags.iter().map(|f| f["flag"].as_str().unwrap()).collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len());
        // Each described flag is one this parser knows (an unknown one is refused as unknown).
        for f in &flags {
            let flag = f["flag"].as_str().unwrap();
            let value = match f["kind"].as_str().unwrap() {
                "int" => Some(f["lo"].to_string()),
                "choice" => Some(f["choices"][1].as_str().unwrap().to_string()),
                "switch" => None,
                _ => Some("x".to_string()),
            };
            let mut args = vec!["--root".to_string(), "/".to_string(), flag.to_string()];
            args.extend(value);
            if let Err(ArgError::Unknown(a)) = parse(args.iter().map(String::as_str)) {
                panic!("{flag} is described but not parsed ({a})");
            }
        }
    }

    #[test]
    fn limits_flags() {
        let o = parse(["--root", "/srv"]).unwrap();
        assert_eq!((o.max_tcp_conns, o.max_quic_conns), (1000, 1000));
        assert_eq!(o.header_read_timeout().as_secs(), 30);
        let o = parse([
            "--root",
            "/srv",
            "--max-tcp-conns",
            "50",
            "--max-quic-conns",
            "7",
            "--header-read-timeout-s",
            "2",
            "--idle-timeout-s",
            "9",
        ])
        .unwrap();
        assert_eq!((o.max_tcp_conns, o.max_quic_conns), (50, 7));
        assert_eq!(
            (o.header_read_timeout().as_secs(), o.idle_timeout_s),
            (2, 9)
        );
        let o = parse(["--root", "/srv", "--idle-timeout-s", "9"]).unwrap();
        assert_eq!(o.header_read_timeout().as_secs(), 9);
        assert_eq!(
            err(&["--root", "/", "--max-tcp-conns", "0"]),
            "--max-tcp-conns: must be 1 to 1048576 connections, got 0"
        );
        assert_eq!(
            err(&["--root", "/", "--header-read-timeout-s", "0"]),
            "--header-read-timeout-s: must be 1 to 86400 s, got 0"
        );
        assert_eq!(
            err(&["--root", "/", "--max-quic-conns", "many"]),
            "--max-quic-conns: not a valid number: \"many\""
        );
        let l = limits(&o);
        assert_eq!(l["max_tcp_conns"], 1000);
        assert_eq!(l["header_read_timeout_s"], 9);
        assert!(
            l.get("max_quic_conns").is_none(),
            "no h3 without a certificate"
        );
    }

    #[test]
    fn messages_as_before() {
        assert_eq!(err(&[]), "--root is required");
        assert_eq!(err(&["--bogus"]), "unknown argument \"--bogus\"");
        assert_eq!(err(&["pos"]), "unknown argument \"pos\"");
        assert_eq!(err(&["-h"]), "unknown argument \"-h\"");
        assert_eq!(err(&["--root"]), "--root needs a value");
        assert_eq!(
            err(&["--root", "/", "--cc", "foo"]),
            "--cc: must be cubic, bbr or reno, got \"foo\""
        );
        assert_eq!(
            err(&["--root", "/", "--http-port", "x"]),
            "--http-port: not a valid number: \"x\""
        );
        assert_eq!(
            err(&["--root", "/", "--cert", "a"]),
            "--cert and --key go together"
        );
    }
}
