//! The server binary's command line: refusals exit 2 with one line, and the
//! ready line reports the QUIC settings in effect. Loopback only, bounded.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_satbench-server");

fn certs() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/certs")
}

/// Start the server with `cmd` and read its ready line (empty if it exited instead).
fn start(cmd: &mut Command) -> (std::process::Child, String) {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    (child, line)
}

/// A port free for both TCP and UDP on 127.0.0.1 (at the time of asking).
fn free_port() -> u16 {
    loop {
        let u = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let port = u.local_addr().unwrap().port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

#[test]
fn refusals_exit_2_with_one_line() {
    for (args, msg) in [
        (
            vec!["--quic-stack", "quinn", "--no-pacing"],
            "satbench-server: --no-pacing: quinn always paces (quinn-proto has no switch for its pacer)\n",
        ),
        (
            vec!["--quic-stack", "lsquic"],
            "satbench-server: --quic-stack: must be quiche or quinn, got \"lsquic\"\n",
        ),
        (
            vec!["--quic-max-data", "0"],
            "satbench-server: --quic-max-data: must be 1 to 4611686018427387903 bytes, got 0\n",
        ),
    ] {
        let out = Command::new(BIN)
            .args(["--root", "/"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(String::from_utf8_lossy(&out.stderr), msg);
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn ready_line_reports_the_quic_settings() {
    for stack in ["quiche", "quinn"] {
        let port = free_port().to_string();
        let c = certs();
        let mut cmd = Command::new(BIN);
        cmd.args(["--root", env!("CARGO_MANIFEST_DIR"), "--http-port", "0"])
            .args(["--https-port", &port, "--quic-stack", stack])
            .args(["--quic-max-data", "3000000", "--quic-initcwnd", "20"])
            .arg("--cert")
            .arg(c.join("cert.pem"))
            .arg("--key")
            .arg(c.join("key.pem"));
        let (mut child, line) = start(&mut cmd);
        child.kill().unwrap();
        child.wait().unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["ready"], true, "{line}");
        assert_eq!(v["quic_stack"], stack);
        assert_eq!(v["quic_max_data"], 3_000_000);
        assert_eq!(v["quic_max_stream_data"], 8 << 20);
        assert_eq!(v["quic_initcwnd_packets"], 20);
        let l = &v["limits"];
        assert_eq!(
            (l["max_tcp_conns"].as_u64(), l["max_quic_conns"].as_u64()),
            (Some(1000), Some(1000))
        );
        assert_eq!(l["header_read_timeout_s"], 30);
        assert_eq!(l["h2_max_concurrent_streams"], 256);
        assert_eq!(l["h2_max_pending_accept_reset_streams"], 20);
        assert_eq!(l["quic_min_initial_datagram"], 1200);
        assert_eq!(l["quinn_incoming_buffer_bytes"].is_u64(), stack == "quinn");
        assert_eq!(v["quic_fc_window_cap"]["conn"], 3_000_000);
        assert_eq!(v["quic_pacing"], true);
        let cc_impl = v["quic_cc_impl"].as_str().unwrap();
        assert!(cc_impl.starts_with(stack), "{cc_impl}");
    }
}

/// The access log's records as the orchestrator reads them: a real
/// HTTP/1.1 request to the binary on loopback, its request and connection
/// records with what changes from run to run (times, ports, ids) made
/// fixed, written to `tests/fixtures/golden/server-access.jsonl` (with
/// `SATBENCH_BLESS=1`) and compared with it otherwise. The Python side
/// (`tests/unit/test_contracts.py`) summarises that file: a field renamed
/// here fails a test there.
#[test]
fn golden_access_log_records() {
    use std::io::{Read, Write};
    let dir = std::env::temp_dir().join(format!("satbench-golden-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/index.html"), "<p>golden</p>\n").unwrap();
    let port = free_port();
    let log = dir.join("access.jsonl");
    let mut cmd = Command::new(BIN);
    cmd.arg("--root")
        .arg(dir.join("www"))
        .args([
            "--http-port",
            &port.to_string(),
            "--https-port",
            "1",
            "--cc",
            "cubic",
        ])
        .arg("--access-log")
        .arg(&log);
    let (mut child, line) = start(&mut cmd);
    assert!(line.contains("\"ready\":true"), "{line}");
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET /index.html HTTP/1.1\r\nHost: server.test\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // SIGTERM: the server writes the records of the connections still open, then exits.
    // SAFETY: kill(2) with our child's pid and a valid signal.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap();
    let fixed: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            for (k, x) in v.as_object_mut().unwrap().iter_mut() {
                if k.starts_with("t_") || k == "peer" || k == "limited_ms" {
                    *x = match x {
                        serde_json::Value::Object(_) => serde_json::json!({"fixed": 0}),
                        serde_json::Value::String(_) => "fixed".into(),
                        _ => 0.into(),
                    };
                }
            }
            serde_json::to_string(&sorted(v)).unwrap()
        })
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let text = fixed.join("\n") + "\n";
    let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/golden/server-access.jsonl");
    if std::env::var_os("SATBENCH_BLESS").is_some() {
        std::fs::write(&golden, &text).unwrap();
    }
    assert_eq!(
        std::fs::read_to_string(&golden).unwrap_or_default(),
        text,
        "{} is stale: SATBENCH_BLESS=1 cargo test -p satbench-server --test cli",
        golden.display()
    );
}

/// Keys in order, so the fixture is stable.
fn sorted(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => {
            let mut b: std::collections::BTreeMap<String, serde_json::Value> = Default::default();
            for (k, x) in m {
                b.insert(k, sorted(x));
            }
            serde_json::to_value(b).unwrap()
        }
        other => other,
    }
}

/// `--bind ::` serves both families: one request over IPv6 loopback and one
/// over IPv4 loopback reach the same listener, and the access log names
/// each peer as it came (IPv4 as `::ffff:127.0.0.1`); the QUIC socket binds
/// the same way (the server is ready only once both listen).
#[test]
fn bound_to_both_families_it_answers_each() {
    use std::io::{Read, Write};
    let dir = std::env::temp_dir().join(format!("satbench-dual-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("www")).unwrap();
    std::fs::write(dir.join("www/index.html"), "<p>both</p>\n").unwrap();
    let (http, https) = (free_port(), free_port());
    let log = dir.join("access.jsonl");
    let mut cmd = Command::new(BIN);
    cmd.arg("--root")
        .arg(dir.join("www"))
        .args(["--bind", "::", "--http-port", &http.to_string()])
        .args(["--https-port", &https.to_string()])
        .arg("--cert")
        .arg(certs().join("cert.pem"))
        .arg("--key")
        .arg(certs().join("key.pem"))
        .arg("--access-log")
        .arg(&log);
    let (mut child, line) = start(&mut cmd);
    assert!(line.contains("\"ready\":true"), "{line}");
    for host in ["::1", "127.0.0.1"] {
        let addr: std::net::IpAddr = host.parse().unwrap();
        let mut s = std::net::TcpStream::connect((addr, http)).unwrap();
        s.write_all(b"GET /index.html HTTP/1.1\r\nHost: server.test\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{host}: {answer}");
    }
    // SAFETY: kill(2) with our child's pid and a valid signal.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap();
    let peers: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "connection")
        .map(|v| v["peer"].as_str().unwrap().to_string())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(peers.len(), 2, "{peers:?}");
    assert!(peers.iter().any(|p| p.starts_with("[::1]:")), "{peers:?}");
    assert!(
        peers.iter().any(|p| p.starts_with("[::ffff:127.0.0.1]:")),
        "{peers:?}"
    );
}
