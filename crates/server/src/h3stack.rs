//! What the two HTTP/3 stacks share, whichever drives the connections:
//! quiche's sans-IO loop in [`crate::quic`] and quinn's tasks in
//! [`crate::quic_quinn`].
//!
//! - [`H3Stack`]: how `main.rs` starts either one (bind, then serve until
//!   stopped) and what each says of itself (its name, the congestion
//!   controller that runs for `--cc`);
//! - the limits both advertise (streams, header section, Initial size);
//! - [`ConnectionRecord`]: the access log's `connection` line, one type for
//!   both stacks: what a stack cannot tell is null, never guessed;
//! - [`admit`]: what a stack does with a new handshake at
//!   `--max-quic-conns`, decided without I/O (the stacks only carry it out).

use crate::files::Site;
use crate::log::JsonLines;
use crate::rt_state::RtState;
use crate::Options;
use serde::Serialize;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// Streams a client may open at once (both stacks).
pub const QUIC_MAX_STREAMS_BIDI: u64 = 256;
pub const QUIC_MAX_STREAMS_UNI: u64 = 16;
/// The largest HTTP/3 request header section accepted (both stacks).
pub const H3_MAX_FIELD_SECTION_BYTES: u64 = 64 * 1024;
/// The smallest datagram that may carry a client's Initial (RFC 9000 14.1).
pub const MIN_INITIAL_DATAGRAM: usize = 1200;

/// The family a congestion control is recorded as (cubic, bbr or reno),
/// whatever the stack calls its implementation.
pub fn cc_family(cc: &str) -> &'static str {
    match cc {
        "bbr" => "bbr",
        "reno" => "reno",
        _ => "cubic",
    }
}

/// What a stack serves with: the options, the files, the two logs and the
/// real-time endpoints' state (shared with the TCP server).
pub struct Serving {
    pub opts: Options,
    pub root: Arc<Site>,
    pub access: JsonLines,
    pub quic_info: JsonLines,
    pub realtime: Arc<RtState>,
}

/// One HTTP/3 stack behind `--quic-stack`.
pub trait H3Stack: Sized + Send + 'static {
    /// The stack's name in every log line (`quic_stack`).
    const NAME: &'static str;
    /// Why it could not start (printed as `satbench-server: <message>`).
    type Error: std::error::Error;
    /// The congestion controller that runs for `--cc cubic|bbr|reno`,
    /// recorded as `cc_impl` beside the family.
    fn cc_impl(cc: &str) -> String;
    /// Bind the UDP socket and set the stack up; nothing is served yet.
    fn bind(serving: Serving) -> Result<Self, Self::Error>;
    /// Serve until `stop` is set, then close and log every connection.
    fn run(self, stop: Arc<AtomicBool>);
}

/// The access log's record of a QUIC connection, written once at its close
/// (or when it is evicted). Python reads it in `endpoints/satbench_server.py`;
/// `tests/fixtures/golden/server-quic-connections.jsonl` is its golden form
/// (written by the crate root's test `golden_quic_connection_records`).
#[derive(Debug, Clone, Serialize)]
pub struct ConnectionRecord {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub conn: String,
    pub transport: &'static str,
    pub quic_stack: &'static str,
    /// Empty when no handshake completed.
    pub alpn: String,
    pub cc: &'static str,
    pub cc_impl: String,
    pub peer: String,
    pub t_open_unix_ns: u64,
    pub t_close_unix_ns: u64,
    pub requests: u64,
    pub packets_sent: Option<u64>,
    pub packets_recv: Option<u64>,
    pub packets_lost: Option<u64>,
    pub packets_retrans: Option<u64>,
    pub bytes_sent: Option<u64>,
    pub bytes_recv: Option<u64>,
    pub bytes_lost: Option<u64>,
    pub srtt_ms: Option<f64>,
    pub cwnd: Option<u64>,
    pub resumed: Option<bool>,
    pub early_requests: Option<u64>,
    pub paced_packets: Option<u64>,
    pub paced_wait_ms: Option<f64>,
    pub data_blocked_sent: Option<u64>,
    pub stream_data_blocked_sent: Option<u64>,
    pub peer_initial_max_data: Option<u64>,
    pub peer_initial_max_stream_data: Option<u64>,
    /// Milliseconds per limit (`limits::Tally::json`); null when the
    /// connection was never sampled.
    pub limited_ms: Option<serde_json::Value>,
    pub error: Option<String>,
}

/// Why an evicted connection was closed.
pub const EVICTED: &str = "evicted: --max-quic-conns reached";

impl ConnectionRecord {
    /// A record with what every stack knows of any connection; the counters
    /// are null until the stack fills in what it can tell.
    pub fn new<S: H3Stack>(
        conn: &str,
        cc: &str,
        peer: std::net::SocketAddr,
        t_open_unix_ns: u64,
    ) -> Self {
        ConnectionRecord {
            kind: "connection",
            conn: conn.to_string(),
            transport: "quic",
            quic_stack: S::NAME,
            alpn: String::new(),
            cc: cc_family(cc),
            cc_impl: S::cc_impl(cc),
            peer: peer.to_string(),
            t_open_unix_ns,
            t_close_unix_ns: crate::log::unix_ns(),
            requests: 0,
            packets_sent: None,
            packets_recv: None,
            packets_lost: None,
            packets_retrans: None,
            bytes_sent: None,
            bytes_recv: None,
            bytes_lost: None,
            srtt_ms: None,
            cwnd: None,
            resumed: None,
            early_requests: None,
            paced_packets: None,
            paced_wait_ms: None,
            data_blocked_sent: None,
            stream_data_blocked_sent: None,
            peer_initial_max_data: None,
            peer_initial_max_stream_data: None,
            limited_ms: None,
            error: None,
        }
    }

    pub fn write(&self, access: &JsonLines) {
        access.write(&serde_json::to_value(self).expect("a record serialises"));
    }
}

/// What to do with a new handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admit<K> {
    /// There is room: accept it.
    Accept,
    /// Full, and its address is not validated: answer with a stateless
    /// Retry, so a flood of abandoned handshakes costs no state.
    Retry,
    /// Full: accept it in place of this connection, the oldest whose
    /// handshake has not completed (log it as [`EVICTED`]).
    Evict(K),
    /// Full of established connections: drop it.
    Refuse,
}

/// The decision at `--max-quic-conns` (`limit`), given how many connections
/// are open, whether a Retry may be sent (the stack can, the address is not
/// yet validated, and the client has not retried already), and the
/// connections whose handshake has not completed with their opening times.
/// Established connections are never evicted: a flood of Initials cannot
/// lock clients out, and cannot cut a page load short either.
pub fn admit<K>(
    open: usize,
    limit: usize,
    may_retry: bool,
    half_open: impl IntoIterator<Item = (K, u64)>,
) -> Admit<K> {
    if open < limit {
        return Admit::Accept;
    }
    if may_retry {
        return Admit::Retry;
    }
    match half_open.into_iter().min_by_key(|(_, t_open)| *t_open) {
        Some((k, _)) => Admit::Evict(k),
        None => Admit::Refuse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_accepted_whatever_else_holds() {
        assert_eq!(admit(0, 1, true, [(1, 5)]), Admit::Accept);
        assert_eq!(
            admit(999, 1000, false, Vec::<(u8, u64)>::new()),
            Admit::Accept
        );
    }

    #[test]
    fn at_the_cap_an_unvalidated_address_is_retried_before_anything_is_evicted() {
        assert_eq!(admit(2, 2, true, [(7, 1), (8, 2)]), Admit::Retry);
    }

    #[test]
    fn at_the_cap_the_oldest_half_open_connection_makes_room() {
        assert_eq!(
            admit(3, 3, false, [(7, 30), (8, 10), (9, 20)]),
            Admit::Evict(8)
        );
        // Over the cap (the limit was lowered, or several arrived at once): the same.
        assert_eq!(admit(5, 3, false, [(7, 30)]), Admit::Evict(7));
    }

    #[test]
    fn established_connections_are_never_evicted() {
        assert_eq!(admit(3, 3, false, Vec::<(u8, u64)>::new()), Admit::Refuse);
    }

    #[test]
    fn a_record_carries_its_stack_and_nulls_for_what_it_cannot_tell() {
        struct Toy;
        impl H3Stack for Toy {
            const NAME: &'static str = "toy";
            type Error = std::io::Error;
            fn cc_impl(cc: &str) -> String {
                format!("toy {cc}")
            }
            fn bind(_: Serving) -> Result<Self, Self::Error> {
                Ok(Toy)
            }
            fn run(self, _: Arc<AtomicBool>) {}
        }
        let r = ConnectionRecord::new::<Toy>("q1", "bbr", "10.0.0.1:443".parse().unwrap(), 5);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["type"], "connection");
        assert_eq!(
            (v["quic_stack"].as_str(), v["cc"].as_str()),
            (Some("toy"), Some("bbr"))
        );
        assert_eq!(v["cc_impl"], "toy bbr");
        assert!(v["resumed"].is_null() && v["packets_sent"].is_null() && v["limited_ms"].is_null());
    }
}
