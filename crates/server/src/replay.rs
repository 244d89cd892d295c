//! A recorded origin replayed: the requests one host answered when a site
//! was recorded, and which of them answers a request now.
//!
//! `--replay FILE` reads the origin's replay manifest, written by the
//! orchestrator (`satbench.endpoints.sites.replay_manifest`, the format's
//! one owner; `tests/fixtures/golden/replay.json` is its output, read by a
//! test here):
//!
//! ```text
//! {"version": 1, "host": "cdn.example.test", "bodies": "/abs/dir",
//!  "volatile": ["cb", "_"],
//!  "entries": [{"method": "GET", "path": "/a.js", "query": "v=2", "status": 200,
//!               "content_type": "text/javascript", "headers": [["cache-control", "max-age=60"]],
//!               "body": "<sha256 of the decoded body, a file under bodies>", "bytes": 1234,
//!               "server_ms": 12.5}]}
//! ```
//!
//! Matching is Web Page Replay's: a request is answered by the recorded
//! request of the same method (HEAD by a GET) and path whose query is the
//! same (exact), or else by the one of that path whose query parameters
//! have the most in common with it (fuzzy: the Dice coefficient 2M/T over
//! the `name=value` pairs, M the pairs both have, T the pairs of both; the
//! first recorded wins a tie), so a query that changes between runs (a
//! cache-buster, a session id) still finds its response. Parameters named
//! in `volatile` are left out of both queries before comparing. A path
//! never recorded is a miss: 404, and the access log says so
//! (`"replay": "miss"`), so a trial can count what its recording lacked.
//!
//! Sans-IO: loading reads the manifest and checks every body's size once;
//! [`Archive::find`] is a pure function of the request line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The manifest version this server reads.
pub const VERSION: u64 = 1;

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

/// One origin's recorded requests.
#[derive(Debug)]
pub struct Archive {
    pub host: String,
    entries: Vec<Recorded>,
    volatile: Vec<String>,
    /// (method, path) to the entries recorded for it, in recorded order.
    by_path: HashMap<(String, String), Vec<usize>>,
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
        let host = doc
            .get("host")
            .and_then(|v| v.as_str())
            .ok_or_else(|| top("host", "must be a text"))?
            .to_string();
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
            .get("entries")
            .and_then(|v| v.as_array())
            .ok_or_else(|| top("entries", "must be a list"))?;
        let mut entries = Vec::with_capacity(list.len());
        for (i, e) in list.iter().enumerate() {
            let r = entry(e, &bodies, check_bodies)
                .map_err(|(field, msg)| (format!("entry {i}: "), format!("{field}: {msg}")))?;
            entries.push(r);
        }
        let mut by_path: HashMap<(String, String), Vec<usize>> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            by_path
                .entry((e.method.clone(), e.path.clone()))
                .or_default()
                .push(i);
        }
        Ok(Archive {
            host,
            entries,
            volatile,
            by_path,
        })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The recorded response to `method target` (target: path and query as
    /// the request line gives them), and how it matched; None: a miss.
    pub fn find(&self, method: &str, target: &str) -> Option<(&Recorded, Match)> {
        let target = target.split('#').next().unwrap_or("");
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        // A HEAD recorded as such, or else the GET of the same target (its head).
        let cands = self
            .by_path
            .get(&(method.to_string(), path.to_string()))
            .or_else(|| {
                (method == "HEAD")
                    .then(|| self.by_path.get(&("GET".to_string(), path.to_string())))
                    .flatten()
            })?;
        let want = self.params(query);
        let mut best: Option<(usize, f64)> = None;
        for &i in cands {
            let have = self.params(&self.entries[i].query);
            if have == want {
                return Some((&self.entries[i], Match::Exact));
            }
            let score = dice(&want, &have);
            if best.is_none_or(|(_, s)| score > s) {
                best = Some((i, score));
            }
        }
        best.map(|(i, _)| (&self.entries[i], Match::Fuzzy))
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
        let doc = serde_json::json!({"version": 1, "host": "a.test", "bodies": "/b",
            "volatile": volatile, "entries": entries});
        Archive::from_json(&doc, Path::new(""), false).unwrap()
    }

    fn e(path: &str, query: &str, sha: char) -> serde_json::Value {
        serde_json::json!({"method": "GET", "path": path, "query": query, "status": 200,
            "content_type": "text/plain", "headers": [], "body": sha.to_string().repeat(64),
            "bytes": 1})
    }

    fn found(a: &Archive, target: &str) -> Option<(char, Match)> {
        a.find("GET", target)
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
        assert_eq!(a.find("POST", "/y").map(|(_, m)| m), None);
        assert_eq!(a.find("HEAD", "/y").map(|(_, m)| m), Some(Match::Exact));
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
        let (r, m) = a.find("HEAD", "/x").unwrap();
        assert_eq!((r.method.as_str(), m), ("HEAD", Match::Exact));
        assert_eq!(a.find("HEAD", "/x?a=1&b=2").unwrap().0.method, "HEAD");
    }

    #[test]
    fn bad_entries_name_their_field() {
        let bad = |patch: serde_json::Value| {
            let mut x = e("/x", "", 'a');
            for (k, v) in patch.as_object().unwrap() {
                x[k] = v.clone();
            }
            let doc = serde_json::json!({"version": 1, "host": "a", "bodies": "/b",
                "entries": [e("/ok", "", 'a'), x]});
            let (place, msg) = Archive::from_json(&doc, Path::new(""), false).unwrap_err();
            format!("{place}{msg}")
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
        let doc = serde_json::json!({"version": 2, "host": "a", "bodies": "/b", "entries": []});
        assert_eq!(
            Archive::from_json(&doc, Path::new(""), false)
                .unwrap_err()
                .1,
            "version: must be 1"
        );
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
        assert_eq!(a.host, "www.shop.test");
        let (r, m) = a.find("GET", "/app.js?v=7&session=zzz").unwrap();
        assert_eq!(
            (m, r.status, r.content_type.as_str()),
            (Match::Exact, 200, "text/javascript")
        );
        assert_eq!(r.think, Some(Duration::from_millis(40)));
        assert!(r
            .headers
            .contains(&("cache-control".into(), "max-age=600".into())));
        let (r, _) = a.find("GET", "/old").unwrap();
        assert_eq!(r.status, 301);
        assert!(r.headers.iter().any(|(n, _)| n == "location"));
    }
}
