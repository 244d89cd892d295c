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

pub const IPPROTO_TCP: u8 = 6;
pub const IPPROTO_UDP: u8 = 17;

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

/// Why a frame could not be used: each variant names the invariant of an
/// offloaded chunk (or of a partial checksum) that it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The frame is shorter than the virtio-net header.
    #[error("frame of {len} bytes is shorter than the virtio-net header")]
    TruncatedVnetHeader { len: usize },
    /// Only TCPv4, TCPv6 and UDP (L4) segmentation are supported.
    #[error("unsupported GSO type {0}")]
    UnsupportedGso(u8),
    /// Nothing follows the virtio-net header.
    #[error("no IP packet after the virtio-net header")]
    EmptyPacket,
    /// The IP version is neither 4 nor 6.
    #[error("IP version {0}")]
    BadIpVersion(u8),
    /// A TCPv4 chunk that is IPv6, or a TCPv6 chunk that is IPv4.
    #[error("GSO type {gso_type} on an IPv{version} packet")]
    GsoVersionMismatch { gso_type: u8, version: u8 },
    /// The IPv4 header length (IHL * 4) is below 20 bytes.
    #[error("IPv4 header length {ihl} is below 20")]
    Ipv4HeaderTooShort { ihl: usize },
    /// The IPv4 header (IHL * 4) extends past the transport header (csum_start).
    #[error("IPv4 header of {ihl} bytes extends past the transport header at {csum_start}")]
    Ipv4HeaderBeyondTransport { ihl: usize, csum_start: usize },
    /// The transport header (csum_start) starts inside the 40-byte IPv6 header.
    #[error("transport header at {csum_start} starts inside the IPv6 header")]
    Ipv6HeaderBeyondTransport { csum_start: usize },
    /// The IPv4 protocol (or the IPv6 next header when no extension header
    /// follows) is not the GSO type's transport.
    #[error("IP protocol {found}, expected {expected}")]
    ProtocolMismatch { expected: u8, found: u8 },
    /// The packet ends before the fixed transport header (UDP 8, TCP 20 bytes).
    #[error(
        "packet of {len} bytes ends before its transport header ({need} bytes at {csum_start})"
    )]
    TransportTruncated {
        csum_start: usize,
        need: usize,
        len: usize,
    },
    /// The TCP data offset is below 5 words (20 bytes).
    #[error("TCP data offset {doff} is below 5")]
    TcpDataOffsetTooSmall { doff: u8 },
    /// The headers (up to the end of the TCP options) extend past the packet.
    #[error("headers end at {end}, after the packet's {len} bytes")]
    HeadersBeyondPacket { end: usize, len: usize },
    /// The checksum offset is not the transport's checksum field (TCP 16, UDP 6).
    #[error("checksum offset {found}, expected {expected}")]
    ChecksumOffsetMismatch { expected: u16, found: u16 },
    /// The header-length hint (hdr_len) is larger than the packet.
    #[error("hdr_len {hdr_len} exceeds the packet's {len} bytes")]
    HdrLenBeyondPacket { hdr_len: usize, len: usize },
    /// The segment size (gso_size) is 0.
    #[error("segment size 0")]
    ZeroSegmentSize,
    /// A segment (headers plus payload) would not fit a 16-bit IP length.
    #[error("segments of {len} bytes exceed 65535")]
    SegmentTooLong { len: usize },
    /// The checksum field (csum_start + csum_offset) lies outside the packet.
    #[error("checksum field at {at} lies outside the packet's {len} bytes")]
    ChecksumBeyondPacket { at: usize, len: usize },
    /// The packet is shorter than the fixed IP header of its version.
    #[error("IPv{version} packet of {len} bytes is shorter than its {need}-byte header")]
    IpTruncated {
        version: u8,
        need: usize,
        len: usize,
    },
    /// An IPv6 extension header extends past the packet.
    #[error("IPv6 extension header at {at} extends past the packet's {len} bytes")]
    Ipv6ExtensionTruncated { at: usize, len: usize },
    /// More IPv6 extension headers than [`MAX_IPV6_EXTENSIONS`] before the
    /// transport header.
    #[error("more than {MAX_IPV6_EXTENSIONS} IPv6 extension headers")]
    Ipv6ExtensionChain,
    /// The transport segment (from its header on) is shorter than the fixed
    /// header of its protocol (TCP 20, UDP 8 bytes).
    #[error("protocol {protocol} segment of {len} bytes is shorter than its {need}-byte header")]
    TransportHeaderTruncated {
        protocol: u8,
        need: usize,
        len: usize,
    },
}

/// Largest IP packet a 16-bit length field describes.
const MAX_SEGMENT: usize = 65_535;
/// Bytes of the fixed IPv6 header.
const IPV6_HDR: usize = 40;
/// Bytes of an IPv4 header without options.
const IPV4_MIN_HDR: usize = 20;
/// Bytes of a TCP header without options, and of a UDP header.
const TCP_MIN_HDR: usize = 20;
const UDP_HDR: usize = 8;
/// Offsets of the checksum field in the TCP and UDP headers.
const TCP_CSUM: u16 = 16;
const UDP_CSUM: u16 = 6;

/// An offloaded chunk (vnet header + one IP packet larger than the MTU),
/// validated so that segmentation cannot index out of bounds.
///
/// Invariants established by [`GsoChunk::new_checked`] (`ip` is the packet,
/// `l4` the transport header's offset, `hl` the length of all headers):
/// - IPv4: `20 <= IHL * 4 <= l4`; IPv6: `40 <= l4`;
/// - TCP: data offset >= 5, so `l4 + 20 <= hl`; UDP: `hl == l4 + 8`;
/// - `hl <= ip.len()`, `mss > 0`, and every segment `<= 65535` bytes.
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
    /// Checks every invariant [`wire_size`](Self::wire_size) and
    /// [`segment`](Self::segment) rely on; after it, neither can panic.
    pub fn new_checked(frame: &'a [u8]) -> Result<GsoChunk<'a>, WireError> {
        let hdr =
            VnetHeader::parse(frame).ok_or(WireError::TruncatedVnetHeader { len: frame.len() })?;
        let ip = &frame[VNET_HDR_LEN..];
        let gso = hdr.gso_type & !GSO_ECN;
        let (proto, csum_offset) = match gso {
            GSO_TCPV4 | GSO_TCPV6 => (IPPROTO_TCP, TCP_CSUM),
            GSO_UDP_L4 => (IPPROTO_UDP, UDP_CSUM),
            other => return Err(WireError::UnsupportedGso(other)),
        };
        let version = ip.first().ok_or(WireError::EmptyPacket)? >> 4;
        let v6 = match version {
            4 => false,
            6 => true,
            v => return Err(WireError::BadIpVersion(v)),
        };
        if (gso == GSO_TCPV4 && v6) || (gso == GSO_TCPV6 && !v6) {
            return Err(WireError::GsoVersionMismatch {
                gso_type: gso,
                version,
            });
        }
        let l4 = hdr.csum_start as usize;
        let need = if proto == IPPROTO_TCP {
            TCP_MIN_HDR
        } else {
            UDP_HDR
        };
        if v6 {
            if l4 < IPV6_HDR {
                return Err(WireError::Ipv6HeaderBeyondTransport { csum_start: l4 });
            }
        } else {
            let ihl = ((ip[0] & 0x0f) as usize) * 4;
            if ihl < IPV4_MIN_HDR {
                return Err(WireError::Ipv4HeaderTooShort { ihl });
            }
            if ihl > l4 {
                return Err(WireError::Ipv4HeaderBeyondTransport {
                    ihl,
                    csum_start: l4,
                });
            }
        }
        if ip.len() < l4 + need {
            return Err(WireError::TransportTruncated {
                csum_start: l4,
                need,
                len: ip.len(),
            });
        }
        // The IPv4 protocol, or the IPv6 next header when the transport
        // header follows the fixed header directly.
        let found = if !v6 {
            Some(ip[9])
        } else {
            (l4 == IPV6_HDR).then_some(ip[6])
        };
        if let Some(found) = found.filter(|&f| f != proto) {
            return Err(WireError::ProtocolMismatch {
                expected: proto,
                found,
            });
        }
        let hl = if proto == IPPROTO_TCP {
            let doff = ip[l4 + 12] >> 4;
            if (doff as usize) * 4 < TCP_MIN_HDR {
                return Err(WireError::TcpDataOffsetTooSmall { doff });
            }
            l4 + (doff as usize) * 4
        } else {
            l4 + UDP_HDR
        };
        if hl > ip.len() {
            return Err(WireError::HeadersBeyondPacket {
                end: hl,
                len: ip.len(),
            });
        }
        if hdr.csum_offset != csum_offset {
            return Err(WireError::ChecksumOffsetMismatch {
                expected: csum_offset,
                found: hdr.csum_offset,
            });
        }
        // hdr_len is only a hint of the linear part (the kernel's
        // skb_headlen), so only its upper bound is an invariant.
        if hdr.hdr_len as usize > ip.len() {
            return Err(WireError::HdrLenBeyondPacket {
                hdr_len: hdr.hdr_len as usize,
                len: ip.len(),
            });
        }
        let mss = hdr.gso_size as usize;
        if mss == 0 {
            return Err(WireError::ZeroSegmentSize);
        }
        let longest = hl + mss.min(ip.len() - hl);
        if longest > MAX_SEGMENT {
            return Err(WireError::SegmentTooLong { len: longest });
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

    /// The IP packet (the frame after the virtio-net header).
    pub fn packet(&self) -> &'a [u8] {
        self.ip
    }

    /// Offset of the transport header in [`packet`](Self::packet): the IP
    /// header with options or extension headers.
    pub fn transport_offset(&self) -> usize {
        self.l4
    }

    /// Length of all headers (IP and transport) each segment carries.
    pub fn headers_len(&self) -> usize {
        self.hl
    }

    /// [`IPPROTO_TCP`] or [`IPPROTO_UDP`].
    pub fn protocol(&self) -> u8 {
        self.proto
    }

    /// The payload bytes of each segment but the last (gso_size).
    pub fn segment_size(&self) -> usize {
        self.mss
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
                p[4..6].copy_from_slice(&((len - IPV6_HDR) as u16).to_be_bytes());
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
            let csum_offset = if self.proto == IPPROTO_TCP {
                p[l4 + 4..l4 + 8]
                    .copy_from_slice(&seq0.wrapping_add((i * self.mss) as u32).to_be_bytes());
                let flags = &mut p[l4 + 13];
                if i + 1 < n {
                    *flags &= !(0x01 | 0x08); // FIN, PSH only on the last segment
                }
                if i > 0 {
                    *flags &= !0x80; // CWR only on the first
                }
                TCP_CSUM as usize
            } else {
                p[l4 + 4..l4 + 6].copy_from_slice(&l4_len.to_be_bytes());
                UDP_CSUM as usize
            };
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

/// Byte offsets of the IP header fields the front end reads.
mod ip_field {
    use core::ops::Range;
    pub const VER_IHL: usize = 0;
    /// Flags (3 bits) and fragment offset (13 bits).
    pub const V4_FRAG: Range<usize> = 6..8;
    pub const V4_PROTOCOL: usize = 9;
    pub const V4_SRC: Range<usize> = 12..16;
    pub const V4_DST: Range<usize> = 16..20;
    pub const V6_NEXT_HEADER: usize = 6;
    pub const V6_SRC: Range<usize> = 8..24;
    pub const V6_DST: Range<usize> = 24..40;
}

/// IPv4's more-fragments flag and fragment offset in [`ip_field::V4_FRAG`].
const V4_MF: u16 = 0x2000;
const V4_OFFSET: u16 = 0x1fff;

/// IPv6 extension headers [`Ipv6Packet::upper_layer`] steps over.
const IPV6_HOP_BY_HOP: u8 = 0;
const IPV6_ROUTING: u8 = 43;
const IPV6_FRAGMENT: u8 = 44;
const IPV6_AUTH: u8 = 51;
const IPV6_DEST_OPTS: u8 = 60;
/// Extension headers followed before giving up (a chain longer than any
/// real stack sends).
pub const MAX_IPV6_EXTENSIONS: usize = 8;

/// Where an IP packet's upper-layer (transport) header starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpperLayer {
    /// The IPv4 protocol or the last IPv6 next header (6 TCP, 17 UDP).
    pub protocol: u8,
    /// Bytes of IP header before it: IHL * 4 with IPv4 options, or 40 plus
    /// the IPv6 extension headers; at most the packet's length.
    pub offset: usize,
    /// A fragment (more follow or not the first): no whole transport
    /// segment follows the header. A whole datagram in one fragment (an
    /// IPv6 atomic fragment) is not one.
    pub fragment: bool,
}

/// A checked view of an IPv4 header (smoltcp style): after
/// [`Ipv4Packet::new_checked`] the fixed 20-byte header is present, the
/// version is 4 and the header length (IHL) is at least 20 bytes and within
/// the buffer, so no accessor can panic.
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Check the buffer (untrusted input) and wrap it.
    pub fn new_checked(buffer: T) -> Result<Ipv4Packet<T>, WireError> {
        let b = buffer.as_ref();
        let Some(&first) = b.first() else {
            return Err(WireError::EmptyPacket);
        };
        if first >> 4 != 4 {
            return Err(WireError::BadIpVersion(first >> 4));
        }
        if b.len() < IPV4_MIN_HDR {
            return Err(WireError::IpTruncated {
                version: 4,
                need: IPV4_MIN_HDR,
                len: b.len(),
            });
        }
        let ihl = (first & 0x0f) as usize * 4;
        if ihl < IPV4_MIN_HDR {
            return Err(WireError::Ipv4HeaderTooShort { ihl });
        }
        if ihl > b.len() {
            return Err(WireError::IpTruncated {
                version: 4,
                need: ihl,
                len: b.len(),
            });
        }
        Ok(Ipv4Packet { buffer })
    }

    /// The header length in bytes (IHL * 4).
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[ip_field::VER_IHL] & 0x0f) as usize * 4
    }

    pub fn dst_addr(&self) -> std::net::Ipv4Addr {
        let b = &self.buffer.as_ref()[ip_field::V4_DST];
        std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    pub fn src_addr(&self) -> std::net::Ipv4Addr {
        let b = &self.buffer.as_ref()[ip_field::V4_SRC];
        std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[ip_field::V4_PROTOCOL]
    }

    /// True for a fragment: more fragments follow, or its offset is not 0.
    pub fn is_fragment(&self) -> bool {
        let f = &self.buffer.as_ref()[ip_field::V4_FRAG];
        u16::from_be_bytes([f[0], f[1]]) & (V4_MF | V4_OFFSET) != 0
    }

    /// The protocol after the header and its offset (the header length).
    pub fn upper_layer(&self) -> UpperLayer {
        UpperLayer {
            protocol: self.protocol(),
            offset: self.header_len(),
            fragment: self.is_fragment(),
        }
    }
}

/// A checked view of an IPv6 header: after [`Ipv6Packet::new_checked`] the
/// fixed 40-byte header is present and the version is 6.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// Check the buffer (untrusted input) and wrap it.
    pub fn new_checked(buffer: T) -> Result<Ipv6Packet<T>, WireError> {
        let b = buffer.as_ref();
        let Some(&first) = b.first() else {
            return Err(WireError::EmptyPacket);
        };
        if first >> 4 != 6 {
            return Err(WireError::BadIpVersion(first >> 4));
        }
        if b.len() < IPV6_HDR {
            return Err(WireError::IpTruncated {
                version: 6,
                need: IPV6_HDR,
                len: b.len(),
            });
        }
        Ok(Ipv6Packet { buffer })
    }

    pub fn dst_addr(&self) -> std::net::Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[ip_field::V6_DST]);
        std::net::Ipv6Addr::from(a)
    }

    pub fn src_addr(&self) -> std::net::Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[ip_field::V6_SRC]);
        std::net::Ipv6Addr::from(a)
    }

    /// The next header field of the fixed header.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[ip_field::V6_NEXT_HEADER]
    }

    /// Follow the extension headers (hop-by-hop, routing, fragment,
    /// authentication, destination options; at most
    /// [`MAX_IPV6_EXTENSIONS`]) to the first other next header, which is
    /// the upper layer's. Checked: an extension header that extends past
    /// the buffer is an error.
    pub fn upper_layer(&self) -> Result<UpperLayer, WireError> {
        let b = self.buffer.as_ref();
        let mut next = self.next_header();
        let mut at = IPV6_HDR;
        let mut fragment = false;
        for _ in 0..=MAX_IPV6_EXTENSIONS {
            let len = match next {
                IPV6_HOP_BY_HOP | IPV6_ROUTING | IPV6_DEST_OPTS => {
                    b.get(at + 1).map(|&l| (l as usize + 1) * 8)
                }
                IPV6_AUTH => b.get(at + 1).map(|&l| (l as usize + 2) * 4),
                IPV6_FRAGMENT => Some(8),
                protocol => {
                    return Ok(UpperLayer {
                        protocol,
                        offset: at,
                        fragment,
                    })
                }
            };
            let end = len.map_or(usize::MAX, |l| at + l);
            if end > b.len() {
                return Err(WireError::Ipv6ExtensionTruncated { at, len: b.len() });
            }
            if next == IPV6_FRAGMENT {
                let f = u16::from_be_bytes([b[at + 2], b[at + 3]]);
                // Offset in the top 13 bits, M (more fragments) the last.
                fragment |= f & 0xfff9 != 0;
            }
            next = b[at];
            at = end;
        }
        Err(WireError::Ipv6ExtensionChain)
    }
}

/// Byte offsets of the TCP and UDP header fields.
mod l4_field {
    use core::ops::Range;
    pub const SRC_PORT: Range<usize> = 0..2;
    pub const DST_PORT: Range<usize> = 2..4;
    pub const TCP_SEQ: Range<usize> = 4..8;
    pub const TCP_DATA_OFFSET: usize = 12;
    pub const TCP_FLAGS: usize = 13;
}

/// TCP flags (the low byte of the flags field).
pub mod tcp_flags {
    pub const FIN: u8 = 0x01;
    pub const SYN: u8 = 0x02;
    pub const RST: u8 = 0x04;
    pub const PSH: u8 = 0x08;
    pub const ACK: u8 = 0x10;
}

/// A checked view of a TCP segment (header, options, payload): after
/// [`TcpPacket::new_checked`] the fixed header is present, the data offset
/// is at least 5 words and the options end within the buffer, so no
/// accessor can panic. The payload is the rest of the buffer.
#[derive(Debug, Clone, Copy)]
pub struct TcpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TcpPacket<T> {
    /// Check the buffer (untrusted input, from the TCP header on) and wrap it.
    pub fn new_checked(buffer: T) -> Result<TcpPacket<T>, WireError> {
        let b = buffer.as_ref();
        if b.len() < TCP_MIN_HDR {
            return Err(WireError::TransportHeaderTruncated {
                protocol: IPPROTO_TCP,
                need: TCP_MIN_HDR,
                len: b.len(),
            });
        }
        let doff = b[l4_field::TCP_DATA_OFFSET] >> 4;
        if (doff as usize) * 4 < TCP_MIN_HDR {
            return Err(WireError::TcpDataOffsetTooSmall { doff });
        }
        if (doff as usize) * 4 > b.len() {
            return Err(WireError::HeadersBeyondPacket {
                end: doff as usize * 4,
                len: b.len(),
            });
        }
        Ok(TcpPacket { buffer })
    }

    pub fn src_port(&self) -> u16 {
        be16(&self.buffer.as_ref()[l4_field::SRC_PORT])
    }

    pub fn dst_port(&self) -> u16 {
        be16(&self.buffer.as_ref()[l4_field::DST_PORT])
    }

    pub fn seq_number(&self) -> u32 {
        be32(&self.buffer.as_ref()[l4_field::TCP_SEQ])
    }

    /// The low byte of the flags ([`tcp_flags`]).
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[l4_field::TCP_FLAGS]
    }

    /// The header length with options (data offset * 4).
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[l4_field::TCP_DATA_OFFSET] >> 4) as usize * 4
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// A checked view of a UDP datagram: after [`UdpPacket::new_checked`] the
/// 8-byte header is present. The payload is the rest of the buffer (the
/// length field is not trusted).
#[derive(Debug, Clone, Copy)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Check the buffer (untrusted input, from the UDP header on) and wrap it.
    pub fn new_checked(buffer: T) -> Result<UdpPacket<T>, WireError> {
        let len = buffer.as_ref().len();
        if len < UDP_HDR {
            return Err(WireError::TransportHeaderTruncated {
                protocol: IPPROTO_UDP,
                need: UDP_HDR,
                len,
            });
        }
        Ok(UdpPacket { buffer })
    }

    pub fn src_port(&self) -> u16 {
        be16(&self.buffer.as_ref()[l4_field::SRC_PORT])
    }

    pub fn dst_port(&self) -> u16 {
        be16(&self.buffer.as_ref()[l4_field::DST_PORT])
    }

    pub fn header_len(&self) -> usize {
        UDP_HDR
    }

    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[UDP_HDR..]
    }
}

/// An IP packet around `l4` (a transport header and payload): IPv4 without
/// options (don't fragment, TTL 64) or IPv6 (hop limit 64), checksums left
/// 0, as a TUN device with offloads gives them. For tests, benchmarks and
/// fuzz seeds; panics if the address families differ or the packet would
/// not fit an IP length.
fn emit_ip(src: std::net::IpAddr, dst: std::net::IpAddr, protocol: u8, l4: &[u8]) -> Vec<u8> {
    use std::net::IpAddr;
    let mut p = Vec::with_capacity(IPV6_HDR + l4.len());
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = u16::try_from(IPV4_MIN_HDR + l4.len()).expect("IPv4 packet too long");
            p.extend_from_slice(&[0x45, 0]);
            p.extend_from_slice(&total.to_be_bytes());
            p.extend_from_slice(&[0, 0, 0x40, 0, 64, protocol, 0, 0]);
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let len = u16::try_from(l4.len()).expect("IPv6 payload too long");
            p.extend_from_slice(&[0x60, 0, 0, 0]);
            p.extend_from_slice(&len.to_be_bytes());
            p.extend_from_slice(&[protocol, 64]);
            p.extend_from_slice(&s.octets());
            p.extend_from_slice(&d.octets());
        }
        _ => panic!("emit_ip: {src} and {dst} are of different families"),
    }
    p.extend_from_slice(l4);
    p
}

/// A TCP/IP packet (see [`emit_ip`]'s rules): `flags` from [`tcp_flags`],
/// acknowledgement number 0, window 65535, `options` (a multiple of 4
/// bytes, at most 40) after the fixed header.
pub fn emit_tcp(
    src: std::net::SocketAddr,
    dst: std::net::SocketAddr,
    seq: u32,
    flags: u8,
    options: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    assert!(
        options.len() % 4 == 0 && options.len() <= 40,
        "TCP options of {} bytes",
        options.len()
    );
    let hl = TCP_MIN_HDR + options.len();
    let mut t = Vec::with_capacity(hl + payload.len());
    t.extend_from_slice(&src.port().to_be_bytes());
    t.extend_from_slice(&dst.port().to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&[
        0,
        0,
        0,
        0,
        (hl as u8 / 4) << 4,
        flags,
        0xff,
        0xff,
        0,
        0,
        0,
        0,
    ]);
    t.extend_from_slice(options);
    t.extend_from_slice(payload);
    emit_ip(src.ip(), dst.ip(), IPPROTO_TCP, &t)
}

/// A UDP/IP packet (see [`emit_ip`]'s rules).
pub fn emit_udp(src: std::net::SocketAddr, dst: std::net::SocketAddr, payload: &[u8]) -> Vec<u8> {
    let len = u16::try_from(UDP_HDR + payload.len()).expect("UDP datagram too long");
    let mut u = Vec::with_capacity(UDP_HDR + payload.len());
    u.extend_from_slice(&src.port().to_be_bytes());
    u.extend_from_slice(&dst.port().to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    emit_ip(src.ip(), dst.ip(), IPPROTO_UDP, &u)
}

/// The destination address of an IP packet (either version), checked.
pub fn ip_destination(packet: &[u8]) -> Result<std::net::IpAddr, WireError> {
    match packet.first().map(|b| b >> 4) {
        None => Err(WireError::EmptyPacket),
        Some(4) => Ipv4Packet::new_checked(packet).map(|p| p.dst_addr().into()),
        Some(6) => Ipv6Packet::new_checked(packet).map(|p| p.dst_addr().into()),
        Some(v) => Err(WireError::BadIpVersion(v)),
    }
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
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
///
/// `Ok(true)` if a checksum was written, `Ok(false)` if none was asked for
/// (no `NEEDS_CSUM`); an error, with the frame untouched, if the header is
/// truncated or the checksum field (`csum_start + csum_offset`, 2 bytes)
/// lies outside the packet. The sum covers the packet from `csum_start`.
pub fn complete_checksum(frame: &mut [u8]) -> Result<bool, WireError> {
    let h = VnetHeader::parse(frame).ok_or(WireError::TruncatedVnetHeader { len: frame.len() })?;
    if h.flags & VNET_F_NEEDS_CSUM == 0 {
        return Ok(false);
    }
    let p = &mut frame[VNET_HDR_LEN..];
    let start = h.csum_start as usize;
    let at = start + h.csum_offset as usize;
    if at + 2 > p.len() {
        return Err(WireError::ChecksumBeyondPacket { at, len: p.len() });
    }
    let c = !fold(sum16(&p[start..], 0));
    p[at..at + 2].copy_from_slice(&c.to_be_bytes());
    Ok(true)
}

/// What the queue may use of an IP packet (untrusted bytes; anything that
/// does not parse is flow 0, not ECN-capable): its ECN field (IPv4's TOS,
/// IPv6's traffic class) and its flow, a hash (FNV-1a) of its addresses,
/// protocol and, for TCP and UDP that are not fragments, its ports.
pub fn flow_meta(packet: &[u8]) -> crate::queue::Meta {
    use crate::queue::{Ecn, Meta};
    let mut h: u32 = 0x811c_9dc5;
    let mut mix = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ b as u32).wrapping_mul(0x0100_0193);
        }
    };
    let (ecn, upper) = match packet.first().map(|b| b >> 4) {
        Some(4) => match Ipv4Packet::new_checked(packet) {
            Ok(ip) => {
                mix(&packet[ip_field::V4_SRC]);
                mix(&packet[ip_field::V4_DST]);
                (Ecn::from_bits(packet[1]), Some(ip.upper_layer()))
            }
            Err(_) => return Meta::default(),
        },
        Some(6) => match Ipv6Packet::new_checked(packet) {
            Ok(ip) => {
                mix(&packet[ip_field::V6_SRC]);
                mix(&packet[ip_field::V6_DST]);
                // The traffic class spans the first two bytes: its low two bits are the ECN field.
                (Ecn::from_bits(packet[1] >> 4), ip.upper_layer().ok())
            }
            Err(_) => return Meta::default(),
        },
        _ => return Meta::default(),
    };
    if let Some(u) = upper {
        mix(&[u.protocol]);
        if (u.protocol == 6 || u.protocol == 17) && !u.fragment {
            if let Some(ports) = packet.get(u.offset..u.offset + 4) {
                mix(ports);
            }
        }
    }
    Meta { flow: h, ecn }
}

/// Mark an ECN-capable IP packet Congestion Experienced (RFC 3168), the
/// IPv4 header checksum updated incrementally (RFC 1624). False, and the
/// packet untouched, if it is not ECN-capable or does not parse.
pub fn set_ce(packet: &mut [u8]) -> bool {
    match packet.first().map(|b| b >> 4) {
        Some(4) if Ipv4Packet::new_checked(&*packet).is_ok() => {
            let old = packet[1];
            if old & 3 == 0 {
                return false;
            }
            packet[1] = old | 3;
            // HC' = ~(~HC + ~m + m'), over the 16-bit word holding the TOS byte.
            let word = |tos: u8| u16::from_be_bytes([packet[0], tos]);
            let (m, m2) = (word(old), word(old | 3));
            let hc = u16::from_be_bytes([packet[10], packet[11]]);
            let mut sum = (!hc) as u32 + (!m) as u32 + m2 as u32;
            while sum > 0xffff {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            packet[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            true
        }
        Some(6) if Ipv6Packet::new_checked(&*packet).is_ok() => {
            if (packet[1] >> 4) & 3 == 0 {
                return false;
            }
            packet[1] |= 0x30;
            true
        }
        _ => false,
    }
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
            assert_eq!(complete_checksum(s), Ok(true));
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
        assert!(matches!(
            GsoChunk::new_checked(&frame[..VNET_HDR_LEN + 30]).unwrap_err(),
            WireError::TransportTruncated { .. }
        ));
        assert!(matches!(
            GsoChunk::new_checked(&frame[..5]).unwrap_err(),
            WireError::TruncatedVnetHeader { .. }
        ));
        let mut bad = frame.clone();
        bad[1] = GSO_UDP;
        assert_eq!(
            GsoChunk::new_checked(&bad).unwrap_err(),
            WireError::UnsupportedGso(GSO_UDP)
        );
    }

    /// A UDP chunk (GSO_UDP_L4): IPv6 or IPv4, `payload` bytes, 1200-byte segments.
    fn udp_chunk(v6: bool, payload: usize) -> Vec<u8> {
        let l3 = if v6 { 40 } else { 20 };
        let mut ip = vec![0u8; l3 + 8 + payload];
        if v6 {
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
            ip[6] = IPPROTO_UDP;
            ip[7] = 64;
            ip[8..24].copy_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            ip[24..40].copy_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        } else {
            ip[0] = 0x45;
            ip[8] = 64;
            ip[9] = IPPROTO_UDP;
            ip[12..16].copy_from_slice(&[198, 18, 3, 10]);
            ip[16..20].copy_from_slice(&[198, 18, 1, 10]);
        }
        ip[l3..l3 + 2].copy_from_slice(&443u16.to_be_bytes());
        ip[l3 + 2..l3 + 4].copy_from_slice(&50000u16.to_be_bytes());
        let h = VnetHeader {
            flags: VNET_F_NEEDS_CSUM,
            gso_type: GSO_UDP_L4,
            hdr_len: (l3 + 8) as u16,
            gso_size: 1200,
            csum_start: l3 as u16,
            csum_offset: 6,
        };
        let mut f = vec![0u8; VNET_HDR_LEN];
        h.emit(&mut f);
        f.extend_from_slice(&ip);
        f
    }

    /// Rewrite the vnet header of `frame` with `f` applied.
    fn with_header(mut frame: Vec<u8>, f: impl FnOnce(&mut VnetHeader)) -> Vec<u8> {
        let mut h = VnetHeader::parse(&frame).unwrap();
        f(&mut h);
        h.emit(&mut frame[..VNET_HDR_LEN]);
        frame
    }

    fn reject(frame: &[u8]) -> WireError {
        GsoChunk::new_checked(frame).unwrap_err()
    }

    /// Byte `i` of the IP packet.
    fn ip_byte(frame: &mut [u8], i: usize) -> &mut u8 {
        &mut frame[VNET_HDR_LEN + i]
    }

    #[test]
    fn accepts_udp_over_both_versions() {
        for v6 in [false, true] {
            let frame = udp_chunk(v6, 3000);
            let c = GsoChunk::new_checked(&frame).unwrap();
            let hl = if v6 { 48 } else { 28 };
            assert_eq!(c.wire_size(), (3, (3000 + 3 * hl) as u32));
            let mut segs = vec![];
            c.segment(|s| segs.push(s));
            for s in segs.iter_mut() {
                assert_eq!(complete_checksum(s), Ok(true));
                let p = &s[VNET_HDR_LEN..];
                let l4_len = (p.len() - (hl - 8)) as u16;
                assert_eq!(u16::from_be_bytes([p[hl - 4], p[hl - 3]]), l4_len);
                let acc = sum16(&p[hl - 8..], pseudo_sum(p, v6, IPPROTO_UDP, l4_len));
                assert_eq!(fold(acc), 0xffff);
            }
        }
    }

    #[test]
    fn rejects_a_frame_shorter_than_the_vnet_header() {
        let frame = tcp4_chunk(3000, 0x10);
        assert_eq!(
            reject(&frame[..9]),
            WireError::TruncatedVnetHeader { len: 9 }
        );
    }

    #[test]
    fn rejects_unsupported_gso() {
        let frame = with_header(tcp4_chunk(3000, 0x10), |h| h.gso_type = GSO_UDP);
        assert_eq!(reject(&frame), WireError::UnsupportedGso(GSO_UDP));
    }

    #[test]
    fn rejects_an_empty_packet() {
        let frame = tcp4_chunk(3000, 0x10);
        assert_eq!(reject(&frame[..VNET_HDR_LEN]), WireError::EmptyPacket);
    }

    #[test]
    fn rejects_an_unknown_ip_version() {
        let mut frame = tcp4_chunk(3000, 0x10);
        *ip_byte(&mut frame, 0) = 0x55;
        assert_eq!(reject(&frame), WireError::BadIpVersion(5));
    }

    #[test]
    fn rejects_a_gso_type_of_the_other_ip_version() {
        let frame = with_header(tcp4_chunk(3000, 0x10), |h| h.gso_type = GSO_TCPV6);
        assert_eq!(
            reject(&frame),
            WireError::GsoVersionMismatch {
                gso_type: GSO_TCPV6,
                version: 4
            }
        );
    }

    #[test]
    fn rejects_an_ipv4_header_below_20_bytes() {
        let mut frame = tcp4_chunk(3000, 0x10);
        *ip_byte(&mut frame, 0) = 0x44;
        assert_eq!(reject(&frame), WireError::Ipv4HeaderTooShort { ihl: 16 });
    }

    #[test]
    fn rejects_an_ipv4_header_past_csum_start() {
        let mut frame = tcp4_chunk(3000, 0x10);
        *ip_byte(&mut frame, 0) = 0x4f; // 60 bytes, the transport header is at 20
        assert_eq!(
            reject(&frame),
            WireError::Ipv4HeaderBeyondTransport {
                ihl: 60,
                csum_start: 20
            }
        );
    }

    #[test]
    fn rejects_csum_start_inside_the_ipv6_header() {
        let frame = with_header(udp_chunk(true, 3000), |h| h.csum_start = 32);
        assert_eq!(
            reject(&frame),
            WireError::Ipv6HeaderBeyondTransport { csum_start: 32 }
        );
    }

    #[test]
    fn rejects_a_packet_ending_before_the_transport_header() {
        let frame = tcp4_chunk(3000, 0x10);
        assert_eq!(
            reject(&frame[..VNET_HDR_LEN + 39]),
            WireError::TransportTruncated {
                csum_start: 20,
                need: 20,
                len: 39
            }
        );
        let frame = udp_chunk(true, 3000);
        assert_eq!(
            reject(&frame[..VNET_HDR_LEN + 47]),
            WireError::TransportTruncated {
                csum_start: 40,
                need: 8,
                len: 47
            }
        );
    }

    #[test]
    fn rejects_a_protocol_other_than_the_gso_types() {
        let mut frame = tcp4_chunk(3000, 0x10);
        *ip_byte(&mut frame, 9) = IPPROTO_UDP;
        assert_eq!(
            reject(&frame),
            WireError::ProtocolMismatch {
                expected: 6,
                found: 17
            }
        );
        let mut frame = udp_chunk(true, 3000);
        *ip_byte(&mut frame, 6) = IPPROTO_TCP;
        assert_eq!(
            reject(&frame),
            WireError::ProtocolMismatch {
                expected: 17,
                found: 6
            }
        );
    }

    #[test]
    fn rejects_a_tcp_data_offset_below_5() {
        let mut frame = tcp4_chunk(3000, 0x10);
        *ip_byte(&mut frame, 32) = 4 << 4;
        assert_eq!(reject(&frame), WireError::TcpDataOffsetTooSmall { doff: 4 });
    }

    #[test]
    fn rejects_tcp_options_past_the_packet() {
        let mut frame = tcp4_chunk(0, 0x10);
        *ip_byte(&mut frame, 32) = 15 << 4; // 60-byte TCP header in a 52-byte packet
        let frame = with_header(frame, |h| h.hdr_len = 40);
        assert_eq!(
            reject(&frame),
            WireError::HeadersBeyondPacket { end: 80, len: 52 }
        );
    }

    #[test]
    fn rejects_a_checksum_offset_off_the_checksum_field() {
        let frame = with_header(tcp4_chunk(3000, 0x10), |h| h.csum_offset = 6);
        assert_eq!(
            reject(&frame),
            WireError::ChecksumOffsetMismatch {
                expected: 16,
                found: 6
            }
        );
        let frame = with_header(udp_chunk(false, 3000), |h| h.csum_offset = 16);
        assert_eq!(
            reject(&frame),
            WireError::ChecksumOffsetMismatch {
                expected: 6,
                found: 16
            }
        );
    }

    #[test]
    fn rejects_hdr_len_past_the_packet() {
        let frame = with_header(tcp4_chunk(100, 0x10), |h| h.hdr_len = 153);
        assert_eq!(
            reject(&frame),
            WireError::HdrLenBeyondPacket {
                hdr_len: 153,
                len: 152
            }
        );
    }

    #[test]
    fn rejects_a_zero_segment_size() {
        let frame = with_header(tcp4_chunk(3000, 0x10), |h| h.gso_size = 0);
        assert_eq!(reject(&frame), WireError::ZeroSegmentSize);
    }

    #[test]
    fn rejects_segments_longer_than_an_ip_length_holds() {
        let frame = with_header(tcp4_chunk(65_500, 0x10), |h| h.gso_size = 65_535);
        assert_eq!(reject(&frame), WireError::SegmentTooLong { len: 65_552 });
    }

    #[test]
    fn checksum_completion_checks_its_field() {
        let mut frame = with_header(tcp4_chunk(10, 0x10), |h| h.csum_start = 50);
        let before = frame.clone();
        assert_eq!(
            complete_checksum(&mut frame),
            Err(WireError::ChecksumBeyondPacket { at: 66, len: 62 })
        );
        assert_eq!(frame, before);
        assert_eq!(
            complete_checksum(&mut frame[..4]),
            Err(WireError::TruncatedVnetHeader { len: 4 })
        );
        let mut plain = with_header(tcp4_chunk(10, 0x10), |h| h.flags = 0);
        assert_eq!(complete_checksum(&mut plain), Ok(false));
    }

    #[test]
    fn never_panics_on_mutated_chunks() {
        // Valid chunks with random header bytes changed: whatever new_checked
        // accepts, segmentation and checksum completion handle.
        let mut rng = crate::rng::Rng::new(12);
        let bases = [
            tcp4_chunk(3000, 0x19),
            udp_chunk(true, 2500),
            udp_chunk(false, 10),
        ];
        for i in 0..50_000 {
            let mut f = bases[i % bases.len()].clone();
            for _ in 0..1 + rng.next_u64() % 3 {
                let at = (rng.next_u64() % 72) as usize % f.len();
                f[at] = rng.next_u64() as u8;
            }
            let cut = f.len() - (rng.next_u64() % 8) as usize * (rng.next_u64() % 2) as usize;
            let f = &f[..cut];
            if let Ok(c) = GsoChunk::new_checked(f) {
                c.wire_size();
                c.segment(|mut s| {
                    let _ = complete_checksum(&mut s);
                });
            }
            let _ = complete_checksum(&mut f.to_vec());
        }
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

    #[test]
    fn ipv4_view_reads_the_destination() {
        let mut h = [0u8; 24];
        h[0] = 0x46; // version 4, IHL 6 (24 bytes)
        h[16..20].copy_from_slice(&[198, 18, 1, 10]);
        let p = Ipv4Packet::new_checked(&h[..]).unwrap();
        assert_eq!(p.header_len(), 24);
        assert_eq!(p.dst_addr(), std::net::Ipv4Addr::new(198, 18, 1, 10));
        assert_eq!(
            ip_destination(&h).unwrap(),
            "198.18.1.10".parse::<std::net::IpAddr>().unwrap()
        );
    }

    #[test]
    fn ipv4_view_rejects_what_would_panic() {
        assert_eq!(
            Ipv4Packet::new_checked(&[][..]).unwrap_err(),
            WireError::EmptyPacket
        );
        assert_eq!(
            Ipv4Packet::new_checked(&[0x60; 20][..]).unwrap_err(),
            WireError::BadIpVersion(6)
        );
        let e = Ipv4Packet::new_checked(&[0x45; 19][..]).unwrap_err();
        assert_eq!(
            e,
            WireError::IpTruncated {
                version: 4,
                need: 20,
                len: 19
            }
        );
        let mut h = [0u8; 20];
        h[0] = 0x44;
        assert_eq!(
            Ipv4Packet::new_checked(&h[..]).unwrap_err(),
            WireError::Ipv4HeaderTooShort { ihl: 16 }
        );
        h[0] = 0x46;
        let e = Ipv4Packet::new_checked(&h[..]).unwrap_err();
        assert_eq!(
            e,
            WireError::IpTruncated {
                version: 4,
                need: 24,
                len: 20
            }
        );
    }

    #[test]
    fn ipv6_view_reads_the_destination() {
        let mut h = [0u8; 40];
        h[0] = 0x60;
        h[24] = 0xfd;
        h[39] = 1;
        assert_eq!(
            ip_destination(&h).unwrap(),
            "fd00::1".parse::<std::net::IpAddr>().unwrap()
        );
        let e = Ipv6Packet::new_checked(&h[..39]).unwrap_err();
        assert_eq!(
            e,
            WireError::IpTruncated {
                version: 6,
                need: 40,
                len: 39
            }
        );
        assert_eq!(
            ip_destination(&[0x50]).unwrap_err(),
            WireError::BadIpVersion(5)
        );
    }

    #[test]
    fn tcp_and_udp_views_read_what_emit_wrote() {
        let (a, b) = (
            "198.18.3.10:443".parse().unwrap(),
            "198.18.1.10:50000".parse().unwrap(),
        );
        let opts = [1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2];
        let p = emit_tcp(
            a,
            b,
            0xfffffff0,
            tcp_flags::SYN | tcp_flags::ACK,
            &opts,
            b"hi",
        );
        assert_eq!(p.len(), 20 + 32 + 2);
        let ip = Ipv4Packet::new_checked(&p[..]).unwrap();
        assert_eq!(
            ip.upper_layer(),
            UpperLayer {
                protocol: IPPROTO_TCP,
                offset: 20,
                fragment: false
            }
        );
        assert_eq!(ip.src_addr(), std::net::Ipv4Addr::new(198, 18, 3, 10));
        let t = TcpPacket::new_checked(&p[20..]).unwrap();
        assert_eq!((t.src_port(), t.dst_port()), (443, 50000));
        assert_eq!(
            (t.seq_number(), t.flags(), t.header_len()),
            (0xfffffff0, 0x12, 32)
        );
        assert_eq!(t.payload(), b"hi");
        let (a6, b6) = (
            "[fd00::1]:443".parse().unwrap(),
            "[fd00::2]:9".parse().unwrap(),
        );
        let p = emit_udp(a6, b6, b"quic");
        let ip = Ipv6Packet::new_checked(&p[..]).unwrap();
        assert_eq!(u16::from_be_bytes([p[4], p[5]]), 12);
        assert_eq!(
            ip.src_addr(),
            "fd00::1".parse::<std::net::Ipv6Addr>().unwrap()
        );
        assert_eq!(ip.upper_layer().unwrap().offset, 40);
        let u = UdpPacket::new_checked(&p[40..]).unwrap();
        assert_eq!(
            (u.src_port(), u.dst_port(), u.payload()),
            (443, 9, &b"quic"[..])
        );
    }

    #[test]
    fn tcp_and_udp_views_reject_what_would_panic() {
        let a = "10.0.0.1:1".parse().unwrap();
        let p = emit_tcp(a, a, 1, 0, &[0; 8], &[]);
        let t = &p[20..];
        assert_eq!(
            TcpPacket::new_checked(&t[..19]).unwrap_err(),
            WireError::TransportHeaderTruncated {
                protocol: 6,
                need: 20,
                len: 19
            }
        );
        assert_eq!(
            TcpPacket::new_checked(&t[..27]).unwrap_err(),
            WireError::HeadersBeyondPacket { end: 28, len: 27 }
        );
        let mut bad = t.to_vec();
        bad[12] = 0x40;
        assert_eq!(
            TcpPacket::new_checked(&bad[..]).unwrap_err(),
            WireError::TcpDataOffsetTooSmall { doff: 4 }
        );
        assert_eq!(
            UdpPacket::new_checked(&[0u8; 7][..]).unwrap_err(),
            WireError::TransportHeaderTruncated {
                protocol: 17,
                need: 8,
                len: 7
            }
        );
    }

    #[test]
    fn ipv6_extension_chains_are_followed_and_bounded() {
        // Fixed header, then n destination-options headers (8 bytes each), then TCP.
        let chain = |n: usize| {
            let mut p = vec![0u8; 40 + 8 * n + 20];
            p[0] = 0x60;
            p[6] = if n == 0 { IPPROTO_TCP } else { 60 };
            for i in 0..n {
                p[40 + 8 * i] = if i + 1 == n { IPPROTO_TCP } else { 60 };
            }
            p
        };
        for n in 0..=MAX_IPV6_EXTENSIONS {
            let p = chain(n);
            let u = Ipv6Packet::new_checked(&p[..])
                .unwrap()
                .upper_layer()
                .unwrap();
            assert_eq!(
                (u.protocol, u.offset, u.fragment),
                (IPPROTO_TCP, 40 + 8 * n, false)
            );
        }
        let p = chain(MAX_IPV6_EXTENSIONS + 1);
        assert_eq!(
            Ipv6Packet::new_checked(&p[..]).unwrap().upper_layer(),
            Err(WireError::Ipv6ExtensionChain)
        );
        let p = chain(1);
        assert_eq!(
            Ipv6Packet::new_checked(&p[..41]).unwrap().upper_layer(),
            Err(WireError::Ipv6ExtensionTruncated { at: 40, len: 41 })
        );
        // Authentication header: (len + 2) * 4 bytes; fragment: 8 bytes.
        let mut p = [0u8; 40 + 12 + 8];
        p[0] = 0x60;
        p[6] = 51;
        p[40] = 44;
        p[41] = 1;
        p[52] = IPPROTO_UDP;
        p[54] = 0x01; // offset 32 (in 8-byte units): a later fragment
        let u = Ipv6Packet::new_checked(&p[..])
            .unwrap()
            .upper_layer()
            .unwrap();
        assert_eq!((u.protocol, u.offset, u.fragment), (IPPROTO_UDP, 60, true));
    }

    #[test]
    fn ip_views_never_panic_on_garbage() {
        let mut rng = crate::rng::Rng::new(11);
        for n in 0..2000usize {
            let len = n % 64;
            let b: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            let _ = ip_destination(&b);
        }
    }

    /// An IPv4 header's checksum over its 20 bytes (0 when valid).
    fn v4_checksum(h: &[u8]) -> u16 {
        let mut sum: u32 = h
            .chunks(2)
            .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn v4_udp(tos: u8, sport: u16) -> Vec<u8> {
        let mut p = vec![
            0x45, tos, 0, 28, 0, 1, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        p.extend_from_slice(&sport.to_be_bytes());
        p.extend_from_slice(&[0x01, 0xbb, 0, 8, 0, 0]);
        let c = v4_checksum(&p[..20]);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p
    }

    #[test]
    fn flows_and_ecn_from_the_header() {
        use crate::queue::Ecn;
        let a = flow_meta(&v4_udp(0x02, 5000));
        assert_eq!(a.ecn, Ecn::Ect0);
        assert_eq!(flow_meta(&v4_udp(0x01, 5000)).ecn, Ecn::Ect1);
        // Same 5-tuple, same flow, whatever the ECN field; another port, another flow.
        assert_eq!(flow_meta(&v4_udp(0x00, 5000)).flow, a.flow);
        assert_ne!(flow_meta(&v4_udp(0x02, 5001)).flow, a.flow);
        assert_eq!(flow_meta(&[0x45, 0]), crate::queue::Meta::default());
    }

    #[test]
    fn marking_ce_keeps_the_ipv4_checksum_valid() {
        for tos in [0x01u8, 0x02, 0xb9, 0xba] {
            let mut p = v4_udp(tos, 7);
            assert!(set_ce(&mut p), "{tos:#x}");
            assert_eq!(p[1], tos | 3);
            assert_eq!(v4_checksum(&p[..20]), 0, "{tos:#x}");
        }
        let mut p = v4_udp(0xb8, 7);
        let before = p.clone();
        assert!(
            !set_ce(&mut p) && p == before,
            "a Not-ECT packet is never marked"
        );
        let mut v6 = vec![0x60, 0x20, 0, 0, 0, 0, 17, 64];
        v6.resize(40, 0);
        assert!(set_ce(&mut v6) && v6[1] == 0x30);
    }
}
