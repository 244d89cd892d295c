//! satbench-link: the TUN front end of the link model.
//!
//! It attaches to TUN devices, one in each satellite terminal's network
//! namespace and one in the gateway's, and moves packets between them through
//! two [`satlink::Direction`]s, driven by one thread. All timing decisions
//! are the library's: when packets are due is the model's, how to wait for
//! that ([`satlink::pacing`]) is the pacer's; this file only reads, writes,
//! sleeps and counts.
//!
//! ```text
//! satbench-link --config FILE --terminal NETNS:DEV [--terminal NETNS:DEV ...]
//!               --gateway NETNS:DEV [--stats FILE] [--pcap-dir DIR] [--parent-pid PID]
//! satbench-link --check --config FILE
//! satbench-link --check --profile FILE [--profile-name NAME] [--base DIR] [--set KEY=VALUE ...]
//!               [--sets JSON] [--subnets JSON]
//! satbench-link --bench-model [--packets N]
//! satbench-link --bench-overhead [--packets N]
//! ```
//!
//! Several terminals: one `--terminal` per entry of the configuration's
//! `terminals`, in its order (their numbers must match). Packets from the
//! gateway go to the terminal whose `subnets` hold their destination (the
//! longest prefix; none: dropped and counted as `unroutable`); packets of a
//! terminal go to the gateway. With one terminal every packet goes to it, as
//! before. Captures: `terminal.pcap` for the first terminal,
//! `terminal1.pcap`, `terminal2.pcap`, ... for the others (0-based), and
//! `gateway.pcap`.
//!
//! `FILE` is the JSON of [`satlink::config::LinkConfig`]; `-` reads it from
//! standard input.
//!
//! A run prints one JSON line `{"ready": true, ...}` on stdout once
//! attached; on SIGTERM/SIGINT/SIGHUP it stops, writes the counters to
//! `--stats`, exits 0. A direction with an access adds `access` to its
//! counters ([`satlink::stats::AccessReport`]: frames, frames lost to fades,
//! encapsulation bytes, and per terminal its MODCOD and C/N or its requests
//! and grants, with their time series); with several terminals the forward
//! direction adds `unroutable`. Configuration errors exit 2 with one line on
//! stderr, `satbench-link: FILE: FIELD: MESSAGE`.
//!
//! Each direction's `overhead` splits the bytes offered (`offered.bytes`,
//! exactly) into `ip_header`, `transport_header`, `tcp_payload`,
//! `tcp_retransmitted`, `tls_handshake`, `tls_record_overhead`,
//! `tls_application`, `quic_handshake`, `quic_application`, `udp_payload`
//! and `other`, and counts TCP segments without payload as `pure_acks` and
//! `syn_fin_rst` (packets); the rules are [`satlink::overhead`]'s.
//!
//! `--check` is the one place where link parameters are checked (the ranges
//! are listed in [`satlink::config`]; a run enforces the same). It reads
//! trace files, prints one JSON line on stdout and exits:
//! - 0 with `{"ok": true, "config": CANONICAL, "derived": DERIVED}`: CANONICAL
//!   is the configuration with every default filled in, without `seed`, each
//!   trace inline as `opportunities_ms` (LEO traces as `ms` and `values_ms`,
//!   fades as `points`); DERIVED is `{"base_rtt_ms", "forward",
//!   "return"}`, each direction `{"mean_bps" (null: unlimited),
//!   "min_delay_ms", "max_delay_ms", "packet_loss_1500", "queue_limit_bytes",
//!   "queue_limit_packets", "trace_opportunity_bytes"}`
//!   ([`satlink::config::DerivedDirection`]);
//! - 2 with `{"ok": false, "field": "forward.rate.bps", "message": "..."}`;
//!   the field is `config` for unreadable files, JSON syntax and unknown
//!   fields. A direction with an access adds `access` to its numbers
//!   ([`satlink::config::DerivedAccess`]).
//!
//! `--bench-model` pushes packets through the model in simulated time, once
//! through a plain GEO link and once with bandwidth on demand and ACM, and
//! prints one JSON line of nanoseconds per packet (see `bench.rs`).
//! `--bench-overhead` does the same for the overhead classifier.
//!
//! Command-line errors exit 2 with one line `satbench-link: MESSAGE` on stderr.

mod args;
mod bench;
mod bench_overhead;
mod sys;

use satlink::config::{ConfigError, LinkConfig};
use satlink::overhead::{Classifier, Overhead};
use satlink::pacing::{Pacer, WakeMargin};
use satlink::pcap::PcapWriter;
use satlink::route::Router;
use satlink::stats::CountersReport;
use satlink::wire::{self, complete_checksum, GsoChunk, VnetHeader, VNET_HDR_LEN};
use satlink::{Direction, Instant};
use serde::Serialize;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::thread;

/// A packet in the model: the frame and its terminal (for the forward
/// direction, the terminal to deliver it to).
struct Packet {
    terminal: usize,
    frame: Vec<u8>,
}
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
    /// The bytes offered, by part ([`satlink::overhead`]).
    overhead: Overhead,
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
    /// Forward packets no terminal's subnets hold (dropped; with several
    /// terminals only).
    #[serde(skip_serializing_if = "Option::is_none")]
    unroutable: Option<u64>,
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

/// One side of the emulator: a direction's model and the devices it joins
/// (forward: the gateway's in, the terminals' out; return: the other way).
struct Side {
    dir: Direction<Packet>,
    inputs: Vec<RawFd>,
    outputs: Vec<RawFd>,
    cap_in: Vec<Capture>,
    cap_out: Vec<Capture>,
    /// Forward with several terminals: which terminal a packet goes to.
    router: Option<Router>,
    /// Splits each packet offered into its parts, added to `overhead`.
    classifier: Classifier,
    overhead: Overhead,
    chunks: u64,
    malformed: u64,
    write_errors: u64,
    unroutable: u64,
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

/// The output (device, capture) of a packet: its terminal's, or the one.
fn pick<T>(v: &[T], terminal: usize) -> &T {
    if v.len() == 1 {
        &v[0]
    } else {
        &v[terminal.min(v.len() - 1)]
    }
}

impl Side {
    /// Read what is waiting on input `k` (at most a batch) into the model.
    fn ingest(&mut self, k: usize, buf: &mut [u8], mono0: u64, real0: u64) {
        let input = self.inputs[k];
        for _ in 0..64 {
            let n = match sys::read_frame(input, buf) {
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
            // The terminal: the input's on return, the destination's forward.
            let terminal = match &self.router {
                None => k,
                Some(r) => match r.route(&frame[VNET_HDR_LEN..]) {
                    Some(t) => t,
                    None => {
                        self.unroutable += 1;
                        continue;
                    }
                },
            };
            let cap_in = &self.cap_in[k];
            if !h.is_gso() {
                capture(cap_in, unix, frame);
                self.classifier
                    .classify_into(&frame[VNET_HDR_LEN..], &mut self.overhead);
                let meta = wire::flow_meta(&frame[VNET_HDR_LEN..]);
                let p = Packet {
                    terminal,
                    frame: frame.to_vec(),
                };
                self.dir
                    .on_packet_meta(now, terminal, p, (n - VNET_HDR_LEN) as u32, 1, meta);
                continue;
            }
            self.chunks += 1;
            match GsoChunk::new_checked(frame) {
                Ok(c) if self.dir.needs_segments() => {
                    let (dir, classifier, overhead) =
                        (&mut self.dir, &mut self.classifier, &mut self.overhead);
                    c.segment(|seg| {
                        capture(cap_in, unix, &seg);
                        classifier.classify_into(&seg[VNET_HDR_LEN..], overhead);
                        let b = (seg.len() - VNET_HDR_LEN) as u32;
                        let meta = wire::flow_meta(&seg[VNET_HDR_LEN..]);
                        let p = Packet {
                            terminal,
                            frame: seg,
                        };
                        dir.on_packet_meta(now, terminal, p, b, 1, meta);
                    });
                }
                Ok(c) => {
                    let (p, b) = c.wire_size();
                    capture(cap_in, unix, frame);
                    self.classifier
                        .classify_offload_into(&c, &mut self.overhead);
                    let meta = wire::flow_meta(&frame[VNET_HDR_LEN..]);
                    let pk = Packet {
                        terminal,
                        frame: frame.to_vec(),
                    };
                    self.dir.on_packet_meta(now, terminal, pk, b, p, meta);
                }
                Err(_) => self.malformed += 1,
            }
        }
    }

    /// Write every packet due at `now`; true if any was.
    fn deliver(&mut self, now: Instant, real0: u64) -> bool {
        let mut any = false;
        while let Some((mut p, ce)) = self.dir.poll_transmit_marked(now) {
            if ce {
                // The queue marked it Congestion Experienced (an AQM with ECN).
                wire::set_ce(&mut p.frame[VNET_HDR_LEN..]);
            }
            capture(
                pick(&self.cap_out, p.terminal),
                real0 + now.as_nanos(),
                &p.frame,
            );
            if !sys::write_frame(*pick(&self.outputs, p.terminal), &p.frame) {
                self.write_errors += 1;
            }
            any = true;
        }
        any
    }

    fn report(mut self, pacer: &Pacer, now: Instant) -> DirectionReport {
        DirectionReport {
            counters: self.dir.report_at(now),
            overhead: self.overhead,
            offload_chunks: self.chunks,
            malformed: self.malformed,
            write_errors: self.write_errors,
            wake_margin_us: pacer.margin_ns() as f64 / 1e3,
            spin_s: pacer.spin_ns() as f64 / 1e9,
            unroutable: self.router.as_ref().map(|_| self.unroutable),
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
        // Every input of both sides, then the stop signal.
        let inputs: Vec<(usize, usize)> = (0..2)
            .flat_map(|s| (0..self.sides[s].inputs.len()).map(move |k| (s, k)))
            .collect();
        let mut fds: Vec<RawFd> = inputs
            .iter()
            .map(|&(s, k)| self.sides[s].inputs[k])
            .collect();
        fds.push(self.stop);
        let mut ready = vec![false; fds.len()];
        let mut pfds = Vec::with_capacity(fds.len());
        loop {
            let now = self.now();
            let mut delivered = false;
            for side in self.sides.iter_mut() {
                delivered |= side.deliver(now, self.real0);
            }
            let due = self.sides.iter().filter_map(|s| s.dir.poll_timeout()).min();
            let wait = pacer.plan(self.now(), due, delivered);
            sys::poll_readable(
                &fds,
                wait.timeout().map(|t| t.as_nanos() as u64),
                &mut pfds,
                &mut ready,
            );
            pacer.woke(self.now(), ready.iter().any(|r| *r));
            if ready[fds.len() - 1] {
                break;
            }
            for (i, &(s, k)) in inputs.iter().enumerate() {
                if ready[i] {
                    self.sides[s].ingest(k, &mut buf, self.mono0, self.real0);
                }
            }
        }
        let now = self.now();
        let [f, r] = self.sides;
        (f.report(&pacer, now), r.report(&pacer, now))
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

/// `--check --profile FILE`: read, check and resolve a link profile; one
/// JSON line on stdout ([`satlink::profile::answer`]), exit 0, or 2 if
/// refused.
fn check_profile(args: &args::Args, profile: &str) {
    use satlink::profile::ProfileError;
    let name = args
        .profile_name
        .clone()
        .unwrap_or_else(|| profile.to_string());
    let refuse = |e: ProfileError| -> ! {
        println!("{}", e.to_json_line());
        std::process::exit(2)
    };
    let text = read_config(profile).unwrap_or_else(|e| {
        refuse(ProfileError {
            message: format!("cannot read profile: {e}"),
            file: Some(name.clone()),
            line: None,
            field: None,
        })
    });
    let base = match (&args.base, profile) {
        (Some(b), _) => Some(std::path::PathBuf::from(b)),
        (None, "-") => None,
        (None, f) => std::path::Path::new(f)
            .parent()
            .map(std::path::Path::to_path_buf),
    };
    let subnets: Option<Vec<Vec<String>>> = args.subnets.as_ref().map(|s| {
        serde_json::from_str(s).unwrap_or_else(|e| {
            refuse(ProfileError {
                message: format!("not a JSON list of lists of prefixes: {e}"),
                file: None,
                line: None,
                field: Some("--subnets".into()),
            })
        })
    });
    let answer = satlink::profile::answer(
        &text,
        &name,
        &args.sets,
        base.as_deref(),
        subnets.as_deref(),
    );
    println!("{answer}");
    if answer["ok"] != true {
        std::process::exit(2);
    }
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
    if args.bench_model {
        println!(
            "{}",
            bench::run(args.packets.unwrap_or(bench::PACKETS)).to_json_line()
        );
        return;
    }
    if args.bench_overhead {
        let n = args.packets.unwrap_or(bench_overhead::PACKETS);
        println!("{}", bench_overhead::run(n).to_json_line());
        return;
    }
    if let Some(profile) = &args.profile {
        check_profile(&args, profile);
        return;
    }
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
    let (fwd, ret): (Direction<Packet>, Direction<Packet>) = config
        .build_directions(phase)
        .unwrap_or_else(|e| usage_exit(&format!("{}: {e}", args.config)));
    let terminals = config.terminal_count();
    if args.terminals.len() != terminals {
        usage_exit(&format!(
            "{}: terminals: the configuration has {terminals} terminal(s) but {} --terminal given",
            args.config,
            args.terminals.len()
        ));
    }
    let router = config
        .router()
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
    let terms: Vec<OwnedFd> = args.terminals.iter().map(open_side).collect();
    let gw = open_side(args.gateway.as_ref().expect("checked"));
    sys::enter_netns_fd(&home_fd).unwrap_or_else(|e| fail(e.to_string()));
    let mut offloads = sys::set_offload(gw.as_raw_fd(), &args.gateway.as_ref().unwrap().1)
        .unwrap_or_else(|e| fail(e.to_string()));
    for (fd, (_, dev)) in terms.iter().zip(&args.terminals) {
        offloads &= sys::set_offload(fd.as_raw_fd(), dev).unwrap_or_else(|e| fail(e.to_string()));
    }
    let cap_t: Vec<Capture> = (0..terms.len())
        .map(|i| match i {
            0 => open_capture(&args.pcap_dir, "terminal"),
            i => open_capture(&args.pcap_dir, &format!("terminal{i}")),
        })
        .collect();
    let cap_g = open_capture(&args.pcap_dir, "gateway");
    let stop = sys::eventfd().unwrap_or_else(|e| fail(e.to_string()));
    let raw = |v: &[OwnedFd]| v.iter().map(|f| f.as_raw_fd()).collect::<Vec<_>>();
    let side = |dir, inputs, outputs, cap_in, cap_out, router| Side {
        dir,
        inputs,
        outputs,
        cap_in,
        cap_out,
        router,
        classifier: Classifier::default(),
        overhead: Overhead::default(),
        chunks: 0,
        malformed: 0,
        write_errors: 0,
        unroutable: 0,
    };
    let pump = Pump {
        sides: [
            side(
                fwd,
                vec![gw.as_raw_fd()],
                raw(&terms),
                vec![cap_g.clone()],
                cap_t.clone(),
                (terminals > 1).then_some(router),
            ),
            side(
                ret,
                raw(&terms),
                vec![gw.as_raw_fd()],
                cap_t.clone(),
                vec![cap_g.clone()],
                None,
            ),
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
            "offloads": offloads})
    );
    let _ = std::io::stdout().flush();

    sys::wait_signal(&sigset);
    sys::eventfd_signal(stop.as_raw_fd());
    let (forward, ret) = worker.join().expect("link thread");
    for c in cap_t.into_iter().chain([cap_g]).flatten() {
        let _ = c.lock().expect("pcap lock").flush();
    }
    let report = Report {
        seed: config.seed,
        started_unix_ns: real0,
        duration_s: (sys::monotonic_ns() - mono0) as f64 / 1e9,
        offloads,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixDatagram;

    /// A frame as the TUN device gives it: a plain virtio-net header and an
    /// IPv4 header to `dst`.
    fn frame(dst: [u8; 4], id: u8) -> Vec<u8> {
        let mut f = vec![0u8; VNET_HDR_LEN + 28];
        let ip = &mut f[VNET_HDR_LEN..];
        ip[0] = 0x45;
        ip[3] = 28;
        ip[16..20].copy_from_slice(&dst);
        ip[27] = id;
        f
    }

    fn side(config: &str, inputs: Vec<RawFd>, outputs: Vec<RawFd>, forward: bool) -> Side {
        let c = LinkConfig::from_json(config).unwrap();
        let (f, r): (Direction<Packet>, Direction<Packet>) = c.build_directions(0).unwrap();
        let n_in = inputs.len();
        let n_out = outputs.len();
        Side {
            dir: if forward { f } else { r },
            inputs,
            outputs,
            cap_in: vec![None; n_in],
            cap_out: vec![None; n_out],
            router: (forward && c.terminal_count() > 1).then(|| c.router().unwrap()),
            classifier: Classifier::default(),
            overhead: Overhead::default(),
            chunks: 0,
            malformed: 0,
            write_errors: 0,
            unroutable: 0,
        }
    }

    const TWO: &str = r#"{"forward": {}, "return": {}, "terminals": [
        {"subnets": ["198.18.1.0/24"]}, {"subnets": ["198.18.5.0/24", "198.18.2.3/32"]}]}"#;

    fn received(s: &UnixDatagram) -> Vec<u8> {
        s.set_nonblocking(true).unwrap();
        let mut ids = Vec::new();
        let mut b = [0u8; 256];
        while let Ok(n) = s.recv(&mut b) {
            ids.push(b[n - 1]);
        }
        ids
    }

    #[test]
    fn forward_packets_go_to_the_terminal_of_their_destination() {
        let (gw_in, gw) = UnixDatagram::pair().unwrap();
        let (t0, t0_out) = UnixDatagram::pair().unwrap();
        let (t1, t1_out) = UnixDatagram::pair().unwrap();
        gw.set_nonblocking(true).unwrap();
        let mut s = side(
            TWO,
            vec![gw.as_raw_fd()],
            vec![t0.as_raw_fd(), t1.as_raw_fd()],
            true,
        );
        for (dst, id) in [
            ([198, 18, 1, 10], 1),
            ([198, 18, 5, 10], 2),
            ([198, 18, 2, 3], 3),
            ([10, 0, 0, 1], 4),
        ] {
            gw_in.send(&frame(dst, id)).unwrap();
        }
        let mut buf = vec![0u8; 4096];
        s.ingest(0, &mut buf, 0, 0);
        assert!(s.deliver(Instant::from_nanos(u64::MAX / 2), 0));
        assert_eq!(received(&t0_out), vec![1]);
        assert_eq!(received(&t1_out), vec![2, 3]);
        assert_eq!(s.unroutable, 1);
    }

    #[test]
    fn return_packets_of_every_terminal_go_to_the_gateway() {
        let (t0_in, t0) = UnixDatagram::pair().unwrap();
        let (t1_in, t1) = UnixDatagram::pair().unwrap();
        let (gw, gw_out) = UnixDatagram::pair().unwrap();
        t0.set_nonblocking(true).unwrap();
        t1.set_nonblocking(true).unwrap();
        let mut s = side(
            TWO,
            vec![t0.as_raw_fd(), t1.as_raw_fd()],
            vec![gw.as_raw_fd()],
            false,
        );
        t0_in.send(&frame([198, 18, 3, 10], 7)).unwrap();
        t1_in.send(&frame([198, 18, 3, 10], 8)).unwrap();
        let mut buf = vec![0u8; 4096];
        s.ingest(0, &mut buf, 0, 0);
        s.ingest(1, &mut buf, 0, 0);
        s.deliver(Instant::from_nanos(u64::MAX / 2), 0);
        assert_eq!(received(&gw_out), vec![7, 8]);
    }

    #[test]
    fn one_terminal_takes_every_forward_packet_unread() {
        let (gw_in, gw) = UnixDatagram::pair().unwrap();
        let (t0, t0_out) = UnixDatagram::pair().unwrap();
        gw.set_nonblocking(true).unwrap();
        let plain = r#"{"forward": {}, "return": {}}"#;
        let mut s = side(plain, vec![gw.as_raw_fd()], vec![t0.as_raw_fd()], true);
        assert!(s.router.is_none());
        gw_in.send(&frame([10, 0, 0, 1], 5)).unwrap();
        // Not even IP: still delivered, as before.
        let mut junk = vec![0u8; VNET_HDR_LEN + 3];
        junk[VNET_HDR_LEN + 2] = 6;
        gw_in.send(&junk).unwrap();
        let mut buf = vec![0u8; 4096];
        s.ingest(0, &mut buf, 0, 0);
        s.deliver(Instant::from_nanos(u64::MAX / 2), 0);
        assert_eq!(received(&t0_out), vec![5, 6]);
    }

    /// The emulator's two outputs Python reads, made from a fixed configuration: the report written
    /// with `--stats` (satbench.model.LinkCounters) and the `--check` answer
    /// (satbench.link.spec.LinkSpec). A change to either here without `SATBENCH_BLESS=1` fails;
    /// the blessed file then fails tests/unit/test_contracts.py until Python reads it.
    fn golden(name: &str, mut v: serde_json::Value) {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/golden")
            .join(name);
        v.sort_all_objects();
        let want = serde_json::to_string_pretty(&v).unwrap() + "\n";
        if std::env::var_os("SATBENCH_BLESS").is_some() {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            have,
            want,
            "{} is stale: SATBENCH_BLESS=1 cargo test -p satlink --bin satbench-link",
            path.display()
        );
    }

    /// GEO both ways (10 and 2 Mbit/s, 265 ms one way), a 30 KB forward queue: as satbench.link.profile
    /// writes `geo` with `--set forward.queue_bytes=30000 --set return.rate_mbps=2`.
    const GOLDEN_CONFIG: &str = r#"{"seed": 7, "align_minute": false,
        "forward": {"rate": {"kind": "constant", "bps": 10000000.0}, "delay": {"kind": "constant", "ms": 265.0},
                    "reorder": false, "queue": {"limit": {"kind": "bytes", "n": 30000}, "aqm": {"kind": "drop_tail"}},
                    "loss": []},
        "return": {"rate": {"kind": "constant", "bps": 2000000.0}, "delay": {"kind": "constant", "ms": 265.0},
                   "reorder": false, "queue": {"limit": {"kind": "ms", "ms": 530.0}, "aqm": {"kind": "drop_tail"}},
                   "loss": []}}"#;

    #[test]
    fn golden_stats_report_is_current() {
        let c = LinkConfig::from_json(GOLDEN_CONFIG).unwrap();
        let (mut f, mut r): (Direction<u32>, Direction<u32>) = c.build_directions(0).unwrap();
        // 40 packets of 1500 bytes at once each way: the forward queue (30 KB) drops some.
        let t0 = Instant::from_millis(1);
        for id in 0..40u32 {
            f.on_packet_for(t0, 0, id, 1500, 1);
            r.on_packet_for(t0, 0, id, 1500, 1);
        }
        let end = Instant::from_millis(2_000);
        for d in [&mut f, &mut r] {
            while let Some(t) = d.poll_timeout().filter(|t| *t <= end) {
                while d.poll_transmit(t).is_some() {}
            }
        }
        // What the classifier would have counted of 40 UDP datagrams of 1500 bytes: their parts add
        // up to the bytes offered, as Python checks.
        let parts = Overhead {
            ip_header: 40 * 20,
            transport_header: 40 * 8,
            udp_payload: 40 * (1500 - 28),
            ..Overhead::default()
        };
        let side = |d: &mut Direction<u32>| DirectionReport {
            counters: d.report_at(end),
            overhead: parts,
            offload_chunks: 0,
            malformed: 0,
            write_errors: 0,
            wake_margin_us: 0.0,
            spin_s: 0.0,
            unroutable: None,
        };
        let report = Report {
            seed: 7,
            started_unix_ns: 0,
            duration_s: 2.0,
            offloads: 0,
            forward: side(&mut f),
            ret: side(&mut r),
            config: &c,
        };
        golden("link-stats.json", serde_json::to_value(&report).unwrap());
    }

    #[test]
    fn golden_check_answer_is_current() {
        let answer = satlink::config::check(GOLDEN_CONFIG)
            .unwrap()
            .to_json_line();
        golden("link-check.json", serde_json::from_str(&answer).unwrap());
    }
}
