//! The socket calls of the PEP: the transparent listener, the transparent
//! outgoing connect, per-leg options and reading them back, `TCP_INFO`.
//! IPv4 and IPv6 alike (a socket's family is its address's). Errors name
//! their call.

use crate::relay::Leg;
use crate::settings::LegSettings;
use serde::Serialize;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
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
        transparent: transparent_of(fd).map(|v| v != 0),
    }
}

/// `IP_TRANSPARENT` of an IPv4 socket, `IPV6_TRANSPARENT` of an IPv6 one.
fn transparent_of(fd: RawFd) -> Option<i32> {
    if get_int(fd, libc::SOL_SOCKET, libc::SO_DOMAIN).ok() == Some(libc::AF_INET6) {
        get_int(fd, libc::SOL_IPV6, libc::IPV6_TRANSPARENT).ok()
    } else {
        get_int(fd, libc::SOL_IP, libc::IP_TRANSPARENT).ok()
    }
}

/// Make a socket of `a`'s family transparent: bind to an address not local, accept for one.
fn set_transparent(fd: RawFd, a: &SocketAddr) -> Result<(), SockError> {
    match a {
        SocketAddr::V4(_) => set_int(fd, libc::SOL_IP, libc::IP_TRANSPARENT, 1)
            .map_err(|e| SockError::new("setsockopt", "IP_TRANSPARENT", e)),
        SocketAddr::V6(_) => set_int(fd, libc::SOL_IPV6, libc::IPV6_TRANSPARENT, 1)
            .map_err(|e| SockError::new("setsockopt", "IPV6_TRANSPARENT", e)),
    }
}

fn tcp_socket(a: &SocketAddr) -> io::Result<OwnedFd> {
    let domain = match a {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: plain syscall.
    let fd = cvt(unsafe {
        libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: just opened, owned here.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An address as the kernel takes it: the storage and its length.
fn sockaddr(a: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    let mut st: libc::sockaddr_storage = unsafe { zeroed() };
    match a {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            let s =
                unsafe { &mut *(&mut st as *mut libc::sockaddr_storage as *mut libc::sockaddr_in) };
            s.sin_family = libc::AF_INET as libc::sa_family_t;
            s.sin_port = a.port().to_be();
            s.sin_addr.s_addr = u32::from(*a.ip()).to_be();
            (st, size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above.
            let s = unsafe {
                &mut *(&mut st as *mut libc::sockaddr_storage as *mut libc::sockaddr_in6)
            };
            s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            s.sin6_port = a.port().to_be();
            s.sin6_addr.s6_addr = a.ip().octets();
            s.sin6_scope_id = a.scope_id();
            (st, size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

/// The address the kernel gave back (None: another family than IPv4 or IPv6).
fn from_sockaddr(st: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match st.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let s = unsafe { &*(st as *const libc::sockaddr_storage as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(s.sin_addr.s_addr)),
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            let s = unsafe { &*(st as *const libc::sockaddr_storage as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(s.sin6_addr.s6_addr),
                u16::from_be(s.sin6_port),
                0,
                s.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn bind(fd: RawFd, a: &SocketAddr) -> io::Result<()> {
    let (s, len) = sockaddr(a);
    // SAFETY: s is a valid sockaddr of len bytes.
    cvt(unsafe {
        libc::bind(
            fd,
            &s as *const libc::sockaddr_storage as *const libc::sockaddr,
            len,
        )
    })
    .map(drop)
}

/// A socket's local (`getsockname`) or peer (`getpeername`) address.
fn addr(fd: RawFd, peer: bool) -> io::Result<SocketAddr> {
    // SAFETY: zeroed sockaddr_storage is valid; len matches.
    let mut s: libc::sockaddr_storage = unsafe { zeroed() };
    let mut len = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    let p = &mut s as *mut libc::sockaddr_storage as *mut libc::sockaddr;
    // SAFETY: p is valid for len bytes.
    cvt(unsafe {
        if peer {
            libc::getpeername(fd, p, &mut len)
        } else {
            libc::getsockname(fd, p, &mut len)
        }
    })?;
    from_sockaddr(&s)
        .ok_or_else(|| io::Error::other("an address of another family than IPv4 or IPv6"))
}

pub fn local_addr(fd: RawFd) -> io::Result<SocketAddr> {
    addr(fd, false)
}

pub fn peer_addr(fd: RawFd) -> io::Result<SocketAddr> {
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
/// each). An IPv6 listener takes IPv6 only (`IPV6_V6ONLY`): IPv4 has its own.
pub fn listen(addr: SocketAddr, s: &LegSettings) -> Result<OwnedFd, SetupError> {
    let what = addr.to_string();
    let fd = tcp_socket(&addr).map_err(|e| SockError::new("socket", &what, e))?;
    let raw = fd.as_raw_fd();
    set_int(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
        .map_err(|e| SockError::new("setsockopt", "SO_REUSEADDR", e))?;
    if addr.is_ipv6() {
        set_int(raw, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 1)
            .map_err(|e| SockError::new("setsockopt", "IPV6_V6ONLY", e))?;
    }
    set_transparent(raw, &addr)?;
    apply(raw, s, Leg::In)?;
    bind(raw, &addr).map_err(|e| SockError::new("bind", &what, e))?;
    // SAFETY: plain syscall.
    cvt(unsafe { libc::listen(raw, libc::SOMAXCONN) })
        .map_err(|e| SockError::new("listen", &what, e))?;
    Ok(fd)
}

/// An outgoing socket with the outgoing leg's settings, not connected: the
/// settings checked against the kernel and read back at start-up.
pub fn probe_out(s: &LegSettings) -> Result<Readback, SetupError> {
    let any = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));
    let fd = tcp_socket(&any).map_err(|e| SockError::new("socket", "probe", e))?;
    set_transparent(fd.as_raw_fd(), &any)?;
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
/// local: `IP_TRANSPARENT`, or `IPV6_TRANSPARENT`; both of one family). If
/// the client's port cannot be had (in use, or the 4-tuple is still in
/// TIME_WAIT), the kernel picks one.
pub fn connect_out(
    src: SocketAddr,
    dst: SocketAddr,
    s: &LegSettings,
) -> io::Result<(OwnedFd, Connecting)> {
    let mut src = src;
    loop {
        let fd = tcp_socket(&dst)?;
        let raw = fd.as_raw_fd();
        set_transparent(raw, &dst).map_err(|e| e.source)?;
        set_int(raw, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
        apply(raw, s, Leg::Out).map_err(|e| e.source.source)?;
        match bind(raw, &src) {
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) && src.port() != 0 => {
                src.set_port(0);
                continue;
            }
            r => r?,
        }
        let (d, len) = sockaddr(&dst);
        // SAFETY: d is a valid sockaddr of len bytes.
        let r = unsafe {
            libc::connect(
                raw,
                &d as *const libc::sockaddr_storage as *const libc::sockaddr,
                len,
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

/// The IPv4 and IPv6 addresses of this namespace's interfaces.
pub fn local_ips() -> Vec<IpAddr> {
    let mut out = vec![
        IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    ];
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: ifa receives a list freed below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return out;
    }
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: p walks the list getifaddrs returned.
        let i = unsafe { &*p };
        if !i.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr of its family's size.
            let family = unsafe { (*i.ifa_addr).sa_family } as i32;
            let len = match family {
                libc::AF_INET => size_of::<libc::sockaddr_in>(),
                libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
                _ => 0,
            };
            if len > 0 {
                // SAFETY: zeroed storage is valid.
                let mut st: libc::sockaddr_storage = unsafe { zeroed() };
                // SAFETY: the copy is of the address's own size, into storage large enough for any.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        i.ifa_addr as *const u8,
                        &mut st as *mut libc::sockaddr_storage as *mut u8,
                        len,
                    )
                };
                if let Some(a) = from_sockaddr(&st) {
                    out.push(a.ip());
                }
            }
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
    fn addresses_of_both_families_go_to_the_kernel_and_back() {
        for a in ["198.18.1.10:443", "[2001:db8:5b:1::10]:40000"] {
            let a: SocketAddr = a.parse().unwrap();
            let (st, len) = sockaddr(&a);
            assert_eq!(from_sockaddr(&st), Some(a));
            let want = if a.is_ipv4() {
                size_of::<libc::sockaddr_in>()
            } else {
                size_of::<libc::sockaddr_in6>()
            };
            assert_eq!(len as usize, want);
        }
        let l = local_ips();
        assert!(l.contains(&"127.0.0.1".parse().unwrap()) && l.contains(&"::1".parse().unwrap()));
    }

    #[test]
    fn loopback_options_apply_and_read_back() {
        let s = LegSettings::parse("cc=reno,nodelay,sndbuf=64K,maxseg=1200").unwrap();
        let fd = tcp_socket(&"127.0.0.1:0".parse().unwrap()).unwrap();
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
