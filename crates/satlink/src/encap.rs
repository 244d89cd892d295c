//! Encapsulation of IP packets into a carrier's frames, charged per packet
//! so that the delivered IP rate is the real one.
//!
//! An [`Encapsulation`] says how the next piece of a packet fills the room
//! left in a frame: a whole packet, or a fragment with its own headers.
//!
//! - [`Gse`] (ETSI TS 102 606, forward, in BBFRAMEs): a GSE packet has a
//!   2-byte fixed header (start and end flags, label type, 12-bit length);
//!   a fragment adds a 1-byte fragment id; the first fragment adds the 2-byte
//!   total length; every GSE packet that starts a PDU carries the 2-byte
//!   protocol type and the label (6, 3 or 0 bytes); the last fragment ends
//!   with a 4-byte CRC-32. The 12-bit length bounds a GSE packet to 4095
//!   bytes after its fixed header. Whole packet: `4 + label + len` bytes.
//! - [`Rle`] (ETSI TS 103 179, return, in DVB-RCS2 timeslots): the ALPDU is
//!   the protocol type (0, 1 or 2 bytes) and the packet, plus, only when it
//!   is fragmented, a trailer (a 1-byte sequence number or a 4-byte CRC-32).
//!   It is carried in PPDUs: a full PPDU (2-byte header) when it fits, else a
//!   start PPDU (4-byte header), continuation PPDUs and an end PPDU (2 bytes
//!   each). The 11-bit PPDU length bounds a PPDU's payload to 2047 bytes.
//!   Whole packet: `2 + protocol type + len` bytes.
//! - [`Raw`]: no encapsulation; packets fill frames byte for byte.
//!
//! Every fragment carries at least one byte of the packet: a frame whose
//! room cannot hold a fragment header and one byte is padded.

/// One piece of a packet in a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Bytes of the encapsulated stream this piece carries: add to `sent`.
    pub carried: u32,
    /// Bytes the piece takes in the frame, headers and trailers included.
    pub frame_bytes: u32,
    /// True if this piece completes the packet.
    pub done: bool,
}

/// How packets are cut into a frame's room.
pub trait Encapsulation: Send {
    /// "gse", "rle" or "none".
    fn kind(&self) -> &'static str;
    /// The next piece of a packet of `len` bytes of which earlier pieces
    /// carried `sent` (the sum of their `carried`; 0 for a packet not yet
    /// started), in a frame with `room` bytes left. None if not even the
    /// smallest piece fits (the rest of the frame is padding).
    fn piece(&self, len: u32, sent: u32, room: u32) -> Option<Piece>;
    /// Bytes a packet of `len` bytes takes when it is not fragmented.
    fn whole(&self, len: u32) -> u32;
}

/// No encapsulation: packets fill the frames byte for byte.
#[derive(Clone, Copy, Debug, Default)]
pub struct Raw;

impl Encapsulation for Raw {
    fn kind(&self) -> &'static str {
        "none"
    }
    fn piece(&self, len: u32, sent: u32, room: u32) -> Option<Piece> {
        let n = room.min(len - sent);
        if n == 0 && len > sent {
            return None;
        }
        Some(Piece {
            carried: n,
            frame_bytes: n,
            done: sent + n == len,
        })
    }
    fn whole(&self, len: u32) -> u32 {
        len
    }
}

/// Generic Stream Encapsulation (forward link, in BBFRAMEs).
#[derive(Clone, Copy, Debug)]
pub struct Gse {
    label: u32,
}

impl Gse {
    /// Fixed header: start/end flags, label type, GSE length.
    pub const HEADER: u32 = 2;
    /// Fragment id, on every fragment.
    pub const FRAG_ID: u32 = 1;
    /// Total length, on the first fragment.
    pub const TOTAL_LENGTH: u32 = 2;
    /// Protocol type, on a GSE packet that starts a PDU.
    pub const PROTOCOL_TYPE: u32 = 2;
    /// CRC-32 of the reassembled PDU, on the last fragment.
    pub const CRC: u32 = 4;
    /// Largest GSE length (bytes after the fixed header).
    pub const MAX_LENGTH: u32 = 4095;

    /// `label_bytes`: 6 (a MAC address), 3, or 0 (broadcast or label reuse).
    pub fn new(label_bytes: u32) -> Gse {
        Gse { label: label_bytes }
    }
}

impl Encapsulation for Gse {
    fn kind(&self) -> &'static str {
        "gse"
    }

    fn piece(&self, len: u32, sent: u32, room: u32) -> Option<Piece> {
        let piece = |carried, head: u32, tail: u32, done| {
            Some(Piece {
                carried,
                frame_bytes: head + carried + tail,
                done,
            })
        };
        if sent == 0 {
            let head = Self::HEADER + Self::PROTOCOL_TYPE + self.label;
            if head - Self::HEADER + len <= Self::MAX_LENGTH && head + len <= room {
                return piece(len, head, 0, true);
            }
            // First fragment: leave at least one byte for the last.
            let head = head + Self::FRAG_ID + Self::TOTAL_LENGTH;
            let n = room
                .saturating_sub(head)
                .min(len - 1)
                .min(Self::MAX_LENGTH - (head - Self::HEADER));
            return if n == 0 {
                None
            } else {
                piece(n, head, 0, false)
            };
        }
        let rest = len - sent;
        let head = Self::HEADER + Self::FRAG_ID;
        if Self::FRAG_ID + rest + Self::CRC <= Self::MAX_LENGTH && head + rest + Self::CRC <= room {
            return piece(rest, head, Self::CRC, true);
        }
        let n = room
            .saturating_sub(head)
            .min(rest - 1)
            .min(Self::MAX_LENGTH - Self::FRAG_ID);
        if n == 0 {
            None
        } else {
            piece(n, head, 0, false)
        }
    }

    fn whole(&self, len: u32) -> u32 {
        Self::HEADER + Self::PROTOCOL_TYPE + self.label + len
    }
}

/// The ALPDU trailer of a fragmented RLE packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RleTrailer {
    /// A 1-byte sequence number.
    Seq,
    /// A 4-byte CRC-32.
    Crc,
}

impl RleTrailer {
    pub fn bytes(self) -> u32 {
        match self {
            RleTrailer::Seq => 1,
            RleTrailer::Crc => 4,
        }
    }
}

/// Return Link Encapsulation (DVB-RCS2 return link, in timeslots).
#[derive(Clone, Copy, Debug)]
pub struct Rle {
    protocol_type: u32,
    trailer: RleTrailer,
}

impl Rle {
    /// Header of a full, continuation or end PPDU.
    pub const PPDU_HEADER: u32 = 2;
    /// Header of a start PPDU (with the ALPDU's total length).
    pub const START_HEADER: u32 = 4;
    /// Largest PPDU payload (11-bit length).
    pub const MAX_PPDU: u32 = 2047;

    /// `protocol_type_bytes`: 0 (suppressed), 1 (compressed) or 2.
    pub fn new(protocol_type_bytes: u32, trailer: RleTrailer) -> Rle {
        Rle {
            protocol_type: protocol_type_bytes,
            trailer,
        }
    }
}

impl Encapsulation for Rle {
    fn kind(&self) -> &'static str {
        "rle"
    }

    fn piece(&self, len: u32, sent: u32, room: u32) -> Option<Piece> {
        let piece = |carried, head| {
            Some(Piece {
                carried,
                frame_bytes: head + carried,
                done: false,
            })
        };
        // The ALPDU of a fragmented packet: protocol type, packet, trailer.
        let alpdu = self.protocol_type + len + self.trailer.bytes();
        if sent == 0 {
            let full = self.protocol_type + len;
            if full <= Self::MAX_PPDU && Self::PPDU_HEADER + full <= room {
                return Some(Piece {
                    carried: full,
                    frame_bytes: Self::PPDU_HEADER + full,
                    done: true,
                });
            }
            let n = room
                .saturating_sub(Self::START_HEADER)
                .min(alpdu - 1)
                .min(Self::MAX_PPDU);
            return if n == 0 {
                None
            } else {
                piece(n, Self::START_HEADER)
            };
        }
        let rest = alpdu - sent;
        if rest <= Self::MAX_PPDU && Self::PPDU_HEADER + rest <= room {
            return Some(Piece {
                carried: rest,
                frame_bytes: Self::PPDU_HEADER + rest,
                done: true,
            });
        }
        let n = room
            .saturating_sub(Self::PPDU_HEADER)
            .min(rest - 1)
            .min(Self::MAX_PPDU);
        if n == 0 {
            None
        } else {
            piece(n, Self::PPDU_HEADER)
        }
    }

    fn whole(&self, len: u32) -> u32 {
        Self::PPDU_HEADER + self.protocol_type + len
    }
}

/// Cut a packet of `len` bytes into frames of `room` bytes each, the first
/// with `first_room` left: the frame bytes of each piece. For tests and
/// derived numbers.
pub fn pieces(e: &dyn Encapsulation, len: u32, first_room: u32, room: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut sent = 0;
    let mut left = first_room;
    loop {
        match e.piece(len, sent, left) {
            Some(p) => {
                out.push(p.frame_bytes);
                sent += p.carried;
                left -= p.frame_bytes;
                if p.done {
                    return out;
                }
            }
            None if left == room => return out, // cannot progress at all
            None => left = room,
        }
    }
}

/// IP bytes per frame byte for a saturated stream of `len`-byte packets
/// filling frames of `room` bytes (fragments carried over frame boundaries).
pub fn efficiency(e: &dyn Encapsulation, len: u32, room: u32) -> f64 {
    // Enough packets that the pattern repeats many times over.
    let n = 1000u64;
    let mut frames = 1u64;
    let mut left = room;
    for _ in 0..n {
        let mut sent = 0;
        loop {
            match e.piece(len, sent, left) {
                Some(p) => {
                    sent += p.carried;
                    left -= p.frame_bytes;
                    if p.done {
                        break;
                    }
                }
                None if left == room => return 0.0,
                None => {
                    frames += 1;
                    left = room;
                }
            }
        }
    }
    // The last frame counts only for the bytes used.
    let used = (frames - 1) * room as u64 + (room - left) as u64;
    (n * len as u64) as f64 / used as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gse_whole_packets() {
        let g = Gse::new(6);
        // 2 header + 2 protocol type + 6 label.
        assert_eq!(g.whole(40), 50);
        assert_eq!(
            g.piece(40, 0, 1000),
            Some(Piece {
                carried: 40,
                frame_bytes: 50,
                done: true
            })
        );
        assert_eq!(Gse::new(3).whole(1500), 1507);
        assert_eq!(Gse::new(0).piece(1500, 0, 1504).unwrap().frame_bytes, 1504);
    }

    #[test]
    fn gse_fragments_exact() {
        let g = Gse::new(6);
        // 1500 bytes into 1000 bytes of room: the first fragment has
        // 2 + 1 + 2 + 2 + 6 = 13 bytes of header and 987 bytes of packet;
        // the last has 2 + 1 header, 513 bytes and the 4-byte CRC.
        assert_eq!(
            g.piece(1500, 0, 1000),
            Some(Piece {
                carried: 987,
                frame_bytes: 1000,
                done: false
            })
        );
        assert_eq!(
            g.piece(1500, 987, 2000),
            Some(Piece {
                carried: 513,
                frame_bytes: 520,
                done: true
            })
        );
        // Three pieces: a middle fragment has 3 bytes of header.
        assert_eq!(pieces(&g, 1500, 500, 500), vec![500, 500, 500, 26]);
        // 487 + 497 + 497 = 1481 carried; the last piece has 19 + 7 bytes.
        assert_eq!(
            pieces(&g, 1500, 500, 500).iter().sum::<u32>(),
            1500 + 13 + 3 + 3 + 7
        );
    }

    #[test]
    fn gse_tiny_room_is_padding() {
        let g = Gse::new(6);
        // A first fragment needs 13 bytes of header and one byte.
        assert_eq!(g.piece(1500, 0, 13), None);
        assert_eq!(g.piece(1500, 0, 14).unwrap().carried, 1);
        // A last fragment needs 3 + 4 bytes around its data.
        assert_eq!(g.piece(1500, 1499, 7), None);
        assert!(g.piece(1500, 1499, 8).unwrap().done);
        // A middle fragment leaves at least one byte for the last.
        assert_eq!(g.piece(1500, 1490, 14).unwrap().carried, 9);
    }

    #[test]
    fn gse_length_field_bounds_a_gse_packet() {
        let g = Gse::new(6);
        // 5000 bytes never fit one GSE packet (4095 after the fixed header).
        let p = g.piece(5000, 0, 8000).unwrap();
        assert_eq!((p.carried, p.done), (4095 - 11, false));
        let q = g.piece(5000, p.carried, 8000 - p.frame_bytes).unwrap();
        assert_eq!((q.carried, q.frame_bytes, q.done), (916, 923, true));
    }

    #[test]
    fn rle_whole_and_fragments_exact() {
        let r = Rle::new(2, RleTrailer::Seq);
        assert_eq!(r.whole(40), 44);
        assert_eq!(r.piece(40, 0, 44).unwrap().frame_bytes, 44);
        // 1500 bytes in 188-byte timeslots: the ALPDU is 2 + 1500 + 1 = 1503
        // bytes; the start PPDU carries 184 of them, each continuation 186,
        // the end PPDU the rest.
        let p = pieces(&r, 1500, 188, 188);
        assert_eq!(p.len(), 9);
        assert_eq!(&p[..8], &[188; 8]);
        let carried: u32 = 184 + 7 * 186;
        assert_eq!(p[8], 2 + (1503 - carried));
        // Overhead: 4 + 8 x 2 headers, 2 protocol type, 1 trailer.
        assert_eq!(p.iter().sum::<u32>(), 1500 + 4 + 8 * 2 + 2 + 1);
        let crc = Rle::new(0, RleTrailer::Crc);
        assert_eq!(
            pieces(&crc, 1500, 188, 188).iter().sum::<u32>(),
            1500 + 4 + 8 * 2 + 4
        );
        assert_eq!(crc.whole(100), 102);
    }

    #[test]
    fn rle_ppdu_length_bounds_a_ppdu() {
        let r = Rle::new(2, RleTrailer::Seq);
        // 3000 bytes do not fit one PPDU even in a large slot.
        let p = r.piece(3000, 0, 10_000).unwrap();
        assert_eq!((p.carried, p.done), (2047, false));
    }

    #[test]
    fn raw_fills_byte_for_byte() {
        assert_eq!(pieces(&Raw, 1500, 1000, 1000), vec![1000, 500]);
        assert!(Raw.piece(10, 10, 0).unwrap().done);
        assert_eq!(Raw.piece(10, 0, 0), None);
    }

    #[test]
    fn efficiency_of_1500_byte_packets() {
        assert_eq!(efficiency(&Raw, 1500, 1000), 1.0);
        // GSE with a 6-byte label in large frames: about 10 bytes per packet.
        let e = efficiency(&Gse::new(6), 1500, 7264);
        assert!((e - 1500.0 / 1510.0).abs() < 0.002, "{e}");
        // RLE in 188-byte slots: 23 bytes of overhead per packet.
        let e = efficiency(&Rle::new(2, RleTrailer::Seq), 1500, 188);
        assert!((e - 1500.0 / 1523.0).abs() < 0.002, "{e}");
    }
}
