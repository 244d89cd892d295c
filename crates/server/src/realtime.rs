//! The real-time web endpoints' sans-IO core: what a scenario's query asks
//! for (checked), the schedule of the messages the server sends (a count, a
//! constant interval or Poisson arrivals, seeded), and a message's wire
//! form (one JSON object, padded to an exact size). The I/O is in
//! `rt_serve.rs`; time is passed in as offsets from the stream's start.
//!
//! Endpoints (all under `/rt/`):
//!
//! - `GET /rt/sse?...`: Server-Sent Events, one event per message;
//! - `GET /rt/poll?session=S&open=1&...` opens a long-polling session
//!   (answered at once: its start); then `GET /rt/poll?session=S&after=K`
//!   is answered with the messages due after `K` (-1: from the first),
//!   held until the next one is due;
//! - `POST /rt/send?session=S&mech=M`: a message from the client (SSE and
//!   long polling send upstream this way);
//! - `/rt/ws?...`: WebSocket, by HTTP/1.1 Upgrade or HTTP/2 extended
//!   CONNECT (RFC 8441), messages both ways as text frames.
//!
//! The `room` scenario (`scenario=room&room=R&members=M`) is a chat room
//! shared by `M` clients: the room starts when the last member has joined
//! (every member's stream opens then), each member sends `n` messages, and
//! the server relays each one, as it came, to every other member over that
//! member's mechanism; a member is done once it has had `(M - 1) * n`.
//! [`Room`] is the room's state, time passed in.

/// Most messages one stream may schedule.
pub const MAX_MESSAGES: u32 = 100_000;
/// The largest message, in bytes.
pub const MAX_SIZE: usize = 1 << 20;
/// The smallest message size asked for: every message the server sends is then exactly the size
/// asked for (the longest unpadded one, `message(MAX_MESSAGES, a 13-digit unix ms stamp, 0)`, is
/// 64 bytes). The orchestrator's `message_bytes` factor starts here (a test holds it so).
pub const MIN_SIZE: usize = 64;
/// The longest mean interval between messages (idle connections close at the server's idle timeout).
pub const MAX_INTERVAL_MS: f64 = 20_000.0;
/// The most members a chat room may have.
pub const MAX_MEMBERS: u32 = 1000;

/// Which directions carry messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Updates from the server only.
    Server,
    /// Updates from the client only.
    Client,
    /// Both ways.
    Chat,
    /// A chat room: every member's messages relayed to every other member.
    Room,
}

impl Scenario {
    /// Whether the server sends messages of its own (on its schedule).
    pub fn down(self) -> bool {
        matches!(self, Scenario::Server | Scenario::Chat)
    }
}

/// How messages are spaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrivals {
    /// Exactly `interval_ms` apart (0: back to back).
    Constant,
    /// Exponential gaps of mean `interval_ms` (a Poisson process), seeded.
    Poisson,
}

/// A stream's parameters, from its query string.
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    pub session: String,
    pub scenario: Scenario,
    pub n: u32,
    pub size: usize,
    pub interval_ms: f64,
    pub arrivals: Arrivals,
    pub seed: u64,
    /// Long polling: the last message the client has (-1: none).
    pub after: i64,
    /// Long polling: this request opens the session (`open=1`).
    pub open: bool,
    /// The chat room (scenario `room`; empty otherwise).
    pub room: String,
    /// The chat room's members, all of whom must join before it starts.
    pub members: u32,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            session: String::new(),
            scenario: Scenario::Server,
            n: 100,
            size: 100,
            interval_ms: 1000.0,
            arrivals: Arrivals::Constant,
            seed: 1,
            after: -1,
            open: false,
            room: String::new(),
            members: 2,
        }
    }
}

/// Why a query was refused (answered 400 with this text).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {why}")]
pub struct QueryError {
    pub key: String,
    pub why: String,
}

fn bad(key: &str, why: impl Into<String>) -> QueryError {
    QueryError {
        key: key.into(),
        why: why.into(),
    }
}

/// A number in `range` (NaN is in none), or why not, naming the key.
fn within<T>(
    key: &str,
    v: &str,
    range: std::ops::RangeInclusive<T>,
    unit: &str,
) -> Result<T, QueryError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display,
{
    v.parse()
        .ok()
        .filter(|x| range.contains(x))
        .ok_or_else(|| bad(key, format!("{} to {}{unit}", range.start(), range.end())))
}

/// A session or room name: 1 to 64 letters, digits or '-'.
fn name(key: &str, v: &str) -> Result<String, QueryError> {
    if v.is_empty() || v.len() > 64 || !v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(bad(key, "1 to 64 letters, digits or '-'"));
    }
    Ok(v.into())
}

impl Params {
    /// Parse `a=1&b=2` (no percent-decoding: every value is a number or a
    /// plain token). Unknown keys are ignored (a browser may add its own).
    pub fn parse(query: &str) -> Result<Params, QueryError> {
        let mut p = Params::default();
        for pair in query.split('&').filter(|s| !s.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "session" => p.session = name(k, v)?,
                "room" => p.room = name(k, v)?,
                "members" => p.members = within(k, v, 2..=MAX_MEMBERS, "")?,
                "scenario" => {
                    p.scenario = match v {
                        "server" => Scenario::Server,
                        "client" => Scenario::Client,
                        "chat" => Scenario::Chat,
                        "room" => Scenario::Room,
                        _ => return Err(bad(k, "server, client, chat or room")),
                    }
                }
                "n" => p.n = within(k, v, 1..=MAX_MESSAGES, "")?,
                "size" => p.size = within(k, v, MIN_SIZE..=MAX_SIZE, " bytes")?,
                "interval_ms" => p.interval_ms = within(k, v, 0.0..=MAX_INTERVAL_MS, " ms")?,
                "arrivals" => {
                    p.arrivals = match v {
                        "constant" => Arrivals::Constant,
                        "poisson" => Arrivals::Poisson,
                        _ => return Err(bad(k, "constant or poisson")),
                    }
                }
                "seed" => p.seed = v.parse().map_err(|_| bad(k, "a whole number"))?,
                "open" => p.open = v == "1",
                "after" => {
                    p.after = v
                        .parse()
                        .ok()
                        .filter(|a| *a >= -1)
                        .ok_or_else(|| bad(k, "-1 or a message number"))?
                }
                _ => {}
            }
        }
        if (p.scenario == Scenario::Room) == p.room.is_empty() {
            return Err(bad(
                "room",
                "a room needs scenario=room, and scenario=room a room",
            ));
        }
        Ok(p)
    }

    /// How many messages a member of this room is relayed: every other member's.
    pub fn relays(&self) -> usize {
        (self.members as usize - 1) * self.n as usize
    }
}

/// When each of the server's messages is due, in ns from the stream's start.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    due_ns: Vec<u64>,
}

impl Schedule {
    /// The server's messages: none in the client-update scenario; else `n`,
    /// the first one interval after the start.
    pub fn new(p: &Params) -> Schedule {
        if !p.scenario.down() {
            return Schedule { due_ns: Vec::new() };
        }
        let poisson = p.arrivals == Arrivals::Poisson;
        let due_ns = satbench_common::arrivals_ms(p.seed, p.n, p.interval_ms, poisson)
            .into_iter()
            .map(|t| (t * 1e6) as u64)
            .collect();
        Schedule { due_ns }
    }

    pub fn len(&self) -> usize {
        self.due_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.due_ns.is_empty()
    }

    /// Message `seq`'s due offset (seq from 0).
    pub fn due(&self, seq: usize) -> Option<u64> {
        self.due_ns.get(seq).copied()
    }

    /// The messages after `after` that are due at `now_ns`, and when the
    /// next one is due if none is (None: the schedule is done).
    pub fn ready(&self, after: i64, now_ns: u64) -> (std::ops::Range<usize>, Option<u64>) {
        let from = (after + 1).max(0) as usize;
        let from = from.min(self.due_ns.len());
        let to = from
            + self.due_ns[from..]
                .iter()
                .take_while(|d| **d <= now_ns)
                .count();
        (from..to, self.due_ns.get(to).copied())
    }
}

/// A message as it goes on the wire: `{"seq":K,"dir":"down","t_ms":T,"pad":"..."}`,
/// padded with `.` to exactly `size` bytes when it is larger than the
/// object without padding (else that object, unpadded). `t_ms` is when the
/// message was due (unix ms, to the microsecond): its one-way latency is
/// measured from there.
pub fn message(seq: u64, t_unix_ns: u64, size: usize) -> String {
    let head = format!(
        "{{\"seq\":{seq},\"dir\":\"down\",\"t_ms\":{}.{:06},\"pad\":\"",
        t_unix_ns / 1_000_000,
        t_unix_ns % 1_000_000
    );
    let pad = size.saturating_sub(head.len() + 2);
    let mut s = String::with_capacity(head.len() + pad + 2);
    s.push_str(&head);
    s.extend(std::iter::repeat_n('.', pad));
    s.push_str("\"}");
    s
}

/// A client's message as the server logs it: its number and send stamp
/// (unix ms). Anything else in it is ignored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Upstream {
    pub seq: u64,
    pub t_ms: f64,
    /// The client's last message (`"done": true`): it has sent and received everything.
    pub done: bool,
}

impl Upstream {
    pub fn parse(body: &[u8]) -> Option<Upstream> {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        let done = v.get("done").and_then(|d| d.as_bool()).unwrap_or(false);
        if done {
            return Some(Upstream {
                seq: 0,
                t_ms: 0.0,
                done,
            });
        }
        Some(Upstream {
            seq: v.get("seq")?.as_u64()?,
            t_ms: v.get("t_ms")?.as_f64()?,
            done,
        })
    }
}

/// A member's message as the room relays it: who sent it, its number, and
/// the message as it came (the receiver reads the sender's stamp in it).
#[derive(Debug, Clone, PartialEq)]
pub struct Relay {
    pub from: String,
    pub seq: u64,
    pub body: bytes::Bytes,
}

/// Why a room refused a member's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RoomError {
    /// Every place is taken (by other sessions).
    #[error("the room is full")]
    Full,
    /// The request's `members` or `n` differ from the room's.
    #[error("the room has other members or messages")]
    Mismatch,
    /// The session never joined.
    #[error("not a member of the room")]
    NotMember,
    /// A message before every member had joined.
    #[error("the room has not started")]
    NotStarted,
}

/// A chat room: who has joined, when it started (the last member's join),
/// and what has been relayed to each member, in the order relayed.
#[derive(Debug, Clone)]
pub struct Room {
    members: usize,
    n: u32,
    joined: Vec<String>,
    start_ns: Option<u64>,
    inbox: Vec<Vec<Relay>>,
}

impl Room {
    /// An empty room for the request's `members` and `n`.
    pub fn new(p: &Params) -> Room {
        Room {
            members: p.members as usize,
            n: p.n,
            joined: Vec::new(),
            start_ns: None,
            inbox: Vec::new(),
        }
    }

    fn member(&self, session: &str) -> Option<usize> {
        self.joined.iter().position(|s| s == session)
    }

    /// `session` joins at `now_ns` (again: no change). The room's start once
    /// every member is in, None before.
    pub fn join(&mut self, p: &Params, now_ns: u64) -> Result<Option<u64>, RoomError> {
        if p.members as usize != self.members || p.n != self.n {
            return Err(RoomError::Mismatch);
        }
        if self.member(&p.session).is_none() {
            if self.joined.len() == self.members {
                return Err(RoomError::Full);
            }
            self.joined.push(p.session.clone());
            self.inbox.push(Vec::new());
            if self.joined.len() == self.members {
                self.start_ns = Some(now_ns);
            }
        }
        Ok(self.start_ns)
    }

    /// Relay `from`'s message to every other member; how many it went to.
    pub fn post(&mut self, from: &str, seq: u64, body: bytes::Bytes) -> Result<usize, RoomError> {
        let k = self.member(from).ok_or(RoomError::NotMember)?;
        if self.start_ns.is_none() {
            return Err(RoomError::NotStarted);
        }
        let relay = Relay {
            from: from.into(),
            seq,
            body,
        };
        for (j, inbox) in self.inbox.iter_mut().enumerate() {
            if j != k {
                inbox.push(relay.clone());
            }
        }
        Ok(self.members - 1)
    }

    /// What has been relayed to `session` from position `from` on.
    pub fn pending(&self, session: &str, from: usize) -> Result<&[Relay], RoomError> {
        let inbox = &self.inbox[self.member(session).ok_or(RoomError::NotMember)?];
        Ok(&inbox[from.min(inbox.len())..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_checked_and_unknown_keys_ignored() {
        let p = Params::parse(
            "session=ab-1&scenario=chat&n=20&size=300&interval_ms=250&arrivals=poisson&seed=7&x=y",
        )
        .unwrap();
        assert_eq!(
            (p.scenario, p.n, p.size, p.interval_ms, p.arrivals, p.seed),
            (Scenario::Chat, 20, 300, 250.0, Arrivals::Poisson, 7)
        );
        assert_eq!(p.session, "ab-1");
        for (q, key) in [
            ("n=0", "n"),
            ("size=99999999", "size"),
            ("interval_ms=nan", "interval_ms"),
            ("interval_ms=-1", "interval_ms"),
            ("scenario=both", "scenario"),
            ("session=a%20b", "session"),
            ("after=-2", "after"),
        ] {
            assert_eq!(Params::parse(q).unwrap_err().key, key, "{q}");
        }
    }

    #[test]
    fn a_room_needs_its_scenario_and_a_name() {
        let p = Params::parse("session=a&scenario=room&room=r-1&members=5&n=3").unwrap();
        assert_eq!(
            (p.scenario, p.room.as_str(), p.members),
            (Scenario::Room, "r-1", 5)
        );
        assert_eq!(p.relays(), 12);
        assert!(Schedule::new(&p).is_empty()); // the server sends nothing of its own
        for q in ["scenario=room", "room=r", "scenario=chat&room=r"] {
            assert_eq!(Params::parse(q).unwrap_err().key, "room", "{q}");
        }
        for q in ["members=1", "members=1001", "members=x"] {
            assert_eq!(Params::parse(q).unwrap_err().key, "members", "{q}");
        }
    }

    #[test]
    fn a_room_starts_with_its_last_member_and_relays_to_every_other() {
        let q = |s: &str| {
            Params::parse(&format!("session={s}&scenario=room&room=r&members=3&n=2")).unwrap()
        };
        let mut room = Room::new(&q("a"));
        assert_eq!(room.join(&q("a"), 10), Ok(None));
        assert_eq!(room.post("a", 0, "x".into()), Err(RoomError::NotStarted));
        assert_eq!(room.join(&q("b"), 20), Ok(None));
        assert_eq!(room.join(&q("a"), 25), Ok(None)); // again: nothing changes
        assert_eq!(room.join(&q("c"), 30), Ok(Some(30)));
        assert_eq!(room.join(&q("d"), 40), Err(RoomError::Full));
        assert_eq!(room.join(&q("b"), 50), Ok(Some(30)));
        let other = Params::parse("session=e&scenario=room&room=r&members=4&n=2").unwrap();
        assert_eq!(room.join(&other, 60), Err(RoomError::Mismatch));
        assert_eq!(room.post("a", 0, "a0".into()), Ok(2));
        assert_eq!(room.post("c", 0, "c0".into()), Ok(2));
        assert_eq!(room.post("a", 1, "a1".into()), Ok(2));
        assert_eq!(room.post("z", 0, "z0".into()), Err(RoomError::NotMember));
        let seen = |s: &str, from: usize| -> Vec<(String, u64)> {
            room.pending(s, from)
                .unwrap()
                .iter()
                .map(|r| (r.from.clone(), r.seq))
                .collect()
        };
        // Each member has the others' messages, in the order relayed, never its own.
        assert_eq!(seen("a", 0), vec![("c".into(), 0)]);
        assert_eq!(
            seen("b", 0),
            vec![("a".into(), 0), ("c".into(), 0), ("a".into(), 1)]
        );
        assert_eq!(seen("b", 2), vec![("a".into(), 1)]);
        assert_eq!(seen("b", 9), vec![]);
        assert_eq!(
            room.pending("b", 0).unwrap()[1].body,
            bytes::Bytes::from("c0")
        );
        assert_eq!(room.pending("z", 0), Err(RoomError::NotMember));
    }

    #[test]
    fn constant_schedules_are_exact_and_ready_answers_polls() {
        let p = Params {
            n: 3,
            interval_ms: 500.0,
            ..Params::default()
        };
        let s = Schedule::new(&p);
        assert_eq!(s.due_ns, vec![500_000_000, 1_000_000_000, 1_500_000_000]);
        // The opening poll (after=-1) at 0: nothing due, the first at 500 ms.
        assert_eq!(s.ready(-1, 0), (0..0, Some(500_000_000)));
        // A poll at 1.2 s having nothing: two messages at once, the next at 1.5 s.
        assert_eq!(s.ready(-1, 1_200_000_000), (0..2, Some(1_500_000_000)));
        assert_eq!(s.ready(1, 1_600_000_000), (2..3, None));
        assert_eq!(s.ready(2, 9_000_000_000), (3..3, None));
        // Back to back: everything is due at once.
        let b2b = Schedule::new(&Params {
            n: 4,
            interval_ms: 0.0,
            ..Params::default()
        });
        assert_eq!(b2b.ready(-1, 0), (0..4, None));
        // The client-update scenario: the server sends nothing.
        assert!(Schedule::new(&Params {
            scenario: Scenario::Client,
            ..Params::default()
        })
        .is_empty());
    }

    #[test]
    fn poisson_arrivals_are_seeded_with_the_mean_asked() {
        let p = Params {
            n: 20_000,
            interval_ms: 100.0,
            arrivals: Arrivals::Poisson,
            seed: 3,
            ..Params::default()
        };
        let (a, b) = (Schedule::new(&p), Schedule::new(&p));
        assert_eq!(a, b);
        let c = Schedule::new(&Params {
            seed: 4,
            ..p.clone()
        });
        assert_ne!(a, c);
        let mean_ms = a.due(19_999).unwrap() as f64 / 1e6 / 20_000.0;
        assert!((mean_ms - 100.0).abs() < 3.0, "{mean_ms}");
        assert!(a.due_ns.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn messages_have_the_exact_size_and_round_trip_their_stamp() {
        for size in [1, 40, 41, 100, 1000, 65_536] {
            let m = message(17, 1_795_578_470_912_111_385, size);
            let v: serde_json::Value = serde_json::from_str(&m).unwrap();
            assert_eq!(v["seq"], 17);
            // To the microsecond at least (a double holds about 0.2 us here).
            let t = v["t_ms"].as_f64().unwrap();
            assert!((t - 1_795_578_470_912.111).abs() < 0.001, "{t}");
            assert!(m.contains("\"t_ms\":1795578470912.111385,"));
            let unpadded = message(17, 1_795_578_470_912_111_385, 0).len();
            assert_eq!(m.len(), size.max(unpadded), "{size}");
        }
        // From MIN_SIZE on, every message is exactly its size, the longest one included.
        let longest = message(u64::from(MAX_MESSAGES), 9_999_999_999_999_999_999, 0).len();
        assert_eq!(longest, MIN_SIZE);
        assert_eq!(
            message(u64::from(MAX_MESSAGES), 9_999_999_999_999_999_999, MIN_SIZE).len(),
            MIN_SIZE
        );
        let up = Upstream::parse(br#"{"seq":3,"t_ms":1795578470912.5,"pad":"..."}"#).unwrap();
        assert_eq!((up.seq, up.t_ms, up.done), (3, 1_795_578_470_912.5, false));
        assert!(Upstream::parse(br#"{"done":true}"#).unwrap().done);
        assert!(Upstream::parse(b"{}").is_none() && Upstream::parse(b"\xff").is_none());
    }
}
