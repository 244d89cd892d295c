//! The loader's real-time client, sans-IO: what a scenario asks for (from
//! the query the harness gives), the client's own message schedule, its
//! messages' wire form, what the server's messages mean, and the record of
//! one client's run, as the browsers' client (`rt.js`) keeps it. The I/O is
//! in `rt_client.rs`.
//!
//! The query is satbench-server's (`scenario`, `n`, `size`, `interval_ms`,
//! `arrivals`, `seed`, `session`, and for a chat room `room` and
//! `members`); client `k` of the loader is session `SESSION-k`. Times are
//! unix ms from the wall clock, which every namespace of a testbed shares.

use std::collections::HashSet;

/// A real-time mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mech {
    Poll,
    Sse,
    Ws,
}

impl Mech {
    pub fn parse(s: &str) -> Option<Mech> {
        match s {
            "poll" => Some(Mech::Poll),
            "sse" => Some(Mech::Sse),
            "ws" => Some(Mech::Ws),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mech::Poll => "poll",
            Mech::Sse => "sse",
            Mech::Ws => "ws",
        }
    }
}

/// Which directions carry messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Server,
    Client,
    Chat,
    Room,
}

/// A scenario as the query asks for it.
#[derive(Debug, Clone, PartialEq)]
pub struct RtQuery {
    pub scenario: Scenario,
    pub n: u32,
    pub size: usize,
    pub interval_ms: f64,
    pub poisson: bool,
    pub seed: u64,
    pub session: String,
    pub room: Option<String>,
    pub members: u32,
}

impl RtQuery {
    /// Parse the query (no percent-decoding: every value is a number or a
    /// token). The server checks ranges; this refuses what the client
    /// itself could not run, naming the key.
    pub fn parse(query: &str) -> Result<RtQuery, String> {
        let mut q = RtQuery {
            scenario: Scenario::Server,
            n: 100,
            size: 100,
            interval_ms: 1000.0,
            poisson: false,
            seed: 1,
            session: "rt".into(),
            room: None,
            members: 2,
        };
        for pair in query.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let bad = |why: &str| format!("the URL's query: {k}: {why}, not {v:?}");
            match k {
                "scenario" => {
                    q.scenario = match v {
                        "server" => Scenario::Server,
                        "client" => Scenario::Client,
                        "chat" => Scenario::Chat,
                        "room" => Scenario::Room,
                        _ => return Err(bad("server, client, chat or room")),
                    }
                }
                "n" => {
                    q.n = v
                        .parse()
                        .ok()
                        .filter(|n| *n >= 1)
                        .ok_or_else(|| bad("a count >= 1"))?
                }
                "size" => q.size = v.parse().map_err(|_| bad("bytes"))?,
                "interval_ms" => {
                    q.interval_ms = v
                        .parse()
                        .ok()
                        .filter(|x: &f64| x.is_finite() && *x >= 0.0)
                        .ok_or_else(|| bad("ms >= 0"))?
                }
                "arrivals" => {
                    q.poisson = match v {
                        "constant" => false,
                        "poisson" => true,
                        _ => return Err(bad("constant or poisson")),
                    }
                }
                "seed" => q.seed = v.parse().map_err(|_| bad("a whole number"))?,
                "session" if !v.is_empty() => q.session = v.into(),
                "room" if !v.is_empty() => q.room = Some(v.into()),
                "members" => {
                    q.members = v
                        .parse()
                        .ok()
                        .filter(|n| *n >= 2)
                        .ok_or_else(|| bad("a count >= 2"))?
                }
                _ => {}
            }
        }
        if (q.scenario == Scenario::Room) != q.room.is_some() {
            return Err(
                "the URL's query: room: a room needs scenario=room, and scenario=room a room"
                    .into(),
            );
        }
        Ok(q)
    }

    /// Client `k`'s session.
    pub fn session_of(&self, client: usize) -> String {
        format!("{}-{client}", self.session)
    }

    /// The server's query for one client's session.
    pub fn query_for(&self, session: &str) -> String {
        let scenario = match self.scenario {
            Scenario::Server => "server",
            Scenario::Client => "client",
            Scenario::Chat => "chat",
            Scenario::Room => "room",
        };
        let mut s = format!(
            "session={session}&scenario={scenario}&n={}&size={}&interval_ms={}&arrivals={}&seed={}",
            self.n,
            self.size,
            self.interval_ms,
            if self.poisson { "poisson" } else { "constant" },
            self.seed
        );
        if let Some(r) = &self.room {
            s += &format!("&room={r}&members={}", self.members);
        }
        s
    }

    /// Whether messages come down (the server's, or the room's).
    pub fn wants_down(&self) -> bool {
        self.scenario != Scenario::Client
    }

    /// Whether the client sends messages.
    pub fn wants_up(&self) -> bool {
        self.scenario != Scenario::Server
    }

    /// How many messages come down.
    pub fn expected_down(&self) -> usize {
        match self.scenario {
            Scenario::Client => 0,
            Scenario::Room => (self.members as usize - 1) * self.n as usize,
            _ => self.n as usize,
        }
    }

    /// When client `k` sends its messages, in ms from its schedule's
    /// start: `interval_ms` apart, or Poisson arrivals of that mean seeded
    /// by the seed and the client.
    pub fn up_offsets_ms(&self, client: usize) -> Vec<f64> {
        if !self.wants_up() {
            return Vec::new();
        }
        let seed = satbench_common::up_seed(self.seed, client as u64);
        satbench_common::arrivals_ms(seed, self.n, self.interval_ms, self.poisson)
    }
}

/// The client's message `seq`, stamped `t_ms`, padded with `.` to `size`
/// bytes (or its unpadded size if larger), as `rt.js` writes it.
pub fn up_message(seq: u64, session: &str, t_ms: f64, size: usize) -> String {
    let head = format!(
        "{{\"seq\":{seq},\"dir\":\"up\",\"from\":\"{session}\",\"t_ms\":{t_ms:.3},\"pad\":\""
    );
    let pad = size.saturating_sub(head.len() + 2);
    let mut s = String::with_capacity(head.len() + pad + 2);
    s.push_str(&head);
    s.extend(std::iter::repeat_n('.', pad));
    s.push_str("\"}");
    s
}

/// What a message from the server says.
#[derive(Debug, Clone, PartialEq)]
pub enum Down {
    /// The stream's start (or the room's): `{"open":true,"t_ms":T}` or `{"t_ms":T}`.
    Open { t_ms: f64 },
    /// A message: the server's, or a member's relayed (`from`).
    Message {
        seq: u64,
        t_ms: f64,
        from: Option<String>,
    },
    /// The server has sent everything.
    Done,
    /// The server has logged everything the client sent (WebSocket).
    Bye,
    /// The server gave up (a room that never filled).
    Failed(String),
}

impl Down {
    pub fn parse(text: &str) -> Result<Down, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("a message that is not JSON: {e}"))?;
        Down::from_value(&v)
    }

    /// One message as JSON already parsed (a long poll's array holds several).
    pub fn from_value(v: &serde_json::Value) -> Result<Down, String> {
        let flag = |k: &str| v.get(k).and_then(|x| x.as_bool()).unwrap_or(false);
        if flag("done") {
            return Ok(Down::Done);
        }
        if flag("bye") {
            return Ok(Down::Bye);
        }
        if let Some(f) = v.get("failed") {
            return Ok(Down::Failed(f.as_str().unwrap_or("?").into()));
        }
        let t_ms = v.get("t_ms").and_then(|t| t.as_f64());
        match (v.get("seq").and_then(|s| s.as_u64()), t_ms) {
            (Some(seq), Some(t_ms)) => Ok(Down::Message {
                seq,
                t_ms,
                from: v.get("from").and_then(|f| f.as_str()).map(String::from),
            }),
            (None, Some(t_ms)) => Ok(Down::Open { t_ms }),
            _ => Err(format!(
                "a message without seq and t_ms: {:.80}",
                v.to_string()
            )),
        }
    }
}

/// One message had.
#[derive(Debug, Clone, PartialEq)]
pub struct Got {
    pub seq: u64,
    pub t_ms: f64,
    pub recv_ms: f64,
    pub from: Option<String>,
}

/// One client's run, as `rt.js` records it (`to_json` has its field names).
#[derive(Debug, Clone, Default)]
pub struct Record {
    pub client: usize,
    pub session: String,
    pub mech: &'static str,
    pub scenario: &'static str,
    pub n: u32,
    /// When the client started.
    pub start_ms: f64,
    /// When its stream (or the poll's opening) was open.
    pub open_ms: Option<f64>,
    /// The server's stamp of the stream's (or room's) start.
    pub server_open_ms: Option<f64>,
    /// When its own schedule started.
    pub sched_ms: Option<f64>,
    pub down: Vec<Got>,
    pub up: Vec<(u64, f64)>,
    pub errors: Vec<String>,
    pub done_ms: Option<f64>,
    expected: usize,
    seen: HashSet<(Option<String>, u64)>,
}

impl Record {
    pub fn new(q: &RtQuery, mech: Mech, client: usize, start_ms: f64) -> Record {
        Record {
            client,
            session: q.session_of(client),
            mech: mech.name(),
            scenario: match q.scenario {
                Scenario::Server => "server",
                Scenario::Client => "client",
                Scenario::Chat => "chat",
                Scenario::Room => "room",
            },
            n: q.n,
            start_ms,
            expected: q.expected_down(),
            ..Record::default()
        }
    }

    /// A message had at `recv_ms`; whether every expected message is now
    /// in (a second copy is kept, and counted once).
    pub fn on_down(&mut self, seq: u64, t_ms: f64, from: Option<String>, recv_ms: f64) -> bool {
        self.seen.insert((from.clone(), seq));
        self.down.push(Got {
            seq,
            t_ms,
            recv_ms,
            from,
        });
        self.down_complete()
    }

    /// Whether every expected message has come down.
    pub fn down_complete(&self) -> bool {
        self.seen.len() >= self.expected
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "client": self.client, "session": self.session, "mech": self.mech,
            "scenario": self.scenario, "n": self.n,
            "start_ms": self.start_ms, "open_ms": self.open_ms, "server_open_ms": self.server_open_ms,
            "sched_ms": self.sched_ms,
            "down": self.down.iter().map(|g| {
                let mut d = serde_json::json!({"seq": g.seq, "t_ms": g.t_ms, "recv_ms": g.recv_ms});
                if let Some(f) = &g.from {
                    d["from"] = f.clone().into();
                }
                d
            }).collect::<Vec<_>>(),
            "up": self.up.iter().map(|(seq, t)| serde_json::json!({"seq": seq, "t_ms": t})).collect::<Vec<_>>(),
            "errors": self.errors, "done_ms": self.done_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_harness_query_round_trips_per_client() {
        let q = RtQuery::parse(
            "mech=ws&scenario=room&n=5&size=200&interval_ms=250&arrivals=poisson&seed=7&session=ab12&room=ab12&members=3",
        )
        .unwrap();
        assert_eq!(
            (q.scenario, q.n, q.size, q.poisson, q.members),
            (Scenario::Room, 5, 200, true, 3)
        );
        assert_eq!(q.session_of(2), "ab12-2");
        assert_eq!(q.expected_down(), 10);
        assert_eq!(
            q.query_for("ab12-2"),
            "session=ab12-2&scenario=room&n=5&size=200&interval_ms=250&arrivals=poisson&seed=7&room=ab12&members=3"
        );
        assert_eq!(
            RtQuery::parse(&q.query_for("x")).unwrap().scenario,
            Scenario::Room
        );
        for (query, key) in [
            ("scenario=all", "scenario"),
            ("n=0", "n"),
            ("interval_ms=-1", "interval_ms"),
            ("members=1", "members"),
            ("scenario=room", "room"),
            ("room=r", "room"),
        ] {
            let e = RtQuery::parse(query).unwrap_err();
            assert!(
                e.starts_with(&format!("the URL's query: {key}:")),
                "{query}: {e}"
            );
        }
        let c = RtQuery::parse("scenario=client").unwrap();
        assert!(!c.wants_down() && c.wants_up() && c.expected_down() == 0);
    }

    #[test]
    fn schedules_are_seeded_per_client() {
        let q = RtQuery::parse("scenario=chat&n=4&interval_ms=100").unwrap();
        assert_eq!(q.up_offsets_ms(0), vec![100.0, 200.0, 300.0, 400.0]);
        let p =
            RtQuery::parse("scenario=chat&n=5000&interval_ms=100&arrivals=poisson&seed=3").unwrap();
        let (a, b) = (p.up_offsets_ms(0), p.up_offsets_ms(1));
        assert_eq!(a, p.up_offsets_ms(0));
        assert_ne!(a, b);
        let mean = a[4999] / 5000.0;
        assert!((mean - 100.0).abs() < 5.0, "{mean}");
        assert!(RtQuery::parse("scenario=server")
            .unwrap()
            .up_offsets_ms(0)
            .is_empty());
    }

    #[test]
    fn messages_and_what_the_server_says() {
        let m = up_message(3, "k-1", 1_795_578_470_912.5, 120);
        assert_eq!(m.len(), 120);
        let v: serde_json::Value = serde_json::from_str(&m).unwrap();
        assert_eq!(
            (v["seq"].as_u64(), v["from"].as_str()),
            (Some(3), Some("k-1"))
        );
        assert_eq!(v["t_ms"].as_f64(), Some(1_795_578_470_912.5));
        assert!(up_message(3, "k-1", 1.0, 0).len() < 120);
        assert_eq!(
            Down::parse(r#"{"open":true,"t_ms":5.5}"#),
            Ok(Down::Open { t_ms: 5.5 })
        );
        assert_eq!(Down::parse(r#"{"t_ms":5.5}"#), Ok(Down::Open { t_ms: 5.5 }));
        assert_eq!(
            Down::parse(r#"{"seq":2,"dir":"down","t_ms":9.25,"pad":".."}"#),
            Ok(Down::Message {
                seq: 2,
                t_ms: 9.25,
                from: None
            })
        );
        assert_eq!(
            Down::parse(&m),
            Ok(Down::Message {
                seq: 3,
                t_ms: 1_795_578_470_912.5,
                from: Some("k-1".into())
            })
        );
        assert_eq!(Down::parse(r#"{"done":true}"#), Ok(Down::Done));
        assert_eq!(Down::parse(r#"{"bye":true}"#), Ok(Down::Bye));
        assert_eq!(
            Down::parse(r#"{"failed":"the room never filled"}"#),
            Ok(Down::Failed("the room never filled".into()))
        );
        assert!(Down::parse("{}").is_err() && Down::parse("x").is_err());
    }

    #[test]
    fn a_record_counts_each_message_once() {
        let q = RtQuery::parse("scenario=room&room=r&members=3&n=2&session=s").unwrap();
        let mut r = Record::new(&q, Mech::Sse, 1, 10.0);
        assert_eq!(r.session, "s-1");
        assert!(!r.on_down(0, 1.0, Some("s-0".into()), 2.0));
        assert!(!r.on_down(0, 1.0, Some("s-0".into()), 2.5)); // a copy: kept, counted once
        assert!(!r.on_down(0, 1.0, Some("s-2".into()), 3.0));
        assert!(!r.on_down(1, 1.0, Some("s-0".into()), 3.0));
        assert!(r.on_down(1, 1.0, Some("s-2".into()), 4.0));
        let j = r.to_json();
        assert_eq!(j["down"].as_array().unwrap().len(), 5);
        assert_eq!(j["down"][0]["from"], "s-0");
        assert_eq!(
            (j["mech"].as_str(), j["scenario"].as_str()),
            (Some("sse"), Some("room"))
        );
    }
}
