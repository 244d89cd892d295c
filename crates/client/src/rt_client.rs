//! The loader's real-time client over the wire: one client runs one
//! scenario over long polling, Server-Sent Events or WebSocket against
//! satbench-server's `/rt/` endpoints, over HTTP/1.1 or HTTP/2, with a
//! browser's connection policy:
//!
//! - HTTP/2: one connection carries everything (the event stream, the
//!   polls, the POSTs; the WebSocket as an extended CONNECT stream, RFC
//!   8441, sent once the server's SETTINGS have enabled it, as a browser
//!   must wait for them);
//! - HTTP/1.1: the event stream, the polls or the WebSocket have a
//!   connection of their own; the client's messages over SSE and long
//!   polling are POSTs, each sent when due, on up to `connections - 1` more
//!   kept-alive connections (a browser's six per host, the stream's
//!   included).
//!
//! The client's messages start with its stream (in a chat room, with the
//! room: the server's `hello` or `open`). What to send and what the server's
//! messages mean is `rt.rs`; every connection is recorded with the load's
//! (`conn.rs`).

use crate::conn::Fetcher;
use crate::rt::{up_message, Down, Mech, Record, RtQuery};
use crate::session::{ConnInfo, Proto, Settings};
use crate::sse::SseParser;
use crate::url::Url;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::{Message, Role};
use tokio_tungstenite::WebSocketStream;

type H1 = hyper::client::conn::http1::SendRequest<Full<Bytes>>;
type H2 = hyper::client::conn::http2::SendRequest<Full<Bytes>>;

/// How long a client waits for the server's SETTINGS to enable extended CONNECT.
const SETTINGS_WAIT: Duration = Duration::from_secs(30);

/// Unix time in ms, from the wall clock every namespace shares.
fn now_ms() -> f64 {
    satbench_common::unix_ns() as f64 / 1e6
}

/// A copy of a request with a whole body in memory (to send it again).
fn clone_request(req: &Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    let mut b = Request::builder()
        .method(req.method().clone())
        .uri(req.uri().clone())
        .version(req.version());
    if let Some(h) = b.headers_mut() {
        *h = req.headers().clone();
    }
    b.body(req.body().clone()).expect("a valid request's copy")
}

/// An error as text, with its causes (hyper's "connection error" says
/// nothing without the operating system's error under it).
fn err(e: impl std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

/// One client's run and the connections it opened.
pub struct Run {
    pub record: Record,
    pub connections: Vec<ConnInfo>,
}

/// Run client `settings.client`'s scenario; never fails: what went wrong
/// is in the record's errors.
pub async fn run(
    settings: Arc<Settings>,
    url: Url,
    q: Arc<RtQuery>,
    mech: Mech,
    timeout: Duration,
) -> Run {
    let client = settings.client;
    let c = Arc::new(Client {
        fetcher: Fetcher::new(settings.clone()),
        url,
        session: q.session_of(client),
        rec: Mutex::new(Record::new(&q, mech, client, now_ms())),
        q,
        mech,
        proto: settings.proto,
        h2: tokio::sync::OnceCell::new(),
        idle: Mutex::default(),
        permits: tokio::sync::Semaphore::new(settings.connections.saturating_sub(1).max(1)),
    });
    let body = async {
        match mech {
            Mech::Sse => c.sse().await,
            Mech::Poll => c.poll().await,
            Mech::Ws => c.ws().await,
        }
    };
    let outcome = tokio::time::timeout(timeout, body).await;
    let mut record = c.rec.lock().expect("record").clone();
    match outcome {
        Ok(Ok(())) => record.done_ms = Some(now_ms()),
        Ok(Err(e)) => record.errors.push(e),
        Err(_) => record
            .errors
            .push(format!("timed out after {} s", timeout.as_secs_f64())),
    }
    Run {
        record,
        connections: c.fetcher.connections(),
    }
}

struct Client {
    fetcher: Arc<Fetcher>,
    url: Url,
    q: Arc<RtQuery>,
    session: String,
    mech: Mech,
    proto: Proto,
    rec: Mutex<Record>,
    h2: tokio::sync::OnceCell<(H2, watch::Receiver<bool>)>,
    /// Idle HTTP/1.1 connections for the client's POSTs, and how many may be open.
    idle: Mutex<Vec<H1>>,
    permits: tokio::sync::Semaphore,
}

/// A stream's signal that the client's own messages may start.
struct Go(Option<oneshot::Sender<()>>);

impl Go {
    fn new(now: bool) -> (Go, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let mut go = Go(Some(tx));
        if now {
            go.fire();
        }
        (go, rx)
    }
    fn fire(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send(());
        }
    }
}

impl Client {
    fn target(&self, endpoint: &str, extra: &str) -> String {
        format!("/rt/{endpoint}?{}{extra}", self.q.query_for(&self.session))
    }

    fn in_room(&self) -> bool {
        self.q.room.is_some()
    }

    /// A request for `path`: HTTP/1.1 with a Host header, HTTP/2 with the absolute URL.
    fn request(
        &self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<Request<Full<Bytes>>, String> {
        let b = match self.proto {
            Proto::H2 => Request::builder().uri(format!(
                "{}://{}{path}",
                if self.url.https { "https" } else { "http" },
                self.url.authority()
            )),
            _ => Request::builder()
                .uri(path)
                .header("host", self.url.authority()),
        };
        b.method(method)
            .header("user-agent", "satbench-load")
            .header("cache-control", "no-store")
            .body(Full::new(body))
            .map_err(err)
    }

    async fn new_h1(&self) -> Result<H1, String> {
        let (id, io) = self
            .fetcher
            .open(&self.url, b"http/1.1")
            .await
            .map_err(err)?;
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| format!("HTTP/1.1 on connection {id}: {e}"))?;
        tokio::spawn(conn);
        Ok(sender)
    }

    /// A request on the one HTTP/2 connection.
    async fn h2_send(
        &self,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<hyper::body::Incoming>, String> {
        let mut s = self.h2_conn().await?.0;
        s.ready().await.map_err(err)?;
        s.send_request(req).await.map_err(err)
    }

    /// The one HTTP/2 connection: its sender, and whether the server's
    /// SETTINGS have enabled extended CONNECT.
    async fn h2_conn(&self) -> Result<(H2, watch::Receiver<bool>), String> {
        self.h2
            .get_or_try_init(|| async {
                let (id, io) = self.fetcher.open(&self.url, b"h2").await.map_err(err)?;
                let (sender, mut conn) =
                    hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                        .handshake(TokioIo::new(io))
                        .await
                        .map_err(|e| format!("HTTP/2 on connection {id}: {e}"))?;
                // hyper reads the server's SETTINGS in a task of its own and
                // says nothing when they arrive: the flag is read each
                // millisecond until it is set (no longer than a round trip).
                let (flag, enabled) = watch::channel(false);
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(Duration::from_millis(1));
                    loop {
                        tokio::select! {
                            _ = &mut conn => return,
                            _ = tick.tick(), if !*flag.borrow() => {
                                if conn.is_extended_connect_protocol_enabled() {
                                    flag.send_replace(true);
                                }
                            }
                        }
                    }
                });
                Ok::<_, String>((sender, enabled))
            })
            .await
            .cloned()
    }

    /// A request on the stream's own connection (HTTP/1.1: `down`, opened
    /// on first use and kept alive; HTTP/2: the one connection).
    async fn down_request(
        &self,
        down: &mut Option<H1>,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<hyper::body::Incoming>, String> {
        if self.proto == Proto::H2 {
            return self.h2_send(req).await;
        }
        if down.is_none() {
            *down = Some(self.new_h1().await?);
        }
        let s = down.as_mut().expect("opened");
        s.ready().await.map_err(err)?;
        s.send_request(req).await.map_err(err)
    }

    /// A whole short answer (a poll's, a POST's): its body, or why not.
    async fn answer(resp: Response<hyper::body::Incoming>, what: &str) -> Result<Bytes, String> {
        let status = resp.status();
        let body = resp.into_body().collect().await.map_err(err)?.to_bytes();
        if !status.is_success() {
            return Err(format!(
                "{what} answered {status}: {}",
                String::from_utf8_lossy(&body).trim()
            ));
        }
        Ok(body)
    }

    /// POST one of the client's messages (SSE and long polling), on a
    /// kept-alive connection of the pool (HTTP/1.1) or the one (HTTP/2).
    async fn post(&self, body: String) -> Result<(), String> {
        let req = self.request(
            Method::POST,
            &self.target("send", &format!("&mech={}", self.mech.name())),
            Bytes::from(body),
        )?;
        if self.proto == Proto::H2 {
            return Client::answer(self.h2_send(req).await?, "send")
                .await
                .map(|_| ());
        }
        let _permit = self.permits.acquire().await.map_err(err)?;
        // A kept-alive connection the server has closed (its idle timeout) is
        // dropped; one it closes while the request is on its way (the race
        // of RFC 9112, section 9.3.1, a one-way delay wide) fails the request
        // before any answer, which is then sent again on a new connection, as
        // browsers do. A fresh connection's failure is the client's error.
        loop {
            let reuse = self.idle.lock().expect("idle").pop();
            let (mut s, reused) = match reuse {
                Some(s) if !s.is_closed() => (s, true),
                Some(_) => continue,
                None => (self.new_h1().await?, false),
            };
            if s.ready().await.is_err() && reused {
                continue;
            }
            match s.send_request(clone_request(&req)).await {
                Ok(resp) => {
                    Client::answer(resp, "send").await?;
                    self.idle.lock().expect("idle").push(s);
                    return Ok(());
                }
                // No answer came: on a reused connection, the server's close
                // (canceled, closed, or an end without TLS's close_notify).
                Err(_) if reused => continue,
                Err(e) => return Err(err(e)),
            }
        }
    }

    /// The client's messages, once `go` fires, on its schedule: each
    /// recorded and stamped when due and handed to `send` (whose futures
    /// run side by side: a POST does not wait for the one before). Ok once
    /// every one was sent; nothing if the stream never said go.
    async fn upstream<F, Fut>(&self, go: oneshot::Receiver<()>, send: F) -> Result<(), String>
    where
        F: Fn(String) -> Fut,
        Fut: Future<Output = Result<(), String>> + Send + 'static,
    {
        if !self.q.wants_up() || go.await.is_err() {
            return Ok(());
        }
        let start = Instant::now();
        let client = {
            let mut r = self.rec.lock().expect("record");
            r.sched_ms = Some(now_ms());
            r.client
        };
        let mut pending = tokio::task::JoinSet::new();
        for (seq, at) in self.q.up_offsets_ms(client).into_iter().enumerate() {
            tokio::time::sleep_until(start + Duration::from_secs_f64(at / 1e3)).await;
            let t = now_ms();
            let m = up_message(seq as u64, &self.session, t, self.q.size);
            self.rec.lock().expect("record").up.push((seq as u64, t));
            pending.spawn(send(m));
            while let Some(done) = pending.try_join_next() {
                done.map_err(err)??;
            }
        }
        while let Some(done) = pending.join_next().await {
            done.map_err(err)??;
        }
        Ok(())
    }

    /// The POSTs of this client's messages.
    fn posts(
        self: &Arc<Client>,
    ) -> impl Fn(String) -> std::pin::Pin<Box<dyn Future<Output = Result<(), String>> + Send>> {
        let me = self.clone();
        move |m| {
            let me = me.clone();
            Box::pin(async move { me.post(m).await })
        }
    }

    /// A message from the server, had at `t`: recorded; what it said.
    fn on_down(&self, d: Down, t: f64) -> Result<Down, String> {
        let mut r = self.rec.lock().expect("record");
        match &d {
            Down::Open { t_ms } => r.server_open_ms = Some(*t_ms),
            Down::Message { seq, t_ms, from } => {
                r.on_down(*seq, *t_ms, from.clone(), t);
            }
            Down::Failed(why) => return Err(format!("the server: {why}")),
            Down::Done | Down::Bye => {}
        }
        Ok(d)
    }

    fn opened(&self) {
        self.rec.lock().expect("record").open_ms = Some(now_ms());
    }

    fn down_complete(&self) -> bool {
        self.rec.lock().expect("record").down_complete()
    }

    /// Server-Sent Events: one long response down (`hello`, the messages,
    /// `done`); the client's messages as POSTs. The stream stays open until
    /// the client has sent everything.
    async fn sse(self: &Arc<Client>) -> Result<(), String> {
        let mut down = None;
        let req = self.request(Method::GET, &self.target("sse", ""), Bytes::new())?;
        let resp = self.down_request(&mut down, req).await?;
        if !resp.status().is_success() {
            return Err(format!("the event stream answered {}", resp.status()));
        }
        self.opened();
        let (mut go, started) = Go::new(!self.in_room());
        let mut body = resp.into_body();
        let reading = async {
            if !self.q.wants_down() {
                return Ok(()); // the client-update scenario: nothing comes down
            }
            let (mut parser, mut events) = (SseParser::new(), Vec::new());
            loop {
                let frame = body
                    .frame()
                    .await
                    .ok_or("the event stream ended early")?
                    .map_err(err)?;
                let t = now_ms();
                if let Some(d) = frame.data_ref() {
                    parser.feed(d, &mut events).map_err(err)?;
                }
                for e in events.drain(..) {
                    match e.kind.as_str() {
                        "hello" => {
                            self.on_down(Down::parse(&e.data)?, t)?;
                            go.fire();
                        }
                        "failed" => return Err(format!("the server: {}", e.data)),
                        "done" => return Ok(()),
                        "message" => {
                            self.on_down(Down::parse(&e.data)?, t)?;
                            if self.down_complete() {
                                return Ok(());
                            }
                        }
                        _ => {}
                    }
                }
            }
        };
        tokio::try_join!(reading, self.upstream(started, self.posts()))?;
        Ok(())
    }

    /// Long polling: the opening (in a room, answered when the room
    /// starts), then polls one after another, each held until there is
    /// something; the client's messages as POSTs.
    async fn poll(self: &Arc<Client>) -> Result<(), String> {
        let mut down = None;
        let req = self.request(Method::GET, &self.target("poll", "&open=1"), Bytes::new())?;
        let resp = self.down_request(&mut down, req).await?;
        let opened = Client::answer(resp, "the poll's opening").await?;
        let t = now_ms();
        self.opened();
        self.on_down(Down::parse(&String::from_utf8_lossy(&opened))?, t)?;
        let (_go, started) = Go::new(true);
        let reading = async {
            let mut after: i64 = -1;
            while self.q.wants_down() && !self.down_complete() {
                let req = self.request(
                    Method::GET,
                    &self.target("poll", &format!("&after={after}")),
                    Bytes::new(),
                )?;
                let resp = self.down_request(&mut down, req).await?;
                let t = now_ms();
                let body = Client::answer(resp, "a poll").await?;
                let v: serde_json::Value = serde_json::from_slice(&body).map_err(err)?;
                match v.as_array() {
                    Some(items) => {
                        for item in items {
                            if let Down::Message { seq, .. } =
                                self.on_down(Down::from_value(item)?, t)?
                            {
                                // The last had: by number, or in a room by place among the relays.
                                after = if self.in_room() {
                                    after + 1
                                } else {
                                    after.max(seq as i64)
                                };
                            }
                        }
                    }
                    None => {
                        if let Down::Done = self.on_down(Down::from_value(&v)?, t)? {
                            break;
                        }
                    }
                }
            }
            Ok::<(), String>(())
        };
        tokio::try_join!(reading, self.upstream(started, self.posts()))?;
        Ok(())
    }

    /// WebSocket: by HTTP/1.1 Upgrade on a connection of its own, or over
    /// HTTP/2 as an extended CONNECT stream (RFC 8441).
    async fn ws(self: &Arc<Client>) -> Result<(), String> {
        let path = self.target("ws", "");
        if self.proto != Proto::H2 {
            let (_id, io) = self
                .fetcher
                .open(&self.url, b"http/1.1")
                .await
                .map_err(err)?;
            let scheme = if self.url.https { "wss" } else { "ws" };
            let uri = format!("{scheme}://{}{path}", self.url.authority());
            let (ws, _resp) = tokio_tungstenite::client_async(uri, io)
                .await
                .map_err(|e| format!("the WebSocket upgrade: {e}"))?;
            self.opened();
            return self.ws_run(ws).await;
        }
        let (mut s, mut enabled) = self.h2_conn().await?;
        match tokio::time::timeout(SETTINGS_WAIT, enabled.wait_for(|on| *on)).await {
            Ok(Ok(_)) => {}
            _ => return Err("the server's SETTINGS never enabled extended CONNECT".into()),
        }
        let mut req = self.request(Method::CONNECT, &path, Bytes::new())?;
        req.headers_mut().insert(
            "sec-websocket-version",
            hyper::header::HeaderValue::from_static("13"),
        );
        req.extensions_mut()
            .insert(hyper::ext::Protocol::from_static("websocket"));
        s.ready().await.map_err(err)?;
        let resp = s.send_request(req).await.map_err(err)?;
        if resp.status() != hyper::StatusCode::OK {
            return Err(format!("the extended CONNECT answered {}", resp.status()));
        }
        let upgraded = hyper::upgrade::on(resp)
            .await
            .map_err(|e| format!("the extended CONNECT: {e}"))?;
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Client, None).await;
        self.opened();
        self.ws_run(ws).await
    }

    /// The WebSocket's messages both ways. Once it has had every message
    /// coming down and sent all of its own, the client says
    /// `{"done":true}`; the server's `{"bye":true}` answers, after it has
    /// logged everything the client sent (the stream is in order).
    async fn ws_run<S>(self: &Arc<Client>, ws: WebSocketStream<S>) -> Result<(), String>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let (mut sink, mut stream) = ws.split();
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let (mut go, started) = Go::new(!self.in_room());
        // Queued at once, in order (the futures only report it): the stream keeps that order.
        let sending = self.upstream(started, move |m| {
            std::future::ready(
                tx.send(m)
                    .map_err(|_| String::from("the WebSocket closed before a message was sent")),
            )
        });
        tokio::pin!(sending);
        let (mut up_sent, mut down_done, mut done_sent) =
            (!self.q.wants_up(), !self.q.wants_down(), false);
        loop {
            if up_sent && down_done && !done_sent {
                while let Ok(m) = rx.try_recv() {
                    sink.send(Message::text(m)).await.map_err(err)?;
                }
                sink.send(Message::text("{\"done\":true}"))
                    .await
                    .map_err(err)?;
                done_sent = true;
            }
            tokio::select! {
                r = &mut sending, if !up_sent => {
                    r?;
                    up_sent = true;
                }
                Some(m) = rx.recv() => sink.send(Message::text(m)).await.map_err(err)?,
                msg = stream.next() => {
                    let t = now_ms();
                    let text = match msg {
                        Some(Ok(Message::Text(text))) => text,
                        Some(Ok(Message::Close(_))) | None => return Err("the WebSocket closed early".into()),
                        Some(Err(e)) => return Err(format!("the WebSocket: {e}")),
                        Some(Ok(_)) => continue,
                    };
                    match self.on_down(Down::parse(text.as_str())?, t)? {
                        Down::Open { .. } => go.fire(),
                        Down::Done => down_done = true,
                        Down::Bye => {
                            let _ = sink.send(Message::Close(None)).await;
                            return Ok(());
                        }
                        Down::Message { .. } => down_done |= self.down_complete(),
                        Down::Failed(_) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::err;

    #[derive(Debug)]
    struct Outer(std::io::Error);

    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("connection error")
        }
    }

    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn an_error_is_told_with_its_causes() {
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(err(Outer(reset)), "connection error: connection reset");
    }
}
