//! Helpers for tests in simulated time.

use crate::link::Direction;
use crate::time::Instant;

/// Drive a direction in simulated time: feed arrivals `(time, terminal, id,
/// bytes)` in time order, collect deliveries `(time, id)`.
pub fn run(d: &mut Direction<u32>, arrivals: &[(Instant, usize, u32, u32)]) -> Vec<(Instant, u32)> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        let next = match (arrivals.get(i).map(|a| a.0), d.poll_timeout()) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => return out,
            },
        };
        while let Some(p) = d.poll_transmit(next) {
            out.push((next, p));
        }
        while i < arrivals.len() && arrivals[i].0 <= next {
            let (t, term, id, bytes) = arrivals[i];
            d.on_packet_for(t, term, id, bytes, 1);
            i += 1;
        }
        while let Some(p) = d.poll_transmit(next) {
            out.push((next, p));
        }
    }
}
