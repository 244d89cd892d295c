//! Linux `TCP_INFO` and `TCP_CONGESTION`, read from a socket: the one
//! reading the server's telemetry and the PEP's records share.

use std::os::fd::RawFd;

/// `struct tcp_info` of include/uapi/linux/tcp.h up to `tcpi_rcv_wnd`
/// (the layout only grows at its end; older kernels leave the tail zero).
#[repr(C)]
#[derive(Default, Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpInfo {
    pub state: u8,
    pub ca_state: u8,
    pub retransmits: u8,
    pub probes: u8,
    pub backoff: u8,
    pub options: u8,
    pub wscale: u8,
    /// `tcpi_delivery_rate_app_limited:1, tcpi_fastopen_client_fail:2`.
    pub flags: u8,
    pub rto: u32,
    pub ato: u32,
    pub snd_mss: u32,
    pub rcv_mss: u32,
    pub unacked: u32,
    pub sacked: u32,
    pub lost: u32,
    pub retrans: u32,
    pub fackets: u32,
    pub last_data_sent: u32,
    pub last_ack_sent: u32,
    pub last_data_recv: u32,
    pub last_ack_recv: u32,
    pub pmtu: u32,
    pub rcv_ssthresh: u32,
    pub rtt: u32,
    pub rttvar: u32,
    pub snd_ssthresh: u32,
    pub snd_cwnd: u32,
    pub advmss: u32,
    pub reordering: u32,
    pub rcv_rtt: u32,
    pub rcv_space: u32,
    pub total_retrans: u32,
    pub pacing_rate: u64,
    pub max_pacing_rate: u64,
    pub bytes_acked: u64,
    pub bytes_received: u64,
    pub segs_out: u32,
    pub segs_in: u32,
    pub notsent_bytes: u32,
    pub min_rtt: u32,
    pub data_segs_in: u32,
    pub data_segs_out: u32,
    pub delivery_rate: u64,
    pub busy_time: u64,
    pub rwnd_limited: u64,
    pub sndbuf_limited: u64,
    pub delivered: u32,
    pub delivered_ce: u32,
    pub bytes_sent: u64,
    pub bytes_retrans: u64,
    pub dsack_dups: u32,
    pub reord_seen: u32,
    pub rcv_ooopack: u32,
    pub snd_wnd: u32,
    pub rcv_wnd: u32,
    pub rehash: u32,
}

impl TcpInfo {
    /// `tcpi_options`' TCPI_OPT_SYN_DATA (include/uapi/linux/tcp.h): the SYN
    /// carried data the other end took (TCP Fast Open), on either end.
    pub const OPT_SYN_DATA: u8 = 32;

    /// Whether the connection opened with data in its SYN, taken (Fast Open).
    pub fn syn_data(&self) -> bool {
        self.options & Self::OPT_SYN_DATA != 0
    }
}

pub fn tcp_info(fd: RawFd) -> Option<TcpInfo> {
    let mut info = TcpInfo::default();
    let mut len = std::mem::size_of::<TcpInfo>() as libc::socklen_t;
    // SAFETY: info is a plain repr(C) struct of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            &mut info as *mut TcpInfo as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some(info)
}

/// The congestion control of a TCP socket.
pub fn congestion(fd: RawFd) -> Option<String> {
    let mut buf = [0u8; 16];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: buf is valid for len bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            buf.as_mut_ptr() as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(len as usize);
    Some(String::from_utf8_lossy(&buf[..end]).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn tcp_info_layout_matches_the_kernel_offsets() {
        // Offsets from include/uapi/linux/tcp.h.
        assert_eq!(std::mem::offset_of!(TcpInfo, rto), 8);
        assert_eq!(std::mem::offset_of!(TcpInfo, rtt), 68);
        assert_eq!(std::mem::offset_of!(TcpInfo, snd_cwnd), 80);
        assert_eq!(std::mem::offset_of!(TcpInfo, total_retrans), 100);
        assert_eq!(std::mem::offset_of!(TcpInfo, pacing_rate), 104);
        assert_eq!(std::mem::offset_of!(TcpInfo, min_rtt), 148);
        assert_eq!(std::mem::offset_of!(TcpInfo, delivery_rate), 160);
        assert_eq!(std::mem::offset_of!(TcpInfo, bytes_retrans), 208);
        assert_eq!(std::mem::offset_of!(TcpInfo, snd_wnd), 228);
        assert_eq!(std::mem::size_of::<TcpInfo>(), 240);
    }

    #[test]
    fn reads_a_loopback_connection() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let i = tcp_info(c.as_raw_fd()).unwrap();
        assert_eq!(i.state, 1); // TCP_ESTABLISHED
        assert!(i.snd_cwnd > 0 && i.snd_mss > 0);
        assert!(congestion(c.as_raw_fd()).is_some_and(|cc| !cc.is_empty()));
        assert!(!i.syn_data()); // an ordinary handshake
        let fast = TcpInfo {
            options: TcpInfo::OPT_SYN_DATA | 1,
            ..TcpInfo::default()
        };
        assert!(fast.syn_data());
    }
}
