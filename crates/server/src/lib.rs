//! satbench-server as a library: the binary (`main.rs`) parses its command
//! line ([`options`]) and starts the servers these modules define: HTTP/1.1
//! and HTTP/2 over kernel TCP ([`tcp`]), HTTP/3 over quiche ([`quic`]) or
//! quinn ([`quic_quinn`]), one answer planner for all of them ([`files`],
//! [`replay`]), the real-time endpoints ([`rt_serve`], [`rt_wt`],
//! [`realtime`]) and the sender classifier ([`limits`]).

pub mod files;
#[cfg(test)]
mod fuzz;
pub mod h3stack;
pub mod limits;
pub mod log;
pub mod options;
pub mod quic;
pub mod quic_quinn;
pub mod realtime;
pub mod record;
pub mod replay;
pub mod rt_serve;
pub mod rt_wt;
pub mod tcp;
pub mod tcpinfo;

pub use options::*;

/// The congestion control implementation of the QUIC stack in use.
pub fn quic_cc_impl(opts: &Options) -> String {
    use h3stack::H3Stack;
    match opts.quic_stack {
        QuicStack::Quiche => quic::Server::cc_impl(opts.cc_name()),
        QuicStack::Quinn => quic_quinn::Server::cc_impl(opts.cc_name()),
    }
}
