//! TLS records in a TCP byte stream, followed without keys.
//!
//! [`TlsStream`] is fed a flow's new payload bytes in stream order and
//! splits them by the record they belong to:
//!
//! - handshake (22), change_cipher_spec (20) and alert (21) records, header
//!   and body: `tls_handshake`;
//! - application_data (23) records: the 5-byte header and the last
//!   [`AEAD_EXPANSION`] bytes of the body (TLS 1.3's inner content type and
//!   16-byte AEAD tag; all of a shorter body): `tls_record_overhead`; the
//!   rest of the body: `tls_application`.
//!
//! A header byte counts as soon as the header bytes up to it are valid (type
//! 20..=23, version 0x0301..=0x0304, length at most [`MAX_RECORD_LEN`]); an
//! invalid one loses the stream, and from it on every byte is `tcp_payload`.

use super::Overhead;

/// Bytes of a record header: type, version (2), length (2).
pub const HEADER_LEN: usize = 5;
/// Largest record body accepted: 2^14 plus TLS 1.2's 2048 bytes of expansion.
pub const MAX_RECORD_LEN: u16 = (1 << 14) + 2048;
/// Bytes of an application_data record that are not application data, as in
/// TLS 1.3: the inner content type (1) and the AEAD tag (16). TLS 1.2's
/// AES-GCM records carry 24 (an 8-byte explicit nonce and the tag); they are
/// counted as if they carried 17.
pub const AEAD_EXPANSION: u16 = 17;

const CHANGE_CIPHER_SPEC: u8 = 20;
const APPLICATION_DATA: u8 = 23;

/// True if `b` starts with a plausible record header: type 20..=23, version
/// 0x0301..=0x0304 and a length of 1..=[`MAX_RECORD_LEN`]. How a flow is
/// recognised as TLS, from its first payload bytes.
pub fn looks_like_tls(b: &[u8]) -> bool {
    looks_like_header(b) && (b[3], b[4]) != (0, 0)
}

/// True if `b` starts with a whole valid record header (a length of 0
/// included).
fn looks_like_header(b: &[u8]) -> bool {
    match *b {
        [t, 3, v, hi, lo, ..] => {
            (CHANGE_CIPHER_SPEC..=APPLICATION_DATA).contains(&t)
                && (1..=4).contains(&v)
                && u16::from_be_bytes([hi, lo]) <= MAX_RECORD_LEN
        }
        _ => false,
    }
}

/// The state after a valid header of type `t` and body length `len`.
fn body(t: u8, len: u16) -> State {
    match len {
        0 => AT_BOUNDARY,
        len => State::Body {
            content_type: t,
            left: len,
            tag: if t == APPLICATION_DATA {
                len.min(AEAD_EXPANSION)
            } else {
                0
            },
        },
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// `have` bytes of a header read; its type once `have >= 1`, the high
    /// byte of its length once `have == 4`.
    Header {
        have: u8,
        content_type: u8,
        len_hi: u8,
    },
    /// In a record body with `left` bytes to go, of which the last `tag`
    /// are record overhead (application_data only).
    Body {
        content_type: u8,
        left: u16,
        tag: u16,
    },
    /// Out of step with the records: everything is `tcp_payload`.
    Lost,
}

const AT_BOUNDARY: State = State::Header {
    have: 0,
    content_type: 0,
    len_hi: 0,
};

/// One direction of a TLS connection's byte stream, at a record boundary
/// when created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TlsStream {
    state: State,
}

impl Default for TlsStream {
    fn default() -> Self {
        TlsStream { state: AT_BOUNDARY }
    }
}

impl TlsStream {
    /// True once the stream fell out of step with its records.
    pub fn is_lost(&self) -> bool {
        self.state == State::Lost
    }

    /// The next `b.len()` bytes of the stream, added to `out` by part.
    pub fn feed(&mut self, mut b: &[u8], out: &mut Overhead) {
        while let Some(&x) = b.first() {
            match self.state {
                State::Lost => {
                    out.tcp_payload += b.len() as u64;
                    return;
                }
                State::Body {
                    content_type,
                    left,
                    tag,
                } => {
                    let n = b.len().min(left as usize);
                    if content_type == APPLICATION_DATA {
                        let app = n.min(left.saturating_sub(tag) as usize);
                        out.tls_application += app as u64;
                        out.tls_record_overhead += (n - app) as u64;
                    } else {
                        out.tls_handshake += n as u64;
                    }
                    let left = left - n as u16;
                    self.state = if left == 0 {
                        AT_BOUNDARY
                    } else {
                        State::Body {
                            content_type,
                            left,
                            tag,
                        }
                    };
                    b = &b[n..];
                }
                // A whole valid header at hand (the usual case): at once.
                State::Header { have: 0, .. } if looks_like_header(b) => {
                    let (t, len) = (x, u16::from_be_bytes([b[3], b[4]]));
                    if t == APPLICATION_DATA {
                        out.tls_record_overhead += HEADER_LEN as u64;
                    } else {
                        out.tls_handshake += HEADER_LEN as u64;
                    }
                    self.state = body(t, len);
                    b = &b[HEADER_LEN..];
                }
                State::Header {
                    have,
                    content_type,
                    len_hi,
                } => {
                    let t = if have == 0 { x } else { content_type };
                    let valid = match have {
                        0 => (CHANGE_CIPHER_SPEC..=APPLICATION_DATA).contains(&x),
                        1 => x == 3,
                        2 => (1..=4).contains(&x),
                        3 => true,
                        _ => u16::from_be_bytes([len_hi, x]) <= MAX_RECORD_LEN,
                    };
                    if !valid {
                        self.state = State::Lost;
                        continue;
                    }
                    if t == APPLICATION_DATA {
                        out.tls_record_overhead += 1;
                    } else {
                        out.tls_handshake += 1;
                    }
                    b = &b[1..];
                    self.state = match have {
                        4 => body(t, u16::from_be_bytes([len_hi, x])),
                        _ => State::Header {
                            have: have + 1,
                            content_type: t,
                            len_hi: if have == 3 { x } else { len_hi },
                        },
                    };
                }
            }
        }
    }

    /// `n` bytes of the stream will never be seen (a hole in the sequence
    /// space): stay in step if they lie inside the current record's body,
    /// else lose the stream.
    pub fn skip(&mut self, n: u32) {
        if n == 0 {
            return;
        }
        self.state = match self.state {
            State::Body {
                content_type,
                left,
                tag,
            } if n < left as u32 => State::Body {
                content_type,
                left: left - n as u16,
                tag,
            },
            State::Body { left, .. } if n == left as u32 => AT_BOUNDARY,
            _ => State::Lost,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(t: u8, body: usize) -> Vec<u8> {
        let mut r = vec![t, 3, 3];
        r.extend_from_slice(&(body as u16).to_be_bytes());
        r.extend((0..body).map(|i| i as u8));
        r
    }

    fn parts(s: &mut TlsStream, b: &[u8]) -> Overhead {
        let mut o = Overhead::default();
        s.feed(b, &mut o);
        assert_eq!(o.bytes(), b.len() as u64);
        o
    }

    #[test]
    fn detection_needs_a_whole_plausible_header() {
        assert!(looks_like_tls(&[22, 3, 1, 0x02, 0x00]));
        assert!(looks_like_tls(&[23, 3, 4, 0x48, 0x00, 9]));
        assert!(!looks_like_tls(&[22, 3, 1, 0x02]));
        assert!(!looks_like_tls(&[24, 3, 3, 0, 10]));
        assert!(!looks_like_tls(&[19, 3, 3, 0, 10]));
        assert!(!looks_like_tls(&[22, 3, 0, 0, 10]));
        assert!(!looks_like_tls(&[22, 3, 5, 0, 10]));
        assert!(!looks_like_tls(&[22, 2, 1, 0, 10]));
        assert!(!looks_like_tls(&[22, 3, 3, 0, 0]));
        assert!(!looks_like_tls(&[22, 3, 3, 0x48, 0x01]));
        assert!(!looks_like_tls(b"GET / HTTP/1.1\r\n"));
    }

    #[test]
    fn application_records_split_header_payload_and_tag() {
        let mut s = TlsStream::default();
        let mut stream = record(22, 100);
        stream.extend(record(23, 1000));
        stream.extend(record(23, 10)); // shorter than the tag
        stream.extend(record(21, 2));
        let o = parts(&mut s, &stream);
        assert_eq!(o.tls_handshake, 105 + 7);
        assert_eq!(o.tls_record_overhead, 5 + 17 + 5 + 10);
        assert_eq!(o.tls_application, 1000 - 17);
        assert!(!s.is_lost());
    }

    #[test]
    fn any_split_gives_the_same_parts() {
        let mut stream = record(22, 517);
        stream.extend(record(20, 1));
        stream.extend(record(23, 53));
        stream.extend(record(23, 16_401));
        stream.extend(record(23, 0));
        stream.extend(record(23, 3));
        let mut whole = TlsStream::default();
        let expect = parts(&mut whole, &stream);
        let mut rng = crate::rng::Rng::new(3);
        for _ in 0..500 {
            let mut s = TlsStream::default();
            let mut o = Overhead::default();
            let mut at = 0;
            while at < stream.len() {
                let n = 1 + (rng.next_u64() % 1500) as usize;
                let end = (at + n).min(stream.len());
                s.feed(&stream[at..end], &mut o);
                at = end;
            }
            assert_eq!(o, expect);
            assert_eq!(s, whole);
        }
    }

    #[test]
    fn an_invalid_header_loses_the_stream_from_that_byte() {
        let mut s = TlsStream::default();
        let mut stream = record(22, 10);
        stream.extend_from_slice(&[23, 3, 9, 0, 1, 0, 0, 0]);
        let o = parts(&mut s, &stream);
        // 15 bytes of the first record, then 23 and 3 are valid, 9 is not.
        assert_eq!(o.tls_handshake, 15);
        assert_eq!(o.tls_record_overhead, 2);
        assert_eq!(o.tcp_payload, 6);
        assert!(s.is_lost());
        assert_eq!(parts(&mut s, &record(23, 40)).tcp_payload, 45);
        // A record longer than the maximum.
        let mut s = TlsStream::default();
        let o = parts(&mut s, &[23, 3, 3, 0x48, 0x01, 7]);
        assert_eq!((o.tls_record_overhead, o.tcp_payload), (4, 2));
    }

    #[test]
    fn a_hole_inside_a_body_keeps_step_and_one_over_a_header_does_not() {
        let mut s = TlsStream::default();
        let r = record(23, 100);
        parts(&mut s, &r[..30]);
        s.skip(50);
        let o = parts(&mut s, &r[80..]);
        // 25 bytes of body left, the last 17 the tag.
        assert_eq!((o.tls_application, o.tls_record_overhead), (8, 17));
        s.skip(0);
        assert_eq!(parts(&mut s, &record(22, 1)).tls_handshake, 6);
        let mut t = s;
        t.skip(1);
        assert!(t.is_lost());
        parts(&mut s, &r[..10]);
        s.skip(95);
        assert_eq!(parts(&mut s, &record(21, 2)).tls_handshake, 7);
        parts(&mut s, &r[..10]);
        s.skip(96);
        assert!(s.is_lost());
    }
}
