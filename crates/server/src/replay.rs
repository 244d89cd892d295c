//! Recorded origins replayed: the requests the hosts of one server address
//! answered when a site was recorded, and which of them answers a request now.
//!
//! `--replay FILE` reads the replay manifest of one server address, written
//! by the orchestrator (`satbench.endpoints.sites.replay_manifest`, the
//! format's one owner; `tests/fixtures/golden/replay.json` is its output,
//! read by a test here):
//!
//! ```text
//! {"version": 2, "bodies": "/abs/dir", "volatile": ["cb", "_"], "recorded_at_ms": 1767323045678,
//!  "origins": [{"scheme": "https", "host": "cdn.example.test", "port": 443,
//!    "entries": [{"method": "GET", "path": "/a.js", "query": "v=2", "status": 200,
//!                 "content_type": "text/javascript", "headers": [["cache-control", "max-age=60"]],
//!                 "body": "<sha256 of the decoded body, a file under bodies>", "bytes": 1234,
//!                 "server_ms": 12.5}]}]}
//! ```
//!
//! A request first finds its origin: the scheme it came over (cleartext or
//! TLS) and the host and port it names (HTTP/2's and HTTP/3's `:authority`,
//! HTTP/1.1's `Host`; the scheme's default port when it names none). So the
//! `http://` redirect of a host and its `https://` page are two origins, and
//! one server answers many names, as one address of a real site did.
//!
//! Then matching is Web Page Replay's: a request is answered by the recorded
//! request of the same method (HEAD by a GET) and path whose query is the
//! same (exact), or else by the one of that path whose query parameters
//! have the most in common with it (fuzzy: the Dice coefficient 2M/T over
//! the `name=value` pairs, M the pairs both have, T the pairs of both; the
//! first recorded wins a tie), so a query that changes between runs (a
//! cache-buster, a session id) still finds its response. Parameters named
//! in `volatile` are left out of both queries before comparing. Several
//! responses recorded for the same request are served in their recorded
//! order, the last one again once all were served. A request of no
//! recorded origin, or a path never recorded, is a miss: 404, and the
//! access log says so (`"replay": "miss"`), so a trial can count what its
//! recording lacked.
//!
//! Sans-IO: loading reads the manifest and checks every body's size once;
//! [`Archive::find`] is a function of the request and of how often each
//! exact match was served before.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The manifest version this server reads.
pub const VERSION: u64 = 2;

/// One recorded response.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: String,
    pub status: u16,
    pub content_type: String,
    /// The recorded headers the server sends as they were (the orchestrator
    /// has left out what the server computes: length, type, encoding,
    /// hop-by-hop).
    pub headers: Vec<(String, String)>,
    /// The decoded body's file, and its length.
    pub body: PathBuf,
    pub bytes: u64,
    /// The server's think time as recorded (HAR `timings.wait`).
    pub think: Option<Duration>,
}

/// How a request found its response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// The same method, path and query (volatile parameters aside).
    Exact,
    /// The same method and path; the query closest to the request's.
    Fuzzy,
}

impl Match {
    pub fn name(self) -> &'static str {
        match self {
            Match::Exact => "exact",
            Match::Fuzzy => "fuzzy",
        }
    }
}

/// Why a manifest cannot be replayed: `FILE: entry N: FIELD: what` (exit 2).
#[derive(Debug, thiserror::Error)]
#[error("{file}: {place}{msg}")]
pub struct ReplayError {
    file: String,
    place: String,
    msg: String,
}

/// An origin: scheme, host (lower case) and port.
pub type OriginKey = (String, String, u16);

/// One origin's recorded requests.
#[derive(Debug)]
struct Origin {
    entries: Vec<Recorded>,
    /// (method, path) to the entries recorded for it, in recorded order.
    by_path: HashMap<(String, String), Vec<usize>>,
    /// How many times each entry's exact request was answered (by the first
    /// entry of its kind), so that repeats are served in recorded order.
    served: Vec<AtomicUsize>,
}

/// The recorded origins of one server address.
#[derive(Debug)]
pub struct Archive {
    /// When the site was recorded (unix ms; the manifest's `recorded_at_ms`), if known.
    pub recorded_at_ms: Option<u64>,
    origins: HashMap<OriginKey, Origin>,
    /// The origins in manifest order.
    order: Vec<OriginKey>,
    volatile: Vec<String>,
}

/// The default port of a scheme (None: not one a server here speaks).
pub fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

/// The host (lower case, no trailing dot) and port an authority names
/// (`host`, `host:port`, `[v6]:port`), the scheme's default port if none;
/// None if it is no authority.
pub fn split_authority(authority: &str, scheme: &str) -> Option<(String, u16)> {
    let a = authority.rsplit('@').next().unwrap_or("");
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        let (h, tail) = rest.split_once(']')?;
        (h, tail.strip_prefix(':'))
    } else {
        match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        }
    };
    let port = match port {
        None | Some("") => default_port(scheme)?,
        Some(p) => p.parse().ok().filter(|&p| p != 0)?,
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    (!host.is_empty()).then_some((host, port))
}

impl Archive {
    /// Read and check a manifest: every field of every entry, and every body
    /// file's size against the recorded one.
    pub fn load(file: &Path) -> Result<Archive, ReplayError> {
        let name = file.display().to_string();
        let err = |place: String, msg: String| ReplayError {
            file: name.clone(),
            place,
            msg,
        };
        let text = std::fs::read_to_string(file).map_err(|e| err(String::new(), e.to_string()))?;
        let doc: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| err(format!("line {}: ", e.line()), format!("not JSON: {e}")))?;
        // A relative `bodies` is the manifest's folder's.
        let base = file.parent().unwrap_or(Path::new(""));
        Archive::from_json(&doc, base, true).map_err(|(place, msg)| err(place, msg))
    }

    /// The archive a manifest describes; `check_bodies` opens every body
    /// file (off in unit tests of the matching alone). Errors: (where, what).
    pub fn from_json(
        doc: &serde_json::Value,
        base: &Path,
        check_bodies: bool,
    ) -> Result<Archive, (String, String)> {
        let top = |field: &str, msg: &str| (String::new(), format!("{field}: {msg}"));
        if doc.get("version").and_then(|v| v.as_u64()) != Some(VERSION) {
            return Err(top("version", &format!("must be {VERSION}")));
        }
        let bodies = base.join(
            doc.get("bodies")
                .and_then(|v| v.as_str())
                .ok_or_else(|| top("bodies", "must be a folder's path"))?,
        );
        let volatile = match doc.get("volatile") {
            None => Vec::new(),
            Some(v) => v
                .as_array()
                .and_then(|a| {
                    a.iter()
                        .map(|x| x.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| top("volatile", "must be a list of parameter names"))?,
        };
        let list = doc
            .get("origins")
            .and_then(|v| v.as_array())
            .ok_or_else(|| top("origins", "must be a list"))?;
        let mut origins = HashMap::new();
        let mut order = Vec::new();
        for (k, o) in list.iter().enumerate() {
            let at =
                |field: &str, msg: String| (format!("origin {k}: "), format!("{field}: {msg}"));
            let scheme = o
                .get("scheme")
                .and_then(|v| v.as_str())
                .filter(|s| default_port(s).is_some())
                .ok_or_else(|| at("scheme", "must be http or https".into()))?;
            let host = o
                .get("host")
                .and_then(|v| v.as_str())
                .filter(|h| {
                    !h.is_empty()
                        && h.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"-.".contains(&b))
                })
                .ok_or_else(|| at("host", "must be a host name".into()))?
                .to_ascii_lowercase();
            let port =
                o.get("port")
                    .and_then(|v| v.as_u64())
                    .filter(|p| (1..=65535).contains(p))
                    .ok_or_else(|| at("port", "must be 1 to 65535".into()))? as u16;
            let key = (scheme.to_string(), host, port);
            if origins.contains_key(&key) {
                return Err(at("host", format!("{key:?} is listed twice")));
            }
            let list = o
                .get("entries")
                .and_then(|v| v.as_array())
                .ok_or_else(|| at("entries", "must be a list".into()))?;
            let mut entries = Vec::with_capacity(list.len());
            for (i, e) in list.iter().enumerate() {
                let r = entry(e, &bodies, check_bodies).map_err(|(field, msg)| {
                    (
                        format!("origin {k}: entry {i}: "),
                        format!("{field}: {msg}"),
                    )
                })?;
                entries.push(r);
            }
            let mut by_path: HashMap<(String, String), Vec<usize>> = HashMap::new();
            for (i, e) in entries.iter().enumerate() {
                by_path
                    .entry((e.method.clone(), e.path.clone()))
                    .or_default()
                    .push(i);
            }
            let served = entries.iter().map(|_| AtomicUsize::new(0)).collect();
            order.push(key.clone());
            origins.insert(
                key,
                Origin {
                    entries,
                    by_path,
                    served,
                },
            );
        }
        let recorded_at_ms = match doc.get("recorded_at_ms") {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(
                v.as_u64()
                    .ok_or_else(|| top("recorded_at_ms", "must be a whole number of ms"))?,
            ),
        };
        Ok(Archive {
            recorded_at_ms,
            origins,
            order,
            volatile,
        })
    }

    /// Every recorded response, of every origin.
    pub fn len(&self) -> usize {
        self.origins.values().map(|o| o.entries.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The origins, in the manifest's order.
    pub fn origins(&self) -> &[OriginKey] {
        &self.order
    }

    /// The recorded response to `method target` (target: path and query as
    /// the request line gives them) for the origin `scheme://authority`, and
    /// how it matched; None: a miss.
    pub fn find(
        &self,
        scheme: &str,
        authority: &str,
        method: &str,
        target: &str,
    ) -> Option<(&Recorded, Match)> {
        let (host, port) = split_authority(authority, scheme)?;
        let origin = self.origins.get(&(scheme.to_string(), host, port))?;
        let target = target.split('#').next().unwrap_or("");
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        // A HEAD recorded as such, or else the GET of the same target (its head).
        let cands = origin
            .by_path
            .get(&(method.to_string(), path.to_string()))
            .or_else(|| {
                (method == "HEAD")
                    .then(|| origin.by_path.get(&("GET".to_string(), path.to_string())))
                    .flatten()
            })?;
        let want = self.params(query);
        let exact: Vec<usize> = cands
            .iter()
            .copied()
            .filter(|&i| self.params(&origin.entries[i].query) == want)
            .collect();
        if let Some(&first) = exact.first() {
            // Repeats in recorded order; the last again once all were served. (A HEAD takes no turn;
            // the order is the server process's, shared by every client of it.)
            let n = if method == "HEAD" {
                origin.served[first].load(Ordering::Relaxed)
            } else {
                origin.served[first].fetch_add(1, Ordering::Relaxed)
            };
            let i = exact[n.min(exact.len() - 1)];
            return Some((&origin.entries[i], Match::Exact));
        }
        let mut best: Option<(usize, f64)> = None;
        for &i in cands {
            let score = dice(&want, &self.params(&origin.entries[i].query));
            if best.is_none_or(|(_, s)| score > s) {
                best = Some((i, score));
            }
        }
        best.map(|(i, _)| (&origin.entries[i], Match::Fuzzy))
    }

    /// A query's `name=value` pairs, sorted (their order does not tell
    /// two queries apart), volatile names left out.
    fn params<'a>(&self, query: &'a str) -> Vec<&'a str> {
        let mut v: Vec<&str> = query
            .split('&')
            .filter(|p| !p.is_empty())
            .filter(|p| {
                let name = p.split('=').next().unwrap_or("");
                !self.volatile.iter().any(|v| v == name)
            })
            .collect();
        v.sort_unstable();
        v
    }
}

/// 2M/T: the pairs both queries have (each pair counted once per
/// occurrence), over all pairs of both; two empty queries are alike (1).
fn dice(a: &[&str], b: &[&str]) -> f64 {
    if a.is_empty() && b.is_empty() {
        return 1.0;
    }
    let mut rest: Vec<&str> = b.to_vec();
    let mut m = 0usize;
    for p in a {
        if let Some(j) = rest.iter().position(|q| q == p) {
            rest.swap_remove(j);
            m += 1;
        }
    }
    2.0 * m as f64 / (a.len() + b.len()) as f64
}

/// One entry of the manifest, checked. Errors: (field, what).
fn entry(
    e: &serde_json::Value,
    bodies: &Path,
    check_bodies: bool,
) -> Result<Recorded, (&'static str, String)> {
    let text = |f: &'static str| {
        e.get(f)
            .and_then(|v| v.as_str())
            .map(str::to_string)
            .ok_or((f, "must be a text".to_string()))
    };
    let method = text("method")?;
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(("method", format!("not a method: {method:?}")));
    }
    let path = text("path")?;
    if !path.starts_with('/') || path.contains(['?', '#']) {
        return Err((
            "path",
            format!("must start with / and hold no query: {path:?}"),
        ));
    }
    let query = text("query")?;
    let status = e
        .get("status")
        .and_then(|v| v.as_u64())
        .filter(|s| (200..=599).contains(s))
        .ok_or(("status", "must be 200 to 599".to_string()))? as u16;
    let content_type = text("content_type")?;
    if !header_value_ok(&content_type) {
        return Err((
            "content_type",
            format!("not a header value: {content_type:?}"),
        ));
    }
    let mut headers = Vec::new();
    for h in e
        .get("headers")
        .and_then(|v| v.as_array())
        .ok_or(("headers", "must be a list of [name, value]".to_string()))?
    {
        let pair = h
            .as_array()
            .filter(|p| p.len() == 2)
            .and_then(|p| Some((p[0].as_str()?, p[1].as_str()?)))
            .ok_or(("headers", format!("not a [name, value] pair: {h}")))?;
        if !header_name_ok(pair.0) || !header_value_ok(pair.1) {
            return Err(("headers", format!("not a header: {h}")));
        }
        if SERVER_SETS.contains(&pair.0.to_ascii_lowercase().as_str()) {
            return Err((
                "headers",
                format!(
                    "{:?}: the server sets it itself, or it is connection-specific (HTTP/2 and HTTP/3 refuse it)",
                    pair.0
                ),
            ));
        }
        headers.push((pair.0.to_ascii_lowercase(), pair.1.to_string()));
    }
    let sha = text("body")?;
    if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(("body", format!("not a body's sha256: {sha:?}")));
    }
    let bytes = e
        .get("bytes")
        .and_then(|v| v.as_u64())
        .ok_or(("bytes", "must be a whole number".to_string()))?;
    let body = bodies.join(&sha);
    if check_bodies {
        match std::fs::metadata(&body) {
            Ok(m) if m.len() == bytes => {}
            Ok(m) => {
                return Err((
                    "bytes",
                    format!("{bytes}, but {} has {}", body.display(), m.len()),
                ))
            }
            Err(err) => return Err(("body", format!("{}: {err}", body.display()))),
        }
    }
    let think = match e.get("server_ms") {
        None | Some(serde_json::Value::Null) => None,
        Some(v) => Some(
            v.as_f64()
                .filter(|ms| (0.0..=600_000.0).contains(ms))
                .map(|ms| Duration::from_micros((ms * 1000.0) as u64))
                .ok_or(("server_ms", format!("must be 0 to 600000 ms, got {v}")))?,
        ),
    };
    Ok(Recorded {
        method,
        path,
        query,
        status,
        content_type,
        headers,
        body,
        bytes,
        think,
    })
}

/// Headers a manifest may not carry: those the server sends itself (its
/// length, type and encoding, `Server`, `Timing-Allow-Origin`, `Alt-Svc`)
/// and the connection-specific ones HTTP/2 and HTTP/3 forbid. The
/// orchestrator leaves the same out at import (`sites.HOP_BY_HOP`,
/// `sites.SERVER_SET`).
pub const SERVER_SETS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "content-type",
    "content-encoding",
    "server",
    "timing-allow-origin",
    "alt-svc",
];

/// RFC 9110's token characters.
fn header_name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Visible ASCII, space and tab (no line breaks, nothing a header cannot carry).
fn header_value_ok(v: &str) -> bool {
    v.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(entries: serde_json::Value, volatile: &[&str]) -> Archive {
        let doc = serde_json::json!({"version": 2, "bodies": "/b", "volatile": volatile,
            "origins": [{"scheme": "https", "host": "a.test", "port": 443, "entries": entries}]});
        Archive::from_json(&doc, Path::new(""), false).unwrap()
    }

    fn e(path: &str, query: &str, sha: char) -> serde_json::Value {
        serde_json::json!({"method": "GET", "path": path, "query": query, "status": 200,
            "content_type": "text/plain", "headers": [], "body": sha.to_string().repeat(64),
            "bytes": 1})
    }

    fn found(a: &Archive, target: &str) -> Option<(char, Match)> {
        found_at(a, "https", "a.test", "GET", target)
    }

    fn found_at(
        a: &Archive,
        scheme: &str,
        authority: &str,
        method: &str,
        target: &str,
    ) -> Option<(char, Match)> {
        a.find(scheme, authority, method, target)
            .map(|(r, m)| (r.body.to_str().unwrap().chars().last().unwrap(), m))
    }

    #[test]
    fn exact_then_closest_query_then_miss() {
        let a = archive(
            serde_json::json!([
                e("/x", "a=1&b=2", 'a'),
                e("/x", "a=1&b=3&c=4", 'b'),
                e("/y", "", 'c')
            ]),
            &[],
        );
        assert_eq!(found(&a, "/x?a=1&b=2"), Some(('a', Match::Exact)));
        assert_eq!(found(&a, "/x?a=1&b=3&c=4"), Some(('b', Match::Exact)));
        // b=3 and c=4 in common with the second: 2*2/(3+3) against 2*1/(3+2).
        assert_eq!(found(&a, "/x?a=9&b=3&c=4"), Some(('b', Match::Fuzzy)));
        // One pair each in common: 2/(2+2) against 2/(2+3): the first.
        assert_eq!(found(&a, "/x?a=1&z=0"), Some(('a', Match::Fuzzy)));
        assert_eq!(found(&a, "/x"), Some(('a', Match::Fuzzy)));
        assert_eq!(found(&a, "/y"), Some(('c', Match::Exact)));
        assert_eq!(found(&a, "/y?cb=123"), Some(('c', Match::Fuzzy)));
        assert_eq!(found(&a, "/z"), None);
        assert_eq!(found_at(&a, "https", "a.test", "POST", "/y"), None);
        assert_eq!(
            found_at(&a, "https", "a.test", "HEAD", "/y"),
            Some(('c', Match::Exact))
        );
    }

    #[test]
    fn volatile_parameters_are_left_out() {
        let a = archive(
            serde_json::json!([e("/x", "v=1&cb=111", 'a'), e("/x", "v=2&cb=222", 'b')]),
            &["cb"],
        );
        assert_eq!(found(&a, "/x?v=2&cb=999"), Some(('b', Match::Exact)));
        assert_eq!(found(&a, "/x?cb=5&v=1"), Some(('a', Match::Exact)));
        assert_eq!(found(&a, "/x?v=1#frag"), Some(('a', Match::Exact)));
    }

    #[test]
    fn the_order_of_parameters_does_not_matter_and_a_recorded_head_answers_head() {
        let mut head = e("/x", "", 'f');
        head["method"] = "HEAD".into();
        let a = archive(serde_json::json!([e("/x", "a=1&b=2", 'a'), head]), &[]);
        assert_eq!(found(&a, "/x?b=2&a=1"), Some(('a', Match::Exact)));
        let (r, m) = a.find("https", "a.test", "HEAD", "/x").unwrap();
        assert_eq!((r.method.as_str(), m), ("HEAD", Match::Exact));
        assert_eq!(
            a.find("https", "a.test", "HEAD", "/x?a=1&b=2")
                .unwrap()
                .0
                .method,
            "HEAD"
        );
    }

    #[test]
    fn bad_entries_name_their_field() {
        let bad = |patch: serde_json::Value| {
            let mut x = e("/x", "", 'a');
            for (k, v) in patch.as_object().unwrap() {
                x[k] = v.clone();
            }
            let doc = serde_json::json!({"version": 2, "bodies": "/b", "origins": [
                {"scheme": "https", "host": "a", "port": 443, "entries": [e("/ok", "", 'a'), x]}]});
            let (place, msg) = Archive::from_json(&doc, Path::new(""), false).unwrap_err();
            format!("{place}{msg}").replace("origin 0: ", "")
        };
        assert!(bad(serde_json::json!({"status": 101})).starts_with("entry 1: status:"));
        assert!(bad(serde_json::json!({"path": "x"})).starts_with("entry 1: path:"));
        assert!(bad(serde_json::json!({"path": "/x?q"})).starts_with("entry 1: path:"));
        assert!(bad(serde_json::json!({"headers": [["bad name", "v"]]}))
            .starts_with("entry 1: headers:"));
        assert!(bad(serde_json::json!({"headers": [["x", "a\r\nb: c"]]}))
            .starts_with("entry 1: headers:"));
        assert!(bad(serde_json::json!({"body": "../../etc/passwd"})).starts_with("entry 1: body:"));
        for name in [
            "Content-Length",
            "transfer-encoding",
            "Connection",
            "alt-svc",
        ] {
            let msg = bad(serde_json::json!({"headers": [[name, "1"]]}));
            assert!(
                msg.starts_with("entry 1: headers:") && msg.contains("itself"),
                "{msg}"
            );
        }
        assert!(bad(serde_json::json!({"server_ms": -1})).starts_with("entry 1: server_ms:"));
        assert!(bad(serde_json::json!({"method": "get"})).starts_with("entry 1: method:"));
        let doc = serde_json::json!({"version": 1, "host": "a", "bodies": "/b", "entries": []});
        assert_eq!(
            Archive::from_json(&doc, Path::new(""), false)
                .unwrap_err()
                .1,
            "version: must be 2"
        );
        let origin = |o: serde_json::Value| {
            let doc = serde_json::json!({"version": 2, "bodies": "/b", "origins": [o]});
            let (place, msg) = Archive::from_json(&doc, Path::new(""), false).unwrap_err();
            format!("{place}{msg}")
        };
        let ok = serde_json::json!({"scheme": "https", "host": "a", "port": 443, "entries": []});
        for (field, bad) in [
            ("scheme", serde_json::json!("ftp")),
            ("host", serde_json::json!("../x")),
            ("port", serde_json::json!(0)),
            ("port", serde_json::json!(70000)),
        ] {
            let mut o = ok.clone();
            o[field] = bad;
            assert!(
                origin(o).starts_with(&format!("origin 0: {field}:")),
                "{field}"
            );
        }
    }

    #[test]
    fn the_origin_is_scheme_host_and_port() {
        let doc = serde_json::json!({"version": 2, "bodies": "/b", "origins": [
            {"scheme": "http", "host": "www.a.test", "port": 80, "entries": [e("/", "", 'a')]},
            {"scheme": "https", "host": "www.a.test", "port": 443, "entries": [e("/", "", 'b')]},
            {"scheme": "https", "host": "api.a.test", "port": 8443, "entries": [e("/", "", 'd')]},
            {"scheme": "https", "host": "cdn.a.test", "port": 443, "entries": [e("/", "", 'c')]}]});
        let a = Archive::from_json(&doc, Path::new(""), false).unwrap();
        let hit = |scheme: &str, authority: &str| {
            found_at(&a, scheme, authority, "GET", "/").map(|x| x.0)
        };
        // The cleartext redirect and the page of one host are two origins.
        assert_eq!(hit("http", "www.a.test"), Some('a'));
        assert_eq!(hit("http", "www.a.test:80"), Some('a'));
        assert_eq!(hit("https", "www.a.test"), Some('b'));
        assert_eq!(hit("https", "WWW.A.TEST.:443"), Some('b'));
        assert_eq!(hit("https", "api.a.test:8443"), Some('d'));
        assert_eq!(hit("https", "api.a.test"), None);
        assert_eq!(hit("http", "cdn.a.test"), None);
        assert_eq!(hit("https", "cdn.a.test"), Some('c'));
        assert_eq!(hit("https", "other.test"), None);
        assert_eq!(hit("https", ""), None);
        assert_eq!(hit("https", "cdn.a.test:x"), None);
        assert_eq!(a.origins().len(), 4);
        assert_eq!(
            split_authority("[2001:db8::1]:8443", "https"),
            Some(("2001:db8::1".into(), 8443))
        );
    }

    #[test]
    fn responses_recorded_twice_are_served_in_their_order() {
        let a = archive(
            serde_json::json!([e("/n", "", '1'), e("/n", "", '2'), e("/n", "x=1", '3')]),
            &[],
        );
        let seq: Vec<char> = (0..4).map(|_| found(&a, "/n").unwrap().0).collect();
        assert_eq!(seq, vec!['1', '2', '2', '2']);
        assert_eq!(found(&a, "/n?x=1"), Some(('3', Match::Exact)));
    }

    /// The orchestrator's manifest (the format's owner writes the fixture:
    /// tests/unit/test_sites.py) reads here, bodies and all.
    #[test]
    fn reads_the_orchestrators_manifest() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/golden");
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("replay.json")).unwrap())
                .unwrap();
        let a = Archive::from_json(&doc, &dir, true).unwrap();
        assert_eq!(
            a.origins(),
            &[
                ("http".to_string(), "www.shop.test".to_string(), 80),
                ("https".to_string(), "www.shop.test".to_string(), 443)
            ]
        );
        let (r, m) = a
            .find("https", "www.shop.test", "GET", "/app.js?v=7&session=zzz")
            .unwrap();
        assert_eq!(
            (m, r.status, r.content_type.as_str()),
            (Match::Exact, 200, "text/javascript")
        );
        assert_eq!(r.think, Some(Duration::from_millis(40)));
        assert!(r
            .headers
            .contains(&("cache-control".into(), "max-age=600".into())));
        let (r, _) = a.find("https", "www.shop.test", "GET", "/old").unwrap();
        assert_eq!(r.status, 301);
        assert!(r.headers.iter().any(|(n, _)| n == "location"));
        // The cleartext origin: its recorded redirect to https only.
        let (r, _) = a.find("http", "www.shop.test", "GET", "/").unwrap();
        assert_eq!(r.status, 301);
        assert!(a.find("http", "www.shop.test", "GET", "/app.js").is_none());
    }
}
