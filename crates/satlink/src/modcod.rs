//! DVB-S2 MODCODs (ETSI EN 302 307-1), normal 64800-bit FECFRAMEs.
//!
//! A BBFRAME of a MODCOD holds `Kbch` bits (the BCH code's input, table 5a
//! of the standard): a 10-byte BBHEADER and a data field of `Kbch / 8 - 10`
//! bytes. Its physical-layer frame has `64800 / m` symbols (m bits per
//! symbol), a 90-symbol PLHEADER and, with pilots, a 36-symbol pilot block
//! after every 16 slots of 90 symbols. The spectral efficiency is the data
//! field's bits per symbol, `(Kbch - 80) / symbols`; without pilots it is
//! the standard's "ideal" value (the table of REFERENCE.md, checked by a
//! test). The required Es/N0 are the standard's ideal values (AWGN, packet
//! error rate 1e-7); C/N is taken as Es/N0 (noise bandwidth = symbol rate).
//!
//! Short FECFRAMEs and DVB-S2X MODCODs are not modelled.

use std::time::Duration;

/// One modulation and coding.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Modcod {
    /// "QPSK 1/4" ... "32APSK 9/10".
    pub name: &'static str,
    /// Bits per symbol: 2 (QPSK), 3 (8PSK), 4 (16APSK), 5 (32APSK).
    pub bits_per_symbol: u32,
    /// Bits of a BBFRAME (BCH input) of a normal FECFRAME.
    pub kbch: u32,
    /// Required Es/N0 in dB.
    pub es_n0_db: f64,
}

/// Bytes of a BBHEADER.
pub const BBHEADER_BYTES: u32 = 10;
/// Bits of a normal FECFRAME.
pub const FECFRAME_BITS: u32 = 64800;
/// Symbols of the PLHEADER, of a slot and of a pilot block.
pub const PLHEADER_SYMBOLS: u32 = 90;
pub const SLOT_SYMBOLS: u32 = 90;
pub const PILOT_SYMBOLS: u32 = 36;

const fn mc(name: &'static str, bits_per_symbol: u32, kbch: u32, es_n0_db: f64) -> Modcod {
    Modcod {
        name,
        bits_per_symbol,
        kbch,
        es_n0_db,
    }
}

/// The 28 MODCODs of DVB-S2, ordered as in the standard.
pub const MODCODS: [Modcod; 28] = [
    mc("QPSK 1/4", 2, 16008, -2.35),
    mc("QPSK 1/3", 2, 21408, -1.24),
    mc("QPSK 2/5", 2, 25728, -0.30),
    mc("QPSK 1/2", 2, 32208, 1.00),
    mc("QPSK 3/5", 2, 38688, 2.23),
    mc("QPSK 2/3", 2, 43040, 3.10),
    mc("QPSK 3/4", 2, 48408, 4.03),
    mc("QPSK 4/5", 2, 51648, 4.68),
    mc("QPSK 5/6", 2, 53840, 5.18),
    mc("QPSK 8/9", 2, 57472, 6.20),
    mc("QPSK 9/10", 2, 58192, 6.42),
    mc("8PSK 3/5", 3, 38688, 5.50),
    mc("8PSK 2/3", 3, 43040, 6.62),
    mc("8PSK 3/4", 3, 48408, 7.91),
    mc("8PSK 5/6", 3, 53840, 9.35),
    mc("8PSK 8/9", 3, 57472, 10.69),
    mc("8PSK 9/10", 3, 58192, 10.98),
    mc("16APSK 2/3", 4, 43040, 8.97),
    mc("16APSK 3/4", 4, 48408, 10.21),
    mc("16APSK 4/5", 4, 51648, 11.03),
    mc("16APSK 5/6", 4, 53840, 11.61),
    mc("16APSK 8/9", 4, 57472, 12.89),
    mc("16APSK 9/10", 4, 58192, 13.13),
    mc("32APSK 3/4", 5, 48408, 12.73),
    mc("32APSK 4/5", 5, 51648, 13.64),
    mc("32APSK 5/6", 5, 53840, 14.28),
    mc("32APSK 8/9", 5, 57472, 15.69),
    mc("32APSK 9/10", 5, 58192, 16.05),
];

/// The MODCOD named `name` ("QPSK 3/4"), as an index into [`MODCODS`].
pub fn by_name(name: &str) -> Option<usize> {
    MODCODS.iter().position(|m| m.name == name)
}

impl Modcod {
    /// Symbols of the physical-layer frame.
    pub fn frame_symbols(&self, pilots: bool) -> u32 {
        let payload = FECFRAME_BITS / self.bits_per_symbol;
        let slots = payload / SLOT_SYMBOLS;
        let pilot = if pilots {
            (slots - 1) / 16 * PILOT_SYMBOLS
        } else {
            0
        };
        PLHEADER_SYMBOLS + payload + pilot
    }

    /// Bytes of the BBFRAME's data field (after the BBHEADER).
    pub fn data_field_bytes(&self) -> u32 {
        self.kbch / 8 - BBHEADER_BYTES
    }

    /// Data-field bits per symbol.
    pub fn efficiency(&self, pilots: bool) -> f64 {
        (self.kbch - 8 * BBHEADER_BYTES) as f64 / self.frame_symbols(pilots) as f64
    }

    /// How long one frame is on the air at `symbol_rate` baud.
    pub fn frame_duration(&self, symbol_rate: f64, pilots: bool) -> Duration {
        Duration::from_nanos((self.frame_symbols(pilots) as f64 * 1e9 / symbol_rate).round() as u64)
    }

    /// The data-field rate at `symbol_rate` baud, bit/s.
    pub fn bps(&self, symbol_rate: f64, pilots: bool) -> f64 {
        symbol_rate * self.efficiency(pilots)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn efficiencies_are_the_standards_ideal_values() {
        // REFERENCE.md: spectral efficiency in bit/symbol, rounded to 3 places.
        let reference = [
            0.490, 0.656, 0.789, 0.988, 1.188, 1.322, 1.487, 1.587, 1.655, 1.767, 1.789, 1.780,
            1.981, 2.228, 2.479, 2.646, 2.679, 2.637, 2.967, 3.166, 3.300, 3.523, 3.567, 3.703,
            3.952, 4.120, 4.398, 4.453,
        ];
        for (m, r) in MODCODS.iter().zip(reference) {
            assert!(
                (m.efficiency(false) - r).abs() < 0.0015,
                "{}: {} vs {r}",
                m.name,
                m.efficiency(false)
            );
        }
    }

    #[test]
    fn frame_sizes() {
        let q = &MODCODS[by_name("QPSK 1/2").unwrap()];
        assert_eq!(q.frame_symbols(false), 32_490);
        // 360 slots: 22 pilot blocks.
        assert_eq!(q.frame_symbols(true), 32_490 + 22 * 36);
        assert_eq!(q.data_field_bytes(), 4016);
        // 1 Mbaud: 32.49 ms per frame.
        assert_eq!(q.frame_duration(1e6, false), Duration::from_micros(32_490));
        let a = &MODCODS[by_name("32APSK 9/10").unwrap()];
        assert_eq!(a.frame_symbols(false), 12_960 + 90);
        assert_eq!(a.data_field_bytes(), 7264);
        assert_eq!(by_name("QPSK 7/8"), None);
    }
}
