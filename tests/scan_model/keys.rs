//! The keys and values of a run: a pool of mixed keys (prefixes of one another, around
//! the memtable's inline limits, with 0x00 and 0xff bytes) or one of fixed-width keys
//! (format 8's fixed blocks), the bounds and seek probes built from them, and the
//! values of each setup.

use std::ops::Bound;

use crate::ops::Setup;

pub(crate) type Key = Vec<u8>;
/// A (key, value) row, as a scan yields it.
pub(crate) type Row = (Key, Vec<u8>);

/// The keys a run draws from (by index, modulo their number) and how it makes values.
pub(crate) struct Pool {
    keys: Vec<Key>,
    fixed: bool,
    wide: bool,
}

impl Pool {
    pub(crate) fn new(s: &Setup) -> Pool {
        Pool {
            keys: if s.fixed_keys { fixed() } else { mixed() },
            fixed: s.fixed_keys,
            wide: s.wide,
        }
    }

    pub(crate) fn key(&self, i: usize) -> Key {
        self.keys[i % self.keys.len()].clone()
    }

    /// The value `v` stands for: of one width for fixed keys (3 or 40 bytes), else of
    /// 0 to 3 bytes or, `wide`, of 24 to 80 bytes and now and then 3,000 (more
    /// segments per level: chains).
    pub(crate) fn value(&self, v: u8) -> Vec<u8> {
        match (self.fixed, self.wide) {
            (true, false) => vec![v, v ^ 0x5a, 7],
            (true, true) => vec![v; 40],
            (false, false) => vec![v; (v % 4) as usize],
            (false, true) if v % 16 == 0 => vec![v; 3000],
            (false, true) => vec![v; 24 + (v % 57) as usize],
        }
    }

    /// A scan bound: pool key `i`, included if the bool, or none.
    pub(crate) fn bound(&self, b: Option<(usize, bool)>) -> Bound<Key> {
        match b {
            None => Bound::Unbounded,
            Some((i, true)) => Bound::Included(self.key(i)),
            Some((i, false)) => Bound::Excluded(self.key(i)),
        }
    }

    /// A seek target: pool key `i` as it is (`how` 0), with a 0x00 byte appended (1:
    /// just past it) or its last byte removed (2: a prefix of it); or the empty key.
    pub(crate) fn probe(&self, p: Option<(usize, u8)>) -> Key {
        let Some((i, how)) = p else {
            return Vec::new();
        };
        let mut k = self.key(i);
        match how {
            0 => {}
            1 => k.push(0),
            _ => {
                k.pop();
            }
        }
        k
    }
}

/// Keys that are prefixes of one another, around 8, 16 and 24 bytes (the memtable's
/// inline limit) and past them, with 0x00 and 0xff bytes.
fn mixed() -> Vec<Key> {
    let prefixes: [Vec<u8>; 11] = [
        b"".to_vec(),
        b"a".to_vec(),
        b"ab\x00".to_vec(),
        b"\xff\xfe".to_vec(),
        vec![b'p'; 7],
        vec![b'q'; 8],
        vec![b'r'; 15],
        vec![b's'; 23],
        vec![b't'; 24],
        vec![b'u'; 31],
        vec![b'v'; 70],
    ];
    let suffixes: [&[u8]; 7] = [b"", b"\x00", b"\x01", b"a", b"\xff", b"\x00\xff", b"ab"];
    let mut keys: Vec<Key> = prefixes
        .iter()
        .flat_map(|p| suffixes.iter().map(move |s| [&p[..], s].concat()))
        .filter(|k| !k.is_empty())
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Keys of one length (16 bytes), for blocks of fixed entries.
fn fixed() -> Vec<Key> {
    (0..48u32)
        .map(|i| format!("fixd-key-{i:07}").into_bytes())
        .collect()
}
