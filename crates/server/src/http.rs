//! What the HTTP/1.1 and HTTP/2 server's parts share: its state
//! ([`Shared`]: the files, the logs, the open connections under
//! `--max-tcp-conns`, the real-time state), the response body that streams a
//! file and logs its request when done ([`FileBody`]), and what a
//! connection's real-time streams hold of it ([`ConnUse`]). The accept loop
//! and the connections are [`crate::tcp`]'s, the real-time endpoints
//! [`crate::rt_serve`]'s; both use these, and neither the other's insides.

use crate::files::Site;
use crate::log::{unix_ns, JsonLines};
use crate::Options;
use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use std::io::Read;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

/// The largest chunk of a file read at once.
const CHUNK: usize = 256 * 1024;
/// The first chunk: chunks double from it up to [`CHUNK`]. hyper reads a
/// body's next chunk before it has room to send it, so a stream that never
/// gets flow-control credit holds one chunk: 16 KiB, not 256 KiB (256
/// stalled HTTP/2 streams held 64 MiB before).
const FIRST_CHUNK: usize = 16 * 1024;

pub struct Shared {
    pub root: Arc<Site>,
    pub opts: Options,
    pub access: JsonLines,
    pub tcp_info: JsonLines,
    /// Connection records of the connections still open.
    pub open: std::sync::Mutex<std::collections::HashMap<Arc<str>, serde_json::Value>>,
    /// Set when the server stops: samplers take their last sample.
    pub shutdown: tokio::sync::watch::Sender<bool>,
    /// The TCP connections open, for `--max-tcp-conns`.
    pub live: Live,
    /// The real-time endpoints' long-polling sessions and chat rooms (shared
    /// with the QUIC server's WebTransport, so that one room takes both).
    pub realtime: Arc<crate::rt_state::RtState>,
}

/// One open TCP connection as the cap sees it: when it last read or wrote
/// (ms since the epoch), and how to close it.
struct Slot {
    last: Arc<AtomicU64>,
    evict: Arc<tokio::sync::Notify>,
}

/// The TCP connections open. At `--max-tcp-conns`, a new connection is
/// accepted and the one that has been quiet the longest is closed (a flood
/// of idle or trickling connections cannot lock clients out); the access
/// log says `"error": "evicted: --max-tcp-conns reached"`.
#[derive(Default)]
pub struct Live {
    slots: std::sync::Mutex<std::collections::HashMap<u64, Slot>>,
    next: AtomicU64,
    evicted: AtomicU64,
}

/// A connection's place in [`Live`]; leaves it when dropped.
pub(crate) struct Admitted<'a> {
    live: &'a Live,
    id: u64,
    /// When the connection last read or wrote (ms since the epoch).
    pub(crate) last: Arc<AtomicU64>,
    /// Notified when the connection is evicted.
    pub(crate) evict: Arc<tokio::sync::Notify>,
}

impl Live {
    /// Make room for one more connection (closing the quietest one when
    /// `max` are open) and register it.
    pub(crate) fn admit(&self, max: usize) -> Admitted<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let last = Arc::new(AtomicU64::new(now_ms()));
        let evict = Arc::new(tokio::sync::Notify::new());
        let mut slots = self.slots.lock().expect("live lock");
        while slots.len() >= max.max(1) {
            let quietest = slots
                .iter()
                .min_by_key(|(_, s)| s.last.load(Ordering::Relaxed))
                .map(|(k, _)| *k)
                .expect("not empty");
            let s = slots.remove(&quietest).expect("present");
            // A permit is kept if the connection is not waiting yet.
            s.evict.notify_one();
            self.evicted.fetch_add(1, Ordering::Relaxed);
        }
        slots.insert(
            id,
            Slot {
                last: last.clone(),
                evict: evict.clone(),
            },
        );
        Admitted {
            live: self,
            id,
            last,
            evict,
        }
    }

    /// Connections open now.
    #[cfg(test)]
    pub fn open(&self) -> usize {
        self.slots.lock().expect("live lock").len()
    }

    /// Connections closed to make room since the start.
    #[cfg(test)]
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        self.live.slots.lock().expect("live lock").remove(&self.id);
    }
}

impl Shared {
    /// Record every connection still open as closed by the server's stop.
    pub fn close_all(&self) {
        let open = std::mem::take(&mut *self.open.lock().expect("open lock"));
        for (_, mut rec) in open {
            rec["t_close_unix_ns"] = unix_ns().into();
            rec["error"] = "server stopped".into();
            self.access.write(&rec);
        }
    }
}

/// A response body: bytes in memory, or a file read in chunks. Logs the
/// request when its last byte has been handed to the connection.
pub struct FileBody {
    file: Option<std::fs::File>,
    mem: Option<Bytes>,
    /// An event stream: each chunk as it comes, until the sender goes.
    chan: Option<tokio::sync::mpsc::Receiver<Bytes>>,
    remaining: u64,
    on_done: Option<Box<dyn FnOnce(u64) + Send>>,
    sent: u64,
    /// The size of the next chunk read.
    chunk: usize,
}

impl FileBody {
    /// `len` bytes of a file, read in chunks that double from
    /// [`FIRST_CHUNK`] up to [`CHUNK`].
    pub(crate) fn file(
        file: std::fs::File,
        len: u64,
        on_done: Box<dyn FnOnce(u64) + Send>,
    ) -> FileBody {
        FileBody {
            file: Some(file),
            mem: None,
            remaining: len,
            on_done: Some(on_done),
            sent: 0,
            chunk: FIRST_CHUNK,
            chan: None,
        }
    }

    pub(crate) fn mem(b: Bytes, on_done: Box<dyn FnOnce(u64) + Send>) -> FileBody {
        FileBody {
            remaining: b.len() as u64,
            file: None,
            mem: Some(b),
            chan: None,
            on_done: Some(on_done),
            sent: 0,
            chunk: FIRST_CHUNK,
        }
    }

    /// A body of unknown length: every chunk received is sent as its own
    /// frame at once (no buffering), the body ending when the sender is dropped.
    pub(crate) fn stream(
        rx: tokio::sync::mpsc::Receiver<Bytes>,
        on_done: Box<dyn FnOnce(u64) + Send>,
    ) -> FileBody {
        FileBody {
            remaining: 0,
            file: None,
            mem: None,
            chan: Some(rx),
            on_done: Some(on_done),
            sent: 0,
            chunk: FIRST_CHUNK,
        }
    }
    fn finish(&mut self) {
        if let Some(f) = self.on_done.take() {
            f(self.sent);
        }
    }
}

impl Body for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if let Some(rx) = self.chan.as_mut() {
            return match rx.poll_recv(cx) {
                Poll::Ready(Some(b)) => {
                    self.sent += b.len() as u64;
                    Poll::Ready(Some(Ok(Frame::data(b))))
                }
                Poll::Ready(None) => {
                    self.chan = None;
                    self.finish();
                    Poll::Ready(None)
                }
                Poll::Pending => Poll::Pending,
            };
        }
        if let Some(b) = self.mem.take() {
            self.remaining = 0;
            self.sent += b.len() as u64;
            if b.is_empty() {
                self.finish();
                return Poll::Ready(None);
            }
            return Poll::Ready(Some(Ok(Frame::data(b))));
        }
        if self.remaining == 0 {
            self.finish();
            return Poll::Ready(None);
        }
        let n = (self.remaining as usize).min(self.chunk);
        self.chunk = (self.chunk * 2).min(CHUNK);
        let mut buf = vec![0u8; n];
        // Page-cached local files: a blocking read of one chunk is brief.
        let r = self.file.as_mut().expect("file body").read_exact(&mut buf);
        if let Err(e) = r {
            return Poll::Ready(Some(Err(e)));
        }
        self.remaining -= n as u64;
        self.sent += n as u64;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(buf)))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0 && self.mem.is_none() && self.chan.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        if self.chan.is_some() {
            return SizeHint::default();
        }
        SizeHint::with_exact(self.mem.as_ref().map_or(self.remaining, |b| b.len() as u64))
    }
}

impl Drop for FileBody {
    fn drop(&mut self) {
        // Aborted before the end (client went away): still logged, with what was sent.
        self.finish();
    }
}

/// What a connection's real-time streams hold of it (`rt_serve.rs`).
#[derive(Debug)]
pub struct ConnUse {
    /// One permit, which an HTTP/1.1 WebSocket's task holds: the connection
    /// outlives hyper's serving future (its slot, sampler and log line stay)
    /// until the WebSocket is done.
    pub upgrades: Arc<tokio::sync::Semaphore>,
    /// Real-time streams open on it (an event stream, a held poll, a
    /// WebSocket): a connection with one is not idle, however quiet.
    pub(crate) streams: Arc<AtomicUsize>,
}

impl Default for ConnUse {
    fn default() -> ConnUse {
        ConnUse {
            upgrades: Arc::new(tokio::sync::Semaphore::new(1)),
            streams: Arc::default(),
        }
    }
}

impl ConnUse {
    /// A real-time stream opens; it closes when the returned guard is dropped.
    pub fn stream(&self) -> StreamOpen {
        self.streams.fetch_add(1, Ordering::Relaxed);
        StreamOpen(self.streams.clone())
    }
}

/// An open real-time stream (see [`ConnUse::stream`]).
#[derive(Debug)]
pub struct StreamOpen(Arc<AtomicUsize>);

impl Drop for StreamOpen {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Milliseconds since the epoch (when a connection last read or wrote).
pub(crate) fn now_ms() -> u64 {
    unix_ns() / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_cap_closes_the_quietest_connection() {
        let live = Live::default();
        let a = live.admit(2);
        let b = live.admit(2);
        a.last.store(now_ms() + 5, Ordering::Relaxed);
        b.last.store(now_ms() - 60_000, Ordering::Relaxed);
        let c = live.admit(2);
        assert_eq!((live.open(), live.evicted()), (2, 1));
        // b was told to close (a permit waits for it), a and c were not.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            b.evict.notified().await;
            let quiet = Duration::from_millis(20);
            assert!(tokio::time::timeout(quiet, a.evict.notified())
                .await
                .is_err());
            assert!(tokio::time::timeout(quiet, c.evict.notified())
                .await
                .is_err());
        });
        drop((a, b, c));
        assert_eq!(live.open(), 0);
    }
}
