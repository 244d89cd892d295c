//! A browser's request schedule (`--schedule FILE`): the page's requests as a
//! browser made them, each with the request whose response it waited for and
//! how long after that response it was asked for (the browser's parsing,
//! script and layout time). The loader replays it instead of discovering the
//! page's objects from its HTML and CSS, so that a light client asks for what
//! a browser asks for, when a browser would, over the connections a browser
//! would open (the loader's own policy per origin: up to `--connections`
//! HTTP/1.1 connections, one HTTP/2 or HTTP/3 connection).
//!
//! This module owns the file's format; satbench's Python side writes it
//! (`satbench pages schedule`, learned from a Chromium trial or a HAR) and
//! checks its files with `satbench-load --check-schedule FILE`.
//!
//! ```json
//! {"schedule": 1, "page": "https://server.test/shop/", "source": "...",
//!  "requests": [
//!   {"url": "https://server.test/shop/", "after": null, "delay_ms": 0},
//!   {"url": "https://server.test/shop/style.css", "after": 0, "delay_ms": 3.5}
//!  ]}
//! ```
//!
//! `requests[0]` is the page itself, asked for at the start (`after` null);
//! every other request waits for the end of the response of an earlier one
//! (`after`, its index) or for the start (null), then for `delay_ms`. So the
//! requests form a tree in index order and every schedule terminates.
//! `page`, if given, is the first request's URL; `source` and `notes` are
//! free text; any other key is refused.

use crate::url::Url;
use serde_json::Value;

/// Requests a schedule may hold.
pub const MAX_REQUESTS: usize = 10_000;
/// The longest wait after a response (ms).
pub const MAX_DELAY_MS: f64 = 600_000.0;

#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub url: Url,
    /// The request whose response's end this one waits for (None: the load's start).
    pub after: Option<usize>,
    pub delay_ms: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    pub requests: Vec<Request>,
    /// The requests that wait for each one, by index.
    pub children: Vec<Vec<usize>>,
}

/// What is wrong with a schedule, and where (`requests[3].after`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {why}")]
pub struct ScheduleError {
    pub at: String,
    pub why: String,
}

fn err(at: impl Into<String>, why: impl Into<String>) -> ScheduleError {
    ScheduleError {
        at: at.into(),
        why: why.into(),
    }
}

impl Schedule {
    /// Parse and check a schedule's text.
    pub fn parse(text: &str) -> Result<Schedule, ScheduleError> {
        let doc: Value = serde_json::from_str(text)
            .map_err(|e| err(format!("line {}", e.line()), format!("not JSON: {e}")))?;
        let top = doc
            .as_object()
            .ok_or_else(|| err("the file", "must be a JSON object"))?;
        for k in top.keys() {
            if !matches!(
                k.as_str(),
                "schedule" | "page" | "source" | "notes" | "requests"
            ) {
                return Err(err(
                    format!("{k:?}"),
                    "unknown key (a schedule has schedule, page, source, notes and requests)",
                ));
            }
        }
        match top.get("schedule").and_then(Value::as_u64) {
            Some(1) => {}
            _ => return Err(err("schedule", "must be 1 (the format's version)")),
        }
        let reqs = top
            .get("requests")
            .and_then(Value::as_array)
            .ok_or_else(|| err("requests", "must be a list of requests"))?;
        if reqs.is_empty() || reqs.len() > MAX_REQUESTS {
            return Err(err(
                "requests",
                format!("must hold 1 to {MAX_REQUESTS} requests, has {}", reqs.len()),
            ));
        }
        let mut requests = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.iter().enumerate() {
            let at = |k: &str| format!("requests[{i}].{k}");
            let o = r
                .as_object()
                .ok_or_else(|| err(format!("requests[{i}]"), "must be an object"))?;
            if let Some(k) = o
                .keys()
                .find(|k| !matches!(k.as_str(), "url" | "after" | "delay_ms"))
            {
                return Err(err(
                    at(k),
                    "unknown key (a request has url, after and delay_ms)",
                ));
            }
            let text = o
                .get("url")
                .and_then(Value::as_str)
                .ok_or_else(|| err(at("url"), "must be a URL"))?;
            let url = Url::parse(text).map_err(|e| err(at("url"), e.to_string()))?;
            let after = match o.get("after") {
                None | Some(Value::Null) => None,
                Some(v) => match v.as_u64() {
                    Some(n) if (n as usize) < i => Some(n as usize),
                    _ if i == 0 => {
                        return Err(err(at("after"), "the first request is the page: null"))
                    }
                    _ => {
                        return Err(err(
                            at("after"),
                            format!(
                                "must be null or an earlier request's index (0 to {}), got {v}",
                                i - 1
                            ),
                        ))
                    }
                },
            };
            if i == 0 && after.is_some() {
                return Err(err(at("after"), "the first request is the page: null"));
            }
            let delay_ms = match o.get("delay_ms") {
                None => 0.0,
                Some(v) => match v.as_f64() {
                    Some(d) if (0.0..=MAX_DELAY_MS).contains(&d) => d,
                    _ => {
                        return Err(err(
                            at("delay_ms"),
                            format!("must be a number of ms from 0 to {MAX_DELAY_MS}, got {v}"),
                        ))
                    }
                },
            };
            requests.push(Request {
                url,
                after,
                delay_ms,
            });
        }
        if let Some(page) = top.get("page") {
            let first = requests[0].url.to_string();
            if page
                .as_str()
                .and_then(|p| Url::parse(p).ok())
                .map(|u| u.to_string())
                != Some(first.clone())
            {
                return Err(err(
                    "page",
                    format!("must be the first request's URL ({first}), got {page}"),
                ));
            }
        }
        let mut children = vec![Vec::new(); requests.len()];
        for (i, r) in requests.iter().enumerate() {
            if let Some(p) = r.after {
                children[p].push(i);
            }
        }
        Ok(Schedule { requests, children })
    }

    /// The requests asked for at the start.
    pub fn roots(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.requests.len()).filter(|&i| self.requests[i].after.is_none())
    }

    /// The page's URL (the first request's).
    pub fn page(&self) -> &Url {
        &self.requests[0].url
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"{"schedule": 1, "page": "https://s.test/p/", "source": "test",
        "requests": [
          {"url": "https://s.test/p/", "after": null, "delay_ms": 0},
          {"url": "https://s.test/p/a.css", "after": 0, "delay_ms": 2.5},
          {"url": "https://s.test/p/b.png", "after": 1},
          {"url": "https://t.test/c.js", "after": null, "delay_ms": 10}
        ]}"#;

    #[test]
    fn a_schedule_is_a_tree_in_index_order() {
        let s = Schedule::parse(OK).unwrap();
        assert_eq!(s.requests.len(), 4);
        assert_eq!(s.page().to_string(), "https://s.test/p/");
        assert_eq!(s.roots().collect::<Vec<_>>(), [0, 3]);
        assert_eq!(s.children, [vec![1], vec![2], vec![], vec![]]);
        assert_eq!(s.requests[2].delay_ms, 0.0);
        assert_eq!(s.requests[1].delay_ms, 2.5);
    }

    #[test]
    fn bad_schedules_name_the_field() {
        let cases: [(&str, &str); 10] = [
            ("[]", "the file"),
            (r#"{"schedule": 2, "requests": []}"#, "schedule"),
            (r#"{"schedule": 1, "requests": []}"#, "requests"),
            (
                r#"{"schedule": 1, "page": "https://s.test/q/", "requests": [{"url": "https://s.test/"}]}"#,
                "page",
            ),
            (
                r#"{"schedule": 1, "extra": 1, "requests": []}"#,
                "\"extra\"",
            ),
            (
                r#"{"schedule": 1, "requests": [{"url": "https://s.test/", "after": 0}]}"#,
                "requests[0].after",
            ),
            (
                r#"{"schedule": 1, "requests": [{"url": "https://s.test/"}, {"url": "https://s.test/a", "after": 1}]}"#,
                "requests[1].after",
            ),
            (
                r#"{"schedule": 1, "requests": [{"url": "https://s.test/"}, {"url": "https://s.test/a", "delay_ms": -1}]}"#,
                "requests[1].delay_ms",
            ),
            (
                r#"{"schedule": 1, "requests": [{"url": "ftp://s.test/"}]}"#,
                "requests[0].url",
            ),
            (
                r#"{"schedule": 1, "requests": [{"url": "https://s.test/", "prio": 1}]}"#,
                "requests[0].prio",
            ),
        ];
        for (text, at) in cases {
            let e = Schedule::parse(text).unwrap_err();
            assert_eq!(e.at, at, "{text}: {e}");
        }
        assert!(Schedule::parse("{").unwrap_err().at.starts_with("line "));
    }
}
