//! Link adaptation of the forward carrier: which MODCOD a terminal's frames
//! use at a given time.
//!
//! - [`Ccm`]: one fixed MODCOD. A fade that takes the C/N below its
//!   threshold loses every frame: an outage.
//! - [`Acm`]: the DVB-S2 adaptive loop. Every refresh period (at `k *
//!   refresh`, k = 1, 2, ...) the terminal reports the C/N it measures; the
//!   gateway picks the most efficient allowed MODCOD whose required Es/N0
//!   plus the margin is at most that C/N, moving up only when the C/N also
//!   clears the hysteresis, and down as soon as the MODCOD in use no longer
//!   clears its threshold plus the margin. The decision is in use one round
//!   trip (return plus forward base delay, at the report's time) after the
//!   report: the loop's delay is the refresh period plus a round trip. At
//!   time 0 the MODCOD chosen for the C/N at 0 is in use (the loop starts
//!   converged).
//!
//! The attenuation series is read at the frame's transmission time on the
//! carrier; a frame is lost when the C/N then is below the threshold of the
//! MODCOD it uses (the carrier decides, [`crate::forward`]).

use crate::delay::RoundTrip;
use crate::fade::Channel;
use crate::modcod::MODCODS;
use crate::series::Series;
use crate::time::Instant;
use std::collections::VecDeque;
use std::time::Duration;

/// Chooses the MODCOD of one terminal's frames.
pub trait Adaptation: Send {
    /// The MODCOD (index into [`MODCODS`]) for a frame sent at `t`; `t`
    /// never goes back between calls.
    fn modcod_at(&mut self, t: Instant, channel: &Channel) -> usize;
    /// Times the MODCOD in use changed so far.
    fn changes(&self) -> u64;
    /// The MODCOD in use over time (index values), on change.
    fn series(&self) -> &Series;
}

/// One fixed MODCOD (constant coding and modulation).
#[derive(Clone, Debug)]
pub struct Ccm {
    modcod: usize,
    series: Series,
}

impl Ccm {
    pub fn new(modcod: usize) -> Ccm {
        let mut series = Series::default();
        series.record(Instant::ZERO, modcod as f64);
        Ccm { modcod, series }
    }
}

impl Adaptation for Ccm {
    fn modcod_at(&mut self, _t: Instant, _channel: &Channel) -> usize {
        self.modcod
    }
    fn changes(&self) -> u64 {
        0
    }
    fn series(&self) -> &Series {
        &self.series
    }
}

/// The gateway's rule: margin and hysteresis over the allowed MODCODs.
#[derive(Clone, Debug, PartialEq)]
pub struct ModcodRule {
    /// Allowed MODCODs (indexes), most efficient last.
    allowed: Vec<usize>,
    margin_db: f64,
    hysteresis_db: f64,
}

impl ModcodRule {
    /// `allowed`: indexes into [`MODCODS`], at least one.
    pub fn new(mut allowed: Vec<usize>, margin_db: f64, hysteresis_db: f64) -> ModcodRule {
        allowed.sort_by(|&a, &b| {
            MODCODS[a]
                .efficiency(false)
                .total_cmp(&MODCODS[b].efficiency(false))
        });
        allowed.dedup();
        ModcodRule {
            allowed,
            margin_db,
            hysteresis_db,
        }
    }

    fn clears(&self, m: usize, cn: f64, extra: f64) -> bool {
        MODCODS[m].es_n0_db + self.margin_db + extra <= cn
    }

    /// The most efficient MODCOD that clears `cn` with the margin (and
    /// `extra`), if any.
    fn best(&self, cn: f64, extra: f64) -> Option<usize> {
        self.allowed
            .iter()
            .rev()
            .copied()
            .find(|&m| self.clears(m, cn, extra))
    }

    /// The most robust allowed MODCOD (lowest threshold).
    pub fn most_robust(&self) -> usize {
        *self
            .allowed
            .iter()
            .min_by(|&&a, &&b| MODCODS[a].es_n0_db.total_cmp(&MODCODS[b].es_n0_db))
            .expect("at least one MODCOD")
    }

    /// The MODCOD for `cn` without history (no hysteresis).
    pub fn choose_fresh(&self, cn: f64) -> usize {
        self.best(cn, 0.0).unwrap_or_else(|| self.most_robust())
    }

    /// The next decision after `current` for a report of `cn`.
    pub fn choose(&self, current: usize, cn: f64) -> usize {
        if !self.clears(current, cn, 0.0) {
            return self.choose_fresh(cn);
        }
        match self.best(cn, self.hysteresis_db) {
            Some(up) if MODCODS[up].efficiency(false) > MODCODS[current].efficiency(false) => up,
            _ => current,
        }
    }
}

/// The adaptive loop of one terminal.
pub struct Acm {
    rule: ModcodRule,
    refresh_ns: u64,
    round_trip: RoundTrip,
    /// The gateway's latest decision.
    decided: usize,
    in_use: usize,
    /// Decisions on their way: (in use from, MODCOD).
    pending: VecDeque<(Instant, usize)>,
    /// Index of the next report.
    next_report: u64,
    changes: u64,
    series: Series,
}

impl Acm {
    /// The loop for a terminal whose channel at time 0 is `channel`.
    pub fn new(
        rule: ModcodRule,
        refresh: Duration,
        round_trip: RoundTrip,
        channel: &Channel,
    ) -> Acm {
        let first = rule.choose_fresh(channel.cn_db(Instant::ZERO));
        let mut series = Series::default();
        series.record(Instant::ZERO, first as f64);
        Acm {
            rule,
            refresh_ns: (refresh.as_nanos() as u64).max(1),
            round_trip,
            decided: first,
            in_use: first,
            pending: VecDeque::new(),
            next_report: 1,
            changes: 0,
            series,
        }
    }
}

impl Adaptation for Acm {
    fn modcod_at(&mut self, t: Instant, channel: &Channel) -> usize {
        loop {
            let report = Instant::from_nanos(self.next_report * self.refresh_ns);
            if report > t {
                break;
            }
            self.next_report += 1;
            self.decided = self.rule.choose(self.decided, channel.cn_db(report));
            let mut at = report + self.round_trip.at(report);
            if let Some(&(last, _)) = self.pending.back() {
                at = at.max(last);
            }
            self.pending.push_back((at, self.decided));
        }
        while let Some(&(at, m)) = self.pending.front() {
            if at > t {
                break;
            }
            self.pending.pop_front();
            if m != self.in_use {
                self.in_use = m;
                self.changes += 1;
                self.series.record(at, m as f64);
            }
        }
        self.in_use
    }
    fn changes(&self) -> u64 {
        self.changes
    }
    fn series(&self) -> &Series {
        &self.series
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fade::Attenuation;
    use crate::modcod::by_name;

    fn all() -> Vec<usize> {
        (0..MODCODS.len()).collect()
    }

    fn name(i: usize) -> &'static str {
        MODCODS[i].name
    }

    #[test]
    fn rule_picks_the_most_efficient_with_margin() {
        let r = ModcodRule::new(all(), 1.0, 0.5);
        // 20 dB clear sky: 32APSK 9/10 needs 16.05 + 1.
        assert_eq!(name(r.choose_fresh(20.0)), "32APSK 9/10");
        // 7 dB: 8PSK 3/5 (5.50) beats the QPSK 8/9 (6.20) it dominates.
        assert_eq!(name(r.choose_fresh(7.0)), "8PSK 3/5");
        // Below every threshold: the most robust.
        assert_eq!(name(r.choose_fresh(-10.0)), "QPSK 1/4");
    }

    #[test]
    fn rule_hysteresis_up_not_down() {
        let r = ModcodRule::new(all(), 0.0, 0.5);
        let q34 = by_name("QPSK 3/4").unwrap(); // 4.03 dB
                                                // 4.70 dB clears QPSK 4/5 (4.68) but not with the hysteresis: stay.
        assert_eq!(r.choose(q34, 4.70), q34);
        // 5.20 dB clears 4/5 + 0.5: up to QPSK 4/5 (5/6 needs 5.68).
        assert_eq!(name(r.choose(q34, 5.20)), "QPSK 4/5");
        // Down at once when the current threshold is not cleared.
        assert_eq!(name(r.choose(q34, 4.00)), "QPSK 2/3");
        // Restricted set.
        let few = ModcodRule::new(vec![by_name("QPSK 1/2").unwrap(), q34], 0.0, 0.0);
        assert_eq!(name(few.choose_fresh(3.0)), "QPSK 1/2");
        assert_eq!(name(few.choose_fresh(-3.0)), "QPSK 1/2");
    }

    #[test]
    fn acm_follows_the_fade_after_the_loop_delay() {
        // Clear sky 10 dB, a step to 5 dB attenuation at 2.5 s (a steep ramp).
        let fade = Attenuation::new(&[(0.0, 0.0), (2.5, 0.0), (2.500001, 5.0)], false).unwrap();
        let ch = Channel::new(10.0, fade);
        let rule = ModcodRule::new(all(), 0.0, 0.0);
        let rtt = RoundTrip::constant(Duration::from_millis(500));
        let mut a = Acm::new(rule, Duration::from_secs(1), rtt, &ch);
        let clear = a.modcod_at(Instant::ZERO, &ch);
        // 10 dB: 16APSK 2/3 (8.97 dB, 2.637 bit/symbol) beats 8PSK 5/6 (9.35 dB, 2.479).
        assert_eq!(name(clear), "16APSK 2/3");
        // The fade starts at 2.5 s; the report at 3 s sees it; in use at 3.5 s.
        assert_eq!(a.modcod_at(Instant::from_millis(3_499), &ch), clear);
        let faded = a.modcod_at(Instant::from_millis(3_500), &ch);
        assert_eq!(name(faded), "QPSK 4/5"); // 5 dB: 4.68 fits, 5.18 (5/6) does not
        assert_eq!(a.changes(), 1);
        assert_eq!(
            a.series().points_s(),
            vec![(0.0, clear as f64), (3.5, faded as f64)]
        );
    }
}
