//! satlink: the satellite link model of satbench.
//!
//! The model is sans-IO: every piece takes the current time as an argument
//! and never reads a clock or touches a socket, so each can be tested in
//! simulated time. The `satbench-link` binary is a thin TUN front end.
//!
//! - [`time`]: the caller's clock.
//! - [`schedule`]: piecewise-constant values over time (LEO handovers).
//! - [`capacity`]: serialisation: unlimited, bit rate (scheduled), Mahimahi
//!   trace, and a rate gated by outages.
//! - [`queue`]: drop-tail (packets or bytes) and CoDel.
//! - [`loss`]: Bernoulli, Gilbert-Elliott, bit error rate.
//! - [`delay`]: propagation delay, jitter, the delay line, a control loop's round trip.
//! - [`leo`]: recorded LEO traces (bandwidth and delay) and the periodic reconfiguration.
//! - [`stage`]: where a packet waits and when its transmission ends:
//!   [`stage::Serial`] (one queue, one capacity: the plain link) or
//!   [`framed::Framed`] (a queue per terminal on a carrier cut into frames).
//! - [`framed`]: the framed carrier, composed of a [`framed::Carrier`] and an
//!   [`encap::Encapsulation`]:
//!   - [`forward`]: DVB-S2 BBFRAMEs, with [`modcod`] (the MODCOD table),
//!     [`fade`] (attenuation series, C/N) and [`acm`] (ACM loop or CCM);
//!   - [`dama`]: DVB-RCS2 bandwidth on demand (requests, allocation, timeslots);
//!   - [`encap`]: GSE, RLE or none, charged per packet.
//! - [`link`]: one direction composed of the above, with [`stats`] counters
//!   and [`series`] (bounded time series).
//! - [`overhead`]: each offered packet split into header, retransmitted,
//!   TLS, QUIC and other bytes (protocol overhead as the link sees it).
//! - [`route`]: which terminal a forward packet goes to.
//! - [`config`]: the JSON configuration the orchestrator writes.
//! - [`pacing`]: the TUN front end's timing policy (when to sleep, when to poll).
//! - [`wire`], [`pcap`]: virtio-net headers, segmentation, IP, TCP and UDP
//!   views, captures.

pub mod acm;
pub mod capacity;
pub mod config;
pub mod dama;
pub mod delay;
pub mod encap;
pub mod fade;
pub mod forward;
pub mod framed;
pub mod leo;
pub mod link;
pub mod loss;
pub mod modcod;
pub mod overhead;
pub mod pacing;
pub mod pcap;
pub mod profile;
pub mod queue;
pub mod rng;
pub mod route;
pub mod schedule;
pub mod series;
pub mod stage;
pub mod stats;
#[cfg(test)]
pub(crate) mod testutil;
pub mod time;
pub mod wire;

pub use config::LinkConfig;
pub use link::Direction;
pub use time::Instant;
