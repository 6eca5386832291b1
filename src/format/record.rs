//! Data records: the cells of a data file, each self-describing and self-checked.
//!
//! ```text
//! flags    u8        bit 0: tombstone; bit 1: expires; other bits must be zero
//! ts       u64 LE    write timestamp, microseconds
//! expires  u64 LE    only with bit 1: the expiry (see below)
//! key_len  varint    1 ..= MAX_KEY_LEN
//! val_len  varint    0 ..= MAX_VALUE_LEN (0 for tombstones)
//! key, value
//! crc      u32 LE    crc32c of everything above
//! ```
//!
//! Bit 1 (TTL, issue 20): on a live cell, `expires` is the moment (the store's expiry
//! clock, microseconds since the Unix epoch) at and after which the cell reads as a
//! tombstone at its `ts`; on a tombstone, it is the local deletion time of a tombstone
//! compaction made from an expired cell (purged once it is `gc_grace` old, as
//! Cassandra purges an expired cell). `expires` is never 0. A record without bit 1 is
//! byte for byte what builds before TTL wrote; those builds refuse a record with bit 1
//! as "unknown record flags 0x2" (`Error::Corrupt`), never misread it.

use super::{checksum, read_u32, read_u64, varint, Malformed, MAX_KEY_LEN, MAX_VALUE_LEN};

/// Flag bit: the record is a tombstone.
pub const TOMBSTONE: u8 = 1;
/// Flag bit: an expiry follows the timestamp.
pub const EXPIRES: u8 = 2;
/// The longest a record header (flags, ts, expiry, both varints) can be.
pub const MAX_HEADER_LEN: usize = 1 + 8 + 8 + 10 + 10;

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
    /// 0, or (flag bit 1) the expiry of a live cell, the local deletion time of a
    /// tombstone made from an expired cell: the store's expiry clock, microseconds.
    pub expires: u64,
}

/// Bytes the encoding of a record without an expiry takes (8 more with one).
pub fn encoded_len(key_len: usize, val_len: usize) -> usize {
    1 + 8 + varint::len(key_len as u64) + varint::len(val_len as u64) + key_len + val_len + 4
}

/// The flags byte of a cell.
#[inline]
pub fn flags_of(tombstone: bool, expires: u64) -> u8 {
    (tombstone as u8) | if expires != 0 { EXPIRES } else { 0 }
}

/// Append the encoding of `r` to `out`.
pub fn encode(out: &mut Vec<u8>, r: &RecordRef<'_>) {
    let start = out.len();
    out.push(flags_of(r.tombstone, r.expires));
    out.extend_from_slice(&r.ts.to_le_bytes());
    if r.expires != 0 {
        out.extend_from_slice(&r.expires.to_le_bytes());
    }
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

/// The key and total encoded length of the record at the start of `b`, from its header
/// alone (the checksum is not checked): `Ok(None)` where `b` ends before the key does
/// (read more), an error where the header is malformed.
#[inline]
pub fn peek_key(b: &[u8]) -> Result<Option<(&[u8], usize)>, Malformed> {
    match header(b) {
        Ok((klen, vlen, hdr)) => Ok(b
            .get(hdr..hdr + klen)
            .map(|k| (k, hdr + klen + vlen + 4))),
        Err(Bad::Truncated | Bad::KeyLenVarint | Bad::ValueLenVarint(_))
            if b.len() < MAX_HEADER_LEN =>
        {
            Ok(None)
        }
        Err(e) => Err(e.malformed()),
    }
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
    ZeroExpiry,
}

impl Bad {
    #[cold]
    #[inline(never)]
    fn malformed(self) -> Malformed {
        const P: u64 = 9; // the key length's offset: after flags and timestamp (+ 8)
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
            Bad::ZeroExpiry => Malformed::new(9, "expiry flag with an expiry of 0"),
        }
    }
}

/// (key length, value length, header length) of the record at the start of `b`.
#[inline(always)]
fn header(b: &[u8]) -> Result<(usize, usize, usize), Bad> {
    let flags = *b.first().ok_or(Bad::Truncated)?;
    if flags & !(TOMBSTONE | EXPIRES) != 0 {
        return Err(Bad::Flags(flags));
    }
    // 8 more header bytes with an expiry, without a branch.
    let p = 9 + ((flags & EXPIRES) as usize) * 4;
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
    let expires = if b[0] & EXPIRES != 0 {
        match read_u64(b, 9) {
            Some(0) | None => return Err(Bad::ZeroExpiry),
            Some(e) => e,
        }
    } else {
        0
    };
    Ok((
        RecordRef {
            key: &head[hdr..hdr + klen],
            value: &head[hdr + klen..],
            ts: read_u64(b, 1).unwrap_or(0),
            tombstone,
            expires,
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
                expires: 0,
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

    #[test]
    fn a_cell_without_expiry_is_encoded_as_before_ttl() {
        let r = RecordRef { key: b"k", value: b"v", ts: 0x0102, tombstone: false, expires: 0 };
        let mut b = Vec::new();
        encode(&mut b, &r);
        // flags 0, ts, key_len 1, val_len 1, key, value, crc: the layout before TTL.
        assert_eq!(&b[..13], &[0, 2, 1, 0, 0, 0, 0, 0, 0, 1, 1, b'k', b'v']);
        let e = RecordRef { expires: 9, ..r };
        let mut b = Vec::new();
        encode(&mut b, &e);
        assert_eq!(b[0], EXPIRES);
        assert_eq!(&b[9..17], &9u64.to_le_bytes());
        assert_eq!(decode(&b).unwrap().0, e);
    }

    #[test]
    fn an_expiry_flag_with_expiry_zero_is_refused() {
        let mut b = Vec::new();
        encode(&mut b, &RecordRef { key: b"k", value: b"v", ts: 1, tombstone: false, expires: 0 });
        // Set the flag and insert a zero expiry, with a good checksum.
        let mut body = vec![EXPIRES];
        body.extend_from_slice(&b[1..9]);
        body.extend_from_slice(&0u64.to_le_bytes());
        body.extend_from_slice(&b[9..b.len() - 4]);
        let crc = checksum(&body);
        body.extend_from_slice(&crc.to_le_bytes());
        assert!(decode(&body).unwrap_err().reason.contains("expiry"));
    }

    proptest! {
        #[test]
        fn round_trip(key in proptest::collection::vec(any::<u8>(), 1..300),
                      value in proptest::collection::vec(any::<u8>(), 0..300),
                      ts: u64, tomb: bool, expires in proptest::option::of(1u64..)) {
            let value = if tomb { vec![] } else { value };
            let expires = expires.unwrap_or(0);
            let r = RecordRef { key: &key, value: &value, ts, tombstone: tomb, expires };
            let mut b = Vec::new();
            encode(&mut b, &r);
            let extra = if expires != 0 { 8 } else { 0 };
            prop_assert_eq!(b.len(), encoded_len(key.len(), value.len()) + extra);
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
                encode(&mut b, &RecordRef { key: key.as_bytes(), value: &value, ts: i as u64, tombstone: false, expires: if i % 2 == 1 { 7 } else { 0 } });
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
            let r = RecordRef { key: b"key-0001", value: b"value-of-key-0001", ts: 99, tombstone: false, expires: 12345 };
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
