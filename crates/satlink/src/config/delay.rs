//! A direction's propagation delay (constant, a schedule or a recorded
//! LEO trace) and its jitter ([`crate::delay`]), as configured, checked
//! and built.

use super::*;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DelayConfig {
    /// `ms`: 0 ..= [`MAX_DELAY_MS`].
    Constant { ms: f64 },
    /// (seconds, milliseconds) breakpoints; values 0 ..= [`MAX_DELAY_MS`],
    /// times and period as for a rate schedule.
    Schedule {
        points: Vec<(f64, f64)>,
        #[serde(default)]
        period_s: f64,
    },
    /// A recorded LEO delay trace ([`crate::leo`]): one one-way delay per
    /// `interval_ms` (default 10; 1 ..= [`MAX_INTERVAL_MS`]), from a file
    /// (`path`) or inline (`values_ms`), exactly one of the two; values 0
    /// ..= [`MAX_DELAY_MS`].
    LeoTrace {
        #[serde(default = "ten")]
        interval_ms: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        values_ms: Option<Vec<f64>>,
    },
}

fn ten() -> f64 {
    10.0
}

impl Default for DelayConfig {
    fn default() -> Self {
        DelayConfig::Constant { ms: 0.0 }
    }
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum JitterConfig {
    #[default]
    None,
    /// Uniform in [-ms, +ms]; `ms`: 0 ..= [`MAX_JITTER_MS`].
    Uniform { ms: f64 },
    /// Normal with standard deviation `ms`: 0 ..= [`MAX_JITTER_MS`].
    Normal { ms: f64 },
}

impl DelayConfig {
    /// Check the values (no file access). `field` is `forward.delay` or `return.delay`.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        match self {
            DelayConfig::Constant { ms } => {
                check_range(&format!("{field}.ms"), "delay (ms)", *ms, 0.0, MAX_DELAY_MS)?
            }
            DelayConfig::Schedule { points, period_s } => {
                delay_schedule(field, points, *period_s)?;
            }
            DelayConfig::LeoTrace {
                interval_ms,
                path,
                values_ms,
            } => {
                access::leo_delay(field, *interval_ms, path, values_ms, false)?;
            }
        }
        Ok(())
    }

    /// The base delay in seconds (reads a LEO trace file).
    pub fn schedule(&self, field: &str, phase_ns: u64) -> Result<Schedule, ConfigError> {
        Ok(match self {
            DelayConfig::Constant { ms } => Schedule::constant(ms / 1e3),
            DelayConfig::Schedule { points, period_s } => {
                delay_schedule(field, points, *period_s)?.with_phase(phase_ns)
            }
            DelayConfig::LeoTrace {
                interval_ms,
                path,
                values_ms,
            } => access::leo_delay(field, *interval_ms, path, values_ms, true)?
                .expect("read")
                .with_phase(phase_ns),
        })
    }

    /// Read a LEO delay trace file, if any, and hold its values inline instead.
    pub fn inline(&mut self, field: &str) -> Result<(), ConfigError> {
        if let DelayConfig::LeoTrace {
            interval_ms,
            path: Some(path),
            values_ms: None,
        } = self
        {
            let f = format!("{field}.path");
            let text = std::fs::read_to_string(&*path)
                .or_else(|e| err(&f, format!("cannot read {path}: {e}")))?;
            let v = crate::leo::parse_delays(&text).or_else(|e| err(&f, format!("{path}: {e}")))?;
            *self = DelayConfig::LeoTrace {
                interval_ms: *interval_ms,
                path: None,
                values_ms: Some(v),
            };
        }
        Ok(())
    }
}

impl JitterConfig {
    /// `field` is `forward.jitter` or `return.jitter`.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        match *self {
            JitterConfig::None => Ok(()),
            JitterConfig::Uniform { ms } | JitterConfig::Normal { ms } => check_range(
                &format!("{field}.ms"),
                "jitter (ms)",
                ms,
                0.0,
                MAX_JITTER_MS,
            ),
        }
    }

    pub fn model(&self) -> Jitter {
        match *self {
            JitterConfig::None => Jitter::None,
            JitterConfig::Uniform { ms } => Jitter::Uniform(Duration::from_secs_f64(ms / 1e3)),
            JitterConfig::Normal { ms } => Jitter::Normal(Duration::from_secs_f64(ms / 1e3)),
        }
    }
}
