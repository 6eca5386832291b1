//! The write turn under `loom`: `RUSTFLAGS="--cfg segstore_loom" cargo test --release
//! --lib commitlog::turn::loom_model` (in `.ci/run`). A model log numbers records as
//! the commit log does (under the lock, then [`write`]), its "file" records which
//! numbers reached it, and a flag catches two writes in flight at once. Its `wait`
//! looks at the turn counter with the lock released before it sleeps, as the commit
//! log's spinning wait does (`append.rs`), so the model covers that window too.

use super::*;
use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use loom::sync::{Arc, Condvar, Mutex, MutexGuard};
use loom::thread;

struct Log {
    state: Mutex<St>,
    turn_ended: Condvar,
    /// Turns ended, bumped under the lock (`Shared::turns`).
    turns: AtomicU64,
    /// The numbers in the file, in file order.
    file: Mutex<Vec<u64>>,
    in_write: AtomicBool,
    /// A write that carries this number fails (and writes nothing).
    fail_at: Option<u64>,
}

#[derive(Default)]
struct St {
    queue: Queue,
    next: u64,
    written: u64,
    poisoned: bool,
}

struct Held<'a> {
    log: &'a Log,
    g: Option<MutexGuard<'a, St>>,
}

impl Held<'_> {
    fn st(&self) -> &St {
        self.g.as_ref().expect("the lock is held")
    }
    fn st_mut(&mut self) -> &mut St {
        self.g.as_mut().expect("the lock is held")
    }
}

impl Turn for Held<'_> {
    type Error = u64;
    fn queue(&mut self) -> &mut Queue {
        &mut self.st_mut().queue
    }
    fn written(&self) -> u64 {
        self.st().written
    }
    fn set_written(&mut self, seq: u64) {
        assert!(seq > self.st().written, "written went back");
        self.st_mut().written = seq;
    }
    fn refused(&self) -> bool {
        self.st().poisoned
    }
    fn write_unlocked(&mut self, bytes: &[u8]) -> Result<(), u64> {
        drop(self.g.take());
        assert!(!self.log.in_write.swap(true, SeqCst), "two writes in flight");
        let seqs: Vec<u64> = bytes
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let failed = self.log.fail_at.filter(|f| seqs.contains(f));
        if failed.is_none() {
            self.log.file.lock().unwrap().extend(seqs);
        }
        self.log.in_write.store(false, SeqCst);
        self.g = Some(self.log.state.lock().unwrap());
        failed.map_or(Ok(()), Err)
    }
    fn fail(&mut self, _: &u64) {
        self.st_mut().poisoned = true;
    }
    fn wait(&mut self) {
        let seen = self.log.turns.load(Relaxed);
        // The spin runs here, with the lock released; whatever it saw, the counter is
        // looked at again under the lock.
        drop(self.g.take());
        let g = self.log.state.lock().unwrap();
        self.g = Some(if self.log.turns.load(Relaxed) == seen {
            self.log.turn_ended.wait(g).unwrap()
        } else {
            g
        });
    }
    fn wake_all(&mut self) {
        self.log.turns.fetch_add(1, Relaxed);
        self.log.turn_ended.notify_all();
    }
}

impl Log {
    fn new(fail_at: Option<u64>) -> Arc<Log> {
        Arc::new(Log {
            state: Mutex::new(St::default()),
            turn_ended: Condvar::new(),
            turns: AtomicU64::new(0),
            file: Mutex::new(Vec::new()),
            in_write: AtomicBool::new(false),
            fail_at,
        })
    }

    /// Number one record and write it, as `CommitLog::append_ordered` does; `None` if
    /// the log refused it before numbering.
    fn append(&self) -> Option<(u64, Outcome<u64>)> {
        let mut g = self.state.lock().unwrap();
        if g.poisoned {
            return None;
        }
        g.next += 1;
        let seq = g.next;
        let mut held = Held { log: self, g: Some(g) };
        let out = write(&mut held, seq, &seq.to_le_bytes());
        if let Outcome::Written = out {
            let file = self.file.lock().unwrap();
            let want: Vec<u64> = (1..=seq).collect();
            assert_eq!(
                file.get(..seq as usize),
                Some(&want[..]),
                "acknowledged {seq} ahead of the file"
            );
        }
        Some((seq, out))
    }

    fn drain(&self) {
        let g = self.state.lock().unwrap();
        let mut held = Held { log: self, g: Some(g) };
        drain(&mut held);
        let st = held.st();
        assert!(st.queue.idle(), "a drain left a write behind");
        assert!(st.poisoned || st.written == st.next, "a numbered record unwritten");
    }

    /// At the end: the file holds 1..=k in order, every number is written or refused.
    fn check_end(&self) -> Vec<u64> {
        let st = self.state.lock().unwrap();
        let file = self.file.lock().unwrap().clone();
        let want: Vec<u64> = (1..=file.len() as u64).collect();
        assert_eq!(file, want, "the file is not the numbers in order");
        assert!(st.queue.idle());
        assert_eq!(st.written, file.len() as u64);
        if !st.poisoned {
            assert_eq!(st.written, st.next, "a numbered record was never written");
        }
        file
    }
}

fn spawn_append(log: &Arc<Log>) -> thread::JoinHandle<Option<(u64, Outcome<u64>)>> {
    let log = Arc::clone(log);
    thread::spawn(move || log.append())
}

/// Three writers at once: every one is acknowledged, the file holds 1, 2, 3 in order,
/// no two writes overlap, and no record waits for a turn nobody takes.
#[test]
fn three_writers() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let log = Log::new(None);
        let a = spawn_append(&log);
        let c = spawn_append(&log);
        let own = log.append();
        for r in [a.join().unwrap(), c.join().unwrap(), own] {
            assert!(matches!(r, Some((_, Outcome::Written))));
        }
        assert_eq!(log.check_end().len(), 3);
    });
}

/// The write carrying record 1 fails: it gets the error, a record queued behind it (in
/// the same write or after it) is refused, never written, and nothing follows in the file.
#[test]
fn a_failed_write_refuses_the_queue() {
    loom::model(|| {
        let log = Log::new(Some(1));
        let a = spawn_append(&log);
        let own = log.append();
        let a = a.join().unwrap();
        for r in [a, own].into_iter().flatten() {
            match r {
                (1, out) => assert!(matches!(out, Outcome::Failed(1)), "{out:?}"),
                (_, out) => assert!(!matches!(out, Outcome::Written), "{out:?}"),
            }
        }
        assert!(log.check_end().is_empty());
    });
}

/// A drain (a roll or a close) beside two writers: once it returns nothing numbered
/// is left unwritten, and every writer is acknowledged.
#[test]
fn a_drain_leaves_nothing_behind() {
    loom::model(|| {
        let log = Log::new(None);
        let a = spawn_append(&log);
        let own = log.append();
        log.drain();
        assert!(matches!(a.join().unwrap(), Some((_, Outcome::Written))));
        assert!(matches!(own, Some((_, Outcome::Written))));
        assert_eq!(log.check_end().len(), 2);
    });
}
