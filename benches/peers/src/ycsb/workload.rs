//! YCSB's core workloads A to F (`workloads/workload[a-f]` with `CoreWorkload`), the
//! record layout, and the per-system key space that inserts extend.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use super::generators::{
    fnvhash64, uniform, zeta_from, Rng, ScrambledZipfian, SkewedLatest, ZIPFIAN_CONSTANT,
};

/// Bytes of a record's value (YCSB's default is 10 fields of 100 bytes; this crate's
/// data sets use one 100-byte value, which is what YCSB's `fieldcount=1` gives).
pub const VALUE_LEN: usize = 100;
/// YCSB's `maxscanlength` for workload E (scan lengths uniform in `1..=100`).
pub const MAX_SCAN_LEN: u64 = 100;

/// The 16-byte key of item `n`: `be64(fnvhash64(n))` then `be64(n)`. YCSB's default
/// `insertorder=hashed` names item `n` `"user" + fnvhash64(n)`, so keys sort in hash
/// order, not insert order; these binary keys sort the same way (the hash first) and
/// stay unique and 16 bytes long, as the crate's other data sets.
pub fn key(n: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&fnvhash64(n).to_be_bytes());
    k[8..].copy_from_slice(&n.to_be_bytes());
    k
}

/// Whether values are JSON-like documents (`--values json`) rather than random bytes.
static JSON_VALUES: AtomicBool = AtomicBool::new(false);

/// Make every value JSON-like (`true`) or random bytes (`false`, the default), for the
/// whole process: set once, before any data set is loaded.
pub fn set_json_values(on: bool) {
    JSON_VALUES.store(on, Ordering::Relaxed);
}

/// Whether values are JSON-like ([`set_json_values`]).
pub fn json_values() -> bool {
    JSON_VALUES.load(Ordering::Relaxed)
}

/// The value of item `n`, version `ver` (updates write new ones): 100 pseudo-random
/// bytes, or with [`set_json_values`] a 100-byte JSON-like document.
pub fn value(n: u64, ver: u64) -> [u8; VALUE_LEN] {
    if json_values() {
        return json_value(n, ver);
    }
    let mut v = [0u8; VALUE_LEN];
    let mut x = crate::mix(n ^ ver.rotate_left(32) ^ 0x5555);
    for c in v.chunks_mut(8) {
        let b = x.to_le_bytes();
        c.copy_from_slice(&b[..c.len()]);
        x = crate::mix(x);
    }
    v
}

/// Words a JSON-like value's free text is drawn from.
const WORDS: [&str; 16] = [
    "order", "shipped", "pending", "customer", "account", "premium", "basic", "refund", "invoice",
    "delivery", "express", "standard", "review", "rating", "support", "ticket",
];
/// Cities a JSON-like value names.
const CITIES: [&str; 8] = [
    "Lisbon", "Osaka", "Denver", "Nairobi", "Tallinn", "Quito", "Perth", "Ghent",
];

/// A JSON-like document of exactly [`VALUE_LEN`] bytes for item `n`, version `ver`: the
/// field names every document repeats, numbers that vary, a city from a short list and
/// words from a small vocabulary, as a user profile or order record holds (about half
/// its bytes repeat from document to document: a block compressor's data, a per-record
/// one's much less). A `note` field pads (or its text is cut) to the length.
pub fn json_value(n: u64, ver: u64) -> [u8; VALUE_LEN] {
    let mut x = crate::mix(n ^ ver.rotate_left(32) ^ 0x1357);
    let mut next = || {
        x = crate::mix(x);
        x
    };
    let head = format!(
        r#"{{"id":{n},"ver":{ver},"city":"{}","score":{},"active":{},"note":""#,
        CITIES[(next() % 8) as usize],
        next() % 1000,
        next() % 2 == 0,
    );
    let tail = "\"}";
    let mut note = String::new();
    while head.len() + note.len() + tail.len() < VALUE_LEN {
        if !note.is_empty() {
            note.push(' ');
        }
        note.push_str(WORDS[(next() % 16) as usize]);
    }
    let mut doc = head.into_bytes();
    let room = VALUE_LEN.saturating_sub(doc.len() + tail.len());
    doc.extend_from_slice(&note.as_bytes()[..room.min(note.len())]);
    doc.extend_from_slice(tail.as_bytes());
    let mut v = [b' '; VALUE_LEN];
    let len = doc.len().min(VALUE_LEN);
    v[..len].copy_from_slice(&doc[..len]);
    v
}

/// One YCSB operation, as `CoreWorkload.doTransaction` chooses them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Read(u64),
    Update(u64),
    Insert(u64),
    /// Start item and row count.
    Scan(u64, usize),
    ReadModifyWrite(u64),
}

/// The workloads (YCSB's `workloads/workloada` to `workloadf`) and the extra write rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    A,
    B,
    C,
    D,
    E,
    F,
    /// Not YCSB: single puts of uniformly chosen loaded items (updates), for the write
    /// rows at 1, 2 and 4 threads.
    Puts,
}

/// Keys choose by request distribution.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Dist {
    Zipfian,
    Latest,
    Uniform,
}

impl Workload {
    /// YCSB's recommended order after the load: A, B, C, F, D (D inserts, so it runs
    /// after the read-only C), then E (after a reload in YCSB; here on the same data).
    pub const YCSB_ORDER: [Workload; 6] = [
        Workload::A,
        Workload::B,
        Workload::C,
        Workload::F,
        Workload::D,
        Workload::E,
    ];

    /// The letter `--phases` names it by (`P`: the single puts).
    pub fn letter(self) -> &'static str {
        match self {
            Workload::A => "A",
            Workload::B => "B",
            Workload::C => "C",
            Workload::D => "D",
            Workload::E => "E",
            Workload::F => "F",
            Workload::Puts => "P",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Workload::A => "A 50% read / 50% update",
            Workload::B => "B 95% read / 5% update",
            Workload::C => "C 100% read",
            Workload::D => "D 95% read latest / 5% insert",
            Workload::E => "E 95% scan 1..100 / 5% insert",
            Workload::F => "F 50% read / 50% read-modify-write",
            Workload::Puts => "single puts (uniform updates)",
        }
    }

    /// (read, update, insert, scan, read-modify-write) proportions.
    fn mix(self) -> [f64; 5] {
        match self {
            Workload::A => [0.5, 0.5, 0.0, 0.0, 0.0],
            Workload::B => [0.95, 0.05, 0.0, 0.0, 0.0],
            Workload::C => [1.0, 0.0, 0.0, 0.0, 0.0],
            Workload::D => [0.95, 0.0, 0.05, 0.0, 0.0],
            Workload::E => [0.0, 0.0, 0.05, 0.95, 0.0],
            Workload::F => [0.5, 0.0, 0.0, 0.0, 0.5],
            Workload::Puts => [0.0, 1.0, 0.0, 0.0, 0.0],
        }
    }

    fn dist(self) -> Dist {
        match self {
            Workload::D => Dist::Latest,
            Workload::Puts => Dist::Uniform,
            _ => Dist::Zipfian,
        }
    }

    pub fn inserts(self) -> bool {
        self.mix()[2] > 0.0
    }
}

/// One system's item numbers: `0..loaded` were loaded; inserts take the next numbers.
/// `acked` is YCSB's `AcknowledgedCounterGenerator`: reads choose only items whose
/// insert has returned, so a read never misses an item another thread is inserting.
pub struct KeySpace {
    claimed: AtomicU64,
    acked: AtomicU64,
    /// The item count the scrambled zipfian is built over: the loaded items plus twice
    /// the inserts the whole run plans (YCSB's `expectednewkeys` fudge factor of 2), so
    /// that the hot items stay the same while inserts extend the key space.
    zipf_items: u64,
    /// (n, zeta(n, 0.99)) last computed for D's latest distribution, extended as items
    /// are inserted.
    zeta: Mutex<(u64, f64)>,
}

impl KeySpace {
    pub fn new(loaded: u64, planned_inserts: u64) -> KeySpace {
        KeySpace {
            claimed: AtomicU64::new(loaded),
            acked: AtomicU64::new(loaded),
            zipf_items: loaded + 2 * planned_inserts,
            zeta: Mutex::new((0, 0.0)),
        }
    }

    /// Call before a phase: zeta over `count() - 1` items for D's latest distribution,
    /// from the last value computed (so it is not on a phase's clock).
    pub fn prepare(&self) {
        let n = self.count() - 1;
        let mut z = self.zeta.lock().unwrap();
        if z.0 < n {
            *z = (n, zeta_from(z.0, n, ZIPFIAN_CONSTANT, z.1));
        }
    }

    fn latest(&self) -> SkewedLatest {
        // Built over the items at `prepare` (another thread may have inserted since:
        // the generator extends zeta as the count grows, as YCSB's does).
        let z = *self.zeta.lock().unwrap();
        assert!(z.0 > 0, "KeySpace::prepare not called");
        SkewedLatest::with_zetan(z.0, z.1)
    }

    /// Items whose insert has been acknowledged: `0..count()`.
    pub fn count(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }

    fn claim(&self) -> u64 {
        self.claimed.fetch_add(1, Ordering::AcqRel)
    }

    /// Item `n`'s insert returned: acknowledge it once every lower item is (inserts are
    /// 5% of D and E, so the wait for another thread's lower item is short).
    pub fn ack(&self, n: u64) {
        while self
            .acked
            .compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            std::thread::yield_now();
        }
    }
}

/// One thread's chooser of operations for one phase.
pub struct Chooser<'k> {
    wl: Workload,
    ks: &'k KeySpace,
    rng: Rng,
    zipf: ScrambledZipfian,
    latest: Option<SkewedLatest>,
}

impl<'k> Chooser<'k> {
    pub fn new(wl: Workload, ks: &'k KeySpace, seed: u64) -> Chooser<'k> {
        Chooser {
            wl,
            ks,
            rng: Rng::new(seed),
            zipf: ScrambledZipfian::new(0, ks.zipf_items - 1),
            latest: (wl.dist() == Dist::Latest).then(|| ks.latest()),
        }
    }

    /// YCSB's `CoreWorkload.nextKeynum`: an acknowledged item by the workload's request
    /// distribution (a scrambled zipfian pick beyond the acknowledged items is redrawn).
    fn key_num(&mut self) -> u64 {
        let count = self.ks.count();
        match self.wl.dist() {
            Dist::Uniform => uniform(0, count - 1, &mut self.rng),
            Dist::Latest => {
                let l = self.latest.as_mut().expect("latest generator");
                l.next(count - 1, &mut self.rng)
            }
            Dist::Zipfian => loop {
                let n = self.zipf.next(&mut self.rng);
                if n < count {
                    return n;
                }
            },
        }
    }

    pub fn next(&mut self) -> Op {
        let m = self.wl.mix();
        let mut u = self.rng.next_f64();
        let mut pick = 0;
        while pick < 4 && u >= m[pick] {
            u -= m[pick];
            pick += 1;
        }
        match pick {
            0 => Op::Read(self.key_num()),
            1 => Op::Update(self.key_num()),
            2 => Op::Insert(self.ks.claim()),
            3 => {
                let n = self.key_num();
                Op::Scan(n, uniform(1, MAX_SCAN_LEN, &mut self.rng) as usize)
            }
            _ => Op::ReadModifyWrite(self.key_num()),
        }
    }

    /// A number for the next value version (updates write a value not seen before).
    pub fn version(&mut self) -> u64 {
        self.rng.next_u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workloads_mix_as_ycsb_defines() {
        let ks = KeySpace::new(10_000, 1_000);
        let mut c = Chooser::new(Workload::E, &ks, 3);
        let (mut scans, mut inserts) = (0, 0);
        for _ in 0..10_000 {
            match c.next() {
                Op::Scan(n, len) => {
                    assert!(n < ks.count() && (1..=100).contains(&len));
                    scans += 1;
                }
                Op::Insert(n) => {
                    ks.ack(n);
                    inserts += 1;
                }
                o => panic!("E chose {o:?}"),
            }
        }
        assert!(
            (400..600).contains(&inserts),
            "{inserts} inserts, {scans} scans"
        );
        assert_eq!(ks.count(), 10_000 + inserts);
    }

    #[test]
    fn keys_sort_by_hash_and_stay_unique() {
        assert_ne!(key(1), key(2));
        assert_eq!(&key(7)[8..], &7u64.to_be_bytes());
    }

    #[test]
    fn json_values_are_whole_documents_of_the_value_length() {
        let mut distinct = std::collections::HashSet::new();
        for n in [0, 1, 99, 12_345, u64::MAX / 3] {
            for ver in [0, 1, 7] {
                let v = json_value(n, ver);
                let doc = std::str::from_utf8(&v).expect("UTF-8").trim_end();
                assert!(
                    doc.starts_with(&format!(r#"{{"id":{n},"ver":{ver},"#)),
                    "{doc}"
                );
                assert!(doc.ends_with(r#""}"#), "{doc}");
                assert_eq!(doc.matches('"').count() % 2, 0, "{doc}");
                distinct.insert(v);
            }
        }
        assert_eq!(distinct.len(), 15);
    }
}
