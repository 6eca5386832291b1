//! How repair messages travel: a [`Transport`] moves encoded frames between replicas.
//!
//! An embedding database implements [`Transport`] over its own network (one connection
//! or stream per peer; frames are self-delimiting by their length field and carry their
//! own checksum, so a byte-stream transport only has to write them back to back).
//! [`LocalTransport`] delivers frames inside one process through `std::sync::mpsc`
//! mailboxes, for tests and examples; it can corrupt a chosen frame to prove that bad
//! bytes are refused (invariant R2).
//!
//! Contract: frames from one sender to one receiver arrive in the order sent; `send`
//! may block for back-pressure but a transport that blocks must let receivers run
//! concurrently (`LocalTransport` never blocks: its mailboxes are unbounded).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::{Error, Result};

use super::message::Message;
use super::ReplicaId;

/// One frame as received, with its sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    /// Who sent it.
    pub from: ReplicaId,
    /// The encoded message.
    pub frame: Vec<u8>,
}

/// Moves encoded frames between replicas. See the module docs for the contract.
pub trait Transport: Send + Sync {
    /// Deliver `frame` from `from` to `to`.
    fn send(&self, from: ReplicaId, to: ReplicaId, frame: Vec<u8>) -> Result<()>;

    /// The next frame addressed to `to`, waiting at most `timeout`; `Ok(None)` when
    /// none arrived in time.
    fn recv(&self, to: ReplicaId, timeout: Duration) -> Result<Option<Envelope>>;
}

/// Encode `msg` and send it; returns the frame's length in bytes.
pub fn send_message(
    t: &dyn Transport,
    from: ReplicaId,
    to: ReplicaId,
    msg: &Message,
) -> Result<usize> {
    let frame = msg.encode();
    let n = frame.len();
    t.send(from, to, frame)?;
    Ok(n)
}

/// Receive and decode the next message for `to` that belongs to `session` (frames of
/// other sessions, e.g. left over from an aborted one, are dropped with a warning).
/// Returns (sender, message, frame length). A timeout is [`Error::Transport`]; bad bytes
/// are [`Error::BadMessage`].
pub fn recv_message(
    t: &dyn Transport,
    to: ReplicaId,
    session: u64,
    timeout: Duration,
) -> Result<(ReplicaId, Message, usize)> {
    try_recv_message(t, to, session, timeout)?
        .ok_or_else(|| Error::Transport(format!("{to}: no repair message within {timeout:?}")))
}

/// [`recv_message`], with `Ok(None)` when nothing of `session` arrived within `timeout`.
pub fn try_recv_message(
    t: &dyn Transport,
    to: ReplicaId,
    session: u64,
    timeout: Duration,
) -> Result<Option<(ReplicaId, Message, usize)>> {
    let deadline = Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(env) = t.recv(to, left)? else {
            return Ok(None);
        };
        let msg = Message::decode(&env.frame)?;
        if msg.session() != session {
            tracing::warn!(%to, from = %env.from, session = msg.session(), expected = session, "dropping a repair message of another session");
            continue;
        }
        return Ok(Some((env.from, msg, env.frame.len())));
    }
}

#[derive(Debug)]
struct Mailbox {
    tx: Sender<Envelope>,
    rx: Mutex<Receiver<Envelope>>,
}

/// In-process transport: one unbounded mailbox per replica, created on first use.
#[derive(Debug, Default)]
pub struct LocalTransport {
    boxes: Mutex<HashMap<ReplicaId, Arc<Mailbox>>>,
    frames: AtomicU64,
    bytes: AtomicU64,
    /// Flip a byte of the frame with this sequence number (1-based; 0: never).
    corrupt_nth: AtomicU64,
}

impl LocalTransport {
    /// A transport with no mailboxes yet.
    pub fn new() -> LocalTransport {
        LocalTransport::default()
    }

    /// A transport that flips one byte in the middle of the `n`-th frame sent (1-based),
    /// to test that receivers refuse bad bytes.
    pub fn corrupting_frame(n: u64) -> LocalTransport {
        let t = LocalTransport::default();
        t.corrupt_nth.store(n, Ordering::Relaxed);
        t
    }

    fn mailbox(&self, id: ReplicaId) -> Arc<Mailbox> {
        self.boxes
            .lock()
            .entry(id)
            .or_insert_with(|| {
                let (tx, rx) = channel();
                Arc::new(Mailbox {
                    tx,
                    rx: Mutex::new(rx),
                })
            })
            .clone()
    }

    /// Frames sent so far.
    pub fn frames_sent(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }

    /// Bytes sent so far.
    pub fn bytes_sent(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Frames waiting in `id`'s mailbox are dropped; returns how many.
    pub fn drain(&self, id: ReplicaId) -> usize {
        let mb = self.mailbox(id);
        let rx = mb.rx.lock();
        rx.try_iter().count()
    }
}

impl Transport for LocalTransport {
    fn send(&self, from: ReplicaId, to: ReplicaId, mut frame: Vec<u8>) -> Result<()> {
        let seq = self.frames.fetch_add(1, Ordering::Relaxed) + 1;
        self.bytes.fetch_add(frame.len() as u64, Ordering::Relaxed);
        if seq == self.corrupt_nth.load(Ordering::Relaxed) && !frame.is_empty() {
            let mid = frame.len() / 2;
            frame[mid] ^= 0x5a;
        }
        self.mailbox(to)
            .tx
            .send(Envelope { from, frame })
            .map_err(|_| Error::Transport(format!("{to}: mailbox closed")))
    }

    fn recv(&self, to: ReplicaId, timeout: Duration) -> Result<Option<Envelope>> {
        let mb = self.mailbox(to);
        let rx = mb.rx.lock();
        match rx.recv_timeout(timeout) {
            Ok(e) => Ok(Some(e)),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => {
                Err(Error::Transport(format!("{to}: mailbox closed")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::repair::message::StreamPlan;

    #[test]
    fn frames_arrive_in_order_and_bad_bytes_are_refused() {
        let t = LocalTransport::corrupting_frame(3);
        let (a, b) = (ReplicaId(1), ReplicaId(2));
        for s in 1..=3 {
            let m = Message::Plan(StreamPlan {
                session: s,
                ..StreamPlan::default()
            });
            send_message(&t, a, b, &m).unwrap();
        }
        let short = Duration::from_millis(10);
        // Session 2's frame is skipped while waiting for session 1... and vice versa.
        let (from, m, _) = recv_message(&t, b, 1, short).unwrap();
        assert_eq!((from, m.session()), (a, 1));
        let (_, m, _) = recv_message(&t, b, 2, short).unwrap();
        assert_eq!(m.session(), 2);
        assert!(matches!(
            recv_message(&t, b, 3, short),
            Err(Error::BadMessage(_))
        ));
        assert!(matches!(
            recv_message(&t, b, 3, short),
            Err(Error::Transport(_))
        ));
        assert_eq!(t.frames_sent(), 3);
        assert_eq!(t.drain(b), 0);
    }
}
