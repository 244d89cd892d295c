//! The few system calls the front end needs, each error naming its call.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A failed system call of the set-up, naming the call and its subject.
#[derive(Debug, thiserror::Error)]
pub enum SysError {
    /// The call failed with `source` (errno).
    #[error("{call}({what}): {source}")]
    Call {
        call: &'static str,
        what: String,
        source: io::Error,
    },
    /// A TUN device name longer than the kernel's 15 bytes.
    #[error("device name too long: {0}")]
    DeviceName(String),
}

/// The error of the call just made.
pub fn os_err(call: &'static str, what: &str) -> SysError {
    SysError::Call {
        call,
        what: what.to_string(),
        source: io::Error::last_os_error(),
    }
}

pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// Enter the network namespace at `path` (this thread only).
pub fn enter_netns(path: &str) -> Result<(), SysError> {
    let f = std::fs::File::open(path).map_err(|source| SysError::Call {
        call: "open",
        what: path.to_string(),
        source,
    })?;
    // SAFETY: plain syscall on an owned fd.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(os_err("setns", path));
    }
    Ok(())
}

/// Return to the network namespace open as `f`.
pub fn enter_netns_fd(f: &std::fs::File) -> Result<(), SysError> {
    // SAFETY: plain syscall on an open fd.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(os_err("setns", "original namespace"));
    }
    Ok(())
}

const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const TUNSETOFFLOAD: libc::c_ulong = 0x4004_54d0;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_VNET_HDR: libc::c_short = 0x4000;
pub const TUN_F_CSUM: libc::c_uint = 0x01;
pub const TUN_F_TSO4: libc::c_uint = 0x02;
pub const TUN_F_TSO6: libc::c_uint = 0x04;
pub const TUN_F_TSO_ECN: libc::c_uint = 0x08;
pub const TUN_F_USO4: libc::c_uint = 0x20;
pub const TUN_F_USO6: libc::c_uint = 0x40;

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Attach to the TUN device `dev` in the current network namespace, with
/// virtio-net headers, non-blocking.
pub fn open_tun(dev: &str) -> Result<OwnedFd, SysError> {
    let path = CString::new("/dev/net/tun").unwrap();
    // SAFETY: valid C string.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(os_err("open", "/dev/net/tun"));
    }
    // SAFETY: fd was just opened and is owned here.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut req = IfReq {
        name: [0; 16],
        flags: IFF_TUN | IFF_NO_PI | IFF_VNET_HDR,
        _pad: [0; 22],
    };
    if dev.len() >= 16 {
        return Err(SysError::DeviceName(dev.to_string()));
    }
    req.name[..dev.len()].copy_from_slice(dev.as_bytes());
    // SAFETY: req is a valid ifreq-sized struct.
    if unsafe { libc::ioctl(fd.as_raw_fd(), TUNSETIFF, &mut req) } != 0 {
        return Err(os_err("ioctl TUNSETIFF", dev));
    }
    Ok(fd)
}

/// Enable offloads; returns the set accepted (UDP segmentation is optional).
pub fn set_offload(fd: RawFd, dev: &str) -> Result<libc::c_uint, SysError> {
    let base = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
    for flags in [base | TUN_F_USO4 | TUN_F_USO6, base] {
        // SAFETY: TUNSETOFFLOAD takes an unsigned int by value.
        if unsafe { libc::ioctl(fd, TUNSETOFFLOAD, flags as libc::c_ulong) } == 0 {
            return Ok(flags);
        }
    }
    Err(os_err("ioctl TUNSETOFFLOAD", dev))
}

pub fn eventfd() -> Result<OwnedFd, SysError> {
    // SAFETY: plain syscall.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(os_err("eventfd", ""));
    }
    // SAFETY: fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn eventfd_signal(fd: RawFd) {
    let one: u64 = 1;
    // SAFETY: writing 8 bytes from a valid u64.
    unsafe { libc::write(fd, &one as *const u64 as *const libc::c_void, 8) };
}

/// Wait for `fds` to become readable or for `timeout_ns` (None: forever).
/// Writes the readiness of each fd into `ready` (same length as `fds`);
/// `pfds` is scratch space kept by the caller.
pub fn poll_readable(
    fds: &[RawFd],
    timeout_ns: Option<u64>,
    pfds: &mut Vec<libc::pollfd>,
    ready: &mut [bool],
) {
    pfds.clear();
    pfds.extend(fds.iter().map(|&fd| libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    }));
    let ts = timeout_ns.map(|ns| libc::timespec {
        tv_sec: (ns / 1_000_000_000) as i64,
        tv_nsec: (ns % 1_000_000_000) as i64,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: pfds holds fds.len() valid pollfds; tsp is null or valid.
    let n = unsafe {
        libc::ppoll(
            pfds.as_mut_ptr(),
            pfds.len() as libc::nfds_t,
            tsp,
            std::ptr::null(),
        )
    };
    for (r, p) in ready.iter_mut().zip(pfds.iter()) {
        *r = n > 0 && p.revents & (libc::POLLIN | libc::POLLERR | libc::POLLHUP) != 0;
    }
}

/// Sleep for `ns` with a timed wait (as the event loop does).
pub fn sleep_ns(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as i64,
        tv_nsec: (ns % 1_000_000_000) as i64,
    };
    // SAFETY: no fds, valid timespec.
    unsafe { libc::ppoll(std::ptr::null_mut(), 0, &ts, std::ptr::null()) };
}

/// One read; Ok(None) when nothing is waiting.
pub fn read_frame(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    // SAFETY: buf is valid for buf.len() bytes.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EINTR) => Ok(None),
            _ => Err(e),
        };
    }
    Ok(Some(n as usize))
}

pub fn write_frame(fd: RawFd, buf: &[u8]) -> bool {
    // SAFETY: buf is valid for buf.len() bytes.
    let n = unsafe { libc::write(fd, buf.as_ptr() as *const libc::c_void, buf.len()) };
    n == buf.len() as isize
}

/// Timer slack of this thread to 1 ns, so timed wake-ups are not coalesced.
pub fn precise_timers() {
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}

/// Die with our parent (the orchestrator), so a killed run leaves no emulator.
pub fn die_with_parent() {
    // SAFETY: prctl with integer arguments.
    unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGTERM as libc::c_ulong,
            0,
            0,
            0,
        )
    };
}

/// Block the stop signals in this thread and the threads it spawns.
pub fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

pub fn wait_signal(set: &libc::sigset_t) -> i32 {
    let mut sig = 0;
    // SAFETY: valid set and out pointer.
    unsafe { libc::sigwait(set, &mut sig) };
    sig
}
