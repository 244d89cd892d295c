//! A direction's loss models (Bernoulli, scheduled, Gilbert-Elliott, bit
//! errors) ([`crate::loss`]), as configured, checked and built.

use super::*;

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LossConfig {
    /// Independent loss; `p`: 0 ..= 1.
    Bernoulli { p: f64 },
    /// (seconds, probability) breakpoints; probabilities 0 ..= 1, times and
    /// period as for a rate schedule.
    Schedule {
        points: Vec<(f64, f64)>,
        #[serde(default)]
        period_s: f64,
    },
    /// Gilbert-Elliott: `p` (good to bad), `r` (bad to good), `loss_good`
    /// (default 0) and `loss_bad` (default 1), each 0 ..= 1.
    Gilbert {
        p: f64,
        r: f64,
        #[serde(default)]
        loss_good: f64,
        #[serde(default = "one")]
        loss_bad: f64,
    },
    /// Bit error rate; `ber`: 0 ..= 1.
    Ber { ber: f64 },
}

pub(crate) fn one() -> f64 {
    1.0
}

impl LossConfig {
    /// `field` is `forward.loss[i]` or `return.loss[i]`.
    pub fn validate(&self, field: &str) -> Result<(), ConfigError> {
        match *self {
            LossConfig::Bernoulli { p } => check_prob(&format!("{field}.p"), p),
            LossConfig::Schedule {
                ref points,
                period_s,
            } => loss_schedule(field, points, period_s).map(|_| ()),
            LossConfig::Gilbert {
                p,
                r,
                loss_good,
                loss_bad,
            } => {
                check_prob(&format!("{field}.p"), p)?;
                check_prob(&format!("{field}.r"), r)?;
                check_prob(&format!("{field}.loss_good"), loss_good)?;
                check_prob(&format!("{field}.loss_bad"), loss_bad)
            }
            LossConfig::Ber { ber } => check_prob(&format!("{field}.ber"), ber),
        }
    }

    pub fn build(&self, field: &str, phase_ns: u64) -> Result<Box<dyn Loss>, ConfigError> {
        Ok(match self {
            LossConfig::Bernoulli { p } => Box::new(Bernoulli::new(*p)),
            LossConfig::Schedule { points, period_s } => Box::new(Bernoulli::scheduled(
                loss_schedule(field, points, *period_s)?.with_phase(phase_ns),
            )),
            LossConfig::Gilbert {
                p,
                r,
                loss_good,
                loss_bad,
            } => Box::new(GilbertElliott::new(*p, *r, *loss_good, *loss_bad)),
            LossConfig::Ber { ber } => Box::new(BitErrorRate::new(*ber)),
        })
    }
}
