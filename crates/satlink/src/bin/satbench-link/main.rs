//! satbench-link: the TUN front end of the link model.
//!
//! It attaches to two TUN devices, one in the satellite terminal's network
//! namespace and one in the gateway's, and moves packets between them through
//! two [`satlink::Direction`]s, one thread each. All timing decisions are the
//! model's; this file only reads, writes, sleeps and counts.
//!
//! ```text
//! satbench-link --config FILE --terminal NETNS:DEV --gateway NETNS:DEV
//!               [--stats FILE] [--pcap-dir DIR] [--parent-pid PID]
//! satbench-link --check --config FILE
//! ```
//! Prints one JSON line `{"ready": true, ...}` on stdout once attached; on
//! SIGTERM/SIGINT/SIGHUP it stops, writes the counters to `--stats`, exits 0.
//! Configuration errors exit 2 with one line naming the field.

mod args;
mod sys;

use satlink::config::LinkConfig;
use satlink::pcap::PcapWriter;
use satlink::stats::CountersReport;
use satlink::wire::{complete_checksum, GsoChunk, VnetHeader, VNET_HDR_LEN};
use satlink::{Direction, Instant};
use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::thread;

type Frame = Vec<u8>;
type Capture = Option<Arc<Mutex<PcapWriter<BufWriter<File>>>>>;

fn usage_exit(msg: &str) -> ! {
    eprintln!("satbench-link: {msg}");
    std::process::exit(2);
}

/// What one direction's thread reports when it stops.
#[derive(Serialize)]
struct DirectionReport {
    #[serde(flatten)]
    counters: CountersReport,
    /// Offloaded chunks read from the TUN device (before segmentation).
    offload_chunks: u64,
    /// Frames that could not be parsed (dropped, not counted as offered).
    malformed: u64,
    /// Frames the kernel refused on write.
    write_errors: u64,
    /// Learned lateness margin of timed wake-ups, in microseconds.
    wake_margin_us: f64,
    /// CPU time spent polling without sleeping, in seconds.
    spin_s: f64,
}

#[derive(Serialize)]
struct Report<'a> {
    seed: u64,
    started_unix_ns: u64,
    duration_s: f64,
    offloads: u32,
    forward: DirectionReport,
    #[serde(rename = "return")]
    ret: DirectionReport,
    config: &'a LinkConfig,
}

/// How long to keep polling after a delivery, for a reply the kernel generates.
const LINGER_NS: u64 = 30_000;

/// One side of the emulator: a direction's model and the devices it joins.
struct Side {
    dir: Direction<Frame>,
    input: RawFd,
    output: RawFd,
    cap_in: Capture,
    cap_out: Capture,
    chunks: u64,
    malformed: u64,
    write_errors: u64,
}

/// Both directions, driven by one thread: a reply generated while a packet is
/// being delivered is then read at once, with no thread to wake.
struct Pump {
    sides: [Side; 2],
    stop: RawFd,
    mono0: u64,
    real0: u64,
}

fn capture(cap: &Capture, unix_ns: u64, frame: &[u8]) {
    if let Some(c) = cap {
        let mut copy = frame.to_vec();
        complete_checksum(&mut copy);
        let _ = c
            .lock()
            .expect("pcap lock")
            .write(unix_ns, &copy[VNET_HDR_LEN..]);
    }
}

impl Side {
    /// Read what is waiting (at most a batch) into the model.
    fn ingest(&mut self, buf: &mut [u8], mono0: u64, real0: u64) {
        for _ in 0..64 {
            let n = match sys::read_frame(self.input, buf) {
                Ok(Some(n)) => n,
                Ok(None) | Err(_) => break,
            };
            let now = Instant::from_nanos(sys::monotonic_ns() - mono0);
            let unix = real0 + now.as_nanos();
            let frame = &buf[..n];
            let Some(h) = VnetHeader::parse(frame) else {
                self.malformed += 1;
                continue;
            };
            if !h.is_gso() {
                capture(&self.cap_in, unix, frame);
                self.dir
                    .on_packet(now, frame.to_vec(), (n - VNET_HDR_LEN) as u32, 1);
                continue;
            }
            self.chunks += 1;
            match GsoChunk::new_checked(frame) {
                Ok(c) if self.dir.needs_segments() => {
                    let (dir, cap) = (&mut self.dir, &self.cap_in);
                    c.segment(|seg| {
                        capture(cap, unix, &seg);
                        let b = (seg.len() - VNET_HDR_LEN) as u32;
                        dir.on_packet(now, seg, b, 1);
                    });
                }
                Ok(c) => {
                    let (p, b) = c.wire_size();
                    capture(&self.cap_in, unix, frame);
                    self.dir.on_packet(now, frame.to_vec(), b, p);
                }
                Err(_) => self.malformed += 1,
            }
        }
    }

    /// Write every packet due at `now`; true if any was.
    fn deliver(&mut self, now: Instant, real0: u64) -> bool {
        let mut any = false;
        while let Some(f) = self.dir.poll_transmit(now) {
            capture(&self.cap_out, real0 + now.as_nanos(), &f);
            if !sys::write_frame(self.output, &f) {
                self.write_errors += 1;
            }
            any = true;
        }
        any
    }

    fn report(self, waker: &Waker, budget: &SpinBudget) -> DirectionReport {
        DirectionReport {
            counters: self.dir.report(),
            offload_chunks: self.chunks,
            malformed: self.malformed,
            write_errors: self.write_errors,
            wake_margin_us: waker.margin_ns as f64 / 1e3,
            spin_s: budget.spent_ns as f64 / 1e9,
        }
    }
}

impl Pump {
    fn now(&self) -> Instant {
        Instant::from_nanos(sys::monotonic_ns() - self.mono0)
    }

    fn run(mut self) -> (DirectionReport, DirectionReport) {
        sys::precise_timers();
        let mut buf = vec![0u8; VNET_HDR_LEN + 65_536 + 256];
        let mut waker = Waker::calibrated();
        let mut linger_until = 0u64;
        let mut budget = SpinBudget::new(self.now().as_nanos());
        loop {
            let now = self.now();
            let mut delivered = false;
            for side in self.sides.iter_mut() {
                delivered |= side.deliver(now, self.real0);
            }
            let now_ns = self.now().as_nanos();
            if delivered {
                linger_until = now_ns + LINGER_NS;
            }
            // Plan the wait. A timed wake-up on a virtual machine is tens of
            // microseconds late: sleep until a learned margin before the
            // deadline, then poll without sleeping (within a CPU budget).
            // Also poll briefly after a delivery: a reply the kernel generates
            // (ICMP, TCP ACKs) is queued within microseconds. (Polling long
            // enough to catch userspace replies was measured: on two cores it
            // takes CPU from the endpoints and worsens the tail.)
            budget.refill(now_ns);
            let due = self
                .sides
                .iter()
                .filter_map(|s| s.dir.poll_timeout())
                .map(|t| t.as_nanos())
                .min();
            let m = waker.margin_ns;
            let spin =
                budget.allows() && (due.is_some_and(|d| now_ns + m >= d) || now_ns < linger_until);
            let wake_at = due.map(|d| d.saturating_sub(m));
            let sleep = if spin {
                Some(0)
            } else {
                wake_at.map(|w| w.saturating_sub(now_ns))
            };
            let ready = sys::poll_readable(
                &[self.sides[0].input, self.sides[1].input, self.stop],
                sleep,
            );
            let after = self.now().as_nanos();
            if spin {
                budget.spend(after - now_ns);
            } else if let (Some(s), Some(w)) = (sleep, wake_at) {
                if s > 0 && !ready.iter().any(|r| *r) {
                    waker.observe(after as i64 - w as i64);
                }
            }
            if ready[2] {
                break;
            }
            for (i, side) in self.sides.iter_mut().enumerate() {
                if ready[i] {
                    side.ingest(&mut buf, self.mono0, self.real0);
                }
            }
        }
        let [f, r] = self.sides;
        (f.report(&waker, &budget), r.report(&waker, &budget))
    }
}

/// How early to stop sleeping before a deadline: a streaming estimate of the
/// 90th percentile of timed wake-up lateness (frugal quantile estimation:
/// outliers move it by one step, not by their size), plus a small guard.
struct Waker {
    p90_ns: f64,
    margin_ns: u64,
}

impl Waker {
    /// Start from this thread's measured lateness: 30 short timed sleeps.
    fn calibrated() -> Waker {
        let mut late: Vec<u64> = (0..30)
            .map(|_| {
                let t0 = sys::monotonic_ns();
                sys::sleep_ns(100_000);
                (sys::monotonic_ns() - t0).saturating_sub(100_000)
            })
            .collect();
        late.sort_unstable();
        let p90 = late[late.len() * 9 / 10] as f64;
        Waker {
            p90_ns: p90,
            margin_ns: (p90 as u64 + Self::GUARD_NS).min(Self::MAX_NS),
        }
    }

    const STEP_NS: f64 = 2_000.0;
    const GUARD_NS: u64 = 10_000;
    const MAX_NS: u64 = 300_000;

    /// `late_ns`: how long after the requested wake-up the thread ran.
    fn observe(&mut self, late_ns: i64) {
        if (late_ns as f64) > self.p90_ns {
            self.p90_ns += Self::STEP_NS * 0.9;
        } else {
            self.p90_ns = (self.p90_ns - Self::STEP_NS * 0.1).max(0.0);
        }
        self.margin_ns = (self.p90_ns as u64 + Self::GUARD_NS).min(Self::MAX_NS);
    }
}

/// A token bucket of CPU time for polling without sleeping: at most
/// `RATE` of one core on average, in bursts of at most `CAP_NS`.
struct SpinBudget {
    tokens_ns: f64,
    last_ns: u64,
    spent_ns: u64,
}

impl SpinBudget {
    const RATE: f64 = 0.10;
    const CAP_NS: f64 = 2_000_000.0;

    fn new(now: u64) -> SpinBudget {
        SpinBudget {
            tokens_ns: Self::CAP_NS,
            last_ns: now,
            spent_ns: 0,
        }
    }
    fn refill(&mut self, now: u64) {
        self.tokens_ns = (self.tokens_ns + (now.saturating_sub(self.last_ns)) as f64 * Self::RATE)
            .min(Self::CAP_NS);
        self.last_ns = now;
    }
    fn allows(&self) -> bool {
        self.tokens_ns > 0.0
    }
    fn spend(&mut self, ns: u64) {
        self.tokens_ns -= ns as f64;
        self.spent_ns += ns;
    }
}

fn fail(msg: String) -> ! {
    eprintln!("satbench-link: {msg}");
    std::process::exit(1);
}

fn open_side(side: &(String, String)) -> OwnedFd {
    let (ns, dev) = side;
    sys::enter_netns(ns).unwrap_or_else(|e| fail(e.to_string()));
    sys::open_tun(dev).unwrap_or_else(|e| fail(e.to_string()))
}

fn open_capture(dir: &Option<String>, name: &str) -> Capture {
    let d = dir.as_ref()?;
    let path = format!("{d}/{name}.pcap");
    let f = File::create(&path).unwrap_or_else(|e| fail(format!("create({path}): {e}")));
    let w = PcapWriter::new(BufWriter::with_capacity(1 << 20, f))
        .unwrap_or_else(|e| fail(format!("write({path}): {e}")));
    Some(Arc::new(Mutex::new(w)))
}

fn main() {
    let args =
        args::parse(std::env::args_os().skip(1)).unwrap_or_else(|e| usage_exit(&e.to_string()));
    let text = std::fs::read_to_string(&args.config)
        .unwrap_or_else(|e| usage_exit(&format!("cannot read {}: {e}", args.config)));
    let config = LinkConfig::from_json(&text)
        .unwrap_or_else(|e| usage_exit(&format!("{}: {e}", args.config)));
    let mono0 = sys::monotonic_ns();
    let real0 = sys::realtime_ns();
    let phase = if config.align_minute {
        real0 % 60_000_000_000
    } else {
        0
    };
    let (rf, rr) = config.rngs();
    let fwd: Direction<Frame> = config
        .forward
        .build("forward", phase, rf)
        .unwrap_or_else(|e| usage_exit(&format!("{}: {e}", args.config)));
    let ret: Direction<Frame> = config
        .ret
        .build("return", phase, rr)
        .unwrap_or_else(|e| usage_exit(&format!("{}: {e}", args.config)));
    if args.check {
        return;
    }

    sys::die_with_parent();
    if let Some(p) = args.parent_pid {
        // SAFETY: getppid has no preconditions.
        if unsafe { libc::getppid() } != p {
            fail("parent exited before the emulator started".into());
        }
    }
    let sigset = sys::block_signals();
    // Attach in each namespace, then return to our own: the emulator is no
    // process of the testbed's hosts.
    let home = "/proc/self/ns/net";
    let home_fd = std::fs::File::open(home).unwrap_or_else(|e| fail(format!("open({home}): {e}")));
    let term = open_side(args.terminal.as_ref().expect("checked"));
    let gw = open_side(args.gateway.as_ref().expect("checked"));
    sys::enter_netns_fd(&home_fd).unwrap_or_else(|e| fail(e.to_string()));
    let off_t = sys::set_offload(term.as_raw_fd(), &args.terminal.as_ref().unwrap().1)
        .unwrap_or_else(|e| fail(e.to_string()));
    let off_g = sys::set_offload(gw.as_raw_fd(), &args.gateway.as_ref().unwrap().1)
        .unwrap_or_else(|e| fail(e.to_string()));
    let cap_t = open_capture(&args.pcap_dir, "terminal");
    let cap_g = open_capture(&args.pcap_dir, "gateway");
    let stop = sys::eventfd().unwrap_or_else(|e| fail(e.to_string()));
    let side = |dir, input: &OwnedFd, output: &OwnedFd, cap_in: &Capture, cap_out: &Capture| Side {
        dir,
        input: input.as_raw_fd(),
        output: output.as_raw_fd(),
        cap_in: cap_in.clone(),
        cap_out: cap_out.clone(),
        chunks: 0,
        malformed: 0,
        write_errors: 0,
    };
    let pump = Pump {
        sides: [
            side(fwd, &gw, &term, &cap_g, &cap_t),
            side(ret, &term, &gw, &cap_t, &cap_g),
        ],
        stop: stop.as_raw_fd(),
        mono0,
        real0,
    };
    let worker = thread::Builder::new()
        .name("link".into())
        .spawn(move || pump.run())
        .expect("spawn");

    println!(
        "{}",
        serde_json::json!({"ready": true, "pid": std::process::id(), "seed": config.seed,
            "offloads": off_t & off_g})
    );
    let _ = std::io::stdout().flush();

    sys::wait_signal(&sigset);
    sys::eventfd_signal(stop.as_raw_fd());
    let (forward, ret) = worker.join().expect("link thread");
    for c in [cap_t, cap_g].into_iter().flatten() {
        let _ = c.lock().expect("pcap lock").flush();
    }
    let report = Report {
        seed: config.seed,
        started_unix_ns: real0,
        duration_s: (sys::monotonic_ns() - mono0) as f64 / 1e9,
        offloads: off_t & off_g,
        forward,
        ret,
        config: &config,
    };
    let json = serde_json::to_string_pretty(&report).expect("serialise report");
    match &args.stats {
        Some(path) => {
            let tmp = format!("{path}.tmp");
            std::fs::write(&tmp, json)
                .and_then(|_| std::fs::rename(&tmp, path))
                .unwrap_or_else(|e| fail(format!("write({path}): {e}")));
        }
        None => println!("{json}"),
    }
}
