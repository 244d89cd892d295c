//! End to end over real network namespaces (needs root: `scripts/test` runs
//! as root, so they run there; without root each says so and does nothing):
//!
//! ```text
//! sbpeptest-c  10.231.1.2 --veth-- 10.231.1.1  sbpeptest-p  10.231.2.1 --veth-- 10.231.2.2  sbpeptest-s
//!  (clients)                        (PEP, placement terminal)                   (servers)
//! ```
//!
//! The PEP's rules come from `--print-rules` and are installed in
//! `sbpeptest-p` only; nothing outside the three namespaces is touched, and
//! they are removed at the end, also when a check fails (and at the start,
//! if a crashed run left them).
//!
//! Run: `cargo test --release -p satbench-pep --test netns -- --nocapture`.

use serde_json::Value;
use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

const PEP: &str = env!("CARGO_BIN_EXE_satbench-pep");
const CLIENT_NS: &str = "sbpeptest-c";
const PEP_NS: &str = "sbpeptest-p";
const TERMINAL_NS: &str = "sbpeptest-t";
const GATEWAY_NS: &str = "sbpeptest-g";
const SERVER_NS: &str = "sbpeptest-s";
const CLIENT_IP: &str = "10.231.1.2";
const SERVER_IP: &str = "10.231.2.2";
const PEP_PORT: u16 = 7000;
const TIMEOUT: Duration = Duration::from_secs(20);

/// The tests share namespace names: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

// ---------------------------------------------------------------- namespaces

fn netns_file(ns: &str) -> File {
    File::open(format!("/var/run/netns/{ns}")).unwrap_or_else(|e| panic!("netns {ns}: {e}"))
}

fn enter(ns: &File) {
    // SAFETY: plain syscall on an open fd.
    let r = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    assert_eq!(r, 0, "setns: {}", std::io::Error::last_os_error());
}

/// A command run in namespace `ns` (or the current one); panics on failure.
fn run(ns: Option<&str>, argv: &[String]) {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    if let Some(ns) = ns {
        let f = netns_file(ns);
        // SAFETY: setns is async-signal-safe; f outlives the spawn.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert!(
        out.status.success(),
        "{argv:?} in {ns:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn argv(s: &str) -> Vec<String> {
    s.split_whitespace().map(String::from).collect()
}

/// Run `f` on a thread inside namespace `ns` (sockets it makes stay there).
fn spawn_in<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> JoinHandle<T> {
    let file = netns_file(ns);
    thread::spawn(move || {
        enter(&file);
        f()
    })
}

fn in_ns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    spawn_in(ns, f).join().expect("thread in namespace")
}

fn sysctl(ns: &str, key: &'static str, value: &'static str) {
    in_ns(ns, move || {
        let path = format!("/proc/sys/{}", key.replace('.', "/"));
        std::fs::write(&path, value).unwrap_or_else(|e| panic!("{path}: {e}"));
    });
}

fn delete_namespaces() {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let name = l.split_whitespace().next().unwrap_or("");
        if name.starts_with("sbpeptest-") {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// Namespaces joined in a chain; all removed when dropped.
struct Topology;

impl Topology {
    /// Namespaces with loopback up, forwarding and Fast Open (client and server) on.
    fn new(names: &[&str]) -> Topology {
        delete_namespaces();
        let t = Topology;
        for &ns in names {
            run(None, &argv(&format!("ip netns add {ns}")));
            run(Some(ns), &argv("ip link set lo up"));
            sysctl(ns, "net.ipv4.ip_forward", "1");
            sysctl(ns, "net.ipv4.tcp_fastopen", "3");
        }
        t
    }

    /// A veth pair between `a` and `b` with a /24 address on each end.
    fn link(&self, a: &str, a_addr: &str, b: &str, b_addr: &str) {
        let (ia, ib) = (format!("to-{}", &b[10..]), format!("to-{}", &a[10..]));
        run(
            Some(a),
            &argv(&format!(
                "ip link add {ia} type veth peer name {ib} netns {b}"
            )),
        );
        for (ns, dev, addr) in [(a, &ia, a_addr), (b, &ib, b_addr)] {
            run(Some(ns), &argv(&format!("ip addr add {addr}/24 dev {dev}")));
            run(Some(ns), &argv(&format!("ip link set {dev} up")));
        }
    }

    fn route(&self, ns: &str, dst: &str, via: &str) {
        run(Some(ns), &argv(&format!("ip route add {dst} via {via}")));
    }

    /// client 10.231.1.2 -- 10.231.1.1 PEP 10.231.2.1 -- 10.231.2.2 server
    fn three() -> Topology {
        let t = Topology::new(&[CLIENT_NS, PEP_NS, SERVER_NS]);
        t.link(CLIENT_NS, CLIENT_IP, PEP_NS, "10.231.1.1");
        t.link(PEP_NS, "10.231.2.1", SERVER_NS, SERVER_IP);
        t.route(CLIENT_NS, "default", "10.231.1.1");
        t.route(SERVER_NS, "default", "10.231.2.1");
        t
    }

    /// client -- terminal 10.231.3.1 -- 10.231.3.2 gateway -- server
    fn four() -> Topology {
        let t = Topology::new(&[CLIENT_NS, TERMINAL_NS, GATEWAY_NS, SERVER_NS]);
        t.link(CLIENT_NS, CLIENT_IP, TERMINAL_NS, "10.231.1.1");
        t.link(TERMINAL_NS, "10.231.3.1", GATEWAY_NS, "10.231.3.2");
        t.link(GATEWAY_NS, "10.231.2.1", SERVER_NS, SERVER_IP);
        t.route(CLIENT_NS, "default", "10.231.1.1");
        t.route(TERMINAL_NS, "default", "10.231.3.2");
        t.route(GATEWAY_NS, "10.231.1.0/24", "10.231.3.1");
        t.route(SERVER_NS, "default", "10.231.2.1");
        t
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        delete_namespaces();
    }
}

// ----------------------------------------------------------------- the PEP

/// The rule set `--print-rules` prints for our port.
fn rules() -> Value {
    let out = Command::new(PEP)
        .args(["--print-rules", "--port", &PEP_PORT.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

fn commands(v: &Value) -> Vec<Vec<String>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|c| {
            c.as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect()
        })
        .collect()
}

/// Install the rules in namespace `ns`, in the `form` given (iptables or nft).
fn install(ns: &str, form: &str) {
    let r = rules();
    for c in commands(&r["routing"]).iter().chain(&commands(&r[form])) {
        run(Some(ns), c);
    }
}

fn uninstall(ns: &str, form: &str) {
    let r = rules();
    for c in commands(&r["teardown"][form])
        .iter()
        .chain(&commands(&r["teardown"]["routing"]))
    {
        run(Some(ns), c);
    }
}

struct Pep {
    child: Child,
    stdout: BufReader<ChildStdout>,
    ready: Value,
    log: PathBuf,
}

impl Pep {
    /// The PEP at the terminal in the three-namespace chain.
    fn start(extra: &[&str]) -> Pep {
        Pep::start_in(PEP_NS, "terminal", extra)
    }

    fn start_in(ns: &str, placement: &str, extra: &[&str]) -> Pep {
        let log = std::env::temp_dir().join(format!("{ns}-{}.jsonl", std::process::id()));
        let f = netns_file(ns);
        let mut cmd = Command::new(PEP);
        cmd.args([
            "--port",
            &PEP_PORT.to_string(),
            "--placement",
            placement,
            "--log",
        ])
        .arg(&log)
        .args(extra)
        .stdout(Stdio::piped());
        // SAFETY: setns is async-signal-safe; f outlives the spawn.
        unsafe {
            cmd.pre_exec(move || {
                if libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut l = String::new();
        stdout.read_line(&mut l).unwrap();
        let ready: Value =
            serde_json::from_str(&l).unwrap_or_else(|e| panic!("ready line {l:?}: {e}"));
        assert_eq!(ready["ready"], true);
        Pep {
            child,
            stdout,
            ready,
            log,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The log's complete lines so far (the PEP may be writing the last one as it is read).
    fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let done = text.rfind('\n').map_or("", |end| &text[..end]);
        done.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn conns(&self) -> Vec<Value> {
        self.lines()
            .into_iter()
            .filter(|l| l["event"] == "conn")
            .collect()
    }

    /// Wait until `n` connections are logged; return them.
    fn wait_conns(&self, n: usize) -> Vec<Value> {
        let t0 = Instant::now();
        loop {
            let c = self.conns();
            if c.len() >= n {
                return c;
            }
            assert!(
                t0.elapsed() < TIMEOUT,
                "{} of {n} connections logged",
                c.len()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM; the summary line, the exit code and the log.
    fn stop(mut self) -> (Value, i32, Vec<Value>) {
        // SAFETY: plain kill on our child.
        unsafe { libc::kill(self.pid() as i32, libc::SIGTERM) };
        let mut l = String::new();
        self.stdout.read_line(&mut l).unwrap();
        let status = self.child.wait().unwrap();
        let lines = self.lines();
        let _ = std::fs::remove_file(&self.log);
        let summary = serde_json::from_str(&l).unwrap_or_else(|e| panic!("summary {l:?}: {e}"));
        (summary, status.code().unwrap_or(-1), lines)
    }
}

impl Drop for Pep {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU time the process used so far (`/proc/PID/schedstat`, ns; with
/// softirq work done on its time, as this kernel accounts it).
fn cpu_ns(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap();
    s.split_whitespace().next().unwrap().parse().unwrap()
}

/// Busy CPU time of the whole machine so far, in seconds (`/proc/stat`:
/// user, nice, system, irq, softirq, steal).
fn machine_busy_s() -> f64 {
    let s = std::fs::read_to_string("/proc/stat").unwrap();
    let f: Vec<u64> = s
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    // SAFETY: plain sysconf.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) as f64 / hz
}

// ------------------------------------------------------------- the traffic

/// A seeded byte stream (xorshift64*).
struct Stream(u64);

impl Stream {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// FNV-1a over everything read, and the count.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
struct Digest {
    hash: u64,
    len: u64,
}

impl Digest {
    fn new() -> Digest {
        Digest {
            hash: 0xcbf2_9ce4_8422_2325,
            len: 0,
        }
    }
    fn update(&mut self, b: &[u8]) {
        for &x in b {
            self.hash = (self.hash ^ x as u64).wrapping_mul(0x100_0000_01b3);
        }
        self.len += b.len() as u64;
    }
}

/// Send `n` bytes of the stream seeded `seed`; their digest.
fn send(s: &mut TcpStream, seed: u64, n: u64) -> Digest {
    let mut g = Stream(seed);
    let mut d = Digest::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut left = n;
    while left > 0 {
        let k = left.min(buf.len() as u64) as usize;
        g.fill(&mut buf[..k]);
        s.write_all(&buf[..k]).unwrap();
        d.update(&buf[..k]);
        left -= k as u64;
    }
    d
}

/// Read to the end; the digest.
fn recv(s: &mut TcpStream) -> Digest {
    let mut d = Digest::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return d,
            Ok(k) => d.update(&buf[..k]),
            Err(e) => panic!("read after {} bytes: {e}", d.len),
        }
    }
}

fn server_addr(port: u16) -> SocketAddr {
    format!("{SERVER_IP}:{port}").parse().unwrap()
}

fn listen(port: u16) -> TcpListener {
    in_ns(SERVER_NS, move || {
        let l = TcpListener::bind(format!("{SERVER_IP}:{port}")).unwrap();
        // Fast Open on the server (the PEP's outgoing leg may use it).
        let q: libc::c_int = 16;
        // SAFETY: q is a valid int.
        unsafe {
            libc::setsockopt(
                l.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_FASTOPEN,
                &q as *const libc::c_int as *const libc::c_void,
                4,
            )
        };
        l
    })
}

fn connect(port: u16) -> TcpStream {
    in_ns(CLIENT_NS, move || {
        let s = TcpStream::connect_timeout(&server_addr(port), TIMEOUT).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.set_write_timeout(Some(TIMEOUT)).unwrap();
        s
    })
}

fn accept(l: &TcpListener) -> (TcpStream, SocketAddr) {
    let (s, a) = l.accept().unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.set_write_timeout(Some(TIMEOUT)).unwrap();
    (s, a)
}

fn reset(s: TcpStream) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: l is a valid linger struct.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    drop(s);
}

/// The logged connection whose client-side leg has this client address.
/// The log line of the connection from `client` to the server's `port`: both, since a client's
/// ephemeral port may come again for another server port once its earlier connection is gone
/// (a reset leaves no TIME_WAIT).
fn by_client(conns: &[Value], client: SocketAddr, port: u16) -> &Value {
    let c = client.to_string();
    let to = format!(":{port}");
    conns
        .iter()
        .find(|l| {
            l["in"]["peer"] == c.as_str()
                && l["in"]["local"].as_str().is_some_and(|a| a.ends_with(&to))
        })
        .unwrap_or_else(|| panic!("no log line for {c} to port {port}"))
}

// ----------------------------------------------------------------- scenarios

const MB: u64 = 1 << 20;

/// Bytes both ways at once, exact; the server sees the client's address.
fn exact_both_ways(port: u16, up: u64, down: u64) -> (SocketAddr, SocketAddr) {
    let l = listen(port);
    let server = thread::spawn(move || {
        let (s, peer) = accept(&l);
        let mut w = s.try_clone().unwrap();
        let sender = thread::spawn(move || {
            let d = send(&mut w, 2, down);
            w.shutdown(Shutdown::Write).unwrap();
            d
        });
        let mut r = s;
        let got = recv(&mut r);
        (peer, got, sender.join().unwrap())
    });
    let c = connect(port);
    let local = c.local_addr().unwrap();
    let mut w = c.try_clone().unwrap();
    let sender = thread::spawn(move || {
        let d = send(&mut w, 1, up);
        w.shutdown(Shutdown::Write).unwrap();
        d
    });
    let mut r = c;
    let got_down = recv(&mut r);
    let sent_up = sender.join().unwrap();
    let (peer, got_up, sent_down) = server.join().unwrap();
    assert_eq!(got_up, sent_up, "client to server");
    assert_eq!(got_down, sent_down, "server to client");
    assert_eq!((got_up.len, got_down.len), (up, down));
    assert_eq!(peer, local, "the server sees the client's address and port");
    assert_eq!(peer.ip().to_string(), CLIENT_IP);
    println!("exact: {up} bytes up, {down} down, digests match; server saw {peer}");
    (local, peer)
}

/// The client shuts down its writing side and still receives the rest.
fn half_close(port: u16) -> SocketAddr {
    let l = listen(port);
    let server = thread::spawn(move || {
        let (mut s, _) = accept(&l);
        let got = recv(&mut s);
        // Only after the client's FIN: the remainder.
        let sent = send(&mut s, 4, 3 * MB);
        drop(s);
        (got, sent)
    });
    let mut c = connect(port);
    let local = c.local_addr().unwrap();
    let sent = send(&mut c, 3, 100_000);
    c.shutdown(Shutdown::Write).unwrap();
    let got = recv(&mut c);
    let (server_got, server_sent) = server.join().unwrap();
    assert_eq!(server_got, sent);
    assert_eq!(got, server_sent);
    println!(
        "half-close: client FIN after {} bytes, then {} bytes received",
        sent.len, got.len
    );
    local
}

/// The server resets: the client gets a reset.
fn server_reset(port: u16) -> SocketAddr {
    let l = listen(port);
    let server = thread::spawn(move || {
        let (mut s, _) = accept(&l);
        let mut b = [0u8; 5];
        s.read_exact(&mut b).unwrap();
        reset(s);
    });
    let mut c = connect(port);
    let local = c.local_addr().unwrap();
    c.write_all(b"hello").unwrap();
    server.join().unwrap();
    let mut b = [0u8; 16];
    let e = c.read(&mut b).expect_err("the client must see the reset");
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    println!("server reset: the client read {e}");
    local
}

/// The client resets: the server gets a reset.
fn client_reset(port: u16) -> SocketAddr {
    let l = listen(port);
    let server = thread::spawn(move || {
        let (mut s, _) = accept(&l);
        s.write_all(b"ready").unwrap();
        let mut b = [0u8; 16];
        s.read(&mut b)
    });
    let mut c = connect(port);
    let local = c.local_addr().unwrap();
    let mut b = [0u8; 5];
    c.read_exact(&mut b).unwrap();
    reset(c);
    let e = server
        .join()
        .unwrap()
        .expect_err("the server must see the reset");
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    println!("client reset: the server read {e}");
    local
}

/// Connect, one byte each way, close; per connection round trips, in µs.
fn setup_times(port: u16, n: usize) -> Vec<f64> {
    let l = listen(port);
    let server = thread::spawn(move || {
        for _ in 0..n {
            let (mut s, _) = accept(&l);
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            s.write_all(&b).unwrap();
            let _ = s.read(&mut b);
        }
    });
    let times = in_ns(CLIENT_NS, move || {
        let mut t = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            let mut s = TcpStream::connect_timeout(&server_addr(port), TIMEOUT).unwrap();
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
            s.write_all(b"x").unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            t.push(t0.elapsed().as_secs_f64() * 1e6);
        }
        t
    });
    server.join().unwrap();
    times
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// A bulk transfer's rate and what it cost.
struct Rate {
    gbit_s: f64,
    /// The PEP's CPU, cores.
    pep_cores: Option<f64>,
    /// The whole machine's busy CPU, cores (client, server, PEP, softirqs).
    machine_cores: f64,
}

/// Bulk transfer for `secs` one way (`down`: server to client), measured at
/// the receiver.
fn throughput(port: u16, secs: f64, down: bool, pep: Option<u32>) -> Rate {
    let l = listen(port);
    let bulk = move |s: &mut TcpStream| {
        let buf = vec![7u8; 1 << 20];
        let t0 = Instant::now();
        while t0.elapsed().as_secs_f64() < secs {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
        s.shutdown(Shutdown::Write).unwrap();
    };
    let sink = |s: &mut TcpStream| {
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0u64;
        let t0 = Instant::now();
        loop {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => n += k as u64,
                Err(e) => panic!("{e}"),
            }
        }
        n as f64 * 8.0 / t0.elapsed().as_secs_f64() / 1e9
    };
    let server = thread::spawn(move || {
        let (mut s, _) = accept(&l);
        if down {
            bulk(&mut s);
            let _ = s.read(&mut [0u8; 1]);
            None
        } else {
            Some(sink(&mut s))
        }
    });
    let mut c = connect(port);
    let cpu0 = pep.map(cpu_ns);
    let busy0 = machine_busy_s();
    let t0 = Instant::now();
    let client_rate = if down {
        Some(sink(&mut c))
    } else {
        bulk(&mut c);
        let _ = c.read(&mut [0u8; 1]);
        None
    };
    let elapsed = t0.elapsed().as_secs_f64();
    let pep_cores = pep.map(|p| (cpu_ns(p) - cpu0.unwrap()) as f64 / 1e9 / elapsed);
    let machine_cores = (machine_busy_s() - busy0) / elapsed;
    drop(c);
    let server_rate = server.join().unwrap();
    Rate {
        gbit_s: client_rate.or(server_rate).unwrap(),
        pep_cores,
        machine_cores,
    }
}

/// One line of the throughput table.
fn rate_line(what: &str, r: &Rate) {
    let pep = match r.pep_cores {
        Some(c) => format!("PEP {c:.2} core ({:.3} core per Gbit/s)", c / r.gbit_s),
        None => "no PEP".to_string(),
    };
    println!(
        "  {what:<34} {:>6.2} Gbit/s  {pep}; machine {:.2} cores ({:.3} per Gbit/s)",
        r.gbit_s,
        r.machine_cores,
        r.machine_cores / r.gbit_s
    );
}

/// An idle connection is reset on both legs after the timeout.
fn idle(port: u16) {
    let l = listen(port);
    let server = thread::spawn(move || {
        let (mut s, _) = accept(&l);
        s.write_all(b"x").unwrap();
        let t0 = Instant::now();
        let r = s.read(&mut [0u8; 1]).map_err(|e| e.kind());
        (r, t0.elapsed())
    });
    let mut c = connect(port);
    let mut b = [0u8; 1];
    c.read_exact(&mut b).unwrap();
    let t0 = Instant::now();
    let r = c.read(&mut b).map_err(|e| e.kind());
    let waited = t0.elapsed();
    assert_eq!(r, Err(ErrorKind::ConnectionReset), "client after idling");
    let (sr, _) = server.join().unwrap();
    assert_eq!(sr, Err(ErrorKind::ConnectionReset), "server after idling");
    assert!(waited >= Duration::from_millis(250), "{waited:?}");
    println!("idle: both ends reset after {waited:?} without a byte");
}

/// No server at the destination: the client is reset.
fn refused_connect(port: u16) {
    let e = connect_reset(server_addr(port));
    println!("refused by the server: the client got {e}");
}

/// A connection the PEP accepts and resets at once: the reset reaches the
/// client during `connect` or at its first read.
fn connect_reset(to: SocketAddr) -> std::io::Error {
    let e = in_ns(CLIENT_NS, move || {
        match TcpStream::connect_timeout(&to, TIMEOUT) {
            Ok(mut s) => {
                s.set_read_timeout(Some(TIMEOUT)).unwrap();
                s.read(&mut [0u8; 1]).expect_err("a reset")
            }
            Err(e) => e,
        }
    });
    assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}");
    e
}

/// `--max-conns 2`: a third connection is reset at once; once a slot is
/// free (the PEP has logged `logged` connections), a new one is relayed.
fn cap(pep: &Pep, port: u16, logged: usize) {
    let l = listen(port);
    let server = thread::spawn(move || {
        (0..3)
            .map(|_| {
                let (mut s, _) = accept(&l);
                s.write_all(b"hi").unwrap();
                s
            })
            .collect::<Vec<_>>()
    });
    let mut buf = [0u8; 2];
    let mut a = connect(port);
    a.read_exact(&mut buf).unwrap();
    let mut b = connect(port);
    b.read_exact(&mut buf).unwrap();
    // Over the cap: the handshake is the kernel's, then the PEP resets it.
    connect_reset(server_addr(port));
    reset(a);
    pep.wait_conns(logged);
    let mut d = connect(port);
    d.read_exact(&mut buf).unwrap();
    let held = server.join().unwrap();
    drop((b, d, held));
    println!("cap: the third connection was reset; after one closed, a new one was relayed");
}

// ------------------------------------------------------------------- the test

/// Whether the tests may build namespaces (root); says so when not.
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: building network namespaces needs root (scripts/test runs as root)");
    }
    root
}

#[test]
fn pep_over_namespaces() {
    if !root() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _topology = Topology::three();

    // Run A: nft rules, splice, terminal: the satellite (outgoing) leg on
    // reno, the terrestrial one on cubic.
    install(PEP_NS, "nft");
    let pep = Pep::start(&[
        "--satellite-leg",
        "cc=reno,sndbuf=4M",
        "--terrestrial-leg",
        "cc=cubic,nodelay",
    ]);
    let r = &pep.ready;
    assert_eq!(r["placement"], "terminal");
    assert_eq!(r["splice"], true);
    assert_eq!(r["legs"]["out"]["faces"], "satellite");
    assert_eq!(r["legs"]["out"]["effective"]["cc"], "reno");
    assert_eq!(r["legs"]["out"]["effective"]["sndbuf"], 8 << 20);
    assert_eq!(r["legs"]["in"]["effective"]["cc"], "cubic");
    assert_eq!(r["legs"]["in"]["effective"]["nodelay"], true);
    assert_eq!(r["legs"]["in"]["effective"]["transparent"], true);
    assert_eq!(r["sysctl"]["ip_forward"], 1);
    println!("ready: {}", serde_json::to_string(r).unwrap());

    let (client, _) = exact_both_ways(8001, 8 * MB, 8 * MB);
    let hc = half_close(8002);
    let sr = server_reset(8003);
    let cr = client_reset(8004);
    let conns = pep.wait_conns(4);

    let l = by_client(&conns, client, 8001);
    let server = format!("{SERVER_IP}:8001");
    assert_eq!(l["in"]["local"], server.as_str());
    assert_eq!(l["out"]["local"], client.to_string().as_str());
    assert_eq!(l["out"]["peer"], server.as_str());
    assert_eq!(
        (l["bytes_up"].as_u64(), l["bytes_down"].as_u64()),
        (Some(8 * MB), Some(8 * MB))
    );
    assert_eq!(
        (l["dropped_up"].as_u64(), l["dropped_down"].as_u64()),
        (Some(0), Some(0))
    );
    assert_eq!(l["outcome"], "fin");
    assert_eq!(l["splice"], true);
    let (acc, con, clo) = (
        l["accept_unix_ns"].as_u64().unwrap(),
        l["connect_unix_ns"].as_u64().unwrap(),
        l["close_unix_ns"].as_u64().unwrap(),
    );
    assert!(acc <= con && con <= clo, "{acc} {con} {clo}");
    assert_eq!(l["in"]["faces"], "terrestrial");
    assert_eq!(l["out"]["faces"], "satellite");
    assert_eq!(l["in"]["tcp_info"]["cc"], "cubic");
    assert_eq!(l["out"]["tcp_info"]["cc"], "reno");
    // TCP_INFO is taken at the close: what is still in flight then is the
    // kernel's to finish (SYN and FIN count one byte each).
    let acked = l["out"]["tcp_info"]["bytes_acked"].as_u64().unwrap();
    assert!(acked > 0 && acked <= 8 * MB + 2, "{acked}");
    assert!(l["out"]["init_cwnd"].as_u64().unwrap() >= 1);
    assert!(l["in"]["tcp_info"]["srtt_us"].as_u64().unwrap() > 0);

    let l = by_client(&conns, hc, 8002);
    assert_eq!(
        (l["first"]["by"].as_str(), l["first"]["how"].as_str()),
        (Some("client"), Some("fin"))
    );
    assert_eq!(l["outcome"], "fin");
    assert_eq!(
        (l["in"]["end"].as_str(), l["out"]["end"].as_str()),
        (Some("fin"), Some("fin"))
    );
    assert_eq!(
        (l["bytes_up"].as_u64(), l["bytes_down"].as_u64()),
        (Some(100_000), Some(3 * MB))
    );

    let l = by_client(&conns, sr, 8003);
    assert_eq!(
        (l["first"]["by"].as_str(), l["first"]["how"].as_str()),
        (Some("server"), Some("rst"))
    );
    assert_eq!(
        (l["in"]["end"].as_str(), l["out"]["end"].as_str()),
        (Some("aborted"), Some("rst"))
    );
    assert_eq!(l["outcome"], "rst");

    let l = by_client(&conns, cr, 8004);
    assert_eq!(
        (l["first"]["by"].as_str(), l["first"]["how"].as_str()),
        (Some("client"), Some("rst"))
    );
    assert_eq!(
        (l["in"]["end"].as_str(), l["out"]["end"].as_str()),
        (Some("rst"), Some("aborted"))
    );
    println!("log lines: tuples, bytes, times, ends, TCP_INFO and congestion control per leg as expected");
    println!(
        "log line: {}",
        serde_json::to_string(by_client(&conns, client, 8001)).unwrap()
    );

    // Setup latency and throughput through the PEP.
    let n = 200;
    let pep_rtt = setup_times(8005, n);
    let conns = pep.wait_conns(4 + n);
    let mut connect_us: Vec<f64> = conns[4..]
        .iter()
        .map(|l| {
            (l["connect_unix_ns"].as_u64().unwrap() - l["accept_unix_ns"].as_u64().unwrap()) as f64
                / 1e3
        })
        .collect();
    connect_us.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let down = throughput(8006, 4.0, true, Some(pep.pid()));
    let up = throughput(8007, 4.0, false, Some(pep.pid()));

    // Exit with a connection open: it is reset and logged.
    let l = listen(8008);
    let held = thread::spawn(move || accept(&l).0);
    let mut open = connect(8008);
    open.write_all(b"x").unwrap();
    let _server_side = held.join().unwrap();
    let before = pep.conns().len();
    let (summary, code, lines) = pep.stop();
    assert_eq!(code, 0);
    let e = open.read(&mut [0u8; 4]).expect_err("reset at exit");
    assert_eq!(e.kind(), ErrorKind::ConnectionReset);
    assert_eq!(summary["open_at_exit"], 1);
    assert_eq!(summary["refused_cap"], 0);
    assert_eq!(summary["accepted"].as_u64(), Some(before as u64 + 1));
    assert_eq!(lines.first().unwrap()["event"], "start");
    assert_eq!(lines.last().unwrap()["event"], "summary");
    let last = &lines[lines.len() - 2];
    assert_eq!(
        (last["outcome"].as_str(), last["first"]["by"].as_str()),
        (Some("exit"), Some("pep"))
    );
    println!("summary: {}", serde_json::to_string(&summary).unwrap());

    // Without the PEP: the same path, forwarded.
    uninstall(PEP_NS, "nft");
    let direct_rtt = setup_times(8009, n);
    let direct_down = throughput(8010, 4.0, true, None);

    // Run B: iptables rules, read/write, Fast Open on the outgoing leg,
    // --max-conns 2.
    install(PEP_NS, "iptables");
    let pep = Pep::start(&[
        "--no-splice",
        "--satellite-leg",
        "fastopen",
        "--max-conns",
        "2",
    ]);
    assert_eq!(pep.ready["splice"], false);
    assert_eq!(pep.ready["legs"]["out"]["effective"]["fastopen"], 1);
    exact_both_ways(8011, 4 * MB, 4 * MB);
    exact_both_ways(8011, MB, 3 * MB);
    half_close(8012);
    let conns = pep.wait_conns(3);
    assert!(conns
        .iter()
        .all(|l| l["splice"] == false && l["outcome"] == "fin"));
    assert!(
        conns
            .iter()
            .any(|l| l["out"]["tcp_info"]["syn_data"] == true),
        "a Fast Open cookie was used on the outgoing leg: {conns:?}"
    );
    let copy_down = throughput(8013, 4.0, true, Some(pep.pid()));
    pep.wait_conns(4);
    cap(&pep, 8014, 5);
    let (summary, code, _) = pep.stop();
    assert_eq!(code, 0);
    assert_eq!(summary["refused_cap"], 1);
    println!(
        "summary (run B): {}",
        serde_json::to_string(&summary).unwrap()
    );
    uninstall(PEP_NS, "iptables");

    // Run C: nft rules, a short idle timeout; a refused connect; a
    // connection to the PEP's own port.
    install(PEP_NS, "nft");
    let pep = Pep::start(&["--idle-timeout-s", "0.3"]);
    idle(8015);
    refused_connect(8016);
    connect_reset(format!("10.231.1.1:{PEP_PORT}").parse().unwrap());
    let conns = pep.wait_conns(2);
    let (summary, code, _) = pep.stop();
    assert_eq!(code, 0);
    assert_eq!(summary["refused_local"], 1);
    assert_eq!(summary["closed_timeout"], 1);
    assert_eq!(summary["connect_failed"], 1);
    let dst = format!("{SERVER_IP}:8016");
    let l = conns
        .iter()
        .find(|l| l["in"]["local"] == dst.as_str())
        .unwrap();
    assert_eq!(
        (l["first"]["by"].as_str(), l["first"]["how"].as_str()),
        (Some("server"), Some("rst"))
    );
    assert_eq!(l["connect_unix_ns"], Value::Null);
    uninstall(PEP_NS, "nft");
    println!(
        "summary (run C): {}",
        serde_json::to_string(&summary).unwrap()
    );

    println!();
    println!("zero-delay path, one TCP stream, 4 s each:");
    rate_line("through the PEP, splice, down", &down);
    rate_line("through the PEP, splice, up", &up);
    rate_line("through the PEP, read/write, down", &copy_down);
    rate_line("forwarded, no PEP, down", &direct_down);
    println!(
        "  the PEP's share of the machine (splice, down): {:.3} cores per Gbit/s more than forwarding",
        down.machine_cores / down.gbit_s - direct_down.machine_cores / direct_down.gbit_s
    );
    println!(
        "connection setup, {n} connections (connect, 1 byte each way): median {:.0} µs through the PEP, {:.0} µs forwarded: {:+.0} µs added",
        median(&pep_rtt),
        median(&direct_rtt),
        median(&pep_rtt) - median(&direct_rtt)
    );
    println!(
        "the PEP's outgoing connect (accept to handshake done): median {:.0} µs, p90 {:.0} µs",
        connect_us[connect_us.len() / 2],
        connect_us[connect_us.len() * 9 / 10]
    );
}

#[test]
fn two_peps_in_series() {
    if !root() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let _topology = Topology::four();
    install(TERMINAL_NS, "nft");
    install(GATEWAY_NS, "iptables");
    let terminal = Pep::start_in(TERMINAL_NS, "terminal", &["--satellite-leg", "cc=reno"]);
    let gateway = Pep::start_in(GATEWAY_NS, "gateway", &["--satellite-leg", "cc=reno"]);
    let (client, _) = exact_both_ways(8101, 4 * MB, 4 * MB);
    let hc = half_close(8102);
    let sr = server_reset(8103);
    let t = terminal.wait_conns(3);
    let g = gateway.wait_conns(3);
    for (conns, middle) in [(&t, "out"), (&g, "in")] {
        let l = by_client(conns, client, 8101);
        assert_eq!(l["outcome"], "fin");
        assert_eq!(l[middle]["faces"], "satellite");
        assert_eq!(l[middle]["tcp_info"]["cc"], "reno");
        assert_eq!(l["bytes_up"].as_u64(), Some(4 * MB));
        assert_eq!(by_client(conns, hc, 8102)["first"]["by"], "client");
        assert_eq!(by_client(conns, sr, 8103)["first"]["how"], "rst");
    }
    // The gateway's server: reset; the terminal saw that as the gateway's reset.
    assert_eq!(by_client(&g, sr, 8103)["first"]["by"], "server");
    assert_eq!(by_client(&t, sr, 8103)["first"]["by"], "server");
    let (ts, tc, _) = terminal.stop();
    let (gs, gc, _) = gateway.stop();
    assert_eq!((tc, gc), (0, 0));
    assert_eq!(
        (ts["accepted"].as_u64(), gs["accepted"].as_u64()),
        (Some(3), Some(3))
    );
    uninstall(TERMINAL_NS, "nft");
    uninstall(GATEWAY_NS, "iptables");
    println!("two PEPs in series: the middle leg from terminal to gateway, both logs as expected");
}
