//! What limited a sender, interval by interval: one sans-IO classifier for
//! kernel TCP and both QUIC stacks, fed one observation of a connection per
//! sample (every 10 ms, and at close). The transports only read their
//! counters (TCP: `TCP_INFO`; quiche and quinn: their own state) into a
//! [`TcpObservation`] or an [`Observation`]; the rule, the tracking of
//! flow-control and buffer state, and the time per class live here, tested
//! on simulated values and on recorded sample sequences.
//!
//! # The classes and the rule
//!
//! The interval since the previous sample is put in one class, judged from
//! the state at the sample and the counters' change over the interval
//! ([`Sample`]), in this order (the order Linux itself tests them in
//! `tcp_write_xmit`: the congestion window first, then the peer's window):
//!
//! 1. `application`: nothing was pending: no response bytes waiting at the
//!    application and nothing unsent in the transport (a TCP socket that was
//!    not busy for most of the interval, by its `busy` chrono, counts here).
//! 2. `cwnd`: `bytes_in_flight + mss >= cwnd` (the window has no room for one
//!    more full packet).
//! 3. `receive_window`: the peer's window held the data. TCP: the kernel's
//!    rwnd-limited chrono ran for most of the interval. QUIC: the sender sent
//!    DATA_BLOCKED or STREAM_DATA_BLOCKED in the interval, or had sent one
//!    earlier and has made no progress since ([`FcTracker`]); both stacks
//!    send these frames when blocked (RFC 9000 §4.1) and neither exposes the
//!    peer's current MAX_DATA, so the frames are the signal.
//! 4. `send_buffer`: the application had data the transport would not take.
//!    TCP: the socket's buffer full of unacknowledged data and nothing unsent
//!    in it, for most of the interval: the kernel's sndbuf-limited chrono, or
//!    the server's writes pending while `notsent_bytes` is 0. The
//!    QUIC servers buffer a response at the application and hand it over as
//!    the stack takes it, with no limit of their own: never seen there.
//! 5. `pacing`: data pending, room in the window, credit and buffer: the
//!    pacer held it. quiche: this server holds the packet itself until
//!    `SendInfo.at`. quinn paces inside quinn-proto and does not expose its
//!    pacer; it reports to its congestion controller whether it was
//!    application-limited (nothing to send, not blocked by congestion
//!    control or pacing), so "not application-limited while the window has
//!    room" is its pacer holding data. Linux exposes no pacer state either:
//!    unsent bytes in the socket while the window has room and neither
//!    window nor buffer held them is its pacer (BBR's internal pacing, or
//!    TCP Small Queues) holding them.
//! 6. `application`: data pending at the application but not handed to the
//!    transport (the sending loop itself).

use serde_json::json;

/// The class of an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitedBy {
    Application,
    Cwnd,
    ReceiveWindow,
    SendBuffer,
    Pacing,
}

impl LimitedBy {
    pub const ALL: [LimitedBy; 5] = [
        LimitedBy::Application,
        LimitedBy::Cwnd,
        LimitedBy::ReceiveWindow,
        LimitedBy::SendBuffer,
        LimitedBy::Pacing,
    ];

    /// The name in `quic_info.jsonl`, `tcp_info.jsonl` and the access log's
    /// `limited_ms` (`satbench-server --describe` lists them).
    pub fn name(self) -> &'static str {
        match self {
            LimitedBy::Application => "application",
            LimitedBy::Cwnd => "cwnd",
            LimitedBy::ReceiveWindow => "receive_window",
            LimitedBy::SendBuffer => "send_buffer",
            LimitedBy::Pacing => "pacing",
        }
    }
}

/// The numbers the rule looks at, for either transport.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    pub cwnd: u64,
    pub bytes_in_flight: u64,
    /// One full packet.
    pub mss: u64,
    /// Response bytes the application has not yet handed to the transport.
    pub app_pending: bool,
    /// Data the transport has and did not send.
    pub transport_pending: bool,
    /// Held by the peer's receive window (TCP) or flow-control credit (QUIC).
    pub rwnd_blocked: bool,
    /// The transport's send buffer would take no more of the application's data.
    pub sndbuf_blocked: bool,
    /// A packet held for its send time.
    pub pacer_holding: bool,
}

/// The rule of the module doc.
pub fn classify(s: &Sample) -> LimitedBy {
    if !s.app_pending && !s.transport_pending {
        LimitedBy::Application
    } else if s.bytes_in_flight + s.mss >= s.cwnd {
        LimitedBy::Cwnd
    } else if s.rwnd_blocked {
        LimitedBy::ReceiveWindow
    } else if s.sndbuf_blocked {
        LimitedBy::SendBuffer
    } else if s.pacer_holding {
        LimitedBy::Pacing
    } else {
        LimitedBy::Application
    }
}

/// Whether a QUIC sender is blocked by flow control, from the BLOCKED frames
/// it sent. A stack sends one such frame per limit it runs into, so the
/// state is sticky: blocked from the interval in which a frame went out
/// until the sender makes progress (more than two packets' worth of
/// `progress` bytes in an interval without a new frame).
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
    ms: [f64; 5],
}

impl Tally {
    pub fn add(&mut self, class: LimitedBy, ms: f64) {
        self.ms[class as usize] += ms;
    }

    pub fn get(&self, class: LimitedBy) -> f64 {
        self.ms[class as usize]
    }

    /// `{"application": ms, "cwnd": ms, "receive_window": ms, "send_buffer": ms, "pacing": ms}`.
    pub fn json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for c in LimitedBy::ALL {
            m.insert(c.name().into(), json!(self.get(c)));
        }
        m.into()
    }
}

/// One QUIC connection's counters as a stack reads them at a sample.
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

/// A `u64` field of a JSON object (the recorded inputs of `--tcp-info` and `--quic-info` lines).
#[cfg(test)]
fn field(v: &serde_json::Value, k: &str) -> Option<u64> {
    v.get(k)?.as_u64()
}

impl Observation {
    /// The classifier's input as recorded in a `quic_info.jsonl` line (`"input"`).
    pub fn json(&self) -> serde_json::Value {
        json!({"cwnd": self.cwnd, "bytes_in_flight": self.bytes_in_flight, "mss": self.mss,
               "app_pending": self.app_pending, "transport_pending": self.transport_pending,
               "pacer_holding": self.pacer_holding, "data_blocked_sent": self.data_blocked_sent,
               "stream_data_blocked_sent": self.stream_data_blocked_sent, "progress": self.progress})
    }

    /// Read back what [`Observation::json`] wrote.
    #[cfg(test)]
    pub fn from_json(v: &serde_json::Value) -> Option<Observation> {
        let flag = |k: &str| v.get(k).and_then(|x| x.as_bool());
        Some(Observation {
            cwnd: field(v, "cwnd")?,
            bytes_in_flight: field(v, "bytes_in_flight")?,
            mss: field(v, "mss")?,
            app_pending: flag("app_pending")?,
            transport_pending: flag("transport_pending")?,
            pacer_holding: flag("pacer_holding")?,
            data_blocked_sent: field(v, "data_blocked_sent")?,
            stream_data_blocked_sent: field(v, "stream_data_blocked_sent")?,
            progress: field(v, "progress")?,
        })
    }
}

/// One TCP connection's `TCP_INFO` as the rule needs it (the server's
/// `tcpinfo::TcpInfo` gives it).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct TcpObservation {
    /// `tcpi_snd_cwnd`, in segments.
    pub cwnd_segs: u64,
    /// `tcpi_unacked - tcpi_sacked - tcpi_lost + tcpi_retrans`: the kernel's
    /// packets in flight (`tcp_packets_in_flight`).
    pub in_flight_segs: u64,
    /// `tcpi_snd_mss`.
    pub mss: u64,
    /// `tcpi_notsent_bytes`: written by the application, not yet sent.
    pub notsent_bytes: u64,
    /// The chrono counters, cumulative µs: busy (data outstanding), of which
    /// limited by the peer's receive window and by the send buffer.
    pub busy_us: u64,
    pub rwnd_limited_us: u64,
    pub sndbuf_limited_us: u64,
    /// Cumulative µs the application's writes waited for room in the socket
    /// (the server's own clock: Linux's sndbuf chrono misses what an
    /// edge-triggered writer does).
    pub write_blocked_us: u64,
}

impl TcpObservation {
    /// The classifier's input as recorded in a `tcp_info.jsonl` line (`"input"`).
    pub fn json(&self) -> serde_json::Value {
        json!({"cwnd_segs": self.cwnd_segs, "in_flight_segs": self.in_flight_segs, "mss": self.mss,
               "notsent_bytes": self.notsent_bytes, "busy_us": self.busy_us,
               "rwnd_limited_us": self.rwnd_limited_us, "sndbuf_limited_us": self.sndbuf_limited_us,
               "write_blocked_us": self.write_blocked_us})
    }

    /// Read back what [`TcpObservation::json`] wrote.
    #[cfg(test)]
    pub fn from_json(v: &serde_json::Value) -> Option<TcpObservation> {
        Some(TcpObservation {
            cwnd_segs: field(v, "cwnd_segs")?,
            in_flight_segs: field(v, "in_flight_segs")?,
            mss: field(v, "mss")?,
            notsent_bytes: field(v, "notsent_bytes")?,
            busy_us: field(v, "busy_us")?,
            rwnd_limited_us: field(v, "rwnd_limited_us")?,
            sndbuf_limited_us: field(v, "sndbuf_limited_us")?,
            write_blocked_us: field(v, "write_blocked_us")?,
        })
    }

    /// The rule's view of the interval from `prev` to `self`, `interval_us`
    /// long: a chrono counts when it ran for most of the interval.
    pub fn sample(&self, prev: &TcpObservation, interval_us: u64) -> Sample {
        let most = |now: u64, then: u64| 2 * now.saturating_sub(then) > interval_us;
        let busy = most(self.busy_us, prev.busy_us);
        // The buffer held the application back when nothing unsent was left in it.
        let sndbuf = most(self.sndbuf_limited_us, prev.sndbuf_limited_us)
            || (most(self.write_blocked_us, prev.write_blocked_us) && self.notsent_bytes == 0);
        Sample {
            cwnd: self.cwnd_segs * self.mss,
            bytes_in_flight: self.in_flight_segs * self.mss,
            mss: self.mss,
            // The application waited for room in the socket.
            app_pending: busy && sndbuf,
            transport_pending: busy && self.notsent_bytes > 0,
            rwnd_blocked: most(self.rwnd_limited_us, prev.rwnd_limited_us),
            sndbuf_blocked: sndbuf,
            pacer_holding: self.notsent_bytes > 0,
        }
    }
}

/// What a sample concluded.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Verdict {
    pub limited_by: LimitedBy,
    /// QUIC: blocked by the peer's connection or stream credit.
    pub conn_blocked: bool,
    pub stream_blocked: bool,
    /// Length of the interval the verdict covers.
    pub interval_ms: f64,
}

/// Per connection: the state the rule carries between samples and the time per class.
#[derive(Clone, Debug, Default)]
pub struct Sampler {
    last_ns: Option<u64>,
    fc: FcTracker,
    last_tcp: TcpObservation,
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

    /// Judge the interval of a QUIC connection ending at `t_ns` (any
    /// monotonic nanoseconds).
    pub fn sample(&mut self, t_ns: u64, o: &Observation) -> Verdict {
        let (conn_blocked, stream_blocked) = self.fc.observe(
            o.data_blocked_sent,
            o.stream_data_blocked_sent,
            o.progress,
            o.mss,
        );
        let s = Sample {
            cwnd: o.cwnd,
            bytes_in_flight: o.bytes_in_flight,
            mss: o.mss,
            app_pending: o.app_pending,
            transport_pending: o.transport_pending,
            rwnd_blocked: conn_blocked || stream_blocked,
            sndbuf_blocked: false,
            pacer_holding: o.pacer_holding,
        };
        self.judge(t_ns, &s, conn_blocked, stream_blocked)
    }

    /// Judge the interval of a TCP connection ending at `t_ns`.
    pub fn sample_tcp(&mut self, t_ns: u64, o: &TcpObservation) -> Verdict {
        let interval_us = self.last_ns.map_or(0, |l| t_ns.saturating_sub(l) / 1000);
        let s = o.sample(&self.last_tcp, interval_us);
        self.last_tcp = *o;
        self.judge(t_ns, &s, false, false)
    }

    fn judge(
        &mut self,
        t_ns: u64,
        s: &Sample,
        conn_blocked: bool,
        stream_blocked: bool,
    ) -> Verdict {
        let limited_by = classify(s);
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
    pub fn json(&self, o: &Observation, v: &Verdict) -> serde_json::Value {
        let mut j = json!({
            "input": o.json(),
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
            rwnd_blocked: true,
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
            rwnd_blocked: true,
            pacer_holding: true,
            ..busy()
        };
        assert_eq!(classify(&fc), LimitedBy::ReceiveWindow);
        let paced = Sample {
            pacer_holding: true,
            ..busy()
        };
        assert_eq!(classify(&paced), LimitedBy::Pacing);
        assert_eq!(classify(&busy()), LimitedBy::Application);
    }

    #[test]
    fn credit_before_buffer_before_pacing() {
        let both = Sample {
            rwnd_blocked: true,
            sndbuf_blocked: true,
            pacer_holding: true,
            ..busy()
        };
        assert_eq!(classify(&both), LimitedBy::ReceiveWindow);
        let buf = Sample {
            sndbuf_blocked: true,
            pacer_holding: true,
            ..busy()
        };
        assert_eq!(classify(&buf), LimitedBy::SendBuffer);
    }

    const TMSS: u64 = 1448;

    /// A TCP connection 10 ms after `prev`, with `busy`, `rwnd` and `sndbuf`
    /// µs of chrono in the interval.
    fn tcp(prev: &TcpObservation, busy: u64, rwnd: u64, sndbuf: u64) -> TcpObservation {
        TcpObservation {
            busy_us: prev.busy_us + busy,
            rwnd_limited_us: prev.rwnd_limited_us + rwnd,
            sndbuf_limited_us: prev.sndbuf_limited_us + sndbuf,
            ..*prev
        }
    }

    #[test]
    fn tcp_samples_take_the_same_rule() {
        let base = TcpObservation {
            cwnd_segs: 40,
            in_flight_segs: 40,
            mss: TMSS,
            notsent_bytes: 100_000,
            ..Default::default()
        };
        let at = |o: &TcpObservation| o.sample(&TcpObservation::default(), 10_000);
        // Unsent bytes and a full window.
        assert_eq!(classify(&at(&tcp(&base, 10_000, 0, 0))), LimitedBy::Cwnd);
        // Unsent bytes, room in the window, and the peer's window held them.
        let room = TcpObservation {
            in_flight_segs: 20,
            ..base
        };
        assert_eq!(
            classify(&at(&tcp(&room, 10_000, 8_000, 0))),
            LimitedBy::ReceiveWindow
        );
        // ... for a short part of the interval only: the pacer.
        assert_eq!(
            classify(&at(&tcp(&room, 10_000, 4_000, 0))),
            LimitedBy::Pacing
        );
        // Nothing unsent, the application waiting for room in the socket.
        let drained = TcpObservation {
            notsent_bytes: 0,
            ..room
        };
        assert_eq!(
            classify(&at(&tcp(&drained, 10_000, 0, 8_000))),
            LimitedBy::SendBuffer
        );
        // The application's writes pending, nothing unsent: the buffer is full of data in flight.
        let waiting = TcpObservation {
            write_blocked_us: 9_000,
            ..tcp(&drained, 10_000, 0, 0)
        };
        assert_eq!(classify(&at(&waiting)), LimitedBy::SendBuffer);
        // ... with unsent bytes in the buffer, the buffer is not what holds the sender.
        let unsent = TcpObservation {
            notsent_bytes: 10_000,
            ..waiting
        };
        assert_eq!(classify(&at(&unsent)), LimitedBy::Pacing);
        // Nothing unsent and nothing waiting: the tail of a response.
        assert_eq!(
            classify(&at(&tcp(&drained, 10_000, 0, 0))),
            LimitedBy::Application
        );
        // Not busy for most of the interval: idle, whatever the snapshot says.
        assert_eq!(
            classify(&at(&tcp(&base, 4_000, 0, 0))),
            LimitedBy::Application
        );
    }

    #[test]
    fn the_tcp_sampler_judges_deltas_of_the_chrono_counters() {
        let mut s = Sampler::starting(0);
        let room = TcpObservation {
            cwnd_segs: 40,
            in_flight_segs: 20,
            mss: TMSS,
            notsent_bytes: 50_000,
            ..Default::default()
        };
        // 10 ms in the receive window's hold, then 10 ms without: the counter stays where it was.
        let a = tcp(&room, 10_000, 9_000, 0);
        assert_eq!(
            s.sample_tcp(10_000_000, &a).limited_by,
            LimitedBy::ReceiveWindow
        );
        let b = tcp(&a, 10_000, 0, 0);
        assert_eq!(s.sample_tcp(20_000_000, &b).limited_by, LimitedBy::Pacing);
        assert_eq!(s.tally.get(LimitedBy::ReceiveWindow), 10.0);
        assert_eq!(s.tally.get(LimitedBy::Pacing), 10.0);
    }

    /// A recorded sequence of `tests/fixtures/limits/`: each sample's time, the
    /// classifier's input (as the JSON object the server logged) and the class it gave.
    fn recorded(name: &str) -> Vec<(u64, serde_json::Value, String)> {
        let path = format!(
            "{}/tests/fixtures/limits/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut lines = text.lines().filter(|l| !l.starts_with('#'));
        let head: Vec<&str> = lines.next().expect("header").split(',').collect();
        let flags = ["app_pending", "transport_pending", "pacer_holding"];
        lines
            .map(|l| {
                let cells: Vec<&str> = l.split(',').collect();
                let mut input = serde_json::Map::new();
                for (k, v) in head[1..head.len() - 1]
                    .iter()
                    .zip(&cells[1..cells.len() - 1])
                {
                    let n: u64 = v.parse().expect("number");
                    let value = if flags.contains(k) {
                        json!(n == 1)
                    } else {
                        json!(n)
                    };
                    input.insert((*k).into(), value);
                }
                let t = cells[0].parse().expect("t_ns");
                (t, input.into(), cells[cells.len() - 1].to_string())
            })
            .collect()
    }

    /// Replay a recorded sequence through a fresh sampler: each interval's
    /// (end in ns, length in ms, class), checked against the class recorded.
    fn replay(name: &str) -> Vec<(u64, f64, LimitedBy)> {
        let rows = recorded(name);
        let tcp = name.starts_with("tcp-");
        let mut s = Sampler::starting(0);
        rows.iter()
            .map(|(t, input, was)| {
                let v = if tcp {
                    s.sample_tcp(*t, &TcpObservation::from_json(input).expect("tcp input"))
                } else {
                    s.sample(*t, &Observation::from_json(input).expect("quic input"))
                };
                assert_eq!(v.limited_by.name(), was, "{name} at {t} ns: {input}");
                (*t, v.interval_ms, v.limited_by)
            })
            .collect()
    }

    /// Each class's share (%) of the time from the first interval with data
    /// to send (not `application`), over `span_ms` (or to the end).
    fn shares(iv: &[(u64, f64, LimitedBy)], span_ms: Option<f64>) -> Tally {
        let start = iv
            .iter()
            .find(|x| x.2 != LimitedBy::Application)
            .map_or(0, |x| x.0);
        let mut t = Tally::default();
        for &(end, ms, class) in iv {
            let from = (end - start.min(end)) as f64 / 1e6;
            if end >= start && span_ms.is_none_or(|span| from <= span) {
                t.add(class, ms);
            }
        }
        let total: f64 = LimitedBy::ALL.iter().map(|&c| t.get(c)).sum();
        let mut pct = Tally::default();
        for c in LimitedBy::ALL {
            pct.add(c, 100.0 * t.get(c) / total);
        }
        pct
    }

    #[test]
    fn recorded_transfers_replay_to_the_classes_the_server_gave() {
        for name in [
            "tcp-bbr-geo-5MB.csv",
            "tcp-cubic-geo-5MB.csv",
            "tcp-cubic-sndbuf64k-geo-5MB.csv",
            "quiche-bbr-geo-5MB.csv",
            "quiche-cubic-geo-5MB.csv",
            "quinn-bbr-geo-5MB.csv",
            "quinn-cubic-geo-5MB.csv",
        ] {
            assert!(replay(name).len() > 500, "{name}");
        }
    }

    #[test]
    fn linux_bbr_over_geo_is_held_by_its_pacer_in_start_up() {
        // BBRv1 paces at 2.89 x its bandwidth estimate, whose samples span a round trip plus
        // the burst: the pacer, not the window, holds it for its first five round trips.
        let startup = shares(&replay("tcp-bbr-geo-5MB.csv"), Some(2_500.0));
        assert!(startup.get(LimitedBy::Pacing) > 60.0, "{startup:?}");
    }

    #[test]
    fn cubic_with_a_large_window_is_held_by_its_window() {
        for name in ["tcp-cubic-geo-5MB.csv", "quiche-cubic-geo-5MB.csv"] {
            let all = shares(&replay(name), None);
            assert!(all.get(LimitedBy::Cwnd) > 60.0, "{name}: {all:?}");
            assert_eq!(all.get(LimitedBy::Pacing), 0.0, "{name}: {all:?}"); // neither paces CUBIC
        }
        // quinn paces every controller at 5/4 of its window per round trip: its pacer
        // spreads the window, and the two together hold it.
        let quinn = shares(&replay("quinn-cubic-geo-5MB.csv"), None);
        assert!(
            quinn.get(LimitedBy::Cwnd) + quinn.get(LimitedBy::Pacing) > 70.0,
            "{quinn:?}"
        );
    }

    #[test]
    fn a_64k_send_buffer_holds_cubic_over_geo() {
        // 128 KB of kernel buffer (SO_SNDBUF doubled) against a 660 KB path:
        // once slow start fills it, the buffer of unacknowledged data is the limit.
        let all = shares(&replay("tcp-cubic-sndbuf64k-geo-5MB.csv"), None);
        assert!(all.get(LimitedBy::SendBuffer) > 50.0, "{all:?}");
    }

    #[test]
    fn quic_bbr_start_up_over_geo() {
        // quinn's BBR: its pacer holds it in start-up (quinn paces at 5/4 of the window per
        // round trip, whatever the controller's own rate).
        let quinn = shares(&replay("quinn-bbr-geo-5MB.csv"), Some(2_500.0));
        assert!(quinn.get(LimitedBy::Pacing) > 50.0, "{quinn:?}");
        // quiche's BBRv2 starts with a window gain of 2 under a pacing gain of 2.77: the
        // window, not the pacer, holds most of its start-up.
        let quiche = shares(&replay("quiche-bbr-geo-5MB.csv"), Some(2_500.0));
        assert!(quiche.get(LimitedBy::Cwnd) > 50.0, "{quiche:?}");
        assert!(quiche.get(LimitedBy::Pacing) > 20.0, "{quiche:?}");
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
            LimitedBy::ReceiveWindow
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
        assert_eq!(s.tally.get(LimitedBy::ReceiveWindow), 20.0);
        assert_eq!(s.tally.get(LimitedBy::Application), 5.0);
        assert_eq!(
            s.tally.json(),
            json!({"application": 5.0, "cwnd": 10.0, "receive_window": 20.0, "send_buffer": 0.0, "pacing": 0.0})
        );
        // Started at the connection's opening, the first interval counts.
        let mut s = Sampler::starting(1_000_000_000);
        assert_eq!(s.sample(1_002_000_000, &idle).interval_ms, 2.0);
        assert_eq!(s.tally.get(LimitedBy::Application), 2.0);
    }
}
