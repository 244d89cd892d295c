//! The real-time endpoints' state, shared by the TCP server's endpoints
//! ([`crate::rt_serve`]) and WebTransport over HTTP/3 ([`crate::rt_wt`]):
//! long-polling sessions and chat rooms (the rooms' rules are
//! [`crate::realtime`]'s, without I/O; this holds them and wakes waiters).

use crate::log::unix_ns;
use crate::realtime::{Params, Relay, Room, RoomError, Upstream};
use bytes::Bytes;
use std::time::Duration;

/// The real-time endpoints' state: long-polling sessions (when each
/// opened) and chat rooms, by name; `changed` wakes every member waiting
/// on a room whenever one changes.
#[derive(Default)]
pub struct RtState {
    pub(crate) sessions: std::sync::Mutex<std::collections::HashMap<String, u64>>,
    rooms: std::sync::Mutex<std::collections::HashMap<String, Room>>,
    changed: tokio::sync::Notify,
}

impl RtState {
    /// Join `p`'s room and wait until it starts (every member in), at
    /// most until `deadline` (unix ns). The room's start.
    pub(crate) async fn join(&self, p: &Params, deadline: u64) -> Result<u64, String> {
        loop {
            let changed = self.changed.notified();
            {
                let mut rooms = self.rooms.lock().expect("rooms");
                let room = rooms.entry(p.room.clone()).or_insert_with(|| Room::new(p));
                let started = room.join(p, unix_ns()).map_err(|e| e.to_string())?;
                if let Some(t0) = started {
                    drop(rooms);
                    self.changed.notify_waiters();
                    return Ok(t0);
                }
            }
            if unix_ns() >= deadline {
                return Err("the room never filled".into());
            }
            tokio::select! {
                _ = changed => {}
                _ = until(deadline) => {}
            }
        }
    }

    /// Relay a member's message to the rest of its room.
    pub(crate) fn post(&self, p: &Params, up: &Upstream, body: Bytes) -> Result<(), RoomError> {
        let mut rooms = self.rooms.lock().expect("rooms");
        let room = rooms.get_mut(&p.room).ok_or(RoomError::NotMember)?;
        room.post(&p.session, up.seq, body)?;
        drop(rooms);
        self.changed.notify_waiters();
        Ok(())
    }

    /// The next relays for a member from position `from`, waiting for one
    /// until `deadline`: empty once it has had all (or at the deadline).
    pub(crate) async fn relays(
        &self,
        p: &Params,
        from: usize,
        deadline: u64,
    ) -> Result<Vec<Relay>, RoomError> {
        loop {
            let changed = self.changed.notified();
            {
                let rooms = self.rooms.lock().expect("rooms");
                let room = rooms.get(&p.room).ok_or(RoomError::NotMember)?;
                let got = room.pending(&p.session, from)?;
                if !got.is_empty() || from >= p.relays() || unix_ns() >= deadline {
                    return Ok(got.to_vec());
                }
            }
            tokio::select! {
                _ = changed => {}
                _ = until(deadline) => {}
            }
        }
    }
}

/// Sleep until `t_unix_ns` (no-op if past).
pub(crate) async fn until(t_unix_ns: u64) {
    let now = unix_ns();
    if t_unix_ns > now {
        tokio::time::sleep(Duration::from_nanos(t_unix_ns - now)).await;
    }
}
