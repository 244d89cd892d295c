//! An upload's request body: `len` incompressible bytes (xorshift64*), made
//! as they are sent, so a 1 GB upload costs no memory. The same bytes for the
//! same length on every stack.

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Bytes per chunk handed to a stack.
pub const CHUNK: usize = 64 * 1024;

/// The generator and what is left to send.
#[derive(Debug, Clone)]
pub struct Payload {
    remaining: u64,
    state: u64,
}

impl Payload {
    pub fn new(len: u64) -> Payload {
        Payload {
            remaining: len,
            state: 0x9E37_79B9_7F4A_7C15,
        }
    }

    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// The next chunk (at most [`CHUNK`] bytes; empty when all was made).
    pub fn next_chunk(&mut self) -> Vec<u8> {
        let n = self.remaining.min(CHUNK as u64) as usize;
        let mut out = Vec::with_capacity(n + 8);
        while out.len() < n {
            self.state ^= self.state >> 12;
            self.state ^= self.state << 25;
            self.state ^= self.state >> 27;
            out.extend_from_slice(&self.state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
        }
        out.truncate(n);
        self.remaining -= n as u64;
        out
    }
}

/// hyper's view: a body of known length (HTTP/1.1 sends `content-length`).
impl Body for Payload {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        if this.remaining == 0 {
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(this.next_chunk())))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn makes_exactly_len_bytes_in_chunks() {
        for len in [0u64, 1, 7, 8, 65_535, 65_536, 65_537, 1_000_000] {
            let mut p = Payload::new(len);
            let mut total = 0u64;
            let mut chunks = 0;
            loop {
                let c = p.next_chunk();
                if c.is_empty() {
                    break;
                }
                assert!(c.len() <= CHUNK);
                total += c.len() as u64;
                chunks += 1;
            }
            assert_eq!(total, len);
            assert_eq!(chunks, len.div_ceil(CHUNK as u64));
            assert_eq!(p.size_hint().exact(), Some(0));
        }
    }

    #[test]
    fn is_incompressible_and_repeatable() {
        let a = Payload::new(65_536).next_chunk();
        assert_eq!(a, Payload::new(65_536).next_chunk());
        // Every byte value about equally often: no run a compressor could use.
        let mut counts = [0u32; 256];
        for b in &a {
            counts[*b as usize] += 1;
        }
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        assert!(*lo > 180 && *hi < 340, "{lo}..{hi}");
    }
}
