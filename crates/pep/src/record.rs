//! What the PEP writes: the ready line, one line per connection, the
//! summary. Each is one JSON object on one line; field order is fixed.
//!
//! The log file (`--log`) starts with the ready object as
//! `{"event":"start",...}`, has one `{"event":"conn",...}` line per
//! connection when it closes, and ends with `{"event":"summary",...}`.
//! Standard output has `{"ready":true,...}` once listening and
//! `{"summary":true,...}` at exit.

use crate::relay::{By, Dir, End, How, Leg, Relay};
use crate::settings::{Face, LegSettings, Placement};
use crate::sock::{Readback, TcpInfo};
use serde::Serialize;
use std::net::SocketAddr;

/// `TCP_INFO` of a leg as logged (names as the server's `tcp_info.jsonl`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TcpInfoRecord {
    pub cc: Option<String>,
    pub state: u8,
    pub ca_state: u8,
    pub srtt_us: u32,
    pub rttvar_us: u32,
    pub min_rtt_us: u32,
    pub cwnd: u32,
    pub ssthresh: u32,
    pub mss: u32,
    pub pmtu: u32,
    pub total_retrans: u32,
    pub lost: u32,
    pub bytes_retrans: u64,
    #[serde(rename = "delivery_rate_Bps")]
    pub delivery_rate_bytes_s: u64,
    #[serde(rename = "pacing_rate_Bps")]
    pub pacing_rate_bytes_s: u64,
    /// The last delivery rate sample was taken while the sender had nothing to send.
    pub app_limited: bool,
    /// Chrono counters (µs): sending, limited by the peer's receive window,
    /// limited by the send buffer.
    pub busy_time_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub bytes_sent: u64,
    /// Still in flight when the record was taken (packets), and not yet
    /// sent (bytes): a graceful close leaves them to the kernel.
    pub unacked: u32,
    pub notsent_bytes: u32,
    pub segs_out: u32,
    pub segs_in: u32,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
    /// The SYN carried data (TCP Fast Open).
    pub syn_data: bool,
}

impl TcpInfoRecord {
    pub fn new(i: &TcpInfo, cc: Option<String>) -> TcpInfoRecord {
        TcpInfoRecord {
            cc,
            state: i.state,
            ca_state: i.ca_state,
            srtt_us: i.rtt,
            rttvar_us: i.rttvar,
            min_rtt_us: i.min_rtt,
            cwnd: i.snd_cwnd,
            ssthresh: i.snd_ssthresh,
            mss: i.snd_mss,
            pmtu: i.pmtu,
            total_retrans: i.total_retrans,
            lost: i.lost,
            bytes_retrans: i.bytes_retrans,
            delivery_rate_bytes_s: i.delivery_rate,
            pacing_rate_bytes_s: i.pacing_rate,
            app_limited: i.flags & 1 != 0,
            busy_time_us: i.busy_time,
            rwnd_limited_us: i.rwnd_limited,
            sndbuf_limited_us: i.sndbuf_limited,
            bytes_acked: i.bytes_acked,
            bytes_received: i.bytes_received,
            bytes_sent: i.bytes_sent,
            unacked: i.unacked,
            notsent_bytes: i.notsent_bytes,
            segs_out: i.segs_out,
            segs_in: i.segs_in,
            snd_wnd: i.snd_wnd,
            rcv_wnd: i.rcv_wnd,
            syn_data: i.syn_data(),
        }
    }
}

fn by_name(b: By) -> &'static str {
    match b {
        By::Client => "client",
        By::Server => "server",
        By::Pep => "pep",
    }
}

fn how_name(h: How) -> &'static str {
    match h {
        How::Fin => "fin",
        How::Rst => "rst",
        How::Error => "error",
        How::Timeout => "timeout",
        How::Exit => "exit",
    }
}

fn end_name(e: End) -> &'static str {
    match e {
        End::Fin => "fin",
        End::Rst => "rst",
        End::Error(_) => "error",
        End::Aborted => "aborted",
    }
}

/// What is known of a leg apart from the relay.
#[derive(Clone, Debug, Default)]
pub struct LegFacts {
    /// Local and peer address (the outgoing leg's local one is absent if
    /// its socket could not be made).
    pub local: Option<SocketAddr>,
    pub peer: Option<SocketAddr>,
    /// cwnd and receive window when the handshake was done: the route's
    /// initcwnd and initrwnd at work.
    pub init: Option<(u32, u32)>,
    /// At close.
    pub tcp_info: Option<TcpInfoRecord>,
}

/// One leg in a connection's line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LegRecord {
    pub faces: Face,
    pub local: Option<String>,
    pub peer: Option<String>,
    /// fin (its peer's FIN), rst (its peer's reset), error, aborted (reset
    /// by the PEP); null while it was open.
    pub end: Option<&'static str>,
    pub errno: Option<i32>,
    pub init_cwnd: Option<u32>,
    pub init_rcv_wnd: Option<u32>,
    pub tcp_info: Option<TcpInfoRecord>,
}

/// Who closed first and how.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FirstRecord {
    pub by: &'static str,
    pub how: &'static str,
    pub errno: Option<i32>,
}

/// One connection, written when it closes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConnRecord {
    pub event: &'static str,
    pub id: u64,
    pub accept_unix_ns: u64,
    /// The outgoing leg's handshake seen done; null if it never was.
    pub connect_unix_ns: Option<u64>,
    pub close_unix_ns: u64,
    #[serde(rename = "in")]
    pub in_leg: LegRecord,
    pub out: LegRecord,
    /// Bytes written to the server and to the client.
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Bytes read but not written (a reset or an abort dropped them).
    pub dropped_up: u64,
    pub dropped_down: u64,
    pub first: Option<FirstRecord>,
    /// fin (both directions closed with FINs), rst, error, timeout, exit.
    pub outcome: Option<&'static str>,
    /// Both directions spliced to the end (else one fell back to read/write).
    pub splice: bool,
}

/// The times of a connection (Unix ns).
#[derive(Clone, Copy, Debug, Default)]
pub struct Times {
    pub accept: u64,
    pub connect: Option<u64>,
    pub close: u64,
}

impl ConnRecord {
    pub fn new(
        id: u64,
        relay: &Relay,
        placement: Placement,
        legs: [&LegFacts; 2],
        times: Times,
        splice: bool,
    ) -> ConnRecord {
        let leg = |l: Leg| {
            let f = legs[l.index()];
            let end = relay.end(l);
            LegRecord {
                faces: placement.face(l),
                local: f.local.map(|a| a.to_string()),
                peer: f.peer.map(|a| a.to_string()),
                end: end.map(end_name),
                errno: match end {
                    Some(End::Error(e)) => Some(e),
                    _ => None,
                },
                init_cwnd: f.init.map(|i| i.0),
                init_rcv_wnd: f.init.map(|i| i.1),
                tcp_info: f.tcp_info.clone(),
            }
        };
        ConnRecord {
            event: "conn",
            id,
            accept_unix_ns: times.accept,
            connect_unix_ns: times.connect,
            close_unix_ns: times.close,
            in_leg: leg(Leg::In),
            out: leg(Leg::Out),
            bytes_up: relay.bytes(Dir::Up),
            bytes_down: relay.bytes(Dir::Down),
            dropped_up: relay.dropped(Dir::Up),
            dropped_down: relay.dropped(Dir::Down),
            first: relay.first().map(|f| FirstRecord {
                by: by_name(f.by),
                how: how_name(f.how),
                errno: f.errno,
            }),
            outcome: relay.outcome().map(how_name),
            splice,
        }
    }
}

/// A leg's settings at start-up: as asked for and as read back.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LegReady {
    pub faces: Face,
    pub requested: LegSettings,
    pub effective: Readback,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Legs {
    #[serde(rename = "in")]
    pub in_leg: LegReady,
    pub out: LegReady,
}

/// The namespace's sysctls that matter to the PEP, as read at start-up.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Sysctls {
    pub ip_forward: Option<i32>,
    /// Read with `--ipv6` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ipv6_forwarding: Option<i32>,
    pub tcp_fastopen: Option<i32>,
    pub tcp_congestion_control: Option<String>,
}

/// The ready line (stdout) and the log's first line.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Ready {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    pub version: &'static str,
    pub pid: u32,
    pub start_unix_ns: u64,
    pub listen: String,
    /// The IPv6 listener's address (`--ipv6`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub listen6: Option<String>,
    pub port: u16,
    pub placement: Placement,
    pub max_conns: usize,
    pub idle_timeout_s: Option<f64>,
    pub log: Option<String>,
    /// Relaying with splice(2) (else read/write).
    pub splice: bool,
    /// Each direction's buffer, bytes (the pipe's size as the kernel set it).
    pub buffer_bytes: usize,
    pub nofile_limit: u64,
    pub legs: Legs,
    pub sysctl: Sysctls,
    /// Settings that will not work as asked, in words.
    pub warnings: Vec<String>,
}

impl Ready {
    /// The same object as the log's first line.
    pub fn as_start(&self) -> Ready {
        Ready {
            event: Some("start"),
            ready: None,
            ..self.clone()
        }
    }
}

/// Counters over the PEP's life.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<bool>,
    /// Connections taken in and relayed (or tried).
    pub accepted: u64,
    /// Refused with a reset: over `--max-conns`.
    pub refused_cap: u64,
    /// Refused with a reset: addressed to the PEP's own port on a local
    /// address (not intercepted; relaying it would loop).
    pub refused_local: u64,
    /// Accept failures other than a vanished connection.
    pub accept_errors: u64,
    /// Connections by outcome.
    pub closed_fin: u64,
    pub closed_rst: u64,
    pub closed_error: u64,
    pub closed_timeout: u64,
    /// Open when the PEP was told to exit (reset then).
    pub open_at_exit: u64,
    /// The outgoing leg's handshake never completed.
    pub connect_failed: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// Directions that fell back from splice to read/write.
    pub splice_fallbacks: u64,
    /// Log lines that could not be written.
    pub log_errors: u64,
    pub uptime_s: f64,
}

impl Summary {
    pub fn count(&mut self, r: &ConnRecord) {
        match r.outcome {
            Some("fin") => self.closed_fin += 1,
            Some("rst") => self.closed_rst += 1,
            Some("error") => self.closed_error += 1,
            Some("timeout") => self.closed_timeout += 1,
            Some("exit") => self.open_at_exit += 1,
            _ => {}
        }
        if r.connect_unix_ns.is_none() {
            self.connect_failed += 1;
        }
        self.bytes_up += r.bytes_up;
        self.bytes_down += r.bytes_down;
    }
}

/// One JSON line (with its newline).
pub fn line<T: Serialize>(v: &T) -> String {
    let mut s = serde_json::to_string(v).expect("records serialize");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::Event;
    use crate::time::Instant;

    fn addr(s: &str) -> Option<SocketAddr> {
        Some(s.parse().unwrap())
    }

    fn info() -> TcpInfo {
        TcpInfo {
            state: 7,
            rtt: 600_123,
            rttvar: 2_000,
            min_rtt: 598_000,
            snd_cwnd: 42,
            snd_ssthresh: 2147483647,
            snd_mss: 1448,
            pmtu: 1500,
            total_retrans: 3,
            bytes_retrans: 4344,
            delivery_rate: 1_250_000,
            pacing_rate: 2_500_000,
            flags: 1,
            busy_time: 900_000,
            rwnd_limited: 10,
            sndbuf_limited: 20,
            bytes_acked: 1_000_001,
            bytes_received: 312,
            bytes_sent: 1_004_345,
            segs_out: 700,
            segs_in: 350,
            unacked: 3,
            snd_wnd: 65535,
            rcv_wnd: 64240,
            options: 0x20 | 0x7,
            ..TcpInfo::default()
        }
    }

    #[test]
    fn a_connection_line() {
        let mut r = Relay::new(Instant::ZERO, [100, 100], None);
        let t = Instant::from_millis(1);
        r.handle(t, Event::Connected);
        r.handle(t, Event::Readable(Leg::In));
        r.handle(t, Event::Writable(Leg::Out));
        r.poll_action();
        r.handle(t, Event::Read(Dir::Up, 12));
        r.poll_action();
        r.handle(t, Event::Wrote(Dir::Up, 12));
        r.handle(t, Event::Reset(Leg::Out));
        let in_leg = LegFacts {
            local: addr("198.18.1.2:443"),
            peer: addr("10.0.0.2:40000"),
            init: Some((10, 64240)),
            tcp_info: Some(TcpInfoRecord::new(&info(), Some("cubic".into()))),
        };
        let out_leg = LegFacts {
            local: addr("10.0.0.2:40000"),
            peer: addr("198.18.1.2:443"),
            init: None,
            tcp_info: None,
        };
        let rec = ConnRecord::new(
            7,
            &r,
            Placement::Terminal,
            [&in_leg, &out_leg],
            Times {
                accept: 1_700_000_000_000_000_000,
                connect: Some(1_700_000_000_600_000_000),
                close: 1_700_000_001_000_000_000,
            },
            true,
        );
        assert_eq!(
            line(&rec),
            concat!(
                r#"{"event":"conn","id":7,"accept_unix_ns":1700000000000000000,"#,
                r#""connect_unix_ns":1700000000600000000,"close_unix_ns":1700000001000000000,"#,
                r#""in":{"faces":"terrestrial","local":"198.18.1.2:443","peer":"10.0.0.2:40000","#,
                r#""end":"aborted","errno":null,"init_cwnd":10,"init_rcv_wnd":64240,"#,
                r#""tcp_info":{"cc":"cubic","state":7,"ca_state":0,"srtt_us":600123,"rttvar_us":2000,"#,
                r#""min_rtt_us":598000,"cwnd":42,"ssthresh":2147483647,"mss":1448,"pmtu":1500,"#,
                r#""total_retrans":3,"lost":0,"bytes_retrans":4344,"delivery_rate_Bps":1250000,"#,
                r#""pacing_rate_Bps":2500000,"app_limited":true,"busy_time_us":900000,"#,
                r#""rwnd_limited_us":10,"sndbuf_limited_us":20,"bytes_acked":1000001,"#,
                r#""bytes_received":312,"bytes_sent":1004345,"unacked":3,"notsent_bytes":0,"#,
                r#""segs_out":700,"segs_in":350,"#,
                r#""snd_wnd":65535,"rcv_wnd":64240,"syn_data":true}},"#,
                r#""out":{"faces":"satellite","local":"10.0.0.2:40000","peer":"198.18.1.2:443","#,
                r#""end":"rst","errno":null,"init_cwnd":null,"init_rcv_wnd":null,"tcp_info":null},"#,
                r#""bytes_up":12,"bytes_down":0,"dropped_up":0,"dropped_down":0,"#,
                r#""first":{"by":"server","how":"rst","errno":null},"outcome":"rst","splice":true}"#,
                "\n"
            )
        );
        let mut s = Summary::default();
        s.count(&rec);
        assert_eq!((s.closed_rst, s.bytes_up, s.connect_failed), (1, 12, 0));
    }

    #[test]
    fn a_failed_connect_line() {
        let mut r = Relay::new(Instant::ZERO, [100, 100], None);
        r.handle(Instant::ZERO, Event::Failed(Leg::Out, libc::ENETUNREACH));
        let in_leg = LegFacts::default();
        let out_leg = LegFacts {
            peer: addr("198.18.1.2:80"),
            ..LegFacts::default()
        };
        let rec = ConnRecord::new(
            1,
            &r,
            Placement::Gateway,
            [&in_leg, &out_leg],
            Times::default(),
            false,
        );
        let j = serde_json::to_value(&rec).unwrap();
        assert_eq!(j["out"]["faces"], "terrestrial");
        assert_eq!(j["in"]["faces"], "satellite");
        assert_eq!(j["out"]["end"], "error");
        assert_eq!(j["out"]["errno"], libc::ENETUNREACH);
        assert_eq!(j["out"]["local"], serde_json::Value::Null);
        assert_eq!(j["first"]["how"], "error");
        assert_eq!(j["first"]["errno"], libc::ENETUNREACH);
        assert_eq!(j["connect_unix_ns"], serde_json::Value::Null);
        let mut s = Summary::default();
        s.count(&rec);
        assert_eq!((s.closed_error, s.connect_failed), (1, 1));
    }

    #[test]
    fn summary_lines() {
        let s = Summary {
            summary: Some(true),
            accepted: 3,
            refused_cap: 1,
            open_at_exit: 1,
            bytes_up: 10,
            uptime_s: 1.5,
            ..Summary::default()
        };
        assert_eq!(
            line(&s),
            concat!(
                r#"{"summary":true,"accepted":3,"refused_cap":1,"refused_local":0,"accept_errors":0,"#,
                r#""closed_fin":0,"closed_rst":0,"closed_error":0,"closed_timeout":0,"open_at_exit":1,"#,
                r#""connect_failed":0,"bytes_up":10,"bytes_down":0,"splice_fallbacks":0,"log_errors":0,"#,
                r#""uptime_s":1.5}"#,
                "\n"
            )
        );
        let log = Summary {
            event: Some("summary"),
            summary: None,
            ..s
        };
        assert!(line(&log).starts_with(r#"{"event":"summary","accepted":3,"#));
    }
}
