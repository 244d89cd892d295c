//! satbench-server: one directory over HTTP/1.1, HTTP/2 and HTTP/3.
//!
//! ```text
//! satbench-server --root DIR [--cert PEM --key PEM] [--cc cubic|bbr|reno]
//!     [--bind ADDR] [--http-port 80] [--https-port 443] [--no-h3]
//!     [--access-log FILE] [--tcp-info FILE] [--qlog-dir DIR]
//!     [--tfo] [--no-resumption] [--no-0rtt] [--sndbuf BYTES] [--rcvbuf BYTES]
//!     [--quic-initcwnd PACKETS] [--idle-timeout-s S] [--no-pacing]
//! ```
//! - port 80: HTTP/1.1 in cleartext;
//! - port 443/TCP: TLS 1.3 with ALPN h2 and http/1.1, advertising HTTP/3 (Alt-Svc);
//! - port 443/UDP: HTTP/3 over QUIC (quiche), paced.
//!
//! Congestion control: for TCP, TCP_CONGESTION on the listening sockets (and
//! checked on every accepted one: it is in the access log); for QUIC, quiche's
//! own (cubic, reno, or BBRv2 for `bbr`; the kernel's `bbr` is BBRv1).
//! Keys go to $SSLKEYLOGFILE when it is set. Prints one JSON line when ready;
//! exits 0 on SIGTERM or SIGINT; configuration errors exit 2.

mod files;
mod log;
mod quic;
mod tcp;
mod tcpinfo;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
    pub qlog_dir: Option<String>,
    pub tfo: bool,
    pub resumption: bool,
    pub zero_rtt: bool,
    pub sndbuf: Option<u32>,
    pub rcvbuf: Option<u32>,
    pub quic_initcwnd: Option<usize>,
    pub idle_timeout_s: u64,
    pub pacing: bool,
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
            bind: "0.0.0.0".into(),
            http_port: 80,
            https_port: 443,
            h3: true,
            alt_svc: true,
            access_log: None,
            tcp_info: None,
            qlog_dir: None,
            tfo: false,
            resumption: true,
            zero_rtt: true,
            sndbuf: None,
            rcvbuf: None,
            quic_initcwnd: None,
            idle_timeout_s: 30,
            pacing: true,
        }
    }
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
    /// No `--root`.
    #[error("--root is required")]
    NoRoot,
    /// Only one of `--cert` and `--key`.
    #[error("--cert and --key go together")]
    CertWithoutKey,
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
            Long("http-port") => o.http_port = num("--http-port", &mut p)?,
            Long("https-port") => o.https_port = num("--https-port", &mut p)?,
            Long("no-h3") => {
                o.h3 = false;
                o.alt_svc = false;
            }
            Long("access-log") => o.access_log = Some(p.value()?.string()?),
            Long("tcp-info") => o.tcp_info = Some(p.value()?.string()?),
            Long("qlog-dir") => o.qlog_dir = Some(p.value()?.string()?),
            Long("tfo") => o.tfo = true,
            Long("no-resumption") => o.resumption = false,
            Long("no-0rtt") => o.zero_rtt = false,
            Long("no-pacing") => o.pacing = false,
            Long("sndbuf") => o.sndbuf = Some(num("--sndbuf", &mut p)?),
            Long("rcvbuf") => o.rcvbuf = Some(num("--rcvbuf", &mut p)?),
            Long("quic-initcwnd") => o.quic_initcwnd = Some(num("--quic-initcwnd", &mut p)?),
            Long("idle-timeout-s") => o.idle_timeout_s = num("--idle-timeout-s", &mut p)?,
            other => return Err(other.unexpected().into()),
        }
    }
    if o.root.is_empty() {
        return Err(ArgError::NoRoot);
    }
    if o.cert.is_some() != o.key.is_some() {
        return Err(ArgError::CertWithoutKey);
    }
    if o.cert.is_none() {
        o.h3 = false;
        o.alt_svc = false;
    }
    Ok(o)
}

fn main() {
    let opts = parse(std::env::args_os().skip(1)).unwrap_or_else(|e| usage(&e.to_string()));
    let root = files::Root::new(std::path::Path::new(&opts.root))
        .unwrap_or_else(|e| usage(&format!("--root {}: {e}", opts.root)));
    let open = |p: &Option<String>, flag: &str| {
        log::JsonLines::create(p.as_deref()).unwrap_or_else(|e| usage(&format!("{flag}: {e}")))
    };
    let access = open(&opts.access_log, "--access-log");
    let tcp_info = open(&opts.tcp_info, "--tcp-info");
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
    let quic = if opts.h3 {
        let s = quic::Server::new(
            &opts,
            Arc::new(files::Root::new(root.path()).expect("root")),
            access.clone(),
        )
        .unwrap_or_else(|e| usage(&e.to_string()));
        let st = stop.clone();
        Some(
            std::thread::Builder::new()
                .name("quic".into())
                .spawn(move || s.run(st))
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
                "http_port": opts.http_port, "https_port": opts.https_port, "h3": opts.h3,
                "tcp_cc": cc_in_effect,
                "quic_cc": opts.h3.then(|| quic::cc_family(opts.cc.as_deref().unwrap_or("cubic"))),
                "quic_cc_impl": opts.h3.then(|| quic::quic_cc_impl(opts.cc.as_deref().unwrap_or("cubic"))),
                "version": env!("CARGO_PKG_VERSION"),
            })
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
