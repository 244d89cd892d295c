//! Satellite access in the configuration: the framed carriers (DVB-S2 ACM or
//! CCM forward, DVB-RCS2 bandwidth on demand on return), the terminals,
//! recorded LEO traces and the reconfiguration event. Part of [`super`]:
//! the ranges are in its table, checked here the same way, and `--check`
//! reports the numbers of [`DerivedAccess`].

use super::*;
use crate::acm::{Acm, Adaptation, Ccm, ModcodRule};
use crate::dama::{DamaParams, ReturnCarrier, TerminalAllocation};
use crate::delay::RoundTrip;
use crate::encap::{efficiency, Encapsulation, Gse, Raw, Rle, RleTrailer};
use crate::fade::{Attenuation, Channel};
use crate::forward::{ForwardCarrier, ForwardTerminalState};
use crate::framed::Framed;
use crate::leo::{self, Reconfiguration};
use crate::modcod::{by_name, MODCODS};
use crate::route::{Prefix, Router};

/// Symbol rate of the forward carrier, baud.
pub const MIN_SYMBOL_RATE: f64 = 1e3;
pub const MAX_SYMBOL_RATE: f64 = 1e10;
/// Roll-off of the forward carrier (DVB-S2: 0.35, 0.25, 0.2; S2X down to 0.05).
pub const MIN_ROLL_OFF: f64 = 0.05;
pub const MAX_ROLL_OFF: f64 = 0.35;
/// Largest ACM margin and hysteresis, dB.
pub const MAX_ACM_DB: f64 = 20.0;
/// ACM refresh period, ms.
pub const MIN_REFRESH_MS: f64 = 1.0;
pub const MAX_REFRESH_MS: f64 = 60_000.0;
/// Superframe duration, ms.
pub const MIN_SUPERFRAME_MS: f64 = 1.0;
pub const MAX_SUPERFRAME_MS: f64 = 1_000.0;
/// Longest synchronisation period and RTT estimate, ms.
pub const MAX_SYNC_PERIOD_MS: f64 = 60_000.0;
pub const MAX_RTT_ESTIMATE_MS: f64 = 60_000.0;
/// Largest minimum scheduling latency, superframes.
pub const MAX_MSL_FRAMES: u32 = 1_000;
/// Largest RBDC over-estimation factor.
pub const MAX_OVERESTIMATION: f64 = 10.0;
/// Longest RBDC timeout, ms.
pub const MAX_RBDC_TIMEOUT_MS: f64 = 600_000.0;
/// Bytes of a return timeslot.
pub const MIN_SLOT_BYTES: u32 = 16;
pub const MAX_SLOT_BYTES: u32 = 65_535;
/// Most terminals on one satellite.
pub const MAX_TERMINALS: usize = 256;
/// Clear-sky C/N, dB.
pub const MIN_CN_DB: f64 = -10.0;
pub const MAX_CN_DB: f64 = 50.0;
/// Largest VBDC request, bytes (16 GiB).
pub const MAX_VBDC_BYTES: u64 = 16 << 30;
/// Longest interval of a LEO delay trace, ms.
pub const MAX_INTERVAL_MS: f64 = 60_000.0;

/// A framed carrier shared by the terminals.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AccessConfig {
    /// DVB-S2 adaptive coding and modulation (forward).
    Acm {
        symbol_rate_baud: f64,
        #[serde(default = "roll_off")]
        roll_off: f64,
        #[serde(default)]
        pilots: bool,
        #[serde(default = "margin")]
        margin_db: f64,
        #[serde(default = "hysteresis")]
        hysteresis_db: f64,
        #[serde(default = "refresh")]
        refresh_ms: f64,
        /// Allowed MODCODs (default: all 28).
        #[serde(default = "all_modcods")]
        modcods: Vec<String>,
        /// Default: GSE with a 6-byte label.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encapsulation: Option<EncapsulationConfig>,
    },
    /// DVB-S2 constant coding and modulation (forward): one MODCOD.
    Ccm {
        symbol_rate_baud: f64,
        #[serde(default = "roll_off")]
        roll_off: f64,
        #[serde(default)]
        pilots: bool,
        modcod: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encapsulation: Option<EncapsulationConfig>,
    },
    /// DVB-RCS2 bandwidth on demand (return); unset values come from the
    /// preset.
    Dama {
        #[serde(default)]
        preset: Preset,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        superframe_ms: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sync_period_ms: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        msl_frames: Option<u32>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rtt_estimate_ms: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        overestimation: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rbdc_timeout_ms: Option<f64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        slot_bytes: Option<u32>,
        /// Default: RLE, 2-byte protocol type, sequence-number trailer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        encapsulation: Option<EncapsulationConfig>,
    },
}

fn roll_off() -> f64 {
    0.2
}
fn margin() -> f64 {
    1.0
}
fn hysteresis() -> f64 {
    0.5
}
fn refresh() -> f64 {
    1000.0
}
fn all_modcods() -> Vec<String> {
    MODCODS.iter().map(|m| m.name.to_string()).collect()
}

/// The defaults of a bandwidth-on-demand configuration.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// OpenSAND: superframe 26.5 ms, sync period 1 s, MSL 23 superframes,
    /// RTT estimate = MSL (609.5 ms), no over-estimation, RBDC timeout =
    /// sync period + 1 superframe, CRA 0 unless given.
    #[default]
    Opensand,
    /// ns-3 satellite module: superframe 100 ms, a request every 100 ms, no
    /// MSL beyond the round trip, RTT estimate 560 ms, over-estimation 1.1,
    /// RBDC timeout 200 ms, CRA 50 kbit/s unless given.
    Ns3,
}

/// Every value of a bandwidth-on-demand configuration, resolved.
#[derive(Clone, Copy, Debug, PartialEq)]
struct DamaValues {
    superframe_ms: f64,
    sync_period_ms: f64,
    msl_frames: u32,
    rtt_estimate_ms: f64,
    overestimation: f64,
    rbdc_timeout_ms: f64,
    slot_bytes: u32,
}

impl Preset {
    fn values(self) -> DamaValues {
        match self {
            Preset::Opensand => DamaValues {
                superframe_ms: 26.5,
                sync_period_ms: 1000.0,
                msl_frames: 23,
                rtt_estimate_ms: 23.0 * 26.5,
                overestimation: 1.0,
                rbdc_timeout_ms: 1026.5,
                slot_bytes: 188,
            },
            Preset::Ns3 => DamaValues {
                superframe_ms: 100.0,
                sync_period_ms: 100.0,
                msl_frames: 0,
                rtt_estimate_ms: 560.0,
                overestimation: 1.1,
                rbdc_timeout_ms: 200.0,
                slot_bytes: 188,
            },
        }
    }

    /// A terminal's CRA when it gives none.
    fn cra_bps(self) -> f64 {
        match self {
            Preset::Opensand => 0.0,
            Preset::Ns3 => 50e3,
        }
    }
}

/// Encapsulation of packets into the carrier's frames ([`crate::encap`]).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum EncapsulationConfig {
    /// Packets fill frames byte for byte.
    None,
    /// GSE (forward); `label_bytes` 0, 3 or 6 (default 6).
    Gse {
        #[serde(default = "six")]
        label_bytes: u32,
    },
    /// RLE (return); `protocol_type_bytes` 0 ..= 2 (default 2), `trailer`
    /// "seq" (1 byte, default) or "crc" (4 bytes).
    Rle {
        #[serde(default = "two")]
        protocol_type_bytes: u32,
        #[serde(default)]
        trailer: TrailerConfig,
    },
}

fn six() -> u32 {
    6
}
fn two() -> u32 {
    2
}

/// The trailer of a fragmented RLE packet.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum TrailerConfig {
    #[default]
    Seq,
    Crc,
}

impl EncapsulationConfig {
    fn build(self) -> Box<dyn Encapsulation> {
        match self {
            EncapsulationConfig::None => Box::new(Raw),
            EncapsulationConfig::Gse { label_bytes } => Box::new(Gse::new(label_bytes)),
            EncapsulationConfig::Rle {
                protocol_type_bytes,
                trailer,
            } => Box::new(Rle::new(
                protocol_type_bytes,
                match trailer {
                    TrailerConfig::Seq => RleTrailer::Seq,
                    TrailerConfig::Crc => RleTrailer::Crc,
                },
            )),
        }
    }
}

/// One terminal on the satellite.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TerminalConfig {
    /// The prefixes behind the terminal (its client LAN, its own link
    /// address): forward packets go to the terminal whose prefix holds their
    /// destination (longest first). Needed when there are two terminals or more.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<String>,
    /// Its forward channel (with a forward access).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forward: Option<TerminalForwardConfig>,
    /// Its return allocation (with a return access).
    #[serde(default, rename = "return", skip_serializing_if = "Option::is_none")]
    pub ret: Option<TerminalReturnConfig>,
}

/// A terminal's forward channel.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TerminalForwardConfig {
    /// C/N in clear sky, dB (default 20).
    #[serde(default = "twenty")]
    pub clear_sky_cn_db: f64,
    /// Rain attenuation over time (absent: clear sky throughout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fade: Option<FadeConfig>,
}

impl Default for TerminalForwardConfig {
    fn default() -> Self {
        TerminalForwardConfig {
            clear_sky_cn_db: twenty(),
            fade: None,
        }
    }
}

fn twenty() -> f64 {
    20.0
}

/// An attenuation series ([`crate::fade`]): a file (`path`) or its points
/// inline (`points`, `[time_s, dB]`), exactly one of the two.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FadeConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub points: Option<Vec<(f64, f64)>>,
    /// Repeat the series (period: its last point's time).
    #[serde(default, rename = "loop")]
    pub looped: bool,
}

/// What a terminal may be given on the return carrier.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TerminalReturnConfig {
    /// Constant rate (default: the preset's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cra_bps: Option<f64>,
    /// Largest RBDC rate; 0 (default) disables RBDC.
    #[serde(default)]
    pub rbdc_max_bps: f64,
    /// Largest VBDC request; 0 (default) disables VBDC.
    #[serde(default)]
    pub vbdc_max_bytes: u64,
    /// Largest share of free capacity; 0 (default): none.
    #[serde(default)]
    pub fca_max_bps: f64,
}

/// The periodic reconfiguration ([`crate::leo::Reconfiguration`]).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReconfigurationConfig {
    /// Default 15 s.
    #[serde(default = "fifteen")]
    pub period_s: f64,
    #[serde(default)]
    pub offset_s: f64,
    /// Extra delay and how long it lasts (0: none).
    #[serde(default)]
    pub delay_ms: f64,
    #[serde(default)]
    pub delay_duration_ms: f64,
    /// Loss probability (default 1) and how long it lasts (0: none).
    #[serde(default = "one")]
    pub loss_p: f64,
    #[serde(default)]
    pub loss_duration_ms: f64,
    /// The loss window is an outage instead: nothing is sent, packets wait.
    #[serde(default)]
    pub outage: bool,
}

fn fifteen() -> f64 {
    15.0
}

impl ReconfigurationConfig {
    pub(super) fn model(&self) -> Reconfiguration {
        Reconfiguration {
            period_s: self.period_s,
            offset_s: self.offset_s,
            delay_ms: self.delay_ms,
            delay_duration_ms: self.delay_duration_ms,
            loss_p: self.loss_p,
            loss_duration_ms: self.loss_duration_ms,
            outage: self.outage,
        }
    }

    pub(super) fn validate(&self, f: &str, dir: &DirectionConfig) -> Result<(), ConfigError> {
        check_positive(
            &format!("{f}.period_s"),
            "period (s)",
            self.period_s,
            MAX_SCHEDULE_S,
        )?;
        let p_ms = self.period_s * 1e3;
        below(
            &format!("{f}.offset_s"),
            "offset (s)",
            self.offset_s,
            self.period_s,
        )?;
        check_range(
            &format!("{f}.delay_ms"),
            "delay (ms)",
            self.delay_ms,
            0.0,
            MAX_DELAY_MS,
        )?;
        below(
            &format!("{f}.delay_duration_ms"),
            "duration (ms)",
            self.delay_duration_ms,
            p_ms,
        )?;
        check_prob(&format!("{f}.loss_p"), self.loss_p)?;
        below(
            &format!("{f}.loss_duration_ms"),
            "duration (ms)",
            self.loss_duration_ms,
            p_ms,
        )?;
        if self.outage {
            if matches!(dir.rate, RateConfig::Trace { .. }) {
                return err(
                    format!("{f}.outage"),
                    "an outage needs a rate, not a Mahimahi trace",
                );
            }
            if dir.access.is_some() {
                return err(
                    format!("{f}.outage"),
                    "an outage cannot gate a framed carrier",
                );
            }
        }
        let m = self.model();
        let sched = |r: Result<Option<Schedule>, ScheduleError>| {
            r.map(|_| ()).or_else(|e| err(f.to_string(), e.to_string()))
        };
        sched(m.delay_s())?;
        sched(m.loss())?;
        sched(m.up())
    }
}

/// `v` is finite, at least 0 and below `hi`.
fn below(field: &str, what: &str, v: f64, hi: f64) -> Result<(), ConfigError> {
    if !v.is_finite() || v < 0.0 || v >= hi {
        return range_err(
            field,
            format!("{what} must be at least 0 and below {hi}, got {v}"),
            0.0,
            hi,
            v,
        );
    }
    Ok(())
}

/// A LEO bandwidth trace: check, read a file if need be, build the rate.
pub(super) fn leo_rate(
    field: &str,
    unit_bps: f64,
    path: &Option<String>,
    ms: &Option<Vec<u64>>,
    read: bool,
) -> Result<Option<Schedule>, ConfigError> {
    check_rate(&format!("{field}.unit_bps"), unit_bps)?;
    let owned;
    let lines: &[u64] = match (path, ms) {
        (Some(p), None) if p.is_empty() => return err(format!("{field}.path"), "must name a file"),
        (Some(_), None) if !read => return Ok(None),
        (Some(p), None) => {
            owned = leo_file(&format!("{field}.path"), p, leo::parse_bandwidth)?;
            &owned
        }
        (None, Some(ms)) => {
            leo::check_bandwidth(ms).or_else(|e| inline_err(&format!("{field}.ms"), e))?;
            ms
        }
        _ => return err(field, "a LEO trace needs exactly one of path and ms"),
    };
    let peak = leo::max_units(lines) as f64 * unit_bps;
    if peak > MAX_RATE_BPS {
        return range_err(
            &format!("{field}.unit_bps"),
            format!("the busiest millisecond carries {peak} bit/s, above {MAX_RATE_BPS}"),
            MIN_RATE_BPS,
            MAX_RATE_BPS,
            peak,
        );
    }
    leo::bandwidth_schedule(lines, unit_bps)
        .map(Some)
        .or_else(|e| err(field, e.to_string()))
}

/// A LEO delay trace (seconds): check, read a file if need be, build.
pub(super) fn leo_delay(
    field: &str,
    interval_ms: f64,
    path: &Option<String>,
    values_ms: &Option<Vec<f64>>,
    read: bool,
) -> Result<Option<Schedule>, ConfigError> {
    check_range(
        &format!("{field}.interval_ms"),
        "interval (ms)",
        interval_ms,
        1.0,
        MAX_INTERVAL_MS,
    )?;
    let owned;
    let values: &[f64] = match (path, values_ms) {
        (Some(p), None) if p.is_empty() => return err(format!("{field}.path"), "must name a file"),
        (Some(_), None) if !read => return Ok(None),
        (Some(p), None) => {
            owned = leo_file(&format!("{field}.path"), p, leo::parse_delays)?;
            &owned
        }
        (None, Some(v)) => {
            leo::check_delays(v).or_else(|e| inline_err(&format!("{field}.values_ms"), e))?;
            v
        }
        _ => return err(field, "a LEO trace needs exactly one of path and values_ms"),
    };
    if values.len() as f64 * interval_ms / 1e3 > MAX_SCHEDULE_S {
        return err(
            field,
            format!("the trace is longer than {MAX_SCHEDULE_S} s"),
        );
    }
    leo::delay_schedule(values, interval_ms)
        .map(Some)
        .or_else(|e| err(field, e.to_string()))
}

fn inline_err<T>(field: &str, e: crate::capacity::TraceError) -> Result<T, ConfigError> {
    let msg = match e.line {
        0 => e.message,
        n => format!("[{}]: {}", n - 1, e.message),
    };
    err(field, msg)
}

fn leo_file<V>(
    field: &str,
    path: &str,
    parse: fn(&str) -> Result<V, crate::capacity::TraceError>,
) -> Result<V, ConfigError> {
    let text = std::fs::read_to_string(path)
        .or_else(|e| err(field, format!("cannot read {path}: {e}")))?;
    parse(&text).or_else(|e| err(field, format!("{path}: {e}")))
}

impl FadeConfig {
    /// Check (and read a file when `read`): the series, or None for an
    /// unread file.
    fn attenuation(&self, f: &str, read: bool) -> Result<Option<Attenuation>, ConfigError> {
        let fade_err = |field: String, e: crate::fade::FadeError, inline: bool| {
            let msg = match (e.line, inline) {
                (0, _) => e.message,
                (n, true) => format!("[{}]: {}", n - 1, e.message),
                (n, false) => format!("line {n}: {}", e.message),
            };
            err(field, msg)
        };
        let points = match (&self.path, &self.points) {
            (Some(p), None) if p.is_empty() => return err(format!("{f}.path"), "must name a file"),
            (Some(_), None) if !read => return Ok(None),
            (Some(p), None) => {
                let field = format!("{f}.path");
                let text = std::fs::read_to_string(p)
                    .or_else(|e| err(&field, format!("cannot read {p}: {e}")))?;
                match Attenuation::parse(&text) {
                    Ok(points) => points,
                    Err(e) => {
                        return fade_err(field, e, false).map_err(|mut c| {
                            c.message = format!("{p}: {}", c.message);
                            c
                        })
                    }
                }
            }
            (None, Some(points)) => points.clone(),
            _ => return err(f, "a fade needs exactly one of path and points"),
        };
        match Attenuation::new(&points, self.looped) {
            Ok(a) => Ok(Some(a)),
            Err(e) => fade_err(format!("{f}.points"), e, true),
        }
    }
}

impl AccessConfig {
    /// Fill what the preset and the direction decide.
    pub(super) fn normalise(&mut self) {
        match self {
            AccessConfig::Acm { encapsulation, .. } | AccessConfig::Ccm { encapsulation, .. } => {
                encapsulation.get_or_insert(EncapsulationConfig::Gse { label_bytes: 6 });
            }
            AccessConfig::Dama {
                preset,
                superframe_ms,
                sync_period_ms,
                msl_frames,
                rtt_estimate_ms,
                overestimation,
                rbdc_timeout_ms,
                slot_bytes,
                encapsulation,
            } => {
                let d = preset.values();
                let sf = *superframe_ms.get_or_insert(d.superframe_ms);
                let sync = *sync_period_ms.get_or_insert(d.sync_period_ms);
                let msl = *msl_frames.get_or_insert(d.msl_frames);
                rtt_estimate_ms.get_or_insert(if *preset == Preset::Opensand {
                    msl as f64 * sf
                } else {
                    d.rtt_estimate_ms
                });
                overestimation.get_or_insert(d.overestimation);
                rbdc_timeout_ms.get_or_insert(if *preset == Preset::Opensand {
                    sync + sf
                } else {
                    d.rbdc_timeout_ms
                });
                slot_bytes.get_or_insert(d.slot_bytes);
                encapsulation.get_or_insert(EncapsulationConfig::Rle {
                    protocol_type_bytes: 2,
                    trailer: TrailerConfig::Seq,
                });
            }
        }
    }

    fn values(&self) -> Option<DamaValues> {
        if !matches!(self, AccessConfig::Dama { .. }) {
            return None;
        }
        let mut c = self.clone();
        c.normalise();
        let AccessConfig::Dama {
            superframe_ms: Some(superframe_ms),
            sync_period_ms: Some(sync_period_ms),
            msl_frames: Some(msl_frames),
            rtt_estimate_ms: Some(rtt_estimate_ms),
            overestimation: Some(overestimation),
            rbdc_timeout_ms: Some(rbdc_timeout_ms),
            slot_bytes: Some(slot_bytes),
            ..
        } = c
        else {
            unreachable!("normalised");
        };
        Some(DamaValues {
            superframe_ms,
            sync_period_ms,
            msl_frames,
            rtt_estimate_ms,
            overestimation,
            rbdc_timeout_ms,
            slot_bytes,
        })
    }

    fn preset(&self) -> Preset {
        match self {
            AccessConfig::Dama { preset, .. } => *preset,
            _ => Preset::Opensand,
        }
    }

    fn encapsulation(&self) -> EncapsulationConfig {
        let mut c = self.clone();
        c.normalise();
        match c {
            AccessConfig::Acm { encapsulation, .. }
            | AccessConfig::Ccm { encapsulation, .. }
            | AccessConfig::Dama { encapsulation, .. } => encapsulation.expect("normalised"),
        }
    }

    fn dama_params(&self) -> Option<DamaParams> {
        let v = self.values()?;
        let sf = Duration::from_secs_f64(v.superframe_ms / 1e3);
        Some(DamaParams {
            superframe: sf,
            sync_frames: ((v.sync_period_ms / v.superframe_ms).round() as u64).max(1),
            msl_frames: v.msl_frames as u64,
            rtt_estimate: Duration::from_secs_f64(v.rtt_estimate_ms / 1e3),
            overestimation: v.overestimation,
            rbdc_timeout_frames: (v.rbdc_timeout_ms / v.superframe_ms).ceil() as u64,
            slot_bytes: v.slot_bytes,
        })
    }

    /// Check the values; `name` is the direction.
    pub(super) fn validate(&self, name: &str, dir: &DirectionConfig) -> Result<(), ConfigError> {
        let f = format!("{name}.access");
        let forward = name == "forward";
        match self {
            AccessConfig::Acm { .. } | AccessConfig::Ccm { .. } if !forward => {
                return err(
                    format!("{f}.kind"),
                    "acm and ccm are forward carriers; the return access is dama",
                )
            }
            AccessConfig::Dama { .. } if forward => {
                return err(
                    format!("{f}.kind"),
                    "dama is the return carrier; the forward access is acm or ccm",
                )
            }
            _ => {}
        }
        match self {
            AccessConfig::Acm {
                symbol_rate_baud,
                roll_off,
                margin_db,
                hysteresis_db,
                refresh_ms,
                modcods,
                ..
            } => {
                carrier(&f, *symbol_rate_baud, *roll_off)?;
                check_range(
                    &format!("{f}.margin_db"),
                    "margin (dB)",
                    *margin_db,
                    0.0,
                    MAX_ACM_DB,
                )?;
                check_range(
                    &format!("{f}.hysteresis_db"),
                    "hysteresis (dB)",
                    *hysteresis_db,
                    0.0,
                    MAX_ACM_DB,
                )?;
                check_range(
                    &format!("{f}.refresh_ms"),
                    "refresh period (ms)",
                    *refresh_ms,
                    MIN_REFRESH_MS,
                    MAX_REFRESH_MS,
                )?;
                if modcods.is_empty() {
                    return err(format!("{f}.modcods"), "needs at least one MODCOD");
                }
                for (i, m) in modcods.iter().enumerate() {
                    modcod(&format!("{f}.modcods[{i}]"), m)?;
                }
            }
            AccessConfig::Ccm {
                symbol_rate_baud,
                roll_off,
                modcod: m,
                ..
            } => {
                carrier(&f, *symbol_rate_baud, *roll_off)?;
                modcod(&format!("{f}.modcod"), m)?;
            }
            AccessConfig::Dama { .. } => {
                Self::validate_dama(&f, name, dir, &self.values().expect("dama"))?
            }
        }
        if forward && !matches!(dir.rate, RateConfig::Unlimited) {
            return err(
                format!("{name}.rate"),
                "must be unlimited with a forward access: the carrier's rate follows its MODCODs",
            );
        }
        self.validate_encapsulation(&f, forward)
    }

    /// Bandwidth on demand's values, and a return rate that carries at least one slot.
    fn validate_dama(
        f: &str,
        name: &str,
        dir: &DirectionConfig,
        v: &DamaValues,
    ) -> Result<(), ConfigError> {
        check_range(
            &format!("{f}.superframe_ms"),
            "superframe (ms)",
            v.superframe_ms,
            MIN_SUPERFRAME_MS,
            MAX_SUPERFRAME_MS,
        )?;
        check_range(
            &format!("{f}.sync_period_ms"),
            "sync period (ms)",
            v.sync_period_ms,
            v.superframe_ms,
            MAX_SYNC_PERIOD_MS,
        )?;
        if v.msl_frames > MAX_MSL_FRAMES {
            return range_err(
                &format!("{f}.msl_frames"),
                format!(
                    "superframes must be within 0 and {MAX_MSL_FRAMES}, got {}",
                    v.msl_frames
                ),
                0.0,
                MAX_MSL_FRAMES as f64,
                v.msl_frames as f64,
            );
        }
        check_positive(
            &format!("{f}.rtt_estimate_ms"),
            "RTT estimate (ms)",
            v.rtt_estimate_ms,
            MAX_RTT_ESTIMATE_MS,
        )?;
        check_range(
            &format!("{f}.overestimation"),
            "over-estimation factor",
            v.overestimation,
            1.0,
            MAX_OVERESTIMATION,
        )?;
        check_range(
            &format!("{f}.rbdc_timeout_ms"),
            "RBDC timeout (ms)",
            v.rbdc_timeout_ms,
            v.superframe_ms,
            MAX_RBDC_TIMEOUT_MS,
        )?;
        if !(MIN_SLOT_BYTES..=MAX_SLOT_BYTES).contains(&v.slot_bytes) {
            return range_err(
                &format!("{f}.slot_bytes"),
                format!(
                    "bytes must be within {MIN_SLOT_BYTES} and {MAX_SLOT_BYTES}, got {}",
                    v.slot_bytes
                ),
                MIN_SLOT_BYTES as f64,
                MAX_SLOT_BYTES as f64,
                v.slot_bytes as f64,
            );
        }
        // The carrier is the direction's rate: a rate, at least one slot.
        let rate = format!("{name}.rate");
        let peak = match &dir.rate {
            RateConfig::Constant { bps } => *bps,
            RateConfig::Schedule { points, .. } => points.iter().map(|p| p.1).fold(0.0, f64::max),
            RateConfig::LeoTrace { .. } => MAX_RATE_BPS,
            RateConfig::Unlimited | RateConfig::Trace { .. } => {
                return err(rate, "the return carrier of bandwidth on demand needs a constant, scheduled or LEO trace rate")
            }
        };
        let slot_bps = v.slot_bytes as f64 * 8.0 / (v.superframe_ms / 1e3);
        if peak < slot_bps {
            return err(
                rate,
                format!("the carrier must hold at least one {}-byte slot per {} ms superframe ({slot_bps} bit/s)", v.slot_bytes, v.superframe_ms),
            );
        }
        Ok(())
    }

    /// The encapsulation of the direction's side.
    fn validate_encapsulation(&self, f: &str, forward: bool) -> Result<(), ConfigError> {
        match (self.encapsulation(), forward) {
            (EncapsulationConfig::Gse { label_bytes }, true) => {
                if ![0, 3, 6].contains(&label_bytes) {
                    return err(
                        format!("{f}.encapsulation.label_bytes"),
                        format!("must be 0, 3 or 6, got {label_bytes}"),
                    );
                }
            }
            (
                EncapsulationConfig::Rle {
                    protocol_type_bytes,
                    ..
                },
                false,
            ) => {
                if protocol_type_bytes > 2 {
                    return range_err(
                        &format!("{f}.encapsulation.protocol_type_bytes"),
                        format!("bytes must be within 0 and 2, got {protocol_type_bytes}"),
                        0.0,
                        2.0,
                        protocol_type_bytes as f64,
                    );
                }
            }
            (EncapsulationConfig::None, _) => {}
            (_, true) => {
                return err(
                    format!("{f}.encapsulation.kind"),
                    "the forward link encapsulates with gse (or none)",
                )
            }
            (_, false) => {
                return err(
                    format!("{f}.encapsulation.kind"),
                    "the return link encapsulates with rle (or none)",
                )
            }
        }
        Ok(())
    }
}

fn carrier(f: &str, symbol_rate: f64, roll_off: f64) -> Result<(), ConfigError> {
    check_range(
        &format!("{f}.symbol_rate_baud"),
        "symbol rate (baud)",
        symbol_rate,
        MIN_SYMBOL_RATE,
        MAX_SYMBOL_RATE,
    )?;
    check_range(
        &format!("{f}.roll_off"),
        "roll-off",
        roll_off,
        MIN_ROLL_OFF,
        MAX_ROLL_OFF,
    )
}

fn modcod(field: &str, name: &str) -> Result<usize, ConfigError> {
    by_name(name).ok_or_else(|| ConfigError {
        field: field.into(),
        message: format!("unknown MODCOD {name:?}: one of \"QPSK 1/4\" ... \"32APSK 9/10\" (DVB-S2, normal frames)"),
        range: None,
    })
}

impl LinkConfig {
    /// How many terminals the link has (1 unless `terminals` lists more).
    pub fn terminal_count(&self) -> usize {
        self.terminals.as_ref().map_or(1, |t| t.len().max(1))
    }

    fn terminal_list(&self) -> Vec<TerminalConfig> {
        self.terminals
            .clone()
            .unwrap_or_else(|| vec![TerminalConfig::default()])
    }

    /// Fill every default: the accesses' presets and encapsulation, and
    /// each terminal's part of an access. Nothing changes without access or
    /// terminals.
    pub(super) fn normalise(&mut self) {
        for d in [&mut self.forward, &mut self.ret] {
            if let Some(a) = d.access.as_mut() {
                a.normalise();
            }
        }
        let fwd = self.forward.access.is_some();
        let ret = self.ret.access.as_ref().map(|a| a.preset());
        if !fwd && ret.is_none() {
            return;
        }
        let mut terms = self.terminal_list();
        for t in terms.iter_mut() {
            if fwd {
                t.forward.get_or_insert_with(TerminalForwardConfig::default);
            }
            if let Some(p) = ret {
                let r = t.ret.get_or_insert_with(TerminalReturnConfig::default);
                r.cra_bps.get_or_insert(p.cra_bps());
            }
        }
        self.terminals = Some(terms);
    }

    /// Check the terminals against the accesses (no file access).
    pub(super) fn validate_terminals(&self) -> Result<(), ConfigError> {
        let Some(terms) = &self.terminals else {
            return Ok(());
        };
        if terms.is_empty() || terms.len() > MAX_TERMINALS {
            return range_err(
                "terminals",
                format!(
                    "terminals must be within 1 and {MAX_TERMINALS}, got {}",
                    terms.len()
                ),
                1.0,
                MAX_TERMINALS as f64,
                terms.len() as f64,
            );
        }
        let mut cra_total = 0.0;
        for (i, t) in terms.iter().enumerate() {
            let f = format!("terminals[{i}]");
            if terms.len() > 1 && t.subnets.is_empty() {
                return err(
                    format!("{f}.subnets"),
                    "each of several terminals needs its subnets",
                );
            }
            for (j, s) in t.subnets.iter().enumerate() {
                s.parse::<Prefix>()
                    .or_else(|e| err(format!("{f}.subnets[{j}]"), e.to_string()))?;
            }
            match (&t.forward, &self.forward.access) {
                (Some(_), None) => return err(format!("{f}.forward"), "needs forward.access"),
                (Some(fw), Some(_)) => {
                    check_range(
                        &format!("{f}.forward.clear_sky_cn_db"),
                        "C/N (dB)",
                        fw.clear_sky_cn_db,
                        MIN_CN_DB,
                        MAX_CN_DB,
                    )?;
                    if let Some(fade) = &fw.fade {
                        fade.attenuation(&format!("{f}.forward.fade"), false)?;
                    }
                }
                _ => {}
            }
            match (&t.ret, &self.ret.access) {
                (Some(_), None) => return err(format!("{f}.return"), "needs return.access"),
                (Some(r), Some(a)) => {
                    let cra = r.cra_bps.unwrap_or(a.preset().cra_bps());
                    for (k, v) in [
                        ("cra_bps", cra),
                        ("rbdc_max_bps", r.rbdc_max_bps),
                        ("fca_max_bps", r.fca_max_bps),
                    ] {
                        check_range(
                            &format!("{f}.return.{k}"),
                            "rate (bit/s)",
                            v,
                            0.0,
                            MAX_RATE_BPS,
                        )?;
                    }
                    if r.vbdc_max_bytes > MAX_VBDC_BYTES {
                        return range_err(
                            &format!("{f}.return.vbdc_max_bytes"),
                            format!(
                                "bytes must be within 0 and {MAX_VBDC_BYTES}, got {}",
                                r.vbdc_max_bytes
                            ),
                            0.0,
                            MAX_VBDC_BYTES as f64,
                            r.vbdc_max_bytes as f64,
                        );
                    }
                    if cra == 0.0
                        && r.rbdc_max_bps == 0.0
                        && r.vbdc_max_bytes == 0
                        && r.fca_max_bps == 0.0
                    {
                        return err(
                            format!("{f}.return"),
                            "the terminal could never send: give it cra_bps, rbdc_max_bps, vbdc_max_bytes or fca_max_bps",
                        );
                    }
                    cra_total += cra;
                }
                _ => {}
            }
        }
        if self.ret.access.is_some() {
            let carrier = self.ret.rate_long_run("return")?;
            if cra_total > carrier {
                return err(
                    "terminals",
                    format!("the terminals' CRA ({cra_total} bit/s) exceeds the return carrier ({carrier} bit/s)"),
                );
            }
        }
        Ok(())
    }

    /// The forward routing table.
    pub fn router(&self) -> Result<Router, ConfigError> {
        let subnets: Result<Vec<Vec<Prefix>>, ConfigError> = self
            .terminal_list()
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.subnets
                    .iter()
                    .enumerate()
                    .map(|(j, s)| {
                        s.parse::<Prefix>()
                            .or_else(|e| err(format!("terminals[{i}].subnets[{j}]"), e.to_string()))
                    })
                    .collect()
            })
            .collect();
        Ok(Router::new(&subnets?))
    }

    /// The round trip of a control loop (base delays of both directions).
    fn round_trip(&self, phase_ns: u64) -> Result<RoundTrip, ConfigError> {
        Ok(RoundTrip::new(
            self.ret.base_delay("return", phase_ns)?,
            self.forward.base_delay("forward", phase_ns)?,
        ))
    }

    /// Both directions of the link, framed carriers included: the model the
    /// emulator runs. `phase_ns` aligns schedules.
    pub fn build_directions<T: Send + 'static>(
        &self,
        phase_ns: u64,
    ) -> Result<(Direction<T>, Direction<T>), ConfigError> {
        let (rf, rr) = self.rngs();
        let fwd = match &self.forward.access {
            None => self.forward.build("forward", phase_ns, rf)?,
            Some(_) => self.forward_access(phase_ns, rf)?,
        };
        let ret = match &self.ret.access {
            None => self.ret.build("return", phase_ns, rr)?,
            Some(_) => self.return_access(phase_ns, rr)?,
        };
        Ok((fwd, ret))
    }

    fn forward_terminals(&self) -> Vec<TerminalForwardConfig> {
        self.terminal_list()
            .into_iter()
            .map(|t| t.forward.unwrap_or_default())
            .collect()
    }

    fn return_terminals(&self) -> Vec<TerminalAllocation> {
        let preset = self
            .ret
            .access
            .as_ref()
            .map_or(Preset::Opensand, |a| a.preset());
        self.terminal_list()
            .into_iter()
            .map(|t| {
                let r = t.ret.unwrap_or_default();
                TerminalAllocation {
                    cra_bps: r.cra_bps.unwrap_or(preset.cra_bps()),
                    rbdc_max_bps: r.rbdc_max_bps,
                    vbdc_max_bytes: r.vbdc_max_bytes,
                    fca_max_bps: r.fca_max_bps,
                }
            })
            .collect()
    }

    /// Each terminal's channel and its MODCOD in clear sky.
    fn channels(&self) -> Result<Vec<Channel>, ConfigError> {
        self.forward_terminals()
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let fade = match &t.fade {
                    None => Attenuation::clear(),
                    Some(f) => f
                        .attenuation(&format!("terminals[{i}].forward.fade"), true)?
                        .expect("read"),
                };
                Ok(Channel::new(t.clear_sky_cn_db, fade))
            })
            .collect()
    }

    fn forward_access<T: Send + 'static>(
        &self,
        phase_ns: u64,
        rng: Rng,
    ) -> Result<Direction<T>, ConfigError> {
        let d = &self.forward;
        d.validate("forward")?;
        let access = d.access.as_ref().expect("forward access");
        let channels = self.channels()?;
        let rt = self.round_trip(phase_ns)?;
        let (kind, symbol_rate, pilots) = match access {
            AccessConfig::Acm {
                symbol_rate_baud,
                pilots,
                ..
            } => ("acm", *symbol_rate_baud, *pilots),
            AccessConfig::Ccm {
                symbol_rate_baud,
                pilots,
                ..
            } => ("ccm", *symbol_rate_baud, *pilots),
            AccessConfig::Dama { .. } => unreachable!("validated"),
        };
        // A queue limit in ms is sized at the carrier's clear-sky rate (that
        // of its fastest terminal), as `--check` reports it.
        let nominal = channels
            .iter()
            .map(|ch| self.clear_sky(access, ch).1)
            .fold(0.0, f64::max);
        let mut states = Vec::new();
        let mut queues: Vec<Box<dyn Queue<T>>> = Vec::new();
        for ch in channels {
            let adaptation: Box<dyn Adaptation> = match access {
                AccessConfig::Acm {
                    margin_db,
                    hysteresis_db,
                    refresh_ms,
                    modcods,
                    ..
                } => {
                    let allowed = modcods
                        .iter()
                        .map(|m| by_name(m).expect("validated"))
                        .collect();
                    let rule = ModcodRule::new(allowed, *margin_db, *hysteresis_db);
                    Box::new(Acm::new(
                        rule,
                        Duration::from_secs_f64(refresh_ms / 1e3),
                        rt.clone(),
                        &ch,
                    ))
                }
                AccessConfig::Ccm { modcod, .. } => {
                    Box::new(Ccm::new(by_name(modcod).expect("validated")))
                }
                AccessConfig::Dama { .. } => unreachable!("validated"),
            };
            queues.push(d.queue(d.limit(Some(nominal))));
            states.push(ForwardTerminalState {
                channel: ch,
                adaptation,
            });
        }
        let carrier = ForwardCarrier::new(kind, symbol_rate, pilots, states);
        let stage = Framed::new(queues, Box::new(carrier), access.encapsulation().build());
        d.framed_direction("forward", phase_ns, Box::new(stage), rng)
    }

    fn return_access<T: Send + 'static>(
        &self,
        phase_ns: u64,
        rng: Rng,
    ) -> Result<Direction<T>, ConfigError> {
        let d = &self.ret;
        d.validate("return")?;
        let access = d.access.as_ref().expect("return access");
        let p = access.dama_params().expect("dama");
        let capacity = d.rate_schedule("return", phase_ns)?;
        let nominal = capacity.mean();
        let terms = self.return_terminals();
        let carrier = ReturnCarrier::new(p, capacity, self.round_trip(phase_ns)?, &terms);
        let queues: Vec<Box<dyn Queue<T>>> = terms
            .iter()
            .map(|_| d.queue(d.limit(Some(nominal))))
            .collect();
        let stage = Framed::new(queues, Box::new(carrier), access.encapsulation().build());
        d.framed_direction("return", phase_ns, Box::new(stage), rng)
    }

    /// The MODCOD in clear sky and its data-field rate.
    fn clear_sky(&self, access: &AccessConfig, ch: &Channel) -> (usize, f64) {
        let (m, rate, pilots) = match access {
            AccessConfig::Acm {
                symbol_rate_baud,
                pilots,
                margin_db,
                hysteresis_db,
                modcods,
                ..
            } => {
                let allowed = modcods.iter().filter_map(|m| by_name(m)).collect();
                let rule = ModcodRule::new(allowed, *margin_db, *hysteresis_db);
                (
                    rule.choose_fresh(ch.clear_sky_cn_db),
                    *symbol_rate_baud,
                    *pilots,
                )
            }
            AccessConfig::Ccm {
                symbol_rate_baud,
                pilots,
                modcod,
                ..
            } => (by_name(modcod).unwrap_or(0), *symbol_rate_baud, *pilots),
            AccessConfig::Dama { .. } => (0, 0.0, false),
        };
        (m, MODCODS[m].bps(rate, pilots))
    }

    /// `--check`'s numbers of an access direction.
    pub(super) fn access_derived(
        &self,
        name: &str,
    ) -> Result<Option<(DerivedAccess, f64, Peak)>, ConfigError> {
        let forward = name == "forward";
        let d = if forward { &self.forward } else { &self.ret };
        let Some(access) = &d.access else {
            return Ok(None);
        };
        let encap = access.encapsulation().build();
        let rt = self.round_trip(0)?;
        let derived = if forward {
            self.forward_derived(access, encap.as_ref(), &rt)?
        } else {
            self.return_derived(d, access, encap.as_ref(), &rt)?
        };
        Ok(Some(derived))
    }

    /// The forward carrier's numbers: each terminal's clear-sky and worst
    /// MODCOD and rate, the carrier's long-run rate (its fastest terminal's)
    /// and peak (a frame's data field at once).
    fn forward_derived(
        &self,
        access: &AccessConfig,
        encap: &dyn Encapsulation,
        rt: &RoundTrip,
    ) -> Result<(DerivedAccess, f64, Peak), ConfigError> {
        let (symbol_rate, roll_off, pilots) = match access {
            AccessConfig::Acm {
                symbol_rate_baud,
                roll_off,
                pilots,
                ..
            }
            | AccessConfig::Ccm {
                symbol_rate_baud,
                roll_off,
                pilots,
                ..
            } => (*symbol_rate_baud, *roll_off, *pilots),
            AccessConfig::Dama { .. } => unreachable!("validated"),
        };
        let mut terminals = Vec::new();
        for ch in self.channels()? {
            let (clear, clear_bps) = self.clear_sky(access, &ch);
            let worst_cn = ch.worst_cn_db();
            let worst = match access {
                AccessConfig::Acm {
                    margin_db,
                    hysteresis_db,
                    modcods,
                    ..
                } => {
                    let allowed = modcods.iter().filter_map(|m| by_name(m)).collect();
                    ModcodRule::new(allowed, *margin_db, *hysteresis_db).choose_fresh(worst_cn)
                }
                _ => clear,
            };
            let wm = &MODCODS[worst];
            let eff = efficiency(
                encap,
                DERIVED_PACKET_BYTES,
                MODCODS[clear].data_field_bytes(),
            );
            terminals.push(DerivedForwardTerminal {
                clear_sky_cn_db: ch.clear_sky_cn_db,
                worst_cn_db: worst_cn,
                max_attenuation_db: ch.fade.max_db(),
                clear_sky_modcod: MODCODS[clear].name,
                clear_sky_bps: clear_bps,
                encapsulation_efficiency_1500: eff,
                clear_sky_ip_bps_1500: clear_bps * eff,
                worst_modcod: wm.name,
                worst_bps: if worst_cn < wm.es_n0_db {
                    0.0
                } else {
                    wm.bps(symbol_rate, pilots)
                },
            });
        }
        let mean = terminals
            .iter()
            .map(|t| t.clear_sky_bps)
            .fold(0.0, f64::max);
        // Fades only lower a terminal's C/N: its clear-sky MODCOD is its
        // best. A frame's packets arrive when the frame ends: at most one
        // frame's data field at once.
        let frame = terminals
            .iter()
            .filter_map(|t| by_name(t.clear_sky_modcod))
            .map(|m| MODCODS[m].data_field_bytes() as u64)
            .max()
            .unwrap_or(0);
        let peak = Peak {
            bps: mean,
            burst_bytes: frame,
        };
        let loop_delay_max_ms = match access {
            AccessConfig::Acm { refresh_ms, .. } => Some(refresh_ms + rt.max().as_secs_f64() * 1e3),
            _ => None,
        };
        let f = DerivedForward {
            symbol_rate_baud: symbol_rate,
            occupied_bandwidth_hz: symbol_rate * (1.0 + roll_off),
            frame_header_bytes: crate::modcod::BBHEADER_BYTES,
            loop_delay_max_ms,
            terminals,
        };
        let kind = if matches!(access, AccessConfig::Acm { .. }) {
            DerivedAccess::Acm(f)
        } else {
            DerivedAccess::Ccm(f)
        };
        Ok((kind, mean, peak))
    }

    /// The return carrier's numbers: its slots, the request-to-grant time,
    /// each terminal's guaranteed and highest rate.
    fn return_derived(
        &self,
        d: &DirectionConfig,
        access: &AccessConfig,
        encap: &dyn Encapsulation,
        rt: &RoundTrip,
    ) -> Result<(DerivedAccess, f64, Peak), ConfigError> {
        let p = access.dama_params().expect("dama");
        let schedule = d.rate_schedule("return", 0)?;
        let carrier = schedule.mean();
        // A superframe's slots are spread over it; at most one superframe's
        // bytes at the carrier's highest rate arrive together.
        let peak = Peak {
            bps: schedule.max(),
            burst_bytes: (schedule.max() * p.superframe.as_secs_f64() / 8.0).ceil() as u64,
        };
        let sf_ms = p.superframe.as_secs_f64() * 1e3;
        let lat_min = p.latency_frames(rt.min()) as f64;
        let lat_max = p.latency_frames(rt.max()) as f64;
        let terminals = self
            .return_terminals()
            .iter()
            .map(|a| {
                let vbdc = if a.vbdc_max_bytes > 0 { carrier } else { 0.0 };
                DerivedReturnTerminal {
                    cra_bps: a.cra_bps,
                    max_bps: (a.cra_bps + a.rbdc_max_bps + a.fca_max_bps + vbdc).min(carrier),
                }
            })
            .collect();
        let r = DerivedReturn {
            superframe_ms: sf_ms,
            slot_bytes: p.slot_bytes,
            slots_per_superframe: p.slots(carrier).floor() as u64,
            sync_period_frames: p.sync_frames,
            request_to_grant_ms: lat_min * sf_ms,
            first_packet_wait_max_ms: (p.sync_frames as f64 + lat_max + 1.0) * sf_ms,
            encapsulation_efficiency_1500: efficiency(encap, DERIVED_PACKET_BYTES, p.slot_bytes),
            terminals,
        };
        Ok((DerivedAccess::Dama(r), carrier, peak))
    }

    /// Read fade files and hold their points inline instead.
    pub(super) fn inline_fades(&mut self) -> Result<(), ConfigError> {
        let Some(terms) = self.terminals.as_mut() else {
            return Ok(());
        };
        for (i, t) in terms.iter_mut().enumerate() {
            let Some(fade) = t.forward.as_mut().and_then(|f| f.fade.as_mut()) else {
                continue;
            };
            if fade.path.is_some() && fade.points.is_none() {
                let a = fade
                    .attenuation(&format!("terminals[{i}].forward.fade"), true)?
                    .expect("read");
                fade.path = None;
                fade.points = Some(a.points_s());
            }
        }
        Ok(())
    }
}

/// What an access carrier amounts to (`--check`'s `derived.*.access`).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DerivedAccess {
    Acm(DerivedForward),
    Ccm(DerivedForward),
    Dama(DerivedReturn),
}

/// The forward carrier.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DerivedForward {
    pub symbol_rate_baud: f64,
    /// Symbol rate x (1 + roll-off).
    pub occupied_bandwidth_hz: f64,
    /// The BBHEADER of every frame.
    pub frame_header_bytes: u32,
    /// ACM: the longest delay from a change of C/N to the MODCOD that
    /// follows it (refresh period + the largest round trip); null for CCM.
    pub loop_delay_max_ms: Option<f64>,
    pub terminals: Vec<DerivedForwardTerminal>,
}

/// One terminal on the forward carrier.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DerivedForwardTerminal {
    pub clear_sky_cn_db: f64,
    /// Clear sky less the largest attenuation of its fade.
    pub worst_cn_db: f64,
    pub max_attenuation_db: f64,
    pub clear_sky_modcod: &'static str,
    /// The data-field rate of the clear-sky MODCOD (symbol rate x efficiency).
    pub clear_sky_bps: f64,
    /// IP bytes per data-field byte for a stream of 1500-byte packets.
    pub encapsulation_efficiency_1500: f64,
    /// The IP rate of 1500-byte packets in clear sky.
    pub clear_sky_ip_bps_1500: f64,
    /// The MODCOD at the worst C/N (the loop settled; CCM: its MODCOD).
    pub worst_modcod: &'static str,
    /// Its data-field rate, 0 if its frames are lost at the worst C/N.
    pub worst_bps: f64,
}

/// The return carrier of bandwidth on demand.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DerivedReturn {
    pub superframe_ms: f64,
    pub slot_bytes: u32,
    /// Slots per superframe at the carrier's long-run rate.
    pub slots_per_superframe: u64,
    pub sync_period_frames: u64,
    /// From a request to its grant in force, at the smallest round trip:
    /// max(MSL, round trip) in whole superframes.
    pub request_to_grant_ms: f64,
    /// The longest a packet after idle waits for RBDC or VBDC capacity:
    /// a sync period, the request-to-grant delay at the largest round trip,
    /// and a superframe.
    pub first_packet_wait_max_ms: f64,
    /// IP bytes per slot byte for a stream of 1500-byte packets.
    pub encapsulation_efficiency_1500: f64,
    pub terminals: Vec<DerivedReturnTerminal>,
}

/// One terminal on the return carrier.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DerivedReturnTerminal {
    pub cra_bps: f64,
    /// The most it can be given: CRA + RBDC + free capacity (the whole
    /// carrier with VBDC), at most the carrier.
    pub max_bps: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::TerminalDetail;
    use crate::time::Instant;

    const FWD_ACM: &str = r#""delay": {"kind": "constant", "ms": 250},
        "access": {"kind": "acm", "symbol_rate_baud": 1e6}"#;
    const RET_DAMA: &str = r#""rate": {"kind": "constant", "bps": 2e6},
        "delay": {"kind": "constant", "ms": 250}, "access": {"kind": "dama"}"#;

    /// A link of `forward` and `return` bodies and extra top-level members.
    fn link(fwd: &str, ret: &str, extra: &str) -> String {
        let sep = if extra.is_empty() { "" } else { ", " };
        format!(r#"{{"forward": {{{fwd}}}, "return": {{{ret}}}{sep}{extra}}}"#)
    }

    fn field(fwd: &str, ret: &str, extra: &str) -> String {
        match LinkConfig::from_json(&link(fwd, ret, extra)) {
            Ok(_) => panic!("accepted: {}", link(fwd, ret, extra)),
            Err(e) => e.field,
        }
    }

    fn ok(fwd: &str, ret: &str, extra: &str) -> LinkConfig {
        LinkConfig::from_json(&link(fwd, ret, extra)).unwrap_or_else(|e| panic!("{e}"))
    }

    fn acm(more: &str) -> String {
        format!(r#""access": {{"kind": "acm", "symbol_rate_baud": 1e6{more}}}"#)
    }

    fn dama(more: &str) -> String {
        format!(r#""rate": {{"kind": "constant", "bps": 2e6}}, "access": {{"kind": "dama"{more}}}"#)
    }

    const RBDC: &str = r#""terminals": [{"return": {"rbdc_max_bps": 1e6}}]"#;

    #[test]
    fn plain_configs_have_nothing_new() {
        let c = ok(r#""rate": {"kind": "constant", "bps": 1e6}"#, "", "");
        let j = serde_json::to_value(c.canonical()).unwrap();
        assert!(j.get("terminals").is_none());
        assert!(j["forward"].get("access").is_none());
        assert!(j["forward"].get("reconfiguration").is_none());
        assert_eq!(c.terminal_count(), 1);
    }

    #[test]
    fn defaults_are_filled_by_preset() {
        let c = ok(FWD_ACM, RET_DAMA, RBDC);
        let j = serde_json::to_value(c.canonical()).unwrap();
        let a = &j["return"]["access"];
        assert_eq!(a["superframe_ms"], 26.5);
        assert_eq!(a["msl_frames"], 23);
        assert_eq!(a["rtt_estimate_ms"], 609.5);
        assert_eq!(a["rbdc_timeout_ms"], 1026.5);
        assert_eq!(
            a["encapsulation"],
            serde_json::json!({"kind": "rle", "protocol_type_bytes": 2, "trailer": "seq"})
        );
        assert_eq!(
            j["forward"]["access"]["encapsulation"],
            serde_json::json!({"kind": "gse", "label_bytes": 6})
        );
        assert_eq!(
            j["forward"]["access"]["modcods"].as_array().unwrap().len(),
            28
        );
        let t = &j["terminals"][0];
        assert_eq!(t["return"]["cra_bps"], 0.0);
        assert_eq!(t["forward"]["clear_sky_cn_db"], 20.0);
        // The ns-3 set.
        let n = ok("", &dama(r#", "preset": "ns3""#), "");
        let j = serde_json::to_value(n.canonical()).unwrap();
        let a = &j["return"]["access"];
        assert_eq!(
            (a["superframe_ms"].as_f64(), a["sync_period_ms"].as_f64()),
            (Some(100.0), Some(100.0))
        );
        assert_eq!(
            (a["overestimation"].as_f64(), a["rtt_estimate_ms"].as_f64()),
            (Some(1.1), Some(560.0))
        );
        assert_eq!(j["terminals"][0]["return"]["cra_bps"], 50e3);
        // The canonical form reads back the same.
        let again = LinkConfig::from_json(&serde_json::to_string(&j).unwrap()).unwrap();
        assert_eq!(serde_json::to_value(again.canonical()).unwrap(), j);
    }

    #[test]
    fn symbol_rate_and_roll_off_ranges() {
        ok(&acm(r#", "roll_off": 0.05"#), "", "");
        ok(
            r#""access": {"kind": "acm", "symbol_rate_baud": 1e10, "roll_off": 0.35}"#,
            "",
            "",
        );
        let f = field(
            r#""access": {"kind": "acm", "symbol_rate_baud": 999}"#,
            "",
            "",
        );
        assert_eq!(f, "forward.access.symbol_rate_baud");
        let f = field(
            r#""access": {"kind": "ccm", "symbol_rate_baud": 2e10, "modcod": "QPSK 1/2"}"#,
            "",
            "",
        );
        assert_eq!(f, "forward.access.symbol_rate_baud");
        assert_eq!(
            field(&acm(r#", "roll_off": 0.4"#), "", ""),
            "forward.access.roll_off"
        );
        assert_eq!(
            field(&acm(r#", "roll_off": 0.01"#), "", ""),
            "forward.access.roll_off"
        );
    }

    #[test]
    fn margin_hysteresis_refresh_ranges() {
        ok(
            &acm(r#", "margin_db": 20, "hysteresis_db": 0, "refresh_ms": 60000"#),
            "",
            "",
        );
        assert_eq!(
            field(&acm(r#", "margin_db": -0.1"#), "", ""),
            "forward.access.margin_db"
        );
        assert_eq!(
            field(&acm(r#", "hysteresis_db": 21"#), "", ""),
            "forward.access.hysteresis_db"
        );
        assert_eq!(
            field(&acm(r#", "refresh_ms": 0.5"#), "", ""),
            "forward.access.refresh_ms"
        );
        assert_eq!(
            field(&acm(r#", "refresh_ms": 60001"#), "", ""),
            "forward.access.refresh_ms"
        );
    }

    #[test]
    fn modcods_are_names_of_the_table() {
        ok(&acm(r#", "modcods": ["QPSK 1/2", "8PSK 3/5"]"#), "", "");
        assert_eq!(
            field(&acm(r#", "modcods": []"#), "", ""),
            "forward.access.modcods"
        );
        assert_eq!(
            field(&acm(r#", "modcods": ["QPSK 1/2", "QPSK 7/8"]"#), "", ""),
            "forward.access.modcods[1]"
        );
        let ccm = r#""access": {"kind": "ccm", "symbol_rate_baud": 1e6, "modcod": "64APSK 2/3"}"#;
        assert_eq!(field(ccm, "", ""), "forward.access.modcod");
    }

    #[test]
    fn encapsulation_values() {
        ok(
            &acm(r#", "encapsulation": {"kind": "gse", "label_bytes": 3}"#),
            "",
            "",
        );
        ok(&acm(r#", "encapsulation": {"kind": "none"}"#), "", "");
        let f = field(
            &acm(r#", "encapsulation": {"kind": "gse", "label_bytes": 4}"#),
            "",
            "",
        );
        assert_eq!(f, "forward.access.encapsulation.label_bytes");
        let f = field(&acm(r#", "encapsulation": {"kind": "rle"}"#), "", "");
        assert_eq!(f, "forward.access.encapsulation.kind");
        let ret = dama(r#", "encapsulation": {"kind": "rle", "protocol_type_bytes": 3}"#);
        assert_eq!(
            field("", &ret, RBDC),
            "return.access.encapsulation.protocol_type_bytes"
        );
        let ret = dama(
            r#", "encapsulation": {"kind": "rle", "protocol_type_bytes": 0, "trailer": "crc"}"#,
        );
        ok("", &ret, RBDC);
        let ret = dama(r#", "encapsulation": {"kind": "gse"}"#);
        assert_eq!(field("", &ret, RBDC), "return.access.encapsulation.kind");
    }

    #[test]
    fn access_kinds_belong_to_their_direction() {
        assert_eq!(
            field(r#""access": {"kind": "dama"}"#, "", ""),
            "forward.access.kind"
        );
        let ret = r#""rate": {"kind": "constant", "bps": 1e6}, "access": {"kind": "acm", "symbol_rate_baud": 1e6}"#;
        assert_eq!(field("", ret, ""), "return.access.kind");
        // The forward carrier's rate follows its MODCODs.
        let f = field(
            &format!(r#""rate": {{"kind": "constant", "bps": 1e6}}, {}"#, acm("")),
            "",
            "",
        );
        assert_eq!(f, "forward.rate");
        // A queue in ms is fine: it follows the clear-sky rate.
        ok(
            &format!(
                r#""queue": {{"limit": {{"kind": "ms", "ms": 100}}}}, {}"#,
                acm("")
            ),
            "",
            "",
        );
    }

    #[test]
    fn dama_timing_ranges() {
        ok(
            "",
            &dama(r#", "superframe_ms": 1, "sync_period_ms": 1, "rbdc_timeout_ms": 1"#),
            RBDC,
        );
        ok(
            "",
            &dama(r#", "superframe_ms": 1000, "sync_period_ms": 60000, "rbdc_timeout_ms": 600000"#),
            r#""terminals": [{"return": {"rbdc_max_bps": 1e6}}]"#,
        );
        let f = |more: &str| field("", &dama(more), RBDC);
        assert_eq!(
            f(r#", "superframe_ms": 0.5"#),
            "return.access.superframe_ms"
        );
        assert_eq!(
            f(r#", "superframe_ms": 1001"#),
            "return.access.superframe_ms"
        );
        assert_eq!(
            f(r#", "sync_period_ms": 20"#),
            "return.access.sync_period_ms"
        );
        assert_eq!(
            f(r#", "sync_period_ms": 60001"#),
            "return.access.sync_period_ms"
        );
        assert_eq!(f(r#", "msl_frames": 1001"#), "return.access.msl_frames");
        assert_eq!(
            f(r#", "rtt_estimate_ms": 0"#),
            "return.access.rtt_estimate_ms"
        );
        assert_eq!(
            f(r#", "rtt_estimate_ms": 60001"#),
            "return.access.rtt_estimate_ms"
        );
        assert_eq!(
            f(r#", "overestimation": 0.9"#),
            "return.access.overestimation"
        );
        assert_eq!(
            f(r#", "overestimation": 11"#),
            "return.access.overestimation"
        );
        assert_eq!(
            f(r#", "rbdc_timeout_ms": 20"#),
            "return.access.rbdc_timeout_ms"
        );
        assert_eq!(
            f(r#", "rbdc_timeout_ms": 600001"#),
            "return.access.rbdc_timeout_ms"
        );
        assert_eq!(f(r#", "slot_bytes": 15"#), "return.access.slot_bytes");
        assert_eq!(f(r#", "slot_bytes": 65536"#), "return.access.slot_bytes");
    }

    #[test]
    fn dama_carrier_is_a_rate_with_a_slot() {
        let f = field("", r#""access": {"kind": "dama"}"#, RBDC);
        assert_eq!(f, "return.rate");
        let tr =
            r#""rate": {"kind": "trace", "opportunities_ms": [1]}, "access": {"kind": "dama"}"#;
        assert_eq!(field("", tr, RBDC), "return.rate");
        // 188 bytes per 26.5 ms is 56.8 kbit/s.
        let slow = r#""rate": {"kind": "constant", "bps": 50e3}, "access": {"kind": "dama"}"#;
        assert_eq!(field("", slow, RBDC), "return.rate");
        let sched = r#""rate": {"kind": "schedule", "points": [[0, 1e6], [5, 0]]}, "access": {"kind": "dama"}"#;
        ok("", sched, RBDC);
    }

    #[test]
    fn terminal_count_and_subnets() {
        let t = |list: &str| format!(r#""terminals": [{list}]"#);
        assert_eq!(field("", "", &t("")), "terminals");
        let many: Vec<String> = (0..257)
            .map(|i| format!(r#"{{"subnets": ["10.{}.{}.0/24"]}}"#, i / 256, i % 256))
            .collect();
        assert_eq!(field("", "", &t(&many.join(","))), "terminals");
        let two = r#"{"subnets": ["198.18.1.0/24"]}, {}"#;
        assert_eq!(field("", "", &t(two)), "terminals[1].subnets");
        let bad = r#"{"subnets": ["198.18.1.0/24"]}, {"subnets": ["198.18.5.1/24"]}"#;
        assert_eq!(field("", "", &t(bad)), "terminals[1].subnets[0]");
        let c = ok(
            "",
            "",
            &t(r#"{"subnets": ["198.18.1.0/24"]}, {"subnets": ["198.18.5.0/24", "fd00::/64"]}"#),
        );
        assert_eq!(c.terminal_count(), 2);
        let r = c.router().unwrap();
        assert_eq!(r.route_addr("198.18.5.9".parse().unwrap()), Some(1));
        assert_eq!(r.route_addr("198.18.1.9".parse().unwrap()), Some(0));
    }

    #[test]
    fn terminal_sections_need_their_access() {
        let f = field(
            "",
            "",
            r#""terminals": [{"forward": {"clear_sky_cn_db": 10}}]"#,
        );
        assert_eq!(f, "terminals[0].forward");
        let f = field("", "", r#""terminals": [{"return": {"cra_bps": 1e5}}]"#);
        assert_eq!(f, "terminals[0].return");
    }

    #[test]
    fn clear_sky_cn_range() {
        ok(
            FWD_ACM,
            "",
            r#""terminals": [{"forward": {"clear_sky_cn_db": -10}}]"#,
        );
        ok(
            FWD_ACM,
            "",
            r#""terminals": [{"forward": {"clear_sky_cn_db": 50}}]"#,
        );
        let f = field(
            FWD_ACM,
            "",
            r#""terminals": [{"forward": {"clear_sky_cn_db": 51}}]"#,
        );
        assert_eq!(f, "terminals[0].forward.clear_sky_cn_db");
        let f = field(
            FWD_ACM,
            "",
            r#""terminals": [{"forward": {"clear_sky_cn_db": -11}}]"#,
        );
        assert_eq!(f, "terminals[0].forward.clear_sky_cn_db");
    }

    #[test]
    fn fade_points_rules() {
        let fade = |f: &str| format!(r#""terminals": [{{"forward": {{"fade": {f}}}}}]"#);
        ok(
            FWD_ACM,
            "",
            &fade(r#"{"points": [[0, 0], [1e6, 100]], "loop": true}"#),
        );
        let e = |f: &str| LinkConfig::from_json(&link(FWD_ACM, "", &fade(f))).unwrap_err();
        let x = e(r#"{"points": [[0, 0], [1, 101]]}"#);
        assert_eq!(
            (x.field.as_str(), x.message.starts_with("[1]: ")),
            ("terminals[0].forward.fade.points", true)
        );
        assert_eq!(
            e(r#"{"points": [[0, 0], [0, 1]]}"#).field,
            "terminals[0].forward.fade.points"
        );
        assert_eq!(
            e(r#"{"points": [[-1, 0]]}"#).field,
            "terminals[0].forward.fade.points"
        );
        assert_eq!(
            e(r#"{"points": []}"#).field,
            "terminals[0].forward.fade.points"
        );
        assert_eq!(
            e(r#"{"points": [[0, 3]], "loop": true}"#).field,
            "terminals[0].forward.fade.points"
        );
        assert_eq!(e(r#"{}"#).field, "terminals[0].forward.fade");
        assert_eq!(
            e(r#"{"path": "f", "points": [[0, 1]]}"#).field,
            "terminals[0].forward.fade"
        );
        assert_eq!(e(r#"{"path": ""}"#).field, "terminals[0].forward.fade.path");
    }

    #[test]
    fn fade_file_is_read_inline_and_errors_name_file_and_line() {
        let path = std::env::temp_dir().join(format!("satlink-fade-{}.txt", std::process::id()));
        std::fs::write(&path, "# rain\n0 0\n10 5\n").unwrap();
        let p = path.display();
        let j = link(
            FWD_ACM,
            "",
            &format!(r#""terminals": [{{"forward": {{"fade": {{"path": "{p}"}}}}}}]"#),
        );
        let c = check(&j).unwrap();
        let v: serde_json::Value = serde_json::from_str(&c.to_json_line()).unwrap();
        assert_eq!(
            v["config"]["terminals"][0]["forward"]["fade"],
            serde_json::json!({"points": [[0.0, 0.0], [10.0, 5.0]], "loop": false})
        );
        let t = &v["derived"]["forward"]["access"]["terminals"][0];
        assert_eq!(
            (t["max_attenuation_db"].as_f64(), t["worst_cn_db"].as_f64()),
            (Some(5.0), Some(15.0))
        );
        std::fs::write(&path, "0 0\n\n5 x\n").unwrap();
        let e = check(&j).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(e.field, "terminals[0].forward.fade.path");
        assert!(
            e.message.starts_with(&format!("{p}: line 3: ")),
            "{}",
            e.message
        );
    }

    #[test]
    fn terminal_return_ranges() {
        let r = |body: &str| format!(r#""terminals": [{{"return": {{{body}}}}}]"#);
        ok(
            "",
            RET_DAMA,
            &r(
                r#""cra_bps": 2e6, "rbdc_max_bps": 1e12, "fca_max_bps": 1e12, "vbdc_max_bytes": 17179869184"#,
            ),
        );
        assert_eq!(
            field("", RET_DAMA, &r(r#""cra_bps": -1"#)),
            "terminals[0].return.cra_bps"
        );
        assert_eq!(
            field("", RET_DAMA, &r(r#""rbdc_max_bps": 2e12"#)),
            "terminals[0].return.rbdc_max_bps"
        );
        assert_eq!(
            field("", RET_DAMA, &r(r#""fca_max_bps": -5"#)),
            "terminals[0].return.fca_max_bps"
        );
        let f = field("", RET_DAMA, &r(r#""vbdc_max_bytes": 17179869185"#));
        assert_eq!(f, "terminals[0].return.vbdc_max_bytes");
        // A terminal that could never send.
        assert_eq!(field("", RET_DAMA, &r("")), "terminals[0].return");
        assert_eq!(field("", RET_DAMA, ""), "terminals[0].return");
        // The terminals' CRA within the carrier.
        let two = r#""terminals": [{"subnets": ["10.0.1.0/24"], "return": {"cra_bps": 1.5e6}},
                                   {"subnets": ["10.0.2.0/24"], "return": {"cra_bps": 1e6}}]"#;
        assert_eq!(field("", RET_DAMA, two), "terminals");
    }

    #[test]
    fn leo_rate_rules() {
        ok(
            r#""rate": {"kind": "leo_trace", "unit_bps": 12e6, "ms": [0, 0, 3]}"#,
            "",
            "",
        );
        let e = |rate: &str| field(&format!(r#""rate": {rate}"#), "", "");
        assert_eq!(
            e(r#"{"kind": "leo_trace", "unit_bps": 999, "ms": [0]}"#),
            "forward.rate.unit_bps"
        );
        assert_eq!(
            e(r#"{"kind": "leo_trace", "unit_bps": 12e6, "ms": [3, 2]}"#),
            "forward.rate.ms"
        );
        assert_eq!(
            e(r#"{"kind": "leo_trace", "unit_bps": 12e6, "ms": []}"#),
            "forward.rate.ms"
        );
        assert_eq!(
            e(r#"{"kind": "leo_trace", "unit_bps": 12e6, "ms": [1000000001]}"#),
            "forward.rate.ms"
        );
        // 100 units of 12 Gbit/s in one millisecond: above 1 Tbit/s.
        let busy = format!(
            r#"{{"kind": "leo_trace", "unit_bps": 12e9, "ms": [{}]}}"#,
            vec!["5"; 100].join(",")
        );
        assert_eq!(e(&busy), "forward.rate.unit_bps");
        assert_eq!(
            e(r#"{"kind": "leo_trace", "unit_bps": 12e6}"#),
            "forward.rate"
        );
        assert_eq!(
            e(r#"{"kind": "leo_trace", "unit_bps": 12e6, "path": ""}"#),
            "forward.rate.path"
        );
    }

    #[test]
    fn leo_delay_rules() {
        ok(
            r#""delay": {"kind": "leo_trace", "interval_ms": 1, "values_ms": [20, 3600000]}"#,
            "",
            "",
        );
        let e = |d: &str| field(&format!(r#""delay": {d}"#), "", "");
        assert_eq!(
            e(r#"{"kind": "leo_trace", "interval_ms": 0.5, "values_ms": [20]}"#),
            "forward.delay.interval_ms"
        );
        assert_eq!(
            e(r#"{"kind": "leo_trace", "interval_ms": 60001, "values_ms": [20]}"#),
            "forward.delay.interval_ms"
        );
        assert_eq!(
            e(r#"{"kind": "leo_trace", "values_ms": [20, -1]}"#),
            "forward.delay.values_ms"
        );
        assert_eq!(
            e(r#"{"kind": "leo_trace", "values_ms": [3600001]}"#),
            "forward.delay.values_ms"
        );
        assert_eq!(
            e(r#"{"kind": "leo_trace", "values_ms": []}"#),
            "forward.delay.values_ms"
        );
    }

    #[test]
    fn leo_files_are_read_inline() {
        let dir = std::env::temp_dir();
        let bw = dir.join(format!("satlink-bw-{}.txt", std::process::id()));
        let dl = dir.join(format!("satlink-dl-{}.txt", std::process::id()));
        std::fs::write(&bw, "0\n0\n1\n3\n").unwrap();
        std::fs::write(&dl, "30\n40\n").unwrap();
        let fwd = format!(
            r#""rate": {{"kind": "leo_trace", "unit_bps": 12e6, "path": "{}"}},
               "delay": {{"kind": "leo_trace", "path": "{}"}}"#,
            bw.display(),
            dl.display()
        );
        let c = check(&link(&fwd, "", "")).unwrap();
        std::fs::remove_file(&bw).unwrap();
        std::fs::remove_file(&dl).unwrap();
        let v: serde_json::Value = serde_json::from_str(&c.to_json_line()).unwrap();
        assert_eq!(
            v["config"]["forward"]["rate"],
            serde_json::json!({"kind": "leo_trace", "unit_bps": 12e6, "ms": [0, 0, 1, 3]})
        );
        assert_eq!(
            v["config"]["forward"]["delay"],
            serde_json::json!({"kind": "leo_trace", "interval_ms": 10.0, "values_ms": [30.0, 40.0]})
        );
        // 4 units of 12 Mbit/s over 4 ms; two units in its busiest millisecond.
        assert_eq!(c.derived.forward.mean_bps, Some(12e6));
        assert_eq!(c.derived.forward.peak_bps, Some(24e6));
        assert_eq!(
            (
                c.derived.forward.min_delay_ms,
                c.derived.forward.max_delay_ms
            ),
            (30.0, 40.0)
        );
    }

    #[test]
    fn reconfiguration_rules() {
        let r = |body: &str| {
            format!(r#""rate": {{"kind": "constant", "bps": 1e6}}, "reconfiguration": {{{body}}}"#)
        };
        ok(
            &r(
                r#""period_s": 15, "offset_s": 12, "delay_ms": 40, "delay_duration_ms": 300, "loss_duration_ms": 100"#,
            ),
            "",
            "",
        );
        ok(
            &r(r#""offset_s": 14.9, "loss_duration_ms": 200, "outage": true"#),
            "",
            "",
        );
        let f = |body: &str| field(&r(body), "", "");
        assert_eq!(f(r#""period_s": 0"#), "forward.reconfiguration.period_s");
        assert_eq!(f(r#""period_s": 2e6"#), "forward.reconfiguration.period_s");
        assert_eq!(f(r#""offset_s": 15"#), "forward.reconfiguration.offset_s");
        assert_eq!(f(r#""offset_s": -1"#), "forward.reconfiguration.offset_s");
        assert_eq!(
            f(r#""delay_ms": 3600001"#),
            "forward.reconfiguration.delay_ms"
        );
        assert_eq!(
            f(r#""delay_duration_ms": 15000"#),
            "forward.reconfiguration.delay_duration_ms"
        );
        assert_eq!(
            f(r#""loss_duration_ms": -1"#),
            "forward.reconfiguration.loss_duration_ms"
        );
        assert_eq!(f(r#""loss_p": 1.5"#), "forward.reconfiguration.loss_p");
        let tr = r#""rate": {"kind": "trace", "opportunities_ms": [1]}, "reconfiguration": {"outage": true, "loss_duration_ms": 10}"#;
        assert_eq!(field(tr, "", ""), "forward.reconfiguration.outage");
        let framed = format!(
            r#"{}, "reconfiguration": {{"outage": true, "loss_duration_ms": 10}}"#,
            acm("")
        );
        assert_eq!(field(&framed, "", ""), "forward.reconfiguration.outage");
        // Its numbers: the step raises the largest delay; the burst adds loss.
        let c = check(&link(
            &r(r#""delay_ms": 40, "delay_duration_ms": 300, "loss_p": 1, "loss_duration_ms": 150"#),
            "",
            "",
        ))
        .unwrap();
        assert_eq!(c.derived.forward.max_delay_ms, 40.0);
        assert!((c.derived.forward.packet_loss_1500 - 0.01).abs() < 1e-12);
    }

    #[test]
    fn derived_access_numbers() {
        let c = check(&link(FWD_ACM, RET_DAMA, RBDC)).unwrap();
        let v: serde_json::Value = serde_json::from_str(&c.to_json_line()).unwrap();
        let f = &v["derived"]["forward"];
        assert_eq!(f["access"]["kind"], "acm");
        let t = &f["access"]["terminals"][0];
        // 20 dB with a 1 dB margin: 32APSK 9/10 at 1 Mbaud.
        assert_eq!(t["clear_sky_modcod"], "32APSK 9/10");
        let bps = MODCODS[by_name("32APSK 9/10").unwrap()].bps(1e6, false);
        assert_eq!(f["mean_bps"].as_f64(), Some(bps));
        // No fade raises a terminal above its clear sky: that is its peak, a
        // frame's data field at once.
        assert_eq!(f["peak_bps"].as_f64(), Some(bps));
        let frame = MODCODS[by_name("32APSK 9/10").unwrap()].data_field_bytes();
        assert_eq!(f["peak_burst_bytes"].as_u64(), Some(frame as u64));
        assert_eq!(f["access"]["occupied_bandwidth_hz"].as_f64(), Some(1.2e6));
        // Refresh 1 s plus a 500 ms round trip.
        assert_eq!(f["access"]["loop_delay_max_ms"].as_f64(), Some(1500.0));
        // The return carrier's whole rate; one 26.5 ms superframe of it at once.
        let ret = &v["derived"]["return"];
        assert_eq!(ret["peak_bps"].as_f64(), Some(2e6));
        assert_eq!(ret["peak_burst_bytes"].as_u64(), Some(6625));
        let r = &v["derived"]["return"]["access"];
        assert_eq!(r["kind"], "dama");
        assert_eq!(r["slots_per_superframe"], 35);
        // max(23 superframes, 500 ms) = 609.5 ms; the longest first wait:
        // 38 + 23 + 1 superframes.
        assert_eq!(r["request_to_grant_ms"].as_f64(), Some(609.5));
        assert_eq!(r["first_packet_wait_max_ms"].as_f64(), Some(62.0 * 26.5));
        let e = r["encapsulation_efficiency_1500"].as_f64().unwrap();
        assert!((e - 1500.0 / 1523.0).abs() < 0.002, "{e}");
        // A CCM carrier in a fade deeper than its MODCOD: no rate at worst.
        let ccm = r#""access": {"kind": "ccm", "symbol_rate_baud": 1e6, "modcod": "QPSK 3/4"}"#;
        let deep = r#""terminals": [{"forward": {"clear_sky_cn_db": 10, "fade": {"points": [[0, 0], [10, 8]]}}}]"#;
        let c = check(&link(ccm, "", deep)).unwrap();
        let Some(DerivedAccess::Ccm(d)) = &c.derived.forward.access else {
            panic!()
        };
        assert_eq!((d.terminals[0].worst_bps, d.loop_delay_max_ms), (0.0, None));
    }

    #[test]
    fn builds_framed_directions_that_carry_packets() {
        let c = LinkConfig::from_json(&link(
            FWD_ACM,
            RET_DAMA,
            r#""terminals": [{"return": {"cra_bps": 1e6}}]"#,
        ))
        .unwrap();
        let (mut f, mut r): (Direction<u32>, Direction<u32>) = c.build_directions(0).unwrap();
        assert!(f.needs_segments() && r.needs_segments());
        f.on_packet(Instant::from_millis(1), 1, 1000, 1);
        r.on_packet(Instant::from_millis(1), 2, 1000, 1);
        let t = Instant::from_secs_f64(2.0);
        assert_eq!(f.poll_transmit(t), Some(1));
        assert_eq!(r.poll_transmit(t), Some(2));
        let a = r.report_at(t).access.unwrap();
        let TerminalDetail::Return(rt) = &a.terminals[0].detail else {
            panic!()
        };
        assert!(rt.granted_bytes.cra > 0);
        // The plain builder refuses an access.
        assert!(c.forward.build::<u32>("forward", 0, Rng::new(0)).is_err());
    }

    #[test]
    fn one_terminal_with_nothing_new_is_todays_link() {
        // Rate, queue, jitter and loss: the framed machinery is not involved,
        // the model is built as before and behaves the same packet for packet.
        let j = r#"{"seed": 3, "forward": {"rate": {"kind": "constant", "bps": 1e6},
            "delay": {"kind": "constant", "ms": 20}, "jitter": {"kind": "uniform", "ms": 2},
            "queue": {"limit": {"kind": "packets", "n": 20}}, "loss": [{"kind": "bernoulli", "p": 0.05}]},
            "return": {}}"#;
        let c = LinkConfig::from_json(j).unwrap();
        assert!(c.terminals.is_none() && c.terminal_count() == 1);
        let (mut new, _): (Direction<u32>, Direction<u32>) = c.build_directions(0).unwrap();
        let (rf, _) = c.rngs();
        let mut old: Direction<u32> = c.forward.build("forward", 0, rf).unwrap();
        let arr: Vec<_> = (0..2000u32)
            .map(|i| {
                (
                    Instant::from_micros(700 * i as u64),
                    0,
                    i,
                    100 + (i % 14) * 100,
                )
            })
            .collect();
        let a = crate::testutil::run(&mut new, &arr);
        let b = crate::testutil::run(&mut old, &arr);
        assert_eq!(a, b);
        assert!(new.report().access.is_none());
        let r = new.report();
        assert!(r.dropped.queue.packets > 0 && r.dropped.loss.packets > 0);
    }
}
