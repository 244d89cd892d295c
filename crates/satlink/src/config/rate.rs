//! A direction's capacity: unlimited, constant, a schedule, a Mahimahi
//! trace or a recorded LEO trace ([`crate::capacity`], [`crate::leo`]),
//! as configured, checked and built.

use super::*;

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RateConfig {
    #[default]
    Unlimited,
    /// `bps`: [`MIN_RATE_BPS`] ..= [`MAX_RATE_BPS`].
    Constant { bps: f64 },
    /// (seconds, bit/s) breakpoints; a rate of 0 is an outage, any other
    /// within [`MIN_RATE_BPS`] ..= [`MAX_RATE_BPS`]; times 0 ..=
    /// [`MAX_SCHEDULE_S`], strictly increasing; `period_s` 0 (no repetition)
    /// or after the last point, at most [`MAX_SCHEDULE_S`].
    Schedule {
        points: Vec<(f64, f64)>,
        #[serde(default)]
        period_s: f64,
    },
    /// A Mahimahi trace: a file (`path`) or its offsets inline
    /// (`opportunities_ms`), exactly one of the two. At most
    /// [`crate::capacity::MAX_TRACE_OPPORTUNITIES`] offsets, each at most
    /// [`crate::capacity::MAX_TRACE_MS`], non-decreasing, the last after 0.
    Trace {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        opportunities_ms: Option<Vec<u64>>,
    },
    /// A recorded LEO bandwidth trace ([`crate::leo`]): a file (`path`) or
    /// its lines inline (`ms`), exactly one of the two; each line is
    /// `unit_bps` ([`MIN_RATE_BPS`] ..= [`MAX_RATE_BPS`]) during its
    /// millisecond, at most [`MAX_RATE_BPS`] in any millisecond.
    LeoTrace {
        unit_bps: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        path: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ms: Option<Vec<u64>>,
    },
}

impl RateConfig {
    /// Check the values (no file access: a trace file is read by
    /// [`RateConfig::capacity`] and [`RateConfig::inline`]). `field` is
    /// `forward.rate` or `return.rate`.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        match self {
            RateConfig::Unlimited => {}
            RateConfig::Constant { bps } => check_rate(&format!("{field}.bps"), *bps)?,
            RateConfig::Schedule { points, period_s } => {
                rate_schedule(field, points, *period_s)?;
            }
            RateConfig::LeoTrace { unit_bps, path, ms } => {
                access::leo_rate(field, *unit_bps, path, ms, false)?;
            }
            RateConfig::Trace {
                path,
                opportunities_ms,
            } => match (path, opportunities_ms) {
                (Some(p), None) if p.is_empty() => {
                    return err(format!("{field}.path"), "must name a file")
                }
                (Some(_), None) => {}
                (None, Some(ms)) => {
                    inline_trace(field, ms)?;
                }
                _ => {
                    return err(
                        field,
                        "a trace needs exactly one of path and opportunities_ms",
                    )
                }
            },
        }
        Ok(())
    }

    /// The capacity model, and whether it limits the rate (reads a trace file).
    pub fn capacity(
        &self,
        field: &str,
        phase_ns: u64,
    ) -> Result<(Box<dyn Capacity>, bool), ConfigError> {
        Ok(match self {
            RateConfig::Unlimited => (Box::new(Unlimited), false),
            RateConfig::Constant { bps } => (Box::new(Rate::constant(*bps)), true),
            RateConfig::Schedule { .. } | RateConfig::LeoTrace { .. } => (
                Box::new(Rate::scheduled(self.schedule(field, phase_ns)?)),
                true,
            ),
            RateConfig::Trace {
                opportunities_ms: Some(ms),
                ..
            } => (Box::new(inline_trace(field, ms)?), true),
            RateConfig::Trace {
                path: Some(path), ..
            } => (Box::new(trace_file(field, path)?), true),
            RateConfig::Trace { .. } => {
                return err(
                    field,
                    "a trace needs exactly one of path and opportunities_ms",
                )
            }
        })
    }

    /// A rate that is a schedule (constant, scheduled, LEO trace) as one,
    /// in bit/s (reads a LEO trace file).
    pub fn schedule(&self, field: &str, phase_ns: u64) -> Result<Schedule, ConfigError> {
        match self {
            RateConfig::Constant { bps } => Ok(Schedule::constant(*bps)),
            RateConfig::Schedule { points, period_s } => {
                Ok(rate_schedule(field, points, *period_s)?.with_phase(phase_ns))
            }
            RateConfig::LeoTrace { unit_bps, path, ms } => {
                let s = access::leo_rate(field, *unit_bps, path, ms, true)?.expect("read");
                Ok(s.with_phase(phase_ns))
            }
            _ => err(field, "needs a constant, scheduled or LEO trace rate"),
        }
    }

    /// The long-run rate of a schedule-like rate (no file access: infinite
    /// for a LEO trace file not yet read).
    pub fn long_run(&self, field: &str) -> Result<f64, ConfigError> {
        match self {
            RateConfig::LeoTrace { path: Some(_), .. } => Ok(f64::INFINITY),
            _ => Ok(self.schedule(field, 0)?.mean()),
        }
    }

    /// Read a trace or LEO trace file, if any, and hold its contents inline instead.
    pub fn inline(&mut self, field: &str) -> Result<(), ConfigError> {
        if let RateConfig::Trace {
            path: Some(path),
            opportunities_ms: None,
        } = self
        {
            let t = trace_file(field, path)?;
            *self = RateConfig::Trace {
                path: None,
                opportunities_ms: Some(t.opportunities().to_vec()),
            };
        }
        if let RateConfig::LeoTrace {
            unit_bps,
            path: Some(path),
            ms: None,
        } = self
        {
            let f = format!("{field}.path");
            let text = std::fs::read_to_string(&*path)
                .or_else(|e| err(&f, format!("cannot read {path}: {e}")))?;
            let ms =
                crate::leo::parse_bandwidth(&text).or_else(|e| err(&f, format!("{path}: {e}")))?;
            *self = RateConfig::LeoTrace {
                unit_bps: *unit_bps,
                path: None,
                ms: Some(ms),
            };
        }
        Ok(())
    }
}
