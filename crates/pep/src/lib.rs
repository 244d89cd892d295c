//! satbench-pep: a transparent split-TCP performance-enhancing proxy.
//!
//! - [`relay`]: one connection's state, sans-IO: half-close, reset, idle
//!   timeout, who closed first.
//! - [`buffer`]: a direction's buffer: pipe (splice) or memory.
//! - [`time`]: clocks.

pub mod buffer;
pub mod relay;
pub mod time;

pub use relay::Relay;
