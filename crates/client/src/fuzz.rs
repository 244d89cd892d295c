//! Fuzz targets of the loader's parsers of untrusted text (`fuzzkit`, on
//! stable Rust): HTML and CSS discovery (`discover.rs`) and URL parsing and
//! resolution (`url.rs`). Seeds in `fuzz-corpus/<target>/`.
//!
//! Invariants: no panic; every URL that parses or that a reference resolves
//! to is well-formed: a lower-case host of URL characters, a path that
//! starts with `/` and holds only printable ASCII that needs no escaping, no
//! fragment, and it survives `Display` and `Url::parse` unchanged (the page
//! loader re-parses the URLs it fetched, `page.rs`); a resolved relative
//! reference keeps the base's origin and has no dot segments.
//!
//! `cargo test` runs each target for half a second;
//! `SATBENCH_FUZZ_SECONDS=60 cargo test --release -p satbench-client fuzz_`
//! for a minute each (see `fuzzkit` for the other variables).

use crate::discover::{css_refs, html_refs};
use crate::url::Url;
use fuzzkit::{Config, Features};

fn corpus(target: &str) -> String {
    format!("{}/fuzz-corpus/{target}", env!("CARGO_MANIFEST_DIR"))
}

const BASE: &str = "https://s.test/pages/shop/index.html?v=2";

/// The well-formedness every URL the loader builds must have.
fn check_url(u: &Url, what: &str) {
    assert!(!u.host.is_empty(), "{what}: empty host in {u:?}");
    assert_eq!(u.host, u.host.to_ascii_lowercase(), "{what}: {u:?}");
    assert!(
        u.host.bytes().all(|c| c.is_ascii_alphanumeric()
            || b"-._~!$&'()*+,;=%".contains(&c)
            || (u.host.starts_with('[') && (c == b':' || c == b'[' || c == b']'))),
        "{what}: host with characters a URL host cannot have: {u:?}"
    );
    assert!(u.path.starts_with('/'), "{what}: {u:?}");
    assert!(
        u.path
            .bytes()
            .all(|c| c.is_ascii_graphic() && !b"#\"<>\\^`{|}".contains(&c)),
        "{what}: path with a character that must be escaped: {u:?}"
    );
    let s = u.to_string();
    assert_eq!(
        Url::parse(&s).as_ref(),
        Ok(u),
        "{what}: {s:?} does not parse back to {u:?}"
    );
}

/// What a reference starts with, in a few classes (a feature).
fn first_class(r: &str) -> u64 {
    match r.bytes().next() {
        None => 0,
        Some(c) if c.is_ascii_alphanumeric() => 1,
        Some(b'/') => 2,
        Some(b'.') => 3,
        Some(b'?') => 4,
        Some(c) if c.is_ascii_whitespace() => 5,
        Some(c) if c >= 0x80 => 6,
        Some(_) => 7,
    }
}

fn no_dot_segments(path: &str) -> bool {
    let p = path.split('?').next().unwrap_or("");
    !p.split('/').any(|s| s == "." || s == "..")
}

/// Resolve a reference against `base` and check what comes out.
fn resolve(base: &Url, r: &str, f: &mut Features) {
    let t = r.trim();
    let t = t.split('#').next().unwrap_or("");
    let lower = t.to_ascii_lowercase();
    let absolute = lower.starts_with("http://") || lower.starts_with("https://");
    let kind = if t.is_empty() {
        0
    } else if absolute {
        1
    } else if t.starts_with("//") {
        2
    } else if t.starts_with('/') {
        3
    } else if t.starts_with('?') {
        4
    } else {
        5
    };
    match base.join(r) {
        Some(u) => {
            f.add(100 + kind);
            check_url(&u, &format!("{base} joined with {r:?}"));
            if kind >= 3 {
                assert_eq!(u.origin(), base.origin(), "{base} + {r:?}: {u:?}");
                assert!(no_dot_segments(&u.path), "{base} + {r:?}: {u:?}");
                if !u.path.starts_with("//") {
                    // An absolute path reference to itself is itself.
                    assert_eq!(base.join(&u.path).as_ref(), Some(&u), "{base} + {r:?}");
                }
            }
            f.add_count(110 + kind, u.path.matches('/').count());
            f.add(120 + u.path.contains('?') as u64);
            f.add(130 + u.path.contains('%') as u64);
        }
        None => f.add(200 + kind),
    }
}

#[test]
fn fuzz_url() {
    let base = Url::parse(BASE).expect("base");
    fuzzkit::run(
        Config::new("url", corpus("url"))
            .dict(&[
                "http://",
                "https://",
                "//",
                "/",
                "../",
                "./",
                "..",
                ".",
                "?",
                "#",
                ":",
                "@",
                "[::1]",
                ":443",
                ":80",
                ":0",
                ":65536",
                "%2e",
                "%",
                " ",
                "\t",
                "data:",
                "javascript:",
                "\n",
            ])
            .max_len(512),
        |b, f| {
            let s = String::from_utf8_lossy(b);
            let (first, r) = s.split_once('\n').unwrap_or((BASE, &s));
            let parsed = Url::parse(first);
            match &parsed {
                Ok(u) => {
                    f.add(1);
                    f.add(2 + u.https as u64);
                    f.add_count(4, u.host.len());
                    check_url(u, &format!("parse({first:?})"));
                }
                Err(e) => {
                    let kind = ["not an http", "no host", "bad port", "bad host"]
                        .iter()
                        .position(|k| e.0.contains(k));
                    f.add(5 + kind.map_or(9, |k| k as u64));
                }
            }
            resolve(parsed.as_ref().unwrap_or(&base), r, f);
        },
    );
}

#[test]
fn fuzz_html() {
    let base = Url::parse(BASE).expect("base");
    fuzzkit::run(
        Config::new("html", corpus("html"))
            .dict(&[
                "<img ",
                "<script ",
                "<link ",
                "<style>",
                "</style>",
                "</script>",
                "<!--",
                "-->",
                " src=",
                " href=",
                " rel=stylesheet",
                "\"",
                "'",
                ">",
                "/>",
                "url(",
                ")",
                "@import ",
                "/*",
                "*/",
                "&amp;",
                "data:",
                "//",
                "../",
                "<IMG SRC=",
                "\u{e9}",
            ])
            .max_len(8192),
        |b, f| {
            let s = String::from_utf8_lossy(b);
            let refs = html_refs(&s);
            f.add_count(1, refs.len());
            for r in &refs {
                f.add(2 + first_class(r));
                f.add_count(3, r.len());
                resolve(&base, r, f);
            }
        },
    );
}

#[test]
fn fuzz_css() {
    let base = Url::parse(BASE).expect("base");
    fuzzkit::run(
        Config::new("css", corpus("css"))
            .dict(&[
                "url(", "URL(", ")", "@import ", "@IMPORT", "/*", "*/", "\"", "'", ";", "{", "}",
                "data:", "//", "../", "\u{e9}",
            ])
            .max_len(8192),
        |b, f| {
            let s = String::from_utf8_lossy(b);
            let refs = css_refs(&s);
            f.add_count(1, refs.len());
            for r in &refs {
                f.add(2 + first_class(r));
                f.add_count(3, r.len());
                resolve(&base, r, f);
            }
        },
    );
}

/// The event-stream parser (`sse.rs`): any bytes either parse or are
/// refused (never a panic), and the events do not depend on how the
/// stream was cut into chunks: the whole input at once and the same input
/// split at a point the input chooses give the same events (or both fail).
#[test]
fn fuzz_sse() {
    use crate::sse::{Event, SseParser};
    fn run(chunks: &[&[u8]]) -> Result<Vec<Event>, crate::sse::SseError> {
        let mut p = SseParser::new();
        let mut out = Vec::new();
        for c in chunks {
            p.feed(c, &mut out)?;
        }
        Ok(out)
    }
    fuzzkit::run(
        Config::new("sse", corpus("sse"))
            .dict(&[
                "data: ",
                "data:",
                "event: ",
                "id: ",
                ": ",
                "\n",
                "\r",
                "\r\n",
                "\n\n",
                "retry: ",
                "{\"seq\":",
                "hello",
                "done",
            ])
            .max_len(1024),
        |b, f| {
            let split = b.first().map(|c| *c as usize % (b.len() + 1)).unwrap_or(0);
            let whole = run(&[b]);
            let cut = run(&[&b[..split], &b[split..]]);
            assert_eq!(whole, cut, "split at {split}");
            match whole {
                Ok(events) => {
                    f.add(1);
                    f.add_count(2, events.len());
                    for e in &events {
                        f.add_bytes(3, e.kind.as_bytes());
                        assert!(!e.kind.contains(['\n', '\r']) && !e.data.contains('\r'));
                    }
                }
                Err(_) => f.add(4),
            }
        },
    );
}

/// A browser's schedule file (`schedule.rs`): whatever the text, the parser
/// returns a schedule whose requests form a tree in index order (every
/// `after` names an earlier request, the first has none, so replaying it
/// terminates and asks for each request once) with delays in range and
/// well-formed URLs, or an error naming a field.
#[test]
fn fuzz_schedule() {
    use crate::schedule::{Schedule, MAX_DELAY_MS};
    fuzzkit::run(
        Config::new("schedule", corpus("schedule"))
            .dict(&[
                "{\"schedule\": 1, \"requests\": [",
                "{\"url\": \"https://s.test/\", \"after\": null, \"delay_ms\": 0}",
                "{\"url\": \"https://s.test/a.css\", \"after\": 0, \"delay_ms\": 1.5}",
                "\"after\": ",
                "\"delay_ms\": ",
                "\"url\": ",
                "\"page\": ",
                "\"notes\": ",
                "null",
                "-1",
                "1e309",
                "600000.1",
                "18446744073709551616",
                "]}",
                ", ",
            ])
            .max_len(4096),
        |b, f| {
            let s = String::from_utf8_lossy(b);
            match Schedule::parse(&s) {
                Ok(sch) => {
                    f.add(1);
                    f.add_count(2, sch.requests.len());
                    assert!(sch.requests[0].after.is_none(), "{s:?}");
                    let mut asked = vec![0usize; sch.requests.len()];
                    for (i, r) in sch.requests.iter().enumerate() {
                        check_url(&r.url, &format!("requests[{i}]"));
                        assert!((0.0..=MAX_DELAY_MS).contains(&r.delay_ms), "{s:?}");
                        if let Some(p) = r.after {
                            assert!(p < i, "{s:?}");
                            f.add(3);
                        }
                    }
                    // Replaying: the roots, then each done request's children.
                    let mut todo: Vec<usize> = sch.roots().collect();
                    while let Some(i) = todo.pop() {
                        asked[i] += 1;
                        todo.extend(&sch.children[i]);
                    }
                    assert!(asked.iter().all(|&n| n == 1), "{s:?}: {asked:?}");
                }
                Err(e) => {
                    assert!(!e.at.is_empty() && !e.why.is_empty(), "{s:?}");
                    f.add(10 + e.at.len().min(20) as u64);
                }
            }
        },
    );
}
