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
    let (klen, vlen, hdr) = header(b)?;
    Ok(hdr + klen + vlen + 4)
}

fn header(b: &[u8]) -> Result<(usize, usize, usize), Malformed> {
    let flags = *b
        .first()
        .ok_or_else(|| Malformed::new(0, "truncated record"))?;
    if flags & !TOMBSTONE != 0 {
        return Err(Malformed::new(
            0,
            format!("unknown record flags {flags:#x}"),
        ));
    }
    let p = 9;
    let (klen, n1) = b
        .get(p..)
        .and_then(varint::get)
        .ok_or_else(|| Malformed::new(p as u64, "truncated or bad key length"))?;
    let (vlen, n2) = b
        .get(p + n1..)
        .and_then(varint::get)
        .ok_or_else(|| Malformed::new((p + n1) as u64, "truncated or bad value length"))?;
    if klen == 0 || klen > MAX_KEY_LEN as u64 {
        return Err(Malformed::new(
            p as u64,
            format!("key length {klen} out of range"),
        ));
    }
    if vlen > MAX_VALUE_LEN as u64 {
        return Err(Malformed::new(
            (p + n1) as u64,
            format!("value length {vlen} out of range"),
        ));
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
    let (klen, vlen, hdr) = header(b)?;
    let body = hdr + klen + vlen;
    let total = body + 4;
    if b.len() < total {
        return Err(Malformed::new(
            0,
            format!("record of {total} bytes truncated to {}", b.len()),
        ));
    }
    if check_crc && read_u32(b, body).unwrap_or(0) != checksum(&b[..body]) {
        return Err(Malformed::new(0, "record checksum mismatch"));
    }
    let tombstone = b[0] & TOMBSTONE != 0;
    if tombstone && vlen != 0 {
        return Err(Malformed::new(0, "tombstone carries a value"));
    }
    Ok((
        RecordRef {
            key: &b[hdr..hdr + klen],
            value: &b[hdr + klen..body],
            ts: read_u64(b, 1).unwrap_or(0),
            tombstone,
        },
        total,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

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
