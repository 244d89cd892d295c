//! The command line (lexopt). Every error names its flag; the binary prints
//! it as one line `satbench-pep: MESSAGE` and exits 2.

use crate::proxy::Config;
use crate::rules::RuleSet;
use crate::settings::{parse_size, LegSettings, Placement};
use std::ffi::OsString;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

pub const USAGE: &str = "\
usage: satbench-pep --port P --placement terminal|gateway
                    [--satellite-leg SETTINGS] [--terrestrial-leg SETTINGS]
                    [--max-conns N] [--idle-timeout-s S] [--log FILE]
                    [--listen ADDR] [--ipv6] [--buffer-size BYTES] [--no-splice]
       satbench-pep --print-rules --port P [--mark M] [--route-table T] [--ipv6]
SETTINGS: KEY=VALUE,... with cc=NAME sndbuf=BYTES rcvbuf=BYTES nodelay[=on|off]
          fastopen[=on|off] maxseg=BYTES (sizes take K, M, G)";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub enum Command {
    Run(Config),
    /// Print the rules for this port, mark and routing table.
    PrintRules(RuleSet),
    Help,
}

/// A command line that cannot be used; each names its flag.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    #[error("{0}: needs a value")]
    MissingValue(String),
    #[error("{0}: unknown argument")]
    Unknown(String),
    #[error("{0}: takes no value")]
    NoValue(String),
    #[error("{flag}: {message}")]
    Bad { flag: &'static str, message: String },
    #[error("{0}: required")]
    Required(&'static str),
    /// Anything else lexopt reports (non-UTF-8 text, a value given to a switch).
    #[error("{0}")]
    Other(String),
}

impl From<lexopt::Error> for ArgError {
    fn from(e: lexopt::Error) -> ArgError {
        match e {
            lexopt::Error::MissingValue { option: Some(o) } => ArgError::MissingValue(o),
            lexopt::Error::UnexpectedOption(o) => ArgError::Unknown(o),
            lexopt::Error::UnexpectedArgument(a) => {
                ArgError::Unknown(a.to_string_lossy().into_owned())
            }
            lexopt::Error::UnexpectedValue { option, .. } => ArgError::NoValue(option),
            other => ArgError::Other(other.to_string()),
        }
    }
}

fn bad(flag: &'static str, message: impl Into<String>) -> ArgError {
    ArgError::Bad {
        flag,
        message: message.into(),
    }
}

fn number<T: std::str::FromStr + PartialOrd + std::fmt::Display>(
    flag: &'static str,
    v: &str,
    lo: T,
    hi: T,
) -> Result<T, ArgError> {
    match v.parse::<T>() {
        Ok(n) if n >= lo && n <= hi => Ok(n),
        _ => Err(bad(flag, format!("expects {lo}..{hi}, got {v:?}"))),
    }
}

/// Parse the arguments after the program name.
pub fn parse<I>(args: I) -> Result<Command, ArgError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    use lexopt::prelude::*;
    let mut c = Config::default();
    let mut port = None;
    let mut placement = None;
    let mut print_rules = false;
    let (mut mark, mut table) = (None, None);
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        let flag: &'static str = match &arg {
            Long("port") => "--port",
            Long("placement") => "--placement",
            Long("satellite-leg") => "--satellite-leg",
            Long("terrestrial-leg") => "--terrestrial-leg",
            Long("max-conns") => "--max-conns",
            Long("idle-timeout-s") => "--idle-timeout-s",
            Long("log") => "--log",
            Long("listen") => "--listen",
            Long("buffer-size") => "--buffer-size",
            Long("mark") => "--mark",
            Long("route-table") => "--route-table",
            Long("no-splice") => {
                c.splice = false;
                continue;
            }
            Long("print-rules") => {
                print_rules = true;
                continue;
            }
            Long("ipv6") => {
                c.ipv6 = true;
                continue;
            }
            Long("help") | Short('h') => return Ok(Command::Help),
            _ => return Err(arg.unexpected().into()),
        };
        let v = p.value()?.string()?;
        match flag {
            "--port" => port = Some(number(flag, &v, 1u16, 65535)?),
            "--placement" => {
                placement =
                    Some(Placement::parse(&v).ok_or_else(|| {
                        bad(flag, format!("expects terminal or gateway, got {v:?}"))
                    })?)
            }
            "--satellite-leg" => {
                c.satellite = LegSettings::parse(&v).map_err(|e| bad(flag, e.to_string()))?
            }
            "--terrestrial-leg" => {
                c.terrestrial = LegSettings::parse(&v).map_err(|e| bad(flag, e.to_string()))?
            }
            "--max-conns" => c.max_conns = number(flag, &v, 1usize, 1_000_000)?,
            "--idle-timeout-s" => {
                let s = number(flag, &v, 0.0f64, 1e6)?;
                c.idle_timeout = (s > 0.0).then(|| Duration::from_secs_f64(s));
            }
            "--log" => {
                if v.is_empty() {
                    return Err(bad(flag, "expects a file name"));
                }
                c.log = Some(PathBuf::from(v));
            }
            "--listen" => {
                let ip: Ipv4Addr = v
                    .parse()
                    .map_err(|_| bad(flag, format!("expects an IPv4 address, got {v:?}")))?;
                c.listen = SocketAddrV4::new(ip, 0);
            }
            "--buffer-size" => {
                c.buffer_size = match parse_size(&v) {
                    Some(n) if ((4 << 10)..=(64 << 20)).contains(&n) => n as usize,
                    _ => return Err(bad(flag, format!("expects 4K..64M, got {v:?}"))),
                }
            }
            "--mark" => mark = Some(number(flag, &v, 1u32, u32::MAX)?),
            "--route-table" => {
                let t = number(flag, &v, 1u32, u32::MAX)?;
                if (253..=255).contains(&t) {
                    return Err(bad(
                        flag,
                        format!("{t} is a reserved table (default, main, local)"),
                    ));
                }
                table = Some(t);
            }
            _ => unreachable!("every flag with a value is listed above"),
        }
    }
    let port = port.ok_or(ArgError::Required("--port"))?;
    if print_rules {
        let (mark, table) = (mark.unwrap_or(1), table.unwrap_or(100));
        return Ok(Command::PrintRules(if c.ipv6 {
            RuleSet::with_ipv6(port, mark, table)
        } else {
            RuleSet::new(port, mark, table)
        }));
    }
    if mark.is_some() {
        return Err(bad("--mark", "only with --print-rules"));
    }
    if table.is_some() {
        return Err(bad("--route-table", "only with --print-rules"));
    }
    c.placement = placement.ok_or(ArgError::Required("--placement"))?;
    c.listen.set_port(port);
    Ok(Command::Run(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Config {
        match parse(args.iter().copied()) {
            Ok(Command::Run(c)) => c,
            other => panic!("{other:?}"),
        }
    }

    fn err(args: &[&str]) -> String {
        parse(args.iter().copied()).unwrap_err().to_string()
    }

    #[test]
    fn a_full_command_line() {
        let c = run(&[
            "--port",
            "5000",
            "--placement",
            "gateway",
            "--satellite-leg",
            "cc=bbr,sndbuf=16M,rcvbuf=16M",
            "--terrestrial-leg=cc=cubic,nodelay",
            "--max-conns",
            "64",
            "--idle-timeout-s",
            "2.5",
            "--log",
            "/tmp/pep.jsonl",
            "--listen",
            "10.0.0.1",
            "--buffer-size",
            "1M",
            "--no-splice",
        ]);
        assert_eq!(c.listen, "10.0.0.1:5000".parse().unwrap());
        assert_eq!(c.placement, Placement::Gateway);
        assert_eq!(c.satellite.cc.as_deref(), Some("bbr"));
        assert_eq!(c.satellite.sndbuf, Some(16 << 20));
        assert_eq!(c.terrestrial.nodelay, Some(true));
        assert_eq!(c.max_conns, 64);
        assert_eq!(c.idle_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(c.log, Some(PathBuf::from("/tmp/pep.jsonl")));
        assert_eq!(c.buffer_size, 1 << 20);
        assert!(!c.splice);
    }

    #[test]
    fn defaults() {
        let c = run(&["--port", "1", "--placement", "terminal"]);
        let d = Config::default();
        assert_eq!(c.listen, "0.0.0.0:1".parse().unwrap());
        assert_eq!((c.max_conns, c.idle_timeout), (d.max_conns, d.idle_timeout));
        assert_eq!(
            (c.max_conns, c.idle_timeout),
            (1024, Some(Duration::from_secs(300)))
        );
        assert_eq!((c.buffer_size, c.splice, c.log), (1 << 20, true, None));
        assert_eq!(c.satellite, LegSettings::default());
        let c = run(&[
            "--port",
            "1",
            "--placement",
            "terminal",
            "--idle-timeout-s",
            "0",
        ]);
        assert_eq!(c.idle_timeout, None);
    }

    #[test]
    fn print_rules() {
        match parse([
            "--print-rules",
            "--port",
            "7000",
            "--mark",
            "3",
            "--route-table",
            "200",
        ]) {
            Ok(Command::PrintRules(r)) => assert_eq!(r, RuleSet::new(7000, 3, 200)),
            other => panic!("{other:?}"),
        }
        match parse(["--print-rules", "--port", "7000"]) {
            Ok(Command::PrintRules(r)) => assert_eq!((r.mark, r.table), (1, 100)),
            other => panic!("{other:?}"),
        }
        match parse(["--print-rules", "--port", "7000", "--ipv6"]) {
            Ok(Command::PrintRules(r)) => assert_eq!(r, RuleSet::with_ipv6(7000, 1, 100)),
            other => panic!("{other:?}"),
        }
        assert!(run(&["--port", "1", "--placement", "terminal", "--ipv6"]).ipv6);
        assert!(!run(&["--port", "1", "--placement", "terminal"]).ipv6);
        assert_eq!(parse(["-h"]), Ok(Command::Help));
    }

    #[test]
    fn each_bad_argument_is_named() {
        let base = ["--port", "5000", "--placement", "terminal"];
        let with = |extra: &[&str]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            err(&v)
        };
        assert_eq!(err(&["--placement", "terminal"]), "--port: required");
        assert_eq!(err(&["--port", "5000"]), "--placement: required");
        assert_eq!(err(&["--port", "0"]), "--port: expects 1..65535, got \"0\"");
        assert_eq!(
            err(&["--port", "http"]),
            "--port: expects 1..65535, got \"http\""
        );
        assert_eq!(err(&["--port"]), "--port: needs a value");
        assert_eq!(
            err(&["--port", "1", "--placement", "space"]),
            "--placement: expects terminal or gateway, got \"space\""
        );
        assert_eq!(
            with(&["--satellite-leg", "cc=bbr,sndbuf=lots"]),
            "--satellite-leg: sndbuf: expects a size (bytes, K, M or G), got \"lots\""
        );
        assert_eq!(
            with(&["--terrestrial-leg", "fastopen=sometimes"]),
            "--terrestrial-leg: fastopen: expects on or off, got \"sometimes\""
        );
        assert_eq!(
            with(&["--max-conns", "0"]),
            "--max-conns: expects 1..1000000, got \"0\""
        );
        assert_eq!(
            with(&["--idle-timeout-s", "-1"]),
            "--idle-timeout-s: expects 0..1000000, got \"-1\""
        );
        assert_eq!(with(&["--log", ""]), "--log: expects a file name");
        assert_eq!(
            with(&["--listen", "::1"]),
            "--listen: expects an IPv4 address, got \"::1\""
        );
        assert_eq!(
            with(&["--buffer-size", "1K"]),
            "--buffer-size: expects 4K..64M, got \"1K\""
        );
        assert_eq!(with(&["--mark", "1"]), "--mark: only with --print-rules");
        assert_eq!(
            with(&["--route-table", "100"]),
            "--route-table: only with --print-rules"
        );
        assert_eq!(
            err(&["--print-rules", "--port", "1", "--route-table", "254"]),
            "--route-table: 254 is a reserved table (default, main, local)"
        );
        assert_eq!(
            err(&["--print-rules", "--port", "1", "--mark", "0"]),
            "--mark: expects 1..4294967295, got \"0\""
        );
        assert_eq!(with(&["--frobnicate"]), "--frobnicate: unknown argument");
        assert_eq!(with(&["extra"]), "extra: unknown argument");
        assert_eq!(with(&["--no-splice=yes"]), "--no-splice: takes no value");
    }
}
