//! Which terminal a forward packet goes to: the one whose subnets hold its
//! destination address (the longest prefix wins). With one terminal every
//! packet goes to it, unread.

use crate::wire::ip_destination;
use std::net::IpAddr;
use std::str::FromStr;

/// An IPv4 or IPv6 prefix, `198.18.1.0/24` or `fd00:1::/64`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    addr: IpAddr,
    len: u8,
}

/// Why a prefix could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// No `/LEN`.
    #[error("expected ADDRESS/LENGTH, got {0:?}")]
    NoLength(String),
    /// The address part is no IPv4 or IPv6 address.
    #[error("{0:?} is no IP address")]
    BadAddress(String),
    /// The length is no number or too long for the address family.
    #[error("prefix length must be within 0 and {max}, got {len:?}")]
    BadLength { len: String, max: u8 },
    /// Bits set after the prefix (a host address given as a network).
    #[error("{0} has bits set after its prefix length")]
    HostBits(String),
}

fn bits(a: IpAddr) -> (u128, u8) {
    match a {
        IpAddr::V4(v) => (u32::from(v) as u128, 32),
        IpAddr::V6(v) => (u128::from(v), 128),
    }
}

fn mask(len: u8, width: u8) -> u128 {
    if len == 0 {
        0
    } else {
        (u128::MAX << (128 - len as u32)) >> (128 - width as u32)
    }
}

impl FromStr for Prefix {
    type Err = PrefixError;
    fn from_str(s: &str) -> Result<Prefix, PrefixError> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| PrefixError::NoLength(s.into()))?;
        let addr: IpAddr = a.parse().map_err(|_| PrefixError::BadAddress(a.into()))?;
        let (v, width) = bits(addr);
        let len: u8 =
            l.parse()
                .ok()
                .filter(|&n| n <= width)
                .ok_or_else(|| PrefixError::BadLength {
                    len: l.into(),
                    max: width,
                })?;
        if v & !mask(len, width) & mask(width, width) != 0 {
            return Err(PrefixError::HostBits(s.into()));
        }
        Ok(Prefix { addr, len })
    }
}

impl std::fmt::Display for Prefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

impl Prefix {
    /// True if `a` (of the same family) lies in the prefix.
    pub fn contains(&self, a: IpAddr) -> bool {
        let (p, w) = bits(self.addr);
        let (x, wx) = bits(a);
        w == wx && (p ^ x) & mask(self.len, w) == 0
    }

    pub fn len(&self) -> u8 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// The forward routing table of the terminals.
#[derive(Clone, Debug, PartialEq)]
pub struct Router {
    /// (prefix, terminal), longest prefix first.
    routes: Vec<(Prefix, usize)>,
    terminals: usize,
}

impl Router {
    /// `subnets[i]`: terminal `i`'s prefixes.
    pub fn new(subnets: &[Vec<Prefix>]) -> Router {
        let mut routes: Vec<(Prefix, usize)> = subnets
            .iter()
            .enumerate()
            .flat_map(|(i, ps)| ps.iter().map(move |&p| (p, i)))
            .collect();
        routes.sort_by_key(|r| std::cmp::Reverse(r.0.len));
        Router {
            routes,
            terminals: subnets.len().max(1),
        }
    }

    /// The terminal of the address, if any subnet holds it.
    pub fn route_addr(&self, a: IpAddr) -> Option<usize> {
        self.routes.iter().find(|r| r.0.contains(a)).map(|r| r.1)
    }

    /// The terminal of an IP packet: its destination's; with one terminal,
    /// always 0. None for a packet no subnet holds or that is no IP packet.
    pub fn route(&self, ip_packet: &[u8]) -> Option<usize> {
        if self.terminals == 1 {
            return Some(0);
        }
        self.route_addr(ip_destination(ip_packet).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        s.parse().unwrap()
    }

    fn v4(dst: [u8; 4]) -> Vec<u8> {
        let mut h = vec![0u8; 20];
        h[0] = 0x45;
        h[16..20].copy_from_slice(&dst);
        h
    }

    #[test]
    fn prefixes_parse_and_match() {
        assert!(p("198.18.1.0/24").contains("198.18.1.77".parse().unwrap()));
        assert!(!p("198.18.1.0/24").contains("198.18.2.1".parse().unwrap()));
        assert!(p("0.0.0.0/0").contains("8.8.8.8".parse().unwrap()));
        assert!(!p("0.0.0.0/0").contains("::1".parse().unwrap()));
        assert!(p("fd00:1::/64").contains("fd00:1::5".parse().unwrap()));
        assert_eq!(p("198.18.2.1/32").to_string(), "198.18.2.1/32");
        let e = |s: &str| s.parse::<Prefix>().unwrap_err();
        assert_eq!(e("198.18.1.0"), PrefixError::NoLength("198.18.1.0".into()));
        assert_eq!(e("198.18.1/24"), PrefixError::BadAddress("198.18.1".into()));
        assert_eq!(
            e("198.18.1.0/33"),
            PrefixError::BadLength {
                len: "33".into(),
                max: 32
            }
        );
        assert_eq!(
            e("198.18.1.5/24"),
            PrefixError::HostBits("198.18.1.5/24".into())
        );
    }

    #[test]
    fn forward_packets_go_to_the_terminal_of_their_destination() {
        let r = Router::new(&[
            vec![p("198.18.1.0/24"), p("198.18.2.1/32")],
            vec![p("198.18.5.0/24"), p("198.18.2.3/32")],
            vec![p("198.18.0.0/16")],
        ]);
        assert_eq!(r.route(&v4([198, 18, 1, 10])), Some(0));
        assert_eq!(r.route(&v4([198, 18, 2, 1])), Some(0));
        assert_eq!(r.route(&v4([198, 18, 5, 10])), Some(1));
        assert_eq!(r.route(&v4([198, 18, 2, 3])), Some(1));
        // The longest prefix wins over terminal 2's /16.
        assert_eq!(r.route(&v4([198, 18, 9, 9])), Some(2));
        assert_eq!(r.route(&v4([10, 0, 0, 1])), None);
        assert_eq!(r.route(&[0x45, 0, 0]), None);
        // One terminal: everything, unread.
        let one = Router::new(&[vec![]]);
        assert_eq!(one.route(&[]), Some(0));
    }
}
