//! The command line (lexopt). Errors are printed as one line
//! `satbench-link: <message>` and exit 2.

use std::ffi::OsString;

/// What the command line asks for.
#[derive(Debug, Default, PartialEq)]
pub struct Args {
    /// The link configuration (JSON); `-` is standard input.
    pub config: String,
    /// Network namespace path and TUN device of each terminal, in the order
    /// of the configuration's `terminals` (one `--terminal` each).
    pub terminals: Vec<(String, String)>,
    /// Network namespace path and TUN device of the gateway side.
    pub gateway: Option<(String, String)>,
    /// Where to write the counters on exit (stdout if absent).
    pub stats: Option<String>,
    /// Directory for `terminal.pcap` and `gateway.pcap`.
    pub pcap_dir: Option<String>,
    /// Exit at once if the parent is no longer this process.
    pub parent_pid: Option<i32>,
    /// Only check the configuration and print the resolved link.
    pub check: bool,
    /// With `--check`: a link profile (TOML; `-` is standard input) instead
    /// of a configuration ([`satlink::profile`]).
    pub profile: Option<String>,
    /// The profile's name in errors (default: its file).
    pub profile_name: Option<String>,
    /// The directory the profile's relative file names are read from
    /// (default: the profile's own; none for standard input).
    pub base: Option<String>,
    /// `--set KEY=VALUE` overrides of the profile, in order (`--sets` gives
    /// them as one JSON list of strings, for values no argument can hold).
    pub sets: Vec<String>,
    /// The subnets of each terminal of the testbed (JSON list of lists).
    pub subnets: Option<String>,
    /// Measure the model's cost per packet in simulated time and print it.
    pub bench_model: bool,
    /// Measure the overhead classifier's cost per packet and print it.
    pub bench_overhead: bool,
    /// Packets per direction for `--bench-model` (per case for `--bench-overhead`).
    pub packets: Option<u64>,
}

/// A command line that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ArgError {
    /// An option that takes a value came last.
    #[error("{0} needs a value")]
    MissingValue(String),
    /// An option or positional argument this program does not have.
    #[error("unknown argument {0:?}")]
    Unknown(String),
    /// `--terminal` or `--gateway` without `NETNS:DEV`.
    #[error("{flag} expects NETNS_PATH:DEVICE, got {value:?}")]
    BadSide { flag: &'static str, value: String },
    /// `--parent-pid` that is no number.
    #[error("--parent-pid expects a number")]
    BadPid,
    /// `--packets` that is no positive number.
    #[error("--packets expects a positive number")]
    BadPackets,
    /// No `--config`.
    #[error("--config is required")]
    NoConfig,
    /// `--sets` that is no JSON list of strings.
    #[error("--sets expects a JSON list of KEY=VALUE strings")]
    BadSets,
    /// `--profile` outside `--check` (a run takes the resolved configuration).
    #[error("--profile goes with --check")]
    ProfileWithoutCheck,
    /// A run (not `--check`) without both devices.
    #[error("--terminal and --gateway are required")]
    NoDevices,
    /// Anything else lexopt reports (a value given to a flag, non-UTF-8 text).
    #[error(transparent)]
    Other(lexopt::Error),
}

impl From<lexopt::Error> for ArgError {
    fn from(e: lexopt::Error) -> ArgError {
        match e {
            lexopt::Error::MissingValue { option: Some(o) } => ArgError::MissingValue(o),
            lexopt::Error::UnexpectedOption(o) => ArgError::Unknown(o),
            lexopt::Error::UnexpectedArgument(a) => {
                ArgError::Unknown(a.to_string_lossy().into_owned())
            }
            other => ArgError::Other(other),
        }
    }
}

fn side(flag: &'static str, v: String) -> Result<(String, String), ArgError> {
    match v.rsplit_once(':') {
        Some((ns, dev)) if !ns.is_empty() && !dev.is_empty() => {
            Ok((ns.to_string(), dev.to_string()))
        }
        _ => Err(ArgError::BadSide { flag, value: v }),
    }
}

/// Parse the arguments after the program name.
pub fn parse<I>(args: I) -> Result<Args, ArgError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    use lexopt::prelude::*;
    let mut a = Args::default();
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next()? {
        match arg {
            Long("config") => a.config = p.value()?.string()?,
            Long("terminal") => a.terminals.push(side("--terminal", p.value()?.string()?)?),
            Long("gateway") => a.gateway = Some(side("--gateway", p.value()?.string()?)?),
            Long("stats") => a.stats = Some(p.value()?.string()?),
            Long("pcap-dir") => a.pcap_dir = Some(p.value()?.string()?),
            Long("parent-pid") => {
                a.parent_pid = Some(p.value()?.parse().map_err(|_| ArgError::BadPid)?)
            }
            Long("check") => a.check = true,
            Long("profile") => a.profile = Some(p.value()?.string()?),
            Long("profile-name") => a.profile_name = Some(p.value()?.string()?),
            Long("base") => a.base = Some(p.value()?.string()?),
            Long("set") => a.sets.push(p.value()?.string()?),
            Long("sets") => {
                let v = p.value()?.string()?;
                let list: Vec<String> = serde_json::from_str(&v).map_err(|_| ArgError::BadSets)?;
                a.sets.extend(list);
            }
            Long("subnets") => a.subnets = Some(p.value()?.string()?),
            Long("bench-model") => a.bench_model = true,
            Long("bench-overhead") => a.bench_overhead = true,
            Long("packets") => {
                let n: u64 = p.value()?.parse().map_err(|_| ArgError::BadPackets)?;
                if n == 0 {
                    return Err(ArgError::BadPackets);
                }
                a.packets = Some(n);
            }
            other => return Err(other.unexpected().into()),
        }
    }
    if a.bench_model || a.bench_overhead {
        return Ok(a);
    }
    if a.profile.is_some() && !a.check {
        return Err(ArgError::ProfileWithoutCheck);
    }
    if a.config.is_empty() && a.profile.is_none() {
        return Err(ArgError::NoConfig);
    }
    if !a.check && (a.terminals.is_empty() || a.gateway.is_none()) {
        return Err(ArgError::NoDevices);
    }
    Ok(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(args: &[&str]) -> String {
        parse(args.iter().copied()).unwrap_err().to_string()
    }

    #[test]
    fn parses_a_run() {
        let a = parse([
            "--config",
            "l.json",
            "--terminal",
            "/run/netns/t:tun0",
            "--gateway",
            "/run/netns/g:tun1",
            "--stats",
            "s.json",
            "--pcap-dir",
            "/tmp",
            "--parent-pid",
            "42",
        ])
        .unwrap();
        assert_eq!(a.terminals, vec![("/run/netns/t".into(), "tun0".into())]);
        assert_eq!(a.gateway, Some(("/run/netns/g".into(), "tun1".into())));
        assert_eq!(
            (a.stats.as_deref(), a.parent_pid, a.check),
            (Some("s.json"), Some(42), false)
        );
        let c = parse(["--check", "--config", "-"]).unwrap();
        assert!(c.check && c.config == "-" && c.terminals.is_empty());
    }

    #[test]
    fn repeated_terminals_in_order() {
        let a = parse([
            "--config",
            "l.json",
            "--terminal",
            "/run/netns/t1:tun0",
            "--terminal",
            "/run/netns/t2:tun0",
            "--gateway",
            "/run/netns/g:tun1",
        ])
        .unwrap();
        assert_eq!(
            a.terminals,
            vec![
                ("/run/netns/t1".into(), "tun0".into()),
                ("/run/netns/t2".into(), "tun0".into())
            ]
        );
    }

    #[test]
    fn bench_model_needs_no_config() {
        let a = parse(["--bench-model", "--packets", "1000"]).unwrap();
        assert!(a.bench_model && a.packets == Some(1000));
        let a = parse(["--bench-overhead"]).unwrap();
        assert!(a.bench_overhead && !a.bench_model && a.packets.is_none());
        assert_eq!(
            err(&["--bench-model", "--packets", "0"]),
            "--packets expects a positive number"
        );
        assert_eq!(
            err(&["--bench-model", "--packets", "x"]),
            "--packets expects a positive number"
        );
    }

    #[test]
    fn messages_as_before() {
        assert_eq!(err(&[]), "--config is required");
        assert_eq!(err(&["--check"]), "--config is required");
        assert_eq!(err(&["--bogus"]), "unknown argument \"--bogus\"");
        assert_eq!(err(&["pos"]), "unknown argument \"pos\"");
        assert_eq!(err(&["--config"]), "--config needs a value");
        assert_eq!(
            err(&["--config", "f"]),
            "--terminal and --gateway are required"
        );
        assert_eq!(
            err(&["--terminal", "x"]),
            "--terminal expects NETNS_PATH:DEVICE, got \"x\""
        );
        assert_eq!(
            err(&["--parent-pid", "x", "--config", "f"]),
            "--parent-pid expects a number"
        );
    }
}
