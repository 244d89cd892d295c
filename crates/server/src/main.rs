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

fn parse() -> Options {
    let mut o = Options {
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
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .unwrap_or_else(|| usage(&format!("{a} needs a value")))
        };
        fn num<T: std::str::FromStr>(flag: &str, v: String) -> T {
            v.parse()
                .unwrap_or_else(|_| usage(&format!("{flag}: not a valid number: {v:?}")))
        }
        match a.as_str() {
            "--root" => o.root = val(),
            "--cert" => o.cert = Some(val()),
            "--key" => o.key = Some(val()),
            "--cc" => {
                let v = val();
                if !["cubic", "bbr", "reno"].contains(&v.as_str()) {
                    usage(&format!("--cc: must be cubic, bbr or reno, got {v:?}"));
                }
                o.cc = Some(v);
            }
            "--bind" => o.bind = val(),
            "--http-port" => o.http_port = num("--http-port", val()),
            "--https-port" => o.https_port = num("--https-port", val()),
            "--no-h3" => {
                o.h3 = false;
                o.alt_svc = false;
            }
            "--access-log" => o.access_log = Some(val()),
            "--tcp-info" => o.tcp_info = Some(val()),
            "--qlog-dir" => o.qlog_dir = Some(val()),
            "--tfo" => o.tfo = true,
            "--no-resumption" => o.resumption = false,
            "--no-0rtt" => o.zero_rtt = false,
            "--no-pacing" => o.pacing = false,
            "--sndbuf" => o.sndbuf = Some(num("--sndbuf", val())),
            "--rcvbuf" => o.rcvbuf = Some(num("--rcvbuf", val())),
            "--quic-initcwnd" => o.quic_initcwnd = Some(num("--quic-initcwnd", val())),
            "--idle-timeout-s" => o.idle_timeout_s = num("--idle-timeout-s", val()),
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    if o.root.is_empty() {
        usage("--root is required");
    }
    if o.cert.is_some() != o.key.is_some() {
        usage("--cert and --key go together");
    }
    if o.cert.is_none() {
        o.h3 = false;
        o.alt_svc = false;
    }
    o
}

fn main() {
    let opts = parse();
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
            .unwrap_or_else(|e| usage(&e));
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
        .unwrap_or_else(|e| usage(&e));
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
                "quic_cc": opts.h3.then(|| quic::quiche_cc(opts.cc.as_deref().unwrap_or("cubic"))),
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
