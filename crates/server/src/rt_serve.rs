//! The real-time web endpoints over TCP (HTTP/1.1 and HTTP/2): Server-Sent
//! Events, long polling, the upstream sink, and WebSocket by HTTP/1.1
//! Upgrade or HTTP/2 extended CONNECT (RFC 8441). What to send and when
//! comes from `realtime.rs`; this module writes and reads, and logs.
//!
//! The access log gets, besides each request's line (with `"realtime"`:
//! the mechanism, and `"session"`), one line per message:
//! `{"type":"message","mech","session","conn","dir":"down"|"up","seq",...}`
//! with, going down, when the message was due (`t_due_unix_ns`) and when it
//! was written (`t_write_unix_ns`: handed to the connection; for SSE, to the
//! response's body, a queue of 16 events); coming up, the
//! client's stamp (`t_send_ms`) and when the server had the whole message
//! (`t_recv_unix_ns`); relayed in a chat room, one line per receiver
//! (`"dir":"relay"`, the receiver's `session`, the sender's `from` and
//! `seq`, `t_write_unix_ns`). Event streams are neither compressed nor
//! buffered: each message is its own write.

use crate::http::{FileBody, Shared};
use crate::log::{unix_ns, JsonLines};
use crate::realtime::{message, Params, Relay, RoomError, Scenario, Schedule, Upstream};
use crate::record::RequestRecord;
use crate::rt_state::until;
pub use crate::rt_state::RtState;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::BodyExt;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use std::time::Duration;
use tokio_tungstenite::tungstenite::protocol::{Message, Role};
use tokio_tungstenite::WebSocketStream;

/// When a scenario's streams give up: its schedule's length and two minutes more.
fn deadline(p: &Params, t0: u64) -> u64 {
    t0 + ((p.n as f64 * p.interval_ms + 120_000.0) * 1e6) as u64
}

/// How often an event stream with nothing to send writes a comment line, so
/// that no idle timeout (the server's own: 30 s by default) ends it while
/// its client sends over other connections.
const SSE_HEARTBEAT: Duration = Duration::from_secs(10);

/// An SSE comment: ignored by every client, it keeps the stream busy.
const SSE_COMMENT: &[u8] = b": keep-alive\n\n";

/// The message that starts a stream (or a room) at `t0`: `{"t_ms":T}`, or on a
/// WebSocket or WebTransport stream `{"open":true,"t_ms":T}`.
fn start_message(t0: u64, open: bool) -> String {
    let t = t0 as f64 / 1e6;
    if open {
        format!("{{\"open\":true,\"t_ms\":{t}}}")
    } else {
        format!("{{\"t_ms\":{t}}}")
    }
}

/// The SSE event that starts a stream: `hello` (not `open`, EventSource's own event).
fn hello_event(t0: u64) -> String {
    format!("event: hello\ndata: {}\n\n", start_message(t0, false))
}

fn log_relay(access: &JsonLines, mech: &str, p: &Params, conn: &str, r: &Relay) {
    access.write(&serde_json::json!({
        "type": "message", "mech": mech, "session": p.session, "conn": conn, "dir": "relay",
        "from": r.from, "seq": r.seq, "t_write_unix_ns": unix_ns(), "bytes": r.body.len(),
    }));
}

/// What the request handler already knows of a request.
pub struct Req {
    pub conn: Arc<str>,
    pub proto: &'static str,
    pub tls: bool,
    pub cc: Arc<str>,
    pub authority: Option<String>,
    pub t_request: u64,
    /// What the real-time streams hold of their connection.
    pub conn_use: Arc<crate::http::ConnUse>,
}

/// Whether a request path is one of the real-time endpoints.
pub fn is_realtime(path: &str) -> bool {
    path.starts_with("/rt/")
}

fn text(
    status: StatusCode,
    body: String,
    on_done: Box<dyn FnOnce(u64) + Send>,
) -> Response<FileBody> {
    Response::builder()
        .status(status)
        .header("server", "satbench")
        .header("content-type", "text/plain")
        .header("cache-control", "no-store")
        .body(FileBody::mem(Bytes::from(body), on_done))
        .expect("valid response")
}

/// Answer a request to `/rt/...`, logging it as the file handler does.
pub async fn respond(
    req: Request<hyper::body::Incoming>,
    sh: Arc<Shared>,
    r: Req,
) -> Result<Response<FileBody>, std::io::Error> {
    let target = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let is_connect = req.method() == Method::CONNECT;
    let mech = match target.as_str() {
        "/rt/sse" => "sse",
        "/rt/poll" => "poll",
        "/rt/send" => "send",
        "/rt/ws" => "ws",
        _ => "unknown",
    };
    let path = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let cc = (&*r.cc, format!("linux {}", r.cc));
    let mut rec = RequestRecord::new(
        &r.conn,
        r.proto,
        r.tls,
        cc,
        req.method().as_str(),
        path,
        r.t_request,
    );
    rec.authority = r.authority.clone();
    rec.extra.insert("realtime".into(), mech.into());
    // The endpoints below add the session, the status and what was sent.
    let mut entry = rec.value();
    let params = match Params::parse(&query) {
        Ok(p) => p,
        Err(e) => {
            return Ok(logged(
                &sh.access,
                entry,
                StatusCode::BAD_REQUEST,
                e.to_string(),
            ))
        }
    };
    entry["session"] = params.session.clone().into();
    match mech {
        "sse" if req.method() == Method::GET => Ok(sse(&sh, &r, params, entry)),
        "poll" if req.method() == Method::GET => {
            let _open = r.conn_use.stream();
            Ok(poll(&sh, &r, params, entry).await)
        }
        "send" if req.method() == Method::POST => Ok(send(&sh, &r, req, params, entry).await),
        "ws" if is_connect || req.method() == Method::GET => {
            Ok(websocket(&sh, &r, req, params, entry))
        }
        "unknown" => Ok(logged(
            &sh.access,
            entry,
            StatusCode::NOT_FOUND,
            "no such endpoint".into(),
        )),
        _ => Ok(logged(
            &sh.access,
            entry,
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed".into(),
        )),
    }
}

/// A short answer, its request logged when its body is sent.
fn logged(
    access: &JsonLines,
    entry: serde_json::Value,
    status: StatusCode,
    body: String,
) -> Response<FileBody> {
    text(
        status,
        format!("{body}\n"),
        done_logger(access, entry, status),
    )
}

fn done_logger(
    access: &JsonLines,
    mut entry: serde_json::Value,
    status: StatusCode,
) -> Box<dyn FnOnce(u64) + Send> {
    let access = access.clone();
    entry["status"] = status.as_u16().into();
    Box::new(move |sent| {
        entry["body_bytes"] = sent.into();
        entry["t_done_unix_ns"] = unix_ns().into();
        access.write(&entry);
    })
}

fn log_down(
    access: &JsonLines,
    mech: &str,
    p: &Params,
    conn: &str,
    seq: usize,
    due: u64,
    bytes: usize,
) {
    access.write(&serde_json::json!({
        "type": "message", "mech": mech, "session": p.session, "conn": conn, "dir": "down", "seq": seq,
        "t_due_unix_ns": due, "t_write_unix_ns": unix_ns(), "bytes": bytes,
    }));
}

fn log_up(access: &JsonLines, mech: &str, session: &str, conn: &str, up: &Upstream, bytes: usize) {
    access.write(&serde_json::json!({
        "type": "message", "mech": mech, "session": session, "conn": conn, "dir": "up", "seq": up.seq,
        "t_send_ms": up.t_ms, "t_recv_unix_ns": unix_ns(), "bytes": bytes,
    }));
}

/// Server-Sent Events: a `hello` event at once (the stream's start, from
/// which messages are due; not `open`, which is EventSource's own event),
/// one event per message when due, then `done`. In the client-update
/// scenario the stream stays open, carrying nothing, until the client goes
/// (or the schedule's limit). In a room, `hello` comes when the room
/// starts, then every relay to this member, then `done`.
fn sse(sh: &Arc<Shared>, r: &Req, p: Params, entry: serde_json::Value) -> Response<FileBody> {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let (access, conn, sh2) = (sh.access.clone(), r.conn.clone(), sh.clone());
    let open = r.conn_use.stream();
    tokio::spawn(async move {
        let _open = open;
        if p.scenario == Scenario::Room {
            return sse_room(&sh2.realtime, &access, &conn, &p, tx).await;
        }
        let t0 = unix_ns();
        let sched = Schedule::new(&p);
        if tx.send(Bytes::from(hello_event(t0))).await.is_err() {
            return;
        }
        for seq in 0..sched.len() {
            let due = t0 + sched.due(seq).expect("in range");
            until(due).await;
            let m = message(seq as u64, due, p.size);
            let ev = format!("id: {seq}\ndata: {m}\n\n");
            log_down(&access, "sse", &p, &conn, seq, due, m.len());
            if tx.send(Bytes::from(ev)).await.is_err() {
                return;
            }
        }
        if !sched.is_empty() {
            let _ = tx
                .send(Bytes::from_static(b"event: done\ndata: {}\n\n"))
                .await;
        } else {
            // Nothing to send: held open (a comment now and then) until the client closes it.
            let limit = t0 + ((p.n as f64 * p.interval_ms + 60_000.0) * 1e6) as u64;
            while unix_ns() < limit {
                tokio::time::sleep(SSE_HEARTBEAT).await;
                if tx.send(Bytes::from_static(SSE_COMMENT)).await.is_err() {
                    return;
                }
            }
        }
    });
    Response::builder()
        .header("server", "satbench")
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-store")
        .body(FileBody::stream(
            rx,
            done_logger(&sh.access, entry, StatusCode::OK),
        ))
        .expect("valid response")
}

/// A room member's event stream: `hello` when the room starts, each relay
/// as it comes, `done` once the member has had every other's messages.
async fn sse_room(
    rt: &RtState,
    access: &JsonLines,
    conn: &str,
    p: &Params,
    tx: tokio::sync::mpsc::Sender<Bytes>,
) {
    let end = deadline(p, unix_ns());
    let t0 = match rt.join(p, end).await {
        Ok(t0) => t0,
        Err(why) => {
            let _ = tx
                .send(Bytes::from(format!("event: failed\ndata: {why}\n\n")))
                .await;
            return;
        }
    };
    if tx.send(Bytes::from(hello_event(t0))).await.is_err() {
        return;
    }
    let mut next = 0;
    while next < p.relays() {
        let beat = (unix_ns() + SSE_HEARTBEAT.as_nanos() as u64).min(end);
        let Ok(batch) = rt.relays(p, next, beat).await else {
            return;
        };
        if batch.is_empty() {
            if unix_ns() >= end {
                return; // the deadline: the client sees no `done`
            }
            if tx.send(Bytes::from_static(SSE_COMMENT)).await.is_err() {
                return;
            }
            continue;
        }
        for r in batch {
            log_relay(access, "sse", p, conn, &r);
            let mut ev = Vec::with_capacity(r.body.len() + 8);
            ev.extend_from_slice(b"data: ");
            ev.extend_from_slice(&r.body);
            ev.extend_from_slice(b"\n\n");
            if tx.send(Bytes::from(ev)).await.is_err() {
                return;
            }
            next += 1;
        }
    }
    let _ = tx
        .send(Bytes::from_static(b"event: done\ndata: {}\n\n"))
        .await;
}

/// Long polling. The request with `open=1` opens the session and is
/// answered at once (`{"t_ms": start}`); every poll gets the messages due
/// after `after` as a JSON array, held until the next is due, and
/// `{"done":true}` once the schedule is through.
async fn poll(
    sh: &Arc<Shared>,
    r: &Req,
    p: Params,
    entry: serde_json::Value,
) -> Response<FileBody> {
    if p.session.is_empty() {
        return logged(
            &sh.access,
            entry,
            StatusCode::BAD_REQUEST,
            "session: needed".into(),
        );
    }
    if p.scenario == Scenario::Room {
        return poll_room(sh, r, p, entry).await;
    }
    let sched = Schedule::new(&p);
    let t0 = {
        let mut s = sh.realtime.sessions.lock().expect("sessions");
        if p.open {
            let now = unix_ns();
            s.insert(p.session.clone(), now);
            drop(s);
            return json(&sh.access, entry, start_message(now, false));
        }
        match s.get(&p.session) {
            Some(t) => *t,
            None => {
                drop(s);
                return logged(
                    &sh.access,
                    entry,
                    StatusCode::NOT_FOUND,
                    "no such session".into(),
                );
            }
        }
    };
    loop {
        let now = unix_ns();
        let (ready, next) = sched.ready(p.after, now.saturating_sub(t0));
        if !ready.is_empty() {
            let mut body = String::from("[");
            for seq in ready.clone() {
                let due = t0 + sched.due(seq).expect("in range");
                let m = message(seq as u64, due, p.size);
                log_down(&sh.access, "poll", &p, &r.conn, seq, due, m.len());
                if seq != ready.start {
                    body.push(',');
                }
                body.push_str(&m);
            }
            body.push(']');
            return json(&sh.access, entry, body);
        }
        match next {
            Some(due) => until(t0 + due).await,
            None => return json(&sh.access, entry, "{\"done\":true}".into()),
        }
    }
}

/// Long polling in a room: `open=1` joins and is answered when the room
/// starts (`{"t_ms": start}`); a poll with `after=K` gets the relays from
/// position `K + 1` on (a JSON array of the messages as their senders sent
/// them), held until there is one, and `{"done":true}` once the member has
/// had every other's messages.
async fn poll_room(
    sh: &Arc<Shared>,
    r: &Req,
    p: Params,
    entry: serde_json::Value,
) -> Response<FileBody> {
    let rt = &sh.realtime;
    let end = deadline(&p, unix_ns());
    if p.open {
        return match rt.join(&p, end).await {
            Ok(t0) => json(&sh.access, entry, start_message(t0, false)),
            Err(why) => logged(&sh.access, entry, StatusCode::CONFLICT, why),
        };
    }
    let from = (p.after + 1) as usize;
    if from >= p.relays() {
        return json(&sh.access, entry, "{\"done\":true}".into());
    }
    match rt.relays(&p, from, end).await {
        Ok(batch) if !batch.is_empty() => {
            let mut body = Vec::from(&b"["[..]);
            for (k, m) in batch.iter().enumerate() {
                log_relay(&sh.access, "poll", &p, &r.conn, m);
                if k > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(&m.body);
            }
            body.push(b']');
            json_bytes(&sh.access, entry, Bytes::from(body))
        }
        Ok(_) => logged(
            &sh.access,
            entry,
            StatusCode::GATEWAY_TIMEOUT,
            "nothing relayed before the deadline".into(),
        ),
        Err(e) => logged(&sh.access, entry, StatusCode::CONFLICT, e.to_string()),
    }
}

fn json(access: &JsonLines, entry: serde_json::Value, body: String) -> Response<FileBody> {
    json_bytes(access, entry, Bytes::from(body))
}

fn json_bytes(access: &JsonLines, entry: serde_json::Value, body: Bytes) -> Response<FileBody> {
    Response::builder()
        .header("server", "satbench")
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .body(FileBody::mem(
            body,
            done_logger(access, entry, StatusCode::OK),
        ))
        .expect("valid response")
}

/// A message from the client (SSE and long polling send upstream so).
async fn send(
    sh: &Arc<Shared>,
    r: &Req,
    req: Request<hyper::body::Incoming>,
    p: Params,
    entry: serde_json::Value,
) -> Response<FileBody> {
    let mech = req
        .uri()
        .query()
        .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("mech=")))
        .filter(|m| matches!(*m, "sse" | "poll"))
        .unwrap_or("send")
        .to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => {
            return logged(
                &sh.access,
                entry,
                StatusCode::BAD_REQUEST,
                "body: cut short".into(),
            )
        }
    };
    match Upstream::parse(&body) {
        Some(up) => {
            if !up.done {
                if let Err(e) = arrived(
                    Some(&sh.realtime),
                    &sh.access,
                    &mech,
                    &p,
                    &r.conn,
                    &up,
                    body,
                ) {
                    return logged(&sh.access, entry, StatusCode::CONFLICT, e.to_string());
                }
            }
            logged(&sh.access, entry, StatusCode::OK, "ok".into())
        }
        None => logged(
            &sh.access,
            entry,
            StatusCode::BAD_REQUEST,
            "body: not a message".into(),
        ),
    }
}

/// WebSocket: HTTP/1.1 Upgrade (101, Sec-WebSocket-Accept) or HTTP/2
/// extended CONNECT with `:protocol websocket` (200). Then, on the
/// upgraded stream, the schedule's messages go down as text frames while
/// the client's come up, until the client says it is done (or closes) and
/// the schedule is through.
fn websocket(
    sh: &Arc<Shared>,
    r: &Req,
    mut req: Request<hyper::body::Incoming>,
    p: Params,
    mut entry: serde_json::Value,
) -> Response<FileBody> {
    let h2 = req.method() == Method::CONNECT;
    let accept = if h2 {
        let proto = req
            .extensions()
            .get::<hyper::ext::Protocol>()
            .map(|p| p.as_str().to_string());
        if proto.as_deref() != Some("websocket") {
            return logged(
                &sh.access,
                entry,
                StatusCode::BAD_REQUEST,
                ":protocol: not websocket".into(),
            );
        }
        None
    } else {
        let h = req.headers();
        let upgrade = h
            .get(hyper::header::UPGRADE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
        let Some(key) = h.get("sec-websocket-key").filter(|_| upgrade) else {
            return logged(
                &sh.access,
                entry,
                StatusCode::BAD_REQUEST,
                "not a WebSocket upgrade".into(),
            );
        };
        Some(tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()))
    };
    entry["websocket"] = (if h2 { "extended-connect" } else { "upgrade" }).into();
    let on_upgrade = hyper::upgrade::on(&mut req);
    let (access, conn, sh2) = (sh.access.clone(), r.conn.clone(), sh.clone());
    let permit = (!h2).then(|| r.conn_use.upgrades.clone().try_acquire_owned().ok());
    let open = r.conn_use.stream();
    tokio::spawn(async move {
        let _connection_in_use = (permit, open);
        let Ok(io) = on_upgrade.await else { return };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(io), Role::Server, None).await;
        if p.scenario == Scenario::Room {
            run_websocket_room(ws, p, &sh2.realtime, access, conn).await;
        } else {
            run_websocket(ws, p, access, conn).await;
        }
    });
    let mut b = Response::builder().header("server", "satbench");
    b = match accept {
        Some(a) => b
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header(hyper::header::UPGRADE, "websocket")
            .header(hyper::header::CONNECTION, "upgrade")
            .header("sec-websocket-accept", a),
        None => b.status(StatusCode::OK),
    };
    let status = if h2 {
        StatusCode::OK
    } else {
        StatusCode::SWITCHING_PROTOCOLS
    };
    b.body(FileBody::mem(
        Bytes::new(),
        done_logger(&sh.access, entry, status),
    ))
    .expect("valid response")
}

/// A WebSocket as a channel of text messages: text (or binary) frames in,
/// text frames out; a close frame or an error ends it.
fn ws_channel<S>(
    ws: WebSocketStream<S>,
) -> (
    impl futures_util::Sink<String, Error = String> + Unpin,
    impl futures_util::Stream<Item = Result<String, String>> + Unpin,
)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (tx, rx) = ws.split();
    let tx = Box::pin(
        tx.sink_map_err(|e| e.to_string())
            .with(|m: String| std::future::ready(Ok::<_, String>(Message::text(m)))),
    );
    let rx = Box::pin(rx.filter_map(|m| {
        std::future::ready(match m {
            Ok(Message::Text(t)) => Some(Ok(t.as_str().to_owned())),
            Ok(Message::Binary(b)) => Some(Ok(String::from_utf8_lossy(&b).into_owned())),
            Ok(Message::Close(_)) => Some(Err("closed".to_string())),
            Ok(_) => None,
            Err(e) => Some(Err(e.to_string())),
        })
    }));
    (tx, rx)
}

async fn run_websocket<S>(ws: WebSocketStream<S>, p: Params, access: JsonLines, conn: Arc<str>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut tx, mut rx) = ws_channel(ws);
    run_channel(&mut tx, &mut rx, "ws", p, access, conn).await
}

async fn run_websocket_room<S>(
    ws: WebSocketStream<S>,
    p: Params,
    rt: &RtState,
    access: JsonLines,
    conn: Arc<str>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut tx, mut rx) = ws_channel(ws);
    run_channel_room(&mut tx, &mut rx, "ws", p, rt, access, conn).await
}

/// A client's message, however it came (a POST, a frame, a line): logged
/// and, in a room (`rt` holds it), relayed to the other members.
fn arrived(
    rt: Option<&RtState>,
    access: &JsonLines,
    mech: &str,
    p: &Params,
    conn: &str,
    up: &Upstream,
    body: Bytes,
) -> Result<(), RoomError> {
    log_up(access, mech, &p.session, conn, up, body.len());
    match rt {
        Some(rt) if p.scenario == Scenario::Room => rt.post(p, up, body),
        _ => Ok(()),
    }
}

/// What came from the client on a channel: its `{"done":true}`, answered
/// `{"bye":true}` (Some(true)); any other message, [`arrived`] (Some(false));
/// None once the channel (or the room) is gone.
async fn from_client<T>(
    m: Option<Result<String, String>>,
    tx: &mut T,
    room: Option<&RtState>,
    access: &JsonLines,
    mech: &str,
    p: &Params,
    conn: &str,
) -> Option<bool>
where
    T: futures_util::Sink<String, Error = String> + Unpin,
{
    let data = m?.ok()?;
    match Upstream::parse(data.as_bytes()) {
        Some(up) if up.done => tx.send("{\"bye\":true}".into()).await.ok().map(|_| true),
        Some(up) => arrived(room, access, mech, p, conn, &up, Bytes::from(data))
            .ok()
            .map(|_| false),
        None => Some(false),
    }
}

/// A scenario over a channel of messages both ways (a WebSocket's frames,
/// a WebTransport stream's lines), in one loop, in order: the schedule's
/// messages when due (after `{"open":true,"t_ms":start}`, and
/// `{"done":true}` after the last), and the client's as they come. The
/// client ends with `{"done":true}` once it has sent all of its own and had
/// all of the server's; it is answered `{"bye":true}`, which tells it every
/// message it sent was logged. The channel's sending side is closed at the
/// end; its receiving side stays the caller's.
pub async fn run_channel<T, R>(
    tx: &mut T,
    rx: &mut R,
    mech: &'static str,
    p: Params,
    access: JsonLines,
    conn: Arc<str>,
) where
    T: futures_util::Sink<String, Error = String> + Unpin,
    R: futures_util::Stream<Item = Result<String, String>> + Unpin,
{
    let t0 = unix_ns();
    let sched = Schedule::new(&p);
    let limit = deadline(&p, t0);
    if tx.send(start_message(t0, true)).await.is_err() {
        return;
    }
    let (mut seq, mut client_done) = (0, false);
    while !(client_done && seq >= sched.len()) {
        let due = sched.due(seq).map(|d| t0 + d).unwrap_or(limit);
        tokio::select! {
            _ = until(due) => {
                if seq >= sched.len() {
                    break; // the limit: the client never said it was done
                }
                let m = message(seq as u64, due, p.size);
                log_down(&access, mech, &p, &conn, seq, due, m.len());
                if tx.send(m).await.is_err() {
                    return;
                }
                seq += 1;
                if seq == sched.len() && tx.send("{\"done\":true}".into()).await.is_err() {
                    return;
                }
            }
            m = rx.next() => match from_client(m, tx, None, &access, mech, &p, &conn).await {
                Some(done) => client_done |= done,
                None => return,
            },
        }
    }
    let _ = tx.close().await;
}

/// A room member's channel: `{"open":true,"t_ms":start}` when the room
/// starts; then the member's messages come up (each logged and relayed to
/// the others) while every other member's go down as they are relayed,
/// `{"done":true}` after the last; the member's `{"done":true}` is answered
/// `{"bye":true}`, as outside a room.
pub async fn run_channel_room<T, R>(
    tx: &mut T,
    rx: &mut R,
    mech: &'static str,
    p: Params,
    rt: &RtState,
    access: JsonLines,
    conn: Arc<str>,
) where
    T: futures_util::Sink<String, Error = String> + Unpin,
    R: futures_util::Stream<Item = Result<String, String>> + Unpin,
{
    let end = deadline(&p, unix_ns());
    let t0 = match rt.join(&p, end).await {
        Ok(t0) => t0,
        Err(why) => {
            let _ = tx.send(format!("{{\"failed\":{why:?}}}")).await;
            return;
        }
    };
    if tx.send(start_message(t0, true)).await.is_err() {
        return;
    }
    let (mut next, mut client_done) = (0, false);
    while !(client_done && next >= p.relays()) {
        tokio::select! {
            got = rt.relays(&p, next, end), if next < p.relays() => {
                let Ok(batch) = got else { return };
                if batch.is_empty() {
                    return; // the deadline
                }
                for r in batch {
                    log_relay(&access, mech, &p, &conn, &r);
                    if tx.send(String::from_utf8_lossy(&r.body).into_owned()).await.is_err() {
                        return;
                    }
                    next += 1;
                }
                if next == p.relays() && tx.send("{\"done\":true}".into()).await.is_err() {
                    return;
                }
            }
            m = rx.next() => match from_client(m, tx, Some(rt), &access, mech, &p, &conn).await {
                Some(done) => client_done |= done,
                None => return,
            },
            _ = until(end) => return,
        }
    }
    let _ = tx.close().await;
}
