//! YCSB E's state on a table (`scan_states`, `scan_reads_rule`): 1,000,000 cells with
//! keys shaped as the peers bench's YCSB keys (16 bytes, an FNV-1a hash of the item
//! number then the number) and 100-byte random values, loaded in batches of 1,000 in
//! two flushes and compacted into level 1; then flushes of random updates (level 0)
//! and updates left in the memtable, put one at a time among other allocations
//! ([`scatter`]).

use segstore::{Table, WriteBatch};

use super::XorShift;

/// Items loaded.
pub const KEYS: u64 = 1_000_000;

/// A random 100-byte value.
pub fn value(rng: &mut XorShift) -> [u8; 100] {
    let mut v = [0u8; 100];
    for c in v.chunks_mut(8) {
        c.copy_from_slice(&rng.next().to_le_bytes()[..c.len()]);
    }
    v
}

/// The key of item `n`: `be64(fnv1a64(n))` then `be64(n)` (the peers bench's clears the
/// hash's top bit, as YCSB's `fnvhash64` does; the keys spread alike).
pub fn key(n: u64) -> [u8; 16] {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in n.to_le_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&h.to_be_bytes());
    k[8..].copy_from_slice(&n.to_be_bytes());
    k
}

/// `n` writes in batches of 1,000: items `first..first + n` (`load`), or updates of
/// random loaded items.
fn write(t: &Table, rng: &mut XorShift, first: u64, n: usize, load: bool) {
    for chunk in 0..n as u64 / 1_000 {
        let mut b = WriteBatch::new();
        for i in 0..1_000 {
            let k = match load {
                true => first + chunk * 1_000 + i,
                false => rng.below(KEYS as usize) as u64,
            };
            b.put(key(k), value(rng));
        }
        t.write(&b).expect("write");
    }
}

/// `n` single puts of random loaded items, each among allocations of 32 to 511 bytes
/// made and freed around it: the memtable's nodes and the B-tree's leaves end up
/// apart from one another, as in a process that has served other work between its
/// writes. Written in batches of 1,000 instead, the memtable's allocations lay in
/// order, and a scan's reads of them missed less than a running process's: before short
/// values were held in the node, a scratch program's scans that skipped reading the
/// memtable's values (wrong results, a bound) took 0.98 of the time over batched
/// writes, and 0.88 to 0.93 over scattered ones (issue 19 item 3).
fn scatter(t: &Table, rng: &mut XorShift, n: usize) {
    let mut other: Vec<Vec<u8>> = Vec::new();
    for _ in 0..n {
        t.put(key(rng.below(KEYS as usize) as u64), value(rng))
            .expect("put");
        for _ in 0..3 {
            other.push(vec![1u8; 32 + rng.below(480)]);
        }
        for _ in 0..2 {
            let at = rng.below(other.len());
            other.swap_remove(at);
        }
    }
}

/// `t` (empty) loaded with [`KEYS`] items in two flushes and compacted into level 1
/// (one flush would stay a level 0 segment: a major compaction leaves a sole segment
/// as it is), then `level0` flushes of `level0_updates` updates each and `memtable`
/// updates left in the memtable ([`scatter`]ed).
pub fn build(t: &Table, rng: &mut XorShift, level0: usize, level0_updates: usize, memtable: usize) {
    for half in 0..2 {
        write(t, rng, half * KEYS / 2, KEYS as usize / 2, true);
        t.flush().expect("flush");
    }
    t.compact().expect("compact");
    for _ in 0..level0 {
        write(t, rng, 0, level0_updates, false);
        t.flush().expect("flush");
    }
    scatter(t, rng, memtable);
}

/// Run `scans` (start item, rows) on `t`, each a scan from the item's key (`scan(k..)`)
/// read with `next_with` as YCSB E's are; ns a scan, and the bytes read.
pub fn pass(t: &Table, scans: &[(u64, usize)]) -> (f64, usize) {
    let start = std::time::Instant::now();
    let mut bytes = 0;
    for &(k, rows) in scans {
        let k = key(k);
        let mut s = t.scan(&k[..]..).expect("scan");
        for _ in 0..rows {
            match s.next_with(|_, v| v.len()) {
                Some(n) => bytes += n.expect("row"),
                None => break,
            }
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / scans.len() as f64;
    (ns, bytes)
}

/// `n` scans from random loaded items, of 1 to 100 rows (uniform).
pub fn scans(rng: &mut XorShift, n: usize) -> Vec<(u64, usize)> {
    (0..n)
        .map(|_| (rng.below(KEYS as usize) as u64, 1 + rng.below(100)))
        .collect()
}
