//! Data records: the cells of a data file, each self-describing and self-checked.
//!
//! ```text
//! flags    u8        bit 0: tombstone; other bits must be zero
//! ts       u64 LE    write timestamp, microseconds
//! key_len  varint    1 ..= MAX_KEY_LEN
//! val_len  varint    0 ..= MAX_VALUE_LEN (0 for tombstones)
//! key, value
//! crc      u32 LE    crc32c of everything above
//! ```

use super::{checksum, read_u32, read_u64, varint, Malformed, MAX_KEY_LEN, MAX_VALUE_LEN};

/// Flag bit: the record is a tombstone.
pub const TOMBSTONE: u8 = 1;
/// The longest a record header (flags, ts, both varints) can be.
pub const MAX_HEADER_LEN: usize = 1 + 8 + 10 + 10;

/// A borrowed cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Key.
    pub key: &'a [u8],
    /// Value (empty for tombstones).
    pub value: &'a [u8],
    /// Write timestamp in microseconds.
    pub ts: u64,
    /// Deletion marker.
    pub tombstone: bool,
}

/// Bytes the encoding of a record takes.
pub fn encoded_len(key_len: usize, val_len: usize) -> usize {
    1 + 8 + varint::len(key_len as u64) + varint::len(val_len as u64) + key_len + val_len + 4
}

/// Append the encoding of `r` to `out`.
pub fn encode(out: &mut Vec<u8>, r: &RecordRef<'_>) {
    let start = out.len();
    out.push(if r.tombstone { TOMBSTONE } else { 0 });
    out.extend_from_slice(&r.ts.to_le_bytes());
    varint::put(out, r.key.len() as u64);
    varint::put(out, r.value.len() as u64);
    out.extend_from_slice(r.key);
    out.extend_from_slice(r.value);
    let crc = checksum(&out[start..]);
    out.extend_from_slice(&crc.to_le_bytes());
}

/// From a prefix of a record (at least [`MAX_HEADER_LEN`] bytes, or all that remains),
/// the record's total encoded length.
pub fn total_len(b: &[u8]) -> Result<usize, Malformed> {
    let (klen, vlen, hdr) = header(b).map_err(Bad::malformed)?;
    Ok(hdr + klen + vlen + 4)
}

/// What is wrong with a record: small and `Copy`, so the decoding path stays short
/// enough to inline into scans and lookups; the message is built only on error.
#[derive(Debug, Clone, Copy)]
enum Bad {
    Truncated,
    Flags(u8),
    KeyLenVarint,
    ValueLenVarint(usize),
    KeyLen(u64),
    ValueLen(usize, u64),
    Short { total: usize, len: usize },
    Checksum,
    TombstoneValue,
}

impl Bad {
    #[cold]
    #[inline(never)]
    fn malformed(self) -> Malformed {
        const P: u64 = 9; // the key length's offset: after flags and timestamp
        match self {
            Bad::Truncated => Malformed::new(0, "truncated record"),
            Bad::Flags(f) => Malformed::new(0, format!("unknown record flags {f:#x}")),
            Bad::KeyLenVarint => Malformed::new(P, "truncated or bad key length"),
            Bad::ValueLenVarint(at) => {
                Malformed::new(at as u64, "truncated or bad value length")
            }
            Bad::KeyLen(k) => Malformed::new(P, format!("key length {k} out of range")),
            Bad::ValueLen(at, v) => {
                Malformed::new(at as u64, format!("value length {v} out of range"))
            }
            Bad::Short { total, len } => {
                Malformed::new(0, format!("record of {total} bytes truncated to {len}"))
            }
            Bad::Checksum => Malformed::new(0, "record checksum mismatch"),
            Bad::TombstoneValue => Malformed::new(0, "tombstone carries a value"),
        }
    }
}

/// (key length, value length, header length) of the record at the start of `b`.
#[inline(always)]
fn header(b: &[u8]) -> Result<(usize, usize, usize), Bad> {
    let flags = *b.first().ok_or(Bad::Truncated)?;
    if flags & !TOMBSTONE != 0 {
        return Err(Bad::Flags(flags));
    }
    let p = 9;
    let (klen, n1) = b.get(p..).and_then(varint::get).ok_or(Bad::KeyLenVarint)?;
    let (vlen, n2) = b
        .get(p + n1..)
        .and_then(varint::get)
        .ok_or(Bad::ValueLenVarint(p + n1))?;
    if klen == 0 || klen > MAX_KEY_LEN as u64 {
        return Err(Bad::KeyLen(klen));
    }
    if vlen > MAX_VALUE_LEN as u64 {
        return Err(Bad::ValueLen(p + n1, vlen));
    }
    Ok((klen as usize, vlen as usize, p + n1 + n2))
}

/// Decode the record at the start of `b`, checking its checksum. Returns it and its
/// encoded length.
#[inline]
pub fn decode(b: &[u8]) -> Result<(RecordRef<'_>, usize), Malformed> {
    decode_with(b, true)
}

/// [`decode`], checking the checksum only if `check_crc` (the structure, lengths and
/// flags are always checked, so a damaged record may read wrong but never out of
/// bounds).
#[inline]
pub fn decode_with(b: &[u8], check_crc: bool) -> Result<(RecordRef<'_>, usize), Malformed> {
    decode_fast(b, check_crc).map_err(Bad::malformed)
}

#[inline(always)]
fn decode_fast(b: &[u8], check_crc: bool) -> Result<(RecordRef<'_>, usize), Bad> {
    let (klen, vlen, hdr) = header(b)?;
    let body = hdr + klen + vlen;
    let total = body + 4;
    let (Some(head), Some(stored)) = (b.get(..body), read_u32(b, body)) else {
        return Err(Bad::Short {
            total,
            len: b.len(),
        });
    };
    if check_crc && stored != checksum(head) {
        return Err(Bad::Checksum);
    }
    let tombstone = b[0] & TOMBSTONE != 0;
    if tombstone && vlen != 0 {
        return Err(Bad::TombstoneValue);
    }
    Ok((
        RecordRef {
            key: &head[hdr..hdr + klen],
            value: &head[hdr + klen..],
            ts: read_u64(b, 1).unwrap_or(0),
            tombstone,
        },
        total,
    ))
}

/// The largest record [`checked_run`] checks ahead of the first.
pub const RUN_AHEAD_MAX: usize = 512;

/// Check the checksums of the records at the start of `b`, up to three back to back,
/// at once (their checksums computed side by side: [`crate::io::crc::crc32c_x3`]).
/// Returns the length of the prefix of `b` made of records that decode and pass: 0 if
/// the first does not (decode it with [`decode`] for the reason). A later record that
/// does not pass just ends the run: it may lie past what the caller will read. So may a
/// large one, which is why a record joins the run only if it takes at most
/// [`RUN_AHEAD_MAX`] bytes: a scan that stops early never pays for checking a large
/// value it does not read.
pub fn checked_run(b: &[u8]) -> usize {
    let mut parts: [(&[u8], u32); 3] = [(&[], 0); 3];
    let (mut n, mut at) = (0, 0);
    while n < parts.len() {
        let Some(rest) = b.get(at..) else { break };
        let Ok((klen, vlen, hdr)) = header(rest) else {
            break;
        };
        let body = hdr + klen + vlen;
        if n > 0 && body + 4 > RUN_AHEAD_MAX {
            break;
        }
        let Some(stored) = read_u32(rest, body) else {
            break;
        };
        parts[n] = (&rest[..body], stored);
        at += body + 4;
        n += 1;
    }
    let crcs = crate::io::crc::crc32c_x3(parts[0].0, parts[1].0, parts[2].0);
    parts[..n]
        .iter()
        .zip(crcs)
        .take_while(|((body, stored), crc)| !body.is_empty() && *stored == *crc)
        .map(|((body, _), _)| body.len() + 4)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_large_record_is_not_checked_ahead() {
        let rec = |key: &str, len: usize| {
            let mut b = Vec::new();
            let value = vec![7u8; len];
            let r = RecordRef {
                key: key.as_bytes(),
                value: &value,
                ts: 1,
                tombstone: false,
            };
            encode(&mut b, &r);
            b
        };
        let (small, big) = (rec("a", 100), rec("b", 10_000));
        // Small then large: the run stops before the large one.
        assert_eq!(checked_run(&[small.clone(), big.clone()].concat()), small.len());
        // Large first: it is checked (it is the one asked for), and a small one after it
        // joins the run.
        assert_eq!(
            checked_run(&[big.clone(), small.clone(), big.clone()].concat()),
            big.len() + small.len()
        );
        // Up to RUN_AHEAD_MAX bytes a record still joins.
        let edge = (0..RUN_AHEAD_MAX)
            .map(|l| rec("c", l))
            .rfind(|r| r.len() <= RUN_AHEAD_MAX)
            .unwrap();
        let over = rec("d", RUN_AHEAD_MAX);
        assert_eq!(checked_run(&[small.clone(), edge.clone()].concat()), small.len() + edge.len());
        assert_eq!(checked_run(&[small.clone(), over].concat()), small.len());
    }

    proptest! {
        #[test]
        fn round_trip(key in proptest::collection::vec(any::<u8>(), 1..300),
                      value in proptest::collection::vec(any::<u8>(), 0..300),
                      ts: u64, tomb: bool) {
            let value = if tomb { vec![] } else { value };
            let r = RecordRef { key: &key, value: &value, ts, tombstone: tomb };
            let mut b = Vec::new();
            encode(&mut b, &r);
            prop_assert_eq!(b.len(), encoded_len(key.len(), value.len()));
            prop_assert_eq!(total_len(&b).unwrap(), b.len());
            prop_assert_eq!(decode(&b).unwrap(), (r, b.len()));
            for cut in 0..b.len() {
                prop_assert!(decode(&b[..cut]).is_err());
            }
        }

        #[test]
        fn a_checked_run_ends_at_the_first_damaged_record(
            lens in proptest::collection::vec(0usize..200, 1..6),
            flip in proptest::option::of((0usize..6, 0usize..8 * 220)),
        ) {
            let mut b = Vec::new();
            let mut ends = Vec::new();
            for (i, &l) in lens.iter().enumerate() {
                let key = format!("key-{i}");
                let value = vec![i as u8; l];
                encode(&mut b, &RecordRef { key: key.as_bytes(), value: &value, ts: i as u64, tombstone: false });
                ends.push(b.len());
            }
            // A bit flipped in record `r` (if any): the run stops before it.
            let mut bad = usize::MAX;
            if let Some((r, bit)) = flip {
                let r = r % lens.len();
                let start = if r == 0 { 0 } else { ends[r - 1] };
                let bit = bit % ((ends[r] - start) * 8);
                b[start + bit / 8] ^= 1 << (bit % 8);
                bad = r;
            }
            let whole = lens.len().min(3).min(bad);
            let want = if whole == 0 { 0 } else { ends[whole - 1] };
            let got = checked_run(&b);
            // A flip in a length field may make the damaged record decode shorter or
            // longer; its checksum still fails, and nothing before it is affected.
            prop_assert_eq!(got, want, "lens {:?} flip {:?}", lens, flip);
        }

        #[test]
        fn any_single_bit_flip_is_detected(bit in 0usize..8*40) {
            let r = RecordRef { key: b"key-0001", value: b"value-of-key-0001", ts: 99, tombstone: false };
            let mut b = Vec::new();
            encode(&mut b, &r);
            let bit = bit % (b.len() * 8);
            b[bit / 8] ^= 1 << (bit % 8);
            match decode(&b) {
                Err(_) => {}
                Ok((got, _)) => prop_assert!(false, "flip of bit {} undetected: {:?}", bit, got),
            }
        }
    }
}
