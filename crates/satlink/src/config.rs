//! The emulator's configuration, as JSON written by the orchestrator.
//!
//! This is the normalised form: every unit explicit, every choice tagged.
//! User-facing profiles (TOML) are turned into this by [`crate::profile`];
//! this module is the one place where parameter ranges are checked
//! ([`LinkConfig::from_json`] and [`DirectionConfig::validate`], used by the
//! running emulator too), and `satbench-link --check` reports the result
//! ([`check`]). Each part of a direction owns its configuration, its checks
//! and the model it builds: [`rate`] (capacity), [`delay`] (delay and
//! jitter), [`queue`] (limit and discipline), [`loss`], and [`access`] (the
//! framed carriers, the terminals, the LEO reconfiguration); this module
//! composes them.
//!
//! # Ranges
//!
//! Every number must be finite (no NaN, no infinity) and within what the
//! model represents exactly:
//!
//! | field | range |
//! |---|---|
//! | `rate.bps` (constant) | 1e3 ..= 1e12 bit/s |
//! | `rate.points[i]` value (schedule) | 0 (an outage) or 1e3 ..= 1e12 bit/s |
//! | `delay.ms`, `delay.points[i]` value | 0 ..= 3,600,000 ms (one hour) |
//! | `jitter.ms` | 0 ..= 60,000 ms |
//! | schedule times `points[i][0]` | 0 ..= 1e6 s, strictly increasing |
//! | schedule `period_s` | 0 (no repetition) or after the last point, ..= 1e6 s |
//! | `queue.limit.n` (packets) | 1 ..= 10,000,000 |
//! | `queue.limit.n` (bytes) | 1 ..= 17,179,869,184 (16 GiB) |
//! | `queue.limit.ms` | > 0 ..= 3,600,000 ms, and the rate must be limited |
//! | `queue.aqm.target_ms`, `interval_ms` (CoDel, FQ-CoDel) | > 0 ..= 60,000 ms |
//! | `queue.aqm.flows` (FQ-CoDel) | 1 ..= 65,536 (default 1024); not with an access |
//! | `queue.aqm.quantum` (FQ-CoDel) | 64 ..= 65,536 bytes (default 1514) |
//! | `queue.aqm.ecn` | true or false (default false: CoDel drops) |
//! | `queue.aqm.ce_threshold_ms` | > 0 ..= 60,000 ms; `ce_threshold_selector` `all` or `ect1`, only with it |
//! | probabilities (`p`, `r`, `loss_good`, `loss_bad`, `ber`, loss schedule values) | 0 ..= 1 |
//! | trace opportunities | at most 10,000,000, each 0 ..= 1e9 ms, non-decreasing, the last > 0 |
//! | `rate.unit_bps` (LEO trace) | 1e3 ..= 1e12 bit/s, and at most 1e12 bit/s in any millisecond |
//! | `rate.ms` (LEO trace lines) | at most 10,000,000, each 0 ..= 1e9 ms, non-decreasing |
//! | `delay.interval_ms` (LEO trace) | 1 ..= 60,000 ms (default 10) |
//! | `delay.values_ms` (LEO trace) | at most 10,000,000, each 0 ..= 3,600,000 ms; the trace at most 1e6 s |
//! | `reconfiguration.period_s` | > 0 ..= 1e6 s (default 15) |
//! | `reconfiguration.offset_s` | 0 ..< `period_s` (default 0) |
//! | `reconfiguration.delay_ms` | 0 ..= 3,600,000 ms |
//! | `reconfiguration.delay_duration_ms`, `loss_duration_ms` | 0 ..< the period |
//! | `reconfiguration.loss_p` | 0 ..= 1 (default 1) |
//! | `reconfiguration.outage` | not with a Mahimahi trace rate, not with an access |
//! | `access.kind` | forward: `acm` or `ccm`; return: `dama` |
//! | `forward.rate` with an access | `unlimited` (the carrier's rate follows its MODCODs) |
//! | `access.symbol_rate_baud` (acm, ccm) | 1e3 ..= 1e10 baud |
//! | `access.roll_off` (acm, ccm) | 0.05 ..= 0.35 (default 0.2) |
//! | `access.margin_db`, `hysteresis_db` (acm) | 0 ..= 20 dB (defaults 1, 0.5) |
//! | `access.refresh_ms` (acm) | 1 ..= 60,000 ms (default 1000) |
//! | `access.modcods` (acm), `access.modcod` (ccm) | names of the DVB-S2 table ("QPSK 1/4" ... "32APSK 9/10"), at least one |
//! | `access.encapsulation` | forward `gse` (`label_bytes` 0, 3 or 6; default 6) or `none`; return `rle` (`protocol_type_bytes` 0 ..= 2, default 2; `trailer` `seq` or `crc`) or `none` |
//! | `access.superframe_ms` (dama) | 1 ..= 1000 ms (opensand 26.5, ns3 100) |
//! | `access.sync_period_ms` (dama) | `superframe_ms` ..= 60,000 ms (opensand 1000, ns3 100) |
//! | `access.msl_frames` (dama) | 0 ..= 1000 superframes (opensand 23, ns3 0) |
//! | `access.rtt_estimate_ms` (dama) | > 0 ..= 60,000 ms (opensand msl x superframe, ns3 560) |
//! | `access.overestimation` (dama) | 1 ..= 10 (opensand 1, ns3 1.1) |
//! | `access.rbdc_timeout_ms` (dama) | `superframe_ms` ..= 600,000 ms (opensand sync period + superframe, ns3 200) |
//! | `access.slot_bytes` (dama) | 16 ..= 65,535 (default 188) |
//! | `return.rate` with dama | constant, schedule or LEO trace, at least one slot per superframe at its peak |
//! | `terminals` | 1 ..= 256 entries; each needs `subnets` when there are 2 or more |
//! | `terminals[i].subnets[j]` | an IPv4 or IPv6 prefix `ADDRESS/LENGTH`, no bits after the length |
//! | `terminals[i].forward` | only with `forward.access`; `clear_sky_cn_db` -10 ..= 50 dB (default 20) |
//! | `terminals[i].forward.fade` | `path` or `points` (`[time_s, dB]`): times 0 ..= 1e6 s strictly increasing, 0 ..= 100 dB, at most 10,000,000 points; `loop` needs the last time > 0 |
//! | `terminals[i].return` | only with `return.access`; `cra_bps` (default: the preset's, opensand 0, ns3 50e3), `rbdc_max_bps`, `fca_max_bps` 0 ..= 1e12 bit/s, `vbdc_max_bytes` 0 ..= 16 GiB; at least one of them above 0; the CRAs together at most the carrier's long-run rate |
//!
//! A trace rate is `{"kind": "trace", "path": FILE}` (a Mahimahi file: one
//! offset in ms per line) or `{"kind": "trace", "opportunities_ms": [...]}`
//! (the same offsets inline), exactly one of the two. `seed` defaults to 0.
//! LEO traces (`leo_trace`, [`crate::leo`]), attenuation series
//! ([`crate::fade`]) likewise take a `path` or their values inline.
//!
//! # Satellite access and terminals
//!
//! `forward.access` and `return.access` make a direction a framed carrier
//! shared by the terminals ([`crate::framed`]): `acm`/`ccm` (DVB-S2
//! BBFRAMEs, [`crate::forward`]) and `dama` (DVB-RCS2 bandwidth on demand,
//! [`crate::dama`]). `terminals` lists the terminals: their subnets (forward
//! routing), their forward channel and their return allocation. Absent, the
//! link has one terminal, and without an access everything is as it was
//! (the canonical form of such a configuration has none of the new keys).
//! [`LinkConfig::from_json`] fills every default of an access (its preset,
//! its encapsulation) and of each terminal's part of it.
//!
//! # `--check`
//!
//! [`check`] parses and validates a configuration, reads trace files and
//! returns [`Checked`]: the canonical configuration (every default filled
//! in, traces, LEO traces and fades inline, no seed) and the [`Derived`]
//! numbers of the link; a direction with an access adds its
//! [`DerivedAccess`].

use crate::capacity::{Capacity, Gated, Peak, Rate, Trace, Unlimited, TRACE_OPPORTUNITY_BYTES};
use crate::delay::{Delay, Jitter};
use crate::link::Direction;
use crate::loss::{Bernoulli, BitErrorRate, GilbertElliott, Loss};
use crate::queue::{CoDel, DropTail, EcnMarking, FqCoDel, Limit, Queue};
use crate::rng::Rng;
use crate::schedule::{Schedule, ScheduleError};
use serde::{Deserialize, Serialize};
use std::time::Duration;

pub mod access;
mod checks;
pub mod delay;
pub mod loss;
pub mod queue;
pub mod rate;
pub use access::*;
use checks::*;
pub use checks::{ConfigError, Range};
pub use delay::*;
pub use loss::*;
pub use queue::*;
pub use rate::*;

/// Lowest bit rate (1 kbit/s): a 1500-byte packet takes 12 s.
pub const MIN_RATE_BPS: f64 = 1e3;
/// Highest bit rate (1 Tbit/s; serialisation is counted in whole nanoseconds).
pub const MAX_RATE_BPS: f64 = 1e12;
/// Longest one-way delay and longest queue in time, in ms (one hour).
pub const MAX_DELAY_MS: f64 = 3_600_000.0;
/// Largest jitter, in ms.
pub const MAX_JITTER_MS: f64 = 60_000.0;
/// Latest schedule breakpoint and longest schedule period, in s.
pub const MAX_SCHEDULE_S: f64 = 1e6;
/// Largest queue in packets.
pub const MAX_QUEUE_PACKETS: u32 = 10_000_000;
/// Largest queue in bytes (16 GiB).
pub const MAX_QUEUE_BYTES: u64 = 16 << 30;
/// Largest queue in time, in ms.
pub const MAX_QUEUE_MS: f64 = 3_600_000.0;
/// Largest CoDel target and interval, in ms.
pub const MAX_CODEL_MS: f64 = 60_000.0;
/// Packet size of the derived loss probability.
pub const DERIVED_PACKET_BYTES: u32 = 1500;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Seed of every random draw; reported with the counters. Default 0.
    #[serde(default)]
    pub seed: u64,
    /// Offset schedules so that their time 0 is the start of the current UTC minute.
    #[serde(default)]
    pub align_minute: bool,
    /// Gateway to terminal.
    pub forward: DirectionConfig,
    /// Terminal to gateway.
    #[serde(rename = "return")]
    pub ret: DirectionConfig,
    /// The terminals on the satellite (absent: one terminal, as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminals: Option<Vec<TerminalConfig>>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DirectionConfig {
    #[serde(default)]
    pub rate: RateConfig,
    #[serde(default)]
    pub delay: DelayConfig,
    #[serde(default)]
    pub jitter: JitterConfig,
    /// Let a packet with a shorter sampled delay overtake earlier ones.
    #[serde(default)]
    pub reorder: bool,
    #[serde(default)]
    pub queue: QueueConfig,
    /// Loss models, all applied to every packet.
    #[serde(default)]
    pub loss: Vec<LossConfig>,
    /// A framed carrier shared by the terminals: DVB-S2 ACM or CCM
    /// (forward), DVB-RCS2 bandwidth on demand (return).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessConfig>,
    /// The periodic reconfiguration of a LEO constellation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconfiguration: Option<ReconfigurationConfig>,
}

impl DirectionConfig {
    /// Check every value and range (no file access: a trace file is read by
    /// [`DirectionConfig::build`] and [`LinkConfig::inline_traces`]). Each
    /// part checks its own ([`RateConfig`], [`DelayConfig`], [`JitterConfig`],
    /// [`QueueConfig`], [`LossConfig`], the reconfiguration and the access).
    pub fn validate(&self, name: &str) -> Result<(), ConfigError> {
        self.rate.validate(&format!("{name}.rate"))?;
        self.delay.validate(&format!("{name}.delay"))?;
        self.jitter.validate(&format!("{name}.jitter"))?;
        let limited = !matches!(self.rate, RateConfig::Unlimited) || self.access.is_some();
        self.queue
            .validate(&format!("{name}.queue"), limited, self.access.is_some())?;
        for (i, l) in self.loss.iter().enumerate() {
            l.validate(&format!("{name}.loss[{i}]"))?;
        }
        if let Some(r) = &self.reconfiguration {
            r.validate(&format!("{name}.reconfiguration"), self)?;
        }
        if let Some(a) = &self.access {
            a.validate(name, self)?;
        }
        Ok(())
    }

    /// The capacity model, gated by the reconfiguration's outages, and
    /// whether it limits the rate (reads a trace file).
    fn capacity(
        &self,
        name: &str,
        phase_ns: u64,
    ) -> Result<(Box<dyn Capacity>, bool), ConfigError> {
        let (cap, limited) = self.rate.capacity(&format!("{name}.rate"), phase_ns)?;
        let up = match &self.reconfiguration {
            Some(r) => r
                .model()
                .up()
                .or_else(|e| err(format!("{name}.reconfiguration"), e.to_string()))?,
            None => None,
        };
        Ok(match up {
            Some(up) => (Box::new(Gated::new(cap, up.with_phase(phase_ns))), true),
            None => (cap, limited),
        })
    }

    fn rate_schedule(&self, name: &str, phase_ns: u64) -> Result<Schedule, ConfigError> {
        self.rate.schedule(&format!("{name}.rate"), phase_ns)
    }

    fn rate_long_run(&self, name: &str) -> Result<f64, ConfigError> {
        self.rate.long_run(&format!("{name}.rate"))
    }

    fn limit(&self, nominal_bps: Option<f64>) -> Limit {
        self.queue.limit(nominal_bps)
    }

    fn queue<T: Send + 'static>(&self, limit: Limit) -> Box<dyn Queue<T>> {
        self.queue.build(limit)
    }

    fn base_delay(&self, name: &str, phase_ns: u64) -> Result<Schedule, ConfigError> {
        self.delay.schedule(&format!("{name}.delay"), phase_ns)
    }

    /// The reconfiguration's extra delay in seconds, if any.
    fn extra_delay(&self, name: &str, phase_ns: u64) -> Result<Option<Schedule>, ConfigError> {
        let Some(r) = &self.reconfiguration else {
            return Ok(None);
        };
        Ok(r.model()
            .delay_s()
            .or_else(|e| err(format!("{name}.reconfiguration"), e.to_string()))?
            .map(|s| s.with_phase(phase_ns)))
    }

    /// Every loss model, the reconfiguration's loss bursts last.
    fn losses(&self, name: &str, phase_ns: u64) -> Result<Vec<Box<dyn Loss>>, ConfigError> {
        let mut losses = Vec::new();
        for (i, l) in self.loss.iter().enumerate() {
            losses.push(l.build(&format!("{name}.loss[{i}]"), phase_ns)?);
        }
        if let Some(r) = &self.reconfiguration {
            let burst = r
                .model()
                .loss()
                .or_else(|e| err(format!("{name}.reconfiguration"), e.to_string()))?;
            if let Some(b) = burst {
                losses.push(Box::new(Bernoulli::scheduled(b.with_phase(phase_ns))));
            }
        }
        Ok(losses)
    }

    /// The propagation delay with its jitter and reconfiguration step.
    fn delay(&self, name: &str, phase_ns: u64) -> Result<Delay, ConfigError> {
        let delay = Delay::scheduled(self.base_delay(name, phase_ns)?, self.jitter.model());
        Ok(match self.extra_delay(name, phase_ns)? {
            Some(extra) => delay.with_extra(extra),
            None => delay,
        })
    }

    /// Build the model of a plain direction (one queue, one capacity; an
    /// access is built by [`LinkConfig::build_directions`]). `phase_ns`
    /// aligns schedules; `rng` seeds this direction.
    pub fn build<T: Send + 'static>(
        &self,
        name: &str,
        phase_ns: u64,
        rng: Rng,
    ) -> Result<Direction<T>, ConfigError> {
        self.validate(name)?;
        if self.access.is_some() {
            return err(
                format!("{name}.access"),
                "a direction with an access is built with the link's terminals (LinkConfig::build_directions)",
            );
        }
        let (capacity, limited) = self.capacity(name, phase_ns)?;
        let queue = self.queue(self.limit(capacity.nominal_bps()));
        Ok(Direction::new(
            queue,
            capacity,
            limited,
            self.losses(name, phase_ns)?,
            self.delay(name, phase_ns)?,
            self.reorder,
            rng,
        ))
    }

    /// A direction around a framed stage: this direction's losses and delay.
    fn framed_direction<T: Send + 'static>(
        &self,
        name: &str,
        phase_ns: u64,
        stage: Box<dyn crate::stage::Stage<T>>,
        rng: Rng,
    ) -> Result<Direction<T>, ConfigError> {
        Ok(Direction::with_stage(
            stage,
            self.losses(name, phase_ns)?,
            self.delay(name, phase_ns)?,
            self.reorder,
            rng,
        ))
    }

    /// The numbers of this direction's model (reads a trace file). A
    /// direction with an access gets its numbers from [`LinkConfig::derived`].
    pub fn derived(&self, name: &str) -> Result<DerivedDirection, ConfigError> {
        self.validate(name)?;
        let (cap, _) = self.capacity(name, 0)?;
        self.derived_at(name, cap.nominal_bps(), cap.peak())
    }

    /// The numbers, the long-run rate and the peak given.
    fn derived_at(
        &self,
        name: &str,
        mean_bps: Option<f64>,
        peak: Option<Peak>,
    ) -> Result<DerivedDirection, ConfigError> {
        let (queue_limit_bytes, queue_limit_packets) = match self.limit(mean_bps) {
            Limit::Unlimited => (None, None),
            Limit::Packets(n) => (None, Some(n as u64)),
            Limit::Bytes(n) => (Some(n), None),
        };
        let base = self.base_delay(name, 0)?;
        let extra = self.extra_delay(name, 0)?.map_or(0.0, |e| e.max());
        let survive: f64 = self
            .losses(name, 0)?
            .iter()
            .map(|l| 1.0 - l.mean_loss(DERIVED_PACKET_BYTES))
            .product();
        Ok(DerivedDirection {
            mean_bps,
            peak_bps: peak.map(|p| p.bps),
            peak_burst_bytes: peak.map_or(0, |p| p.burst_bytes),
            min_delay_ms: base.min() * 1e3,
            max_delay_ms: base.max() * 1e3 + extra * 1e3,
            packet_loss_1500: 1.0 - survive,
            queue_limit_bytes,
            queue_limit_packets,
            trace_opportunity_bytes: TRACE_OPPORTUNITY_BYTES,
            access: None,
        })
    }

    /// Read trace files, if any, and hold their contents inline instead.
    fn inline_trace(&mut self, name: &str) -> Result<(), ConfigError> {
        self.rate.inline(&format!("{name}.rate"))?;
        self.delay.inline(&format!("{name}.delay"))
    }
}

/// What the model of one direction amounts to (`--check`'s `derived`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DerivedDirection {
    /// The capacity's long-run rate in bit/s (a trace: opportunities x 1504
    /// bytes x 8 per period; a schedule: its long-run value); None if unlimited.
    pub mean_bps: Option<f64>,
    /// The highest rate the direction ever delivers at, in bit/s (a
    /// schedule's or LEO trace's peak, a Mahimahi trace's busiest
    /// millisecond, an adaptive carrier's best MODCOD, a return carrier's
    /// whole rate); None if unlimited. No interval of `t` seconds carries
    /// more than `peak_burst_bytes + peak_bps x t / 8` bytes: what a lower
    /// bound on a transfer's time may assume.
    pub peak_bps: Option<f64>,
    pub peak_burst_bytes: u64,
    /// Smallest and largest base (propagation) delay, before jitter.
    pub min_delay_ms: f64,
    pub max_delay_ms: f64,
    /// Probability that a 1500-byte packet is lost by the loss models
    /// combined: 1 - prod(1 - p_i), each model's long-run probability.
    pub packet_loss_1500: f64,
    /// The queue limit in bytes (a limit in ms resolved at `mean_bps`).
    pub queue_limit_bytes: Option<u64>,
    /// The queue limit in packets.
    pub queue_limit_packets: Option<u64>,
    /// Bytes one trace opportunity carries.
    pub trace_opportunity_bytes: u32,
    /// The framed carrier of an access (`mean_bps` is then the forward
    /// carrier's clear-sky data-field rate, that of its fastest terminal, or
    /// the return carrier's long-run rate; the queue limits are those of each
    /// terminal's queue, a limit in ms sized at `mean_bps`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access: Option<DerivedAccess>,
}

/// What the model of the link amounts to.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Derived {
    /// Sum of both directions' smallest base delay.
    pub base_rtt_ms: f64,
    pub forward: DerivedDirection,
    #[serde(rename = "return")]
    pub ret: DerivedDirection,
}

/// The canonical form of a configuration: every default filled in, traces
/// inline, no seed (a property of a run, not of the link).
#[derive(Clone, Debug, Serialize)]
pub struct Canonical<'a> {
    pub align_minute: bool,
    pub forward: &'a DirectionConfig,
    #[serde(rename = "return")]
    pub ret: &'a DirectionConfig,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub terminals: Option<&'a Vec<TerminalConfig>>,
}

/// A configuration that passed `--check`.
#[derive(Clone, Debug)]
pub struct Checked {
    /// The configuration with traces inline.
    pub config: LinkConfig,
    pub derived: Derived,
}

impl Checked {
    /// `{"ok": true, "config": <canonical>, "derived": <numbers>}` on one line.
    pub fn to_json_line(&self) -> String {
        #[derive(Serialize)]
        struct Ok<'a> {
            ok: bool,
            config: Canonical<'a>,
            derived: &'a Derived,
        }
        let ok = Ok {
            ok: true,
            config: self.config.canonical(),
            derived: &self.derived,
        };
        serde_json::to_string(&ok).expect("serialise check")
    }
}

impl ConfigError {
    /// `{"ok": false, "field": ..., "message": ...}` on one line, with
    /// `min`, `max` and `value` when a number was out of its range.
    pub fn to_json_line(&self) -> String {
        let mut j = serde_json::json!({"ok": false, "field": self.field, "message": self.message});
        if let Some(r) = self.range {
            // A non-finite value is not JSON: it is left out (the message says it).
            j["min"] = r.min.into();
            j["max"] = r.max.into();
            if r.value.is_finite() {
                j["value"] = r.value.into();
            }
        }
        j.to_string()
    }
}

/// Parse, validate and resolve a configuration: what `satbench-link --check` reports.
pub fn check(text: &str) -> Result<Checked, ConfigError> {
    let mut config = LinkConfig::from_json(text)?;
    config.inline_traces()?;
    let derived = config.derived()?;
    Ok(Checked { config, derived })
}

impl LinkConfig {
    /// Parse, fill the defaults of accesses and terminals, and validate
    /// (no file access).
    pub fn from_json(text: &str) -> Result<LinkConfig, ConfigError> {
        let mut c: LinkConfig =
            serde_json::from_str(text).or_else(|e| err("config", e.to_string()))?;
        c.normalise();
        c.forward.validate("forward")?;
        c.ret.validate("return")?;
        c.validate_terminals()?;
        Ok(c)
    }

    /// Independent random streams for the two directions.
    pub fn rngs(&self) -> (Rng, Rng) {
        let root = Rng::new(self.seed);
        (root.fork(1), root.fork(2))
    }

    /// Read trace, LEO trace and fade files and hold their contents inline instead.
    pub fn inline_traces(&mut self) -> Result<(), ConfigError> {
        self.forward.inline_trace("forward")?;
        self.ret.inline_trace("return")?;
        self.inline_fades()
    }

    /// The numbers of the link's model.
    pub fn derived(&self) -> Result<Derived, ConfigError> {
        let direction =
            |d: &DirectionConfig, name: &str| -> Result<DerivedDirection, ConfigError> {
                match self.access_derived(name)? {
                    None => d.derived(name),
                    Some((access, mean, peak)) => {
                        d.validate(name)?;
                        let mut r = d.derived_at(name, Some(mean), Some(peak))?;
                        r.access = Some(access);
                        Ok(r)
                    }
                }
            };
        let forward = direction(&self.forward, "forward")?;
        let ret = direction(&self.ret, "return")?;
        Ok(Derived {
            base_rtt_ms: forward.min_delay_ms + ret.min_delay_ms,
            forward,
            ret,
        })
    }

    /// The configuration without its seed, for serialisation.
    pub fn canonical(&self) -> Canonical<'_> {
        Canonical {
            align_minute: self.align_minute,
            forward: &self.forward,
            ret: &self.ret,
            terminals: self.terminals.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_config() {
        let c = LinkConfig::from_json(
            r#"{"seed": 7, "forward": {"rate": {"kind": "constant", "bps": 1e7},
                 "delay": {"kind": "constant", "ms": 265},
                 "queue": {"limit": {"kind": "ms", "ms": 200}},
                 "loss": [{"kind": "ber", "ber": 1e-6}]},
                "return": {"rate": {"kind": "schedule", "points": [[0, 1e6], [1, 2e6]],
                                    "period_s": 2},
                 "queue": {"limit": {"kind": "packets", "n": 25}, "aqm": {"kind": "codel"}}}}"#,
        )
        .unwrap();
        let (a, b) = c.rngs();
        let f: Direction<u32> = c.forward.build("forward", 0, a).unwrap();
        assert!(f.needs_segments());
        let _r: Direction<u32> = c.ret.build("return", 0, b).unwrap();
    }

    /// A LEO handover's delay step down, with packets in flight across it: with `reorder`, those
    /// sent after the step overtake those sent before (they arrive out of order, as a path change
    /// makes them); without, the line keeps them in order.
    #[test]
    fn a_delay_step_down_reorders_the_packets_in_flight_when_asked() {
        for reorder in [true, false] {
            let c = LinkConfig::from_json(&format!(
                r#"{{"forward": {{"delay": {{"kind": "schedule", "points": [[0, 60], [1, 20]]}},
                     "reorder": {reorder}}}, "return": {{}}}}"#
            ))
            .unwrap();
            let (a, _) = c.rngs();
            let mut f: Direction<u32> = c.forward.build("forward", 0, a).unwrap();
            // A packet every 10 ms from 0.9 s to 1.1 s: those before 1 s take 60 ms, those after 20.
            let arrivals: Vec<_> = (0..20u32)
                .map(|i| (crate::Instant::from_millis(900 + 10 * i as u64), 0, i, 100))
                .collect();
            let out = crate::testutil::run(&mut f, &arrivals);
            let order: Vec<u32> = out.iter().map(|&(_, id)| id).collect();
            assert_eq!(order.len(), 20);
            let in_order = order.windows(2).all(|w| w[0] < w[1]);
            assert_eq!(in_order, !reorder, "reorder {reorder}: {order:?}");
        }
    }

    #[test]
    fn range_errors_carry_the_range_and_value() {
        let e = LinkConfig::from_json(
            r#"{"forward":{"rate":{"kind":"constant","bps":500}},"return":{}}"#,
        )
        .unwrap_err();
        assert_eq!(
            e.range,
            Some(Range {
                min: 1e3,
                max: 1e12,
                value: 500.0
            })
        );
        let j: serde_json::Value = serde_json::from_str(&e.to_json_line()).unwrap();
        assert_eq!(
            (j["min"].as_f64(), j["max"].as_f64()),
            (Some(1e3), Some(1e12))
        );
        assert_eq!(j["value"].as_f64(), Some(500.0));
        let syntax = LinkConfig::from_json("{").unwrap_err();
        assert!(syntax.range.is_none() && !syntax.to_json_line().contains("min"));
    }

    #[test]
    fn errors_name_the_field() {
        let bad = |j: &str| LinkConfig::from_json(j).unwrap_err();
        let e = bad(r#"{"seed":1,"forward":{"rate":{"kind":"constant","bps":0}},"return":{}}"#);
        assert_eq!(e.field, "forward.rate.bps");
        let e = bad(r#"{"seed":1,"forward":{},"return":{"delay":{"kind":"constant","ms":-1}}}"#);
        assert_eq!(e.field, "return.delay.ms");
        let e = bad(r#"{"seed":1,"forward":{"loss":[{"kind":"bernoulli","p":1.5}]},"return":{}}"#);
        assert_eq!(e.field, "forward.loss[0].p");
        let e = bad(r#"{"seed":1,"forward":{"colour":1},"return":{}}"#);
        assert_eq!(e.field, "config");
    }

    #[test]
    fn unreadable_trace_names_path() {
        let c = DirectionConfig {
            rate: RateConfig::Trace {
                path: Some("/nonexistent/trace".into()),
                opportunities_ms: None,
            },
            ..Default::default()
        };
        let e = c.build::<u32>("forward", 0, Rng::new(0)).err().unwrap();
        assert_eq!(e.field, "forward.rate.path");
        assert!(e.message.contains("/nonexistent/trace"));
    }

    /// The field named by the error of `forward` = `fwd` (a JSON object body).
    fn field_of(fwd: &str) -> String {
        let j = format!(r#"{{"forward": {{{fwd}}}, "return": {{}}}}"#);
        LinkConfig::from_json(&j).unwrap_err().field
    }

    fn accepts(fwd: &str) {
        let j = format!(r#"{{"forward": {{{fwd}}}, "return": {{}}}}"#);
        if let Err(e) = LinkConfig::from_json(&j) {
            panic!("{fwd}: {e}");
        }
    }

    #[test]
    fn seed_defaults_to_zero() {
        let c = LinkConfig::from_json(r#"{"forward": {}, "return": {}}"#).unwrap();
        assert_eq!(c.seed, 0);
    }

    #[test]
    fn constant_rate_range() {
        accepts(r#""rate": {"kind": "constant", "bps": 1e3}"#);
        accepts(r#""rate": {"kind": "constant", "bps": 1e12}"#);
        assert_eq!(
            field_of(r#""rate": {"kind": "constant", "bps": 999}"#),
            "forward.rate.bps"
        );
        assert_eq!(
            field_of(r#""rate": {"kind": "constant", "bps": 1.1e12}"#),
            "forward.rate.bps"
        );
        let d = DirectionConfig {
            rate: RateConfig::Constant { bps: f64::NAN },
            ..Default::default()
        };
        assert_eq!(d.validate("forward").unwrap_err().field, "forward.rate.bps");
        let d = DirectionConfig {
            rate: RateConfig::Constant { bps: f64::INFINITY },
            ..Default::default()
        };
        assert_eq!(d.validate("forward").unwrap_err().field, "forward.rate.bps");
    }

    #[test]
    fn scheduled_rate_is_an_outage_or_in_range() {
        accepts(r#""rate": {"kind": "schedule", "points": [[0, 0], [1, 1e3], [2, 1e12]]}"#);
        let f = field_of(r#""rate": {"kind": "schedule", "points": [[0, 1e6], [1, 5e2]]}"#);
        assert_eq!(f, "forward.rate.points[1]");
        let f = field_of(r#""rate": {"kind": "schedule", "points": [[0, 1e6], [1, 2e12]]}"#);
        assert_eq!(f, "forward.rate.points[1]");
    }

    #[test]
    fn delay_range() {
        accepts(r#""delay": {"kind": "constant", "ms": 3600000}"#);
        assert_eq!(
            field_of(r#""delay": {"kind": "constant", "ms": 3600001}"#),
            "forward.delay.ms"
        );
        assert_eq!(
            field_of(r#""delay": {"kind": "constant", "ms": -1}"#),
            "forward.delay.ms"
        );
        let f = field_of(r#""delay": {"kind": "schedule", "points": [[0, 10], [1, 4e6]]}"#);
        assert_eq!(f, "forward.delay.points[1]");
    }

    #[test]
    fn jitter_range() {
        accepts(r#""jitter": {"kind": "normal", "ms": 60000}"#);
        assert_eq!(
            field_of(r#""jitter": {"kind": "uniform", "ms": 60001}"#),
            "forward.jitter.ms"
        );
        assert_eq!(
            field_of(r#""jitter": {"kind": "normal", "ms": -0.5}"#),
            "forward.jitter.ms"
        );
    }

    #[test]
    fn schedule_times_are_in_range_and_increasing() {
        accepts(r#""delay": {"kind": "schedule", "points": [[0, 1], [1e6, 2]]}"#);
        let f = field_of(r#""delay": {"kind": "schedule", "points": [[0, 1], [1.1e6, 2]]}"#);
        assert_eq!(f, "forward.delay.points[1]");
        let f = field_of(r#""delay": {"kind": "schedule", "points": [[-1, 1]]}"#);
        assert_eq!(f, "forward.delay.points[0]");
        let f =
            field_of(r#""rate": {"kind": "schedule", "points": [[0, 1e6], [2, 1e6], [2, 1e6]]}"#);
        assert_eq!(f, "forward.rate.points[2]");
        let f = field_of(r#""rate": {"kind": "schedule", "points": []}"#);
        assert_eq!(f, "forward.rate.points");
    }

    #[test]
    fn schedule_period_range_and_after_the_last_point() {
        accepts(r#""delay": {"kind": "schedule", "points": [[0, 1]], "period_s": 1e6}"#);
        let f = field_of(r#""delay": {"kind": "schedule", "points": [[0, 1]], "period_s": 2e6}"#);
        assert_eq!(f, "forward.delay.period_s");
        let f = field_of(r#""delay": {"kind": "schedule", "points": [[0, 1]], "period_s": -1}"#);
        assert_eq!(f, "forward.delay.period_s");
        let f = field_of(
            r#""loss": [{"kind": "schedule", "points": [[0, 0], [5, 1]], "period_s": 5}]"#,
        );
        assert_eq!(f, "forward.loss[0].points[1]");
    }

    #[test]
    fn queue_packets_range() {
        accepts(r#""queue": {"limit": {"kind": "packets", "n": 10000000}}"#);
        let f = field_of(r#""queue": {"limit": {"kind": "packets", "n": 0}}"#);
        assert_eq!(f, "forward.queue.limit.n");
        let f = field_of(r#""queue": {"limit": {"kind": "packets", "n": 10000001}}"#);
        assert_eq!(f, "forward.queue.limit.n");
    }

    #[test]
    fn queue_bytes_range() {
        accepts(r#""queue": {"limit": {"kind": "bytes", "n": 17179869184}}"#);
        let f = field_of(r#""queue": {"limit": {"kind": "bytes", "n": 0}}"#);
        assert_eq!(f, "forward.queue.limit.n");
        let f = field_of(r#""queue": {"limit": {"kind": "bytes", "n": 17179869185}}"#);
        assert_eq!(f, "forward.queue.limit.n");
    }

    #[test]
    fn queue_ms_range_and_finite_rate() {
        let rate = r#""rate": {"kind": "constant", "bps": 1e6}"#;
        accepts(&format!(
            r#"{rate}, "queue": {{"limit": {{"kind": "ms", "ms": 3600000}}}}"#
        ));
        let f = field_of(&format!(
            r#"{rate}, "queue": {{"limit": {{"kind": "ms", "ms": 0}}}}"#
        ));
        assert_eq!(f, "forward.queue.limit.ms");
        let f = field_of(&format!(
            r#"{rate}, "queue": {{"limit": {{"kind": "ms", "ms": 3600001}}}}"#
        ));
        assert_eq!(f, "forward.queue.limit.ms");
        let f = field_of(r#""queue": {"limit": {"kind": "ms", "ms": 10}}"#);
        assert_eq!(f, "forward.queue.limit");
    }

    #[test]
    fn codel_range() {
        accepts(r#""queue": {"aqm": {"kind": "codel", "target_ms": 60000, "interval_ms": 60000}}"#);
        accepts(
            r#""queue": {"aqm": {"kind": "codel", "ecn": true, "ce_threshold_ms": 1, "ce_threshold_selector": "ect1"}}"#,
        );
        accepts(
            r#""rate": {"kind": "constant", "bps": 1e7}, "queue": {"aqm": {"kind": "fq_codel", "flows": 65536, "quantum": 64, "ecn": true}}"#,
        );
        for (fwd, field) in [
            (
                r#""queue": {"aqm": {"kind": "fq_codel", "flows": 0}}"#,
                "forward.queue.aqm.flows",
            ),
            (
                r#""queue": {"aqm": {"kind": "fq_codel", "quantum": 63}}"#,
                "forward.queue.aqm.quantum",
            ),
            (
                r#""queue": {"aqm": {"kind": "codel", "ce_threshold_ms": 0}}"#,
                "forward.queue.aqm.ce_threshold_ms",
            ),
            (
                r#""queue": {"aqm": {"kind": "codel", "ce_threshold_selector": "ect1"}}"#,
                "forward.queue.aqm.ce_threshold_selector",
            ),
        ] {
            assert_eq!(field_of(fwd), field, "{fwd}");
        }
        // Unknown keys are refused beside the flattened ECN ones.
        let j = r#"{"forward": {"queue": {"aqm": {"kind": "codel", "ecn": true, "tagret_ms": 5}}}, "return": {}}"#;
        assert!(
            LinkConfig::from_json(j).is_err(),
            "a misspelt key was accepted"
        );
        let f = field_of(r#""queue": {"aqm": {"kind": "codel", "target_ms": 0}}"#);
        assert_eq!(f, "forward.queue.aqm.target_ms");
        let f = field_of(r#""queue": {"aqm": {"kind": "codel", "interval_ms": 60001}}"#);
        assert_eq!(f, "forward.queue.aqm.interval_ms");
    }

    #[test]
    fn probabilities_within_zero_and_one() {
        accepts(r#""loss": [{"kind": "gilbert", "p": 0, "r": 1, "loss_good": 0, "loss_bad": 1}]"#);
        assert_eq!(
            field_of(r#""loss": [{"kind": "bernoulli", "p": -0.1}]"#),
            "forward.loss[0].p"
        );
        let f = field_of(
            r#""loss": [{"kind": "ber", "ber": 0}, {"kind": "gilbert", "p": 0.1, "r": 2}]"#,
        );
        assert_eq!(f, "forward.loss[1].r");
        let f = field_of(r#""loss": [{"kind": "gilbert", "p": 0.1, "r": 0.5, "loss_bad": 1.5}]"#);
        assert_eq!(f, "forward.loss[0].loss_bad");
        assert_eq!(
            field_of(r#""loss": [{"kind": "ber", "ber": 2}]"#),
            "forward.loss[0].ber"
        );
        let f = field_of(r#""loss": [{"kind": "schedule", "points": [[0, 0.5], [1, 1.5]]}]"#);
        assert_eq!(f, "forward.loss[0].points[1]");
    }

    #[test]
    fn trace_needs_exactly_one_source() {
        accepts(r#""rate": {"kind": "trace", "opportunities_ms": [1, 2]}"#);
        accepts(r#""rate": {"kind": "trace", "path": "/some/file"}"#);
        assert_eq!(field_of(r#""rate": {"kind": "trace"}"#), "forward.rate");
        let both = r#""rate": {"kind": "trace", "path": "f", "opportunities_ms": [1]}"#;
        assert_eq!(field_of(both), "forward.rate");
    }

    #[test]
    fn inline_trace_rules() {
        let e = |fwd: &str| {
            let j = format!(r#"{{"forward": {{{fwd}}}, "return": {{}}}}"#);
            LinkConfig::from_json(&j).unwrap_err()
        };
        let bad = e(r#""rate": {"kind": "trace", "opportunities_ms": [1, 5, 3]}"#);
        assert_eq!(bad.field, "forward.rate.opportunities_ms");
        assert!(
            bad.message.starts_with("[2]: 3 ms comes before"),
            "{}",
            bad.message
        );
        let late = e(r#""rate": {"kind": "trace", "opportunities_ms": [1000000001]}"#);
        assert_eq!(late.field, "forward.rate.opportunities_ms");
        let zero = e(r#""rate": {"kind": "trace", "opportunities_ms": [0, 0]}"#);
        assert_eq!(zero.field, "forward.rate.opportunities_ms");
        let empty = e(r#""rate": {"kind": "trace", "opportunities_ms": []}"#);
        assert_eq!(empty.field, "forward.rate.opportunities_ms");
    }

    #[test]
    fn trace_file_errors_name_path_and_line() {
        let path = std::env::temp_dir().join(format!("satlink-trace-{}.txt", std::process::id()));
        std::fs::write(&path, "1\n\n5\nx\n").unwrap();
        let p = path.to_str().unwrap();
        let j = format!(
            r#"{{"forward": {{"rate": {{"kind": "trace", "path": "{p}"}}}}, "return": {{}}}}"#
        );
        let e = check(&j).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(e.field, "forward.rate.path");
        assert!(
            e.message.starts_with(&format!("{p}: line 4: ")),
            "{}",
            e.message
        );
    }

    #[test]
    fn check_inlines_traces_and_derives_numbers() {
        let path = std::env::temp_dir().join(format!("satlink-check-{}.txt", std::process::id()));
        std::fs::write(&path, "1\n1\n4\n").unwrap();
        let j = format!(
            r#"{{"seed": 9, "forward": {{"rate": {{"kind": "trace", "path": "{}"}},
                "delay": {{"kind": "schedule", "points": [[0, 20], [10, 40]], "period_s": 20}},
                "queue": {{"limit": {{"kind": "ms", "ms": 100}}}},
                "loss": [{{"kind": "bernoulli", "p": 0.01}}, {{"kind": "ber", "ber": 1e-6}},
                         {{"kind": "gilbert", "p": 0.01, "r": 0.09}}]}},
                "return": {{"rate": {{"kind": "schedule", "points": [[0, 1e6], [5, 3e6]]}},
                "delay": {{"kind": "constant", "ms": 15}},
                "queue": {{"limit": {{"kind": "packets", "n": 50}}}}}}}}"#,
            path.display()
        );
        let c = check(&j).unwrap();
        std::fs::remove_file(&path).unwrap();
        let v: serde_json::Value = serde_json::from_str(&c.to_json_line()).unwrap();
        assert_eq!(v["ok"], true);
        assert!(v["config"].get("seed").is_none());
        assert_eq!(
            v["config"]["forward"]["rate"],
            serde_json::json!({"kind": "trace", "opportunities_ms": [1, 1, 4]})
        );
        assert_eq!(
            v["config"]["return"]["jitter"],
            serde_json::json!({"kind": "none"})
        );
        let f = &c.derived.forward;
        let bps = 3.0 * 1504.0 * 8.0 / 0.004;
        assert_eq!(f.mean_bps, Some(bps));
        // The busiest millisecond holds two opportunities (1, 1): 2 x 1504
        // bytes a millisecond, and that much (plus one leftover) at once.
        assert_eq!(f.peak_bps, Some(2.0 * 1504.0 * 8.0 * 1e3));
        assert_eq!(f.peak_burst_bytes, 3 * 1504);
        assert_eq!(f.queue_limit_bytes, Some((bps / 8.0 * 0.1).ceil() as u64));
        let ber = 1.0 - (1.0f64 - 1e-6).powi(12_000);
        let expect = 1.0 - (1.0 - 0.01) * (1.0 - ber) * (1.0 - 0.1);
        assert!(
            (f.packet_loss_1500 - expect).abs() < 1e-12,
            "{}",
            f.packet_loss_1500
        );
        let r = &c.derived.ret;
        // A schedule that does not repeat: its last value holds.
        assert_eq!(
            (r.mean_bps, r.queue_limit_packets, r.queue_limit_bytes),
            (Some(3e6), Some(50), None)
        );
        // Its peak is its largest value, not its long-run one.
        assert_eq!((r.peak_bps, r.peak_burst_bytes), (Some(3e6), 0));
        assert_eq!(r.packet_loss_1500, 0.0);
        assert_eq!(c.derived.base_rtt_ms, 35.0);
        assert_eq!(f.trace_opportunity_bytes, 1504);
        // The canonical form is itself a valid configuration that checks the same.
        let again = check(&serde_json::to_string(&v["config"]).unwrap()).unwrap();
        assert_eq!(again.derived, c.derived);
    }

    #[test]
    fn check_errors_as_json() {
        let e = check(r#"{"forward": {"rate": {"kind": "constant", "bps": 0}}, "return": {}}"#)
            .unwrap_err();
        let v: serde_json::Value = serde_json::from_str(&e.to_json_line()).unwrap();
        assert_eq!(v["ok"], false);
        assert_eq!(v["field"], "forward.rate.bps");
        let e = check("{").unwrap_err();
        assert_eq!(e.field, "config");
        let e = check(r#"{"forward": {}, "return": {}, "colour": 1}"#).unwrap_err();
        assert_eq!(e.field, "config");
        assert!(e.message.contains("colour"));
    }

    #[test]
    fn queue_ms_follows_the_long_run_rate_of_a_schedule() {
        // Non-repeating: 1 Mbit/s for 10 s, then 8 Mbit/s for ever: 100 ms = 100,000 bytes.
        let d: DirectionConfig = serde_json::from_str(
            r#"{"rate": {"kind": "schedule", "points": [[0, 1e6], [10, 8e6]]},
                "queue": {"limit": {"kind": "ms", "ms": 100}}}"#,
        )
        .unwrap();
        assert_eq!(
            d.derived("forward").unwrap().queue_limit_bytes,
            Some(100_000)
        );
    }
}
