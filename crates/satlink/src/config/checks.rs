//! What every part of the configuration checks with: the error (naming
//! the field, and for a number out of range the range), ranges,
//! probabilities, rates, schedules and Mahimahi traces.

use super::*;

/// A configuration error, naming the field (`forward.rate.bps`,
/// `return.loss[0].p`, `config` for JSON syntax and unknown fields).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct ConfigError {
    pub field: String,
    pub message: String,
    /// For a number out of its range: the range and the value, in the
    /// field's unit, so that a caller can say it in the unit its user wrote.
    pub range: Option<Range>,
}

/// The range a number must be in, and the number given.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Range {
    pub min: f64,
    pub max: f64,
    pub value: f64,
}

pub(crate) fn err<T>(
    field: impl Into<String>,
    message: impl Into<String>,
) -> Result<T, ConfigError> {
    Err(ConfigError {
        field: field.into(),
        message: message.into(),
        range: None,
    })
}

pub(crate) fn range_err<T>(
    field: &str,
    message: String,
    min: f64,
    max: f64,
    value: f64,
) -> Result<T, ConfigError> {
    Err(ConfigError {
        field: field.into(),
        message,
        range: Some(Range { min, max, value }),
    })
}

/// `v` is finite and within `lo ..= hi`; `what` names it in the message.
pub(crate) fn check_range(
    field: &str,
    what: &str,
    v: f64,
    lo: f64,
    hi: f64,
) -> Result<(), ConfigError> {
    if !v.is_finite() || v < lo || v > hi {
        return range_err(
            field,
            format!("{what} must be within {lo} and {hi}, got {v}"),
            lo,
            hi,
            v,
        );
    }
    Ok(())
}

/// `v` is finite, above 0 and at most `hi`.
pub(crate) fn check_positive(field: &str, what: &str, v: f64, hi: f64) -> Result<(), ConfigError> {
    if !v.is_finite() || v <= 0.0 || v > hi {
        return range_err(
            field,
            format!("{what} must be above 0 and at most {hi}, got {v}"),
            0.0,
            hi,
            v,
        );
    }
    Ok(())
}

pub(crate) fn check_prob(field: &str, p: f64) -> Result<(), ConfigError> {
    check_range(field, "probability", p, 0.0, 1.0)
}

pub(crate) fn check_rate(field: &str, bps: f64) -> Result<(), ConfigError> {
    check_range(field, "rate (bit/s)", bps, MIN_RATE_BPS, MAX_RATE_BPS)
}

/// Check a schedule's times and period, and each value with `value`; then
/// build it (values times `scale`).
pub(crate) fn schedule(
    field: &str,
    points: &[(f64, f64)],
    period_s: f64,
    scale: f64,
    value: impl Fn(&str, f64) -> Result<(), ConfigError>,
) -> Result<Schedule, ConfigError> {
    check_range(
        &format!("{field}.period_s"),
        "period (s)",
        period_s,
        0.0,
        MAX_SCHEDULE_S,
    )?;
    for (i, &(t, v)) in points.iter().enumerate() {
        let f = format!("{field}.points[{i}]");
        check_range(&f, "time (s)", t, 0.0, MAX_SCHEDULE_S)?;
        value(&f, v)?;
    }
    let pts: Vec<(f64, f64)> = points.iter().map(|&(t, v)| (t, v * scale)).collect();
    Schedule::new(&pts, period_s).or_else(|e| match e {
        ScheduleError::Empty => err(format!("{field}.points"), e.to_string()),
        ScheduleError::NotIncreasing { index } | ScheduleError::BeyondPeriod { index } => {
            err(format!("{field}.points[{index}]"), e.to_string())
        }
    })
}

pub(crate) fn rate_schedule(
    field: &str,
    points: &[(f64, f64)],
    period_s: f64,
) -> Result<Schedule, ConfigError> {
    schedule(field, points, period_s, 1.0, |f, v| {
        if v == 0.0 {
            Ok(())
        } else {
            check_rate(f, v)
        }
    })
}

pub(crate) fn delay_schedule(
    field: &str,
    points: &[(f64, f64)],
    period_s: f64,
) -> Result<Schedule, ConfigError> {
    schedule(field, points, period_s, 1e-3, |f, v| {
        check_range(f, "delay (ms)", v, 0.0, MAX_DELAY_MS)
    })
}

pub(crate) fn loss_schedule(
    field: &str,
    points: &[(f64, f64)],
    period_s: f64,
) -> Result<Schedule, ConfigError> {
    schedule(field, points, period_s, 1.0, check_prob)
}

/// An inline trace, its errors naming the entry.
pub(crate) fn inline_trace(field: &str, ms: &[u64]) -> Result<Trace, ConfigError> {
    Trace::from_opportunities(ms).or_else(|e| {
        let msg = match e.line {
            0 => e.message,
            n => format!("[{}]: {}", n - 1, e.message),
        };
        err(format!("{field}.opportunities_ms"), msg)
    })
}

/// A trace file, read and parsed; errors name the file and its line.
pub(crate) fn trace_file(field: &str, path: &str) -> Result<Trace, ConfigError> {
    let f = format!("{field}.path");
    let text =
        std::fs::read_to_string(path).or_else(|e| err(&f, format!("cannot read {path}: {e}")))?;
    Trace::parse(&text).or_else(|e| err(&f, format!("{path}: {e}")))
}
