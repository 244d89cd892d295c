//! Linux TCP telemetry: congestion control by socket option, and `TCP_INFO`.

use std::os::fd::RawFd;

pub use satbench_common::tcpinfo::{congestion, tcp_info, TcpInfo};

/// What the classifier of `limits.rs` reads of a `TCP_INFO` reading, with the microseconds the
/// application's writes have waited for room in the socket.
pub fn observation(i: &TcpInfo, write_blocked_us: u64) -> crate::limits::TcpObservation {
    crate::limits::TcpObservation {
        write_blocked_us,
        cwnd_segs: i.snd_cwnd as u64,
        in_flight_segs: (i.unacked as u64 + i.retrans as u64)
            .saturating_sub(i.sacked as u64 + i.lost as u64),
        mss: i.snd_mss as u64,
        notsent_bytes: i.notsent_bytes as u64,
        busy_us: i.busy_time,
        rwnd_limited_us: i.rwnd_limited,
        sndbuf_limited_us: i.sndbuf_limited,
    }
}

/// One line of `tcp_info.jsonl`, with the classifier's verdict on the
/// interval it ends.
pub fn line(
    i: &TcpInfo,
    conn: &str,
    t_ns: u64,
    cc: &str,
    o: &crate::limits::TcpObservation,
    v: &crate::limits::Verdict,
) -> serde_json::Value {
    serde_json::json!({
        "input": o.json(),
        "limited_by": v.limited_by.name(), "interval_ms": v.interval_ms,
        "sacked": i.sacked, "retrans": i.retrans,
        "in_flight": (i.unacked as u64 + i.retrans as u64)
            .saturating_sub(i.sacked as u64 + i.lost as u64),
        "t_unix_ns": t_ns, "conn": conn, "cc": cc, "state": i.state,
        "ca_state": i.ca_state, "cwnd": i.snd_cwnd, "ssthresh": i.snd_ssthresh,
        "srtt_us": i.rtt, "rttvar_us": i.rttvar, "min_rtt_us": i.min_rtt,
        "retransmits": i.retransmits, "total_retrans": i.total_retrans,
        "lost": i.lost, "unacked": i.unacked, "mss": i.snd_mss,
        "pacing_rate_Bps": i.pacing_rate, "delivery_rate_Bps": i.delivery_rate,
        "bytes_acked": i.bytes_acked, "bytes_sent": i.bytes_sent,
        "bytes_retrans": i.bytes_retrans, "segs_out": i.segs_out,
        "notsent_bytes": i.notsent_bytes, "options": i.options,
        "syn_data": i.syn_data(),
        // Chrono counters (Linux 4.10+), cumulative µs: sending, limited
        // by the peer's receive window, limited by the send buffer.
        "busy_time_us": i.busy_time, "rwnd_limited_us": i.rwnd_limited,
        "sndbuf_limited_us": i.sndbuf_limited,
        // tcpi_delivery_rate_app_limited: the delivery rate sample was
        // taken while the application had nothing to send.
        "app_limited": i.flags & 1 != 0,
        "delivered": i.delivered,
    })
}

/// A failed socket call, naming the call and its subject: `setsockopt(SO_RCVBUF): ...`.
#[derive(Debug, thiserror::Error)]
#[error("{call}({what}): {source}")]
pub struct SockError {
    pub call: &'static str,
    pub what: String,
    #[source]
    pub source: std::io::Error,
}

impl SockError {
    /// The error of the call just made (errno).
    pub fn last(call: &'static str, what: impl Into<String>) -> SockError {
        SockError {
            call,
            what: what.into(),
            source: std::io::Error::last_os_error(),
        }
    }
}

fn setsockopt_bytes(
    fd: RawFd,
    level: i32,
    opt: i32,
    v: &[u8],
    what: &str,
) -> Result<(), SockError> {
    // SAFETY: v is valid for v.len() bytes.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            v.as_ptr() as *const libc::c_void,
            v.len() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(SockError::last("setsockopt", what));
    }
    Ok(())
}

/// An integer socket option's value (None if getsockopt fails).
pub fn get_int(fd: RawFd, level: i32, opt: i32) -> Option<i32> {
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: v and len are valid for writes of their sizes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            level,
            opt,
            &mut v as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some(v)
}

pub fn set_int(fd: RawFd, level: i32, opt: i32, v: i32, what: &str) -> Result<(), SockError> {
    setsockopt_bytes(fd, level, opt, &v.to_ne_bytes(), what)
}

/// A UDP socket's receive buffer: `rcvbuf`, or 8 MiB. SO_RCVBUFFORCE (over
/// net.core.rmem_max) needs CAP_NET_ADMIN; without it, SO_RCVBUF (capped).
pub fn set_udp_rcvbuf(fd: RawFd, rcvbuf: Option<u32>) -> Result<(), SockError> {
    let n = rcvbuf.unwrap_or(8 << 20) as i32;
    match set_int(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        n,
        "SO_RCVBUFFORCE",
    ) {
        Err(e) if e.source.raw_os_error() == Some(libc::EPERM) => {
            set_int(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, n, "SO_RCVBUF")
        }
        other => other,
    }
}

pub fn set_congestion(fd: RawFd, cc: &str) -> Result<(), SockError> {
    setsockopt_bytes(
        fd,
        libc::IPPROTO_TCP,
        libc::TCP_CONGESTION,
        cc.as_bytes(),
        &format!("TCP_CONGESTION {cc}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn reads_info_and_sets_congestion_control() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        set_congestion(c.as_raw_fd(), "reno").unwrap();
        assert_eq!(congestion(c.as_raw_fd()).as_deref(), Some("reno"));
        let (mut s, _) = l.accept().unwrap();
        std::io::Write::write_all(&mut s, &[0u8; 100_000]).unwrap();
        let i = tcp_info(c.as_raw_fd()).unwrap();
        assert_eq!(i.state, 1); // TCP_ESTABLISHED
        assert!(i.snd_cwnd > 0 && i.snd_mss > 0);
        let mut sampler = crate::limits::Sampler::starting(0);
        let info = tcp_info(s.as_raw_fd()).unwrap();
        let o = observation(&info, 0);
        let v = sampler.sample_tcp(10_000_000, &o);
        let j = line(&info, "t1", 10_000_000, "reno", &o, &v);
        assert_eq!(j["interval_ms"], 10.0);
        assert!(j["limited_by"].is_string() && j["in_flight"].is_u64());
        // Chrono counters count in jiffies: only their presence is certain here.
        for k in [
            "busy_time_us",
            "rwnd_limited_us",
            "sndbuf_limited_us",
            "cwnd",
            "bytes_sent",
        ] {
            assert!(j[k].is_u64(), "{k}: {j}");
        }
        assert!(j["app_limited"].is_boolean());
    }
}
