//! satbench-link: the TUN front end of the link model.
//!
//! It attaches to two TUN devices, one in the satellite terminal's network
//! namespace and one in the gateway's, and moves packets between them through
//! two [`satlink::Direction`]s, driven by one thread. All timing decisions
//! are the library's: when packets are due is the model's, how to wait for
//! that ([`satlink::pacing`]) is the pacer's; this file only reads, writes,
//! sleeps and counts.
//!
//! ```text
//! satbench-link --config FILE --terminal NETNS:DEV --gateway NETNS:DEV
//!               [--stats FILE] [--pcap-dir DIR] [--parent-pid PID]
//! satbench-link --check --config FILE
//! ```
//! `FILE` is the JSON of [`satlink::config::LinkConfig`]; `-` reads it from
//! standard input.
//!
//! A run prints one JSON line `{"ready": true, ...}` on stdout once
//! attached; on SIGTERM/SIGINT/SIGHUP it stops, writes the counters to
//! `--stats`, exits 0. Configuration errors exit 2 with one line on stderr,
//! `satbench-link: FILE: FIELD: MESSAGE`.
//!
//! `--check` is the one place where link parameters are checked (the ranges
//! are listed in [`satlink::config`]; a run enforces the same). It reads
//! trace files, prints one JSON line on stdout and exits:
//! - 0 with `{"ok": true, "config": CANONICAL, "derived": DERIVED}`: CANONICAL
//!   is the configuration with every default filled in, without `seed`, each
//!   trace inline as `opportunities_ms`; DERIVED is `{"base_rtt_ms", "forward",
//!   "return"}`, each direction `{"mean_bps" (null: unlimited),
//!   "min_delay_ms", "max_delay_ms", "packet_loss_1500", "queue_limit_bytes",
//!   "queue_limit_packets", "trace_opportunity_bytes"}`
//!   ([`satlink::config::DerivedDirection`]);
//! - 2 with `{"ok": false, "field": "forward.rate.bps", "message": "..."}`;
//!   the field is `config` for unreadable files, JSON syntax and unknown
//!   fields.
//!
//! Command-line errors exit 2 with one line `satbench-link: MESSAGE` on stderr.

mod args;
mod sys;

use satlink::config::{ConfigError, LinkConfig};
use satlink::pacing::{Pacer, WakeMargin};
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
        let _ = complete_checksum(&mut copy);
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

    fn report(self, pacer: &Pacer) -> DirectionReport {
        DirectionReport {
            counters: self.dir.report(),
            offload_chunks: self.chunks,
            malformed: self.malformed,
            write_errors: self.write_errors,
            wake_margin_us: pacer.margin_ns() as f64 / 1e3,
            spin_s: pacer.spin_ns() as f64 / 1e9,
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
        let margin = calibrate();
        let mut pacer = Pacer::new(self.now(), margin);
        loop {
            let now = self.now();
            let mut delivered = false;
            for side in self.sides.iter_mut() {
                delivered |= side.deliver(now, self.real0);
            }
            let due = self.sides.iter().filter_map(|s| s.dir.poll_timeout()).min();
            let wait = pacer.plan(self.now(), due, delivered);
            let fds = [self.sides[0].input, self.sides[1].input, self.stop];
            let ready = sys::poll_readable(&fds, wait.timeout().map(|t| t.as_nanos() as u64));
            pacer.woke(self.now(), ready.iter().any(|r| *r));
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
        (f.report(&pacer), r.report(&pacer))
    }
}

/// This thread's timed wake-up lateness: 30 short timed sleeps, the start of
/// the pacer's margin.
fn calibrate() -> WakeMargin {
    let late: Vec<u64> = (0..30)
        .map(|_| {
            let t0 = sys::monotonic_ns();
            sys::sleep_ns(100_000);
            (sys::monotonic_ns() - t0).saturating_sub(100_000)
        })
        .collect();
    WakeMargin::from_calibration(&late)
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

/// The configuration's text: the file, or standard input for `-`.
fn read_config(path: &str) -> std::io::Result<String> {
    if path == "-" {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
        Ok(text)
    } else {
        std::fs::read_to_string(path)
    }
}

fn main() {
    let args =
        args::parse(std::env::args_os().skip(1)).unwrap_or_else(|e| usage_exit(&e.to_string()));
    let text = read_config(&args.config);
    if args.check {
        let checked = text
            .map_err(|e| ConfigError {
                field: "config".into(),
                message: format!("cannot read {}: {e}", args.config),
                range: None,
            })
            .and_then(|t| satlink::config::check(&t));
        match checked {
            Ok(c) => println!("{}", c.to_json_line()),
            Err(e) => {
                println!("{}", e.to_json_line());
                std::process::exit(2);
            }
        }
        return;
    }
    let text = text.unwrap_or_else(|e| usage_exit(&format!("cannot read {}: {e}", args.config)));
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
