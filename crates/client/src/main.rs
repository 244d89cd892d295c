//! satbench-load: a synthetic page loader for many clients at once.
//!
//! ```text
//! satbench-load URL --protocol h1|h2|h3 [--clients C] [--connections K] [--cacert PEM]
//!               [--connect-to ADDR:PORT] [--single | --bulk] [--repeat N] [-o FILE] [--timeout S]
//!               [--quic-stack quiche|quinn] [--quic-max-data BYTES] [--quic-max-stream-data BYTES]
//!               [--start-at UNIX_NS] [--upload BYTES] [--realtime poll|sse|ws]
//!               [--repeat-view] [--tfo] [--schedule FILE]
//! satbench-load --check-schedule FILE
//! ```
//! `--schedule FILE` replays a browser's request schedule (`schedule.rs`)
//! instead of discovering the page's objects from its HTML and CSS: each
//! request asked for once the response it waited for has ended and its delay
//! has passed. URL must be the schedule's first request. `--check-schedule`
//! only checks a schedule file (exit 2 and one line naming the field if it
//! is wrong) and prints its number of requests.
//! `--repeat-view` loads the page twice per client, 500 ms apart, every
//! connection of the first load closed before the second: the second (the
//! output's client record, with the first as its `first_view`) resumes its
//! TLS sessions (a session cache of the client's own, shared by its
//! connections; over HTTP/3 with quiche, its QUIC session tickets, so that the
//! second load's requests go as 0-RTT early data). `--tfo` opens every TCP
//! connection with TCP Fast Open (TCP_FASTOPEN_CONNECT: the first flight
//! rides in the SYN once the server gave the client a cookie, which a first
//! view gets). The loader's quinn resumes no sessions yet.
//! `--realtime MECH` runs a real-time scenario instead of a page load (see
//! `rt.rs` and `rt_client.rs`): URL's query is satbench-server's (scenario,
//! messages, sizes, arrivals, session, room), each client is session
//! `SESSION-k`, over HTTP/1.1 or HTTP/2; a client's output then carries
//! `realtime` (what it sent and had, stamped) and its `connections`.
//! `--upload BYTES` makes every fetch of `--single` a POST of that many
//! incompressible bytes (to the server's sink, `/upload`); the output's
//! objects carry the bytes `sent`.
//! `--start-at` waits for that wall-clock instant before loading (a population
//! of loaders in several namespaces released at once); the output carries the
//! instant the load really started, `start_unix_ns`.
//! HTTP/3 runs over quiche (default, `h3.rs`) or quinn with the `h3` crate
//! (`--quic-stack quinn`, `h3_quinn.rs`). `--quic-max-data` and
//! `--quic-max-stream-data` are the flow-control windows the loader
//! advertises (default 256 MiB and 128 MiB); given, they are fixed for the
//! whole connection on both stacks.
//! Each of the C clients loads the page on its own fresh connections, all at
//! once, in one thread: HTTP/1.1 on up to K connections per origin (default
//! 6), HTTP/2 and HTTP/3 on one connection per origin. `--single` fetches
//! only URL (curl-style timing); `--bulk` too, printing progress on stderr;
//! `--repeat N` fetches it N times, one after another, on the same connection;
//! `-o FILE` writes the (first) body to FILE.
//! Prints one JSON object on stdout: `{"clients": [...], "cpu_ms", "wall_ms", ...}`, every time in ms;
//! see `page::PageResult::to_json` for a client's fields.

mod conn;
mod discover;
#[cfg(test)]
mod fuzz;
mod h3;
mod h3_common;
mod h3_quinn;
mod page;
mod rt;
mod rt_client;
mod schedule;
mod session;
mod sse;
mod tls;
mod upload;
mod url;

use satbench_common::unix_ns;
use session::{Proto, QuicStack, QuicWindows, Settings};
use std::sync::Arc;
use std::time::{Duration, Instant};
use url::Url;

/// A repeat view's pause between its two loads.
const REPEAT_PAUSE: Duration = Duration::from_millis(500);

fn die(msg: &str) -> ! {
    eprintln!("satbench-load: {msg}");
    std::process::exit(2);
}

/// The command line.
#[derive(Debug)]
struct Args {
    url: String,
    proto: Option<Proto>,
    clients: usize,
    connections: usize,
    cacert: Option<String>,
    connect_to: Option<std::net::SocketAddr>,
    single: bool,
    bulk: bool,
    repeat: usize,
    output: Option<String>,
    timeout: f64,
    quic_stack: QuicStack,
    quic_max_data: Option<u64>,
    quic_max_stream_data: Option<u64>,
    /// Start at this wall-clock time (ns since the Unix epoch), not before.
    start_at: Option<u64>,
    /// POST this many bytes instead of a GET.
    upload: Option<u64>,
    /// Run a real-time scenario over this mechanism.
    realtime: Option<rt::Mech>,
    /// Load the page twice per client, the second time as a returning client.
    repeat_view: bool,
    /// TCP Fast Open on every TCP connection.
    tfo: bool,
    /// A browser's request schedule to replay (a file).
    schedule: Option<String>,
}

impl Args {
    /// The windows advertised over QUIC.
    fn quic_windows(&self) -> QuicWindows {
        let d = QuicWindows::DEFAULT;
        QuicWindows {
            max_data: self.quic_max_data.unwrap_or(d.max_data),
            max_stream_data: self.quic_max_stream_data.unwrap_or(d.max_stream_data),
            fixed: self.quic_max_data.is_some() || self.quic_max_stream_data.is_some(),
        }
    }
}

impl Default for Args {
    fn default() -> Args {
        Args {
            url: String::new(),
            proto: None,
            clients: 1,
            connections: 6,
            cacert: None,
            connect_to: None,
            single: false,
            bulk: false,
            repeat: 1,
            output: None,
            timeout: 120.0,
            quic_stack: QuicStack::Quiche,
            quic_max_data: None,
            quic_max_stream_data: None,
            start_at: None,
            upload: None,
            realtime: None,
            repeat_view: false,
            tfo: false,
            schedule: None,
        }
    }
}

const USAGE: &str = "usage: satbench-load URL --protocol h1|h2|h3 [--clients C] \
                     [--connections K] [--cacert PEM] [--connect-to ADDR:PORT] \
                     [--single|--bulk [--repeat N] [-o FILE]] [--timeout S] \
                     [--quic-stack quiche|quinn] [--quic-max-data BYTES] \
                     [--quic-max-stream-data BYTES] [--start-at UNIX_NS] \
                     [--upload BYTES (with --single)] [--realtime poll|sse|ws] \
                     [--repeat-view] [--tfo] [--schedule FILE]\n       \
                     satbench-load --check-schedule FILE";

/// What the command line asks for.
#[derive(Debug)]
enum Command {
    /// `-h` or `--help`: print the usage line and exit 0.
    Help,
    Load(Box<Args>),
    /// `--check-schedule FILE`: check a schedule file and exit.
    CheckSchedule(String),
}

/// A command line that cannot be used; printed as `satbench-load: <message>`, exit 2.
#[derive(Debug, thiserror::Error)]
enum ArgError {
    /// An option that takes a value came last.
    #[error("{0} needs a value")]
    MissingValue(String),
    /// An option this program does not have.
    #[error("unknown option {0}")]
    UnknownOption(String),
    /// A second positional argument.
    #[error("one URL only (also got {0:?})")]
    SecondUrl(String),
    /// A count below 1 or no whole number.
    #[error("{flag}: must be a whole number >= 1, got {value:?}")]
    BadCount { flag: &'static str, value: String },
    #[error("--protocol: h1, h2 or h3, not {0:?}")]
    BadProtocol(String),
    #[error("--connect-to: ADDR:PORT, not {0:?}")]
    BadConnectTo(String),
    #[error("--quic-stack: quiche or quinn, not {0:?}")]
    BadQuicStack(String),
    /// A window that is no whole number from 1 to 2^62 - 1.
    #[error("{flag}: bytes from 1 to 4611686018427387903, not {value:?}")]
    BadWindow { flag: &'static str, value: String },
    #[error("--timeout: seconds > 0, not {0:?}")]
    BadTimeout(String),
    #[error("--start-at: nanoseconds since the Unix epoch, not {0:?}")]
    BadStartAt(String),
    #[error("no URL")]
    NoUrl,
    #[error("--repeat and -o need --single or --bulk")]
    RepeatWithoutSingle,
    #[error("-o writes one body: it needs --clients 1")]
    OutputWithClients,
    #[error("--protocol is required (h1, h2 or h3)")]
    NoProtocol,
    #[error("--upload: bytes >= 1, not {0:?}")]
    BadUpload(String),
    #[error("--upload needs --single")]
    UploadWithoutSingle,
    #[error("--realtime: poll, sse or ws, not {0:?}")]
    BadRealtime(String),
    #[error("--realtime runs over h1 or h2 (over HTTP/3 the server has WebTransport only, which the loader does not speak)")]
    RealtimeOverH3,
    #[error("--repeat-view loads pages over h1, h2 or h3 with quiche (the loader's quinn resumes no sessions yet), not with --single, --bulk or --realtime")]
    RepeatView,
    #[error("--realtime runs a scenario, not --single, --bulk or --upload")]
    RealtimeWithSingle,
    #[error("--schedule replays a page's requests: not with --single, --bulk or --realtime")]
    ScheduleWithSingle,
    /// Anything else lexopt reports (a value given to a flag, non-UTF-8 text).
    #[error(transparent)]
    Other(lexopt::Error),
}

impl From<lexopt::Error> for ArgError {
    fn from(e: lexopt::Error) -> ArgError {
        match e {
            lexopt::Error::MissingValue { option: Some(o) } => ArgError::MissingValue(o),
            lexopt::Error::UnexpectedOption(o) => ArgError::UnknownOption(o),
            other => ArgError::Other(other),
        }
    }
}

fn count(flag: &'static str, p: &mut lexopt::Parser) -> Result<usize, ArgError> {
    use lexopt::ValueExt;
    let value = p.value()?.string()?;
    match value.parse() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(ArgError::BadCount { flag, value }),
    }
}

/// A flow-control window: 1 to 2^62 - 1 bytes (a QUIC varint).
fn window(flag: &'static str, p: &mut lexopt::Parser) -> Result<u64, ArgError> {
    use lexopt::ValueExt;
    let value = p.value()?.string()?;
    match value.parse::<u64>() {
        Ok(n) if (1..1 << 62).contains(&n) => Ok(n),
        _ => Err(ArgError::BadWindow { flag, value }),
    }
}

/// Parse the arguments after the program name.
fn parse<I>(args: I) -> Result<Command, ArgError>
where
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString>,
{
    use lexopt::prelude::*;
    let mut a = Args::default();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        match arg {
            Long("protocol") => {
                let v = p.value()?.string()?;
                a.proto = Some(Proto::parse(&v).ok_or(ArgError::BadProtocol(v))?);
            }
            Long("clients") => a.clients = count("--clients", &mut p)?,
            Long("connections") => a.connections = count("--connections", &mut p)?,
            Long("cacert") => a.cacert = Some(p.value()?.string()?),
            Long("connect-to") => {
                let v = p.value()?.string()?;
                a.connect_to = Some(v.parse().map_err(|_| ArgError::BadConnectTo(v))?);
            }
            Long("quic-stack") => {
                let v = p.value()?.string()?;
                a.quic_stack = QuicStack::parse(&v).ok_or(ArgError::BadQuicStack(v))?;
            }
            Long("quic-max-data") => a.quic_max_data = Some(window("--quic-max-data", &mut p)?),
            Long("quic-max-stream-data") => {
                a.quic_max_stream_data = Some(window("--quic-max-stream-data", &mut p)?)
            }
            Long("single") => a.single = true,
            Long("bulk") => a.bulk = true,
            Long("repeat") => a.repeat = count("--repeat", &mut p)?,
            Long("repeat-view") => a.repeat_view = true,
            Long("tfo") => a.tfo = true,
            Long("schedule") => a.schedule = Some(p.value()?.string()?),
            Long("check-schedule") => return Ok(Command::CheckSchedule(p.value()?.string()?)),
            Short('o') | Long("output") => a.output = Some(p.value()?.string()?),
            Long("timeout") => {
                let v = p.value()?.string()?;
                match v.parse::<f64>() {
                    Ok(t) if t > 0.0 => a.timeout = t,
                    _ => return Err(ArgError::BadTimeout(v)),
                }
            }
            Long("start-at") => {
                let v = p.value()?.string()?;
                a.start_at = Some(v.parse::<u64>().map_err(|_| ArgError::BadStartAt(v))?);
            }
            Long("upload") => {
                let v = p.value()?.string()?;
                match v.parse::<u64>() {
                    Ok(n) if n >= 1 => a.upload = Some(n),
                    _ => return Err(ArgError::BadUpload(v)),
                }
            }
            Long("realtime") => {
                let v = p.value()?.string()?;
                a.realtime = Some(rt::Mech::parse(&v).ok_or(ArgError::BadRealtime(v))?);
            }
            Short('h') | Long("help") => return Ok(Command::Help),
            Value(v) if a.url.is_empty() => a.url = v.string()?,
            Value(v) => return Err(ArgError::SecondUrl(v.string()?)),
            other => return Err(other.unexpected().into()),
        }
    }
    if a.url.is_empty() {
        return Err(ArgError::NoUrl);
    }
    if (a.repeat > 1 || a.output.is_some()) && !(a.single || a.bulk) {
        return Err(ArgError::RepeatWithoutSingle);
    }
    if a.output.is_some() && a.clients > 1 {
        return Err(ArgError::OutputWithClients);
    }
    if a.proto.is_none() {
        return Err(ArgError::NoProtocol);
    }
    if a.upload.is_some() && !a.single {
        return Err(ArgError::UploadWithoutSingle);
    }
    let quinn_h3 = a.proto == Some(Proto::H3) && a.quic_stack == QuicStack::Quinn;
    if a.repeat_view && (quinn_h3 || a.single || a.bulk || a.realtime.is_some()) {
        return Err(ArgError::RepeatView);
    }
    if a.schedule.is_some() && (a.single || a.bulk || a.realtime.is_some()) {
        return Err(ArgError::ScheduleWithSingle);
    }
    if a.realtime.is_some() {
        if a.proto == Some(Proto::H3) {
            return Err(ArgError::RealtimeOverH3);
        }
        if a.single || a.bulk || a.upload.is_some() {
            return Err(ArgError::RealtimeWithSingle);
        }
    }
    Ok(Command::Load(Box::new(a)))
}

/// A schedule file, checked; exit 2 naming the file and the field if it is wrong.
fn read_schedule(file: &str) -> schedule::Schedule {
    let text = std::fs::read_to_string(file)
        .unwrap_or_else(|e| die(&format!("--schedule {file}: cannot read it: {e}")));
    schedule::Schedule::parse(&text).unwrap_or_else(|e| die(&format!("--schedule {file}: {e}")))
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Sleep until the wall clock reads `at` (ns): a coarse sleep, then a spin
/// over the last two milliseconds.
fn wait_until_unix_ns(at: u64) {
    let now = unix_ns();
    if at > now + 2_000_000 {
        std::thread::sleep(Duration::from_nanos(at - now - 2_000_000));
    }
    while unix_ns() < at {
        std::hint::spin_loop();
    }
}

fn main() {
    let a = match parse(std::env::args_os().skip(1)) {
        Ok(Command::Load(a)) => *a,
        Ok(Command::Help) => {
            println!("{USAGE}");
            return;
        }
        Ok(Command::CheckSchedule(file)) => {
            let s = read_schedule(&file);
            println!("{file}: {} requests", s.requests.len());
            return;
        }
        Err(e) => die(&e.to_string()),
    };
    let url = Url::parse(&a.url).unwrap_or_else(|e| die(&e.to_string()));
    let schedule = a.schedule.as_deref().map(|file| {
        let s = read_schedule(file);
        if *s.page() != url {
            die(&format!(
                "--schedule {file}: its page is {}, not the URL {url}",
                s.page()
            ));
        }
        Arc::new(s)
    });
    let proto = a.proto.expect("checked");
    if proto != Proto::H1 && !url.https {
        die(&format!(
            "{}: HTTP/2 and HTTP/3 need an https:// URL",
            a.url
        ));
    }
    let tls =
        tls::client_config(a.cacert.as_deref(), url.https).unwrap_or_else(|e| die(&e.to_string()));
    let tls = Arc::new(tls);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // A population's barrier: every client waits for the same instant of the
    // wall clock, which all the testbed's namespaces share.
    if let Some(at) = a.start_at {
        wait_until_unix_ns(at);
    }
    if let Some(mech) = a.realtime {
        return realtime(&a, mech, url, tls, &rt);
    }
    let start_unix_ns = unix_ns();
    let wall = Instant::now();
    let single = if a.single || a.bulk { a.repeat } else { 0 };
    let timeout = Duration::from_secs_f64(a.timeout);
    let results = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for client in 0..a.clients {
            let (s, u, repeat) = (
                settings(&a, proto, &tls, client, schedule.clone()),
                url.clone(),
                a.repeat_view,
            );
            set.spawn(async move {
                if !repeat {
                    return page::load(s, u, single, timeout).await;
                }
                // The first view's connections are closed when its load returns (its fetcher is
                // dropped); its TLS sessions stay in the client's cache.
                let first = page::load(s.clone(), u.clone(), single, timeout).await;
                tokio::time::sleep(REPEAT_PAUSE).await;
                let mut again = page::load(s, u, single, timeout).await;
                again.first_view = Some(Box::new(first));
                again
            });
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            out.push(r.expect("client task"));
        }
        out.sort_by_key(|r| r.client);
        out
    });
    let valid = results.iter().filter(|r| r.invalid.is_none()).count();
    let h3 = proto == Proto::H3;
    let w = a.quic_windows();
    println!(
        "{}",
        serde_json::json!({
            "tool": "satbench-load", "version": env!("CARGO_PKG_VERSION"), "url": a.url,
            "protocol": proto.wire_name(),
            "connections_per_origin": if proto == Proto::H1 { a.connections } else { 1 },
            "mode": if a.upload.is_some() { "upload" } else if a.bulk { "bulk" }
                else if a.single { "single" } else { "page" },
            "upload_bytes": a.upload,
            "schedule_requests": schedule.as_ref().map(|s| s.requests.len()),
            "clients_n": a.clients, "valid_n": valid,
            "quic_stack": h3.then_some(a.quic_stack.name()),
            "quic_max_data": h3.then_some(w.max_data),
            "quic_max_stream_data": h3.then_some(w.max_stream_data),
            "quic_fc_fixed": h3.then_some(w.fixed),
            "wall_ms": wall.elapsed().as_secs_f64() * 1e3, "cpu_ms": cpu_seconds() * 1e3,
            "start_unix_ns": start_unix_ns,
            "clients": results.iter().map(page::PageResult::to_json).collect::<Vec<_>>(),
        })
    );
}

/// The settings of client `client` of the command line.
fn settings(
    a: &Args,
    proto: Proto,
    tls: &Arc<rustls::ClientConfig>,
    client: usize,
    schedule: Option<Arc<schedule::Schedule>>,
) -> Arc<Settings> {
    // Each client its own TLS session cache (a returning client resumes its own sessions, and no
    // client takes another's tickets).
    let mut own = (**tls).clone();
    own.resumption = rustls::client::Resumption::in_memory_sessions(256);
    Arc::new(Settings {
        proto,
        connections: a.connections,
        tls: Arc::new(own),
        quic_cacert: a.cacert.clone(),
        quic_stack: a.quic_stack,
        quic_windows: a.quic_windows(),
        connect_to: a.connect_to,
        progress: a.bulk,
        output: a.output.as_ref().map(std::path::PathBuf::from),
        upload: a.upload,
        tfo: a.tfo,
        schedule,
        client,
        quic_sessions: Default::default(),
    })
}

/// `--realtime`: every client runs the URL's scenario at once; one JSON
/// object out, a client's `realtime` record and `connections` each.
fn realtime(
    a: &Args,
    mech: rt::Mech,
    url: Url,
    tls: Arc<rustls::ClientConfig>,
    runtime: &tokio::runtime::Runtime,
) {
    let q = rt::RtQuery::parse(url.path.split_once('?').map(|(_, q)| q).unwrap_or(""))
        .unwrap_or_else(|e| die(&e));
    let q = Arc::new(q);
    let proto = a.proto.expect("checked");
    let start_unix_ns = unix_ns();
    let wall = Instant::now();
    let timeout = Duration::from_secs_f64(a.timeout);
    let runs = runtime.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for client in 0..a.clients {
            let s = settings(a, proto, &tls, client, None);
            set.spawn(rt_client::run(s, url.clone(), q.clone(), mech, timeout));
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            out.push(r.expect("client task"));
        }
        out.sort_by_key(|r| r.record.client);
        out
    });
    let clients: Vec<_> = runs
        .iter()
        .map(|r| {
            let invalid = r.record.errors.first().cloned();
            serde_json::json!({
                "client": r.record.client, "valid": invalid.is_none(), "invalid_reason": invalid,
                "protocol": proto.wire_name(),
                "realtime": r.record.to_json(),
                "connections": r.connections.iter().map(session::ConnInfo::to_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    let valid = clients.iter().filter(|c| c["valid"] == true).count();
    println!(
        "{}",
        serde_json::json!({
            "tool": "satbench-load", "version": env!("CARGO_PKG_VERSION"), "url": a.url,
            "protocol": proto.wire_name(), "mode": "realtime", "mechanism": mech.name(),
            "connections_per_origin": if proto == Proto::H1 { a.connections } else { 1 },
            "clients_n": a.clients, "valid_n": valid,
            "wall_ms": wall.elapsed().as_secs_f64() * 1e3, "cpu_ms": cpu_seconds() * 1e3,
            "start_unix_ns": start_unix_ns, "clients": clients,
        })
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(args: &[&str]) -> Args {
        match parse(args.iter().copied()).unwrap() {
            Command::Load(a) => *a,
            other => panic!("not a load: {other:?}"),
        }
    }

    fn err(args: &[&str]) -> String {
        parse(args.iter().copied()).unwrap_err().to_string()
    }

    #[test]
    fn parses_options_as_before() {
        let a = load(&[
            "https://a/",
            "--protocol",
            "h3",
            "--clients",
            "4",
            "--cacert",
            "ca.pem",
        ]);
        assert_eq!(
            (a.url.as_str(), a.proto, a.clients, a.connections),
            ("https://a/", Some(Proto::H3), 4, 6)
        );
        let a = load(&[
            "http://a/",
            "--protocol",
            "h1",
            "--single",
            "--repeat",
            "3",
            "-o",
            "f",
        ]);
        assert_eq!(
            (a.single, a.repeat, a.output.as_deref(), a.timeout),
            (true, 3, Some("f"), 120.0)
        );
        assert_eq!(a.quic_stack, QuicStack::Quiche);
        assert_eq!(a.quic_windows(), QuicWindows::DEFAULT);
        let a = load(&[
            "https://a/",
            "--protocol",
            "h3",
            "--quic-stack",
            "quinn",
            "--quic-max-data",
            "1000000",
        ]);
        assert_eq!(a.quic_stack, QuicStack::Quinn);
        assert_eq!(
            a.quic_windows(),
            QuicWindows {
                max_data: 1_000_000,
                max_stream_data: 128 << 20,
                fixed: true
            }
        );
        let a = load(&["u", "--protocol", "h3", "--quic-max-stream-data", "65536"]);
        assert_eq!(a.quic_windows().max_stream_data, 65536);
        assert!(matches!(parse(["--help"]), Ok(Command::Help)));
        assert!(matches!(parse(["http://a/", "-h"]), Ok(Command::Help)));
    }

    #[test]
    fn messages_as_before() {
        assert_eq!(err(&[]), "no URL");
        assert_eq!(err(&["--bogus"]), "unknown option --bogus");
        assert_eq!(err(&["http://a/"]), "--protocol is required (h1, h2 or h3)");
        assert_eq!(
            err(&["http://a/", "http://b/"]),
            "one URL only (also got \"http://b/\")"
        );
        assert_eq!(
            err(&["u", "--protocol", "h4"]),
            "--protocol: h1, h2 or h3, not \"h4\""
        );
        assert_eq!(
            err(&["u", "--protocol", "h1", "--clients", "0"]),
            "--clients: must be a whole number >= 1, got \"0\""
        );
        assert_eq!(
            err(&["u", "--protocol", "h1", "--timeout", "-1"]),
            "--timeout: seconds > 0, not \"-1\""
        );
        assert_eq!(
            err(&["u", "--protocol", "h1", "--repeat", "2"]),
            "--repeat and -o need --single or --bulk"
        );
        assert_eq!(err(&["u", "--protocol"]), "--protocol needs a value");
        assert_eq!(
            err(&["u", "--protocol", "h2", "--upload", "0"]),
            "--upload: bytes >= 1, not \"0\""
        );
        assert_eq!(
            err(&["u", "--protocol", "h2", "--upload", "5"]),
            "--upload needs --single"
        );
        assert_eq!(
            err(&["u", "--protocol", "h2", "--realtime", "smoke"]),
            "--realtime: poll, sse or ws, not \"smoke\""
        );
        assert_eq!(
            err(&["u", "--protocol", "h3", "--realtime", "ws"]),
            "--realtime runs over h1 or h2 (over HTTP/3 the server has WebTransport only, which the loader does not speak)"
        );
        assert_eq!(
            err(&["u", "--protocol", "h2", "--realtime", "ws", "--single"]),
            "--realtime runs a scenario, not --single, --bulk or --upload"
        );
        assert_eq!(
            load(&["u", "--protocol", "h1", "--realtime", "sse"]).realtime,
            Some(rt::Mech::Sse)
        );
        for bad in [
            &[
                "u",
                "--protocol",
                "h3",
                "--quic-stack",
                "quinn",
                "--repeat-view",
            ][..],
            &["u", "--protocol", "h2", "--repeat-view", "--single"],
        ] {
            assert!(
                err(bad).starts_with("--repeat-view loads pages over h1, h2 or h3 with quiche"),
                "{bad:?}"
            );
        }
        let a = load(&["u", "--protocol", "h2", "--repeat-view", "--tfo"]);
        assert!(a.repeat_view && a.tfo);
        assert_eq!(
            load(&["u", "--protocol", "h1", "--schedule", "s.json"]).schedule,
            Some("s.json".into())
        );
        assert_eq!(
            err(&["u", "--protocol", "h2", "--schedule", "s.json", "--single"]),
            "--schedule replays a page's requests: not with --single, --bulk or --realtime"
        );
        assert!(matches!(
            parse(["--check-schedule", "s.json"]),
            Ok(Command::CheckSchedule(f)) if f == "s.json"
        ));
        let a = load(&["u", "--protocol", "h3", "--single", "--upload", "1000000"]);
        assert_eq!(a.upload, Some(1_000_000));
        assert_eq!(
            err(&["u", "--protocol", "h3", "--quic-stack", "msquic"]),
            "--quic-stack: quiche or quinn, not \"msquic\""
        );
        for v in ["0", "-1", "x", "4611686018427387904"] {
            assert_eq!(
                err(&["u", "--protocol", "h3", "--quic-max-data", v]),
                format!("--quic-max-data: bytes from 1 to 4611686018427387903, not {v:?}")
            );
        }
        assert_eq!(
            err(&["u", "--protocol", "h3", "--quic-max-stream-data"]),
            "--quic-max-stream-data needs a value"
        );
        assert_eq!(
            err(&["u", "--protocol", "h1", "--connect-to", "x"]),
            "--connect-to: ADDR:PORT, not \"x\""
        );
        assert_eq!(
            err(&[
                "u",
                "--protocol",
                "h1",
                "-o",
                "f",
                "--clients",
                "2",
                "--single"
            ]),
            "-o writes one body: it needs --clients 1"
        );
    }
}
