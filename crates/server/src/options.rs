//! The server's command line: every option, its default and range, parsed
//! once (`parse`); `--describe` gives the flags to the orchestrator from
//! here (their one owner).

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
    /// The address every server listens on: IPv4, IPv6, or `::` for both
    /// families on one socket each (dual stack).
    pub bind: std::net::IpAddr,
    pub http_port: u16,
    pub https_port: u16,
    pub h3: bool,
    pub alt_svc: bool,
    /// HTTP/2 offered over TLS (ALPN); `--no-h2`: HTTP/1.1 only, as an old origin.
    pub h2: bool,
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
    /// `--replay-deterministic`: the recorded time and fixed random numbers in replayed HTML
    /// (`determinism.rs`).
    pub replay_deterministic: bool,
    /// `--cache-max-age S`: `Cache-Control: max-age=S` on the directory's files.
    pub cache_max_age: Option<u64>,
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

impl Default for Options {
    fn default() -> Options {
        Options {
            root: String::new(),
            cert: None,
            key: None,
            cc: None,
            bind: std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
            http_port: 80,
            https_port: 443,
            h3: true,
            alt_svc: true,
            h2: true,
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
            replay_deterministic: false,
            cache_max_age: None,
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
    ("--cache-max-age", 0, 31_536_000, "s"),
];
/// The flags with a fixed set of values.
pub const CHOICES: &[(&str, &[&str])] = &[
    ("--cc", &["cubic", "bbr", "reno"]),
    ("--quic-stack", &["quiche", "quinn"]),
];
/// The switches (no value).
pub const SWITCHES: &[&str] = &[
    "--no-h3",
    "--no-h2",
    "--tfo",
    "--no-nodelay",
    "--webtransport",
    "--no-resumption",
    "--no-0rtt",
    "--no-pacing",
    "--replay-think",
    "--replay-deterministic",
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
pub fn describe_flags() -> Vec<serde_json::Value> {
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
    /// `--bind` that is no IP address.
    #[error("--bind: not an IPv4 or IPv6 address: {0:?}")]
    BadBind(String),
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
    /// `--replay-deterministic` without a recording to replay.
    #[error("--replay-deterministic needs --replay")]
    DeterministicWithoutReplay,
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
pub fn parse<I>(args: I) -> Result<Options, ArgError>
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
            Long("bind") => {
                let v = p.value()?.string()?;
                o.bind = v.parse().map_err(|_| ArgError::BadBind(v))?;
            }
            Long("http-port") => o.http_port = ranged("--http-port", &mut p)?,
            Long("https-port") => o.https_port = ranged("--https-port", &mut p)?,
            Long("no-h2") => o.h2 = false,
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
            Long("replay-deterministic") => o.replay_deterministic = true,
            Long("cache-max-age") => o.cache_max_age = Some(ranged("--cache-max-age", &mut p)?),
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
    if o.replay_deterministic && o.replay.is_none() {
        return Err(ArgError::DeterministicWithoutReplay);
    }
    if o.cert.is_none() {
        o.h3 = false;
        o.alt_svc = false;
    }
    Ok(o)
}
