//! One direction's buffer between two sockets: a pipe filled and drained with
//! `splice(2)` (the bytes stay in the kernel), or memory with `read(2)` and
//! `write(2)`.
//!
//! [`Buffer`] is the one concern: move bytes from a socket in, move them out
//! to another. [`Pipe`] and [`Memory`] implement it; [`Relaying`] is a pipe
//! that turns into memory (keeping what the pipe held) the first time the
//! kernel refuses to splice.
//!
//! Errors are plain `io::Error`s with the socket's errno: the event loop maps
//! `WouldBlock` to a blocked event and the rest to a reset or a failure.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A direction's buffer.
pub trait Buffer {
    /// Move at most `max` bytes from socket `src` into the buffer; `Ok(0)`
    /// is the end of the stream.
    fn fill(&mut self, src: RawFd, max: usize) -> io::Result<usize>;
    /// Move at most `max` buffered bytes to socket `dst`.
    fn drain(&mut self, dst: RawFd, max: usize) -> io::Result<usize>;
    /// How many bytes it can hold.
    fn capacity(&self) -> usize;
    /// How many bytes it holds.
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn cvt(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

/// A non-blocking pipe, filled and drained with `splice(2)`.
#[derive(Debug)]
pub struct Pipe {
    rd: OwnedFd,
    wr: OwnedFd,
    cap: usize,
    len: usize,
}

impl Pipe {
    /// A pipe of about `size` bytes (`F_SETPIPE_SZ` rounds up to pages; the
    /// capacity is what the kernel reports back).
    pub fn new(size: usize) -> io::Result<Pipe> {
        let mut fds = [0; 2];
        // SAFETY: fds is valid for two ints.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both were just opened and are owned here.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: plain fcntl on an owned fd.
        let cap = unsafe { libc::fcntl(wr.as_raw_fd(), libc::F_SETPIPE_SZ, size as libc::c_int) };
        let cap = if cap < 0 {
            // Over the limits (pipe-max-size, the user's pipe pages): keep
            // the default size.
            // SAFETY: plain fcntl on an owned fd.
            unsafe { libc::fcntl(wr.as_raw_fd(), libc::F_GETPIPE_SZ) }
        } else {
            cap
        };
        if cap <= 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Pipe {
            rd,
            wr,
            cap: cap as usize,
            len: 0,
        })
    }

    /// Read what the pipe holds into memory of at least the pipe's capacity.
    fn into_memory(self) -> io::Result<Memory> {
        let mut m = Memory::new(self.cap);
        while m.end < self.len {
            // SAFETY: the range is within m.buf.
            let n = cvt(unsafe {
                libc::read(
                    self.rd.as_raw_fd(),
                    m.buf[m.end..].as_mut_ptr() as *mut libc::c_void,
                    self.len - m.end,
                )
            })?;
            if n == 0 {
                break;
            }
            m.end += n;
        }
        Ok(m)
    }
}

const SPLICE_FLAGS: libc::c_uint = libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK;

impl Buffer for Pipe {
    fn fill(&mut self, src: RawFd, max: usize) -> io::Result<usize> {
        let max = max.min(self.cap - self.len);
        // SAFETY: plain splice between fds; null offsets (sockets, pipes).
        let n = cvt(unsafe {
            libc::splice(
                src,
                std::ptr::null_mut(),
                self.wr.as_raw_fd(),
                std::ptr::null_mut(),
                max,
                SPLICE_FLAGS,
            )
        })?;
        self.len += n;
        Ok(n)
    }
    fn drain(&mut self, dst: RawFd, max: usize) -> io::Result<usize> {
        // SAFETY: as above.
        let n = cvt(unsafe {
            libc::splice(
                self.rd.as_raw_fd(),
                std::ptr::null_mut(),
                dst,
                std::ptr::null_mut(),
                max.min(self.len),
                SPLICE_FLAGS,
            )
        })?;
        self.len -= n;
        Ok(n)
    }
    fn capacity(&self) -> usize {
        self.cap
    }
    fn len(&self) -> usize {
        self.len
    }
}

/// Memory, filled with `read(2)` and drained with `write(2)`.
#[derive(Debug)]
pub struct Memory {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Memory {
    pub fn new(cap: usize) -> Memory {
        Memory {
            buf: vec![0; cap].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }
}

impl Buffer for Memory {
    fn fill(&mut self, src: RawFd, max: usize) -> io::Result<usize> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let max = max.min(self.buf.len() - self.end);
        // SAFETY: the range is within self.buf.
        let n = cvt(unsafe {
            libc::read(
                src,
                self.buf[self.end..].as_mut_ptr() as *mut libc::c_void,
                max,
            )
        })?;
        self.end += n;
        Ok(n)
    }
    fn drain(&mut self, dst: RawFd, max: usize) -> io::Result<usize> {
        let len = max.min(self.end - self.start);
        // SAFETY: the range is within self.buf; MSG_NOSIGNAL: EPIPE, not SIGPIPE.
        let n = cvt(unsafe {
            libc::send(
                dst,
                self.buf[self.start..].as_ptr() as *const libc::c_void,
                len,
                libc::MSG_NOSIGNAL,
            )
        })?;
        self.start += n;
        Ok(n)
    }
    fn capacity(&self) -> usize {
        self.buf.len()
    }
    fn len(&self) -> usize {
        self.end - self.start
    }
}

/// Errors that say the kernel cannot splice between these two files (not
/// that a socket failed).
fn splice_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
    )
}

/// A pipe while splicing works, memory after.
#[derive(Debug)]
pub enum Relaying {
    Pipe(Pipe),
    Memory(Memory),
    /// Only while switching.
    Switching,
}

impl Relaying {
    /// A pipe of `size` bytes, or memory of `size` bytes if `splice` is off or
    /// no pipe can be made.
    pub fn new(size: usize, splice: bool) -> Relaying {
        if splice {
            if let Ok(p) = Pipe::new(size) {
                return Relaying::Pipe(p);
            }
        }
        Relaying::Memory(Memory::new(size))
    }

    pub fn is_pipe(&self) -> bool {
        matches!(self, Relaying::Pipe(_))
    }

    fn switch_to_memory(&mut self) -> io::Result<()> {
        if let Relaying::Pipe(p) = std::mem::replace(self, Relaying::Switching) {
            *self = Relaying::Memory(p.into_memory()?);
        }
        Ok(())
    }

    fn with<T>(&mut self, op: impl Fn(&mut dyn Buffer) -> io::Result<T>) -> io::Result<T> {
        let r = match self {
            Relaying::Pipe(p) => op(p),
            Relaying::Memory(m) => return op(m),
            Relaying::Switching => unreachable!("left switching"),
        };
        match r {
            Err(e) if splice_unsupported(&e) => {
                self.switch_to_memory()?;
                self.with(op)
            }
            other => other,
        }
    }
}

impl Buffer for Relaying {
    fn fill(&mut self, src: RawFd, max: usize) -> io::Result<usize> {
        self.with(|b| b.fill(src, max))
    }
    fn drain(&mut self, dst: RawFd, max: usize) -> io::Result<usize> {
        self.with(|b| b.drain(dst, max))
    }
    fn capacity(&self) -> usize {
        match self {
            Relaying::Pipe(p) => p.capacity(),
            Relaying::Memory(m) => m.capacity(),
            Relaying::Switching => 0,
        }
    }
    fn len(&self) -> usize {
        match self {
            Relaying::Pipe(p) => p.len(),
            Relaying::Memory(m) => m.len(),
            Relaying::Switching => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    fn pair() -> (UnixStream, UnixStream) {
        let (a, b) = UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        b.set_nonblocking(true).unwrap();
        (a, b)
    }

    /// Pass `data` from one socket pair through `buf` to another.
    fn relay(buf: &mut dyn Buffer, data: &[u8]) -> Vec<u8> {
        let (mut w, r) = pair();
        let (out, mut sink) = pair();
        w.write_all(data).unwrap();
        drop(w);
        let mut got = Vec::new();
        let mut tmp = [0u8; 4096];
        loop {
            let n = buf.fill(r.as_raw_fd(), 1000).unwrap();
            assert!(n <= 1000);
            assert_eq!(buf.len(), n);
            while !buf.is_empty() {
                buf.drain(out.as_raw_fd(), usize::MAX).unwrap();
            }
            loop {
                match sink.read(&mut tmp) {
                    Ok(k) => got.extend_from_slice(&tmp[..k]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => panic!("{e}"),
                }
            }
            if n == 0 {
                return got;
            }
        }
    }

    fn data() -> Vec<u8> {
        (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn pipe_relays_exactly() {
        let mut p = Pipe::new(64 << 10).unwrap();
        assert!(p.capacity() >= 64 << 10);
        assert_eq!(relay(&mut p, &data()), data());
    }

    #[test]
    fn memory_relays_exactly() {
        let mut m = Memory::new(1500);
        assert_eq!(m.capacity(), 1500);
        assert_eq!(relay(&mut m, &data()), data());
    }

    #[test]
    fn memory_keeps_partial_writes_and_compacts() {
        let (mut w, r) = pair();
        w.write_all(&data()[..1500]).unwrap();
        let mut m = Memory::new(1000);
        assert_eq!(m.fill(r.as_raw_fd(), 1000).unwrap(), 1000);
        let (out, mut sink) = pair();
        assert_eq!(m.drain(out.as_raw_fd(), 600).unwrap(), 600);
        // Full at the end: compacted, then 600 more.
        assert_eq!(m.fill(r.as_raw_fd(), 600).unwrap(), 500);
        assert_eq!(m.len(), 900);
        while !m.is_empty() {
            m.drain(out.as_raw_fd(), usize::MAX).unwrap();
        }
        let mut got = vec![0u8; 1500];
        sink.read_exact(&mut got).unwrap();
        assert_eq!(got, data()[..1500]);
    }

    #[test]
    fn empty_socket_would_block() {
        let (_w, r) = pair();
        let mut p = Relaying::new(4096, true);
        let e = p.fill(r.as_raw_fd(), 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert!(p.is_pipe());
    }

    #[test]
    fn splice_refused_falls_back_to_memory_keeping_the_bytes() {
        // splice(2) refuses a regular file as the output: EINVAL.
        let (mut w, r) = pair();
        w.write_all(b"hello, satellite").unwrap();
        let mut b = Relaying::new(4096, true);
        assert_eq!(b.fill(r.as_raw_fd(), 5).unwrap(), 5);
        let path = std::env::temp_dir().join(format!("satbench-pep-{}", std::process::id()));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap();
        // send(2) on a file fails too (ENOTSOCK), after the switch.
        let e = b.drain(f.as_raw_fd(), 100).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTSOCK));
        assert!(!b.is_pipe());
        assert_eq!(b.len(), 5);
        let (out, mut sink) = pair();
        assert_eq!(b.drain(out.as_raw_fd(), 100).unwrap(), 5);
        assert_eq!(b.fill(r.as_raw_fd(), 100).unwrap(), 11);
        assert_eq!(b.drain(out.as_raw_fd(), 100).unwrap(), 11);
        let mut got = [0u8; 16];
        sink.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello, satellite");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn splice_off_is_memory() {
        assert!(!Relaying::new(4096, false).is_pipe());
    }
}
