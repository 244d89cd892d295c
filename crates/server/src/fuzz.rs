//! Fuzz targets of what the server takes from clients (`fuzzkit`, on stable
//! Rust), in process, without sockets. Seeds in `fuzz-corpus/<target>/`.
//!
//! - `resolve`: request targets to files (`files.rs`: percent-decoding,
//!   `..`, symbolic links) in a fixture root with links leading in and out
//!   and a sibling folder whose name starts like the root's. Invariants: a
//!   file served is a regular file inside the root, found through no link
//!   that leaves it, with its real length; the query never matters; a `%`
//!   not followed by two hex digits is refused; `plan` answers 200, 403, 404
//!   or 405, its `content-length` that of its body.
//! - `request`: raw bytes from a client into hyper's HTTP/1.1 and HTTP/2
//!   server with this server's limits (`tcp::http_builder`) and its request
//!   handler (`tcp::handle`), over an in-memory stream, on a paused clock
//!   (timeouts cost no real time). Invariants: no panic; the connection
//!   ends within 5 s of the client's end of stream;
//!   what comes back is an HTTP/1.1 status line (or, after the HTTP/2
//!   preface, a SETTINGS frame); every request handled is answered 200 only
//!   for GET or HEAD of a file inside the root or a POST to the upload sink,
//!   else 403, 404 or 405.
//! - `replay`: request lines against a recorded origin (`replay.rs`): an
//!   answer has the request's method and path, a recorded path is never
//!   missed.
//!
//! `cargo test` runs each for half a second;
//! `SATBENCH_FUZZ_SECONDS=60 cargo test --release -p satbench-server fuzz_`
//! for a minute each.

use crate::files::{is_upload, Body, Resolved, Root};
use crate::http::Shared;
use crate::log::JsonLines;
use crate::tcp::{handle, http_builder};
use crate::Options;
use fuzzkit::Config;
use hyper_util::rt::TokioIo;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn corpus(target: &str) -> String {
    format!("{}/fuzz-corpus/{target}", env!("CARGO_MANIFEST_DIR"))
}

/// A served folder `root/` beside `outside/` and `root2/`, with links.
struct Fixture {
    top: PathBuf,
    root: PathBuf,
}

impl Fixture {
    fn new(tag: &str) -> Fixture {
        let top = std::env::temp_dir().join(format!("satbench-fuzz-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&top);
        let root = top.join("root");
        for d in ["root/sub", "root/empty", "outside", "root2"] {
            std::fs::create_dir_all(top.join(d)).unwrap();
        }
        for (f, body) in [
            ("root/index.html", "<p>index</p>"),
            ("root/sub/a b.jpg", "jpeg"),
            ("root/sub/index.html", "sub index"),
            ("root/100%.txt", "percent"),
            ("root/\u{fc}n\u{ef}.css", "unicode"),
            ("outside/secret.txt", "secret"),
            ("root2/x.txt", "sibling"),
        ] {
            std::fs::write(top.join(f), body).unwrap();
        }
        let link = |to: &str, at: &str| std::os::unix::fs::symlink(to, top.join(at)).unwrap();
        link("../outside", "root/link-out");
        link("../outside/secret.txt", "root/file-link-out");
        link("sub", "root/link-in");
        link("../root2", "root/link-sibling");
        link("/etc", "root/etc");
        let root = root.canonicalize().unwrap();
        Fixture { top, root }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.top);
    }
}

/// Percent-decoding as RFC 3986 defines it: `%` and two hex digits.
fn strict_decodes(path: &str) -> bool {
    let b = path.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            match b.get(i + 1..i + 3) {
                Some(h) if h.iter().all(u8::is_ascii_hexdigit) => i += 3,
                _ => return false,
            }
        } else {
            i += 1;
        }
    }
    true
}

/// The checks on one resolution.
fn check_resolved(root: &Root, top: &Path, target: &str, r: &Resolved) {
    if let Resolved::File {
        path,
        len,
        content_type,
    } = r
    {
        assert!(path.starts_with(root.path()), "{target:?} -> {path:?}");
        assert!(
            !path.starts_with(top.join("outside")),
            "{target:?} -> {path:?}"
        );
        assert_eq!(
            &path.canonicalize().unwrap(),
            path,
            "{target:?}: not the real path"
        );
        let m = std::fs::metadata(path).unwrap();
        assert!(m.is_file(), "{target:?} -> {path:?}");
        assert_eq!(m.len(), *len, "{target:?}");
        assert_eq!(
            *content_type,
            crate::files::content_type(path),
            "{target:?}"
        );
    }
}

#[test]
fn fuzz_resolve() {
    let fx = Fixture::new("resolve");
    let root = Root::new(&fx.root).unwrap();
    fuzzkit::run(
        Config::new("resolve", corpus("resolve"))
            .dict(&[
                "/",
                "..",
                ".",
                "%2e",
                "%2E",
                "%2f",
                "%2F",
                "%00",
                "%25",
                "%20",
                "%",
                "?",
                "#",
                "index.html",
                "sub",
                "empty",
                "link-out",
                "link-in",
                "file-link-out",
                "link-sibling",
                "etc",
                "hostname",
                "secret.txt",
                "a%20b.jpg",
                "100%25.txt",
                "%c3%bcn%c3%af.css",
                "//",
                "\\",
            ])
            .max_len(256),
        |b, f| {
            let t = String::from_utf8_lossy(b);
            let r = root.resolve(&t);
            let kind = match &r {
                Resolved::File { .. } => 0,
                Resolved::NotFound => 1,
                Resolved::Forbidden => 2,
            };
            f.add(kind);
            f.add_count(10 + kind, t.matches('/').count());
            f.add(20 + kind * 8 + t.contains('%') as u64 * 4 + t.contains("..") as u64 * 2);
            if let Resolved::File { path, .. } = &r {
                f.add_bytes(40, path.as_os_str().as_encoded_bytes());
            }
            check_resolved(&root, &fx.top, &t, &r);
            let path = t.split(['?', '#']).next().unwrap_or("");
            if !strict_decodes(path) {
                assert_eq!(r, Resolved::Forbidden, "{t:?}: % without two hex digits");
            }
            assert_eq!(root.resolve(&format!("{path}?q=/../x#f")), r, "{t:?}");
            for m in ["GET", "HEAD", "POST"] {
                let p = root.plan(m, &t);
                let expect = match (&r, m) {
                    (_, "POST") => 405,
                    (Resolved::File { .. }, _) => 200,
                    (Resolved::NotFound, _) => 404,
                    (Resolved::Forbidden, _) => 403,
                };
                assert_eq!(p.status, expect, "{m} {t:?}");
                match p.body {
                    Body::File { len, .. } => assert_eq!(len, p.content_length),
                    Body::Mem(b) => assert_eq!(b.len() as u64, p.content_length),
                    Body::Empty => assert_eq!(m, "HEAD"),
                }
            }
        },
    );
}

/// (method, target, status) of each request the handler answered.
type Seen = Arc<std::sync::Mutex<Vec<(String, String, u16)>>>;

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Serve one connection whose client sends `input` and then ends its
/// stream; returns what the server wrote.
async fn exchange(sh: Arc<Shared>, input: &[u8], seen: Seen) -> Vec<u8> {
    let (client, server) = tokio::io::duplex(64 * 1024);
    let builder = http_builder(&sh.opts);
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let (sh, seen) = (sh.clone(), seen.clone());
        async move {
            let m = req.method().as_str().to_string();
            let t = req
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or_else(|| "/".into());
            let conn_use = Arc::new(crate::http::ConnUse::default());
            let r = handle(req, sh, "f1".into(), false, "cubic".into(), conn_use).await;
            if let Ok(resp) = &r {
                seen.lock().unwrap().push((m, t, resp.status().as_u16()));
            }
            r
        }
    });
    let serve = builder.serve_connection(TokioIo::new(server), svc);
    let (mut rd, mut wr) = tokio::io::split(client);
    let write = async move {
        let _ = wr.write_all(input).await;
        // The runtime's clock is paused and jumps ahead only when every
        // task waits: this sleep ends once the server has done all it
        // could with the input (hyper closes at once on a client's end of
        // stream, dropping requests it has not answered).
        tokio::time::sleep(Duration::from_secs(1)).await;
        let _ = wr.shutdown().await;
    };
    let read = async move {
        let mut out = Vec::new();
        let _ = rd.read_to_end(&mut out).await;
        out
    };
    let all = async {
        let (_, _, out) = tokio::join!(serve, write, read);
        out
    };
    tokio::time::timeout(Duration::from_secs(6), all)
        .await
        .expect("the connection did not end within 5 s of the client's end of stream")
}

/// The shared state `handle` needs, over a fixture root.
fn shared(fx: &Fixture) -> Arc<Shared> {
    let opts = Options {
        root: fx.root.display().to_string(),
        ..Options::default()
    };
    let (shutdown, _) = tokio::sync::watch::channel(false);
    Arc::new(Shared {
        root: Arc::new(crate::files::Site::new(
            Root::new(&fx.root).unwrap(),
            None,
            false,
        )),
        opts,
        access: JsonLines::default(),
        tcp_info: JsonLines::default(),
        open: Default::default(),
        shutdown,
        live: Default::default(),
        realtime: Default::default(),
    })
}

/// A runtime whose clock moves only when every task waits (see `exchange`).
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

/// The harness really serves: seeds get the answers they should.
#[test]
fn request_seeds_are_answered() {
    let fx = Fixture::new("seeds");
    let sh = shared(&fx);
    let rt = runtime();
    for (seed, want) in [
        ("pipelined", vec![200, 200, 404]),
        ("traversal", vec![403, 403]),
        ("absolute-form", vec![403]),
        ("post-body", vec![405]),
        ("upload", vec![200, 200]),
        ("h2-two", vec![200, 403]),
        ("h2-continuation", vec![200]),
    ] {
        let input = std::fs::read(format!("{}/{seed}", corpus("request"))).unwrap();
        let seen: Seen = Default::default();
        let out = rt.block_on(exchange(sh.clone(), &input, seen.clone()));
        let mut got: Vec<u16> = seen.lock().unwrap().iter().map(|s| s.2).collect();
        got.sort();
        assert_eq!(got, want, "{seed}: {}", String::from_utf8_lossy(&out));
        if seed == "upload" {
            // Each upload is answered with its byte count (one plain, one chunked).
            let text = String::from_utf8_lossy(&out);
            assert_eq!(text.matches("\r\n\r\n5\n").count(), 2, "{text}");
        }
    }
}

#[test]
fn fuzz_request() {
    let fx = Fixture::new("request");
    let sh = shared(&fx);
    let root = Root::new(&fx.root).unwrap();
    let rt = runtime();
    fuzzkit::run(
        Config::new("request", corpus("request"))
            .dict::<&[u8]>(&[
                b"GET ",
                b"HEAD ",
                b"POST ",
                b"POST /upload ",
                b"OPTIONS * ",
                b" HTTP/1.1\r\n",
                b" HTTP/1.0\r\n",
                b"\r\n",
                b"\r\n\r\n",
                b"\n",
                b"Host: a\r\n",
                b"Content-Length: 5\r\n",
                b"Content-Length: ",
                b"Transfer-Encoding: chunked\r\n",
                b"Connection: close\r\n",
                b"Connection: keep-alive\r\n",
                b"Expect: 100-continue\r\n",
                b"5\r\nhello\r\n0\r\n\r\n",
                b"/sub/a%20b.jpg",
                b"/../",
                b"%2e%2e",
                b"http://a/",
                b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
                b"\x00\x00\x00\x04\x00\x00\x00\x00\x00",
                b"\x00\x00\x00\x04\x01\x00\x00\x00\x00",
                b"\x00\x00\x06\x01\x05\x00\x00\x00\x01\x82\x87\x84\x41\x01a",
                b"\x00\x00\x04\x03\x00\x00\x00\x00\x01\x00\x00\x00\x08",
                b"\x00\x00\x08\x06\x00\x00\x00\x00\x00\x01\x02\x03\x04\x05\x06\x07\x08",
                b"\x00\x00\x04\x08\x00\x00\x00\x00\x00\x00\x01\x00\x00",
                b"\x00\x00\x00\x09\x04\x00\x00\x00\x01",
            ])
            .max_len(4096),
        |b, f| {
            let seen: Seen = Default::default();
            let out = rt.block_on(exchange(sh.clone(), b, seen.clone()));
            let h2 = b.starts_with(H2_PREFACE);
            f.add(h2 as u64);
            f.add_count(2, out.len());
            if h2 {
                assert!(
                    out.is_empty() || (out.len() >= 9 && out[3] == 4),
                    "HTTP/2 answered without a SETTINGS frame first: {:?}",
                    &out[..out.len().min(32)]
                );
                // The kinds of frame the server sent, in order, first ten.
                let mut i = 0;
                let mut n = 0;
                while i + 9 <= out.len() && n < 10 {
                    let len = u32::from_be_bytes([0, out[i], out[i + 1], out[i + 2]]) as usize;
                    f.add(1000 + n * 16 + out[i + 3] as u64);
                    i += 9 + len;
                    n += 1;
                }
            } else if !out.is_empty() {
                let head = String::from_utf8_lossy(&out[..out.len().min(13)]);
                assert!(
                    head.len() == 13
                        && (head.starts_with("HTTP/1.1 ") || head.starts_with("HTTP/1.0 "))
                        && head[9..12].bytes().all(|c| c.is_ascii_digit()),
                    "not a status line: {head:?}"
                );
                f.add_bytes(3, head[9..12].as_bytes());
            }
            let seen = seen.lock().unwrap();
            f.add_count(4, seen.len());
            for (m, t, status) in seen.iter() {
                f.add(5000 + *status as u64);
                let get_or_head = m == "GET" || m == "HEAD";
                match status {
                    200 if is_upload(m, t) => {}
                    200 => {
                        assert!(get_or_head, "{m} {t:?}: 200");
                        let r = root.resolve(t);
                        assert!(
                            matches!(r, Resolved::File { .. }),
                            "{m} {t:?}: 200 for {r:?}"
                        );
                        check_resolved(&root, &fx.top, t, &r);
                    }
                    403 | 404 => assert!(get_or_head, "{m} {t:?}: {status}"),
                    405 => assert!(!get_or_head && !is_upload(m, t), "{m} {t:?}: 405"),
                    other => panic!("{m} {t:?}: status {other}"),
                }
            }
        },
    );
}

/// The real-time endpoints' query and upstream-message parsers: any bytes
/// either parse into values within the documented limits or are refused
/// naming a key; a schedule from a parsed query is sorted and as long as
/// asked; a message is exactly the size asked (or its unpadded size).
#[test]
fn fuzz_realtime() {
    use crate::realtime::{
        message, Params, Scenario, Schedule, Upstream, MAX_INTERVAL_MS, MAX_MEMBERS, MAX_MESSAGES,
        MAX_SIZE,
    };
    fuzzkit::run(
        Config::new("realtime", corpus("realtime"))
            .dict(&[
                "session=",
                "scenario=",
                "server",
                "client",
                "chat",
                "room",
                "room=",
                "members=",
                "n=",
                "size=",
                "interval_ms=",
                "arrivals=",
                "poisson",
                "constant",
                "seed=",
                "after=",
                "-1",
                "&",
                "=",
                "1e9",
                "nan",
                "inf",
                "0.5",
                "{\"seq\":",
                "\"t_ms\":",
                "\"done\":true",
                "}",
            ])
            .max_len(256),
        |b, f| {
            let q = String::from_utf8_lossy(b);
            match Params::parse(&q) {
                Ok(p) => {
                    f.add(1);
                    assert!((1..=MAX_MESSAGES).contains(&p.n) && (1..=MAX_SIZE).contains(&p.size));
                    assert!(
                        p.interval_ms.is_finite()
                            && (0.0..=MAX_INTERVAL_MS).contains(&p.interval_ms)
                    );
                    assert!(p.after >= -1 && p.session.len() <= 64 && p.room.len() <= 64);
                    assert_eq!(p.scenario == Scenario::Room, !p.room.is_empty(), "{q:?}");
                    assert!((2..=MAX_MEMBERS).contains(&p.members));
                    // Small schedules only: the check is of the shape, not of the size.
                    let small = Params {
                        n: p.n.min(64),
                        ..p.clone()
                    };
                    let s = Schedule::new(&small);
                    assert_eq!(
                        s.len(),
                        if small.scenario.down() {
                            small.n as usize
                        } else {
                            0
                        }
                    );
                    assert!((1..s.len()).all(|i| s.due(i - 1) <= s.due(i)), "{q:?}");
                    let m = message(u64::from(p.n), 1_795_578_470_912_111_385, p.size.min(4096));
                    assert!(m.len() >= p.size.min(4096));
                    let v: serde_json::Value = serde_json::from_str(&m).expect("a message is JSON");
                    assert_eq!(v["seq"].as_u64(), Some(u64::from(p.n)));
                }
                Err(e) => {
                    f.add(2);
                    f.add_bytes(3, e.key.as_bytes());
                    assert!(!e.key.is_empty() && !e.why.is_empty());
                }
            }
            match Upstream::parse(b) {
                Some(u) if u.done => f.add(4),
                Some(u) => {
                    f.add(5);
                    assert!(u.t_ms.is_finite());
                }
                None => f.add(6),
            }
        },
    );
}

/// `replay`: request targets against a recorded origin (`replay.rs`, the
/// manifest of `tests/fixtures/golden/replay.json`). Invariants: no panic;
/// an answer has the request's method (a recorded GET for HEAD) and path;
/// `exact` only when the queries hold the same pairs, volatile ones aside,
/// and a path that has any recording always finds one.
#[test]
fn fuzz_replay() {
    use crate::replay::{Archive, Match};
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/golden");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("replay.json")).unwrap()).unwrap();
    let a = Archive::from_json(&doc, &dir, false).unwrap();
    fuzzkit::run(
        Config::new("replay", corpus("replay"))
            .dict(&[
                "/",
                "/app.js",
                "/old",
                "?",
                "&",
                "=",
                "#",
                "v=7",
                "v=8",
                "session=",
                "session=abc",
                "GET ",
                "HEAD ",
                "POST ",
            ])
            .max_len(128),
        |b, f| {
            let t = String::from_utf8_lossy(b);
            let (method, target) = t.split_once(' ').unwrap_or(("GET", &t));
            let found = a.find("https", "www.shop.test", method, target);
            // Another origin of the same address, or none, never answers with this one's entries.
            assert!(a
                .find("http", "www.shop.test", method, target)
                .is_none_or(|(r, _)| r.status == 301));
            assert!(a.find("https", "other.test", method, target).is_none());
            let path = target
                .split('#')
                .next()
                .unwrap_or("")
                .split('?')
                .next()
                .unwrap_or("");
            f.add(match found.map(|(_, m)| m) {
                None => 0,
                Some(Match::Exact) => 1,
                Some(Match::Fuzzy) => 2,
            });
            f.add_count(10, target.matches('&').count());
            // The fixture's volatile parameter is `session`.
            let pairs = |q: &str| {
                let mut v: Vec<String> = q
                    .split('&')
                    .filter(|p| !p.is_empty() && p.split('=').next() != Some("session"))
                    .map(str::to_string)
                    .collect();
                v.sort();
                v
            };
            if let Some((r, how)) = found {
                assert_eq!(r.path, path, "{t:?}");
                let want = if method == "HEAD" { "GET" } else { method };
                assert_eq!(r.method, want, "{t:?}");
                let query = target
                    .split('#')
                    .next()
                    .unwrap_or("")
                    .split_once('?')
                    .map_or("", |x| x.1);
                assert_eq!(
                    how == Match::Exact,
                    pairs(query) == pairs(&r.query),
                    "{t:?}"
                );
            } else if method == "GET" {
                assert!(
                    !["/", "/app.js", "/old"].contains(&path),
                    "{t:?}: a recorded path missed"
                );
            }
        },
    );
}
