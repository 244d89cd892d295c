//! satbench-pep: a transparent split-TCP performance-enhancing proxy.
//!
//! It runs in a network namespace the clients' TCP is routed through (the
//! satellite terminal's, the gateway's, or both: two independent PEPs, whose
//! middle leg then crosses the satellite link). Each intercepted connection
//! is terminated ([`relay::Leg::In`], its local address the original
//! destination) and a second one opened to that destination from the
//! client's own address ([`relay::Leg::Out`], `IP_TRANSPARENT` and bind
//! before connect, so the server sees the client). Bytes are relayed with
//! `splice(2)` through a pipe per direction, or `read`/`write` if splicing
//! fails. Like PEPsal, whose facts it follows (the code is our own).
//!
//! ```text
//! satbench-pep --port P --placement terminal|gateway
//!              [--satellite-leg SETTINGS] [--terrestrial-leg SETTINGS]
//!              [--max-conns N] [--idle-timeout-s S] [--log FILE]
//!              [--listen ADDR] [--ipv6] [--buffer-size BYTES] [--no-splice]
//! satbench-pep --print-rules --port P [--mark M] [--route-table T] [--ipv6]
//! ```
//!
//! - `--placement`: at the `terminal` the outgoing leg faces the satellite,
//!   at the `gateway` the incoming one. `--satellite-leg` and
//!   `--terrestrial-leg` set each leg's TCP ([`settings`]:
//!   `cc=bbr,sndbuf=16M,rcvbuf=16M,nodelay,fastopen,maxseg=1400`); the
//!   kernel checks them at start-up (refused: exit 2 naming the flag).
//! - `--max-conns N` (default 1024): beyond N open connections, new ones are
//!   reset at accept and counted.
//! - `--idle-timeout-s S` (default 300, 0: none): a connection that moved
//!   no byte for S seconds is reset on both legs.
//! - `--buffer-size` (default 1M): each direction's pipe (or memory; 4K..64M);
//!   a larger pipe means fewer splice calls per byte.
//! - `--no-splice`: relay with read/write (for comparison).
//! - `--listen ADDR` (default 0.0.0.0): keep the default unless the TPROXY
//!   rule names an `--on-ip`.
//! - `--ipv6`: also take IPv6 connections (a second, IPv6-only listener on
//!   `[::]` at the same port; the outgoing leg then opens an IPv6
//!   connection from the client's address with `IPV6_TRANSPARENT`); with
//!   `--print-rules`, the rules for IPv6 too (`ip -6`, `ip6tables`, an
//!   `ip6` nft table of the same rules).
//!
//! # Rules (installed by the testbed, never by the PEP)
//!
//! `--print-rules` prints one JSON object ([`rules::RuleSet`]) of argument
//! lists: `routing` (both forms), then `iptables` or `nft`, and
//! `teardown.{routing,iptables,nft}`. For port 5000 and mark 1, table 100:
//!
//! ```text
//! ip rule add fwmark 1 lookup 100
//! ip route add local 0.0.0.0/0 dev lo table 100
//! # iptables form
//! iptables -w -t mangle -N SATBENCH_PEP
//! iptables -w -t mangle -A SATBENCH_PEP -p tcp -m socket --transparent -j MARK --set-mark 1
//! iptables -w -t mangle -A SATBENCH_PEP -p tcp -m socket --transparent -j ACCEPT
//! iptables -w -t mangle -A SATBENCH_PEP -p tcp -m addrtype --dst-type LOCAL -j RETURN
//! iptables -w -t mangle -A SATBENCH_PEP -p tcp -j TPROXY --on-port 5000 --tproxy-mark 1
//! iptables -w -t mangle -A PREROUTING -p tcp -j SATBENCH_PEP
//! # nft form
//! nft add table ip satbench_pep
//! nft add chain ip satbench_pep prerouting { type filter hook prerouting priority mangle ; policy accept ; }
//! nft add rule ip satbench_pep prerouting meta l4proto tcp socket transparent 1 meta mark set 1 accept
//! nft add rule ip satbench_pep prerouting meta l4proto tcp fib daddr type local accept
//! nft add rule ip satbench_pep prerouting meta l4proto tcp tproxy to :5000 meta mark set 1 accept
//! ```
//!
//! The socket match is what brings the outgoing leg's replies (addressed to
//! the client, not local) to the PEP instead of forwarding them on; it also
//! carries the accepted legs' later packets. TCP to the namespace's own
//! addresses is not intercepted (and a connection to the PEP's own port on
//! one of them is reset: relaying it would loop). The namespace also needs
//! `net.ipv4.ip_forward=1` (with `--ipv6`, `net.ipv6.conf.all.forwarding=1`
//! too), and `net.ipv4.tcp_fastopen=3` for Fast Open on the accepting leg
//! (the ready line warns otherwise; the setting covers both families).
//!
//! The initial congestion window is a route attribute: the testbed sets
//! `initcwnd` (and `initrwnd`) on the PEP namespace's routes; the PEP reports
//! each leg's window when its handshake was done (`init_cwnd`,
//! `init_rcv_wnd` in the log).
//!
//! # Output ([`record`])
//!
//! - stdout, once listening: `{"ready":true,...}` with the settings asked
//!   for and read back with `getsockopt` per leg, the namespace's relevant
//!   sysctls and warnings.
//! - `--log FILE`: `{"event":"start",...}` (the same object), one
//!   `{"event":"conn",...}` line per connection when it closes (both legs'
//!   addresses, accept and connect times in Unix ns, bytes each way, who
//!   closed first and how, each leg's end and `TCP_INFO` at close), and
//!   `{"event":"summary",...}` at exit.
//! - SIGTERM, SIGINT or SIGHUP: stop accepting, reset every open connection
//!   (logged with outcome `exit`), print `{"summary":true,...}`, exit 0.
//! - Exit 2: bad arguments, or settings the kernel refused, or a log that
//!   cannot be opened, with one line `satbench-pep: FLAG: MESSAGE` on
//!   stderr; exit 1: a system call failed at start-up (the line names it).
//!
//! # Tests
//!
//! Unit tests (the relay, buffers over socket pairs, arguments, settings,
//! rules, log lines): `cargo test --release -p satbench-pep`. End to end
//! over real namespaces (root): `cargo test --release -p satbench-pep --
//! --ignored --nocapture` (tests/netns.rs: client, PEP and server
//! namespaces, and a terminal and a gateway PEP in series; it prints
//! throughput, CPU per Gbit/s and the setup latency the PEP adds).
//!
//! # Modules
//!
//! - [`relay`]: one connection's state, sans-IO: half-close, reset, idle
//!   timeout, who closed first.
//! - [`buffer`]: a direction's buffer: pipe (splice) or memory.
//! - [`proxy`]: the event loop (mio) that drives the relays.
//! - [`sock`]: socket calls, options and their read-back, `TCP_INFO`.
//! - [`settings`]: per-leg settings and placement; [`args`]: the command line.
//! - [`rules`]: the rule set; [`record`]: the lines written; [`time`]: clocks.

pub mod args;
pub mod buffer;
pub mod proxy;
pub mod record;
pub mod relay;
pub mod rules;
pub mod settings;
pub mod sock;
pub mod time;

pub use proxy::{Config, Proxy};
pub use relay::Relay;
