//! The access log's `request` line: one type for every server that answers
//! a request (HTTP/1.1 and HTTP/2 in [`crate::tcp`], HTTP/3 on quiche in
//! [`crate::quic`] and on quinn in [`crate::quic_quinn`], the real-time
//! endpoints in [`crate::rt_serve`] and [`crate::rt_wt`]). Python reads it in
//! `endpoints/satbench_server.py`; `tests/fixtures/golden/server-access.jsonl`
//! holds one as the binary writes it, and the unit test below one of each
//! shape.
//!
//! A field a server cannot tell is absent, never guessed (quinn cannot say
//! whether a request came as 0-RTT data; only HTTP/3 has streams).

use crate::log::{unix_ns, JsonLines};
use serde::Serialize;

#[derive(Debug, Clone, Serialize)]
pub struct RequestRecord {
    #[serde(rename = "type")]
    kind: &'static str,
    pub conn: String,
    /// `http/1.1`, `http/1.0`, `h2` or `h3`.
    pub proto: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quic_stack: Option<&'static str>,
    pub tls: bool,
    /// The congestion control's family, and the implementation that ran it.
    pub cc: String,
    pub cc_impl: String,
    pub method: String,
    /// The request target, with its query.
    pub path: String,
    /// The origin the request named (HTTP/2 and HTTP/3 `:authority`, else `Host`).
    pub authority: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_length: Option<u64>,
    /// The request body's bytes (the upload sink's payload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_bytes: Option<u64>,
    /// The HTTP/3 stream.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stream: Option<u64>,
    pub t_request_unix_ns: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_body_done_unix_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_response_unix_ns: Option<u64>,
    /// Whether the request came as 0-RTT early data (quiche only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub early_data: Option<bool>,
    /// How a recorded site's archive answered it: `exact`, `fuzzy` or `miss`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<&'static str>,
    /// Response body bytes handed to the transport, when it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t_done_unix_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What one kind of endpoint adds (the real-time ones: `realtime`,
    /// `session`, `webtransport`).
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl RequestRecord {
    /// A request as it arrives: who asked for what, over which connection.
    pub fn new(
        conn: &str,
        proto: &'static str,
        tls: bool,
        cc: (&str, String),
        method: &str,
        path: &str,
        t_request_unix_ns: u64,
    ) -> Self {
        RequestRecord {
            kind: "request",
            conn: conn.to_string(),
            proto,
            quic_stack: None,
            tls,
            cc: cc.0.to_string(),
            cc_impl: cc.1,
            method: method.to_string(),
            path: path.to_string(),
            authority: None,
            status: None,
            content_length: None,
            request_bytes: None,
            stream: None,
            t_request_unix_ns,
            t_body_done_unix_ns: None,
            t_response_unix_ns: None,
            early_data: None,
            replay: None,
            body_bytes: None,
            t_done_unix_ns: None,
            error: None,
            extra: serde_json::Map::new(),
        }
    }

    /// The answer ended (wholly sent, or stopped by `error`): log it.
    pub fn finish(mut self, access: &JsonLines, body_bytes: u64, error: Option<&str>) {
        self.body_bytes = Some(body_bytes);
        self.t_done_unix_ns = Some(unix_ns());
        if let Some(e) = error.filter(|e| !e.is_empty()) {
            self.error = Some(e.to_string());
        }
        self.write(access);
    }

    pub fn write(&self, access: &JsonLines) {
        access.write(&self.value());
    }

    /// As a JSON object (what the real-time endpoints keep adding to).
    pub fn value(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a record serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_server_cannot_tell_is_absent_and_extras_sit_beside_the_rest() {
        let mut r = RequestRecord::new(
            "q1",
            "h3",
            true,
            ("bbr", "quinn bbr".into()),
            "GET",
            "/a?b=1",
            5,
        );
        r.quic_stack = Some("quinn");
        r.extra.insert("realtime".into(), "wt".into());
        let v = r.value();
        assert_eq!(v["type"], "request");
        assert_eq!(
            (v["path"].as_str(), v["realtime"].as_str()),
            (Some("/a?b=1"), Some("wt"))
        );
        for absent in [
            "early_data",
            "stream",
            "status",
            "error",
            "replay",
            "body_bytes",
        ] {
            assert!(v.get(absent).is_none(), "{absent}");
        }
        // The origin is always said, null when the request named none.
        assert!(v["authority"].is_null());
    }
}
