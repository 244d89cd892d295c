//! HTTP/3 on quinn with the `h3` crate (`--quic-stack quinn`): one
//! connection per origin, on its own UDP socket and quinn endpoint, serving
//! the same request channel as quiche's driver in `h3.rs`; each request is a
//! task on the loader's one thread. The windows advertised are the
//! loader's `--quic-max-data` (quinn's `receive_window`) and
//! `--quic-max-stream-data` (`stream_receive_window`), fixed for the whole
//! connection (quinn does not autotune them). Datagrams are 1350 bytes
//! without path MTU discovery, as quiche's. No 0-RTT: as with quiche, each
//! client's connection to an origin is its first.

use crate::h3_common::{H3Error, Req, HANDSHAKE_TIMEOUT};
use crate::session::{keep_type, Progress, Session};
use crate::upload::Payload;
use crate::url::Url;
use bytes::{Buf, Bytes};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use tokio::sync::mpsc;

const MAX_DATAGRAM: u16 = 1350;

type SendRequest = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// The transport settings of the loader for quinn.
fn transport(f: &Session) -> quinn::TransportConfig {
    let w = f.settings.quic_windows;
    let mut t = quinn::TransportConfig::default();
    t.max_idle_timeout(Some(quinn::VarInt::from_u32(30_000).into()));
    t.initial_mtu(MAX_DATAGRAM);
    t.min_mtu(MAX_DATAGRAM);
    t.mtu_discovery_config(None);
    // Below 2^62: checked by the argument parser.
    t.receive_window(quinn::VarInt::from_u64(w.max_data).expect("varint"));
    t.stream_receive_window(quinn::VarInt::from_u64(w.max_stream_data).expect("varint"));
    t.max_concurrent_bidi_streams(100u32.into());
    t.max_concurrent_uni_streams(100u32.into());
    t
}

/// Connect, complete the handshake and start HTTP/3; returns where to send requests.
pub(crate) async fn connect(
    f: Arc<Session>,
    id: usize,
    url: &Url,
    peer: SocketAddr,
) -> Result<mpsc::UnboundedSender<Req>, H3Error> {
    let authority = url.authority();
    let bind = if peer.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    };
    let sock = std::net::UdpSocket::bind(bind).map_err(|e| H3Error::Bind(Arc::new(e)))?;
    let big = 8i32 << 20;
    // SAFETY: setsockopt with a valid int.
    unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            &big as *const i32 as *const libc::c_void,
            4,
        )
    };
    let endpoint = quinn::Endpoint::new(
        quinn::EndpointConfig::default(),
        None,
        sock,
        Arc::new(quinn::TokioRuntime),
    )
    .map_err(|e| H3Error::QuinnEndpoint(Arc::new(e)))?;
    let mut tls = (*f.settings.tls).clone();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto =
        quinn::crypto::rustls::QuicClientConfig::try_from(tls).map_err(H3Error::QuinnCrypto)?;
    let mut cfg = quinn::ClientConfig::new(Arc::new(crypto));
    cfg.transport_config(Arc::new(transport(&f)));
    let connecting = endpoint
        .connect_with(cfg, peer, &url.host)
        .map_err(H3Error::QuinnConnect)?;
    let conn = match tokio::time::timeout(HANDSHAKE_TIMEOUT, connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(source)) => return Err(H3Error::QuinnConnection { authority, source }),
        Err(_) => {
            return Err(H3Error::HandshakeTimeout {
                authority,
                secs: HANDSHAKE_TIMEOUT.as_secs(),
            })
        }
    };
    let now = f.now();
    f.update_conn(id, |c| c.tls_s = Some(now));
    let alpn = conn
        .handshake_data()
        .and_then(|h| h.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|h| h.protocol)
        .map(|p| String::from_utf8_lossy(&p).into_owned())
        .unwrap_or_default();
    let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn.clone()))
        .await
        .map_err(|e| H3Error::H3QuinnSetup(Arc::new(e)))?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Req>();
    tokio::spawn(async move {
        // Keep the endpoint alive as long as the connection.
        let _endpoint = endpoint;
        let mut reqs = tokio::task::JoinSet::new();
        let mut closed = false;
        loop {
            tokio::select! {
                r = rx.recv() => match r {
                    Some(r) => {
                        reqs.spawn(fetch(f.clone(), send.clone(), authority.clone(), alpn.clone(), r));
                    }
                    None => break,
                },
                _ = driver.wait_idle(), if !closed => closed = true,
                Some(_) = reqs.join_next(), if !reqs.is_empty() => {}
            }
        }
        while reqs.join_next().await.is_some() {}
        conn.close(0x100u32.into(), b"");
    });
    Ok(tx)
}

/// One request on the connection; replies to the request's sender.
async fn fetch(f: Arc<Session>, send: SendRequest, authority: String, alpn: String, r: Req) {
    let Req {
        url,
        keep,
        sink,
        reply,
        obj,
    } = r;
    let mut obj = obj;
    let result = exchange(&f, send, &authority, &alpn, &url, &mut obj, keep, sink).await;
    let _ = reply.send(result.map(|()| obj));
}

#[allow(clippy::too_many_arguments)]
async fn exchange(
    f: &Session,
    mut send: SendRequest,
    authority: &str,
    alpn: &str,
    url: &Url,
    obj: &mut crate::session::Object,
    keep: bool,
    mut sink: Option<std::fs::File>,
) -> Result<(), H3Error> {
    let stream_err = |e: h3::error::StreamError| H3Error::H3Stream {
        url: url.to_string(),
        source: Arc::new(e),
    };
    let upload = f.settings.upload;
    let req = hyper::Request::builder()
        .method(if upload.is_some() { "POST" } else { "GET" })
        .uri(format!("https://{authority}{}", url.path))
        .header("user-agent", "satbench-load")
        .header("accept", "*/*")
        .body(())
        .map_err(|e| H3Error::BadRequest(Arc::new(e)))?;
    obj.start_s = f.now();
    let mut stream = send.send_request(req).await.map_err(stream_err)?;
    if let Some(n) = upload {
        let mut payload = Payload::new(n);
        while payload.remaining() > 0 {
            let chunk = payload.next_chunk();
            let len = chunk.len() as u64;
            stream
                .send_data(Bytes::from(chunk))
                .await
                .map_err(stream_err)?;
            obj.sent += len;
        }
    }
    stream.finish().await.map_err(stream_err)?;
    let resp = stream.recv_response().await.map_err(stream_err)?;
    obj.ttfb_s = f.now();
    if resp.version() != hyper::Version::HTTP_3 || alpn != "h3" {
        return Err(H3Error::NotH3 {
            url: url.to_string(),
            version: format!("{:?} (ALPN {alpn:?})", resp.version()),
        });
    }
    obj.protocol = alpn.to_string();
    obj.status = resp.status().as_u16();
    obj.content_type = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let mut body = (keep && keep_type(&obj.content_type)).then(Vec::new);
    let mut progress = Progress::new(f.settings.progress, f.settings.client);
    while let Some(mut chunk) = stream.recv_data().await.map_err(stream_err)? {
        while chunk.has_remaining() {
            let c = chunk.chunk();
            let n = c.len();
            obj.bytes += n as u64;
            if let Some(b) = body.as_mut() {
                b.extend_from_slice(c);
            }
            if let Some(file) = sink.as_mut() {
                std::io::Write::write_all(file, c).map_err(|e| H3Error::Sink(Arc::new(e)))?;
            }
            chunk.advance(n);
        }
        progress.tick(obj.bytes);
    }
    obj.done_s = f.now();
    obj.body = body;
    Ok(())
}
