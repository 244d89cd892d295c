//! Channel loss: Bernoulli (constant or scheduled), Gilbert-Elliott bursts,
//! and a bit error rate turned into a per-packet probability from its size.

use crate::rng::Rng;
use crate::schedule::Schedule;
use crate::time::Instant;

/// Decides, packet by packet, whether the channel destroys it.
pub trait Loss: Send {
    fn lose(&mut self, now: Instant, bytes: u32, rng: &mut Rng) -> bool;
    /// Long-run probability that a packet of `bytes` is lost.
    fn mean_loss(&self, bytes: u32) -> f64;
}

/// Independent loss with a probability that may follow a schedule.
#[derive(Debug)]
pub struct Bernoulli {
    p: Schedule,
}

impl Bernoulli {
    pub fn new(p: f64) -> Bernoulli {
        Bernoulli {
            p: Schedule::constant(p),
        }
    }
    pub fn scheduled(p: Schedule) -> Bernoulli {
        Bernoulli { p }
    }
}

impl Loss for Bernoulli {
    fn lose(&mut self, now: Instant, _bytes: u32, rng: &mut Rng) -> bool {
        rng.chance(self.p.value_at(now))
    }
    fn mean_loss(&self, _bytes: u32) -> f64 {
        self.p.mean()
    }
}

/// Two-state Markov loss (Gilbert-Elliott).
///
/// `p`: probability of moving from Good to Bad after a packet; `r`: from Bad to
/// Good. In Good a packet is lost with `loss_good`, in Bad with `loss_bad`.
/// With `loss_bad = 1` the mean loss burst is `1 / r` packets and the mean
/// loss rate `p / (p + r)` (when `loss_good = 0`).
#[derive(Debug)]
pub struct GilbertElliott {
    p: f64,
    r: f64,
    loss_good: f64,
    loss_bad: f64,
    bad: bool,
}

impl GilbertElliott {
    pub fn new(p: f64, r: f64, loss_good: f64, loss_bad: f64) -> GilbertElliott {
        GilbertElliott {
            p,
            r,
            loss_good,
            loss_bad,
            bad: false,
        }
    }

    /// Long-run fraction of packets lost.
    pub fn stationary_loss(&self) -> f64 {
        let pi_bad = if self.p + self.r > 0.0 {
            self.p / (self.p + self.r)
        } else {
            0.0
        };
        pi_bad * self.loss_bad + (1.0 - pi_bad) * self.loss_good
    }
}

impl Loss for GilbertElliott {
    fn lose(&mut self, _now: Instant, _bytes: u32, rng: &mut Rng) -> bool {
        let lost = rng.chance(if self.bad {
            self.loss_bad
        } else {
            self.loss_good
        });
        let flip = rng.chance(if self.bad { self.r } else { self.p });
        if flip {
            self.bad = !self.bad;
        }
        lost
    }
    fn mean_loss(&self, _bytes: u32) -> f64 {
        self.stationary_loss()
    }
}

/// Independent bit errors: a packet of `n` bytes survives with `(1 - ber)^(8 n)`.
#[derive(Debug)]
pub struct BitErrorRate {
    ln_survive_bit: f64,
}

impl BitErrorRate {
    pub fn new(ber: f64) -> BitErrorRate {
        BitErrorRate {
            ln_survive_bit: (-ber).ln_1p(),
        }
    }

    /// Probability that a packet of `bytes` has at least one bit error.
    pub fn packet_loss(&self, bytes: u32) -> f64 {
        -(self.ln_survive_bit * 8.0 * bytes as f64).exp_m1()
    }
}

impl Loss for BitErrorRate {
    fn lose(&mut self, _now: Instant, bytes: u32, rng: &mut Rng) -> bool {
        rng.chance(self.packet_loss(bytes))
    }
    fn mean_loss(&self, bytes: u32) -> f64 {
        self.packet_loss(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Binomial bound: |observed - expected| < 5 standard deviations (fixed seed, so
    /// this is deterministic; the bound documents that the frequency is right).
    fn assert_binomial(lost: u64, n: u64, p: f64) {
        let mean = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        assert!(
            (lost as f64 - mean).abs() < 5.0 * sd,
            "lost {lost} of {n}, expected {mean:.1} +- {sd:.1}"
        );
    }

    #[test]
    fn bernoulli_frequency() {
        let mut rng = Rng::new(1);
        let mut l = Bernoulli::new(0.03);
        let n = 200_000;
        let lost = (0..n)
            .filter(|_| l.lose(Instant::ZERO, 1500, &mut rng))
            .count() as u64;
        assert_binomial(lost, n, 0.03);
    }

    #[test]
    fn bernoulli_extremes() {
        let mut rng = Rng::new(1);
        assert!((0..1000).all(|_| !Bernoulli::new(0.0).lose(Instant::ZERO, 1, &mut rng)));
        assert!((0..1000).all(|_| Bernoulli::new(1.0).lose(Instant::ZERO, 1, &mut rng)));
    }

    #[test]
    fn scheduled_loss_follows_schedule() {
        let mut rng = Rng::new(3);
        let s = Schedule::new(&[(0.0, 0.0), (1.0, 1.0), (2.0, 0.0)], 0.0).unwrap();
        let mut l = Bernoulli::scheduled(s);
        assert!(!l.lose(Instant::from_millis(500), 1, &mut rng));
        assert!(l.lose(Instant::from_millis(1500), 1, &mut rng));
        assert!(!l.lose(Instant::from_millis(2500), 1, &mut rng));
    }

    #[test]
    fn ber_probability_from_size() {
        let b = BitErrorRate::new(1e-5);
        // 1500 bytes = 12000 bits: 1 - (1 - 1e-5)^12000 = 0.11308...
        assert!((b.packet_loss(1500) - 0.113_080).abs() < 1e-5);
        // A 40-byte ACK is far less likely to be hit.
        assert!(b.packet_loss(40) < 0.0033);
        let mut rng = Rng::new(9);
        let mut l = BitErrorRate::new(1e-5);
        let n = 100_000;
        let lost = (0..n)
            .filter(|_| l.lose(Instant::ZERO, 1500, &mut rng))
            .count() as u64;
        assert_binomial(lost, n, b.packet_loss(1500));
    }

    #[test]
    fn gilbert_elliott_bursts() {
        let mut rng = Rng::new(5);
        let (p, r) = (0.01, 0.25);
        let mut ge = GilbertElliott::new(p, r, 0.0, 1.0);
        let n = 400_000;
        let mut lost_total = 0u64;
        let mut bursts = Vec::new();
        let mut run = 0u64;
        for _ in 0..n {
            if ge.lose(Instant::ZERO, 1500, &mut rng) {
                lost_total += 1;
                run += 1;
            } else if run > 0 {
                bursts.push(run);
                run = 0;
            }
        }
        let mean_burst = bursts.iter().sum::<u64>() as f64 / bursts.len() as f64;
        // Burst lengths are geometric with mean 1/r = 4.
        assert!((mean_burst - 4.0).abs() < 0.25, "mean burst {mean_burst}");
        let rate = lost_total as f64 / n as f64;
        let expect = ge.stationary_loss();
        assert!(
            (rate - expect).abs() / expect < 0.1,
            "loss {rate} vs {expect}"
        );
        // Bursty: far more long runs than independent loss at the same rate would give.
        let long = bursts.iter().filter(|&&b| b >= 8).count() as f64 / bursts.len() as f64;
        assert!(long > 0.05, "share of bursts >= 8: {long}");
    }
}
