// satbench's real-time web client: runs one scenario over one mechanism
// (long polling, Server-Sent Events, WebSocket or WebTransport) against satbench-server's
// /rt/ endpoints and leaves what happened in window.__satbench_result.
// In a chat room (scenario=room&room=R&members=M) the messages coming down
// are the other members' (each names its sender, "from"), relayed by the
// server; the client expects (M - 1) * n of them.
// While it runs, window.__satbench_hold is true: the driver waits for it.
//
// Times are unix ms from the page's own high-resolution clock
// (performance.timeOrigin + performance.now()); every namespace of a
// testbed shares the host's clock, so a message's one-way latency is its
// receive stamp minus its send stamp.
// <satbench-common> A port of crates/common (SplitMix64, up_seed, arrivals_ms), the one
// generator of every real-time schedule; tests/e2e/test_realtime_schedule.py holds it to
// the golden fixture the crate's tests write (tests/fixtures/rt-arrivals.json).
const SATBENCH_M64 = (1n << 64n) - 1n;
function satbenchUpSeed(seed, client) {
  return (seed ^ 0x5bd1e995n ^ ((client * 0x9e3779b9n) & SATBENCH_M64)) & SATBENCH_M64;
}
function satbenchArrivals(seed, n, intervalMs, poisson) {
  let state = BigInt.asUintN(64, seed);
  const unit = () => {
    state = (state + 0x9e3779b97f4a7c15n) & SATBENCH_M64;
    let z = state;
    z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & SATBENCH_M64;
    z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & SATBENCH_M64;
    z ^= z >> 31n;
    return Number(z >> 11n) / 9007199254740992;
  };
  const out = [];
  let t = 0;
  for (let k = 0; k < n; k++) {
    t += poisson ? -intervalMs * Math.log(1 - unit()) : intervalMs;
    out.push(t);
  }
  return out;
}
// </satbench-common>

(function () {
  "use strict";
  const q = new URLSearchParams(location.search);
  const mech = q.get("mech") || "ws";
  const scenario = q.get("scenario") || "server";
  const n = parseInt(q.get("n") || "100", 10);
  const size = parseInt(q.get("size") || "100", 10);
  const interval = parseFloat(q.get("interval_ms") || "1000");
  const arrivals = q.get("arrivals") || "constant";
  const seed = q.get("seed") || "1";  // a u64, kept as text
  const session = q.get("session") || ("s" + Math.floor(Math.random() * 1e9));
  const room = q.get("room") || "";
  const members = parseInt(q.get("members") || "2", 10);
  // The client's schedule: satbench-common's arrivals_ms for this client's seed (up_seed of the
  // stream's seed, client 0), as the loader's is; drawn before the start is stamped.
  const upOffsets = scenario === "server" ? [] :
    satbenchArrivals(satbenchUpSeed(BigInt(seed), 0n), n, interval, arrivals === "poisson");
  const now = () => performance.timeOrigin + performance.now();
  const R = {mech, scenario, n, size, interval_ms: interval, arrivals, session, start_ms: now(), open_ms: null,
             server_open_ms: null, down: [], up: [], errors: [], done_ms: null};
  window.__satbench_hold = true;
  const wantDown = scenario !== "client", wantUp = scenario !== "server";
  // How many messages come down: the server's, or in a room every other member's.
  const expectDown = scenario === "room" ? (members - 1) * n : n;
  const seen = new Set();
  let downDone = !wantDown, upDone = !wantUp, closers = [];
  const qs = `session=${session}&scenario=${scenario}&n=${n}&size=${size}&interval_ms=${interval}` +
             `&arrivals=${arrivals}&seed=${seed}` + (room ? `&room=${room}&members=${members}` : "");

  function finish() {
    if (!(downDone && upDone) || R.done_ms !== null) return;
    R.done_ms = now();
    for (const c of closers) { try { c(); } catch (e) { R.errors.push(String(e)); } }
    window.__satbench_result = R;
    window.__satbench_hold = false;
    document.getElementById("state").textContent = "done";
  }
  function fail(what) { R.errors.push(what); downDone = upDone = true; finish(); }

  function onDown(m, t) {
    const d = {seq: m.seq, t_ms: m.t_ms, recv_ms: t};
    if (m.from !== undefined) d.from = m.from;
    R.down.push(d);
    seen.add((m.from || "") + "/" + m.seq);  // a copy counts once (and makes the trial invalid)
    if (seen.size >= expectDown) { downDone = true; finish(); }
  }
  function onDownText(text, started) {
    const t = now();
    const m = JSON.parse(text);
    if (m.open) { R.server_open_ms = m.t_ms; started(); return; }
    if (m.failed) { fail("the server: " + m.failed); return; }
    if (m.done) { downDone = true; finish(); return; }
    onDown(m, t);
  }

  // The client's messages: a constant interval, or a Poisson process of the
  // same mean, from the opening (in a room, from the room's start, when the
  // server says so), at the offsets drawn before the start (upOffsets).
  function upMessage(seq) {
    const t = now();
    const head = `{"seq":${seq},"dir":"up","from":"${session}","t_ms":${t},"pad":"`;
    const s = head + ".".repeat(Math.max(0, size - head.length - 2)) + '"}';
    R.up.push({seq, t_ms: t});
    return s;
  }
  function runUp(send, allSent) {
    if (!wantUp || R.sched_ms !== undefined) return;
    R.sched_ms = now();
    const pending = [];
    for (let k = 0; k < n; k++) {
      const at = R.sched_ms + upOffsets[k];
      pending.push(new Promise((resolve) => setTimeout(() => resolve(send(upMessage(k))), Math.max(0, at - now()))));
    }
    Promise.all(pending).then(() => allSent()).catch((e) => fail("upstream: " + e));
  }
  function post(body) {
    return fetch(`/rt/send?${qs}&mech=${mech}`, {method: "POST", body, cache: "no-store"})
      .then((r) => { if (!r.ok) throw new Error("send answered " + r.status); });
  }

  function sse() {
    const es = new EventSource("/rt/sse?" + qs);
    closers.push(() => es.close());
    const start = () => runUp(post, () => { upDone = true; finish(); });
    es.onopen = () => { if (R.open_ms === null) { R.open_ms = now(); if (!room) start(); } };
    // The stream's start (the room's, in a room) comes as "hello": "open" is EventSource's own event.
    es.addEventListener("hello", (e) => { R.server_open_ms = JSON.parse(e.data).t_ms; start(); });
    es.addEventListener("failed", (e) => { fail("the server: " + e.data); es.close(); });
    es.onmessage = (e) => onDown(JSON.parse(e.data), now());
    es.addEventListener("done", () => { downDone = true; es.close(); finish(); });
    es.onerror = () => { if (!downDone) fail("EventSource error (readyState " + es.readyState + ")"); };
  }

  async function poll() {
    const base = "/rt/poll?" + qs;
    const opened = await (await fetch(base + "&open=1", {cache: "no-store"})).json();
    R.open_ms = now();
    R.server_open_ms = opened.t_ms;
    runUp(post, () => { upDone = true; finish(); });
    // The last message had: the server's by its number; in a room, by its place among the relays.
    let after = -1;
    while (!downDone) {
      const r = await fetch(base + "&after=" + after, {cache: "no-store"});
      const t = now();
      if (!r.ok) { fail("poll answered " + r.status); return; }
      const body = await r.json();
      if (Array.isArray(body)) {
        for (const m of body) { onDown(m, t); after = room ? after + 1 : Math.max(after, m.seq); }
      } else if (body.done) {
        downDone = true; finish();
      }
    }
  }

  // A channel of messages both ways, in order (a WebSocket, a WebTransport
  // stream): once it has had every message coming down and sent all of its
  // own, the client says {"done":true}; the server's {"bye":true} answers it
  // after logging everything the client sent. `opened` when the channel is
  // open; `text` for each message, true once the run is through.
  function channel(send) {
    let upSent = !wantUp, doneSent = false;
    upDone = false;
    const maybeDone = () => {
      if (downDone && upSent && !doneSent) { doneSent = true; send('{"done":true}'); }
    };
    const start = () => runUp(send, () => { upSent = true; maybeDone(); });
    return {
      opened() { if (!room) start(); maybeDone(); },
      text(t) {
        if (JSON.parse(t).bye) { upDone = true; finish(); return true; }
        onDownText(t, room ? start : () => {});
        maybeDone();
        return false;
      },
    };
  }

  function ws() {
    const sock = new WebSocket(`wss://${location.host}/rt/ws?${qs}`);
    const ch = channel((s) => sock.send(s));
    closers.push(() => sock.close(1000));
    sock.onopen = () => { R.open_ms = now(); ch.opened(); };
    sock.onmessage = (e) => { ch.text(e.data); };
    sock.onerror = () => fail("WebSocket error");
    sock.onclose = (e) => { if (R.done_ms === null) fail("WebSocket closed early (" + e.code + ")"); };
  }

  async function wt() {
    // WebTransport over HTTP/3: a session (extended CONNECT), then one
    // bidirectional stream carrying the messages both ways as lines of
    // JSON, a channel as a WebSocket is. The client writes a first line at
    // once: a QUIC stream reaches the server only with its first bytes.
    const t = new WebTransport(`https://${location.host}/rt/wt?${qs}`);
    closers.push(() => t.close());
    await t.ready;
    R.open_ms = now();
    const stream = await t.createBidirectionalStream();
    const writer = stream.writable.getWriter();
    const enc = new TextEncoder();
    let chain = writer.write(enc.encode('{"hello":true}\n'));
    const send = (m) => { chain = chain.then(() => writer.write(enc.encode(m + "\n"))); return chain; };
    const ch = channel(send);
    ch.opened();
    const reader = stream.readable.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    while (R.done_ms === null) {
      const {value, done} = await reader.read();
      if (done) { if (R.done_ms === null) fail("the WebTransport stream ended early"); return; }
      buf += value;
      let nl;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line && ch.text(line)) return;
      }
    }
  }

  try {
    if (mech === "sse") sse();
    else if (mech === "poll") poll().catch((e) => fail("poll: " + e));
    else if (mech === "ws") ws();
    else if (mech === "wt") wt().catch((e) => fail("WebTransport: " + e));
    else fail("unknown mechanism " + mech);
  } catch (e) {
    fail(String(e));
  }
})();
