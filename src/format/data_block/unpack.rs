//! Reading a stored data block back: its checksum checked, its compression undone
//! (the inverse of [`super::pack`]).

use super::{checksum, read_u32, zstd_block, Compression, Malformed, MAX_RAW_LEN};

/// Check a stored block's checksum and return its payload: `stored` itself less its
/// trailer, or (compressed) the payload decompressed into `buf`. Offsets in errors are
/// relative to `stored`.
pub fn unpack<'a>(stored: &'a [u8], buf: &'a mut Vec<u8>) -> Result<&'a [u8], Malformed> {
    unpack_with(stored, buf, true)
}

/// [`unpack`], the checksum checked only if `check` (a point read that
/// `crc_check_chance` lets skip it; the payload's decoders stay total either way).
#[inline]
pub fn unpack_with<'a>(
    stored: &'a [u8],
    buf: &'a mut Vec<u8>,
    check: bool,
) -> Result<&'a [u8], Malformed> {
    let len = stored.len();
    if len < 5 {
        return Err(Malformed::new(0, format!("data block of {len} bytes")));
    }
    let crc = read_u32(stored, len - 4).unwrap_or(0);
    if check && checksum(&stored[..len - 4]) != crc {
        return Err(Malformed::new(0, "data block checksum mismatch"));
    }
    match stored[len - 5] {
        0 => Ok(&stored[..len - 5]),
        1 => decompress(&stored[..len - 5], buf, Compression::Lz4),
        2 => decompress(&stored[..len - 5], buf, Compression::Zstd),
        c => Err(Malformed::new(
            len as u64 - 5,
            format!("unknown data block compression {c}"),
        )),
    }
}

fn decompress<'a>(
    b: &[u8],
    buf: &'a mut Vec<u8>,
    how: Compression,
) -> Result<&'a [u8], Malformed> {
    let Some(at) = b.len().checked_sub(4) else {
        return Err(Malformed::new(0, "compressed data block without its length"));
    };
    let raw = read_u32(b, at).unwrap_or(0) as usize;
    // LZ4 expands at most 255-fold, zstd about 32,000-fold: a larger claim is damage,
    // not worth allocating.
    let most = match how {
        Compression::Zstd => at.saturating_mul(1 << 15),
        _ => at.saturating_mul(255),
    };
    if raw > MAX_RAW_LEN || raw > most.saturating_add(16) {
        return Err(Malformed::new(at as u64, format!("block of {raw} bytes")));
    }
    buf.clear();
    buf.resize(raw, 0);
    let got = match how {
        Compression::Zstd => zstd_block::decompress(&b[..at], buf),
        _ => lz4_flex::block::decompress_into(&b[..at], buf).map_err(|e| e.to_string()),
    };
    match got {
        Ok(got) if got == raw => Ok(&buf[..]),
        Ok(got) => Err(Malformed::new(
            0,
            format!("block decompressed to {got} bytes, says {raw}"),
        )),
        Err(e) => Err(Malformed::new(
            0,
            format!("{how:?} block does not decompress to its {raw} bytes: {e}"),
        )),
    }
}
