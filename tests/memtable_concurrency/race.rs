//! Test 1: two writers race to apply the same keys to one memtable, two readers check
//! every cell a writer has returned from.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;

use segstore::format::key_hash;
use segstore::segment::RecordRef;
use segstore::table::Memtable;

use crate::common;
use crate::{wait_for, Gone};

/// Two writers and two readers over one memtable (test 1).
struct Race {
    keys: Vec<Vec<u8>>,
    m: Memtable,
    /// `done[w]`: writer `w` has applied the first `done[w]` keys of its order.
    done: [AtomicUsize; 2],
    /// Checks the readers made.
    checks: AtomicU64,
    readers_gone: AtomicUsize,
    writers_finished: AtomicBool,
}

/// Keys of which `crowd` share one home slot of a first memtable's point index (1,024
/// slots), more than its window of 16: those past the window are left to the map. Then
/// `plain` others, and `plain / 8` past the 24 inline bytes (searched as slices).
fn keys_with_a_crowded_window(plain: usize, crowd: usize) -> Vec<Vec<u8>> {
    let home = |k: &[u8]| key_hash(k) as usize & 1023;
    let target = home(b"c0");
    let mut keys: Vec<Vec<u8>> = (0u32..)
        .map(|i| format!("c{i}").into_bytes())
        .filter(|k| home(k) == target)
        .take(crowd)
        .collect();
    keys.extend((0..plain).map(|i| format!("key{i:06}").into_bytes()));
    keys.extend(
        (0..plain / 8).map(|i| format!("a-long-key-past-the-inline-limit-{i:06}").into_bytes()),
    );
    keys
}

impl Race {
    /// The key index writer `w` applies `j`-th: writer 0 from the first key, writer 1
    /// from the middle, both round to the end.
    fn order(&self, w: usize, j: usize) -> usize {
        (j + w * self.keys.len() / 2) % self.keys.len()
    }

    /// The sequence number, timestamp and value writer `w` gives its `j`-th cell: every
    /// cell its own, the later of a writer's the newer.
    fn seq(w: usize, j: usize) -> u64 {
        (2 * j + w + 1) as u64
    }

    fn write(&self, w: usize) {
        for j in 0..self.keys.len() {
            if j == self.keys.len() / 2 {
                wait_for(&self.checks, 100, &self.readers_gone);
            }
            let seq = Race::seq(w, j);
            let value = seq.to_be_bytes();
            let cell = RecordRef {
                key: &self.keys[self.order(w, j)],
                value: &value,
                ts: seq,
                tombstone: false,
                expires: 0,
            };
            self.m.apply(seq, &[cell]);
            self.done[w].store(j + 1, Ordering::Release);
        }
    }

    /// Checks of random applied keys until the writers have finished (one round at
    /// least after that).
    fn read(&self, seed: u64) {
        let _gone = Gone(&self.readers_gone);
        let mut rng = common::Rng(seed);
        loop {
            let finished = self.writers_finished.load(Ordering::Acquire);
            for w in 0..2 {
                let done = self.done[w].load(Ordering::Acquire);
                if done > 0 {
                    self.check_applied(w, rng.next() as usize % done);
                    self.checks.fetch_add(1, Ordering::SeqCst);
                }
            }
            if finished {
                return;
            }
        }
    }

    /// Writer `w`'s `j`-th cell, which it has applied, is found with at least its
    /// timestamp: through the point index (or the map) and through a scan.
    fn check_applied(&self, w: usize, j: usize) {
        let i = self.order(w, j);
        let (key, want) = (&self.keys[i], Race::seq(w, j));
        let c = self.m.get_shared(key);
        let c = c.unwrap_or_else(|| panic!("key {i} applied by writer {w} is missing"));
        assert!(
            c.ts >= want,
            "key {i}: ts {} below the applied {want}",
            c.ts
        );
        let e = self.m.range(&key[..]..=&key[..]).next();
        let e = e.unwrap_or_else(|| panic!("key {i} missing from a scan"));
        assert_eq!(&e.key, key);
        assert!(e.ts >= want, "key {i}: scanned ts {} below {want}", e.ts);
    }

    /// Each key holds the newer of its two cells, once: by both reads and in a walk,
    /// in key order; and every sequence number was counted.
    fn check_final(&self) {
        let n = self.keys.len();
        let mut want = vec![0u64; n];
        for w in 0..2 {
            for j in 0..n {
                let i = self.order(w, j);
                want[i] = want[i].max(Race::seq(w, j));
            }
        }
        assert_eq!(self.m.len(), n, "one node per key");
        for (i, k) in self.keys.iter().enumerate() {
            assert_eq!(self.m.get_shared(k).unwrap().ts, want[i], "key {i}");
            assert_eq!(self.m.get(k).unwrap().ts, want[i], "key {i}");
        }
        let walked: Vec<Vec<u8>> = self.m.iter().map(|e| e.key).collect();
        let mut sorted = self.keys.clone();
        sorted.sort();
        assert_eq!(walked, sorted);
        assert_eq!(self.m.seq_range(), Some((1, 2 * n as u64)));
    }
}

/// The race, then the final checks.
pub(crate) fn run() {
    let race = Race {
        keys: keys_with_a_crowded_window(6_000, 40),
        m: Memtable::new(),
        done: [AtomicUsize::new(0), AtomicUsize::new(0)],
        checks: AtomicU64::new(0),
        readers_gone: AtomicUsize::new(0),
        writers_finished: AtomicBool::new(false),
    };
    let (race, start) = (&race, &Barrier::new(4));
    std::thread::scope(|s| {
        let readers: Vec<_> = (1..=2u64)
            .map(|r| {
                s.spawn(move || {
                    start.wait();
                    race.read(0x9e37_79b9_7f4a_7c15 ^ r);
                })
            })
            .collect();
        let writers: Vec<_> = (0..2)
            .map(|w| {
                s.spawn(move || {
                    start.wait();
                    race.write(w);
                })
            })
            .collect();
        for h in writers {
            h.join().unwrap();
        }
        race.writers_finished.store(true, Ordering::Release);
        for h in readers {
            h.join().unwrap();
        }
    });
    assert!(race.checks.load(Ordering::SeqCst) >= 100);
    race.check_final();
}
