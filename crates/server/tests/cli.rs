//! The server binary's command line: refusals exit 2 with one line, and the
//! ready line reports the QUIC settings in effect. Loopback only, bounded.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

const BIN: &str = env!("CARGO_BIN_EXE_satbench-server");

fn certs() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/certs")
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
        let mut child = Command::new(BIN)
            .args(["--root", env!("CARGO_MANIFEST_DIR"), "--http-port", "0"])
            .args(["--https-port", &port, "--quic-stack", stack])
            .args(["--quic-max-data", "3000000", "--quic-initcwnd", "20"])
            .arg("--cert")
            .arg(c.join("cert.pem"))
            .arg("--key")
            .arg(c.join("key.pem"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The server prints its ready line or exits (then the line is empty).
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
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
