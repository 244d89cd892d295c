//! What satbench's binaries share, in one place: the seeded generator
//! ([`SplitMix64`]) and the real-time web's message schedule ([`arrivals_ms`]),
//! which the server (its own messages), the loader (each client's) and the
//! browsers' script `rt.js` (a port, held to this one by the golden fixture
//! `tests/fixtures/rt-arrivals.json` that this crate's tests write and check)
//! all follow, so one seed gives one schedule whoever sends; `TCP_INFO` and
//! `TCP_CONGESTION` as read from a socket ([`tcpinfo`]); and the wall clock
//! every namespace of a testbed shares ([`unix_ns`]).

pub mod tcpinfo;

/// Nanoseconds since the Unix epoch, from the wall clock (every namespace of a testbed shares it).
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// SplitMix64: small, fast, and the same sequence everywhere for a seed.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in [0, 1), from the top 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The seed of client `client`'s own messages in a real-time stream seeded `seed` (the server's
/// messages use `seed` itself). A browser is client 0.
pub fn up_seed(seed: u64, client: u64) -> u64 {
    seed ^ 0x5bd1_e995 ^ client.wrapping_mul(0x9e37_79b9)
}

/// When each of `n` messages is due, in ms from the schedule's start: `interval_ms` apart
/// (the first one interval after the start), or Poisson arrivals of that mean (exponential
/// gaps by inverse transform, `u` in (0, 1]) drawn from `SplitMix64::new(seed)`.
pub fn arrivals_ms(seed: u64, n: u32, interval_ms: f64, poisson: bool) -> Vec<f64> {
    let mut rng = SplitMix64::new(seed);
    let mut t = 0.0f64;
    (0..n)
        .map(|_| {
            t += if poisson {
                -interval_ms * (1.0 - rng.unit()).ln()
            } else {
                interval_ms
            };
            t
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cases of the golden fixture: (seed, client, n, interval_ms, poisson).
    const CASES: &[(u64, u64, u32, f64, bool)] = &[
        (7, 0, 5, 250.0, true),
        (1, 0, 20, 1000.0, true),
        (18_446_744_073_709_551_557, 0, 8, 40.0, true),
        (42, 3, 6, 100.0, true),
        (9, 0, 4, 500.0, false),
    ];

    fn fixture() -> serde_json::Value {
        let cases: Vec<serde_json::Value> = CASES
            .iter()
            .map(|&(seed, client, n, interval_ms, poisson)| {
                let useed = up_seed(seed, client);
                serde_json::json!({
                    // as strings: a u64 does not fit a JSON number's exact range
                    "seed": seed.to_string(), "client": client, "up_seed": useed.to_string(),
                    "n": n, "interval_ms": interval_ms, "poisson": poisson,
                    "down_ms": arrivals_ms(seed, n, interval_ms, poisson),
                    "up_ms": arrivals_ms(useed, n, interval_ms, poisson),
                })
            })
            .collect();
        serde_json::json!({
            "about": "written by crates/common's tests (SATBENCH_BLESS=1 cargo test -p satbench-common); \
                      read by tests/e2e/test_realtime_schedule.py (the browsers' script, run in Chromium)",
            "cases": cases,
        })
    }

    /// The golden fixture the Python and browser sides read is this crate's output: a change here
    /// without `SATBENCH_BLESS=1` fails, and the blessed file fails the other sides until they follow.
    #[test]
    fn golden_fixture_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/rt-arrivals.json");
        // Keys sorted: serde_json keeps insertion order when another crate of the workspace turns
        // on its preserve_order feature, so the text would depend on what else is built.
        let mut v = fixture();
        v.sort_all_objects();
        let want = serde_json::to_string_pretty(&v).unwrap() + "\n";
        if std::env::var_os("SATBENCH_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            have,
            want,
            "{} is stale: SATBENCH_BLESS=1 cargo test -p satbench-common",
            path.display()
        );
    }

    #[test]
    fn splitmix_known_values() {
        // SplitMix64 from seed 0: the reference sequence (Vigna).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
    }

    #[test]
    fn poisson_mean_and_constant_spacing() {
        let a = arrivals_ms(3, 20_000, 100.0, true);
        let mean = a.last().unwrap() / a.len() as f64;
        assert!((mean - 100.0).abs() < 3.0, "{mean}");
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(arrivals_ms(3, 3, 50.0, false), vec![50.0, 100.0, 150.0]);
        assert_eq!(up_seed(7, 0), 7 ^ 0x5bd1_e995);
    }
}
