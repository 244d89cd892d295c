//! satbench-pep: the transparent split-TCP PEP. The command line is
//! [`satbench_pep::args`]; everything else is the library's. See the
//! crate's documentation for the rules, the output and the exit codes.

use satbench_pep::args::{self, Command, USAGE};
use satbench_pep::proxy::Proxy;
use satbench_pep::record::line;
use std::io::Write;

fn main() {
    let cmd = match args::parse(std::env::args_os().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("satbench-pep: {e}");
            std::process::exit(2);
        }
    };
    let cfg = match cmd {
        Command::Help => {
            println!("{USAGE}");
            return;
        }
        Command::PrintRules(r) => {
            println!("{}", serde_json::to_string(&r).expect("rules serialize"));
            return;
        }
        Command::Run(cfg) => cfg,
    };
    let proxy = match Proxy::bind(cfg) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("satbench-pep: {e}");
            std::process::exit(e.exit_code());
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line(proxy.ready()).as_bytes());
    let _ = out.flush();
    match proxy.run() {
        Ok(summary) => {
            let _ = out.write_all(line(&summary).as_bytes());
            let _ = out.flush();
        }
        Err(e) => {
            eprintln!("satbench-pep: epoll_wait: {e}");
            std::process::exit(1);
        }
    }
}
