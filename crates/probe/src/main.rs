//! satbench-probe: round-trip time and loss over UDP.
//!
//! ```text
//! satbench-probe echo [--port P] [--duration-s S]
//! satbench-probe ping HOST:PORT [--count N] [--interval-ms X] [--size B] [--wait-ms W]
//! ```
//! `echo` answers every datagram with itself until it has been idle for
//! `--duration-s` (default 60 s). `ping` sends `N` numbered probes, one every
//! `X` ms, waits `W` ms after the last for stragglers, and prints one JSON
//! object: counts, and the RTT of every probe in ms (null if lost).

use std::net::{ToSocketAddrs, UdpSocket};
use std::process::exit;
use std::time::{Duration, Instant};

fn die(msg: &str) -> ! {
    eprintln!("satbench-probe: {msg}");
    exit(2);
}

/// The options of both commands, with their defaults.
#[derive(Debug, PartialEq)]
struct Opts {
    /// Positional arguments after the command (`ping`'s HOST:PORT).
    rest: Vec<String>,
    port: u16,
    duration_s: f64,
    count: u32,
    interval_ms: f64,
    size: usize,
    wait_ms: f64,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            rest: vec![],
            port: 9000,
            duration_s: 60.0,
            count: 100,
            interval_ms: 10.0,
            size: 64,
            wait_ms: 2000.0,
        }
    }
}

/// A command line that cannot be used; printed as `satbench-probe: <message>`, exit 2.
#[derive(Debug, thiserror::Error)]
enum ArgError {
    /// No command at all.
    #[error("usage: satbench-probe echo|ping ...")]
    NoCommand,
    /// A command other than `echo` and `ping`.
    #[error("unknown command {0:?} (echo, ping)")]
    UnknownCommand(String),
    /// An option missing its value, or with one that is no number.
    #[error("{0} needs a number")]
    NotANumber(&'static str),
    /// An option this program does not have.
    #[error("unknown option {0}")]
    UnknownOption(String),
    /// `--size` below the 12 bytes of sequence number and timestamp.
    #[error("--size must be at least 12 bytes")]
    SizeTooSmall,
    /// Anything else lexopt reports (a value given to a flag, non-UTF-8 text).
    #[error(transparent)]
    Other(#[from] lexopt::Error),
}

/// Parse the arguments after the command. Numbers are read as decimals and
/// converted as before (`--port 9000.7` is port 9000).
fn parse<I>(args: I) -> Result<Opts, ArgError>
where
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString>,
{
    use lexopt::prelude::*;
    let mut o = Opts::default();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        let name = match arg {
            Long("port") => "--port",
            Long("duration-s") => "--duration-s",
            Long("count") => "--count",
            Long("interval-ms") => "--interval-ms",
            Long("size") => "--size",
            Long("wait-ms") => "--wait-ms",
            Long(other) => return Err(ArgError::UnknownOption(format!("--{other}"))),
            Short(c) => return Err(ArgError::UnknownOption(format!("-{c}"))),
            Value(v) => {
                o.rest.push(v.string()?);
                continue;
            }
        };
        let v: f64 = match p.value() {
            Ok(v) => v.parse().map_err(|_| ArgError::NotANumber(name))?,
            Err(_) => return Err(ArgError::NotANumber(name)),
        };
        match name {
            "--port" => o.port = v as u16,
            "--duration-s" => o.duration_s = v,
            "--count" => o.count = v as u32,
            "--interval-ms" => o.interval_ms = v,
            "--size" => o.size = v as usize,
            _ => o.wait_ms = v,
        }
    }
    if o.size < 12 {
        return Err(ArgError::SizeTooSmall);
    }
    Ok(o)
}

/// The command and its options: the command is the first argument.
fn parse_command(args: Vec<std::ffi::OsString>) -> Result<(String, Opts), ArgError> {
    let mut it = args.into_iter();
    let cmd = it.next().ok_or(ArgError::NoCommand)?;
    let o = parse(it)?;
    let cmd = cmd.to_string_lossy().into_owned();
    match cmd.as_str() {
        "echo" | "ping" => Ok((cmd, o)),
        _ => Err(ArgError::UnknownCommand(cmd)),
    }
}

fn echo(o: &Opts) {
    let sock = UdpSocket::bind(("0.0.0.0", o.port))
        .unwrap_or_else(|e| die(&format!("bind port {}: {e}", o.port)));
    sock.set_read_timeout(Some(Duration::from_secs_f64(o.duration_s.max(0.001))))
        .expect("timeout");
    println!("{{\"listening\": {}}}", o.port);
    let mut buf = [0u8; 65_536];
    loop {
        match sock.recv_from(&mut buf) {
            Ok((n, from)) => {
                let _ = sock.send_to(&buf[..n], from);
            }
            Err(_) => return, // idle for the whole duration
        }
    }
}

fn ping(o: &Opts) {
    let target = o
        .rest
        .first()
        .unwrap_or_else(|| die("ping needs HOST:PORT"));
    let addr = target
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .unwrap_or_else(|| die(&format!("cannot resolve {target}")));
    let sock = UdpSocket::bind(("0.0.0.0", 0)).unwrap_or_else(|e| die(&format!("bind: {e}")));
    sock.connect(addr)
        .unwrap_or_else(|e| die(&format!("connect {addr}: {e}")));
    let start = Instant::now();
    let start_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let interval = Duration::from_secs_f64(o.interval_ms / 1e3);
    let mut rtt: Vec<Option<f64>> = vec![None; o.count as usize];
    let mut sent_at: Vec<Option<Duration>> = vec![None; o.count as usize];
    let mut buf = vec![0u8; o.size.max(65_536)];
    let mut payload = vec![0u8; o.size];
    let mut next = 0u32;
    let mut received = 0u32;
    let mut duplicates = 0u32;
    let deadline_after_last = Duration::from_secs_f64(o.wait_ms / 1e3);
    loop {
        let now = start.elapsed();
        if next < o.count && now >= interval * next {
            payload[..4].copy_from_slice(&next.to_be_bytes());
            payload[4..12].copy_from_slice(&(now.as_nanos() as u64).to_be_bytes());
            if sock.send(&payload).is_ok() {
                sent_at[next as usize] = Some(now);
            }
            next += 1;
            continue;
        }
        let wake = if next < o.count {
            interval * next
        } else {
            if received == o.count {
                break;
            }
            interval * o.count.saturating_sub(1) + deadline_after_last
        };
        let now = start.elapsed();
        if next >= o.count && now >= wake {
            break;
        }
        let wait = wake.saturating_sub(now).max(Duration::from_micros(1));
        sock.set_read_timeout(Some(wait)).expect("timeout");
        if let Ok(n) = sock.recv(&mut buf) {
            let t = start.elapsed();
            if n >= 12 {
                let seq = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
                let sent_ns = u64::from_be_bytes(buf[4..12].try_into().unwrap());
                if seq < rtt.len() && sent_at[seq].is_some() {
                    if rtt[seq].is_some() {
                        duplicates += 1;
                    } else {
                        rtt[seq] = Some((t.as_nanos() as u64 - sent_ns) as f64 / 1e6);
                        received += 1;
                    }
                }
            }
        }
    }
    let sent = sent_at.iter().filter(|s| s.is_some()).count();
    let out = serde_json::json!({
        "target": addr.to_string(),
        "sent": sent,
        "received": received,
        "duplicates": duplicates,
        "size": o.size,
        "interval_ms": o.interval_ms,
        // Probe i was sent interval_ms x i after this instant (the wall clock every namespace shares).
        "start_unix_ns": start_unix_ns,
        "rtt_ms": rtt,
    });
    println!("{out}");
}

fn main() {
    let (cmd, o) = parse_command(std::env::args_os().skip(1).collect())
        .unwrap_or_else(|e| die(&e.to_string()));
    if cmd == "echo" {
        echo(&o)
    } else {
        ping(&o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(args: &[&str]) -> Result<(String, Opts), ArgError> {
        parse_command(args.iter().map(Into::into).collect())
    }

    fn err(args: &[&str]) -> String {
        cmd(args).unwrap_err().to_string()
    }

    #[test]
    fn parses_options_as_before() {
        let (c, o) = cmd(&[
            "ping",
            "h:1",
            "--count",
            "5",
            "--interval-ms",
            "2.5",
            "--size",
            "100",
        ])
        .unwrap();
        assert_eq!(c, "ping");
        assert_eq!(o.rest, ["h:1"]);
        assert_eq!(
            (o.count, o.interval_ms, o.size, o.wait_ms),
            (5, 2.5, 100, 2000.0)
        );
        let (_, o) = cmd(&["echo", "--port", "9000.7", "--duration-s", "3"]).unwrap();
        assert_eq!((o.port, o.duration_s), (9000, 3.0));
        assert_eq!(cmd(&["echo"]).unwrap().1, Opts::default());
    }

    #[test]
    fn messages_as_before() {
        assert_eq!(err(&[]), "usage: satbench-probe echo|ping ...");
        assert_eq!(err(&["bogus"]), "unknown command \"bogus\" (echo, ping)");
        assert_eq!(
            err(&["--port", "5", "echo"]),
            "unknown command \"--port\" (echo, ping)"
        );
        assert_eq!(err(&["echo", "--bogus"]), "unknown option --bogus");
        assert_eq!(err(&["echo", "--port"]), "--port needs a number");
        assert_eq!(err(&["echo", "--port", "x"]), "--port needs a number");
        assert_eq!(
            err(&["ping", "--size", "5"]),
            "--size must be at least 12 bytes"
        );
    }
}
