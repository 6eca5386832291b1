//! Format 7's held fields (issue 19 item 6, "fields a block can hold once"): a key
//! length, a value length or a timestamp that every entry of a block shares is written
//! once, at the end of the payload, instead of in each entry.
//!
//! ```text
//! payload end, format 7 (formats 4 to 6 end in base_ts u64, n u16, m u16, interval u8):
//!   ... slots
//!   [key_len  u16 LE   the keys' length - 1: only with KEY]
//!   [val_len  u32 LE   the live cells' values' length: only with VAL]
//!   base_ts   u64 LE   the smallest timestamp of the block's cells
//!   n         u8       entries, 1 ..= MAX_ENTRIES (the hash slots: n + n / 3 + 1)
//!   interval  u8       entries per group, >= 1
//!   held      u8       KEY | VAL | TS
//! ```
//!
//! An entry of a block holding `KEY` has no `suffix_len` (it is `key_len - shared`);
//! holding `VAL`, no `val_len` (a live cell's is `val_len`, a tombstone's 0); holding
//! `TS`, no `ts` (every cell's is `base_ts`). A writer holds a field exactly when every
//! entry shares it (the value length: when at least one cell is live and every live
//! cell's value has it), so a block has one encoding, which `verify` checks.
//!
//! Format 8 adds `FIXED` (8): every entry takes the same bytes, so none has a head and
//! the block has no table of starts (`fixed.rs`, which also lays out what the trailer
//! then holds before `key_len`).

use super::fixed;
use super::{hash_slots, read_u16, read_u32, read_u64, Layout, Malformed, Trailer, MAX_VALUE_LEN};

/// Every key has the length held.
pub const KEY: u8 = 1;
/// Every live cell's value has the length held.
pub const VAL: u8 = 2;
/// Every cell's timestamp is the block's base timestamp.
pub const TS: u8 = 4;
/// Format 8: every entry is a live cell without expiry and takes the same bytes
/// (`fixed.rs`); only with `KEY | VAL`.
pub const FIXED: u8 = 8;

/// What a block's trailer holds for all its entries: `flags` says which of the others
/// are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Held {
    /// `KEY | VAL | TS`, those held.
    pub flags: u8,
    /// Every key's length, with `KEY`.
    pub key_len: usize,
    /// Every live cell's value's length, with `VAL`.
    pub val_len: usize,
    /// With `FIXED`: the keys' shared prefix, held once ([`fixed::prefix_len`]).
    pub plen: usize,
    /// With `FIXED`: where that prefix lies in the payload (0 in what a builder chooses).
    pub prefix_at: usize,
    /// With `FIXED`: bytes of each entry's timestamp delta (0 with `TS`).
    pub tsw: usize,
    /// With `FIXED`: bytes of each entry (its key past the prefix, its timestamp delta
    /// and its value).
    pub width: usize,
}

/// Bytes of format 7's trailer from `base_ts` on.
const BASE: usize = 8 + 1 + 1 + 1;

impl Held {
    /// Bytes of the lengths a block holding `flags` holds.
    fn lengths(flags: u8) -> usize {
        (if flags & KEY != 0 { 2 } else { 0 }) + if flags & VAL != 0 { 4 } else { 0 }
    }

    /// Bytes of the trailer of a block holding `flags`, with a held prefix of `plen`
    /// bytes if `FIXED`.
    pub fn trailer_len(flags: u8, plen: usize) -> usize {
        let fixed = if flags & FIXED != 0 { fixed::TRAILER + plen } else { 0 };
        Self::lengths(flags) + BASE + fixed
    }

    /// The held fields `flags` names, their lengths read from `b` at `at`.
    fn lengths_at(b: &[u8], at: usize, flags: u8) -> Result<Held, Malformed> {
        let mut h = Held {
            flags,
            ..Held::default()
        };
        let mut p = at;
        if flags & KEY != 0 {
            h.key_len = read_u16(b, p).unwrap_or(0) as usize + 1;
            p += 2;
        }
        if flags & VAL != 0 {
            h.val_len = read_u32(b, p).unwrap_or(0) as usize;
            if h.val_len > MAX_VALUE_LEN {
                let why = format!("held value length {} out of range", h.val_len);
                return Err(Malformed::new(p as u64, why));
            }
        }
        Ok(h)
    }

    /// Append the trailer of a block of `n` entries in groups of `interval` whose
    /// smallest timestamp is `base_ts` and whose first key is `first`.
    pub fn put_trailer(&self, first: &[u8], base_ts: u64, n: usize, interval: usize, out: &mut Vec<u8>) {
        if self.flags & FIXED != 0 {
            fixed::put_trailer(self, first, out);
        }
        if self.flags & KEY != 0 {
            out.extend_from_slice(&((self.key_len - 1) as u16).to_le_bytes());
        }
        if self.flags & VAL != 0 {
            out.extend_from_slice(&(self.val_len as u32).to_le_bytes());
        }
        out.extend_from_slice(&base_ts.to_le_bytes());
        out.extend_from_slice(&[n as u8, interval as u8, self.flags]);
    }
}

/// Read the trailer of format 7 (`layout` [`Layout::Held`]) or 8 at the end of
/// payload `b`.
pub(super) fn trailer(b: &[u8], layout: Layout) -> Result<Trailer, Malformed> {
    let len = b.len();
    let flags = *b.last().unwrap_or(&0);
    let known = if layout == Layout::Fixed { KEY | VAL | TS | FIXED } else { KEY | VAL | TS };
    if flags & !known != 0 {
        let why = format!("unknown held fields {flags:#04x}");
        return Err(Malformed::new(len.saturating_sub(1) as u64, why));
    }
    let t = len.checked_sub(BASE);
    let Some((t, at)) = t.and_then(|t| Some((t, t.checked_sub(Held::lengths(flags))?))) else {
        return Err(Malformed::new(0, format!("data block payload of {len} bytes")));
    };
    let n = b[t + 8] as usize;
    let mut held = Held::lengths_at(b, at, flags)?;
    let end = match flags & FIXED {
        0 => at,
        _ => fixed::trailer(b, at, &mut held)?,
    };
    Ok(Trailer {
        base_ts: read_u64(b, t).unwrap_or(0),
        n,
        m: hash_slots(n),
        interval: b[t + 9] as usize,
        held,
        at: t,
        end,
    })
}

/// Whether lengths seen so far are all one: what a builder and `verify` track to know
/// whether a block holds a length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Same {
    /// None seen.
    #[default]
    Unseen,
    /// All were this.
    All(usize),
    /// They differ.
    Differ,
}

impl Same {
    /// After seeing `len` too.
    #[inline]
    pub fn and(self, len: usize) -> Same {
        match self {
            Same::Unseen => Same::All(len),
            Same::All(l) if l == len => self,
            _ => Same::Differ,
        }
    }

    /// The length all share, if one is.
    pub fn held(self) -> Option<usize> {
        match self {
            Same::All(l) => Some(l),
            _ => None,
        }
    }
}

/// What a block's cells share, as far as its trailer may hold it: the keys' and the
/// live values' lengths, the smallest and largest timestamps, whether every cell is
/// live without expiry (`plain`), and the first and last keys' common prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shared {
    pub keys: Same,
    pub vals: Same,
    pub min_ts: u64,
    pub max_ts: u64,
    pub plain: bool,
    pub lcp: usize,
}

/// The held fields of a block of `layout` whose cells share `s`: none before format 7.
/// The one choice the builder makes and `verify` checks.
pub fn choose(layout: Layout, s: &Shared) -> Held {
    let mut h = Held::default();
    if !layout.holds() {
        return h;
    }
    let (keys, vals, one_ts) = (s.keys, s.vals, s.min_ts == s.max_ts);
    // Keys are never empty (a held length is written less one); a block of empty keys
    // is refused by its reader either way.
    if let Some(k) = keys.held().filter(|&k| k > 0) {
        (h.flags, h.key_len) = (h.flags | KEY, k);
    }
    if let Some(v) = vals.held() {
        (h.flags, h.val_len) = (h.flags | VAL, v);
    }
    if one_ts {
        h.flags |= TS;
    }
    if layout == Layout::Fixed && s.plain && h.flags & (KEY | VAL) == KEY | VAL {
        fixed::hold(&mut h, s);
    }
    h
}
