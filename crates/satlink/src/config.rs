//! The emulator's configuration, as JSON written by the orchestrator.
//!
//! This is the normalised form: every unit explicit, every choice tagged.
//! User-facing profiles (TOML) are validated and turned into this by Python;
//! [`LinkConfig::validate`] checks it again so the binary is safe on its own.

use crate::capacity::{Capacity, Rate, Trace, Unlimited};
use crate::delay::{Delay, Jitter};
use crate::link::Direction;
use crate::loss::{Bernoulli, BitErrorRate, GilbertElliott, Loss};
use crate::queue::{CoDel, DropTail, Limit, Queue};
use crate::rng::Rng;
use crate::schedule::Schedule;
use serde::{Deserialize, Serialize};
use std::time::Duration;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Seed of every random draw; reported with the counters.
    pub seed: u64,
    /// Offset schedules so that their time 0 is the start of the current UTC minute.
    #[serde(default)]
    pub align_minute: bool,
    /// Gateway to terminal.
    pub forward: DirectionConfig,
    /// Terminal to gateway.
    #[serde(rename = "return")]
    pub ret: DirectionConfig,
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
    #[serde(default)]
    pub reorder: bool,
    #[serde(default)]
    pub queue: QueueConfig,
    #[serde(default)]
    pub loss: Vec<LossConfig>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RateConfig {
    #[default]
    Unlimited,
    Constant {
        bps: f64,
    },
    /// (seconds, bit/s) breakpoints; period 0 = no repetition.
    Schedule {
        points: Vec<(f64, f64)>,
        #[serde(default)]
        period_s: f64,
    },
    /// A Mahimahi trace file.
    Trace {
        path: String,
    },
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum DelayConfig {
    Constant {
        ms: f64,
    },
    /// (seconds, milliseconds) breakpoints.
    Schedule {
        points: Vec<(f64, f64)>,
        #[serde(default)]
        period_s: f64,
    },
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
    Uniform {
        ms: f64,
    },
    Normal {
        ms: f64,
    },
}

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
    Packets {
        n: u32,
    },
    Bytes {
        n: u64,
    },
    /// Milliseconds of data at the link's nominal rate.
    Ms {
        ms: f64,
    },
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AqmConfig {
    #[default]
    DropTail,
    Codel {
        #[serde(default = "codel_target")]
        target_ms: f64,
        #[serde(default = "codel_interval")]
        interval_ms: f64,
    },
}

fn codel_target() -> f64 {
    5.0
}
fn codel_interval() -> f64 {
    100.0
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LossConfig {
    Bernoulli {
        p: f64,
    },
    /// (seconds, probability) breakpoints.
    Schedule {
        points: Vec<(f64, f64)>,
        #[serde(default)]
        period_s: f64,
    },
    Gilbert {
        p: f64,
        r: f64,
        #[serde(default)]
        loss_good: f64,
        #[serde(default = "one")]
        loss_bad: f64,
    },
    Ber {
        ber: f64,
    },
}

fn one() -> f64 {
    1.0
}

/// A configuration error, naming the field.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub field: String,
    pub message: String,
}

impl core::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

fn err<T>(field: impl Into<String>, message: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError {
        field: field.into(),
        message: message.into(),
    })
}

fn check_prob(field: &str, p: f64) -> Result<(), ConfigError> {
    if !(0.0..=1.0).contains(&p) {
        return err(field, format!("probability {p} is outside [0, 1]"));
    }
    Ok(())
}

fn schedule(
    field: &str,
    points: &[(f64, f64)],
    period_s: f64,
    scale: f64,
) -> Result<Schedule, ConfigError> {
    if !(period_s >= 0.0) {
        return err(format!("{field}.period_s"), "must be zero or positive");
    }
    let pts: Vec<(f64, f64)> = points.iter().map(|&(t, v)| (t, v * scale)).collect();
    if let Some((i, _)) = pts.iter().enumerate().find(|(_, p)| !(p.0 >= 0.0)) {
        return err(
            format!("{field}.points[{i}]"),
            "time must be zero or positive",
        );
    }
    Schedule::new(&pts, period_s).or_else(|e| err(format!("{field}.points"), e.to_string()))
}

impl DirectionConfig {
    /// Check values without building (no file access).
    pub fn validate(&self, name: &str) -> Result<(), ConfigError> {
        match &self.rate {
            RateConfig::Constant { bps } if !(*bps > 0.0) => {
                return err(
                    format!("{name}.rate.bps"),
                    format!("rate must be positive, got {bps}"),
                )
            }
            RateConfig::Schedule { points, .. } => {
                if let Some((i, p)) = points.iter().enumerate().find(|(_, p)| !(p.1 >= 0.0)) {
                    return err(
                        format!("{name}.rate.points[{i}]"),
                        format!("rate must be zero or positive, got {}", p.1),
                    );
                }
            }
            _ => {}
        }
        match &self.delay {
            DelayConfig::Constant { ms } if !(*ms >= 0.0) => {
                return err(
                    format!("{name}.delay.ms"),
                    format!("delay must be zero or positive, got {ms}"),
                )
            }
            DelayConfig::Schedule { points, .. } => {
                if let Some((i, p)) = points.iter().enumerate().find(|(_, p)| !(p.1 >= 0.0)) {
                    return err(
                        format!("{name}.delay.points[{i}]"),
                        format!("delay must be zero or positive, got {}", p.1),
                    );
                }
            }
            _ => {}
        }
        match self.jitter {
            JitterConfig::Uniform { ms } | JitterConfig::Normal { ms } if !(ms >= 0.0) => {
                return err(
                    format!("{name}.jitter.ms"),
                    format!("jitter must be zero or positive, got {ms}"),
                )
            }
            _ => {}
        }
        match self.queue.limit {
            LimitConfig::Packets { n: 0 } => {
                return err(format!("{name}.queue.limit.n"), "must be at least 1")
            }
            LimitConfig::Bytes { n: 0 } => {
                return err(format!("{name}.queue.limit.n"), "must be at least 1")
            }
            LimitConfig::Ms { ms } if !(ms > 0.0) => {
                return err(format!("{name}.queue.limit.ms"), "must be positive")
            }
            LimitConfig::Ms { .. } if matches!(self.rate, RateConfig::Unlimited) => {
                return err(
                    format!("{name}.queue.limit"),
                    "a limit in milliseconds needs a finite rate",
                )
            }
            _ => {}
        }
        if let AqmConfig::Codel {
            target_ms,
            interval_ms,
        } = self.queue.aqm
        {
            if !(target_ms > 0.0) || !(interval_ms > 0.0) {
                return err(
                    format!("{name}.queue.aqm"),
                    "CoDel target and interval must be positive",
                );
            }
        }
        for (i, l) in self.loss.iter().enumerate() {
            let f = format!("{name}.loss[{i}]");
            match *l {
                LossConfig::Bernoulli { p } => check_prob(&format!("{f}.p"), p)?,
                LossConfig::Schedule { ref points, .. } => {
                    for (j, &(_, p)) in points.iter().enumerate() {
                        check_prob(&format!("{f}.points[{j}]"), p)?;
                    }
                }
                LossConfig::Gilbert {
                    p,
                    r,
                    loss_good,
                    loss_bad,
                } => {
                    check_prob(&format!("{f}.p"), p)?;
                    check_prob(&format!("{f}.r"), r)?;
                    check_prob(&format!("{f}.loss_good"), loss_good)?;
                    check_prob(&format!("{f}.loss_bad"), loss_bad)?;
                }
                LossConfig::Ber { ber } => check_prob(&format!("{f}.ber"), ber)?,
            }
        }
        Ok(())
    }

    /// Build the model. `phase_ns` aligns schedules; `rng` seeds this direction.
    pub fn build<T: Send + 'static>(
        &self,
        name: &str,
        phase_ns: u64,
        rng: Rng,
    ) -> Result<Direction<T>, ConfigError> {
        self.validate(name)?;
        let (capacity, limited): (Box<dyn Capacity>, bool) = match &self.rate {
            RateConfig::Unlimited => (Box::new(Unlimited), false),
            RateConfig::Constant { bps } => (Box::new(Rate::constant(*bps)), true),
            RateConfig::Schedule { points, period_s } => {
                let s =
                    schedule(&format!("{name}.rate"), points, *period_s, 1.0)?.with_phase(phase_ns);
                (Box::new(Rate::scheduled(s)), true)
            }
            RateConfig::Trace { path } => {
                let text = std::fs::read_to_string(path).or_else(|e| {
                    err(
                        format!("{name}.rate.path"),
                        format!("cannot read {path}: {e}"),
                    )
                })?;
                let t = Trace::parse(&text)
                    .or_else(|e| err(format!("{name}.rate.path"), format!("{path}: {e}")))?;
                (Box::new(t), true)
            }
        };
        let limit = match self.queue.limit {
            LimitConfig::Unlimited => Limit::Unlimited,
            LimitConfig::Packets { n } => Limit::Packets(n),
            LimitConfig::Bytes { n } => Limit::Bytes(n),
            LimitConfig::Ms { ms } => {
                let bps = capacity.nominal_bps().expect("validated: finite rate");
                Limit::Bytes(((bps / 8.0) * ms / 1e3).ceil().max(1500.0) as u64)
            }
        };
        let queue: Box<dyn Queue<T>> = match self.queue.aqm {
            AqmConfig::DropTail => Box::new(DropTail::new(limit)),
            AqmConfig::Codel {
                target_ms,
                interval_ms,
            } => Box::new(CoDel::new(
                limit,
                Duration::from_secs_f64(target_ms / 1e3),
                Duration::from_secs_f64(interval_ms / 1e3),
            )),
        };
        let base = match &self.delay {
            DelayConfig::Constant { ms } => Schedule::constant(ms / 1e3),
            DelayConfig::Schedule { points, period_s } => {
                schedule(&format!("{name}.delay"), points, *period_s, 1e-3)?.with_phase(phase_ns)
            }
        };
        let jitter = match self.jitter {
            JitterConfig::None => Jitter::None,
            JitterConfig::Uniform { ms } => Jitter::Uniform(Duration::from_secs_f64(ms / 1e3)),
            JitterConfig::Normal { ms } => Jitter::Normal(Duration::from_secs_f64(ms / 1e3)),
        };
        let mut losses: Vec<Box<dyn Loss>> = Vec::new();
        for (i, l) in self.loss.iter().enumerate() {
            losses.push(match l {
                LossConfig::Bernoulli { p } => Box::new(Bernoulli::new(*p)),
                LossConfig::Schedule { points, period_s } => Box::new(Bernoulli::scheduled(
                    schedule(&format!("{name}.loss[{i}]"), points, *period_s, 1.0)?
                        .with_phase(phase_ns),
                )),
                LossConfig::Gilbert {
                    p,
                    r,
                    loss_good,
                    loss_bad,
                } => Box::new(GilbertElliott::new(*p, *r, *loss_good, *loss_bad)),
                LossConfig::Ber { ber } => Box::new(BitErrorRate::new(*ber)),
            });
        }
        Ok(Direction::new(
            queue,
            capacity,
            limited,
            losses,
            Delay::scheduled(base, jitter),
            self.reorder,
            rng,
        ))
    }
}

impl LinkConfig {
    pub fn from_json(text: &str) -> Result<LinkConfig, ConfigError> {
        let c: LinkConfig = serde_json::from_str(text).or_else(|e| err("config", e.to_string()))?;
        c.forward.validate("forward")?;
        c.ret.validate("return")?;
        Ok(c)
    }

    /// Independent random streams for the two directions.
    pub fn rngs(&self) -> (Rng, Rng) {
        let root = Rng::new(self.seed);
        (root.fork(1), root.fork(2))
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
                path: "/nonexistent/trace".into(),
            },
            ..Default::default()
        };
        let e = c.build::<u32>("forward", 0, Rng::new(0)).err().unwrap();
        assert_eq!(e.field, "forward.rate.path");
        assert!(e.message.contains("/nonexistent/trace"));
    }
}
