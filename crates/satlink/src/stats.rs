//! Counters per direction and a compact queueing-delay histogram.

use serde::Serialize;
use std::time::Duration;

/// Packets and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Tally {
    pub packets: u64,
    pub bytes: u64,
}

impl Tally {
    pub fn add(&mut self, packets: u32, bytes: u32) {
        self.packets += packets as u64;
        self.bytes += bytes as u64;
    }
}

/// Drops by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Drops {
    /// Queue full (tail drop).
    pub queue: Tally,
    /// Dropped by the active queue management (CoDel).
    pub aqm: Tally,
    /// Destroyed by the channel (random, burst, bit errors, scheduled loss).
    pub loss: Tally,
    /// The link had no capacity left for the rest of the run.
    pub outage: Tally,
}

/// Log-linear histogram of durations with about 1.6 % relative resolution.
#[derive(Clone, Debug)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: vec![0; 64 + 58 * 64],
            count: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }
}

impl Histogram {
    fn index(v: u64) -> usize {
        if v < 64 {
            return v as usize;
        }
        let e = 63 - v.leading_zeros() as usize;
        let m = (v >> (e - 6)) as usize;
        64 + (e - 6) * 64 + (m - 64)
    }

    /// Midpoint of a bucket.
    fn value(idx: usize) -> u64 {
        if idx < 64 {
            return idx as u64;
        }
        let k = idx - 64;
        let e = k / 64 + 6;
        let m = (k % 64 + 64) as u64;
        let low = m << (e - 6);
        low + (1u64 << (e - 6)) / 2
    }

    pub fn record(&mut self, d: Duration) {
        let v = d.as_nanos().min(u64::MAX as u128) as u64;
        self.buckets[Self::index(v)] += 1;
        self.count += 1;
        self.sum_ns += v as u128;
        self.min_ns = self.min_ns.min(v);
        self.max_ns = self.max_ns.max(v);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Value at quantile `q` in [0, 1], clamped into [min, max].
    pub fn quantile(&self, q: f64) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &c) in self.buckets.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Duration::from_nanos(Self::value(i).clamp(self.min_ns, self.max_ns));
            }
        }
        Duration::from_nanos(self.max_ns)
    }

    pub fn summary(&self) -> DelaySummary {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        if self.count == 0 {
            return DelaySummary::default();
        }
        DelaySummary {
            count: self.count,
            mean_ms: self.sum_ns as f64 / self.count as f64 / 1e6,
            min_ms: self.min_ns as f64 / 1e6,
            p50_ms: ms(self.quantile(0.5)),
            p90_ms: ms(self.quantile(0.9)),
            p99_ms: ms(self.quantile(0.99)),
            max_ms: self.max_ns as f64 / 1e6,
        }
    }
}

/// What the counters report about queueing delay.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct DelaySummary {
    pub count: u64,
    pub mean_ms: f64,
    pub min_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// Everything one direction of the link counts.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    pub offered: Tally,
    pub delivered: Tally,
    pub dropped: Drops,
    pub queue_delay: Histogram,
    /// Largest queue seen, in packets and bytes.
    pub max_queue: Tally,
    /// How late each packet left the emulator relative to its due time: the
    /// emulator's own timing error (always zero in simulated time).
    pub release_lateness: Histogram,
    pub ecn: EcnTally,
}

/// ECN at the queue: packets offered that were ECN-capable (ECT(0), ECT(1)
/// or already CE), and those the queue marked Congestion Experienced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct EcnTally {
    pub capable: Tally,
    pub marked: Tally,
}

/// Serializable snapshot of [`Counters`].
#[derive(Clone, Debug, Serialize)]
pub struct CountersReport {
    pub offered: Tally,
    pub delivered: Tally,
    pub dropped: Drops,
    pub queue_delay: DelaySummary,
    pub max_queue: Tally,
    pub release_lateness: DelaySummary,
    /// Packets still in the queue or on the path when the report was made.
    pub in_flight: Tally,
    pub ecn: EcnTally,
    /// What a framed carrier (ACM/CCM forward, bandwidth on demand on
    /// return) counted; absent for a plain link.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessReport>,
}

/// What a framed carrier counted: frames, encapsulation and, per terminal,
/// its allocation or link adaptation with their time series.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AccessReport {
    /// "acm" or "ccm" (forward), "dama" (return).
    pub kind: &'static str,
    /// Frames sent: BBFRAMEs forward, timeslots (bursts) on return.
    pub frames: u64,
    /// Frames lost because the C/N was below the threshold of their MODCOD.
    pub frames_lost: u64,
    /// Packets lost because a frame carrying part of them was lost (also
    /// counted in `dropped.loss`).
    pub packets_lost: u64,
    pub encapsulation: EncapsulationReport,
    /// Interval of the time series, in ms (doubles when a series would
    /// exceed [`crate::series::MAX_POINTS`] points).
    pub series_interval_ms: f64,
    pub terminals: Vec<TerminalReport>,
}

/// Bytes of encapsulation: what the carrier spent beyond the IP packets.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EncapsulationReport {
    /// "gse" (forward), "rle" (return) or "none".
    pub kind: &'static str,
    /// Packets carried to their end (their last fragment sent).
    pub packets: u64,
    /// Of them, packets carried in more than one fragment.
    pub fragmented: u64,
    /// Their IP bytes.
    pub ip_bytes: u64,
    /// Encapsulation headers and trailers (GSE or RLE) of those packets.
    pub overhead_bytes: u64,
    /// Frame headers (a BBFRAME's 10 bytes; none on return timeslots).
    pub frame_header_bytes: u64,
    /// Room left unused in the frames sent (padding).
    pub padding_bytes: u64,
}

/// One terminal's share of a framed carrier.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TerminalReport {
    /// Frames sent to (forward) or by (return) this terminal, and lost.
    pub frames: u64,
    pub frames_lost: u64,
    /// Packets carried to their end and their IP bytes.
    pub carried: Tally,
    #[serde(flatten)]
    pub detail: TerminalDetail,
}

/// What the carrier's control loop did for one terminal.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum TerminalDetail {
    Forward(ForwardTerminal),
    Return(ReturnTerminal),
}

/// Link adaptation of one terminal (forward).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ForwardTerminal {
    /// The MODCOD in use when the report was made.
    pub modcod: &'static str,
    /// Times the MODCOD in use changed.
    pub modcod_changes: u64,
    /// `[time_s, MODCOD]` at start and at every change.
    pub modcod_series: Vec<(f64, &'static str)>,
    /// `[time_s, C/N dB]` every `series_interval_ms`.
    pub cn_db_series: Vec<(f64, f64)>,
}

/// Bandwidth on demand of one terminal (return).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReturnTerminal {
    /// Capacity requests sent (those asking for anything).
    pub requests: u64,
    /// Largest RBDC request, bit/s.
    pub rbdc_request_max_bps: f64,
    /// VBDC volume requested in total.
    pub vbdc_requested_bytes: u64,
    /// Superframes in which the terminal had any timeslot.
    pub superframes_granted: u64,
    /// Timeslot bytes granted by class.
    pub granted_bytes: GrantedBytes,
    /// Of the bytes granted, those that carried data (the rest went unused).
    pub used_bytes: u64,
    /// `[time_s, bit/s]`: the granted rate at start and at every change.
    pub granted_bps_series: Vec<(f64, f64)>,
}

/// Return capacity granted, by class of the allocation order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct GrantedBytes {
    pub cra: u64,
    pub rbdc: u64,
    pub vbdc: u64,
    pub free: u64,
}

impl Counters {
    pub fn report(&self, in_flight: Tally) -> CountersReport {
        CountersReport {
            offered: self.offered,
            delivered: self.delivered,
            dropped: self.dropped,
            queue_delay: self.queue_delay.summary(),
            max_queue: self.max_queue,
            release_lateness: self.release_lateness.summary(),
            in_flight,
            ecn: self.ecn,
            access: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_roundtrip_is_close() {
        for v in [
            0u64,
            1,
            63,
            64,
            100,
            1_000,
            123_456,
            250_000_000,
            u64::MAX / 3,
        ] {
            let back = Histogram::value(Histogram::index(v));
            let err = (back as f64 - v as f64).abs() / (v.max(1) as f64);
            assert!(err < 0.016, "v {v} back {back}");
        }
    }

    #[test]
    fn quantiles() {
        let mut h = Histogram::default();
        for ms in 1..=100u64 {
            h.record(Duration::from_millis(ms));
        }
        let p50 = h.quantile(0.5).as_secs_f64() * 1e3;
        let p99 = h.quantile(0.99).as_secs_f64() * 1e3;
        assert!((p50 - 50.0).abs() < 1.0, "p50 {p50}");
        assert!((p99 - 99.0).abs() < 1.6, "p99 {p99}");
        let s = h.summary();
        assert_eq!(s.count, 100);
        assert!((s.mean_ms - 50.5).abs() < 1e-9);
        assert_eq!(s.max_ms, 100.0);
    }
}
