//! A small mutation fuzzer for stable Rust, run from `cargo test`.
//!
//! cargo-fuzz needs a nightly compiler (libFuzzer and sanitizer coverage);
//! this crate needs neither. A target is a closure over bytes; [`run`]
//! replays the target's committed corpus (`fuzz-corpus/<target>/` of the
//! crate: valid seeds and past crashes, so every run is also a regression
//! test), then mutates corpus entries for a time budget:
//!
//! - mutations (havoc style, 1 to 16 stacked per input): bit flips, random
//!   and "interesting" bytes, small arithmetic, deletions, insertions,
//!   duplicated ranges, dictionary tokens inserted or written over, splices
//!   with another corpus entry, truncation;
//! - feedback: no compiler coverage on stable, so a target reports
//!   *features* of what it did ([`Features::add`]: which branch a parser
//!   took, an error's kind, a status, counts in buckets). An input that shows
//!   a feature never seen before joins the in-memory corpus;
//! - failures: a panic (an assertion of the target's invariants, or a bug)
//!   saves the input under the output folder and fails the test with the
//!   input as a Rust byte-string literal, ready to be committed to the
//!   corpus and written as a unit test; an input that runs for longer than
//!   the hang timeout is saved and the process aborted;
//! - determinism: one seeded [`Rng`] (SplitMix64); the same seed, corpus and
//!   number of executions give the same inputs.
//!
//! Environment:
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `SATBENCH_FUZZ_SECONDS` | seconds of mutation per target (0: replay the corpus only) | the target's own, short |
//! | `SATBENCH_FUZZ_SEED` | the RNG seed | a hash of the target's name |
//! | `SATBENCH_FUZZ_OUT` | folder for crashes, the grown corpus and `stats.jsonl` | crashes only, in `$TMPDIR/satbench-fuzz` |
//! | `SATBENCH_FUZZ_HANG_S` | seconds one input may run before it counts as a hang | 10 |

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// SplitMix64 (satbench-common's): small, fast, and the same sequence everywhere for a seed.
#[derive(Clone, Debug)]
pub struct Rng(satbench_common::SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(satbench_common::SplitMix64::new(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n`; `n` must not be 0.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
}

/// FNV-1a, 64 bits: names inputs and hashes features.
pub fn hash(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &x in b {
        h ^= x as u64;
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

const FEATURE_BITS: usize = 1 << 18;

/// What the target reports about an execution; new features keep the input.
pub struct Features {
    seen: Vec<u64>,
    count: usize,
    fresh: usize,
}

impl Features {
    fn new() -> Features {
        Features {
            seen: vec![0; FEATURE_BITS / 64],
            count: 0,
            fresh: 0,
        }
    }

    /// Record a feature: any number that says what this input made the
    /// target do (mix a tag into it to keep kinds apart).
    pub fn add(&mut self, feature: u64) {
        let mut z = feature.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z ^= z >> 29;
        let bit = (z as usize) % FEATURE_BITS;
        let (w, m) = (bit / 64, 1u64 << (bit % 64));
        if self.seen[w] & m == 0 {
            self.seen[w] |= m;
            self.count += 1;
            self.fresh += 1;
        }
    }

    /// A feature made of a tag and some bytes (a branch name, a token).
    pub fn add_bytes(&mut self, tag: u64, b: &[u8]) {
        self.add(tag.wrapping_mul(31) ^ hash(b));
    }

    /// A feature for a count, by powers of two (as AFL buckets hit counts).
    pub fn add_count(&mut self, tag: u64, n: usize) {
        let bucket = usize::BITS - n.leading_zeros();
        self.add(tag.wrapping_mul(1_000_003) ^ bucket as u64);
    }
}

/// One fuzz target's settings.
#[derive(Clone, Debug)]
pub struct Config {
    name: String,
    corpus: PathBuf,
    dict: Vec<Vec<u8>>,
    max_len: usize,
    default_seconds: f64,
    /// Seconds whatever the environment says (this crate's own tests).
    fixed_seconds: Option<f64>,
}

impl Config {
    /// A target named `name` whose seeds are the files of `corpus`.
    pub fn new(name: &str, corpus: impl Into<PathBuf>) -> Config {
        Config {
            name: name.to_string(),
            corpus: corpus.into(),
            dict: Vec::new(),
            max_len: 4096,
            default_seconds: 0.5,
            fixed_seconds: None,
        }
    }

    /// Tokens the mutator inserts whole (keywords, delimiters, magic values).
    pub fn dict<T: AsRef<[u8]>>(mut self, tokens: &[T]) -> Config {
        self.dict = tokens.iter().map(|t| t.as_ref().to_vec()).collect();
        self
    }

    /// The longest input generated (seeds may be longer).
    pub fn max_len(mut self, n: usize) -> Config {
        self.max_len = n.max(1);
        self
    }

    /// Seconds of mutation when `SATBENCH_FUZZ_SECONDS` is not set.
    pub fn default_seconds(mut self, s: f64) -> Config {
        self.default_seconds = s;
        self
    }
}

/// What one run did.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    pub name: String,
    pub seed: u64,
    pub seconds: f64,
    pub execs: u64,
    /// Committed corpus entries replayed.
    pub seeds: usize,
    /// Corpus entries at the end (seeds plus inputs with new features).
    pub corpus: usize,
    pub features: usize,
    /// The slowest execution, and its input's length.
    pub slowest_ms: f64,
    pub slowest_len: usize,
}

impl Stats {
    /// One JSON line (no serde: this crate has no dependencies).
    pub fn json(&self) -> String {
        format!(
            "{{\"target\":\"{}\",\"seed\":{},\"seconds\":{:.1},\"execs\":{},\"execs_per_s\":{:.0},\
             \"seeds\":{},\"corpus\":{},\"features\":{},\"slowest_ms\":{:.3},\"slowest_len\":{}}}",
            self.name,
            self.seed,
            self.seconds,
            self.execs,
            self.execs as f64 / self.seconds.max(1e-9),
            self.seeds,
            self.corpus,
            self.features,
            self.slowest_ms,
            self.slowest_len
        )
    }
}

/// An input as a Rust byte-string literal, for a regression unit test.
pub fn literal(b: &[u8]) -> String {
    let mut s = String::from("b\"");
    for &c in b {
        match c {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            0x20..=0x7e => s.push(c as char),
            _ => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s.push('"');
    s
}

fn env_f64(k: &str) -> Option<f64> {
    let v = std::env::var(k).ok()?;
    match v.trim().parse::<f64>() {
        Ok(x) if x >= 0.0 && x.is_finite() => Some(x),
        _ => panic!("{k}={v:?}: not a number of seconds"),
    }
}

fn out_dir() -> (PathBuf, bool) {
    match std::env::var_os("SATBENCH_FUZZ_OUT") {
        Some(d) => (PathBuf::from(d), true),
        None => (std::env::temp_dir().join("satbench-fuzz"), false),
    }
}

/// The committed seeds, sorted by file name. A missing or empty folder is
/// an error: every target has seeds.
pub fn load_corpus(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let rd =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("fuzz corpus {}: {e}", dir.display()));
    let mut v: Vec<(String, Vec<u8>)> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file())
        .map(|e| {
            let p = e.path();
            let b = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (e.file_name().to_string_lossy().into_owned(), b)
        })
        .collect();
    v.sort();
    assert!(!v.is_empty(), "fuzz corpus {}: no seeds", dir.display());
    v
}

fn save(dir: &Path, prefix: &str, input: &[u8]) -> PathBuf {
    let _ = std::fs::create_dir_all(dir);
    let p = dir.join(format!("{prefix}{:016x}", hash(input)));
    let _ = std::fs::write(&p, input);
    p
}

fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = e.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = e.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic".into()
    }
}

/// The mutation engine: turns a corpus entry into a new input.
struct Mutator<'a> {
    dict: &'a [Vec<u8>],
    max_len: usize,
}

const INTERESTING: &[u8] = &[
    0, 1, 0x7f, 0x80, 0xff, 0xfe, b'%', b'/', b'.', b'<', b'>', b'"', b'\'', b' ', b'\n', b'\r',
    b':', b'?', b'#', b'=', b'(', b')', b'\\', b'@', b'[', b']', b'&', b';', b'0', b'9', b'a',
    b'F', 0xc3, 0xe2,
];

impl Mutator<'_> {
    fn range(rng: &mut Rng, len: usize) -> (usize, usize) {
        let start = rng.below(len);
        let max = (len - start).min(if rng.one_in(8) { 256 } else { 16 });
        (start, start + 1 + rng.below(max))
    }

    fn mutate(&self, rng: &mut Rng, v: &mut Vec<u8>, others: &[Vec<u8>]) {
        let n = 1 << rng.below(5);
        for _ in 0..n {
            self.one(rng, v, others);
        }
        v.truncate(self.max_len);
    }

    fn one(&self, rng: &mut Rng, v: &mut Vec<u8>, others: &[Vec<u8>]) {
        let len = v.len();
        match rng.below(13) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                v[i] = rng.next_u64() as u8;
            }
            2 if len > 0 => {
                let i = rng.below(len);
                v[i] = INTERESTING[rng.below(INTERESTING.len())];
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let d = 1 + rng.below(35) as u8;
                v[i] = if rng.one_in(2) {
                    v[i].wrapping_add(d)
                } else {
                    v[i].wrapping_sub(d)
                };
            }
            4 if len > 0 => {
                let (a, b) = Self::range(rng, len);
                v.drain(a..b);
            }
            5 => {
                let at = rng.below(len + 1);
                let k = 1 + rng.below(8);
                let bytes: Vec<u8> = (0..k)
                    .map(|_| {
                        if rng.one_in(2) {
                            INTERESTING[rng.below(INTERESTING.len())]
                        } else {
                            rng.next_u64() as u8
                        }
                    })
                    .collect();
                v.splice(at..at, bytes);
            }
            6 if len > 0 => {
                // Duplicate a range somewhere else (repetition finds
                // counting and nesting bugs).
                let (a, b) = Self::range(rng, len);
                let chunk = v[a..b].to_vec();
                let at = rng.below(len + 1);
                let times = if rng.one_in(4) { 1 + rng.below(32) } else { 1 };
                for _ in 0..times {
                    v.splice(at..at, chunk.iter().copied());
                    if v.len() > self.max_len {
                        break;
                    }
                }
            }
            7 | 8 if !self.dict.is_empty() => {
                let t = &self.dict[rng.below(self.dict.len())];
                let at = rng.below(len + 1);
                if rng.one_in(2) || at == len {
                    v.splice(at..at, t.iter().copied());
                } else {
                    let end = (at + t.len()).min(len);
                    v.splice(at..end, t.iter().copied());
                }
            }
            9 | 10 if !others.is_empty() => {
                let o = &others[rng.below(others.len())];
                if o.is_empty() {
                    return;
                }
                let (a, b) = Self::range(rng, o.len());
                if rng.one_in(2) {
                    // Splice: our head, their tail.
                    let cut = rng.below(len + 1);
                    v.truncate(cut);
                    v.extend_from_slice(&o[a..]);
                } else {
                    let at = rng.below(len + 1);
                    v.splice(at..at, o[a..b].iter().copied());
                }
            }
            11 if len > 1 => {
                v.truncate(rng.below(len));
            }
            12 if len > 1 => {
                // Swap two bytes.
                let (i, j) = (rng.below(len), rng.below(len));
                v.swap(i, j);
            }
            _ => {
                let at = rng.below(len + 1);
                v.insert(at, rng.next_u64() as u8);
            }
        }
    }
}

/// Stops the process when one input runs for longer than the hang timeout,
/// after saving it.
struct Watchdog {
    done: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watchdog {
    fn start(
        name: String,
        execs: Arc<AtomicU64>,
        current: Arc<Mutex<Vec<u8>>>,
        dir: PathBuf,
        limit: Duration,
    ) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let thread = std::thread::spawn(move || {
            let mut last = (execs.load(Ordering::Relaxed), Instant::now());
            while !d.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let n = execs.load(Ordering::Relaxed);
                if n != last.0 {
                    last = (n, Instant::now());
                } else if last.1.elapsed() > limit {
                    let input = current.lock().map(|v| v.clone()).unwrap_or_default();
                    let p = save(&dir, "hang-", &input);
                    eprintln!(
                        "fuzz target {name}: an input ran for over {limit:?}; saved to {}: {}",
                        p.display(),
                        literal(&input)
                    );
                    std::process::abort();
                }
            }
        });
        Watchdog {
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Replay the corpus, then fuzz `target` for the budget; panics (failing
/// the test) on the first input that makes the target panic.
pub fn run(cfg: Config, mut target: impl FnMut(&[u8], &mut Features)) -> Stats {
    let seconds = cfg
        .fixed_seconds
        .or_else(|| env_f64("SATBENCH_FUZZ_SECONDS"))
        .unwrap_or(cfg.default_seconds);
    let seed = match std::env::var("SATBENCH_FUZZ_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("SATBENCH_FUZZ_SEED={s:?}: not a u64")),
        Err(_) => hash(cfg.name.as_bytes()),
    };
    let hang = Duration::from_secs_f64(env_f64("SATBENCH_FUZZ_HANG_S").unwrap_or(10.0));
    let (out, explicit) = out_dir();
    let dir = out.join(&cfg.name);
    let seeds = load_corpus(&cfg.corpus);
    let mut corpus: Vec<Vec<u8>> = seeds.iter().map(|(_, b)| b.clone()).collect();
    let mut feats = Features::new();
    let execs = Arc::new(AtomicU64::new(0));
    let current = Arc::new(Mutex::new(Vec::new()));
    let _dog = Watchdog::start(
        cfg.name.clone(),
        execs.clone(),
        current.clone(),
        dir.clone(),
        hang,
    );
    let mut slowest = (Duration::ZERO, 0usize);
    let mut exec_one = |input: &[u8], feats: &mut Features, origin: &str| {
        {
            let mut c = current.lock().expect("current input");
            c.clear();
            c.extend_from_slice(input);
        }
        let t0 = Instant::now();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| target(input, feats)));
        let dt = t0.elapsed();
        if dt > slowest.0 {
            slowest = (dt, input.len());
        }
        execs.fetch_add(1, Ordering::Relaxed);
        if let Err(e) = r {
            let p = save(&dir, "crash-", input);
            panic!(
                "fuzz target {} (seed {seed}): {origin} panicked: {}\n  input saved to {}\n  \
                 input: {}",
                cfg.name,
                panic_text(&*e),
                p.display(),
                literal(input)
            );
        }
    };
    for (name, b) in &seeds {
        exec_one(b, &mut feats, &format!("corpus entry {name}"));
    }
    feats.fresh = 0;
    let m = Mutator {
        dict: &cfg.dict,
        max_len: cfg.max_len,
    };
    let mut rng = Rng::new(seed);
    let start = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    let mut next_report = Duration::from_secs(10);
    let mut input = Vec::new();
    while start.elapsed() < budget {
        let base = &corpus[rng.below(corpus.len())];
        input.clear();
        input.extend_from_slice(base);
        m.mutate(&mut rng, &mut input, &corpus);
        exec_one(&input, &mut feats, "a mutated input");
        if feats.fresh > 0 {
            feats.fresh = 0;
            if corpus.len() < 1 << 16 {
                corpus.push(input.clone());
                if explicit {
                    save(&dir.join("corpus"), "", &input);
                }
            }
        }
        if seconds >= 10.0 && start.elapsed() >= next_report {
            next_report += Duration::from_secs(10);
            eprintln!(
                "fuzz {}: {:.0} s, {} execs, corpus {}, features {}",
                cfg.name,
                start.elapsed().as_secs_f64(),
                execs.load(Ordering::Relaxed),
                corpus.len(),
                feats.count
            );
        }
    }
    let stats = Stats {
        name: cfg.name.clone(),
        seed,
        seconds: start.elapsed().as_secs_f64(),
        execs: execs.load(Ordering::Relaxed),
        seeds: seeds.len(),
        corpus: corpus.len(),
        features: feats.count,
        slowest_ms: slowest.0.as_secs_f64() * 1e3,
        slowest_len: slowest.1,
    };
    eprintln!("fuzz {}", stats.json());
    if explicit {
        let _ = std::fs::create_dir_all(&out);
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(out.join("stats.jsonl"))
        {
            let _ = std::io::Write::write_all(&mut f, format!("{}\n", stats.json()).as_bytes());
        }
    }
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_spread() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<u64> = (0..4).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..4).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut hits = [0u32; 10];
        for _ in 0..10_000 {
            hits[a.below(10)] += 1;
        }
        assert!(hits.iter().all(|&h| (800..1200).contains(&h)), "{hits:?}");
    }

    #[test]
    fn mutations_stay_under_max_len_and_vary() {
        let dict = vec![b"TOKEN".to_vec()];
        let m = Mutator {
            dict: &dict,
            max_len: 64,
        };
        let mut rng = Rng::new(1);
        let others = vec![b"other entry".to_vec()];
        let mut distinct = std::collections::HashSet::new();
        for _ in 0..2000 {
            let mut v = b"GET / HTTP/1.1\r\n\r\n".to_vec();
            m.mutate(&mut rng, &mut v, &others);
            assert!(v.len() <= 64);
            distinct.insert(v);
        }
        assert!(distinct.len() > 1500, "{}", distinct.len());
        assert!(distinct.iter().any(|v| v.windows(5).any(|w| w == b"TOKEN")));
    }

    #[test]
    fn literal_escapes() {
        assert_eq!(literal(b"a\"\\\n\x00\xff"), "b\"a\\\"\\\\\\n\\x00\\xff\"");
    }

    #[test]
    fn features_count_new_only() {
        let mut f = Features::new();
        f.add(1);
        f.add(1);
        f.add_count(2, 5);
        f.add_count(2, 6);
        assert_eq!((f.count, f.fresh), (2, 2));
    }

    #[test]
    fn finds_a_planted_bug_and_saves_it() {
        let dir = std::env::temp_dir().join(format!("fuzzkit-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("seed"), b"hello").unwrap();
        let mut cfg = Config::new("planted", &dir).dict(&["BUG"]);
        cfg.fixed_seconds = Some(5.0);
        let r = std::panic::catch_unwind(|| {
            run(cfg, |b, f| {
                f.add_count(1, b.len());
                if b.windows(3).any(|w| w == b"BUG") {
                    panic!("planted");
                }
            })
        });
        let _ = std::fs::remove_dir_all(&dir);
        let msg = panic_text(&*r.unwrap_err());
        assert!(msg.contains("planted") && msg.contains("BUG"), "{msg}");
    }
}
