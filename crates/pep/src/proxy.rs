//! The event loop: one thread, epoll (mio, edge-triggered) over the
//! listener, a signalfd and both legs of every connection. It accepts,
//! connects, and carries out what each [`Relay`] asks for; every decision
//! about a connection is the relay's.
//!
//! Fairness: a connection gets at most [`BUDGET`] actions per turn, then
//! waits for the others (readiness is edge-triggered, so it is put on a list
//! to resume without a new event).

use crate::buffer::{Buffer, Relaying};
use crate::record::{
    line, ConnRecord, LegFacts, LegReady, Legs, Ready, Summary, Sysctls, TcpInfoRecord, Times,
};
use crate::relay::{Action, Closing, Dir, Event, Leg, OutState, Relay};
use crate::settings::{LegSettings, Placement};
use crate::sock::{self, Connecting, OptionRefused, SetupError, SockError};
use crate::time::{self, Instant};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::Duration;

/// Actions per connection per turn of the loop.
pub const BUDGET: usize = 64;

/// File descriptors per connection: two sockets, two pipes.
const FDS_PER_CONN: u64 = 6;

const LISTENER: Token = Token(usize::MAX - 1);
const SIGNALS: Token = Token(usize::MAX - 2);
const LISTENER6: Token = Token(usize::MAX - 3);

/// What the PEP runs with. All defaults are here.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Address and port of the transparent listener (TPROXY's `--on-port`).
    pub listen: SocketAddrV4,
    /// Also take IPv6 connections: a second listener on `[::]` at the same port.
    pub ipv6: bool,
    pub placement: Placement,
    /// Settings of the leg that crosses the satellite link.
    pub satellite: LegSettings,
    /// Settings of the other leg.
    pub terrestrial: LegSettings,
    /// Connections relayed at once; more are reset at accept.
    pub max_conns: usize,
    /// Reset a connection after this long without a byte either way.
    pub idle_timeout: Option<Duration>,
    /// One JSON line per connection.
    pub log: Option<PathBuf>,
    /// Each direction's buffer (pipe size), bytes.
    pub buffer_size: usize,
    /// Relay with splice(2); off: read/write.
    pub splice: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
            ipv6: false,
            placement: Placement::Terminal,
            satellite: LegSettings::default(),
            terrestrial: LegSettings::default(),
            max_conns: 1024,
            idle_timeout: Some(Duration::from_secs(300)),
            log: None,
            buffer_size: 1 << 20,
            splice: true,
        }
    }
}

impl Config {
    /// The settings of a leg, by what it faces here.
    pub fn leg(&self, leg: Leg) -> &LegSettings {
        if leg == self.placement.satellite_leg() {
            &self.satellite
        } else {
            &self.terrestrial
        }
    }

    /// The flag that sets a leg's settings.
    pub fn leg_flag(&self, leg: Leg) -> &'static str {
        if leg == self.placement.satellite_leg() {
            "--satellite-leg"
        } else {
            "--terrestrial-leg"
        }
    }
}

/// Why the PEP could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The kernel refused a leg's setting (a usage error: exit 2).
    #[error("{flag}: {source}")]
    Setting {
        flag: &'static str,
        source: OptionRefused,
    },
    /// The log cannot be opened (exit 2).
    #[error("--log: {path}: {source}")]
    Log { path: String, source: io::Error },
    /// Not enough file descriptors for `--max-conns` (exit 2).
    #[error("--max-conns: {conns} connections need {need} open files, the limit is {limit}")]
    Files { conns: usize, need: u64, limit: u64 },
    /// A system call failed (exit 1).
    #[error(transparent)]
    Sys(#[from] SockError),
}

impl StartError {
    pub fn exit_code(&self) -> i32 {
        match self {
            StartError::Sys(_) => 1,
            _ => 2,
        }
    }
}

/// One relayed connection.
struct Conn {
    id: u64,
    relay: Relay,
    fds: [OwnedFd; 2],
    bufs: [Relaying; 2],
    legs: [LegFacts; 2],
    times: Times,
    /// Both buffers started as pipes.
    spliced: bool,
}

/// How a connection's turn ended.
enum Turn {
    /// The relay waits for readiness or its timeout.
    Waiting,
    /// Out of budget with more to do.
    Budget,
    Close(Closing),
}

impl Conn {
    /// Carry out what the relay asks, up to the budget.
    fn act(&mut self, now: Instant) -> Turn {
        for _ in 0..BUDGET {
            let Some(a) = self.relay.poll_action() else {
                return Turn::Waiting;
            };
            let ev = match a {
                Action::Read { dir, max } => {
                    let src = self.fds[dir.src().index()].as_raw_fd();
                    match self.bufs[dir.index()].fill(src, max) {
                        Ok(n) => Event::Read(dir, n),
                        Err(e) => error_event(dir.src(), &e, Event::ReadBlocked(dir)),
                    }
                }
                Action::Write { dir, len } => {
                    let dst = self.fds[dir.dst().index()].as_raw_fd();
                    match self.bufs[dir.index()].drain(dst, len) {
                        Ok(n) => Event::Wrote(dir, n),
                        Err(e) => error_event(dir.dst(), &e, Event::WriteBlocked(dir)),
                    }
                }
                Action::ShutdownWrite(leg) => {
                    match sock::shutdown_write(self.fds[leg.index()].as_raw_fd()) {
                        Ok(()) => continue,
                        Err(e) => errno_event(leg, e.raw_os_error().unwrap_or(0)),
                    }
                }
                Action::SendSyn => match sock::send_nothing(self.fds[1].as_raw_fd()) {
                    Ok(()) => continue,
                    Err(e) => error_event(Leg::Out, &e, Event::WriteBlocked(Dir::Up)),
                },
                Action::Close(how) => return Turn::Close(how),
            };
            self.relay.handle(now, ev);
        }
        Turn::Budget
    }
}

/// The PEP: a listener and its connections.
pub struct Proxy {
    cfg: Config,
    poll: Poll,
    listener: Option<OwnedFd>,
    /// The IPv6 listener (`--ipv6`).
    listener6: Option<OwnedFd>,
    signals: OwnedFd,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    open: usize,
    next_id: u64,
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    again: Vec<(usize, u64)>,
    /// Accept failed for want of files or memory: try again soon.
    accept_retry: bool,
    log: Option<File>,
    local_ips: Vec<IpAddr>,
    stats: Summary,
    started: Instant,
    ready: Ready,
}

fn read_sysctl(name: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/sys/{}", name.replace('.', "/")))
        .ok()
        .map(|s| s.trim().to_string())
}

/// Block the exit signals for this thread (and those it starts) and read
/// them from a signalfd instead; ignore SIGPIPE (a reset peer is an error
/// return, not a signal).
fn signal_fd() -> Result<OwnedFd, SockError> {
    // SAFETY: sigset operations on a local set; signal() with SIG_IGN.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        let fd = libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
        if fd < 0 {
            return Err(SockError {
                call: "signalfd",
                what: "SIGTERM, SIGINT, SIGHUP".into(),
                source: io::Error::last_os_error(),
            });
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

fn register(poll: &Poll, fd: RawFd, token: Token, what: &str) -> Result<(), SockError> {
    poll.registry()
        .register(
            &mut SourceFd(&fd),
            token,
            Interest::READABLE | Interest::WRITABLE,
        )
        .map_err(|source| SockError {
            call: "epoll_ctl",
            what: what.into(),
            source,
        })
}

/// The relay's event for a failed call on `leg`; `blocked` for EAGAIN.
fn error_event(leg: Leg, e: &io::Error, blocked: Event) -> Event {
    match e.raw_os_error() {
        Some(libc::EAGAIN | libc::EINPROGRESS | libc::EALREADY | libc::EINTR) => blocked,
        Some(errno) => errno_event(leg, errno),
        None => Event::Failed(leg, 0),
    }
}

/// A socket error as the relay sees it: resets (a refused connect is the
/// server's reset) or failures.
fn errno_event(leg: Leg, errno: i32) -> Event {
    match errno {
        libc::ECONNRESET | libc::EPIPE | libc::ECONNREFUSED => Event::Reset(leg),
        e => Event::Failed(leg, e),
    }
}

/// The outgoing leg's handshake is done (ESTABLISHED, or CLOSE_WAIT if the
/// server already sent its FIN).
fn handshake_done(info: &sock::TcpInfo) -> bool {
    matches!(info.state, 1 | 8)
}

fn tcp_info_record(fd: RawFd) -> Option<TcpInfoRecord> {
    sock::tcp_info(fd).map(|i| TcpInfoRecord::new(&i, sock::congestion(fd)))
}

impl Proxy {
    /// Listen, check each leg's settings against the kernel, open the log;
    /// the ready line's content comes back with the proxy.
    pub fn bind(cfg: Config) -> Result<Proxy, StartError> {
        let need = cfg.max_conns as u64 * FDS_PER_CONN + 64;
        let limit = sock::raise_nofile(need);
        if limit < need {
            return Err(StartError::Files {
                conns: cfg.max_conns,
                need,
                limit,
            });
        }
        let setting = |leg: Leg| {
            let flag = cfg.leg_flag(leg);
            move |e: SetupError| match e {
                SetupError::Option(source) => StartError::Setting { flag, source },
                SetupError::Sys(s) => StartError::Sys(s),
            }
        };
        let listener =
            sock::listen(SocketAddr::V4(cfg.listen), cfg.leg(Leg::In)).map_err(setting(Leg::In))?;
        let listen6 = SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, cfg.listen.port(), 0, 0);
        let listener6 = if cfg.ipv6 {
            Some(
                sock::listen(SocketAddr::V6(listen6), cfg.leg(Leg::In))
                    .map_err(setting(Leg::In))?,
            )
        } else {
            None
        };
        let out_back = sock::probe_out(cfg.leg(Leg::Out)).map_err(setting(Leg::Out))?;
        let in_back = sock::read_back(listener.as_raw_fd(), Leg::In);
        let log = match &cfg.log {
            Some(p) => Some(File::create(p).map_err(|source| StartError::Log {
                path: p.display().to_string(),
                source,
            })?),
            None => None,
        };
        let poll = Poll::new().map_err(|source| SockError {
            call: "epoll_create",
            what: String::new(),
            source,
        })?;
        let signals = signal_fd()?;
        register(&poll, listener.as_raw_fd(), LISTENER, "listener")?;
        if let Some(l) = &listener6 {
            register(&poll, l.as_raw_fd(), LISTENER6, "IPv6 listener")?;
        }
        register(&poll, signals.as_raw_fd(), SIGNALS, "signalfd")?;
        let sysctl = Sysctls {
            ip_forward: read_sysctl("net.ipv4.ip_forward").and_then(|s| s.parse().ok()),
            ipv6_forwarding: if cfg.ipv6 {
                read_sysctl("net.ipv6.conf.all.forwarding").and_then(|s| s.parse().ok())
            } else {
                None
            },
            tcp_fastopen: read_sysctl("net.ipv4.tcp_fastopen").and_then(|s| s.parse().ok()),
            tcp_congestion_control: read_sysctl("net.ipv4.tcp_congestion_control"),
        };
        let mut warnings = Vec::new();
        let tfo = sysctl.tcp_fastopen.unwrap_or(0);
        if cfg.leg(Leg::In).fastopen == Some(true) && tfo & 2 == 0 {
            warnings.push(format!(
                "{}: fastopen on the accepting leg needs net.ipv4.tcp_fastopen with bit 2 (it is {tfo})",
                cfg.leg_flag(Leg::In)
            ));
        }
        if cfg.leg(Leg::Out).fastopen == Some(true) && tfo & 1 == 0 {
            warnings.push(format!(
                "{}: fastopen on the outgoing leg needs net.ipv4.tcp_fastopen with bit 1 (it is {tfo})",
                cfg.leg_flag(Leg::Out)
            ));
        }
        if sysctl.ip_forward == Some(0) {
            warnings
                .push("net.ipv4.ip_forward is 0: what is not intercepted is not forwarded".into());
        }
        if sysctl.ipv6_forwarding == Some(0) {
            warnings.push(
                "net.ipv6.conf.all.forwarding is 0: IPv6 that is not intercepted is not forwarded"
                    .into(),
            );
        }
        // The buffers as the kernel makes them.
        let probe = Relaying::new(cfg.buffer_size, cfg.splice);
        let started = time::monotonic();
        let ready = Ready {
            event: None,
            ready: Some(true),
            version: env!("CARGO_PKG_VERSION"),
            pid: std::process::id(),
            start_unix_ns: time::unix_ns(),
            listen: cfg.listen.to_string(),
            listen6: listener6.as_ref().map(|_| listen6.to_string()),
            port: cfg.listen.port(),
            placement: cfg.placement,
            max_conns: cfg.max_conns,
            idle_timeout_s: cfg.idle_timeout.map(|d| d.as_secs_f64()),
            log: cfg.log.as_ref().map(|p| p.display().to_string()),
            splice: probe.is_pipe(),
            buffer_bytes: probe.capacity(),
            nofile_limit: limit,
            legs: Legs {
                in_leg: LegReady {
                    faces: cfg.placement.face(Leg::In),
                    requested: cfg.leg(Leg::In).clone(),
                    effective: in_back,
                },
                out: LegReady {
                    faces: cfg.placement.face(Leg::Out),
                    requested: cfg.leg(Leg::Out).clone(),
                    effective: out_back,
                },
            },
            sysctl,
            warnings,
        };
        let mut p = Proxy {
            cfg,
            poll,
            listener: Some(listener),
            listener6,
            signals,
            conns: Vec::new(),
            free: Vec::new(),
            open: 0,
            next_id: 0,
            timers: BinaryHeap::new(),
            again: Vec::new(),
            accept_retry: false,
            log,
            local_ips: sock::local_ips(),
            stats: Summary::default(),
            started,
            ready,
        };
        let start = p.ready.as_start();
        p.write_log(&line(&start));
        Ok(p)
    }

    /// The ready line's object.
    pub fn ready(&self) -> &Ready {
        &self.ready
    }

    fn write_log(&mut self, s: &str) {
        if let Some(f) = &mut self.log {
            if f.write_all(s.as_bytes()).is_err() {
                self.stats.log_errors += 1;
            }
        }
    }

    /// Relay until SIGTERM, SIGINT or SIGHUP; then reset what is open, log
    /// it, and return the summary (also the log's last line).
    pub fn run(mut self) -> io::Result<Summary> {
        let mut events = Events::with_capacity(1024);
        loop {
            let now = time::monotonic();
            let timeout = if !self.again.is_empty() {
                Some(Duration::ZERO)
            } else if self.accept_retry {
                Some(Duration::from_millis(10))
            } else {
                self.timers.peek().map(|Reverse((t, _, _))| *t - now)
            };
            if let Err(e) = self.poll.poll(&mut events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            let now = time::monotonic();
            let (mut accept, mut stop) = (self.accept_retry, false);
            for ev in events.iter() {
                match ev.token() {
                    LISTENER | LISTENER6 => accept = true,
                    SIGNALS => stop = true,
                    Token(t) => {
                        let leg = if t & 1 == 0 { Leg::In } else { Leg::Out };
                        self.on_event(t >> 1, leg, ev, now);
                    }
                }
            }
            for (slot, id) in std::mem::take(&mut self.again) {
                if self.valid(slot, id) {
                    self.drive(slot, now);
                }
            }
            self.expire(now);
            if stop {
                break;
            }
            if accept {
                self.accept_all(now);
            }
        }
        Ok(self.shut_down())
    }

    fn valid(&self, slot: usize, id: u64) -> bool {
        matches!(self.conns.get(slot), Some(Some(c)) if c.id == id)
    }

    /// Readiness on one leg: errors and the handshake first, then the edges.
    fn on_event(&mut self, slot: usize, leg: Leg, ev: &mio::event::Event, now: Instant) {
        let Some(Some(c)) = self.conns.get_mut(slot) else {
            return;
        };
        let fd = c.fds[leg.index()].as_raw_fd();
        if ev.is_error() {
            let e = sock::take_error(fd);
            if e != 0 {
                c.relay.handle(now, errno_event(leg, e));
            }
        }
        if leg == Leg::Out && c.relay.out_state() != OutState::Connected {
            if let Some(info) = sock::tcp_info(fd).filter(handshake_done) {
                c.relay.handle(now, Event::Connected);
                c.times.connect = Some(time::unix_ns());
                c.legs[1].init = Some((info.snd_cwnd, info.rcv_wnd));
            }
        }
        if ev.is_readable() || ev.is_read_closed() || ev.is_error() {
            c.relay.handle(now, Event::Readable(leg));
        }
        if ev.is_writable() || ev.is_write_closed() {
            c.relay.handle(now, Event::Writable(leg));
        }
        self.drive(slot, now);
    }

    /// Carry out what the relay asks, up to the budget.
    fn drive(&mut self, slot: usize, now: Instant) {
        let Some(Some(c)) = self.conns.get_mut(slot) else {
            return;
        };
        match c.act(now) {
            Turn::Waiting => {}
            Turn::Budget => self.again.push((slot, c.id)),
            Turn::Close(how) => self.close(slot, how),
        }
    }

    /// Idle timeouts due by `now`.
    fn expire(&mut self, now: Instant) {
        while let Some(&Reverse((t, slot, id))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(Some(c)) = self.conns.get_mut(slot) else {
                continue;
            };
            if c.id != id {
                continue;
            }
            match c.relay.poll_timeout() {
                Some(d) if d <= now => {
                    c.relay.handle_timeout(now);
                    self.drive(slot, now);
                    // The next deadline (a deferred SYN sent, the idle one).
                    if let Some(Some(c)) = self.conns.get(slot) {
                        if let Some(t) = c.relay.poll_timeout().filter(|_| c.id == id) {
                            self.timers.push(Reverse((t, slot, id)));
                        }
                    }
                }
                Some(d) => self.timers.push(Reverse((d, slot, id))),
                None => {}
            }
        }
    }

    /// Take every waiting connection of each listener: refuse it (over the
    /// cap, or to ourselves) or relay it.
    fn accept_all(&mut self, now: Instant) {
        self.accept_retry = false;
        let listeners: Vec<RawFd> = [self.listener.as_ref(), self.listener6.as_ref()]
            .into_iter()
            .flatten()
            .map(|l| l.as_raw_fd())
            .collect();
        for listener in listeners {
            self.accept_from(listener, now);
        }
    }

    fn accept_from(&mut self, listener: RawFd, now: Instant) {
        loop {
            let fd = match sock::accept(listener) {
                Ok(fd) => fd,
                Err(e) => match e.raw_os_error() {
                    Some(libc::EAGAIN) => return,
                    Some(libc::ECONNABORTED | libc::EINTR | libc::EPROTO) => continue,
                    _ => {
                        // Out of files or memory: the backlog stays; retry soon.
                        self.stats.accept_errors += 1;
                        self.accept_retry = true;
                        return;
                    }
                },
            };
            if self.open >= self.cfg.max_conns {
                sock::abort(fd);
                self.stats.refused_cap += 1;
                continue;
            }
            let (Ok(orig_dst), Ok(client)) = (
                sock::local_addr(fd.as_raw_fd()),
                sock::peer_addr(fd.as_raw_fd()),
            ) else {
                continue;
            };
            if orig_dst.port() == self.cfg.listen.port() && self.local_ips.contains(&orig_dst.ip())
            {
                sock::abort(fd);
                self.stats.refused_local += 1;
                continue;
            }
            self.start_conn(fd, client, orig_dst, now);
        }
    }

    fn start_conn(&mut self, in_fd: OwnedFd, client: SocketAddr, dst: SocketAddr, now: Instant) {
        self.stats.accepted += 1;
        let id = self.next_id;
        self.next_id += 1;
        let accept_ns = time::unix_ns();
        let raw_in = in_fd.as_raw_fd();
        // Accepted sockets inherit the listener's buffers, MSS, Fast Open
        // and Nagle settings; the congestion control is set again here.
        if let Some(cc) = &self.cfg.leg(Leg::In).cc {
            let s = LegSettings {
                cc: Some(cc.clone()),
                ..LegSettings::default()
            };
            let _ = sock::apply(raw_in, &s, Leg::In);
        }
        let in_init = sock::tcp_info(raw_in).map(|i| (i.snd_cwnd, i.rcv_wnd));
        let in_facts = LegFacts {
            local: Some(dst),
            peer: Some(client),
            init: in_init,
            tcp_info: None,
        };
        let mut relay = Relay::new(now, [0, 0], self.cfg.idle_timeout);
        let (out_fd, connecting) = match sock::connect_out(client, dst, self.cfg.leg(Leg::Out)) {
            Ok(x) => x,
            Err(e) => {
                // No outgoing socket: reset the client and log it at once.
                relay.handle(now, errno_event(Leg::Out, e.raw_os_error().unwrap_or(0)));
                let _ = relay.poll_action();
                let mut in_facts = in_facts;
                in_facts.tcp_info = tcp_info_record(raw_in);
                let out_facts = LegFacts {
                    peer: Some(dst),
                    ..LegFacts::default()
                };
                sock::abort(in_fd);
                let times = Times {
                    accept: accept_ns,
                    connect: None,
                    close: time::unix_ns(),
                };
                let rec = ConnRecord::new(
                    id,
                    &relay,
                    self.cfg.placement,
                    [&in_facts, &out_facts],
                    times,
                    false,
                );
                self.stats.count(&rec);
                self.write_log(&line(&rec));
                return;
            }
        };
        let out_local = sock::local_addr(out_fd.as_raw_fd()).ok();
        let bufs = [
            Relaying::new(self.cfg.buffer_size, self.cfg.splice),
            Relaying::new(self.cfg.buffer_size, self.cfg.splice),
        ];
        relay = Relay::new(
            now,
            [bufs[0].capacity(), bufs[1].capacity()],
            self.cfg.idle_timeout,
        );
        let mut times = Times {
            accept: accept_ns,
            connect: None,
            close: 0,
        };
        let mut out_facts = LegFacts {
            local: out_local,
            peer: Some(dst),
            init: None,
            tcp_info: None,
        };
        match connecting {
            Connecting::InProgress => {}
            Connecting::Deferred => relay.handle(now, Event::ConnectDeferred),
            Connecting::Done => {
                relay.handle(now, Event::Connected);
                times.connect = Some(time::unix_ns());
                out_facts.init =
                    sock::tcp_info(out_fd.as_raw_fd()).map(|i| (i.snd_cwnd, i.rcv_wnd));
            }
        }
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        let spliced = bufs.iter().all(Relaying::is_pipe);
        for (leg, fd) in [(Leg::In, &in_fd), (Leg::Out, &out_fd)] {
            // A failed registration leaves the leg without events: the idle
            // timeout ends it.
            let _ = register(
                &self.poll,
                fd.as_raw_fd(),
                Token(slot << 1 | leg.index()),
                "leg",
            );
        }
        if let Some(t) = relay.poll_timeout() {
            self.timers.push(Reverse((t, slot, id)));
        }
        self.conns[slot] = Some(Conn {
            id,
            relay,
            fds: [in_fd, out_fd],
            bufs,
            legs: [in_facts, out_facts],
            times,
            spliced,
        });
        self.open += 1;
    }

    /// Close both legs as the relay decided, and log the connection.
    fn close(&mut self, slot: usize, how: Closing) {
        let Some(mut c) = self.conns[slot].take() else {
            return;
        };
        self.free.push(slot);
        self.open -= 1;
        for leg in Leg::BOTH {
            c.legs[leg.index()].tcp_info = tcp_info_record(c.fds[leg.index()].as_raw_fd());
        }
        c.times.close = time::unix_ns();
        let fallbacks = c.bufs.iter().filter(|b| !b.is_pipe()).count() as u64;
        let splice_end = c.spliced && fallbacks == 0;
        if c.spliced {
            self.stats.splice_fallbacks += fallbacks;
        }
        let rec = ConnRecord::new(
            c.id,
            &c.relay,
            self.cfg.placement,
            [&c.legs[0], &c.legs[1]],
            c.times,
            splice_end,
        );
        self.stats.count(&rec);
        self.write_log(&line(&rec));
        let [a, b] = c.fds;
        for fd in [a, b] {
            match how {
                Closing::Graceful => drop(fd),
                Closing::Reset => sock::abort(fd),
            }
        }
    }

    /// Stop listening, reset every open connection (logging each), and sum up.
    fn shut_down(mut self) -> Summary {
        self.listener = None;
        self.listener6 = None;
        // SAFETY: reading one siginfo from our non-blocking signalfd.
        unsafe {
            let mut info: libc::signalfd_siginfo = std::mem::zeroed();
            libc::read(
                self.signals.as_raw_fd(),
                &mut info as *mut libc::signalfd_siginfo as *mut libc::c_void,
                std::mem::size_of::<libc::signalfd_siginfo>(),
            );
        }
        for slot in 0..self.conns.len() {
            if let Some(c) = self.conns[slot].as_mut() {
                c.relay.abort();
                while let Some(Some(c)) = self.conns.get_mut(slot) {
                    match c.relay.poll_action() {
                        Some(Action::Close(how)) => self.close(slot, how),
                        Some(_) => {}
                        None => break,
                    }
                }
            }
        }
        let mut s = self.stats.clone();
        s.uptime_s = (time::monotonic() - self.started).as_secs_f64();
        let log = Summary {
            event: Some("summary"),
            ..s.clone()
        };
        self.write_log(&line(&log));
        s.summary = Some(true);
        s
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open
    }
}
