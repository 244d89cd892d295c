//! The served directory: request paths to files, never outside the root.

use crate::replay::{Archive, Recorded};
use std::borrow::Cow;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// The upload sink's path: `POST /upload` (any query) is read to its end and
/// answered 200 with the number of body bytes received, as one text line.
/// The only request with a body the server takes; other POSTs get 405.
pub const UPLOAD_PATH: &str = "/upload";

/// Whether a request is an upload to the sink ([`UPLOAD_PATH`]).
pub fn is_upload(method: &str, target: &str) -> bool {
    method == "POST" && target.split(['?', '#']).next() == Some(UPLOAD_PATH)
}

/// What a GET or HEAD for a path resolves to.
#[derive(Debug, PartialEq)]
pub enum Resolved {
    File {
        path: PathBuf,
        len: u64,
        content_type: &'static str,
    },
    NotFound,
    /// The path tried to leave the root, or was not a plain path.
    Forbidden,
}

pub struct Root {
    root: PathBuf,
}

impl Root {
    pub fn new(dir: &Path) -> std::io::Result<Root> {
        Ok(Root {
            root: dir.canonicalize()?,
        })
    }

    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Resolve the path part of a request target (query and fragment are ignored).
    pub fn resolve(&self, target: &str) -> Resolved {
        let path = target.split(['?', '#']).next().unwrap_or("");
        if !path.starts_with('/') {
            return Resolved::Forbidden;
        }
        let Some(decoded) = percent_decode(path) else {
            return Resolved::Forbidden;
        };
        let mut p = self.root.clone();
        for c in Path::new(&decoded).components() {
            match c {
                Component::RootDir => {}
                Component::Normal(s) => p.push(s),
                // "..", "." or a prefix: refuse rather than normalise.
                _ => return Resolved::Forbidden,
            }
        }
        if decoded.ends_with('/') || p == self.root {
            p.push("index.html");
        }
        // Symbolic links must not lead outside the root either.
        let Ok(real) = p.canonicalize() else {
            return Resolved::NotFound;
        };
        if !real.starts_with(&self.root) {
            return Resolved::Forbidden;
        }
        match std::fs::metadata(&real) {
            Ok(m) if m.is_file() => Resolved::File {
                content_type: content_type(&real),
                len: m.len(),
                path: real,
            },
            Ok(m) if m.is_dir() => {
                let idx = real.join("index.html");
                match std::fs::metadata(&idx) {
                    Ok(m) if m.is_file() => Resolved::File {
                        content_type: "text/html; charset=utf-8",
                        len: m.len(),
                        path: idx,
                    },
                    _ => Resolved::NotFound,
                }
            }
            _ => Resolved::NotFound,
        }
    }
}

/// A response body of the HTTP/3 servers.
#[derive(Debug)]
pub enum Body {
    /// The file's `len` bytes, read in chunks.
    File { file: std::fs::File, len: u64 },
    /// A short text (errors).
    Mem(Vec<u8>),
    /// Nothing (HEAD).
    Empty,
}

/// What a request is answered with: one decision for HTTP/1.1, HTTP/2 and
/// both QUIC stacks, which only carry it out.
#[derive(Debug)]
pub struct Planned {
    pub status: u16,
    pub content_type: Cow<'static, str>,
    /// The `content-length` header: the file's length, also for HEAD.
    pub content_length: u64,
    pub body: Body,
    /// A replayed origin's recorded headers, sent as they were.
    pub headers: Vec<(String, String)>,
    /// How long to wait before answering (a replayed origin's recorded
    /// think time, with `--replay-think`).
    pub delay: Duration,
    /// How a replayed origin found the answer (`exact`, `fuzzy`, `miss`);
    /// None when the origin is not a replay. For the access log.
    pub replay: Option<&'static str>,
}

impl Planned {
    /// The answer to an upload once its body has ended: 200, the byte count.
    pub fn uploaded(received: u64) -> Planned {
        Planned::text(200, format!("{received}\n").into_bytes())
    }

    /// Whether the answer carries a `content-length` (204, 205 and 304
    /// carry no content, and no length of it).
    pub fn sends_length(&self) -> bool {
        !matches!(self.status, 204 | 205 | 304)
    }

    fn text(status: u16, text: Vec<u8>) -> Planned {
        Planned {
            status,
            content_type: Cow::Borrowed("text/plain"),
            content_length: text.len() as u64,
            body: Body::Mem(text),
            headers: Vec::new(),
            delay: Duration::ZERO,
            replay: None,
        }
    }

    /// 404, 403 or 405 with the status as its text.
    fn error(status: u16) -> Planned {
        Planned::text(status, format!("{status}\n").into_bytes())
    }
}

/// What an origin serves: a directory, or a recorded origin replayed
/// (`--replay`), whose misses fall through to nothing (404).
pub struct Site {
    root: Root,
    replay: Option<Archive>,
    /// `--replay-think`: answer after the recorded think time.
    think: bool,
    /// `--replay-deterministic`: the script put at the top of replayed HTML (`determinism.rs`).
    deterministic: Option<String>,
    /// `--cache-max-age`: how long a client may keep the directory's files.
    max_age: Option<u64>,
}

impl Site {
    pub fn new(root: Root, replay: Option<Archive>, think: bool) -> Site {
        Site {
            root,
            replay,
            think,
            deterministic: None,
            max_age: None,
        }
    }

    /// Put the deterministic-replay script at the top of every replayed HTML page, with the time
    /// the archive was recorded at (or, unknown, 2020-01-01; either way the same on every load).
    pub fn with_deterministic(mut self, on: bool) -> Site {
        self.deterministic = on.then(|| {
            let at = self.replay.as_ref().and_then(|a| a.recorded_at_ms);
            crate::determinism::script(at.unwrap_or(1_577_836_800_000))
        });
        self
    }

    /// Send `Cache-Control: max-age=S` with every file of the directory
    /// (a replayed origin sends its recorded headers instead).
    pub fn with_max_age(mut self, s: Option<u64>) -> Site {
        self.max_age = s;
        self
    }

    pub fn path(&self) -> &Path {
        self.root.path()
    }

    /// The recorded origin replayed, if any.
    pub fn archive(&self) -> Option<&Archive> {
        self.replay.as_ref()
    }

    /// [`Site::plan`] for a request that names its `Origin` (`cors`, a
    /// cross-origin fetch such as a font from another origin's stylesheet):
    /// the directory's files are public test content, so its answer allows
    /// any origin, as a CDN's does. Only then: a request without `Origin`
    /// gets the same headers as ever. A replayed origin sends what was
    /// recorded.
    pub fn plan_for(&self, at: (&str, &str), method: &str, target: &str, cors: bool) -> Planned {
        let mut p = self.plan(at, method, target);
        if cors && self.replay.is_none() && p.status == 200 {
            p.headers.push((
                "access-control-allow-origin".into(),
                ACCESS_CONTROL_ALLOW_ORIGIN.into(),
            ));
        }
        p
    }

    /// The answer to a request without a body (an upload, [`is_upload`], is
    /// answered by [`Planned::uploaded`] once its body is read), `method
    /// target` as the request gives them: the directory's file (200), 404,
    /// 403 for paths outside the root, 405 for methods other than GET and
    /// HEAD; or, replaying, the recorded answer ([`Archive::find`]) of the
    /// origin `at` (the scheme the request came over, the authority it
    /// named) or 404.
    pub fn plan(&self, at: (&str, &str), method: &str, target: &str) -> Planned {
        match &self.replay {
            None => {
                let mut p = self.root.plan(method, target);
                if let (200, Some(s)) = (p.status, self.max_age) {
                    p.headers
                        .push(("cache-control".into(), format!("max-age={s}")));
                }
                p
            }
            Some(a) => {
                let mut p = match a.find(at.0, at.1, method, target) {
                    None => Planned::error(404),
                    Some((r, how)) => {
                        match recorded(r, method == "HEAD", self.deterministic.as_deref()) {
                            // A body that cannot be read is no answer: a miss.
                            None => Planned::error(404),
                            Some(mut p) => {
                                p.replay = Some(how.name());
                                if self.think {
                                    p.delay = r.think.unwrap_or(Duration::ZERO);
                                }
                                p
                            }
                        }
                    }
                };
                p.replay.get_or_insert("miss");
                p
            }
        }
    }
}

/// A recorded response as it is sent (None: its body cannot be opened); an HTML page with
/// `script` put at its top, when given.
fn recorded(r: &Recorded, head: bool, script: Option<&str>) -> Option<Planned> {
    // Statuses that carry no content (RFC 9110 6.4.1, 15.3.6).
    let empty = matches!(r.status, 204 | 205 | 304);
    let html = r.content_type.to_ascii_lowercase().starts_with("text/html");
    let (body, len) = match script {
        Some(s) if html && r.status == 200 => {
            let mut raw = Vec::with_capacity(r.bytes as usize);
            std::io::Read::read_to_end(
                &mut std::io::Read::take(std::fs::File::open(&r.body).ok()?, r.bytes),
                &mut raw,
            )
            .ok()?;
            let page = crate::determinism::inject(&raw, s);
            let len = page.len() as u64;
            (if head { Body::Empty } else { Body::Mem(page) }, len)
        }
        _ if head || empty => (Body::Empty, r.bytes),
        _ => (
            Body::File {
                file: std::fs::File::open(&r.body).ok()?,
                len: r.bytes,
            },
            r.bytes,
        ),
    };
    // A page with the script put in loses its recorded Content-Security-Policy: an inline script
    // would be blocked by it.
    let injected = script.is_some() && html && r.status == 200;
    let headers = r
        .headers
        .iter()
        .filter(|(n, _)| !(injected && n == "content-security-policy"))
        .cloned()
        .collect();
    Some(Planned {
        status: r.status,
        content_type: Cow::Owned(r.content_type.clone()),
        content_length: if empty { 0 } else { len },
        body,
        headers,
        delay: Duration::ZERO,
        replay: None,
    })
}

impl Root {
    /// A directory's answer to a request without a body (see [`Site::plan`]).
    pub fn plan(&self, method: &str, path: &str) -> Planned {
        if method != "GET" && method != "HEAD" {
            return Planned::error(405);
        }
        let (len, file, content_type) = match self.resolve(path) {
            Resolved::File {
                path,
                len,
                content_type,
            } => match std::fs::File::open(&path) {
                Ok(f) => (len, f, content_type),
                Err(_) => return Planned::error(404),
            },
            Resolved::NotFound => return Planned::error(404),
            Resolved::Forbidden => return Planned::error(403),
        };
        Planned {
            status: 200,
            content_type: Cow::Borrowed(content_type),
            content_length: len,
            body: if method == "HEAD" {
                Body::Empty
            } else {
                Body::File { file, len }
            },
            headers: Vec::new(),
            delay: Duration::ZERO,
            replay: None,
        }
    }
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            // Two hex digits, nothing else: from_str_radix alone would
            // also take a sign ("%+5").
            let h = b.get(i + 1..i + 3)?;
            if !h.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            let v = u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()?;
            if v == 0 {
                return None;
            }
            out.push(v);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// `Timing-Allow-Origin` on every file: a page's Resource Timing entries of objects from other
/// origins (a sharded page's, a replayed site's) then carry their protocol and sizes, which is
/// how Firefox's loads report each object's protocol (Chromium's come from its DevTools events).
pub const TIMING_ALLOW_ORIGIN: &str = "*";

/// `Access-Control-Allow-Origin` on a directory's files (a replayed origin sends what was recorded).
pub const ACCESS_CONTROL_ALLOW_ORIGIN: &str = "*";

pub fn content_type(p: &Path) -> &'static str {
    match p.extension().and_then(|e| e.to_str()).unwrap_or("") {
        "html" | "htm" => "text/html; charset=utf-8",
        "css" => "text/css",
        "js" => "application/javascript",
        "json" => "application/json",
        "jpg" | "jpeg" => "image/jpeg",
        "png" => "image/png",
        "gif" => "image/gif",
        "svg" => "image/svg+xml",
        "webp" => "image/webp",
        "ttf" => "font/ttf",
        "woff" => "font/woff",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempdir::Dir, Root) {
        let d = tempdir::Dir::new();
        std::fs::create_dir(d.0.join("sub")).unwrap();
        std::fs::write(d.0.join("index.html"), "i").unwrap();
        std::fs::write(d.0.join("sub/a b.jpg"), "jpeg").unwrap();
        let r = Root::new(&d.0).unwrap();
        (d, r)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let p = std::env::temp_dir().join(format!(
                    "satbench-files-{}-{:?}",
                    std::process::id(),
                    std::thread::current().id()
                ));
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
    }

    #[test]
    fn serves_files_and_index() {
        let (_d, r) = root();
        assert!(matches!(r.resolve("/"), Resolved::File { len: 1, .. }));
        match r.resolve("/sub/a%20b.jpg?x=1") {
            Resolved::File {
                len, content_type, ..
            } => assert_eq!((len, content_type), (4, "image/jpeg")),
            other => panic!("{other:?}"),
        }
        assert_eq!(r.resolve("/nope"), Resolved::NotFound);
    }

    #[test]
    fn plans_answers() {
        let (_d, r) = root();
        let p = r.plan("GET", "/sub/a%20b.jpg");
        assert_eq!((p.status, p.content_length), (200, 4));
        assert!(matches!(p.body, Body::File { len: 4, .. }));
        let p = r.plan("HEAD", "/sub/a%20b.jpg");
        assert!(matches!(
            (p.status, p.content_length, p.body),
            (200, 4, Body::Empty)
        ));
        for (m, path, status) in [
            ("GET", "/nope", 404),
            ("GET", "/../x", 403),
            ("POST", "/", 405),
        ] {
            let p = r.plan(m, path);
            assert_eq!(
                (p.status, p.content_type.as_ref()),
                (status, "text/plain"),
                "{m} {path}"
            );
            match p.body {
                Body::Mem(b) => assert_eq!(b, format!("{status}\n").into_bytes()),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn a_replayed_origin_answers_as_recorded() {
        let (d, r) = root();
        std::fs::write(d.0.join("sub/body"), "recorded body").unwrap();
        let doc = serde_json::json!({"version": 2, "bodies": d.0.join("sub"), "origins": [
            {"scheme": "https", "host": "h", "port": 443, "entries": [
            {"method": "GET", "path": "/a", "query": "x=1", "status": 200, "content_type": "text/x",
             "headers": [["cache-control", "max-age=9"]], "body": "b".repeat(64), "bytes": 13,
             "server_ms": 25.0},
            {"method": "GET", "path": "/gone", "query": "", "status": 304, "content_type": "text/x",
             "headers": [], "body": "b".repeat(64), "bytes": 13}]}]});
        std::fs::rename(d.0.join("sub/body"), d.0.join("sub").join("b".repeat(64))).unwrap();
        let archive = || Some(Archive::from_json(&doc, Path::new(""), true).unwrap());
        const AT: (&str, &str) = ("https", "h");
        let site = Site::new(Root::new(r.path()).unwrap(), archive(), true);
        let p = site.plan(AT, "GET", "/a?x=2");
        assert_eq!(
            (p.status, p.content_type.as_ref(), p.content_length),
            (200, "text/x", 13)
        );
        assert_eq!(
            (p.replay, p.delay),
            (Some("fuzzy"), Duration::from_millis(25))
        );
        assert_eq!(
            p.headers,
            vec![("cache-control".to_string(), "max-age=9".to_string())]
        );
        assert!(matches!(p.body, Body::File { len: 13, .. }));
        let p = site.plan(AT, "HEAD", "/a?x=1");
        assert!(matches!((p.replay, p.body), (Some("exact"), Body::Empty)));
        let p = site.plan(AT, "GET", "/gone");
        assert!(matches!(p.body, Body::Empty) && !p.sends_length());
        // The directory's own files are not served: what was not recorded is a miss.
        let p = site.plan(AT, "GET", "/index.html");
        assert_eq!((p.status, p.replay), (404, Some("miss")));
        // A directory's files with the cache lifetime asked for; a replay's keep their own headers.
        let dir = Site::new(Root::new(r.path()).unwrap(), None, false).with_max_age(Some(60));
        let h = dir.plan(AT, "GET", "/").headers;
        assert_eq!(h, vec![("cache-control".into(), "max-age=60".into())]);
        assert!(dir.plan(AT, "GET", "/nope").headers.is_empty());
        // A request naming its origin (CORS) is allowed any; one without gets the same headers as ever.
        let acao = ("access-control-allow-origin".to_string(), "*".to_string());
        assert!(dir.plan_for(AT, "GET", "/", true).headers.contains(&acao));
        assert_eq!(dir.plan_for(AT, "GET", "/", false).headers, h);
        assert!(dir.plan_for(AT, "GET", "/nope", true).headers.is_empty());
        let replayed = Site::new(Root::new(r.path()).unwrap(), archive(), false);
        assert!(!replayed
            .plan_for(AT, "GET", "/a?x=1", true)
            .headers
            .contains(&acao));
        // Without --replay-think, at once.
        let p = Site::new(Root::new(r.path()).unwrap(), archive(), false).plan(AT, "GET", "/a?x=1");
        assert_eq!(p.delay, Duration::ZERO);
    }

    #[test]
    fn deterministic_replay_puts_its_script_in_html_and_drops_its_csp() {
        let (d, r) = root();
        let html = b"<html><head><title>t</title></head></html>";
        std::fs::write(d.0.join("sub").join("c".repeat(64)), html).unwrap();
        let doc = serde_json::json!({"version": 2, "bodies": d.0.join("sub"), "recorded_at_ms": 1234,
            "origins": [{"scheme": "https", "host": "h", "port": 443, "entries": [
            {"method": "GET", "path": "/", "query": "", "status": 200, "content_type": "text/html",
             "headers": [["content-security-policy", "script-src 'self'"], ["x-a", "1"]],
             "body": "c".repeat(64), "bytes": html.len()}]}]});
        let a = Archive::from_json(&doc, Path::new(""), true).unwrap();
        let site = Site::new(Root::new(r.path()).unwrap(), Some(a), false).with_deterministic(true);
        let p = site.plan(("https", "h"), "GET", "/");
        let Body::Mem(b) = p.body else {
            panic!("not in memory")
        };
        let text = String::from_utf8(b).unwrap();
        assert!(text.starts_with("<html><head><script>") && text.contains("let now = 1234;"));
        assert_eq!(p.content_length, text.len() as u64);
        assert_eq!(p.headers, vec![("x-a".to_string(), "1".to_string())]);
        let head = site.plan(("https", "h"), "HEAD", "/");
        assert_eq!(head.content_length, text.len() as u64);
    }

    #[test]
    fn uploads_only_to_the_sink() {
        for (m, t, up) in [
            ("POST", "/upload", true),
            ("POST", "/upload?n=5", true),
            ("POST", "/upload/x", false),
            ("POST", "/uploads", false),
            ("PUT", "/upload", false),
            ("GET", "/upload", false),
        ] {
            assert_eq!(is_upload(m, t), up, "{m} {t}");
        }
        let p = Planned::uploaded(1_000_000);
        assert_eq!((p.status, p.content_length), (200, 8));
        assert!(matches!(p.body, Body::Mem(b) if b == b"1000000\n"));
    }

    #[test]
    fn refuses_traversal() {
        let (_d, r) = root();
        for t in [
            "/../etc/passwd",
            "/sub/../../x",
            "/%2e%2e/etc/passwd",
            "/sub/%2E%2E/%2E%2E/x",
            "relative",
            "/a%00b",
            "/%zz",
            // Found by the resolve fuzz target: a signed "hex" escape.
            "/%+5",
            "/side.ex.[~%+5/s",
            "/%-1",
        ] {
            assert_eq!(r.resolve(t), Resolved::Forbidden, "{t}");
        }
    }

    #[test]
    fn refuses_symlinks_out_of_root() {
        let (d, r) = root();
        std::os::unix::fs::symlink("/etc", d.0.join("out")).unwrap();
        assert_eq!(r.resolve("/out/hostname"), Resolved::Forbidden);
    }
}
