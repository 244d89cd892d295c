//! satbench-load: a synthetic page loader for many clients at once.
//!
//! ```text
//! satbench-load URL --protocol h1|h2|h3 [--clients C] [--connections K] [--cacert PEM]
//!               [--connect-to ADDR:PORT] [--single | --bulk] [--repeat N] [-o FILE] [--timeout S]
//! ```
//! Each of the C clients loads the page on its own fresh connections, all at
//! once, in one thread: HTTP/1.1 on up to K connections per origin (default
//! 6), HTTP/2 and HTTP/3 on one connection per origin. `--single` fetches
//! only URL (curl-style timing); `--bulk` too, printing progress on stderr;
//! `--repeat N` fetches it N times, one after another, on the same connection;
//! `-o FILE` writes the (first) body to FILE.
//! Prints one JSON object on stdout: `{"clients": [...], "cpu_s", "wall_s", ...}`;
//! see `page::PageResult::to_json` for a client's fields.

mod conn;
mod discover;
mod h3;
mod page;
mod url;

use conn::{Proto, Settings};
use std::sync::Arc;
use std::time::{Duration, Instant};
use url::Url;

fn die(msg: &str) -> ! {
    eprintln!("satbench-load: {msg}");
    std::process::exit(2);
}

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
}

fn parse() -> Args {
    let mut a = Args {
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
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| die(&format!("{x} needs a value")))
        };
        let count = |v: String, what: &str| -> usize {
            v.parse()
                .ok()
                .filter(|n| *n >= 1)
                .unwrap_or_else(|| die(&format!("{what}: must be a whole number >= 1, got {v:?}")))
        };
        match x.as_str() {
            "--protocol" => {
                let v = val();
                a.proto = Some(
                    Proto::parse(&v)
                        .unwrap_or_else(|| die(&format!("--protocol: h1, h2 or h3, not {v:?}"))),
                )
            }
            "--clients" => a.clients = count(val(), "--clients"),
            "--connections" => a.connections = count(val(), "--connections"),
            "--cacert" => a.cacert = Some(val()),
            "--connect-to" => {
                let v = val();
                a.connect_to = Some(
                    v.parse()
                        .unwrap_or_else(|_| die(&format!("--connect-to: ADDR:PORT, not {v:?}"))),
                )
            }
            "--single" => a.single = true,
            "--bulk" => a.bulk = true,
            "--repeat" => a.repeat = count(val(), "--repeat"),
            "-o" | "--output" => a.output = Some(val()),
            "--timeout" => {
                let v = val();
                a.timeout = v
                    .parse()
                    .ok()
                    .filter(|t: &f64| *t > 0.0)
                    .unwrap_or_else(|| die(&format!("--timeout: seconds > 0, not {v:?}")))
            }
            "-h" | "--help" => {
                println!(
                    "usage: satbench-load URL --protocol h1|h2|h3 [--clients C] [--connections K] \
                     [--cacert PEM] [--connect-to ADDR:PORT] [--single|--bulk [--repeat N] \
                     [-o FILE]] [--timeout S]"
                );
                std::process::exit(0);
            }
            s if s.starts_with('-') => die(&format!("unknown option {s}")),
            s if a.url.is_empty() => a.url = s.to_string(),
            s => die(&format!("one URL only (also got {s:?})")),
        }
    }
    if a.url.is_empty() {
        die("no URL");
    }
    if (a.repeat > 1 || a.output.is_some()) && !(a.single || a.bulk) {
        die("--repeat and -o need --single or --bulk");
    }
    if a.output.is_some() && a.clients > 1 {
        die("-o writes one body: it needs --clients 1");
    }
    if a.proto.is_none() {
        die("--protocol is required (h1, h2 or h3)");
    }
    a
}

/// The TLS client configuration: the roots of `cacert`, or none for a
/// cleartext URL (a page may still name an https:// object, which then fails
/// verification and makes the load invalid).
fn tls_config(cacert: Option<&str>, https: bool) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    match cacert {
        Some(p) => {
            let pem = std::fs::read(p).unwrap_or_else(|e| die(&format!("--cacert {p}: {e}")));
            for c in rustls_pemfile::certs(&mut pem.as_slice()) {
                let c = c.unwrap_or_else(|e| die(&format!("--cacert {p}: {e}")));
                roots
                    .add(c)
                    .unwrap_or_else(|e| die(&format!("--cacert {p}: {e}")));
            }
            if roots.is_empty() {
                die(&format!("--cacert {p}: no certificate in it"));
            }
        }
        None if https => die("--cacert is required for https:// URLs (the test CA: satbench ca)"),
        None => {}
    }
    rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth()
}

fn cpu_seconds() -> f64 {
    // SAFETY: getrusage fills the struct.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() {
    let a = parse();
    let url = Url::parse(&a.url).unwrap_or_else(|e| die(&e.to_string()));
    let proto = a.proto.expect("checked");
    if proto != Proto::H1 && !url.https {
        die(&format!(
            "{}: HTTP/2 and HTTP/3 need an https:// URL",
            a.url
        ));
    }
    let tls = Arc::new(tls_config(a.cacert.as_deref(), url.https));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let wall = Instant::now();
    let single = if a.single || a.bulk { a.repeat } else { 0 };
    let timeout = Duration::from_secs_f64(a.timeout);
    let results = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for client in 0..a.clients {
            let settings = Arc::new(Settings {
                proto,
                connections: a.connections,
                tls: tls.clone(),
                quic_cacert: a.cacert.clone(),
                connect_to: a.connect_to,
                progress: a.bulk,
                output: a.output.as_ref().map(std::path::PathBuf::from),
                client,
            });
            set.spawn(page::load(settings, url.clone(), single, timeout));
        }
        let mut out = Vec::new();
        while let Some(r) = set.join_next().await {
            out.push(r.expect("client task"));
        }
        out.sort_by_key(|r| r.client);
        out
    });
    let valid = results.iter().filter(|r| r.invalid.is_none()).count();
    println!(
        "{}",
        serde_json::json!({
            "tool": "satbench-load", "version": env!("CARGO_PKG_VERSION"), "url": a.url,
            "protocol": proto.wire_name(),
            "connections_per_origin": if proto == Proto::H1 { a.connections } else { 1 },
            "mode": if a.bulk { "bulk" } else if a.single { "single" } else { "page" },
            "clients_n": a.clients, "valid_n": valid,
            "wall_s": wall.elapsed().as_secs_f64(), "cpu_s": cpu_seconds(),
            "clients": results.iter().map(page::PageResult::to_json).collect::<Vec<_>>(),
        })
    );
}
