//! A direction's queue: its limit and its discipline (drop-tail, CoDel,
//! FQ-CoDel, with ECN) ([`crate::queue`]), as configured, checked and built.

use super::*;

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    #[serde(default)]
    pub limit: LimitConfig,
    #[serde(default)]
    pub aqm: AqmConfig,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LimitConfig {
    #[default]
    Unlimited,
    /// `n`: 1 ..= [`MAX_QUEUE_PACKETS`].
    Packets { n: u32 },
    /// `n`: 1 ..= [`MAX_QUEUE_BYTES`].
    Bytes { n: u64 },
    /// Milliseconds of data at the link's long-run rate (at least 1500
    /// bytes); `ms`: > 0 ..= [`MAX_QUEUE_MS`]; needs a limited rate.
    Ms { ms: f64 },
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AqmConfig {
    #[default]
    DropTail,
    /// CoDel (RFC 8289); `target_ms` (default 5) and `interval_ms` (default
    /// 100): > 0 ..= [`MAX_CODEL_MS`]; ECN as [`EcnConfig`].
    Codel {
        #[serde(default = "codel_target")]
        target_ms: f64,
        #[serde(default = "codel_interval")]
        interval_ms: f64,
        #[serde(flatten)]
        ecn: EcnConfig,
    },
    /// FQ-CoDel (RFC 8290): CoDel per flow, `flows` queues (default 1024,
    /// 1 ..= 65,536) served by deficit round robin with `quantum` bytes
    /// (default 1514, 64 ..= 65,536); the queue limit is shared. Not with an
    /// access (a framed carrier queues per terminal).
    FqCodel {
        #[serde(default = "codel_target")]
        target_ms: f64,
        #[serde(default = "codel_interval")]
        interval_ms: f64,
        #[serde(default = "fq_flows")]
        flows: u32,
        #[serde(default = "fq_quantum")]
        quantum: u32,
        #[serde(flatten)]
        ecn: EcnConfig,
    },
}

/// ECN at a CoDel queue: `ecn` marks ECN-capable packets Congestion
/// Experienced where CoDel would drop them (default false: drop);
/// `ce_threshold_ms` (> 0 ..= [`MAX_CODEL_MS`]) also marks every capable
/// packet that waited longer (a shallow threshold), and
/// `ce_threshold_selector` `"ect1"` limits that to ECT(1) packets (L4S),
/// `"all"` (the default) to none.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct EcnConfig {
    #[serde(default)]
    pub ecn: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ce_threshold_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ce_threshold_selector: Option<CeSelector>,
}

#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum CeSelector {
    All,
    Ect1,
}

impl EcnConfig {
    fn marking(&self) -> EcnMarking {
        EcnMarking {
            mark: self.ecn,
            ce_threshold: self
                .ce_threshold_ms
                .map(|ms| Duration::from_secs_f64(ms / 1e3)),
            ect1_only: self.ce_threshold_selector == Some(CeSelector::Ect1),
        }
    }
}

fn fq_flows() -> u32 {
    1024
}
fn fq_quantum() -> u32 {
    1514
}

fn codel_target() -> f64 {
    5.0
}
fn codel_interval() -> f64 {
    100.0
}

impl QueueConfig {
    /// Check the values. `field` is `forward.queue` or `return.queue`;
    /// `rate_limited` says whether the direction's rate (or its access) is
    /// finite, which a limit in milliseconds needs; an access excludes FQ-CoDel.
    pub fn validate(
        &self,
        field: &str,
        rate_limited: bool,
        access: bool,
    ) -> Result<(), ConfigError> {
        let limit = format!("{field}.limit");
        match self.limit {
            LimitConfig::Unlimited => {}
            LimitConfig::Packets { n } => {
                if !(1..=MAX_QUEUE_PACKETS).contains(&n) {
                    return err(
                        format!("{limit}.n"),
                        format!("packets must be within 1 and {MAX_QUEUE_PACKETS}, got {n}"),
                    );
                }
            }
            LimitConfig::Bytes { n } => {
                if !(1..=MAX_QUEUE_BYTES).contains(&n) {
                    return err(
                        format!("{limit}.n"),
                        format!("bytes must be within 1 and {MAX_QUEUE_BYTES}, got {n}"),
                    );
                }
            }
            LimitConfig::Ms { ms } => {
                check_positive(&format!("{limit}.ms"), "queue (ms)", ms, MAX_QUEUE_MS)?;
                if !rate_limited {
                    return err(limit, "a limit in milliseconds needs a finite rate");
                }
            }
        }
        self.aqm.validate(&format!("{field}.aqm"), access)
    }

    /// The queue limit; a limit in ms is sized at `nominal_bps`, the
    /// capacity's long-run rate.
    pub fn limit(&self, nominal_bps: Option<f64>) -> Limit {
        match self.limit {
            LimitConfig::Unlimited => Limit::Unlimited,
            LimitConfig::Packets { n } => Limit::Packets(n),
            LimitConfig::Bytes { n } => Limit::Bytes(n),
            LimitConfig::Ms { ms } => {
                let bps = nominal_bps.expect("validated: finite rate");
                Limit::Bytes(((bps / 8.0) * ms / 1e3).ceil().max(1500.0) as u64)
            }
        }
    }

    /// A queue of the configured discipline.
    pub fn build<T: Send + 'static>(&self, limit: Limit) -> Box<dyn Queue<T>> {
        match self.aqm {
            AqmConfig::DropTail => Box::new(DropTail::new(limit)),
            AqmConfig::Codel {
                target_ms,
                interval_ms,
                ref ecn,
            } => Box::new(
                CoDel::new(
                    limit,
                    Duration::from_secs_f64(target_ms / 1e3),
                    Duration::from_secs_f64(interval_ms / 1e3),
                )
                .with_ecn(ecn.marking()),
            ),
            AqmConfig::FqCodel {
                target_ms,
                interval_ms,
                flows,
                quantum,
                ref ecn,
            } => Box::new(FqCoDel::new(
                limit,
                flows as usize,
                quantum,
                Duration::from_secs_f64(target_ms / 1e3),
                Duration::from_secs_f64(interval_ms / 1e3),
                ecn.marking(),
            )),
        }
    }
}

impl AqmConfig {
    /// `field` is `forward.queue.aqm` or `return.queue.aqm`.
    fn validate(&self, aqm: &str, access: bool) -> Result<(), ConfigError> {
        let (AqmConfig::Codel {
            target_ms,
            interval_ms,
            ref ecn,
        }
        | AqmConfig::FqCodel {
            target_ms,
            interval_ms,
            ref ecn,
            ..
        }) = *self
        else {
            return Ok(());
        };
        if let Some(ms) = ecn.ce_threshold_ms {
            check_positive(
                &format!("{aqm}.ce_threshold_ms"),
                "CE threshold (ms)",
                ms,
                MAX_CODEL_MS,
            )?;
        } else if ecn.ce_threshold_selector.is_some() {
            return err(
                format!("{aqm}.ce_threshold_selector"),
                "a selector needs ce_threshold_ms",
            );
        }
        if let AqmConfig::FqCodel { flows, quantum, .. } = *self {
            if !(1..=65_536).contains(&flows) {
                return err(
                    format!("{aqm}.flows"),
                    format!("must be 1 to 65536, got {flows}"),
                );
            }
            if !(64..=65_536).contains(&quantum) {
                return err(
                    format!("{aqm}.quantum"),
                    format!("must be 64 to 65536 bytes, got {quantum}"),
                );
            }
            if access {
                return err(
                    format!("{aqm}.kind"),
                    "fq_codel is not offered with an access (a framed carrier queues per terminal)",
                );
            }
        }
        check_positive(
            &format!("{aqm}.target_ms"),
            "target (ms)",
            target_ms,
            MAX_CODEL_MS,
        )?;
        check_positive(
            &format!("{aqm}.interval_ms"),
            "interval (ms)",
            interval_ms,
            MAX_CODEL_MS,
        )
    }
}
