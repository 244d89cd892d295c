//! A bounded table of per-flow state.
//!
//! Keys are a direction's 4-tuple ([`FlowKey`]). The table holds at most its
//! capacity; inserting into a full table evicts the oldest flow that was not
//! used since it last came up for eviction (second chance, looking at most at
//! [`SECOND_CHANCES`] flows, so an insertion costs a bounded time).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Flows looked at before one is evicted whether used or not.
pub const SECOND_CHANCES: usize = 8;

/// Source address and port, destination address and port: one direction of
/// one connection. IPv4 addresses are held as IPv4-mapped IPv6 addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowKey {
    addrs: [u64; 4],
    ports: u32,
}

impl FlowKey {
    pub fn v4(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16, dst_port: u16) -> FlowKey {
        let mapped = |a: Ipv4Addr| 0xffff_0000_0000 | u32::from(a) as u64;
        FlowKey {
            addrs: [0, mapped(src), 0, mapped(dst)],
            ports: (src_port as u32) << 16 | dst_port as u32,
        }
    }

    pub fn v6(src: Ipv6Addr, dst: Ipv6Addr, src_port: u16, dst_port: u16) -> FlowKey {
        let (s, d) = (u128::from(src), u128::from(dst));
        FlowKey {
            addrs: [(s >> 64) as u64, s as u64, (d >> 64) as u64, d as u64],
            ports: (src_port as u32) << 16 | dst_port as u32,
        }
    }
}

impl Hash for FlowKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        for a in self.addrs {
            h.write_u64(a);
        }
        h.write_u32(self.ports);
    }
}

/// A fast hasher for [`FlowKey`]s (FxHash's multiply-rotate per word and a
/// SplitMix64 finaliser). Not resistant to chosen keys: the flows are the
/// testbed's own.
#[derive(Clone, Copy, Debug, Default)]
pub struct FlowHasher(u64);

impl FlowHasher {
    fn mix(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for FlowHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.mix(b as u64);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.mix(n as u64);
    }

    fn write_u64(&mut self, n: u64) {
        self.mix(n);
    }

    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

struct Slot<V> {
    value: V,
    /// Used since it was inserted or last spared.
    used: bool,
}

/// At most `capacity` flows' state, the oldest unused evicted first.
pub struct FlowTable<V> {
    map: HashMap<FlowKey, Slot<V>, BuildHasherDefault<FlowHasher>>,
    /// The keys of `map`, oldest first.
    order: VecDeque<FlowKey>,
    capacity: usize,
    evicted: u64,
}

impl<V> FlowTable<V> {
    /// A table of at most `capacity` flows (at least 1).
    pub fn new(capacity: usize) -> FlowTable<V> {
        FlowTable {
            map: HashMap::default(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
            evicted: 0,
        }
    }

    /// The state of `key`, made by `make` (after evicting a flow if the
    /// table is full) if there was none.
    pub fn get_or_insert_with(&mut self, key: FlowKey, make: impl FnOnce() -> V) -> &mut V {
        if self.map.len() >= self.capacity && !self.map.contains_key(&key) {
            self.evict_one();
        }
        let mut inserted = false;
        let slot = self.map.entry(key).or_insert_with(|| {
            inserted = true;
            Slot {
                value: make(),
                used: false,
            }
        });
        if inserted {
            self.order.push_back(key);
        } else {
            slot.used = true;
        }
        &mut slot.value
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Flows evicted so far.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    fn evict_one(&mut self) {
        for _ in 0..SECOND_CHANCES {
            let Some(k) = self.order.pop_front() else {
                return;
            };
            match self.map.get_mut(&k) {
                Some(s) if s.used => {
                    s.used = false;
                    self.order.push_back(k);
                }
                _ => {
                    self.map.remove(&k);
                    self.evicted += 1;
                    return;
                }
            }
        }
        if let Some(k) = self.order.pop_front() {
            self.map.remove(&k);
            self.evicted += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(port: u16) -> FlowKey {
        FlowKey::v4(
            Ipv4Addr::new(198, 18, 3, 10),
            Ipv4Addr::new(198, 18, 1, 10),
            443,
            port,
        )
    }

    #[test]
    fn keys_keep_directions_and_families_apart() {
        let a = Ipv4Addr::new(10, 0, 0, 1);
        let b = Ipv4Addr::new(10, 0, 0, 2);
        assert_ne!(FlowKey::v4(a, b, 1, 2), FlowKey::v4(b, a, 2, 1));
        assert_ne!(FlowKey::v4(a, b, 1, 2), FlowKey::v4(a, b, 2, 1));
        assert_eq!(
            FlowKey::v4(a, b, 1, 2),
            FlowKey::v6(a.to_ipv6_mapped(), b.to_ipv6_mapped(), 1, 2)
        );
        assert_ne!(
            FlowKey::v4(a, b, 1, 2),
            FlowKey::v6(a.to_ipv6_compatible(), b.to_ipv6_compatible(), 1, 2)
        );
    }

    #[test]
    fn holds_at_most_its_capacity_evicting_the_oldest_unused() {
        let mut t: FlowTable<u32> = FlowTable::new(3);
        for p in 1..=3 {
            *t.get_or_insert_with(key(p), || 0) = p as u32;
        }
        // Flow 1 used: flow 2 is the oldest unused.
        assert_eq!(*t.get_or_insert_with(key(1), || 99), 1);
        *t.get_or_insert_with(key(4), || 0) = 4;
        assert_eq!((t.len(), t.evicted()), (3, 1));
        assert_eq!(*t.get_or_insert_with(key(1), || 99), 1);
        assert_eq!(*t.get_or_insert_with(key(3), || 99), 3);
        assert_eq!(*t.get_or_insert_with(key(4), || 99), 4);
        // Flow 2 comes back as new state, evicting another.
        assert_eq!(*t.get_or_insert_with(key(2), || 99), 99);
        assert_eq!((t.len(), t.evicted()), (3, 2));
    }

    #[test]
    fn eviction_looks_at_a_bounded_number_of_flows() {
        let n = 4 * SECOND_CHANCES;
        let mut t: FlowTable<u32> = FlowTable::new(n);
        for p in 0..n as u16 {
            t.get_or_insert_with(key(p), || 0);
        }
        for p in 0..n as u16 {
            t.get_or_insert_with(key(p), || 0);
        }
        // Every flow used: the one after SECOND_CHANCES spared ones goes.
        t.get_or_insert_with(key(1000), || 0);
        assert_eq!((t.len(), t.evicted()), (n, 1));
        assert_eq!(*t.get_or_insert_with(key(SECOND_CHANCES as u16), || 7), 7);
        let one = FlowTable::<u8>::new(0);
        assert!(one.is_empty());
    }
}
