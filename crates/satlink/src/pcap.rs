//! A minimal pcap writer: nanosecond timestamps, raw IP link type.

use std::io::{self, Write};

/// LINKTYPE_RAW: packets begin with an IPv4 or IPv6 header.
pub const LINKTYPE_RAW: u32 = 101;
const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
pub const SNAPLEN: u32 = 262_144;

pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    pub fn new(mut out: W) -> io::Result<PcapWriter<W>> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_NANOS.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&SNAPLEN.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_RAW.to_le_bytes());
        out.write_all(&h)?;
        Ok(PcapWriter { out })
    }

    /// Record `packet` seen at `unix_ns` nanoseconds since the epoch.
    pub fn write(&mut self, unix_ns: u64, packet: &[u8]) -> io::Result<()> {
        let cap = packet.len().min(SNAPLEN as usize);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((unix_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((unix_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(cap as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(packet.len() as u32).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&packet[..cap])
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_record() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write(1_700_000_000_123_456_789, &[0x45, 0, 0, 20])
            .unwrap();
        let b = w.out;
        assert_eq!(&b[0..4], &MAGIC_NANOS.to_le_bytes());
        assert_eq!(
            u32::from_le_bytes(b[20..24].try_into().unwrap()),
            LINKTYPE_RAW
        );
        assert_eq!(
            u32::from_le_bytes(b[24..28].try_into().unwrap()),
            1_700_000_000
        );
        assert_eq!(
            u32::from_le_bytes(b[28..32].try_into().unwrap()),
            123_456_789
        );
        assert_eq!(u32::from_le_bytes(b[32..36].try_into().unwrap()), 4);
        assert_eq!(&b[40..44], &[0x45, 0, 0, 20]);
    }
}
