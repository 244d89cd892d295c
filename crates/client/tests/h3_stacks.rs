//! Every server QUIC stack with every loader QUIC stack: the loader fetches
//! a file over HTTP/3 from `satbench-server` on 127.0.0.1 and the bytes
//! match; the server's access log and `--quic-info` carry the stack and
//! what limited the sender. Uses the built binaries (`satbench-server` next
//! to `satbench-load`: build the workspace, or test both packages at once)
//! and the test-only CA and certificate of crates/server/tests/certs.
//! Loopback only; every step is bounded in time.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const LOADER: &str = env!("CARGO_BIN_EXE_satbench-load");

/// The classes of what limited a sender, as their owner, the server, lists them.
fn limited_by_classes() -> Vec<String> {
    let out = Command::new(server_bin())
        .arg("--describe")
        .output()
        .expect("satbench-server --describe");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("describe JSON");
    v["limited_by"]
        .as_array()
        .expect("limited_by")
        .iter()
        .map(|c| c.as_str().expect("class").to_string())
        .collect()
}

fn server_bin() -> PathBuf {
    let p = Path::new(LOADER).with_file_name("satbench-server");
    assert!(
        p.exists(),
        "{} is missing: build the workspace first",
        p.display()
    );
    p
}

fn certs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/tests/certs")
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

/// A fresh directory, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("satbench-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Dir(p)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Deterministic bytes that no compression or chunking could fake.
fn content(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

struct Server {
    child: Child,
    port: u16,
}

impl Server {
    fn start(root: &Path, logs: &Path, stack: &str) -> Server {
        let port = free_port();
        let c = certs();
        let mut child = Command::new(server_bin())
            .arg("--root")
            .arg(root)
            .args(["--http-port", "0", "--https-port", &port.to_string()])
            .args(["--quic-stack", stack])
            .arg("--cert")
            .arg(c.join("cert.pem"))
            .arg("--key")
            .arg(c.join("key.pem"))
            .arg("--access-log")
            .arg(logs.join("access.jsonl"))
            .arg("--quic-info")
            .arg(logs.join("quic_info.jsonl"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("\"ready\":true"), "{line}");
        Server { child, port }
    }

    /// SIGTERM, so that open connections are logged; then wait.
    fn stop(mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        for _ in 0..100 {
            if self.child.try_wait().unwrap().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        panic!("the server did not stop within 5 s of SIGTERM");
    }
}

fn lines(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn every_server_stack_with_every_loader_stack() {
    let dir = Dir::new("h3-stacks");
    let root = dir.0.join("www");
    std::fs::create_dir_all(&root).unwrap();
    let body = content(700_000);
    std::fs::write(root.join("file.bin"), &body).unwrap();
    for server_stack in ["quiche", "quinn"] {
        let logs = dir.0.join(format!("logs-{server_stack}"));
        std::fs::create_dir_all(&logs).unwrap();
        let server = Server::start(&root, &logs, server_stack);
        for client_stack in ["quiche", "quinn"] {
            let out_file = dir.0.join(format!("{server_stack}-{client_stack}.bin"));
            let url = format!("https://localhost:{}/file.bin", server.port);
            let out = Command::new(LOADER)
                .args([
                    url.as_str(),
                    "--protocol",
                    "h3",
                    "--single",
                    "--timeout",
                    "20",
                ])
                .args(["--quic-stack", client_stack])
                .arg("--cacert")
                .arg(certs().join("ca.pem"))
                .args(["--connect-to", &format!("127.0.0.1:{}", server.port)])
                .arg("-o")
                .arg(&out_file)
                .output()
                .unwrap();
            let what = format!("server {server_stack}, loader {client_stack}");
            assert!(out.status.success(), "{what}: {out:?}");
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v["quic_stack"], client_stack, "{what}");
            assert_eq!(v["protocol"], "h3");
            let c = &v["clients"][0];
            assert_eq!(c["valid"], true, "{what}: {c}");
            assert_eq!(c["objects"][0]["protocol"], "h3", "{what}");
            assert_eq!(c["objects"][0]["status"], 200, "{what}");
            assert_eq!(c["objects"][0]["bytes"], body.len(), "{what}");
            assert_eq!(c["connections"][0]["protocol"], "h3", "{what}");
            assert!(
                std::fs::read(&out_file).unwrap() == body,
                "{what}: bytes differ"
            );
        }
        // The same refusals as over TCP: 404, and 403 outside the root.
        for (path, status) in [("/missing.bin", 404), ("/%2e%2e/etc/passwd", 403)] {
            let url = format!("https://localhost:{}{path}", server.port);
            let out = Command::new(LOADER)
                .args([
                    url.as_str(),
                    "--protocol",
                    "h3",
                    "--single",
                    "--timeout",
                    "20",
                ])
                .arg("--cacert")
                .arg(certs().join("ca.pem"))
                .args(["--connect-to", &format!("127.0.0.1:{}", server.port)])
                .output()
                .unwrap();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let o = &v["clients"][0]["objects"][0];
            assert_eq!(o["status"], status, "server {server_stack}: {v}");
            assert_eq!(o["protocol"], "h3");
        }
        server.stop();
        let access = lines(&logs.join("access.jsonl"));
        let requests: Vec<_> = access.iter().filter(|r| r["type"] == "request").collect();
        let conns: Vec<_> = access
            .iter()
            .filter(|r| r["type"] == "connection")
            .collect();
        assert_eq!((requests.len(), conns.len()), (4, 4), "{access:?}");
        let statuses: Vec<_> = requests.iter().map(|r| r["status"].clone()).collect();
        assert_eq!(statuses, [200, 200, 404, 403], "server {server_stack}");
        for r in &requests {
            assert_eq!(r["quic_stack"], server_stack);
            assert_eq!(r["proto"], "h3");
        }
        for r in &requests[..2] {
            assert_eq!(r["body_bytes"], body.len());
        }
        let classes = limited_by_classes();
        for c in &conns {
            assert_eq!(c["quic_stack"], server_stack);
            assert_eq!(c["alpn"], "h3");
            let l = &c["limited_ms"];
            let total: f64 = classes.iter().map(|k| l[k].as_f64().unwrap()).sum();
            assert!(total > 0.0, "{c}");
        }
        let info = lines(&logs.join("quic_info.jsonl"));
        assert!(info.iter().any(|s| s["at_close"] == true), "{info:?}");
        for s in &info {
            assert_eq!(s["quic_stack"], server_stack);
            let class = s["limited_by"].as_str().unwrap();
            assert!(classes.iter().any(|c| c == class), "{s}");
        }
    }
}

/// Uploads: the loader POSTs incompressible bytes to the sink over HTTP/1.1,
/// HTTP/2 and HTTP/3 (both loader stacks) of both server QUIC stacks; the
/// server counts every byte and answers with the count; nothing else is
/// taken as an upload.
#[test]
fn uploads_reach_the_sink_over_every_protocol() {
    const N: usize = 3_000_001;
    let dir = Dir::new("upload");
    let root = dir.0.join("www");
    std::fs::create_dir_all(&root).unwrap();
    for server_stack in ["quiche", "quinn"] {
        let logs = dir.0.join(format!("logs-{server_stack}"));
        std::fs::create_dir_all(&logs).unwrap();
        let server = Server::start(&root, &logs, server_stack);
        let runs = [
            ("h1", "quiche"),
            ("h2", "quiche"),
            ("h3", "quiche"),
            ("h3", "quinn"),
        ];
        for (proto, client_stack) in runs {
            let what = format!("server {server_stack}, {proto} loader {client_stack}");
            let out_file = dir.0.join("answer.txt");
            let url = format!("https://localhost:{}/upload", server.port);
            let out = Command::new(LOADER)
                .args([
                    url.as_str(),
                    "--protocol",
                    proto,
                    "--single",
                    "--timeout",
                    "20",
                ])
                .args(["--upload", &N.to_string(), "--quic-stack", client_stack])
                .arg("--cacert")
                .arg(certs().join("ca.pem"))
                .args(["--connect-to", &format!("127.0.0.1:{}", server.port)])
                .arg("-o")
                .arg(&out_file)
                .output()
                .unwrap();
            assert!(out.status.success(), "{what}: {out:?}");
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(
                (&v["mode"], &v["upload_bytes"]),
                (&"upload".into(), &N.into())
            );
            let o = &v["clients"][0]["objects"][0];
            assert_eq!(
                (&o["status"], &o["sent"]),
                (&200.into(), &N.into()),
                "{what}: {o}"
            );
            let answer = std::fs::read_to_string(&out_file).unwrap();
            assert_eq!(answer, format!("{N}\n"), "{what}");
        }
        // A POST elsewhere is refused and its body not taken as an upload.
        let url = format!("https://localhost:{}/other", server.port);
        let out = Command::new(LOADER)
            .args([
                url.as_str(),
                "--protocol",
                "h3",
                "--single",
                "--timeout",
                "20",
            ])
            .args(["--upload", "1000"])
            .arg("--cacert")
            .arg(certs().join("ca.pem"))
            .args(["--connect-to", &format!("127.0.0.1:{}", server.port)])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["clients"][0]["objects"][0]["status"], 405, "{v}");
        server.stop();
        let access = lines(&logs.join("access.jsonl"));
        let requests: Vec<_> = access.iter().filter(|r| r["type"] == "request").collect();
        let got: Vec<_> = requests
            .iter()
            .map(|r| (r["proto"].as_str().unwrap(), r["status"].as_u64().unwrap()))
            .collect();
        assert_eq!(
            got,
            [
                ("http/1.1", 200),
                ("h2", 200),
                ("h3", 200),
                ("h3", 200),
                ("h3", 405)
            ],
            "server {server_stack}"
        );
        for r in &requests[..4] {
            assert_eq!(
                (&r["method"], &r["request_bytes"]),
                (&"POST".into(), &N.into()),
                "{r}"
            );
            assert!(r["t_body_done_unix_ns"].as_u64() >= r["t_request_unix_ns"].as_u64());
        }
    }
}

/// The quick loopback check of the report: a 2 MB file 20 times on one
/// connection from each server stack (loader on quiche). Prints Mbit/s;
/// run with `--ignored --nocapture` (its figures depend on the machine).
#[test]
#[ignore]
fn loopback_throughput() {
    let dir = Dir::new("h3-throughput");
    let root = dir.0.join("www");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("2m.bin"), content(2_000_000)).unwrap();
    for server_stack in ["quiche", "quinn"] {
        for client_stack in ["quiche", "quinn"] {
            let server = Server::start(&root, &dir.0, server_stack);
            let url = format!("https://localhost:{}/2m.bin", server.port);
            let out = Command::new(LOADER)
                .args([
                    url.as_str(),
                    "--protocol",
                    "h3",
                    "--single",
                    "--repeat",
                    "20",
                ])
                .args(["--quic-stack", client_stack, "--timeout", "60"])
                .arg("--cacert")
                .arg(certs().join("ca.pem"))
                .args(["--connect-to", &format!("127.0.0.1:{}", server.port)])
                .output()
                .unwrap();
            server.stop();
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let objs = v["clients"][0]["objects"].as_array().unwrap();
            let bytes: f64 = objs.iter().map(|o| o["bytes"].as_f64().unwrap()).sum();
            let first = objs[0]["start_ms"].as_f64().unwrap();
            let last = objs[objs.len() - 1]["done_ms"].as_f64().unwrap();
            let mbps = bytes * 8.0 / ((last - first) / 1e3) / 1e6;
            println!("server {server_stack}, loader {client_stack}: {mbps:.0} Mbit/s");
        }
    }
}
