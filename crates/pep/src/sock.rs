//! The socket calls of the PEP: the transparent listener, the transparent
//! outgoing connect, per-leg options and reading them back, `TCP_INFO`.
//! Errors name their call.

use crate::relay::Leg;
use crate::settings::LegSettings;
use serde::Serialize;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub use satbench_common::tcpinfo::{congestion, tcp_info, TcpInfo};

/// A failed system call, naming the call and its subject.
#[derive(Debug, thiserror::Error)]
#[error("{call}({what}): {source}")]
pub struct SockError {
    pub call: &'static str,
    pub what: String,
    #[source]
    pub source: io::Error,
}

impl SockError {
    fn new(call: &'static str, what: impl Into<String>, source: io::Error) -> SockError {
        SockError {
            call,
            what: what.into(),
            source,
        }
    }
}

/// A setting the kernel refused: the settings key and the call's error.
#[derive(Debug, thiserror::Error)]
#[error("{key}: the kernel refused it ({source})")]
pub struct OptionRefused {
    pub key: &'static str,
    #[source]
    pub source: SockError,
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn setsockopt_bytes(fd: RawFd, level: i32, opt: i32, v: &[u8]) -> io::Result<()> {
    // SAFETY: v is valid for v.len() bytes.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            v.as_ptr() as *const libc::c_void,
            v.len() as libc::socklen_t,
        )
    })
    .map(drop)
}

pub fn set_int(fd: RawFd, level: i32, opt: i32, v: i32) -> io::Result<()> {
    setsockopt_bytes(fd, level, opt, &v.to_ne_bytes())
}

pub fn get_int(fd: RawFd, level: i32, opt: i32) -> io::Result<i32> {
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v is valid for len bytes.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            level,
            opt,
            &mut v as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    })?;
    Ok(v)
}

/// A socket buffer size: the FORCE option (over `net.core.[rw]mem_max`,
/// needs CAP_NET_ADMIN), else the plain one (capped by the kernel).
fn set_buf(fd: RawFd, force: i32, plain: i32, n: u32) -> io::Result<()> {
    match set_int(fd, libc::SOL_SOCKET, force, n as i32) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            set_int(fd, libc::SOL_SOCKET, plain, n as i32)
        }
        other => other,
    }
}

/// The queue of pending Fast Open requests on the listener.
pub const FASTOPEN_QUEUE: i32 = 1024;

/// Apply a leg's settings to a socket (before `listen` or `connect`).
pub fn apply(fd: RawFd, s: &LegSettings, leg: Leg) -> Result<(), OptionRefused> {
    let refused = |key: &'static str, opt: &'static str| {
        move |e| OptionRefused {
            key,
            source: SockError::new("setsockopt", opt, e),
        }
    };
    if let Some(n) = s.sndbuf {
        set_buf(fd, libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, n)
            .map_err(refused("sndbuf", "SO_SNDBUF"))?;
    }
    if let Some(n) = s.rcvbuf {
        set_buf(fd, libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, n)
            .map_err(refused("rcvbuf", "SO_RCVBUF"))?;
    }
    if let Some(n) = s.maxseg {
        set_int(fd, libc::IPPROTO_TCP, libc::TCP_MAXSEG, n as i32)
            .map_err(refused("maxseg", "TCP_MAXSEG"))?;
    }
    if let Some(on) = s.nodelay {
        set_int(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, on as i32)
            .map_err(refused("nodelay", "TCP_NODELAY"))?;
    }
    if let Some(cc) = &s.cc {
        setsockopt_bytes(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, cc.as_bytes())
            .map_err(refused("cc", "TCP_CONGESTION"))?;
    }
    if let Some(on) = s.fastopen {
        match leg {
            Leg::In => set_int(
                fd,
                libc::IPPROTO_TCP,
                libc::TCP_FASTOPEN,
                if on { FASTOPEN_QUEUE } else { 0 },
            )
            .map_err(refused("fastopen", "TCP_FASTOPEN"))?,
            Leg::Out => set_int(fd, libc::IPPROTO_TCP, libc::TCP_FASTOPEN_CONNECT, on as i32)
                .map_err(refused("fastopen", "TCP_FASTOPEN_CONNECT"))?,
        }
    }
    Ok(())
}

/// The options in effect on a socket, read back with `getsockopt`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Readback {
    pub cc: Option<String>,
    /// As the kernel reports it (twice the size asked for, for its overhead).
    pub sndbuf: Option<i32>,
    pub rcvbuf: Option<i32>,
    pub nodelay: Option<bool>,
    /// `TCP_MAXSEG`: the size asked for, or the kernel's default before a connection.
    pub maxseg: Option<i32>,
    /// The accepting leg: the Fast Open queue length (0: off); the outgoing
    /// leg: `TCP_FASTOPEN_CONNECT` on or off.
    pub fastopen: Option<i32>,
    pub transparent: Option<bool>,
}

pub fn read_back(fd: RawFd, leg: Leg) -> Readback {
    let tcp = |opt| get_int(fd, libc::IPPROTO_TCP, opt).ok();
    Readback {
        cc: congestion(fd),
        sndbuf: get_int(fd, libc::SOL_SOCKET, libc::SO_SNDBUF).ok(),
        rcvbuf: get_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF).ok(),
        nodelay: tcp(libc::TCP_NODELAY).map(|v| v != 0),
        maxseg: tcp(libc::TCP_MAXSEG),
        fastopen: match leg {
            Leg::In => tcp(libc::TCP_FASTOPEN),
            Leg::Out => tcp(libc::TCP_FASTOPEN_CONNECT),
        },
        transparent: get_int(fd, libc::SOL_IP, libc::IP_TRANSPARENT)
            .ok()
            .map(|v| v != 0),
    }
}

fn tcp_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain syscall.
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: just opened, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is plain data; all-zero is valid.
    let mut s: libc::sockaddr_in = unsafe { zeroed() };
    s.sin_family = libc::AF_INET as libc::sa_family_t;
    s.sin_port = a.port().to_be();
    s.sin_addr.s_addr = u32::from(*a.ip()).to_be();
    s
}

fn from_sockaddr(s: &libc::sockaddr_in) -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
        u16::from_be(s.sin_port),
    )
}

const SOCKADDR_LEN: libc::socklen_t = size_of::<libc::sockaddr_in>() as libc::socklen_t;

fn bind(fd: RawFd, a: SocketAddrV4) -> io::Result<()> {
    let s = sockaddr(a);
    // SAFETY: s is a valid sockaddr_in.
    cvt(unsafe {
        libc::bind(
            fd,
            &s as *const libc::sockaddr_in as *const libc::sockaddr,
            SOCKADDR_LEN,
        )
    })
    .map(drop)
}

/// A socket's local (`getsockname`) or peer (`getpeername`) address.
fn addr(fd: RawFd, peer: bool) -> io::Result<SocketAddrV4> {
    // SAFETY: zeroed sockaddr_in is valid; len matches.
    let mut s: libc::sockaddr_in = unsafe { zeroed() };
    let mut len = SOCKADDR_LEN;
    let p = &mut s as *mut libc::sockaddr_in as *mut libc::sockaddr;
    // SAFETY: p is valid for len bytes.
    cvt(unsafe {
        if peer {
            libc::getpeername(fd, p, &mut len)
        } else {
            libc::getsockname(fd, p, &mut len)
        }
    })?;
    Ok(from_sockaddr(&s))
}

pub fn local_addr(fd: RawFd) -> io::Result<SocketAddrV4> {
    addr(fd, false)
}

pub fn peer_addr(fd: RawFd) -> io::Result<SocketAddrV4> {
    addr(fd, true)
}

/// Why the listener could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Sys(#[from] SockError),
    #[error(transparent)]
    Option(#[from] OptionRefused),
}

/// The transparent listener at `addr`, with the accepting leg's settings
/// (accepted sockets inherit them; the congestion control is set again on
/// each).
pub fn listen(addr: SocketAddrV4, s: &LegSettings) -> Result<OwnedFd, SetupError> {
    let what = addr.to_string();
    let fd = tcp_socket().map_err(|e| SockError::new("socket", &what, e))?;
    let raw = fd.as_raw_fd();
    set_int(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
        .map_err(|e| SockError::new("setsockopt", "SO_REUSEADDR", e))?;
    set_int(raw, libc::SOL_IP, libc::IP_TRANSPARENT, 1)
        .map_err(|e| SockError::new("setsockopt", "IP_TRANSPARENT", e))?;
    apply(raw, s, Leg::In)?;
    bind(raw, addr).map_err(|e| SockError::new("bind", &what, e))?;
    // SAFETY: plain syscall.
    cvt(unsafe { libc::listen(raw, libc::SOMAXCONN) })
        .map_err(|e| SockError::new("listen", &what, e))?;
    Ok(fd)
}

/// An outgoing socket with the outgoing leg's settings, not connected: the
/// settings checked against the kernel and read back at start-up.
pub fn probe_out(s: &LegSettings) -> Result<Readback, SetupError> {
    let fd = tcp_socket().map_err(|e| SockError::new("socket", "probe", e))?;
    set_int(fd.as_raw_fd(), libc::SOL_IP, libc::IP_TRANSPARENT, 1)
        .map_err(|e| SockError::new("setsockopt", "IP_TRANSPARENT", e))?;
    apply(fd.as_raw_fd(), s, Leg::Out)?;
    Ok(read_back(fd.as_raw_fd(), Leg::Out))
}

/// The next connection waiting on the listener, non-blocking.
pub fn accept(listener: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: null address pointers are allowed.
    let fd = cvt(unsafe {
        libc::accept4(
            listener,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    })?;
    // SAFETY: just accepted, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Where an outgoing `connect` stands after the call.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Connecting {
    /// `EINPROGRESS`: writable when the handshake is done.
    InProgress,
    /// Returned at once with `TCP_FASTOPEN_CONNECT`: the SYN leaves with the first write.
    Deferred,
    /// Returned at once without Fast Open: done.
    Done,
}

/// An outgoing connection to `dst` from `src` (the client's address, not
/// local: `IP_TRANSPARENT`). If the client's port cannot be had (in use, or
/// the 4-tuple is still in TIME_WAIT), the kernel picks one.
pub fn connect_out(
    src: SocketAddrV4,
    dst: SocketAddrV4,
    s: &LegSettings,
) -> io::Result<(OwnedFd, Connecting)> {
    let mut src = src;
    loop {
        let fd = tcp_socket()?;
        let raw = fd.as_raw_fd();
        set_int(raw, libc::SOL_IP, libc::IP_TRANSPARENT, 1)?;
        set_int(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        apply(raw, s, Leg::Out).map_err(|e| e.source.source)?;
        match bind(raw, src) {
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) && src.port() != 0 => {
                src.set_port(0);
                continue;
            }
            r => r?,
        }
        let d = sockaddr(dst);
        // SAFETY: d is a valid sockaddr_in.
        let r = unsafe {
            libc::connect(
                raw,
                &d as *const libc::sockaddr_in as *const libc::sockaddr,
                SOCKADDR_LEN,
            )
        };
        if r == 0 {
            let c = if s.fastopen == Some(true) {
                Connecting::Deferred
            } else {
                Connecting::Done
            };
            return Ok((fd, c));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINPROGRESS) => return Ok((fd, Connecting::InProgress)),
            Some(libc::EADDRNOTAVAIL) if src.port() != 0 => src.set_port(0),
            _ => return Err(e),
        }
    }
}

/// Reset the connection: `SO_LINGER` 0, then close.
pub fn abort(fd: OwnedFd) {
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: l is a valid linger struct. A failure leaves a plain close.
    unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    drop(fd);
}

/// A `send` of nothing: on a deferred Fast Open connect, the SYN leaves
/// (without data). `EINPROGRESS` is success.
pub fn send_nothing(fd: RawFd) -> io::Result<()> {
    let nothing = [0u8; 1];
    // SAFETY: a zero-length send from a valid buffer.
    let r = unsafe {
        libc::send(
            fd,
            nothing.as_ptr() as *const libc::c_void,
            0,
            libc::MSG_NOSIGNAL,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    Ok(())
}

pub fn shutdown_write(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain syscall.
    cvt(unsafe { libc::shutdown(fd, libc::SHUT_WR) }).map(drop)
}

/// The socket's pending error (`SO_ERROR`, which clears it); 0: none.
pub fn take_error(fd: RawFd) -> i32 {
    get_int(fd, libc::SOL_SOCKET, libc::SO_ERROR).unwrap_or(0)
}

/// `TCP_SYN_SENT` in `tcpi_state`.
pub const TCP_SYN_SENT: u8 = 2;

/// Raise the soft limit on open files to at least `need` (up to the hard
/// limit); the limit in effect.
pub fn raise_nofile(need: u64) -> u64 {
    // SAFETY: plain data.
    let mut l: libc::rlimit = unsafe { zeroed() };
    // SAFETY: l is a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) } != 0 {
        return 0;
    }
    if l.rlim_cur < need {
        l.rlim_cur = need.min(l.rlim_max);
        // SAFETY: as above.
        unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &l) };
        // SAFETY: as above.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut l) };
    }
    l.rlim_cur
}

/// The IPv4 addresses of this namespace's interfaces.
pub fn local_ipv4() -> Vec<Ipv4Addr> {
    let mut out = vec![Ipv4Addr::LOCALHOST];
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: ifa receives a list freed below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return out;
    }
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: p walks the list getifaddrs returned.
        let i = unsafe { &*p };
        if !i.ifa_addr.is_null()
            // SAFETY: ifa_addr points to a sockaddr.
            && unsafe { (*i.ifa_addr).sa_family } as i32 == libc::AF_INET
        {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let s = unsafe { &*(i.ifa_addr as *const libc::sockaddr_in) };
            out.push(*from_sockaddr(s).ip());
        }
        p = i.ifa_next;
    }
    // SAFETY: the list from getifaddrs.
    unsafe { libc::freeifaddrs(ifa) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_options_apply_and_read_back() {
        let s = LegSettings::parse("cc=reno,nodelay,sndbuf=64K,maxseg=1200").unwrap();
        let fd = tcp_socket().unwrap();
        apply(fd.as_raw_fd(), &s, Leg::Out).unwrap();
        let r = read_back(fd.as_raw_fd(), Leg::Out);
        assert_eq!(r.cc.as_deref(), Some("reno"));
        assert_eq!(r.nodelay, Some(true));
        assert_eq!(r.sndbuf, Some(128 << 10));
        assert_eq!(r.maxseg, Some(1200));
        assert_eq!(r.fastopen, Some(0));
        let bad = LegSettings::parse("cc=nosuchcc").unwrap();
        let e = apply(fd.as_raw_fd(), &bad, Leg::Out).unwrap_err();
        assert_eq!(e.key, "cc");
    }
}
