//! satbench-server as a library: the binary (`main.rs`) parses its command
//! line ([`options`]) and starts the servers these modules define:
//! HTTP/1.1 and HTTP/2 over kernel TCP ([`tcp`], with what its parts share
//! in [`http`]), HTTP/3 over quiche ([`quic`]) or quinn ([`quic_quinn`])
//! behind one trait ([`h3stack`]), one answer planner for all of them
//! ([`files`], [`replay`]), one record of every request ([`record`]), the
//! real-time endpoints ([`rt_serve`], [`rt_wt`], their state [`rt_state`],
//! their rules without I/O [`realtime`]) and the sender classifier
//! ([`limits`]). No module imports one that imports it.

pub mod determinism;
pub mod files;
#[cfg(test)]
mod fuzz;
pub mod h3stack;
pub mod http;
pub mod limits;
pub mod log;
pub mod options;
pub mod quic;
pub mod quic_quinn;
pub mod realtime;
pub mod record;
pub mod replay;
pub mod rt_serve;
pub mod rt_state;
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

#[cfg(test)]
mod tests {
    /// Both stacks' records with fixed values, as
    /// `tests/fixtures/golden/server-quic-connections.jsonl` (written with
    /// `SATBENCH_BLESS=1`, compared otherwise): `tests/unit/test_contracts.py`
    /// summarises that file, so a field renamed here fails a test there.
    #[test]
    fn golden_quic_connection_records() {
        use crate::h3stack::{ConnectionRecord, EVICTED};
        use crate::limits::{LimitedBy, Tally};
        let peer = "10.0.1.2:50000".parse().unwrap();
        let mut tally = Tally::default();
        tally.add(LimitedBy::Cwnd, 120.0);
        tally.add(LimitedBy::Pacing, 30.0);
        let mut quiche = ConnectionRecord::new::<crate::quic::Server>("q1", "bbr", peer, 0);
        quiche.alpn = "h3".into();
        quiche.requests = 3;
        (quiche.packets_sent, quiche.packets_recv) = (Some(900), Some(400));
        (quiche.packets_lost, quiche.packets_retrans) = (Some(2), Some(2));
        (quiche.bytes_sent, quiche.bytes_recv, quiche.bytes_lost) =
            (Some(1_200_000), Some(9_000), Some(2_700));
        (quiche.srtt_ms, quiche.cwnd) = (Some(531.5), Some(600_000));
        (quiche.resumed, quiche.early_requests) = (Some(true), Some(1));
        (quiche.paced_packets, quiche.paced_wait_ms) = (Some(850), Some(41.0));
        (quiche.data_blocked_sent, quiche.stream_data_blocked_sent) = (Some(0), Some(1));
        (
            quiche.peer_initial_max_data,
            quiche.peer_initial_max_stream_data,
        ) = (Some(15 << 20), Some(6 << 20));
        quiche.limited_ms = Some(tally.json());
        let mut quinn = ConnectionRecord::new::<crate::quic_quinn::Server>("q2", "cubic", peer, 0);
        quinn.alpn = "h3".into();
        quinn.requests = 2;
        (quinn.packets_sent, quinn.packets_recv, quinn.packets_lost) =
            (Some(80), Some(40), Some(0));
        (quinn.bytes_sent, quinn.bytes_recv, quinn.bytes_lost) =
            (Some(100_000), Some(3_000), Some(0));
        (quinn.srtt_ms, quinn.cwnd) = (Some(530.2), Some(150_000));
        quinn.limited_ms = Some(Tally::default().json());
        quinn.error = Some("closed by peer: 0".into());
        let mut evicted =
            ConnectionRecord::new::<crate::quic_quinn::Server>("q3", "cubic", peer, 0);
        evicted.error = Some(EVICTED.into());
        let text: String = [quiche, quinn, evicted]
            .into_iter()
            .map(|mut r| {
                r.t_close_unix_ns = 0;
                serde_json::to_string(&r).unwrap() + "\n"
            })
            .collect();
        let golden = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/golden/server-quic-connections.jsonl");
        if std::env::var_os("SATBENCH_BLESS").is_some() {
            std::fs::write(&golden, &text).unwrap();
        }
        assert_eq!(
            std::fs::read_to_string(&golden).unwrap_or_default(),
            text,
            "{} is stale: SATBENCH_BLESS=1 cargo test -p satbench-server h3stack",
            golden.display()
        );
    }
}
