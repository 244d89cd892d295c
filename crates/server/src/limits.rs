//! What limited a QUIC sender, interval by interval: a sans-IO classifier
//! fed one observation of a connection per sample (every 10 ms, and at
//! close), the same for quiche and quinn. The stacks only read their
//! counters into an [`Observation`]; the rule, the flow-control tracking and
//! the time per class live here, tested in simulated values.
//!
//! # The rule
//!
//! The interval since the previous sample is put in one class, judged from
//! the state at the sample and the counters' change over the interval, in
//! this order:
//!
//! 1. `application`: nothing was pending: no response bytes waiting at the
//!    application and nothing queued in the transport.
//! 2. `cwnd`: `bytes_in_flight + mss >= cwnd` (the window has no room for one
//!    more full packet).
//! 3. `flow_control`: data was pending but the peer's credit was exhausted:
//!    the sender sent DATA_BLOCKED (connection) or STREAM_DATA_BLOCKED
//!    (stream) in the interval, or had sent one earlier and has made no
//!    progress since (see [`FcTracker`]). Both stacks send these frames when
//!    they are blocked (RFC 9000 §4.1); neither exposes the peer's current
//!    MAX_DATA, so the frames are the signal.
//! 4. `pacing`: data pending, cwnd and credit available, and a packet held
//!    for its send time. quiche: this server holds the packet itself until
//!    `SendInfo.at`. quinn paces inside quinn-proto and does not expose its
//!    pacer; it reports to its congestion controller whether it was
//!    application-limited (nothing to send, not blocked by congestion control
//!    or pacing), so "not application-limited while the window has room" is
//!    its pacer holding data.
//! 5. `application`: data pending at the application but not handed to the
//!    transport (the sending loop itself).
//!
//! `receive_window` is a TCP-only class (`tcp_info.jsonl`'s chrono counters).

use serde_json::json;

/// The class of an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitedBy {
    Cwnd,
    FlowControl,
    Pacing,
    Application,
}

impl LimitedBy {
    pub const ALL: [LimitedBy; 4] = [
        LimitedBy::Cwnd,
        LimitedBy::FlowControl,
        LimitedBy::Pacing,
        LimitedBy::Application,
    ];

    /// The name in `quic_info.jsonl` and the access log's `limited_ms`.
    pub fn name(self) -> &'static str {
        match self {
            LimitedBy::Cwnd => "cwnd",
            LimitedBy::FlowControl => "flow_control",
            LimitedBy::Pacing => "pacing",
            LimitedBy::Application => "application",
        }
    }
}

/// The numbers the rule looks at.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub cwnd: u64,
    pub bytes_in_flight: u64,
    /// One full packet (the maximum UDP payload).
    pub mss: u64,
    /// Response bytes the application has not yet handed to the transport.
    pub app_pending: bool,
    /// Data the transport has and did not send (quiche: a held packet;
    /// quinn: not application-limited).
    pub transport_pending: bool,
    /// Blocked by the peer's connection- or stream-level flow control.
    pub fc_blocked: bool,
    /// A packet held for its send time.
    pub pacer_holding: bool,
}

/// The rule of the module doc.
pub fn classify(s: &Sample) -> LimitedBy {
    if !s.app_pending && !s.transport_pending {
        LimitedBy::Application
    } else if s.bytes_in_flight + s.mss >= s.cwnd {
        LimitedBy::Cwnd
    } else if s.fc_blocked {
        LimitedBy::FlowControl
    } else if s.pacer_holding {
        LimitedBy::Pacing
    } else {
        LimitedBy::Application
    }
}

/// Whether the sender is blocked by flow control, from the BLOCKED frames it
/// sent. A stack sends one such frame per limit it runs into, so the state
/// is sticky: blocked from the interval in which a frame went out until the
/// sender makes progress (more than two packets' worth of `progress` bytes
/// in an interval without a new frame).
#[derive(Clone, Debug, Default)]
pub struct FcTracker {
    data_blocked: u64,
    stream_data_blocked: u64,
    progress: u64,
    conn: bool,
    stream: bool,
}

impl FcTracker {
    /// Feed the cumulative counters; returns (connection blocked, stream blocked).
    pub fn observe(
        &mut self,
        data_blocked_sent: u64,
        stream_data_blocked_sent: u64,
        progress: u64,
        mss: u64,
    ) -> (bool, bool) {
        let new_conn = data_blocked_sent > self.data_blocked;
        let new_stream = stream_data_blocked_sent > self.stream_data_blocked;
        let moved = progress.saturating_sub(self.progress) > 2 * mss;
        self.conn = new_conn || (self.conn && !moved);
        self.stream = new_stream || (self.stream && !moved);
        self.data_blocked = data_blocked_sent;
        self.stream_data_blocked = stream_data_blocked_sent;
        self.progress = progress;
        (self.conn, self.stream)
    }
}

/// Milliseconds spent in each class.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tally {
    ms: [f64; 4],
}

impl Tally {
    pub fn add(&mut self, class: LimitedBy, ms: f64) {
        self.ms[class as usize] += ms;
    }

    pub fn get(&self, class: LimitedBy) -> f64 {
        self.ms[class as usize]
    }

    /// `{"cwnd": ms, "flow_control": ms, "pacing": ms, "application": ms}`.
    pub fn json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for c in LimitedBy::ALL {
            m.insert(c.name().into(), json!(self.get(c)));
        }
        m.into()
    }
}

/// One connection's counters as a stack reads them at a sample.
#[derive(Clone, Copy, Debug, Default)]
pub struct Observation {
    pub cwnd: u64,
    pub bytes_in_flight: u64,
    pub mss: u64,
    pub app_pending: bool,
    pub transport_pending: bool,
    pub pacer_holding: bool,
    /// Cumulative DATA_BLOCKED frames sent.
    pub data_blocked_sent: u64,
    /// Cumulative STREAM_DATA_BLOCKED frames sent.
    pub stream_data_blocked_sent: u64,
    /// Cumulative bytes of progress (quiche: stream bytes accepted; quinn:
    /// bytes sent).
    pub progress: u64,
}

/// What a sample concluded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verdict {
    pub limited_by: LimitedBy,
    pub conn_blocked: bool,
    pub stream_blocked: bool,
    /// Length of the interval the verdict covers.
    pub interval_ms: f64,
}

/// Per connection: flow-control state and time per class.
#[derive(Clone, Debug, Default)]
pub struct Sampler {
    last_ns: Option<u64>,
    fc: FcTracker,
    pub tally: Tally,
}

impl Sampler {
    /// A sampler whose first interval starts at `t_ns` (the connection's
    /// opening), so that the classes add up to the connection's lifetime.
    pub fn starting(t_ns: u64) -> Sampler {
        Sampler {
            last_ns: Some(t_ns),
            ..Default::default()
        }
    }

    /// Judge the interval ending at `t_ns` (any monotonic nanoseconds).
    pub fn sample(&mut self, t_ns: u64, o: &Observation) -> Verdict {
        let (conn_blocked, stream_blocked) = self.fc.observe(
            o.data_blocked_sent,
            o.stream_data_blocked_sent,
            o.progress,
            o.mss,
        );
        let limited_by = classify(&Sample {
            cwnd: o.cwnd,
            bytes_in_flight: o.bytes_in_flight,
            mss: o.mss,
            app_pending: o.app_pending,
            transport_pending: o.transport_pending,
            fc_blocked: conn_blocked || stream_blocked,
            pacer_holding: o.pacer_holding,
        });
        let interval_ms = self
            .last_ns
            .map_or(0.0, |l| t_ns.saturating_sub(l) as f64 / 1e6);
        self.last_ns = Some(t_ns);
        self.tally.add(limited_by, interval_ms);
        Verdict {
            limited_by,
            conn_blocked,
            stream_blocked,
            interval_ms,
        }
    }
}

/// One line of `quic_info.jsonl`; fields a stack does not know are null.
#[derive(Clone, Debug, Default)]
pub struct QuicInfo {
    pub t_unix_ns: u64,
    pub conn: String,
    pub quic_stack: &'static str,
    pub cc: &'static str,
    pub cwnd: u64,
    pub bytes_in_flight: u64,
    pub srtt_ms: f64,
    pub min_rtt_ms: Option<f64>,
    /// The rate the sender's pacer enforces, bits/s.
    pub pacing_rate_bps: Option<u64>,
    /// The congestion controller's own pacing rate when it differs (quinn's BBR).
    pub cc_pacing_rate_bps: Option<u64>,
    pub delivery_rate_bps: Option<u64>,
    pub bytes_sent: u64,
    pub bytes_acked: Option<u64>,
    pub bytes_lost: u64,
    pub data_blocked_sent: u64,
    pub stream_data_blocked_sent: u64,
    pub pacer_holding: Option<bool>,
    pub app_pending: bool,
    pub transport_pending: bool,
    pub at_close: bool,
}

impl QuicInfo {
    pub fn json(&self, v: &Verdict) -> serde_json::Value {
        let mut j = json!({
            "t_unix_ns": self.t_unix_ns, "conn": self.conn, "quic_stack": self.quic_stack,
            "cc": self.cc, "cwnd": self.cwnd, "bytes_in_flight": self.bytes_in_flight,
            "srtt_ms": self.srtt_ms, "min_rtt_ms": self.min_rtt_ms,
            "pacing_rate_bps": self.pacing_rate_bps, "cc_pacing_rate_bps": self.cc_pacing_rate_bps,
            "delivery_rate_bps": self.delivery_rate_bps,
            "bytes_sent": self.bytes_sent, "bytes_acked": self.bytes_acked,
            "bytes_lost": self.bytes_lost,
            "data_blocked_sent": self.data_blocked_sent,
            "stream_data_blocked_sent": self.stream_data_blocked_sent,
            "conn_fc_blocked": v.conn_blocked, "stream_fc_blocked": v.stream_blocked,
            "pacer_holding": self.pacer_holding, "app_pending": self.app_pending,
            "transport_pending": self.transport_pending,
            "limited_by": v.limited_by.name(), "interval_ms": v.interval_ms,
        });
        if self.at_close {
            j["at_close"] = true.into();
        }
        j
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1350;

    fn busy() -> Sample {
        Sample {
            cwnd: 100 * MSS,
            bytes_in_flight: 50 * MSS,
            mss: MSS,
            app_pending: true,
            ..Default::default()
        }
    }

    #[test]
    fn nothing_pending_is_the_application() {
        let s = Sample {
            app_pending: false,
            bytes_in_flight: 100 * MSS,
            ..busy()
        };
        assert_eq!(classify(&s), LimitedBy::Application);
    }

    #[test]
    fn a_full_window_is_cwnd_within_one_packet() {
        let full = Sample {
            bytes_in_flight: 99 * MSS,
            fc_blocked: true,
            pacer_holding: true,
            ..busy()
        };
        assert_eq!(classify(&full), LimitedBy::Cwnd);
        let room = Sample {
            bytes_in_flight: 99 * MSS - 1,
            ..busy()
        };
        assert_ne!(classify(&room), LimitedBy::Cwnd);
        // Only the transport has data (quinn after the application's last write).
        let t = Sample {
            app_pending: false,
            transport_pending: true,
            bytes_in_flight: 100 * MSS,
            ..busy()
        };
        assert_eq!(classify(&t), LimitedBy::Cwnd);
    }

    #[test]
    fn credit_before_pacing_before_application() {
        let fc = Sample {
            fc_blocked: true,
            pacer_holding: true,
            ..busy()
        };
        assert_eq!(classify(&fc), LimitedBy::FlowControl);
        let paced = Sample {
            pacer_holding: true,
            ..busy()
        };
        assert_eq!(classify(&paced), LimitedBy::Pacing);
        assert_eq!(classify(&busy()), LimitedBy::Application);
    }

    #[test]
    fn flow_control_blocking_is_sticky_until_progress() {
        let mut fc = FcTracker::default();
        assert_eq!(fc.observe(0, 0, 10_000, MSS), (false, false));
        // A DATA_BLOCKED goes out.
        assert_eq!(fc.observe(1, 0, 10_100, MSS), (true, false));
        // No new frame, no progress: still blocked.
        assert_eq!(fc.observe(1, 0, 10_200, MSS), (true, false));
        // MAX_DATA arrived: data moves again.
        assert_eq!(fc.observe(1, 0, 10_200 + 3 * MSS, MSS), (false, false));
        // A stream limit, and a new frame in the same interval as progress.
        assert_eq!(fc.observe(1, 1, 50_000, MSS), (false, true));
    }

    #[test]
    fn the_sampler_tallies_intervals() {
        let mut s = Sampler::default();
        let o = Observation {
            cwnd: 10 * MSS,
            bytes_in_flight: 10 * MSS,
            mss: MSS,
            app_pending: true,
            ..Default::default()
        };
        let v = s.sample(1_000_000_000, &o);
        assert_eq!((v.limited_by, v.interval_ms), (LimitedBy::Cwnd, 0.0));
        let v = s.sample(1_010_000_000, &o);
        assert_eq!((v.limited_by, v.interval_ms), (LimitedBy::Cwnd, 10.0));
        let blocked = Observation {
            bytes_in_flight: 0,
            data_blocked_sent: 1,
            ..o
        };
        assert_eq!(
            s.sample(1_030_000_000, &blocked).limited_by,
            LimitedBy::FlowControl
        );
        let idle = Observation {
            app_pending: false,
            ..blocked
        };
        assert_eq!(
            s.sample(1_035_000_000, &idle).limited_by,
            LimitedBy::Application
        );
        assert_eq!(s.tally.get(LimitedBy::Cwnd), 10.0);
        assert_eq!(s.tally.get(LimitedBy::FlowControl), 20.0);
        assert_eq!(s.tally.get(LimitedBy::Application), 5.0);
        assert_eq!(
            s.tally.json(),
            json!({"cwnd": 10.0, "flow_control": 20.0, "pacing": 0.0, "application": 5.0})
        );
        // Started at the connection's opening, the first interval counts.
        let mut s = Sampler::starting(1_000_000_000);
        assert_eq!(s.sample(1_002_000_000, &idle).interval_ms, 2.0);
        assert_eq!(s.tally.get(LimitedBy::Application), 2.0);
    }
}
