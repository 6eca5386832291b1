//! A payload's trailer as formats 4 to 6 write it, what any trailer says once read
//! (format 7's and 8's: `held.rs`), and how long a trailer is.

use super::held::Held;
use super::{read_u16, read_u64, Layout, Malformed, TRAILER};

/// What a payload's trailer says.
pub(super) struct Trailer {
    pub(super) base_ts: u64,
    pub(super) n: usize,
    pub(super) m: usize,
    pub(super) interval: usize,
    pub(super) held: Held,
    /// Where the fixed trailer (`base_ts` on) starts.
    pub(super) at: usize,
    /// Where the block's index (its table of starts and hash slots) ends.
    pub(super) end: usize,
}

/// The trailer of a payload of formats 4 to 6: `base_ts` u64, `n` u16, `m` u16,
/// `interval` u8.
pub(super) fn trailer(b: &[u8]) -> Result<Trailer, Malformed> {
    let len = b.len();
    let Some(t) = len.checked_sub(TRAILER) else {
        return Err(Malformed::new(0, format!("data block payload of {len} bytes")));
    };
    Ok(Trailer {
        base_ts: read_u64(b, t).unwrap_or(0),
        n: read_u16(b, t + 8).unwrap_or(0) as usize,
        m: read_u16(b, t + 10).unwrap_or(0) as usize,
        interval: b[t + 12] as usize,
        held: Held::default(),
        at: t,
        end: t,
    })
}

/// Bytes of a payload's trailer in `layout`, holding `held` (and with it a prefix of
/// `plen` bytes).
pub(super) fn trailer_len(layout: Layout, held: &Held) -> usize {
    match layout {
        Layout::Held | Layout::Fixed => Held::trailer_len(held.flags, held.plen),
        _ => TRAILER,
    }
}
