//! The forward channel of one terminal: clear-sky C/N less a rain
//! attenuation that follows a time series.
//!
//! # Attenuation files
//!
//! One point per line, `time_s dB`, separated by white space: the time in
//! seconds (0 ..= [`MAX_FADE_S`], strictly increasing) and the attenuation in
//! dB (0 ..= [`MAX_ATTENUATION_DB`]). Blank lines and lines starting with `#`
//! are skipped; at most [`MAX_FADE_POINTS`] points. Between points the
//! attenuation is interpolated linearly; before the first point it is the
//! first point's, after the last the last point's. A looped series repeats
//! with a period of its last point's time (which must be after 0): between
//! the start of a period and the first point it goes from the last point's
//! value to the first's, so a series that should repeat smoothly ends with
//! the value it starts with.

use crate::time::Instant;

/// Latest time of an attenuation point, in s.
pub const MAX_FADE_S: f64 = 1e6;
/// Largest attenuation, in dB.
pub const MAX_ATTENUATION_DB: f64 = 100.0;
/// Most points of a series.
pub const MAX_FADE_POINTS: usize = 10_000_000;

/// A point or line that could not be used.
#[derive(Debug, Clone, PartialEq)]
pub struct FadeError {
    /// 1-based line of a file or entry of an inline list; 0 for the whole series.
    pub line: usize,
    pub message: String,
}

impl core::fmt::Display for FadeError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: {}", self.line, self.message)
        } else {
            f.write_str(&self.message)
        }
    }
}

impl std::error::Error for FadeError {}

/// Attenuation over time, in dB, linearly interpolated.
#[derive(Clone, Debug, PartialEq)]
pub struct Attenuation {
    /// (ns, dB), strictly increasing times.
    points: Vec<(u64, f64)>,
    /// Repeat period in ns (the last point's time), or 0.
    period: u64,
}

impl Attenuation {
    /// No attenuation at any time (clear sky).
    pub fn clear() -> Attenuation {
        Attenuation {
            points: vec![(0, 0.0)],
            period: 0,
        }
    }

    /// Build from (seconds, dB) points, checking the rules of the module.
    pub fn new(points_s: &[(f64, f64)], looped: bool) -> Result<Attenuation, FadeError> {
        let fail = |line, message: String| Err(FadeError { line, message });
        if points_s.is_empty() {
            return fail(0, "attenuation series has no points".into());
        }
        if points_s.len() > MAX_FADE_POINTS {
            return fail(
                MAX_FADE_POINTS + 1,
                format!("attenuation series has more than {MAX_FADE_POINTS} points"),
            );
        }
        let mut points = Vec::with_capacity(points_s.len());
        for (i, &(t, db)) in points_s.iter().enumerate() {
            if !t.is_finite() || !(0.0..=MAX_FADE_S).contains(&t) {
                return fail(
                    i + 1,
                    format!("time must be within 0 and {MAX_FADE_S} s, got {t}"),
                );
            }
            if !db.is_finite() || !(0.0..=MAX_ATTENUATION_DB).contains(&db) {
                return fail(
                    i + 1,
                    format!("attenuation must be within 0 and {MAX_ATTENUATION_DB} dB, got {db}"),
                );
            }
            let ns = (t * 1e9).round() as u64;
            if let Some(&(prev, _)) = points.last() {
                if ns <= prev {
                    return fail(
                        i + 1,
                        format!("time {t} s does not come after the previous point's"),
                    );
                }
            }
            points.push((ns, db));
        }
        let last = points[points.len() - 1].0;
        if looped && last == 0 {
            return fail(0, "a looped attenuation series must end after 0 s".into());
        }
        Ok(Attenuation {
            points,
            period: if looped { last } else { 0 },
        })
    }

    /// Parse the file format of the module into (seconds, dB) points; values
    /// are checked by [`Attenuation::new`] (errors name the line).
    pub fn parse(text: &str) -> Result<Vec<(f64, f64)>, FadeError> {
        let mut out = Vec::new();
        let mut lines = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut f = line.split_whitespace();
            let parsed = match (f.next(), f.next(), f.next()) {
                (Some(t), Some(db), None) => t.parse::<f64>().ok().zip(db.parse::<f64>().ok()),
                _ => None,
            };
            let Some(p) = parsed else {
                return Err(FadeError {
                    line: i + 1,
                    message: format!("expected `time_s dB`, found {line:?}"),
                });
            };
            out.push(p);
            lines.push(i + 1);
        }
        // Check now, so that an error names the file's line.
        Attenuation::new(&out, false).map_err(|mut e| {
            if e.line > 0 {
                e.line = lines.get(e.line - 1).copied().unwrap_or(e.line);
            }
            e
        })?;
        Ok(out)
    }

    /// The points as (seconds, dB).
    pub fn points_s(&self) -> Vec<(f64, f64)> {
        self.points
            .iter()
            .map(|&(t, v)| (t as f64 / 1e9, v))
            .collect()
    }

    /// The attenuation at `t`, dB.
    pub fn db_at(&self, t: Instant) -> f64 {
        let p = &self.points;
        if p.len() == 1 {
            return p[0].1;
        }
        let mut x = t.as_nanos();
        if self.period > 0 {
            x %= self.period;
            if x < p[0].0 {
                // From the end of the previous period (the last point's value).
                let (t1, v1) = p[0];
                let v0 = p[p.len() - 1].1;
                return v0 + (v1 - v0) * x as f64 / t1 as f64;
            }
        }
        let i = p.partition_point(|&(s, _)| s <= x);
        if i == 0 {
            return p[0].1;
        }
        if i == p.len() {
            return p[i - 1].1;
        }
        let (t0, v0) = p[i - 1];
        let (t1, v1) = p[i];
        v0 + (v1 - v0) * (x - t0) as f64 / (t1 - t0) as f64
    }

    /// Largest attenuation of the series.
    pub fn max_db(&self) -> f64 {
        self.points.iter().map(|p| p.1).fold(0.0, f64::max)
    }

    pub fn is_looped(&self) -> bool {
        self.period > 0
    }
}

/// A terminal's forward channel: C/N = clear-sky C/N - attenuation.
#[derive(Clone, Debug, PartialEq)]
pub struct Channel {
    pub clear_sky_cn_db: f64,
    pub fade: Attenuation,
}

impl Channel {
    pub fn new(clear_sky_cn_db: f64, fade: Attenuation) -> Channel {
        Channel {
            clear_sky_cn_db,
            fade,
        }
    }

    /// C/N at `t`, dB.
    pub fn cn_db(&self, t: Instant) -> f64 {
        self.clear_sky_cn_db - self.fade.db_at(t)
    }

    /// The lowest C/N of the series.
    pub fn worst_cn_db(&self) -> f64 {
        self.clear_sky_cn_db - self.fade.max_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(x: f64) -> Instant {
        Instant::from_secs_f64(x)
    }

    #[test]
    fn interpolates_linearly() {
        let a = Attenuation::new(&[(10.0, 0.0), (20.0, 10.0), (30.0, 4.0)], false).unwrap();
        assert_eq!(a.db_at(s(0.0)), 0.0);
        assert_eq!(a.db_at(s(15.0)), 5.0);
        assert_eq!(a.db_at(s(20.0)), 10.0);
        assert!((a.db_at(s(25.0)) - 7.0).abs() < 1e-12);
        assert_eq!(a.db_at(s(100.0)), 4.0);
        assert_eq!(a.max_db(), 10.0);
    }

    #[test]
    fn loops_with_the_last_points_time() {
        let a = Attenuation::new(&[(2.0, 6.0), (4.0, 2.0)], true).unwrap();
        // Period 4 s: at 4 s + 1 s we are halfway from the last value (2) to the first (6).
        assert_eq!(a.db_at(s(5.0)), 4.0);
        assert_eq!(a.db_at(s(7.0)), 4.0);
        assert_eq!(a.db_at(s(8.0)), 2.0);
        assert!(Attenuation::new(&[(0.0, 1.0)], true).is_err());
    }

    #[test]
    fn parses_the_file_format() {
        let text = "# rain event\n0 0\n\n10.5 3\n 20  0.5 \n";
        let p = Attenuation::parse(text).unwrap();
        assert_eq!(p, vec![(0.0, 0.0), (10.5, 3.0), (20.0, 0.5)]);
        let e = Attenuation::parse("0 0\n1 x\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert_eq!(e.to_string(), "line 2: expected `time_s dB`, found \"1 x\"");
        // Range and order errors name the file's line, comments counted.
        let e = Attenuation::parse("# c\n0 1\n\n0 2\n").unwrap_err();
        assert_eq!(e.line, 4);
        let e = Attenuation::parse("0 101\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains("within 0 and 100"));
        assert_eq!(Attenuation::parse("").unwrap_err().line, 0);
    }

    #[test]
    fn channel_cn() {
        let c = Channel::new(
            20.0,
            Attenuation::new(&[(0.0, 0.0), (10.0, 8.0)], false).unwrap(),
        );
        assert_eq!(c.cn_db(s(5.0)), 16.0);
        assert_eq!(c.worst_cn_db(), 12.0);
    }
}
