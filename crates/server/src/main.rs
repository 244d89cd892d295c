//! satbench-server: one directory over HTTP/1.1, HTTP/2 and HTTP/3.
//!
//! ```text
//! satbench-server --root DIR [--cert PEM --key PEM] [--cc cubic|bbr|reno]
//!     [--bind ADDR] [--http-port 80] [--https-port 443] [--no-h3] [--no-h2]
//!     [--access-log FILE] [--tcp-info FILE] [--quic-info FILE] [--qlog-dir DIR]
//!     [--tfo] [--no-nodelay] [--no-resumption] [--no-0rtt] [--sndbuf BYTES] [--rcvbuf BYTES]
//!     [--quic-stack quiche|quinn] [--quic-initcwnd PACKETS] [--no-pacing]
//!     [--quic-max-data BYTES] [--quic-max-stream-data BYTES] [--idle-timeout-s S]
//!     [--max-tcp-conns N] [--max-quic-conns N] [--header-read-timeout-s S] [--webtransport]
//!     [--replay MANIFEST [--replay-think] [--replay-deterministic]] [--cache-max-age S]
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

use satbench_server::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn usage(msg: &str) -> ! {
    eprintln!("satbench-server: {msg}");
    std::process::exit(2);
}

/// Bind one HTTP/3 stack now (a bad setting ends the server before it is
/// ready) and hand back what serves until `stop`.
fn start<S: h3stack::H3Stack>(
    serving: h3stack::Serving,
    stop: Arc<AtomicBool>,
) -> Box<dyn FnOnce() + Send> {
    let s = S::bind(serving).unwrap_or_else(|e| usage(&e.to_string()));
    Box::new(move || s.run(stop))
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
            "quic_max_streams_bidi": h3stack::QUIC_MAX_STREAMS_BIDI,
            "quic_max_streams_uni": h3stack::QUIC_MAX_STREAMS_UNI,
            "h3_max_field_section_bytes": h3stack::H3_MAX_FIELD_SECTION_BYTES,
            "quic_min_initial_datagram": h3stack::MIN_INITIAL_DATAGRAM,
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
    let dir = files::Root::new(std::path::Path::new(&opts.root))
        .unwrap_or_else(|e| usage(&format!("--root {}: {e}", opts.root)));
    let archive = opts.replay.as_ref().map(|f| {
        replay::Archive::load(std::path::Path::new(f))
            .unwrap_or_else(|e| usage(&format!("--replay {e}")))
    });
    // One site for every protocol.
    let root = Arc::new(
        files::Site::new(dir, archive, opts.replay_think)
            .with_deterministic(opts.replay_deterministic)
            .with_max_age(opts.cache_max_age),
    );
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
        let mut cfg = tcp::tls_config(c, opts.key.as_deref().expect("checked"), opts.resumption)
            .unwrap_or_else(|e| usage(&e.to_string()));
        if !opts.h2 {
            cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        }
        tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
    });
    let bind = |port: u16| -> std::net::TcpListener {
        let addr = std::net::SocketAddr::new(opts.bind, port);
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
        let files = root.clone();
        let st = stop.clone();
        let serving = h3stack::Serving {
            opts: opts.clone(),
            root: files,
            access: access.clone(),
            quic_info: quic_info.clone(),
            realtime: realtime.clone(),
        };
        let run = match opts.quic_stack {
            QuicStack::Quiche => start::<quic::Server>(serving, st),
            QuicStack::Quinn => start::<quic_quinn::Server>(serving, st),
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
    let shared = Arc::new(http::Shared {
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
                    "origins": a.origins().iter().map(|(s, h, p)| format!("{s}://{h}:{p}")).collect::<Vec<_>>(),
                    "entries": a.len(), "think": opts.replay_think,
                    "deterministic": opts.replay_deterministic})),
                "http_port": opts.http_port, "https_port": opts.https_port, "h3": opts.h3,
                "tcp_cc": cc_in_effect,
                "quic_cc": opts.h3.then(|| h3stack::cc_family(opts.cc_name())),
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
        assert_eq!(o.bind.to_string(), "127.0.0.1");
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
            (o.quic_info.as_deref(), o.initcwnd(), o.bind.to_string()),
            (Some("q.jsonl"), 32, "0.0.0.0".to_string())
        );
        // IPv6, and both families on one socket each.
        assert_eq!(
            parse(["--root", "/", "--bind", "::"])
                .unwrap()
                .bind
                .to_string(),
            "::"
        );
        assert_eq!(
            err(&["--root", "/", "--bind", "server.test"]),
            "--bind: not an IPv4 or IPv6 address: \"server.test\""
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
