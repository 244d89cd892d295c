//! WebTransport over HTTP/3 (the quinn stack, with h3-webtransport): the
//! real-time endpoint `/rt/wt`, served with `--webtransport`. A client opens
//! a session by extended CONNECT (`:protocol = webtransport`), then one
//! bidirectional stream of its own, on which the scenario of the session's
//! query runs exactly as over a WebSocket (`rt_serve::run_channel`), its
//! messages as lines of JSON; in a chat room, as a member of it. The session
//! takes over the HTTP/3 connection (h3-webtransport's design): a request
//! that comes on it afterwards is refused.

use crate::log::{unix_ns, JsonLines};
use crate::realtime::{Params, Scenario, MAX_SIZE};
use crate::record::RequestRecord;
use crate::rt_serve::{run_channel, run_channel_room, RtState};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use h3_webtransport::server::{AcceptedBi, WebTransportSession};
use std::sync::Arc;
use tokio_util::codec::{Framed, LinesCodec};

type Conn = h3::server::Connection<h3_quinn::Connection, Bytes>;
pub type Stream = h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Whether a request opens a WebTransport session.
pub fn is_connect(req: &hyper::http::Request<()>) -> bool {
    req.method() == hyper::http::Method::CONNECT
        && req.extensions().get::<h3::ext::Protocol>() == Some(&h3::ext::Protocol::WEB_TRANSPORT)
}

/// Serve one session on `conn` (which it takes over) and log it as a
/// request of the real-time endpoints (`"realtime": "wt"`).
pub async fn serve(
    access: JsonLines,
    rt: &RtState,
    mut rec: RequestRecord,
    req: hyper::http::Request<()>,
    mut stream: Stream,
    conn: Conn,
) {
    rec.authority = req.uri().authority().map(|a| a.as_str().to_string());
    rec.extra.insert("realtime".into(), "wt".into());
    rec.extra
        .insert("webtransport".into(), "extended-connect".into());
    // The session, the status and what was sent are added below.
    let mut entry = rec.value();
    let refuse = |entry: &mut serde_json::Value, status: u16, why: String| {
        entry["status"] = status.into();
        entry["error"] = why.into();
        entry["t_done_unix_ns"] = unix_ns().into();
        access.write(entry);
    };
    let params = match (
        req.uri().path(),
        Params::parse(req.uri().query().unwrap_or("")),
    ) {
        ("/rt/wt", Ok(p)) => p,
        (other, parsed) => {
            let why = match parsed {
                Err(e) => e.to_string(),
                Ok(_) => format!("{other}: no WebTransport endpoint"),
            };
            let status = if other == "/rt/wt" { 400 } else { 404 };
            let resp = hyper::http::Response::builder()
                .status(status)
                .body(())
                .expect("valid response");
            let _ = stream.send_response(resp).await;
            let _ = stream.finish().await;
            return refuse(&mut entry, status, why);
        }
    };
    entry["session"] = params.session.clone().into();
    let session = match WebTransportSession::accept(req, stream, conn).await {
        Ok(s) => s,
        Err(e) => return refuse(&mut entry, 500, e.to_string()),
    };
    entry["status"] = 200.into();
    entry["t_done_unix_ns"] = unix_ns().into();
    access.write(&entry);
    // The client's stream: the session's first bidirectional one.
    let bidi = loop {
        match session.accept_bi().await {
            Ok(Some(AcceptedBi::BidiStream(_, s))) => break s,
            Ok(Some(AcceptedBi::Request(_, mut other))) => {
                let resp = hyper::http::Response::builder()
                    .status(421)
                    .body(())
                    .expect("valid response");
                let _ = other.send_response(resp).await;
                let _ = other.finish().await;
            }
            _ => return,
        }
    };
    let (tx, rx) = Framed::new(bidi, LinesCodec::new_with_max_length(MAX_SIZE + 4096)).split();
    let mut tx = tx.sink_map_err(|e| e.to_string());
    let mut rx = rx.map(|r| r.map_err(|e| e.to_string()));
    let conn: Arc<str> = rec.conn.as_str().into();
    if params.scenario == Scenario::Room {
        run_channel_room(&mut tx, &mut rx, "wt", params, rt, access, conn).await;
    } else {
        run_channel(&mut tx, &mut rx, "wt", params, access, conn).await;
    }
    // Dropping the stream's receiving half (STOP_SENDING) or the session (the
    // HTTP/3 connection closes at once) could overtake the last message: the
    // client closes them, having had `bye`.
    let _ = tokio::time::timeout(CLIENT_CLOSES, session.accept_bi()).await;
    drop((tx, rx));
}

/// How long a session is held open for its client to close it.
const CLIENT_CLOSES: std::time::Duration = std::time::Duration::from_secs(30);
