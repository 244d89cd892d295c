//! Wire formats the TUN front end needs: the virtio-net header that precedes
//! each packet on an `IFF_VNET_HDR` TUN device, and software segmentation of
//! offloaded TCP/UDP chunks into the packets a real link would carry.
//!
//! Checked views in the smoltcp manner: [`VnetHeader::parse`] and
//! [`GsoChunk::new_checked`] validate lengths once, after which nothing panics.

/// Length of `struct virtio_net_hdr` (no `num_buffers`).
pub const VNET_HDR_LEN: usize = 10;

pub const VNET_F_NEEDS_CSUM: u8 = 1;
pub const GSO_NONE: u8 = 0;
pub const GSO_TCPV4: u8 = 1;
pub const GSO_UDP: u8 = 3;
pub const GSO_TCPV6: u8 = 4;
pub const GSO_UDP_L4: u8 = 5;
pub const GSO_ECN: u8 = 0x80;

const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;

/// `struct virtio_net_hdr`, in the host's byte order (TUN's default).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct VnetHeader {
    pub flags: u8,
    pub gso_type: u8,
    pub hdr_len: u16,
    pub gso_size: u16,
    pub csum_start: u16,
    pub csum_offset: u16,
}

impl VnetHeader {
    pub fn parse(b: &[u8]) -> Option<VnetHeader> {
        if b.len() < VNET_HDR_LEN {
            return None;
        }
        let u = |i: usize| u16::from_ne_bytes([b[i], b[i + 1]]);
        Some(VnetHeader {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_ne_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_ne_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_ne_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_ne_bytes());
    }

    pub fn is_gso(&self) -> bool {
        self.gso_type & !GSO_ECN != GSO_NONE
    }
}

/// Why a chunk could not be segmented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    Truncated,
    UnsupportedGso(u8),
    BadHeader,
}

/// An offloaded chunk (vnet header + one IP packet larger than the MTU),
/// validated so that segmentation cannot index out of bounds.
#[derive(Debug)]
pub struct GsoChunk<'a> {
    ip: &'a [u8],
    /// Offset of the transport header.
    l4: usize,
    /// Length of all headers up to the payload.
    hl: usize,
    proto: u8,
    v6: bool,
    mss: usize,
}

impl<'a> GsoChunk<'a> {
    /// `frame` is what a TUN read returned: vnet header then the IP packet.
    pub fn new_checked(frame: &'a [u8]) -> Result<GsoChunk<'a>, WireError> {
        let hdr = VnetHeader::parse(frame).ok_or(WireError::Truncated)?;
        let ip = &frame[VNET_HDR_LEN..];
        let proto = match hdr.gso_type & !GSO_ECN {
            GSO_TCPV4 | GSO_TCPV6 => IPPROTO_TCP,
            GSO_UDP_L4 => IPPROTO_UDP,
            other => return Err(WireError::UnsupportedGso(other)),
        };
        if ip.is_empty() {
            return Err(WireError::Truncated);
        }
        let v6 = match ip[0] >> 4 {
            4 => false,
            6 => true,
            _ => return Err(WireError::BadHeader),
        };
        let min_l3 = if v6 { 40 } else { 20 };
        let l4 = hdr.csum_start as usize;
        if l4 < min_l3 || ip.len() < l4 + 8 {
            return Err(WireError::Truncated);
        }
        let hl = if proto == IPPROTO_TCP {
            if ip.len() < l4 + 20 {
                return Err(WireError::Truncated);
            }
            l4 + ((ip[l4 + 12] >> 4) as usize) * 4
        } else {
            l4 + 8
        };
        let mss = hdr.gso_size as usize;
        if mss == 0 || ip.len() < hl || hl < l4 + 8 {
            return Err(WireError::BadHeader);
        }
        Ok(GsoChunk {
            ip,
            l4,
            hl,
            proto,
            v6,
            mss,
        })
    }

    /// Number of wire packets and their total bytes, without segmenting.
    pub fn wire_size(&self) -> (u32, u32) {
        let payload = self.ip.len() - self.hl;
        let n = payload.div_ceil(self.mss).max(1);
        (n as u32, (payload + n * self.hl) as u32)
    }

    /// Call `emit` with each segment as a TUN frame (vnet header + IP packet),
    /// checksums left partial for the kernel to complete.
    pub fn segment(&self, mut emit: impl FnMut(Vec<u8>)) {
        let payload = &self.ip[self.hl..];
        let n = payload.len().div_ceil(self.mss).max(1);
        let ip = self.ip;
        let ip_id = if self.v6 {
            0
        } else {
            u16::from_be_bytes([ip[4], ip[5]])
        };
        let seq0 = if self.proto == IPPROTO_TCP {
            be32(&ip[self.l4 + 4..])
        } else {
            0
        };
        for i in 0..n {
            let chunk = &payload[i * self.mss..((i + 1) * self.mss).min(payload.len())];
            let len = self.hl + chunk.len();
            let mut f = Vec::with_capacity(VNET_HDR_LEN + len);
            f.resize(VNET_HDR_LEN, 0);
            f.extend_from_slice(&ip[..self.hl]);
            f.extend_from_slice(chunk);
            let p = &mut f[VNET_HDR_LEN..];
            let l4_len = (len - self.l4) as u16;
            if self.v6 {
                p[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
            } else {
                p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
                p[4..6].copy_from_slice(&ip_id.wrapping_add(i as u16).to_be_bytes());
                p[10] = 0;
                p[11] = 0;
                let ihl = ((p[0] & 0x0f) as usize) * 4;
                let c = !fold(sum16(&p[..ihl], 0));
                p[10..12].copy_from_slice(&c.to_be_bytes());
            }
            let l4 = self.l4;
            let csum_offset;
            if self.proto == IPPROTO_TCP {
                p[l4 + 4..l4 + 8]
                    .copy_from_slice(&seq0.wrapping_add((i * self.mss) as u32).to_be_bytes());
                let flags = &mut p[l4 + 13];
                if i + 1 < n {
                    *flags &= !(0x01 | 0x08); // FIN, PSH only on the last segment
                }
                if i > 0 {
                    *flags &= !0x80; // CWR only on the first
                }
                csum_offset = 16;
            } else {
                p[l4 + 4..l4 + 6].copy_from_slice(&l4_len.to_be_bytes());
                csum_offset = 6;
            }
            let pseudo = fold(pseudo_sum(p, self.v6, self.proto, l4_len));
            p[l4 + csum_offset..l4 + csum_offset + 2].copy_from_slice(&pseudo.to_be_bytes());
            let h = VnetHeader {
                flags: VNET_F_NEEDS_CSUM,
                gso_type: GSO_NONE,
                hdr_len: self.hl as u16,
                gso_size: 0,
                csum_start: l4 as u16,
                csum_offset: csum_offset as u16,
            };
            h.emit(&mut f[..VNET_HDR_LEN]);
            emit(f);
        }
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// One's-complement sum of big-endian 16-bit words (odd byte padded).
pub fn sum16(b: &[u8], mut acc: u32) -> u32 {
    let mut chunks = b.chunks_exact(2);
    for c in &mut chunks {
        acc += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [last] = chunks.remainder() {
        acc += (*last as u32) << 8;
    }
    acc
}

pub fn fold(mut acc: u32) -> u16 {
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

fn pseudo_sum(ip: &[u8], v6: bool, proto: u8, l4_len: u16) -> u32 {
    let acc = if v6 {
        sum16(&ip[8..40], 0)
    } else {
        sum16(&ip[12..20], 0)
    };
    acc + proto as u32 + l4_len as u32
}

/// Complete a partial checksum as the kernel would (for tests and captures).
pub fn complete_checksum(frame: &mut [u8]) {
    let Some(h) = VnetHeader::parse(frame) else {
        return;
    };
    if h.flags & VNET_F_NEEDS_CSUM == 0 {
        return;
    }
    let p = &mut frame[VNET_HDR_LEN..];
    let start = h.csum_start as usize;
    let at = start + h.csum_offset as usize;
    if at + 2 > p.len() {
        return;
    }
    let c = !fold(sum16(&p[start..], 0));
    p[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP/IPv4 chunk: 20-byte IP, 32-byte TCP (timestamps), `payload` bytes, mss 1448.
    fn tcp4_chunk(payload: usize, flags: u8) -> Vec<u8> {
        let total = 20 + 32 + payload;
        let mut ip = vec![0u8; total];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[4..6].copy_from_slice(&100u16.to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[198, 18, 3, 10]);
        ip[16..20].copy_from_slice(&[198, 18, 1, 10]);
        ip[20..22].copy_from_slice(&443u16.to_be_bytes());
        ip[22..24].copy_from_slice(&50000u16.to_be_bytes());
        ip[24..28].copy_from_slice(&1000u32.to_be_bytes());
        ip[32] = 8 << 4; // doff = 8 words
        ip[33] = flags;
        for (i, b) in ip[52..].iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let h = VnetHeader {
            flags: VNET_F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 52,
            gso_size: 1448,
            csum_start: 20,
            csum_offset: 16,
        };
        let mut f = vec![0u8; VNET_HDR_LEN];
        h.emit(&mut f);
        f.extend_from_slice(&ip);
        f
    }

    #[test]
    fn vnet_roundtrip() {
        let h = VnetHeader {
            flags: 1,
            gso_type: 4,
            hdr_len: 74,
            gso_size: 1428,
            csum_start: 40,
            csum_offset: 16,
        };
        let mut b = [0u8; VNET_HDR_LEN];
        h.emit(&mut b);
        assert_eq!(VnetHeader::parse(&b), Some(h));
        assert!(h.is_gso());
        assert_eq!(VnetHeader::parse(&b[..9]), None);
    }

    #[test]
    fn segments_tcp4_exactly() {
        let payload = 1448 * 3 + 100;
        let frame = tcp4_chunk(payload, 0x18 | 0x01 | 0x80); // PSH ACK FIN CWR
        let c = GsoChunk::new_checked(&frame).unwrap();
        assert_eq!(c.wire_size(), (4, (payload + 4 * 52) as u32));
        let mut segs = vec![];
        c.segment(|s| segs.push(s));
        assert_eq!(segs.len(), 4);
        let mut joined = vec![];
        for (i, s) in segs.iter_mut().enumerate() {
            let p = &s[VNET_HDR_LEN..];
            let len = u16::from_be_bytes([p[2], p[3]]) as usize;
            assert_eq!(len, p.len());
            assert_eq!(u16::from_be_bytes([p[4], p[5]]), 100 + i as u16);
            // IPv4 header checksum verifies.
            assert_eq!(fold(sum16(&p[..20], 0)), 0xffff);
            assert_eq!(be32(&p[24..]), 1000 + (i * 1448) as u32);
            let flags = p[33];
            assert_eq!(flags & 0x80 != 0, i == 0, "CWR on first only");
            assert_eq!(flags & 0x01 != 0, i == 3, "FIN on last only");
            joined.extend_from_slice(&p[52..]);
            // Completing the partial checksum gives a valid TCP checksum.
            complete_checksum(s);
            let p = &s[VNET_HDR_LEN..];
            let l4_len = (p.len() - 20) as u16;
            let acc = sum16(&p[20..], pseudo_sum(p, false, 6, l4_len));
            assert_eq!(fold(acc), 0xffff, "segment {i} checksum");
        }
        assert_eq!(joined, frame[VNET_HDR_LEN + 52..].to_vec());
    }

    #[test]
    fn rejects_truncated() {
        let frame = tcp4_chunk(3000, 0x10);
        assert_eq!(
            GsoChunk::new_checked(&frame[..VNET_HDR_LEN + 30]).unwrap_err(),
            WireError::Truncated
        );
        assert_eq!(
            GsoChunk::new_checked(&frame[..5]).unwrap_err(),
            WireError::Truncated
        );
        let mut bad = frame.clone();
        bad[1] = GSO_UDP;
        assert_eq!(
            GsoChunk::new_checked(&bad).unwrap_err(),
            WireError::UnsupportedGso(GSO_UDP)
        );
    }

    #[test]
    fn never_panics_on_garbage() {
        let mut rng = crate::rng::Rng::new(11);
        for _ in 0..20_000 {
            let len = (rng.next_u64() % 200) as usize;
            let mut f: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            if f.len() > 1 {
                f[1] = [GSO_TCPV4, GSO_TCPV6, GSO_UDP_L4][(rng.next_u64() % 3) as usize];
            }
            if let Ok(c) = GsoChunk::new_checked(&f) {
                c.wire_size();
                c.segment(|_| {});
            }
        }
    }
}
