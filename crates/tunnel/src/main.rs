//! satbench-tunnel: a WireGuard tunnel between a TUN device and a UDP socket.
//!
//! ```text
//! satbench-tunnel keypair
//! satbench-tunnel run --tun DEV --listen ADDR:PORT --private-key HEX --peer-public-key HEX
//!                     [--peer ADDR:PORT] [--keepalive SECONDS]
//! ```
//! `keypair` prints `{"private": HEX, "public": HEX}`. `run` attaches to the
//! TUN device DEV (made beforehand, with its address, MTU and routes), binds
//! the UDP socket, prints `{"ready": true, ...}` and relays until SIGTERM or
//! SIGINT, then prints `{"summary": {...}}` (the endpoint's counters) and
//! exits 0. With `--peer` it starts the handshake (the client side);
//! without, it answers the peer that authenticates itself (the server
//! side). Bad arguments: one line on stderr, exit 2; a system call that
//! fails: one line, exit 1.

use satbench_tunnel::{key_from_hex, Endpoint, Out};
use std::ffi::CString;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

#[derive(Debug)]
struct RunArgs {
    tun: String,
    listen: SocketAddr,
    private: [u8; 32],
    peer_public: [u8; 32],
    peer: Option<SocketAddr>,
    keepalive: Option<u16>,
}

#[derive(Debug)]
enum Command {
    Keypair,
    Run(RunArgs),
    Help,
}

const USAGE: &str = "usage: satbench-tunnel keypair | satbench-tunnel run --tun DEV --listen ADDR:PORT \
                     --private-key HEX --peer-public-key HEX [--peer ADDR:PORT] [--keepalive SECONDS]";

#[derive(Debug, thiserror::Error)]
enum ArgError {
    #[error("{0}")]
    Lexopt(#[from] lexopt::Error),
    #[error("a command: keypair or run")]
    NoCommand,
    #[error("unknown command {0:?} (keypair or run)")]
    UnknownCommand(String),
    #[error("{flag}: 64 hex digits, not {value:?}")]
    BadKey { flag: &'static str, value: String },
    #[error("{flag}: ADDR:PORT, not {value:?}")]
    BadAddr { flag: &'static str, value: String },
    #[error("--tun: an interface name of 1 to 15 characters, not {0:?}")]
    BadTun(String),
    #[error("--keepalive: seconds from 1 to 65535, not {0:?}")]
    BadKeepalive(String),
    #[error("{0} is required")]
    Missing(&'static str),
}

fn parse<I>(args: I) -> Result<Command, ArgError>
where
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString>,
{
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(args);
    let cmd = match p.next()? {
        Some(Value(v)) => v.string()?,
        Some(Short('h')) | Some(Long("help")) => return Ok(Command::Help),
        Some(other) => return Err(other.unexpected().into()),
        None => return Err(ArgError::NoCommand),
    };
    if cmd == "keypair" {
        if let Some(a) = p.next()? {
            return Err(a.unexpected().into());
        }
        return Ok(Command::Keypair);
    }
    if cmd != "run" {
        return Err(ArgError::UnknownCommand(cmd));
    }
    let (mut tun, mut listen, mut private, mut peer_public, mut peer, mut keepalive) =
        (None, None, None, None, None, None);
    while let Some(arg) = p.next()? {
        match arg {
            Long("tun") => {
                let v = p.value()?.string()?;
                if v.is_empty() || v.len() > 15 || v.contains('/') {
                    return Err(ArgError::BadTun(v));
                }
                tun = Some(v);
            }
            Long("listen") => listen = Some(addr("--listen", p.value()?.string()?)?),
            Long("peer") => peer = Some(addr("--peer", p.value()?.string()?)?),
            Long("private-key") => private = Some(key("--private-key", p.value()?.string()?)?),
            Long("peer-public-key") => {
                peer_public = Some(key("--peer-public-key", p.value()?.string()?)?)
            }
            Long("keepalive") => {
                let v = p.value()?.string()?;
                match v.parse::<u16>() {
                    Ok(n) if n >= 1 => keepalive = Some(n),
                    _ => return Err(ArgError::BadKeepalive(v)),
                }
            }
            Short('h') | Long("help") => return Ok(Command::Help),
            other => return Err(other.unexpected().into()),
        }
    }
    Ok(Command::Run(RunArgs {
        tun: tun.ok_or(ArgError::Missing("--tun"))?,
        listen: listen.ok_or(ArgError::Missing("--listen"))?,
        private: private.ok_or(ArgError::Missing("--private-key"))?,
        peer_public: peer_public.ok_or(ArgError::Missing("--peer-public-key"))?,
        peer,
        keepalive,
    }))
}

fn addr(flag: &'static str, value: String) -> Result<SocketAddr, ArgError> {
    value.parse().map_err(|_| ArgError::BadAddr { flag, value })
}

fn key(flag: &'static str, value: String) -> Result<[u8; 32], ArgError> {
    key_from_hex(&value).ok_or(ArgError::BadKey { flag, value })
}

/// A system call that failed: `satbench-tunnel: <what>: <error>`, exit 1.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
struct SysError {
    what: String,
    source: std::io::Error,
}

fn sys(what: impl Into<String>) -> SysError {
    SysError {
        what: what.into(),
        source: std::io::Error::last_os_error(),
    }
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Attach to TUN device `dev` (plain IP packets, no packet information).
fn open_tun(dev: &str) -> Result<OwnedFd, SysError> {
    let path = CString::new("/dev/net/tun").expect("no NUL");
    // SAFETY: a valid C string.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(sys("open /dev/net/tun"));
    }
    // SAFETY: fd was just opened and is owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq {
        name: [0; 16],
        flags: IFF_TUN | IFF_NO_PI,
        _pad: [0; 22],
    };
    req.name[..dev.len()].copy_from_slice(dev.as_bytes());
    // SAFETY: req is an ifreq-sized struct.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) } != 0 {
        return Err(sys(format!("ioctl TUNSETIFF {dev}")));
    }
    Ok(fd)
}

/// Wait up to `ms` for `fd` to be readable.
fn readable(fd: RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

struct Shared {
    ep: Mutex<Endpoint>,
    peer: Mutex<Option<SocketAddr>>,
    sock: UdpSocket,
    tun: OwnedFd,
}

impl Shared {
    /// Carry out what the endpoint asked for.
    fn emit(&self, outs: Vec<Out>, to: Option<SocketAddr>) {
        for o in outs {
            match o {
                Out::Network(d) => {
                    if let Some(a) = to.or(*self.peer.lock().expect("peer")) {
                        let _ = self.sock.send_to(&d, a);
                    }
                }
                Out::Tunnel(p) => {
                    // SAFETY: writing a buffer we own to our fd.
                    unsafe { libc::write(self.tun.as_raw_fd(), p.as_ptr().cast(), p.len()) };
                }
            }
        }
    }
}

fn run(a: RunArgs) -> Result<(), SysError> {
    let tun = open_tun(&a.tun)?;
    let sock = UdpSocket::bind(a.listen).map_err(|e| SysError {
        what: format!("bind udp {}", a.listen),
        source: e,
    })?;
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| SysError {
            what: "SO_RCVTIMEO".into(),
            source: e,
        })?;
    let sh = Arc::new(Shared {
        ep: Mutex::new(Endpoint::new(a.private, a.peer_public, a.keepalive)),
        peer: Mutex::new(a.peer),
        sock,
        tun,
    });
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let public = satbench_tunnel::hex(
        boringtun::x25519::PublicKey::from(&boringtun::x25519::StaticSecret::from(a.private))
            .as_bytes(),
    );
    println!(
        "{}",
        serde_json::json!({"ready": true, "tun": a.tun, "listen": a.listen.to_string(),
            "public_key": public, "initiator": a.peer.is_some()})
    );
    if a.peer.is_some() {
        let outs = sh.ep.lock().expect("endpoint").initiate();
        sh.emit(outs, None);
    }
    let from_tun = {
        let sh = sh.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            while !STOP.load(Ordering::SeqCst) {
                if !readable(sh.tun.as_raw_fd(), 200) {
                    continue;
                }
                // SAFETY: reading into a buffer we own.
                let n =
                    unsafe { libc::read(sh.tun.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    continue;
                }
                let outs = sh.ep.lock().expect("endpoint").from_tun(&buf[..n as usize]);
                sh.emit(outs, None);
            }
        })
    };
    let from_net = {
        let sh = sh.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 65_536];
            while !STOP.load(Ordering::SeqCst) {
                let Ok((n, src)) = sh.sock.recv_from(&mut buf) else {
                    continue;
                };
                let outs = sh
                    .ep
                    .lock()
                    .expect("endpoint")
                    .from_network(src.ip(), &buf[..n]);
                if !outs.is_empty() {
                    // Whoever authenticated is the peer (the server side learns it so).
                    *sh.peer.lock().expect("peer") = Some(src);
                }
                sh.emit(outs, Some(src));
            }
        })
    };
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        let outs = sh.ep.lock().expect("endpoint").tick();
        sh.emit(outs, None);
    }
    let _ = from_tun.join();
    let _ = from_net.join();
    let ep = sh.ep.lock().expect("endpoint");
    let c = ep.counters();
    println!(
        "{}",
        serde_json::json!({"summary": {
            "tun_in_packets": c.tun_in_packets, "tun_in_bytes": c.tun_in_bytes,
            "tun_out_packets": c.tun_out_packets, "tun_out_bytes": c.tun_out_bytes,
            "net_out_datagrams": c.net_out_datagrams, "net_out_bytes": c.net_out_bytes,
            "net_in_datagrams": c.net_in_datagrams, "net_in_bytes": c.net_in_bytes,
            "net_in_rejected": c.net_in_rejected, "handshakes": c.handshakes,
            "not_ip": c.not_ip, "handshake_rtt_ms": ep.handshake_rtt_ms(),
            "peer": sh.peer.lock().expect("peer").map(|p| p.to_string())}})
    );
    Ok(())
}

fn main() {
    let cmd = match parse(std::env::args_os().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("satbench-tunnel: {e}");
            std::process::exit(2);
        }
    };
    match cmd {
        Command::Help => println!("{USAGE}"),
        Command::Keypair => {
            let (private, public) = satbench_tunnel::keypair();
            println!(
                "{}",
                serde_json::json!({"private": private, "public": public})
            );
        }
        Command::Run(a) => {
            if let Err(e) = run(a) {
                eprintln!("satbench-tunnel: {e}");
                std::process::exit(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(args: &[&str]) -> String {
        parse(args.iter().copied()).unwrap_err().to_string()
    }

    #[test]
    fn parses_and_refuses() {
        let k = "ab".repeat(32);
        let Ok(Command::Run(a)) = parse([
            "run",
            "--tun",
            "wg0",
            "--listen",
            "0.0.0.0:51820",
            "--private-key",
            &k,
            "--peer-public-key",
            &k,
            "--peer",
            "198.18.3.2:51820",
        ]) else {
            panic!("not run")
        };
        assert_eq!(
            (a.tun.as_str(), a.peer.unwrap().port(), a.keepalive),
            ("wg0", 51820, None)
        );
        assert!(matches!(parse(["keypair"]), Ok(Command::Keypair)));
        assert_eq!(err(&[]), "a command: keypair or run");
        assert_eq!(err(&["go"]), "unknown command \"go\" (keypair or run)");
        assert_eq!(err(&["run", "--tun", "wg0"]), "--listen is required");
        assert_eq!(
            err(&["run", "--private-key", "xy"]),
            "--private-key: 64 hex digits, not \"xy\""
        );
        assert_eq!(
            err(&["run", "--tun", "a-very-long-name0"]),
            "--tun: an interface name of 1 to 15 characters, not \"a-very-long-name0\""
        );
        assert_eq!(
            err(&["run", "--listen", "x"]),
            "--listen: ADDR:PORT, not \"x\""
        );
        assert_eq!(
            err(&["run", "--keepalive", "0"]),
            "--keepalive: seconds from 1 to 65535, not \"0\""
        );
    }
}
